"""Safety suite: no command of `hyperpod-kit` removes or overwrites what it did not write.

Every command that writes (`synth -o`, its `.rejected` folder, `jobs -o`, `schema -o`) is run as a
user would, from a shell, against folders and files that belong to the user. Each must exit 2
with one line `PATH: message. Hint: ...` and leave everything byte for byte as it was; `--force`
is the only way to overwrite a user's file. And a synth killed half-way (SIGKILL) leaves the
previous output whole and usable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperpod_kit.gates import check_assembly
from hyperpod_kit.outputs import MARKER, read_marker
from tests.conftest import NO_CREDENTIALS, REPO, ExampleSynthFn, WriteEnv, run_cli

DEFAULT = REPO / "environments" / "default.yaml"


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


def user_files(folder: Path) -> None:
    """Work of the user's that no command may touch."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "thesis.tex").write_text("years of work\n")
    (folder / "data").mkdir()
    (folder / "data" / "results.csv").write_text("a,b\n1,2\n")


def refused(result: subprocess.CompletedProcess[str], path: str) -> str:
    """Exit 2, no traceback, and the last stderr line is `PATH: message. Hint: ...`."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"{path}: ") and ". Hint: " in last, last
    return last


Commands = Callable[[Path, str], list[str]]

# Every way to write into a folder: (name, the command line for output PATH).
FOLDER_WRITERS: list[tuple[str, Commands]] = [
    ("synth", lambda cwd, out: ["synth", str(DEFAULT), "-o", out]),
    ("jobs", lambda cwd, out: ["jobs", str(DEFAULT), "-o", out]),
]
FOLDER_IDS = [name for name, _ in FOLDER_WRITERS]


@pytest.mark.parametrize("command", [c for _, c in FOLDER_WRITERS], ids=FOLDER_IDS)
def test_a_users_folder_is_never_replaced(command: Commands, tmp_path: Path) -> None:
    user_files(tmp_path / "mine")
    before = snapshot(tmp_path)
    line = refused(run_cli(*command(tmp_path, "mine"), cwd=tmp_path), "mine")
    assert "did not write" in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [c for _, c in FOLDER_WRITERS], ids=FOLDER_IDS)
def test_the_project_folder_is_never_the_output(command: Commands, tmp_path: Path) -> None:
    """`-o .` in a project (and any folder that holds the current one) is refused."""
    project = tmp_path / "project"
    user_files(project)
    (project / "environments").mkdir()
    (project / "environments" / "mine.yaml").write_text(DEFAULT.read_text())
    before = snapshot(tmp_path)
    for out in (".", "..", str(project)):
        line = refused(run_cli(*command(project, out), cwd=project), out)
        assert "is the current folder or contains it" in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [c for _, c in FOLDER_WRITERS], ids=FOLDER_IDS)
def test_a_file_or_a_missing_parent_as_output_folder(command: Commands, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    assert "is a file, not a folder" in refused(
        run_cli(*command(tmp_path, "notes.txt"), cwd=tmp_path), "notes.txt"
    )
    assert "does not exist" in refused(
        run_cli(*command(tmp_path, "no/such/out"), cwd=tmp_path), "no/such/out"
    )
    assert snapshot(tmp_path) == before


def test_another_cdk_apps_cdk_out_is_refused(tmp_path: Path) -> None:
    """A cloud assembly without our marker is some other app's: `synth` does not replace it."""
    other = tmp_path / "cdk.out"
    other.mkdir()
    (other / "manifest.json").write_text('{"version": "48.0.0", "artifacts": {}}')
    (other / "OtherStack.template.json").write_text("{}")
    before = snapshot(tmp_path)
    refused(run_cli("synth", str(DEFAULT), "-o", "cdk.out", cwd=tmp_path), "cdk.out")
    assert snapshot(tmp_path) == before


def test_a_users_rejected_folder_stops_synth_before_any_work(tmp_path: Path) -> None:
    """`DIR.rejected` is an output too: a user's folder of that name is refused up front."""
    user_files(tmp_path / "cdk.out.rejected")
    before = snapshot(tmp_path)
    refused(run_cli("synth", str(DEFAULT), "-o", "cdk.out", cwd=tmp_path), "cdk.out.rejected")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["schema", "-o", "mine.json"],
        ["schema", "--markdown", "-o", "mine.json"],
        ["jobs", str(DEFAULT), "-o", "project"],  # never `-o .`: the current folder is refused
    ],
    ids=["schema", "schema-markdown", "jobs-file"],
)
def test_a_users_file_is_overwritten_only_with_force(argv: list[str], tmp_path: Path) -> None:
    """Without --force: exit 2 and the file as it was; with --force: written."""
    project = tmp_path / "project"
    project.mkdir()
    target = project / "mine.json"
    cwd = project
    if argv[0] == "jobs":  # the job file already there, in a folder of the user's
        target, cwd = project / "pretrain.sbatch", tmp_path
    target.write_text("my own content\n")
    before = snapshot(tmp_path)
    result = run_cli(*argv, cwd=cwd)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and ". Hint: " in result.stderr
    assert snapshot(tmp_path) == before
    forced = run_cli(*argv, "--force", cwd=cwd)
    assert forced.returncode == 0, forced.stderr
    assert target.read_text() != "my own content\n"
    assert sorted(p.name for p in project.iterdir()) == [target.name], "no temporary file left"


def test_schema_into_a_missing_folder(tmp_path: Path) -> None:
    result = run_cli("schema", "-o", "/nonexistent/x.json", cwd=tmp_path)
    line = refused(result, "/nonexistent/x.json")
    assert "the folder /nonexistent does not exist" in line


# --- synth replaces only its own output, and only whole --------------------------------------


def _synth(cwd: Path, file: Path = DEFAULT) -> subprocess.CompletedProcess[str]:
    return run_cli("synth", str(file), "-o", "cdk.out", cwd=cwd)


@pytest.mark.slow
def test_synth_replaces_its_own_output_and_keeps_a_rejected_one_apart(
    tmp_path: Path, write_env: WriteEnv
) -> None:
    """An empty folder, then our own assembly, are replaced; a gate failure leaves cdk.out."""
    (tmp_path / "cdk.out").mkdir()
    first = _synth(tmp_path)
    assert first.returncode == 0, first.stderr
    assert read_marker(tmp_path / "cdk.out") is not None
    good = snapshot(tmp_path / "cdk.out")

    no_flow_logs = write_env({"network": {"vpc": {"flow_logs": False}}}, name="bad.yaml")
    rejected = _synth(tmp_path, no_flow_logs)
    assert rejected.returncode == 1
    assert snapshot(tmp_path / "cdk.out") == good
    assert read_marker(tmp_path / "cdk.out.rejected") is not None
    hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert hidden == [], "no staging folder is left behind"


@pytest.mark.slow
def test_an_interrupted_synth_leaves_the_previous_output_whole(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """SIGKILL half-way through a synth (templates written, gates running): the previous
    cdk.out is byte for byte as it was and passes the gates; the next synth cleans up. The
    previous output is the run's shared `hyperpod-kit synth` of the default, copied."""
    example_synth(DEFAULT).copy_to(tmp_path / "cdk.out")
    previous = snapshot(tmp_path / "cdk.out")

    env = NO_CREDENTIALS | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyperpod_kit.cli.main", "synth", str(DEFAULT), "-o", "cdk.out"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the jsii Node process dies with it
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob(".cdk.out.new.*/*.template.json")):
            assert proc.poll() is None, "the synth ended before it could be interrupted"
            assert time.monotonic() < deadline, "no template was ever written"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (leftover,) = tmp_path.glob(".cdk.out.new.*")  # the killed run's staging folder, ours
    assert (leftover / MARKER).is_file()

    assert snapshot(tmp_path / "cdk.out") == previous
    assert check_assembly(tmp_path / "cdk.out").ok

    again = _synth(tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdk.out"], "the leftover is cleaned"
    assert snapshot(tmp_path / "cdk.out") == previous, "and the same commit synthesizes the same"
