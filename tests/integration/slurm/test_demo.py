"""`make demo`, shortened: its real command line on a local Slurm of its own, a few steps. The
timeline is in order and names who acted, the trainer resumed right after its last checkpoint
with losses bitwise equal to the uninterrupted run's, the plot is a PNG, and a folder the demo
did not write is refused. Not timed: the timings are only reported.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.local import unavailable_reason
from hyperpod_kit.local.demo import FAULT, HYPERPOD, PNG, RUNNER, SLURM, TIMELINE, TRAINER, YOU
from hyperpod_kit.outputs import DEMO, MARKER, FolderOutput, read_marker, write_marker
from tests.conftest import REPO
from tests.integration.slurm.conftest import _unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.trainer, pytest.mark.slow]

STEPS = 16  # checkpoints every 4 steps, the fault after step 10
ORDER = [
    ("slurm-up", SLURM),
    ("reference-submitted", YOU),
    ("reference-completed", SLURM),
    ("submitted", YOU),
    ("check-ok", RUNNER),
    ("fault", FAULT),
    ("verdict", RUNNER),
    ("node-failed", RUNNER),
    ("node-replaced", HYPERPOD),
    ("requeued", SLURM),
    ("node-back", HYPERPOD),
    ("job-released", HYPERPOD),
    ("check-ok", RUNNER),
    ("resumed", TRAINER),
    ("completed", SLURM),
]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.local.demo", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _png_chunks(data: bytes) -> list[bytes]:
    """The chunk types of a PNG, each CRC checked: a valid file, not just its signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, kinds = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        kinds.append(kind)
        at += 12 + length
    return kinds


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(reason)
    out = tmp_path_factory.mktemp("demo") / "out"
    done = _demo("--out", str(out), "--steps", str(STEPS))
    assert done.returncode == 0, done.stdout + done.stderr
    return out, json.loads((out / TIMELINE).read_text()), done.stdout


def test_the_timeline_is_in_order_and_names_who_acted(
    demo: tuple[Path, dict[str, Any], str],
) -> None:
    _, timeline, stdout = demo
    found = timeline["events"]
    assert [(e["event"], e["actor"]) for e in found] == ORDER
    times = [e["at"] for e in found]
    assert times == sorted(times)
    assert HYPERPOD == "HyperPod (played by the demo)"
    # What the runner asked for, as Slurm showed it.
    (failed,) = [e for e in found if e["event"] == "node-failed"]
    assert failed["details"]["command"][-2:] == ["state=fail", "reason=Action:Replace"]
    (reason,) = failed["details"]["sinfo_r"]
    assert reason.split("|")[0] == "Action:Replace"
    assert "FAIL" in failed["details"]["state"]
    (verdict,) = [e for e in found if e["event"] == "verdict"]
    assert "did not answer a stat and a 4 KiB write within 5 s" in verdict["details"]["reason"]
    # The printed timeline is the same one.
    for e in found:
        assert e["what"] in stdout


def test_the_job_resumes_after_its_last_checkpoint_and_loses_nothing_but_time(
    demo: tuple[Path, dict[str, Any], str],
) -> None:
    out, timeline, _ = demo
    result = timeline["result"]
    (fault,) = [e for e in timeline["events"] if e["event"] == "fault"]
    (resumed,) = [e for e in timeline["events"] if e["event"] == "resumed"]
    checkpoint = result["checkpoint_at_fault"]
    assert resumed["details"]["checkpoint"] == checkpoint
    assert result["resumed_step"] == checkpoint + 1 == resumed["details"]["step"]
    assert checkpoint % result["checkpoint_every"] == 0 and checkpoint > 0
    assert result["fault_step"] == fault["details"]["step"] > checkpoint
    assert result["steps_lost"] == result["fault_step"] - checkpoint
    assert result["restarts"] == 1

    # JSON keeps floats exact (repr round-trips), so == is bitwise.
    reference = {int(s): v for s, v in result["reference"].items()}
    before = {int(s): v for s, v in result["before_fault"].items()}
    after = {int(s): v for s, v in result["after_resume"].items()}
    assert sorted(reference) == list(range(1, STEPS + 1))
    assert sorted(after) == list(range(checkpoint + 1, STEPS + 1))
    assert after == {s: reference[s] for s in after}
    assert before == {s: reference[s] for s in before}
    assert result["bitwise_equal"] is True
    # The jobs' own output says the same, independently of the demo's bookkeeping.
    faulted = (out / "faulted.out").read_text()
    assert f'"event": "resume", "step": {checkpoint},' in faulted
    print(f"\ndemo timings (s): {result['seconds']}")


def test_the_outputs_are_a_png_and_a_marked_folder(
    demo: tuple[Path, dict[str, Any], str],
) -> None:
    out, _, _ = demo
    kinds = _png_chunks((out / PNG).read_bytes())
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    marker = read_marker(out)
    assert marker is not None and marker["kind"] == DEMO
    assert {"health.jsonl", "reference.out", "faulted.out", "environment.yaml"} <= {
        p.name for p in out.iterdir()
    }
    decisions = [
        json.loads(line)
        for line in (out / "health.jsonl").read_text().splitlines()
        if '"decision"' in line
    ]
    assert [d["action"] for d in decisions] == ["none", "replace", "none"]


def test_a_folder_the_demo_did_not_write_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    done = _demo("--out", str(foreign), "--steps", str(STEPS))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{foreign}: is a folder with files that hyperpod-kit did not write" in lines[0]
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert not (foreign / MARKER).exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--steps", "3"], "--steps: 3 is not between 12 and 2000"),
        (["--steps", "ten"], "--steps: 'ten' is not a whole number"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = _demo(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert says in done.stderr
    assert done.stdout == ""


def test_a_previous_demo_output_may_be_replaced(tmp_path: Path) -> None:
    """Only the check, not a second run: a marked folder passes it, before any work."""
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / TIMELINE).write_text("{}")
    write_marker(previous, DEMO)
    assert FolderOutput.checked(previous, DEMO).target == previous
