"""Every resume is exact or refused with a reason:

- a checkpoint records the fingerprint of its data order and model; a resume into another one
  stops (exit 2) naming the field, unless weights-only is asked for, which is loud about it;
- all ranks compare their effective configuration before step 1 (a node with another file);
- one job per checkpoint folder: a second job is refused while the first is alive, and takes
  over once it is gone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.local import free_port
from hyperpod_trainer.schedule import lr_at

pytestmark = pytest.mark.trainer


def _config_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "config error" in ln]
    assert lines, stderr[-3000:]
    return lines[0]


def _tokens(directory: Path, count: int) -> None:
    directory.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        np.save(directory / f"shard{i}.npy", rng.integers(0, 256, 3000, dtype=np.uint16))


def test_resume_into_another_data_order_is_refused_or_weights_only(harness, tmp_path: Path) -> None:
    data, ckpt, samples = tmp_path / "data", tmp_path / "ckpt", tmp_path / "samples"
    _tokens(data, 2)
    common = [
        "data.source=tokens",
        f"data.path={data}",
        "data.seq_len=16",
        "train.steps=6",
        "train.global_batch_size=4",
        "optim.warmup_steps=1",
        f"checkpoint.dir={ckpt}",
        f"data.sample_log_dir={samples}",
    ]
    args = [a for item in common for a in ("--set", item)]
    first = harness.direct([*args, "--set", "train.stop_at_step=2"], timeout=120)
    assert first.returncode == 0, first.explain()

    _tokens(data, 3)  # a shard added to the folder: every window id would now mean another one
    refused = harness.direct(args, timeout=120)
    assert refused.returncode == 2, refused.explain()
    line = _config_line(refused.stderr)
    assert line.startswith("hyperpod_trainer: config error: data.shards: changed since ")
    assert "step_000002 was written (data.shards 2 shards" in line
    assert "-> 3 shards" in line
    assert "set checkpoint.resume_weights_only=true" in line
    assert "Traceback" not in refused.stderr
    assert not refused.of("step")

    # Deliberately: weights only, data order from the start, announced loudly.
    weights = harness.direct(
        [*args, "--set", "checkpoint.resume_weights_only=true", "--set", "train.stop_at_step=4"],
        timeout=120,
    )
    assert weights.returncode == 0, weights.explain()
    (resume,) = weights.of("resume")
    assert resume["weights_only"] is True
    assert resume["changed"] == ["data.shards", "data.shard_names", "data.index_sha256"]
    assert resume["step"] == 2 and resume["samples_consumed"] == 0
    assert "WEIGHTS-ONLY RESUME" in weights.stderr
    assert "data order RESTARTED at sample 0" in weights.stderr
    steps = weights.of("step")
    assert [e["step"] for e in steps] == [3, 4]  # the step count (and LR schedule) goes on
    schedule = {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 1, "total_steps": 6}
    assert [e["lr"] for e in steps] == [lr_at(2, **schedule), lr_at(3, **schedule)]
    logged = harness.read_samples(samples)
    assert logged[3] == [0, 1, 2, 3]  # the data order started again

    # Its checkpoint carries the new fingerprint: the next resume is exact, without the flag.
    exact = harness.direct(args, timeout=120)
    assert exact.returncode == 0, exact.explain()
    (resume,) = exact.of("resume")
    assert resume["weights_only"] is False and resume["samples_consumed"] == 8


def test_ranks_with_different_configs_stop_before_step_1(harness) -> None:
    """Two "nodes" of one job on loopback, the second with another copy of the config."""
    port = free_port()
    recipe = ["train.steps=5", "train.global_batch_size=4", "optim.warmup_steps=1"]
    nodes = [recipe, [*recipe, "optim.lr=1e-3"]]
    running = [harness.start_node(2, rank, 1, port, sets) for rank, sets in enumerate(nodes)]
    for result in [node.finish() for node in running]:
        assert result.returncode != 0, result.explain()
        assert not result.of("step")
        line = _config_line(result.stderr)
        assert line == (
            "hyperpod_trainer: config error: optim.lr: ranks disagree before step 1: rank 1 "
            "differs from rank 0 in optim.lr 0.0003 -> 0.001. Every node must run the same "
            "image, config and data"
        )
        assert "exitcode  : 2" in result.stderr  # the rank's own exit code, as torchrun reports


def test_one_job_per_checkpoint_folder(harness, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    sets = harness.with_recipe(
        "train.steps=100000",
        f"checkpoint.dir={ckpt}",
        "checkpoint.every_steps=2",
        "checkpoint.lease_timeout_s=4",
    )
    first = harness.start(2, sets, env={"HYPERPOD_TRAINER_JOB_ID": "job-a"})
    first.wait_for_step(3)

    # The same job file submitted again: another job, same folder, while the first one runs.
    second = harness.launch(2, sets, env={"HYPERPOD_TRAINER_JOB_ID": "job-b"})
    assert second.returncode != 0
    line = _config_line(second.stderr)
    assert "config error: checkpoint.dir: " in line
    assert f"{ckpt} is in use by job HYPERPOD_TRAINER_JOB_ID=job-a" in line
    assert "generation 1" in line and "one job per checkpoint folder" in line
    assert not second.of("step") and not second.of("checkpoint")

    first.kill_job()  # the node dies: no release, the heartbeat just stops
    killed = first.finish()
    saved = [e["step"] for e in killed.of("checkpoint")]
    assert saved, killed.explain()
    # A save the kill overtook may still have completed on disk after its log line was lost:
    # the folder, not the log, says where the next job starts.
    complete = max(
        int(d.name.split("_")[1]) for d in ckpt.glob("step_*/") if (d / "COMPLETE.json").exists()
    )
    assert complete >= max(saved)

    # Now the second job takes over (after watching the silent lease) and continues from the
    # first job's newest complete checkpoint, as generation 2.
    taken = harness.launch(
        2,
        [*sets, f"train.stop_at_step={complete + 2}"],
        env={"HYPERPOD_TRAINER_JOB_ID": "job-b"},
    )
    assert taken.returncode == 0, taken.explain()
    assert "lease: generation 2 for HYPERPOD_TRAINER_JOB_ID=job-b" in taken.stderr
    (resume,) = taken.of("resume")
    assert resume["step"] == complete
    newest = sorted(ckpt.glob("step_*"))[-1]
    assert '"lease_generation": 2' in (newest / "COMPLETE.json").read_text()
