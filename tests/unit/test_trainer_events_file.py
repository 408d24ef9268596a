"""metrics.events_file (torch-free): rank 0's JSON event lines also go to a file, for the node's
log shipper. The file may sit in a folder other users write to (the node's spool, mode 1733), so
it is written only through no link and only when it is this user's own regular file."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.config import ConfigError, MetricsConfig, load_config
from hyperpod_trainer.lease import job_file_name
from hyperpod_trainer.metrics import Metrics


def _metrics(path: Path, rank: int = 0) -> tuple[Metrics, io.StringIO]:
    out = io.StringIO()
    cfg = MetricsConfig(events_file=str(path / "{job_id}.jsonl"))
    return Metrics(cfg, rank=rank, stream=out), out


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def slurm_job(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("HYPERPOD_TRAINER_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    return "4242"


def test_events_go_to_stdout_and_the_job_file_and_a_restart_appends(
    tmp_path: Path, slurm_job: str
) -> None:
    for step in (1, 2):  # the same job started twice (auto-resume): one file, appended
        metrics, out = _metrics(tmp_path)
        metrics.step(step, {"loss": 1.5, "tokens_per_s": 10.0})
        metrics.close()
        assert json.loads(out.getvalue()) == {
            "event": "step",
            "step": step,
            "loss": 1.5,
            "tokens_per_s": 10.0,
        }
    written = _lines(tmp_path / f"{slurm_job}.jsonl")
    assert [e["step"] for e in written] == [1, 2]


def test_only_rank_0_writes(tmp_path: Path, slurm_job: str) -> None:
    metrics, out = _metrics(tmp_path, rank=1)
    metrics.event("exit", reason="completed")
    metrics.close()
    assert out.getvalue() == ""
    assert list(tmp_path.iterdir()) == []


def test_a_link_planted_at_the_path_is_not_followed(
    tmp_path: Path, slurm_job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / f"{slurm_job}.jsonl").symlink_to(victim)
    metrics, out = _metrics(tmp_path)
    metrics.event("exit", reason="completed")
    metrics.close()
    assert victim.read_text() == "precious\n"
    assert json.loads(out.getvalue())["event"] == "exit"  # training output goes on regardless
    assert "metrics.events_file" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_file_another_user_created_first_is_left_alone(
    tmp_path: Path, slurm_job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = tmp_path / f"{slurm_job}.jsonl"
    theirs.write_text("")
    os.chown(theirs, 4321, 4321)
    metrics, _ = _metrics(tmp_path)
    metrics.event("exit", reason="completed")
    metrics.close()
    assert theirs.read_text() == ""
    assert "not a regular file of this user's" in capsys.readouterr().err


def test_a_folder_that_cannot_be_written_costs_one_warning(
    tmp_path: Path, slurm_job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics, out = _metrics(tmp_path / "missing")
    metrics.event("exit", reason="completed")
    metrics.close()
    assert json.loads(out.getvalue())["event"] == "exit"
    assert capsys.readouterr().err.count("metrics.events_file") == 1


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"SLURM_JOB_ID": "123"}, "123"),
        ({"HYPERPOD_TRAINER_JOB_ID": "llama/run 1", "SLURM_JOB_ID": "9"}, "llama_run_1"),
        ({"TORCHELASTIC_RUN_ID": "../../etc"}, "etc"),
        ({"HYPERPOD_TRAINER_JOB_ID": "..."}, "job"),
    ],
)
def test_the_job_id_becomes_one_safe_file_name(env: dict[str, str], name: str) -> None:
    assert job_file_name(env) == name
    assert "/" not in job_file_name(env)


def test_only_job_id_may_be_substituted() -> None:
    cfg = load_config(None, ["metrics.events_file=/var/log/hyperpod-kit/jobs/{job_id}.jsonl"])
    assert cfg.metrics.events_file == "/var/log/hyperpod-kit/jobs/{job_id}.jsonl"
    with pytest.raises(ConfigError, match=r"metrics.events_file.*only \{job_id\}"):
        load_config(None, ["metrics.events_file=/tmp/{rank}.jsonl"])
