"""In-process checks of the save path, in a world of one (gloo, no ports):

- an async save whose staging (the copy off the training tensors) is still running when the next
  optimizer step comes: the step waits for it, so the checkpoint holds the pre-step values;
- rank 0 finalises (marker, rename, `latest`, retention) in its own thread, not in the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hyperpod_trainer")
torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402

from hyperpod_trainer import checkpoint as ck  # noqa: E402
from hyperpod_trainer.config import load_config  # noqa: E402
from hyperpod_trainer.distributed import init_distributed, shutdown  # noqa: E402
from hyperpod_trainer.signals import StopRequest  # noqa: E402
from hyperpod_trainer.train import Trainer  # noqa: E402

pytestmark = pytest.mark.trainer

# How long the gated staging thread waits for a release that the fixed code never gives (it
# waits for staging before the step, so only the timeout lets the copy go ahead).
GATE_S = 2.0


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HYPERPOD_TRAINER_JOB_ID", "in-process")
    yield
    shutdown()


def _tensors(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its path; DTensors as their full value."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(_tensors(value, f"{prefix}/{key}"))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            out.update(_tensors(value, f"{prefix}/{i}"))
    elif isinstance(tree, torch.Tensor):
        full = tree.full_tensor() if hasattr(tree, "full_tensor") else tree
        out[prefix] = full.detach().clone()
    return out


def _state(trainer: Trainer) -> dict[str, torch.Tensor]:
    model, optim = get_state_dict(trainer.model, trainer.optimizer)
    return _tensors({"model": model, "optim": optim})


def _saved(path: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    flat = tmp_path / f"{path.name}.pt"
    dcp_to_torch_save(path, flat)
    loaded = torch.load(flat, weights_only=False)
    return _tensors({"model": loaded["model"], "optim": loaded["optim"]})


def test_async_save_then_step_keeps_the_pre_step_values(world_of_one, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    cfg = load_config(
        None,
        [
            "train.steps=4",
            "train.global_batch_size=4",
            "optim.warmup_steps=1",
            "optim.lr=1e-2",
            f"checkpoint.dir={ckpt}",
            "checkpoint.async_save=true",
        ],
    )
    trainer = Trainer(cfg, init_distributed("cpu"), StopRequest())
    trainer.take_lease()
    checkpointer = trainer.checkpointer
    assert checkpointer is not None and checkpointer.stager is not None
    batches = trainer._loader()
    trainer.model.train()
    trainer.train_step(batches, 1)  # so that AdamW's moments exist and move
    trainer.progress.step = 1

    # Gate the trainer's own stager: its copy waits until the optimizer has stepped, or GATE_S.
    # Code that steps without waiting for staging therefore always checkpoints post-step values.
    stager = checkpointer.stager
    stage = stager._stage
    stepped = threading.Event()

    def gated_stage(state_dict: Any, **kwargs: Any) -> Any:
        stepped.wait(GATE_S)
        return stage(state_dict, **kwargs)

    stager._stage = gated_stage  # type: ignore[method-assign]
    trainer.optimizer.register_step_post_hook(lambda *_: stepped.set())

    before = _state(trainer)
    trainer.save(blocking=False)
    assert checkpointer.pending is not None and checkpointer.pending.staging is not None
    trainer.train_step(batches, 2)  # steps at once: must wait for the copy before updating
    after = _state(trainer)
    checkpointer.wait()

    saved = _saved(ckpt / "step_000001", tmp_path)
    assert saved.keys() == before.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2, "the step must move weights and moments"
    for key, value in before.items():
        assert torch.equal(saved[key], value), f"{key} holds post-step values"
    checkpointer.close()


def test_finalising_runs_off_the_training_thread(world_of_one, tmp_path: Path) -> None:
    init_distributed("cpu")
    group = dist.new_group(backend="gloo")
    release = threading.Event()
    seen: list[str] = []

    def before_marker(step: int) -> None:  # the finalizer's first act, before the marker
        seen.append(threading.current_thread().name)
        release.wait(30)

    events: list[dict[str, Any]] = []
    checkpointer = ck.Checkpointer(
        tmp_path,
        keep_last=1,
        async_save=False,
        group=group,
        rank=0,
        emit=lambda name, **fields: events.append({"event": name, **fields}),
        before_marker=before_marker,
    )
    state = {"w": torch.arange(8.0)}
    release.set()
    checkpointer.save(1, state, {}, blocking=False)
    checkpointer.wait()
    release.clear()

    checkpointer.save(2, state, {}, blocking=False)  # a periodic save: returns at once
    try:
        # Back in the "training loop": the shards are written, the folder is not final yet.
        assert (tmp_path / "step_000002.tmp" / ".metadata").is_file()
        assert not (tmp_path / "step_000002").exists()
        assert (tmp_path / "step_000001" / ck.MARKER).is_file()  # retention has not run
    finally:
        release.set()
    checkpointer.wait()
    assert seen and all(name.startswith("checkpoint-finalize") for name in seen), seen
    assert (tmp_path / "step_000002" / ck.MARKER).is_file()
    assert not (tmp_path / "step_000001").exists()  # pruned (keep_last=1), in the same thread
    assert [e["step"] for e in events] == [1, 2]
    assert events[-1]["pruned"] == ["step_000001"]
    checkpointer.close()
