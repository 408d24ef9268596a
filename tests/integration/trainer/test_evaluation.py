"""Held-out evaluation: every `eval.every_steps` and at the end, the same loss at any world size,
and no effect on training.

One 2-rank run evaluates at steps 3 and 6 and checkpoints step 6; a 1-rank launch resumes that
checkpoint, trains nothing (stop_at_step is the checkpoint's step) and evaluates it again. The
two losses are equal within 1e-6 relative (each token's loss is fp32, summed in fp64: only the
summation order differs). 7 held-out sequences with micro-batches of 2 make the last batch of
each rank a padded one.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")
np = pytest.importorskip("numpy")

from hyperpod_trainer.evaluate import rank_share  # noqa: E402

pytestmark = pytest.mark.trainer

SEQUENCES = 7
SEQ_LEN = 32  # the recipe's


def _held_out(directory: Path) -> Path:
    directory.mkdir()
    tokens = np.random.default_rng(5).integers(0, 256, SEQUENCES * SEQ_LEN + 1, dtype=np.uint16)
    np.save(directory / "held_out.npy", tokens)
    return directory


@pytest.mark.parametrize(("sequences", "world_size"), [(7, 1), (7, 2), (7, 3), (2, 3), (8, 2)])
def test_rank_shares_cover_every_sequence_once(sequences: int, world_size: int) -> None:
    ids = [i for rank in range(world_size) for i in rank_share(sequences, world_size, rank)]
    assert ids == list(range(sequences))


def test_eval_loss_is_the_same_at_world_sizes_1_and_2(harness, reference, tmp_path: Path) -> None:
    held = _held_out(tmp_path / "held")
    sets = harness.with_recipe(
        f"checkpoint.dir={tmp_path / 'ckpt'}",
        f"data.eval_path={held}",
        "eval.every_steps=3",
        "train.stop_at_step=6",
    )
    two = harness.launch(2, sets)
    assert two.returncode == 0, two.explain()
    evals = {e["step"]: e for e in two.of("eval")}
    assert sorted(evals) == [3, 6], two.explain()
    for e in evals.values():
        assert (e["sequences"], e["tokens"]) == (SEQUENCES, SEQUENCES * SEQ_LEN)
        assert math.isclose(e["perplexity"], math.exp(e["loss"]), rel_tol=1e-12)
    assert evals[6]["loss"] != evals[3]["loss"]  # the model moved in between
    # Evaluating changes nothing in training: the losses are the uninterrupted run's, bitwise.
    assert two.losses() == {s: reference.losses[s] for s in range(1, 7)}

    one = harness.launch(1, sets)
    assert one.returncode == 0, one.explain()
    (resume,) = one.of("resume")
    assert resume["step"] == 6 and not one.of("step")
    (again,) = one.of("eval")
    assert again["step"] == 6
    assert (again["sequences"], again["tokens"]) == (SEQUENCES, SEQUENCES * SEQ_LEN)
    assert math.isclose(again["loss"], evals[6]["loss"], rel_tol=1e-6, abs_tol=0.0)
    assert math.isclose(again["perplexity"], evals[6]["perplexity"], rel_tol=1e-6, abs_tol=0.0)
