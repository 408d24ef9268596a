"""Elastic world size: a job runs on 2 ranks, then 1, then 3, resharding through DCP; 4 is refused.

The global batch stays 12 (grad accumulation 3, 6, 2), the data position is one global sample
counter, so every step must consume exactly the ids the uninterrupted 2-rank run consumed.

Loss tolerance: changing the world size changes how each step's gradient is summed (3 local
micro-batches and a 2-way reduce-scatter versus 6 local micro-batches, ...), and float addition is
not associative; those last-bit differences then propagate through the later steps. With this
recipe the measured worst case is 1.3e-7 relative (steps 5-12, torch 2.13 CPU); 1e-5 leaves ~100x
margin, while a skipped or repeated batch, a wrong grad-accumulation factor or a lost optimizer
state moves the loss by orders of magnitude more (neighbouring batches' losses differ by ~1e-2).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

pytestmark = pytest.mark.trainer

LOSS_RTOL = 1e-5


def test_two_then_one_then_three_ranks(harness, reference, tmp_path: Path) -> None:
    ckpt, samples = tmp_path / "ckpt", tmp_path / "samples"
    sets = harness.with_recipe(
        f"checkpoint.dir={ckpt}",
        "checkpoint.every_steps=3",
        f"data.sample_log_dir={samples}",
    )
    plan = [(2, 4, 3), (1, 8, 6), (3, harness.steps, 2)]  # (ranks, stop at step, grad accum)
    losses: dict[int, float] = {}
    previous_stop = 0
    for nproc, stop, accum in plan:
        run = harness.launch(nproc, [*sets, f"train.stop_at_step={stop}"])
        assert run.returncode == 0, run.explain()
        steps = run.of("step")
        assert [e["step"] for e in steps] == list(range(previous_stop + 1, stop + 1))
        assert {(e["world_size"], e["grad_accum"]) for e in steps} == {(nproc, accum)}
        if previous_stop:
            (resume,) = run.of("resume")
            assert resume["step"] == previous_stop
            assert resume["samples_consumed"] == previous_stop * harness.global_batch
            assert resume["world_size"] == nproc
        else:
            assert not run.of("resume")
        assert run.of("exit")[-1]["step"] == stop
        losses.update(run.losses())
        previous_stop = stop

    # Data: per step, the same sample ids as the uninterrupted run (so the multisets over the
    # whole run are equal too), and each step is exactly the next global_batch ids.
    consumed = harness.read_samples(samples)
    assert sorted(consumed) == sorted(reference.samples)
    g = harness.global_batch
    for step, ids in consumed.items():
        assert sorted(ids) == sorted(reference.samples[step])
        assert sorted(ids) == list(range((step - 1) * g, step * g))
    everything = sorted(i for ids in consumed.values() for i in ids)
    assert everything == sorted(i for ids in reference.samples.values() for i in ids)

    # Loss: the 2-rank part is bitwise; after a world-size change, within LOSS_RTOL.
    assert sorted(losses) == sorted(reference.losses)
    for step in range(1, 5):
        assert losses[step] == reference.losses[step]
    for step in range(5, harness.steps + 1):
        assert math.isclose(losses[step], reference.losses[step], rel_tol=LOSS_RTOL), (
            step,
            losses[step],
            reference.losses[step],
        )
    # The curve must have moved for the comparison to mean anything.
    assert reference.losses[harness.steps] < reference.losses[1] - 0.1

    # 4 ranks cannot keep the global batch (micro 2 x 4 = 8 does not divide 12): refused before
    # anything is loaded or written, with the worker's one-line error and exit code 2.
    refused = harness.launch(4, sets)
    assert refused.returncode != 0
    line = next(ln for ln in refused.stderr.splitlines() if "config error" in ln)
    assert line == (
        "hyperpod_trainer: config error: train.global_batch_size: 12 is not divisible by "
        "micro_batch_size 2 x world_size 4 = 8"
    )
    assert "exitcode  : 2" in refused.stderr  # the worker's own exit code, as torchrun reports
    assert (ckpt / "latest").read_text().strip() == f"step_{harness.steps:06d}"
