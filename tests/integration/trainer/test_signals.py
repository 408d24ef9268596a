"""SIGTERM / SIGUSR1: checkpoint at the next step boundary, exit 0, and resume from there.

Slurm signals every process of a job step and HyperPod's pod termination reaches torchrun, which
forwards SIGTERM to the workers; both paths are exercised.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

pytestmark = pytest.mark.trainer

LONG_RUN = 100_000  # steps: the run must still be going when the signal arrives


def _long_run(harness, ckpt: Path, samples: Path) -> list[str]:
    return harness.with_recipe(
        f"train.steps={LONG_RUN}",
        f"checkpoint.dir={ckpt}",
        f"data.sample_log_dir={samples}",
    )


@pytest.mark.parametrize(
    ("sig", "data_workers"),
    [(signal.SIGTERM, 0), (signal.SIGUSR1, 1)],
    ids=["SIGTERM-to-ranks", "SIGUSR1-to-ranks-and-data-workers"],
)
def test_signal_to_workers_saves_exits_zero_and_resumes(
    harness, tmp_path: Path, sig: signal.Signals, data_workers: int
) -> None:
    ckpt, samples = tmp_path / "ckpt", tmp_path / "samples"
    sets = [*_long_run(harness, ckpt, samples), f"data.num_workers={data_workers}"]
    running = harness.start(2, sets)
    running.wait_for_step(3)
    # With data workers, signal every process below torchrun, as Slurm does for a job step:
    # the DataLoader workers must not die of it before their rank has saved.
    running.signal_workers(sig, depth=2 if data_workers else 1)
    stopped = running.finish()
    assert stopped.returncode == 0, stopped.explain()
    (exit_event,) = stopped.of("exit")
    assert exit_event["reason"] == sig.name
    last = exit_event["step"]
    assert max(stopped.losses()) == last
    assert stopped.of("checkpoint")[-1]["step"] == last
    assert (ckpt / "latest").read_text().strip() == f"step_{last:06d}"
    assert (ckpt / f"step_{last:06d}" / "COMPLETE.json").is_file()
    if sig is signal.SIGUSR1:
        return  # the resume path is the same; checked once below for SIGTERM

    resumed = harness.launch(2, [*sets, f"train.stop_at_step={last + 2}"])
    assert resumed.returncode == 0, resumed.explain()
    (resume,) = resumed.of("resume")
    assert resume["step"] == last
    assert resume["samples_consumed"] == last * harness.global_batch
    assert sorted(resumed.losses()) == [last + 1, last + 2]
    consumed = harness.read_samples(samples)
    g = harness.global_batch
    assert sorted(consumed) == list(range(1, last + 3))  # no step logged twice, none missing
    assert sorted(consumed[last + 1]) == list(range(last * g, (last + 1) * g))


def test_sigterm_to_torchrun_is_forwarded_and_workers_checkpoint(harness, tmp_path: Path) -> None:
    ckpt, samples = tmp_path / "ckpt", tmp_path / "samples"
    running = harness.start(2, _long_run(harness, ckpt, samples))
    running.wait_for_step(3)
    running.proc.send_signal(signal.SIGTERM)
    stopped = running.finish()
    # torchrun itself re-raises the signal and exits 1 even when every worker exited 0
    # (torch/distributed/elastic/agent/server/api.py); what matters is the workers' save.
    (exit_event,) = stopped.of("exit")
    assert exit_event["reason"] == "SIGTERM"
    last = exit_event["step"]
    assert stopped.of("checkpoint")[-1]["step"] == last
    assert (ckpt / "latest").read_text().strip() == f"step_{last:06d}"
    assert "Received 15 death signal" in stopped.stderr
