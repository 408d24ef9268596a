"""The benchmark's floor (benchmarks/bare_loop.py) at 2 ranks does data-parallel training's
gradient all-reduce: each rank gets different data, and after the steps both ranks hold the
same parameters, equal to one process training on both ranks' batches with averaged gradients.
Without the all-reduce each rank would follow its own data and the parameters would differ."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the torch convention

from hyperpod_trainer.local import free_port
from hyperpod_trainer.model import Transformer
from hyperpod_trainer.presets import PRESETS

pytestmark = pytest.mark.trainer

BARE_LOOP = Path(__file__).resolve().parents[3] / "benchmarks" / "bare_loop.py"
SEQ, MICRO, ACCUM, STEPS = 16, 2, 2, 3


def _reference(batches: list[torch.Tensor], *, use: list[int]) -> dict[str, torch.Tensor]:
    """The floor's model and optimizer trained in one process on the batches of ranks `use`,
    each rank's gradient weighted 1/world as DDP's average does."""
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"], SEQ, activation_checkpointing=False)
    model.init_weights()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=True,
    )
    for _ in range(STEPS):
        for _ in range(ACCUM):
            for rank in use:
                tokens = batches[rank]
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
                (loss / (ACCUM * len(use))).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_two_rank_floor_all_reduces_gradients(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(BARE_LOOP),
        "--preset=tiny", f"--seq-len={SEQ}", f"--micro-batch={MICRO}",
        f"--grad-accum={ACCUM}", f"--steps={STEPS}", "--log-every=1", "--device=cpu",
        f"--dump={dump}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    assert [line for line in run.stdout.splitlines() if line.startswith('{"event": "step"')]
    ranks = [torch.load(dump / f"rank{r}.pt") for r in (0, 1)]
    batches = [r["tokens"] for r in ranks]
    assert not torch.equal(batches[0], batches[1]), "the ranks must train on different data"
    names = list(ranks[0]["final"])
    for name in names:
        assert torch.equal(ranks[0]["initial"][name], ranks[1]["initial"][name]), name
        assert torch.equal(ranks[0]["final"][name], ranks[1]["final"][name]), name
    moved = max((ranks[0]["final"][n] - ranks[0]["initial"][n]).abs().max() for n in names)
    assert moved > 1e-4, "training must move the parameters"

    both = _reference(batches, use=[0, 1])
    alone = _reference(batches, use=[0])  # what rank 0 would reach without the all-reduce
    floor = ranks[0]["final"]
    for name in names:
        torch.testing.assert_close(floor[name], both[name], atol=1e-5, rtol=1e-4, msg=name)
    apart = max((floor[n] - alone[n]).abs().max() for n in names)
    assert apart > 1e-4, f"rank 0's parameters are its own data's alone ({apart})"
