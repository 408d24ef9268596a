"""`hyperpod_kit.progress`: a live display on a terminal, plain timed lines otherwise, nothing
with quiet, and never a byte on stdout."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from hyperpod_kit import progress as module
from hyperpod_kit.cli import main as cli
from hyperpod_kit.progress import Progress, is_terminal


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """perf_counter reads these, in order."""
    ticks = [100.0, 112.34]
    monkeypatch.setattr(module.time, "perf_counter", lambda: ticks.pop(0))
    return ticks


@pytest.fixture
def tty() -> Iterator[TextIO]:
    """The writing end of a real pseudo-terminal (its output is drained by `read_tty`)."""
    master, slave = os.openpty()
    stream = open(slave, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    stream.master = master  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        stream.close()
        os.close(master)


def read_tty(stream: TextIO) -> str:
    stream.flush()
    master: int = stream.master  # type: ignore[attr-defined]
    chunks = []
    os.set_blocking(master, False)
    while True:
        try:
            chunk = os.read(master, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


TERMINAL = {"TERM": "xterm-256color"}


def test_plain_lines_name_the_command_the_stage_and_its_time(clock: list[float]) -> None:
    out = io.StringIO()
    with Progress("synth", stream=out, environ=TERMINAL).stage("cfn-lint"):
        pass
    assert out.getvalue() == "hyperpod-kit: synth: cfn-lint ... 12.3 s\n"
    assert clock == []


def test_a_stage_that_raises_says_so_and_the_error_goes_on(clock: list[float]) -> None:
    out = io.StringIO()
    with pytest.raises(KeyError), Progress("synth", stream=out, environ={}).stage("cfn-lint"):
        raise KeyError("x")
    assert out.getvalue() == "hyperpod-kit: synth: cfn-lint ... stopped after 12.3 s\n"


def test_quiet_prints_nothing_and_lets_errors_through(tty: TextIO) -> None:
    for stream in (io.StringIO(), tty):
        quiet = Progress("synth", quiet=True, stream=stream, environ=TERMINAL)
        assert not quiet.live
        with quiet.stage("cfn-lint"):
            pass
        quiet.line("handing over")
        with pytest.raises(ValueError), quiet.stage("rehearsal"):
            raise ValueError
    assert read_tty(tty) == ""


@pytest.mark.parametrize(
    ("environ", "live"),
    [
        (TERMINAL, True),
        ({}, True),
        ({"TERM": "dumb"}, False),
        ({"CI": "true", **TERMINAL}, False),
        ({"CI": "false", **TERMINAL}, True),
        ({"NO_COLOR": "1", **TERMINAL}, True),  # a terminal without colours
    ],
    ids=["terminal", "no-TERM", "dumb", "CI", "CI-false", "NO_COLOR"],
)
def test_live_only_on_a_terminal_that_is_not_dumb_and_not_ci(
    tty: TextIO, environ: dict[str, str], live: bool
) -> None:
    assert is_terminal(tty, environ) is live
    assert is_terminal(io.StringIO(), environ) is False  # a pipe or a file: never


def test_on_a_terminal_a_spinner_then_a_finished_line(tty: TextIO) -> None:
    progress = Progress("synth", stream=tty, environ=TERMINAL)
    assert progress.live
    with progress.stage("cfn-lint"):
        pass
    with pytest.raises(RuntimeError), progress.stage("rehearsal"):
        raise RuntimeError
    shown = read_tty(tty)
    assert re.search(r"✓\S* synth: cfn-lint \S*\d+\.\d s", shown), shown
    assert re.search(r"✗\S* synth: rehearsal \S*\d+\.\d s", shown), shown
    assert "\x1b[3" in shown, "coloured"
    assert "hyperpod-kit: synth:" not in shown, "no plain lines on a terminal"


def test_no_color_on_a_terminal(tty: TextIO) -> None:
    with Progress("synth", stream=tty, environ={"NO_COLOR": "1", **TERMINAL}).stage("cfn-lint"):
        pass
    shown = read_tty(tty)
    assert "synth: cfn-lint" in shown
    assert not re.search(r"\x1b\[[0-9;]*m", shown.replace("\x1b[0m", "")), repr(shown)


@pytest.mark.parametrize("on_terminal", [True, False], ids=["live", "plain"])
def test_stdout_stays_the_commands(
    on_terminal: bool, tty: TextIO, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a stage prints to stdout (a JSON document) arrives there untouched; progress never
    writes to stdout."""
    stream = tty if on_terminal else io.StringIO()
    progress = Progress("plan", stream=stream, environ=TERMINAL)
    assert progress.live is on_terminal
    with progress.stage("compare with the baseline"):
        print(json.dumps({"changes": []}))
    assert json.loads(capsys.readouterr().out) == {"changes": []}


def test_the_default_stream_is_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress("check", environ={})
    with progress.stage("gates"):
        pass
    progress.line("done")
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert re.fullmatch(r"hyperpod-kit: check: gates \.\.\. \d+\.\d s", lines[0])
    assert lines[1] == "hyperpod-kit: check: done"


def _assembly(folder: Path) -> Path:
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"version": "1", "artifacts": {}}))
    return folder


def test_check_shows_its_stage_and_quiet_hides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line: `check` prints its stage line on stderr; `check -q` does not."""
    assembly = _assembly(tmp_path / "cdk.out")
    assert cli.main(["check", str(assembly)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert re.search(r"^hyperpod-kit: check: gates \.\.\. \d+\.\d s$", err, re.M), err
    assert cli.main(["check", "-q", str(assembly)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "hyperpod-kit: check:" not in err
