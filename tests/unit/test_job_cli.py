"""`hyperpod-kit job`'s own logic, without a cluster: options validated as the file is and
refused naming the option, no Slurm client or no controller as one line with nothing written,
a Studio space's paths turned into the nodes' paths, and what submit says before it asks."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from hyperpod_kit.cli.job import StudioView, node_path, plan_lines, studio_view
from hyperpod_kit.cli.main import main
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.operations.job_model import Capacity
from tests.conftest import REPO

SLURM = str(REPO / "environments" / "studio-slurm.yaml")
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1"


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--nodes", "0"], "--nodes: Input should be greater than or equal to 1"),
        (["--task", "bogus"], "--task: Input should be 'pretrain' or 'sft'"),
        (["--preset", "nope"], "--preset (trainer.job.preset): the trainer rejects it: unknown"),
        (["--preset", "qwen2.5-14b"], "--preset (trainer.job.preset): qwen2.5-14b needs about"),
        (["--name", "Bad_Name"], "--name: String should match pattern"),
    ],
)
def test_an_option_trainer_job_refuses_is_one_line_and_nothing_is_written(
    option: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["job", "render", SLURM, "-q", "--image", IMAGE, "-o", str(out), *option]) == 2
    assert _one_line(capsys.readouterr().err).startswith(said)
    assert not out.exists()


def test_good_options_change_the_rendered_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = [
        "job", "render", SLURM, "-q", "--image", IMAGE, "-o", str(out), "--name", "chat",
        "--task", "sft", "--preset", "small", "--steps", "50", "--data", "/fsx/data/sft1",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    text = (out / "chat.sbatch").read_text()
    for setting in ("train.task=sft", "model.preset=small", "train.steps=50",
                    "data.path=/fsx/data/sft1"):  # fmt: skip
        assert f"--set {setting}" in text
    assert main(["jobs", SLURM, "-q", "--image", IMAGE, "-o", str(tmp_path / "plain")]) == 0
    assert "train.task" not in (tmp_path / "plain" / "pretrain.sbatch").read_text()  # as before


def _path_with(tmp_path: Path, scripts: dict[str, str]) -> str:
    """A PATH of `scripts` and the job linter's tools (bash, shellcheck), no Slurm client."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("bash", "shellcheck"):
        if (found := shutil.which(tool)) is not None:
            (folder / tool).symlink_to(found)
    for name, text in scripts.items():
        (folder / name).write_text("#!/bin/sh\n" + text)
        (folder / name).chmod(stat.S_IRWXU)
    return str(folder)


def test_no_slurm_client_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", _path_with(tmp_path, {}))
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "runs"
    argv = ["job", "submit", SLURM, "-q", "--image", IMAGE, "--yes", "--folder", str(folder)]
    assert main(argv) == 2
    assert "not found: this machine is no Slurm client" in _one_line(capsys.readouterr().err)
    assert not folder.exists()
    assert main(["job", "list", SLURM, "-q"]) == 2
    _one_line(capsys.readouterr().err)


def test_no_controller_says_where_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Debian's squeue prints on a machine without slurm.conf and no DNS SRV record.
    said = "echo 'squeue: fatal: Could not establish a configuration source' >&2; exit 1\n"
    monkeypatch.setenv("PATH", _path_with(tmp_path, {"squeue": said, "sacct": said}))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["job", "list", SLURM, "-q"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "Hint: this machine reaches no Slurm controller" in err


def test_without_a_terminal_submit_asks_nothing_and_submits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    submitted = tmp_path / "submitted"
    scripts = {
        "squeue": "exit 0\n",
        "sacct": "echo 'Slurm accounting storage is disabled' >&2; exit 1\n",
        "sinfo": "echo 'idle|2'\n",
        "sbatch": f": >{submitted}; echo 4711\n",  # builtins only: PATH has no coreutils
    }
    monkeypatch.setenv("PATH", _path_with(tmp_path, scripts))
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "runs"
    argv = ["job", "submit", SLURM, "-q", "--image", IMAGE, "--folder", str(folder)]
    assert main(argv) == 1  # stdin is no terminal under pytest
    err = capsys.readouterr().err
    assert "no --yes: nothing submitted" in err and "job submit: pretrain: pretrain of" in err
    assert not folder.exists() and not submitted.exists()
    assert main([*argv, "--yes"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "4711\n" and submitted.exists(), captured.err
    assert (folder / "pretrain.sbatch").is_file()


def test_a_studio_path_is_the_nodes_path(tmp_path: Path) -> None:
    fsx = tmp_path / "fsx"
    view = StudioView("/fsx/alice", fsx)
    assert node_path(str(fsx / "data" / "sft1"), view) == "/fsx/alice/data/sft1"
    assert node_path(str(fsx), view) == "/fsx/alice"
    assert node_path("/fsx/data/shared", view) == "/fsx/data/shared"  # a nodes' path already
    assert node_path(str(fsx / "x"), None) == str(fsx / "x")  # not in a space


def test_the_space_settings_name_the_partition(tmp_path: Path) -> None:
    state = tmp_path / ".hyperpod-kit"
    state.mkdir()
    (state / "settings").write_text(
        "HYPERPOD_KIT_PARTITIONS=per_user\nHYPERPOD_KIT_NODE_MOUNT=/fsx\n"
    )
    assert studio_view(state) is None  # the wrapper has not found the user yet
    (state / "user").write_text("alice\n")
    view = studio_view(state)
    assert view is not None and view.node == "/fsx/alice"
    (state / "settings").write_text(
        "HYPERPOD_KIT_PARTITIONS=shared\nHYPERPOD_KIT_SHARED_PATH=/team\n"
    )
    view = studio_view(state)
    assert view is not None and view.node == "/fsx/team"
    assert studio_view(tmp_path / "nowhere") is None


def test_the_plan_names_nodes_cost_and_checkpoint_time() -> None:
    config = load_environment(REPO / "environments" / "prod-slurm.yaml").config
    lines = plan_lines(config, Capacity(1, 4, "sinfo -p compute: 1 idle, 3 allocated"),
                       Path("jobs/pretrain.sbatch"))  # fmt: skip
    text = "\n".join(lines)
    job = config.trainer.job
    assert f"{job.nodes} x " in lines[0]
    assert f"1 of 4 free; the job waits for {job.nodes}" in text
    assert "per hour" in text or "not priced" in text or "prepaid" in text
    assert f"every {job.checkpoint_every} steps to {job.checkpoint_dir}" in text
    assert "to write each (estimate)" in text
    assert os.path.join("jobs", "pretrain.sbatch") in text
