"""Every bad environment file fails the real CLI alike: exit 2, one located message, no traceback.

The corpus lives in tests/data/bad/. Each file holds exactly one mistake and says on its first line
what the first error must name:

    # expect: <config path> | <substring of the message or hint> [| line=N]

The CLI runs as a subprocess from an empty temporary folder, so a test also proves that a bad file
writes nothing: not a cloud assembly, not a staging folder, nothing in the working directory.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "data" / "bad"
EXIT_BAD_INPUT = 2

_EXPECT = re.compile(
    r"^# expect: (?P<path>[^|]+?) \| (?P<text>[^|]+?)(?: \| line=(?P<line>\d+))?\s*$"
)


@dataclass(frozen=True)
class Expectation:
    path: str
    text: str
    line: int | None


def _expectation(file: Path) -> Expectation:
    first = file.read_text(encoding="utf-8").splitlines()[0]
    m = _EXPECT.match(first)
    assert m, f"{file.name}: first line must be '# expect: <path> | <text> [| line=N]'"
    line = int(m["line"]) if m["line"] else None
    return Expectation(m["path"].strip(), m["text"].strip(), line)


def _case(file: Path) -> object:
    return pytest.param(file, id=file.name)


FILES = sorted(BAD.glob("*.yaml"))

# `synth` takes the same path as `validate` up to the load; one file per stage of loading (YAML,
# document shape, schema, each validator area) is enough to prove that it stops there too, and
# keeps this module quick. Run every file through synth with HYPERPOD_KIT_TEST_SYNTH_ALL=1.
SYNTH_SAMPLE = {
    "empty.yaml",
    "yaml-tab.yaml",
    "top-level-list.yaml",
    "duplicate-key.yaml",
    "string-for-int.yaml",
    "unknown-nested-key.yaml",
    "missing-region.yaml",
    "az-of-another-region.yaml",
    "overlapping-subnets.yaml",
    "lustre-capacity.yaml",
    "dra-nine-associations.yaml",
    "slurm-without-controller.yaml",
    "elastic-min-above-max.yaml",
    "studio-app-twice.yaml",  # was a jsii traceback in synth (a construct id clash)
    "abstract-alone.yaml",  # a base on its own: refused before anything is synthesized
    "extends-missing-base.yaml",
}
SYNTH_ALL = os.environ.get("HYPERPOD_KIT_TEST_SYNTH_ALL") == "1"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, timeout=120)


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """An empty working directory; the CLI must leave it empty when the file is bad."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    return folder


def _assert_rejected(
    result: subprocess.CompletedProcess[str], file: Path | str, expect: Expectation
) -> None:
    """Exit 2, no traceback, and a first stderr line `FILE:LINE path: ...` naming the mistake."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == EXIT_BAD_INPUT, output
    assert result.stdout == "", "text-mode findings go to stderr"
    first = result.stderr.splitlines()[0] if result.stderr else ""
    file = str(file)
    if expect.path == "(file)":
        assert first.startswith(f"{file} (file): "), first
    else:
        assert first.startswith(f"{file}:"), first
        m = re.match(r"(\d+) (\S+): ", first[len(file) + 1 :])
        assert m, f"no 'LINE path: ' after the file name in {first!r}"
        line, path = int(m[1]), m[2]
        assert line > 0, first
        assert path == expect.path, first
        if expect.line is not None:
            assert line == expect.line, first
    assert expect.text in first, f"{expect.text!r} not in {first!r}"


def test_corpus_is_big_enough_and_well_formed() -> None:
    """The corpus keeps its breadth, and every file states what it expects."""
    assert len(FILES) >= 24
    assert {f.name for f in FILES} >= SYNTH_SAMPLE
    for file in FILES:
        _expectation(file)


@pytest.mark.parametrize("file", [_case(f) for f in FILES])
def test_validate_rejects(file: Path, cwd: Path) -> None:
    """`validate` names the mistake at its path and line, exits 2, and writes nothing."""
    expect = _expectation(file)
    result = _cli("validate", str(file), cwd=cwd)
    _assert_rejected(result, file, expect)
    assert _tree(cwd) == set()


@pytest.mark.parametrize("file", [_case(f) for f in FILES if SYNTH_ALL or f.name in SYNTH_SAMPLE])
def test_synth_rejects_before_any_cdk_work(file: Path, cwd: Path) -> None:
    """`synth` of a bad file fails like `validate` and leaves no cloud assembly behind."""
    expect = _expectation(file)
    out = cwd / "cdk.out"
    result = _cli("synth", str(file), "-o", str(out), cwd=cwd)
    _assert_rejected(result, file, expect)
    assert not out.exists()
    assert _tree(cwd) == set(), "a rejected synth must not leave staging folders behind"


def test_relative_path_is_reported_as_given(cwd: Path) -> None:
    """The message starts with the path the user typed, not a resolved one."""
    (cwd / "env.yaml").write_text((BAD / "lustre-capacity.yaml").read_text())
    expect = _expectation(BAD / "lustre-capacity.yaml")
    result = _cli("validate", "env.yaml", cwd=cwd)
    _assert_rejected(result, "env.yaml", expect)


def test_crlf_and_bom_keep_the_same_line(cwd: Path) -> None:
    """A file saved on Windows (BOM, CRLF) reports the same path and line."""
    source = BAD / "lustre-capacity.yaml"
    file = cwd / "windows.yaml"
    text = source.read_text(encoding="utf-8").replace("\n", "\r\n")
    file.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    result = _cli("validate", str(file), cwd=cwd)
    _assert_rejected(result, file, _expectation(source))


def test_missing_file(cwd: Path) -> None:
    """A path that does not exist is bad input, not a crash."""
    file = cwd / "nowhere" / "prod.yaml"
    for command in ("validate", "synth"):
        result = _cli(command, str(file), cwd=cwd)
        _assert_rejected(result, file, Expectation("(file)", "no such file", None))
    assert _tree(cwd) == set()


def test_directory_given_as_file(cwd: Path) -> None:
    """A folder where a file belongs is bad input, not a crash."""
    folder = cwd / "environments"
    folder.mkdir()
    result = _cli("validate", str(folder), cwd=cwd)
    _assert_rejected(result, folder, Expectation("(file)", "is a folder, not a file", None))
    result = _cli("synth", str(folder), "-o", str(cwd / "cdk.out"), cwd=cwd)
    _assert_rejected(result, folder, Expectation("(file)", "is a folder, not a file", None))
    assert _tree(cwd) == {"environments"}


@pytest.mark.parametrize("command", ["validate", "synth"])
def test_named_pipe_given_as_file(cwd: Path, command: str) -> None:
    """A named pipe (no writer: a read would wait forever) is refused at once, in one line,
    without being opened for reading."""
    pipe = cwd / "env.yaml"
    os.mkfifo(pipe)
    args = [command, str(pipe)] + (["-o", str(cwd / "cdk.out")] if command == "synth" else [])
    result = run_cli(*args, cwd=cwd, timeout=60)
    _assert_rejected(
        result, pipe, Expectation("(file)", "is a named pipe (FIFO), not a file", None)
    )
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert _tree(cwd) == {"env.yaml"}


def test_non_utf8_file(cwd: Path) -> None:
    """Latin-1 bytes are reported as 'not UTF-8', not as a UnicodeDecodeError traceback."""
    file = cwd / "latin1.yaml"
    file.write_bytes(b"name: caf\xe9-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\n")
    for command in ("validate", "synth"):
        result = _cli(command, str(file), cwd=cwd)
        _assert_rejected(result, file, Expectation("(file)", "is not UTF-8 text", None))
    assert _tree(cwd) == {"latin1.yaml"}


def test_control_character(cwd: Path) -> None:
    """A control character pasted from a terminal is a YAML error on its own line."""
    file = cwd / "escape.yaml"
    file.write_bytes(
        b"name: hyperpod-dev\nregion: us-west-2\x1b[0m\navailability_zone_id: usw2-az2\n"
    )
    result = _cli("validate", str(file), cwd=cwd)
    _assert_rejected(result, file, Expectation("(yaml)", "not valid YAML", 2))
    assert len(result.stderr.splitlines()) == 1, result.stderr
