"""The floor for the trainer benchmark: the same model, batch and optimizer in a bare loop.

    torchrun --nproc-per-node=W benchmarks/bare_loop.py --preset small --seq-len 128 \\
        --micro-batch 2 --grad-accum 2 --steps 60 --log-every 10

Each of the W ranks trains a `Transformer` (no FSDP, no checkpoints, no data loader: one
pre-made batch of random tokens, different on each rank) on its share of the global batch, with
the trainer's AdamW settings and gradient clipping. With W > 1 the model is wrapped in
`DistributedDataParallel` (gloo on CPU, NCCL on CUDA), so gradients are averaged across ranks
as data-parallel training must: once per step, on the last accumulation micro-batch
(`no_sync()` before it, as the trainer defers its own reduce-scatter), in DDP's buckets
overlapped with the backward pass. DDP rather than an all_reduce of each gradient after
backward: it is the plain, standard way, and it overlaps the reduction with compute where a
reduction after backward would not, so the floor is not lowered by a naive reduction (the two
were not timed against each other). At W = 1 the model stays a plain module (nothing to reduce), as
the trainer's does. Rank 0 prints the trainer's step-line format every `--log-every` steps (and
the host syncs there, as the trainer does), so the benchmark times both the same way.

`--dump DIR` (for tests; after the last step, outside the timed steps) writes each rank's
batch and its parameters before and after training to DIR/rank<r>.pt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the torch convention
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hyperpod_trainer.model import Transformer
from hyperpod_trainer.presets import PRESETS


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--foreach", action="store_true", help="AdamW foreach instead of fused (the default)"
    )
    parser.add_argument("--dump", type=Path, help="write each rank's batch and parameters here")
    return parser.parse_args()


def _device(kind: str) -> torch.device:
    """The device, with the process group: gloo on CPU; NCCL for CUDA tensors (DDP)."""
    if kind == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("cpu:gloo,cuda:nccl")
        return device
    dist.init_process_group("gloo")
    return torch.device("cpu")


def _optimizer(model: nn.Module, foreach: bool) -> torch.optim.AdamW:
    """The trainer's AdamW: norms (1-D) not decayed."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=not foreach,
    )


def _parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters()}


def main() -> None:
    args = _arguments()
    device = _device(args.device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shape = PRESETS[args.preset]
    torch.manual_seed(0)
    module = Transformer(shape, args.seq_len, activation_checkpointing=False)
    module.init_weights()
    module.to(device).train()
    initial = _parameters(module) if args.dump else None
    # DDP also broadcasts rank 0's parameters at construction: every rank starts the same.
    ddp = (
        DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None)
        if world_size > 1
        else None
    )
    model: nn.Module = ddp or module
    optimizer = _optimizer(model, args.foreach)
    bf16 = device.type == "cuda"
    generator = torch.Generator().manual_seed(1 + rank)  # each rank its own data, as in training
    tokens = torch.randint(
        0, shape.vocab_size, (args.micro_batch, args.seq_len + 1), generator=generator
    ).to(device)
    tokens_per_step = args.micro_batch * args.grad_accum * args.seq_len * world_size
    dist.barrier()
    window = time.perf_counter()
    window_cpu = _cpu_seconds()
    for step in range(1, args.steps + 1):
        loss_sum = torch.zeros((), device=device)
        for micro in range(args.grad_accum):
            # Gradients are reduced once a step, on the last micro-batch (no_sync before it).
            last = micro == args.grad_accum - 1
            with ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext():
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
                (loss / args.grad_accum).backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.log_every == 0 and rank == 0:
            loss_value = float(loss_sum) / args.grad_accum
            elapsed = (time.perf_counter() - window) / args.log_every
            memory = (
                torch.cuda.max_memory_allocated(device) / 2**20
                if device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            )
            line = {
                "event": "step",
                "step": step,
                "loss": loss_value,
                "tokens_per_s": tokens_per_step / elapsed,
                "step_time_s": elapsed,
                "memory_mb": round(memory, 1),
                "cpu_s": (_cpu_seconds() - window_cpu) / args.log_every,
            }
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
            window = time.perf_counter()
            window_cpu = _cpu_seconds()
    dist.barrier()
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        state = {"tokens": tokens.cpu(), "initial": initial, "final": _parameters(module)}
        torch.save(state, args.dump / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
