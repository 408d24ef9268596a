"""examples/studio-fine-tune.ipynb: every command it runs is one the tools accept.

The notebook needs a deployed cluster to run; here each `!` line is parsed by the very parser of
its command (`hyperpod-kit`'s, the trainer's subcommands'), with the notebook's variables as
placeholders, and every Python cell compiles, so a renamed option or subcommand fails here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from hyperpod_kit.cli.main import _parser
from hyperpod_trainer.cli import parsers

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "studio-fine-tune.ipynb"


def _cells() -> list[dict[str, object]]:
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    return list(notebook["cells"])


def _shell_lines() -> list[list[str]]:
    lines = []
    for cell in _cells():
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():  # type: ignore[arg-type]
            if line.startswith("!"):
                # {expression} is IPython's: any one word stands for its value here
                lines.append(shlex.split(re.sub(r"\{[^}]+\}", "/fsx/x", line[1:])))
    return lines


def test_every_python_cell_compiles() -> None:
    for index, cell in enumerate(_cells()):
        if cell["cell_type"] != "code":
            continue
        text = "\n".join(
            "pass" if line.startswith("!") else line
            for line in "".join(cell["source"]).splitlines()  # type: ignore[arg-type]
        )
        compile(text, f"{NOTEBOOK.name} cell {index}", "exec")


def test_the_notebook_submits_follows_and_exports() -> None:
    words = [" ".join(line[:3]) for line in _shell_lines()]
    for wanted in ("hyperpod-kit job submit", "hyperpod-kit job logs",
                   "python -m hyperpod_trainer"):  # fmt: skip
        assert any(w.startswith(wanted) for w in words), wanted
    assert any(line[3:4] == ["export-hf"] for line in _shell_lines())


@pytest.mark.parametrize("line", _shell_lines(), ids=lambda line: " ".join(line[:4]))
def test_each_command_is_accepted_by_its_parser(line: list[str]) -> None:
    if line[0] == "hyperpod-kit":
        parser = _parser()
        if line[1:] == ["--version"]:
            return  # prints and exits: nothing to parse beyond the flag
        parser.parse_args(line[1:])  # exits with 2 (SystemExit) on an unknown option
    else:
        assert line[:3] == ["python", "-m", "hyperpod_trainer"], line
        parsers()[line[3]].parse_args(line[4:])
