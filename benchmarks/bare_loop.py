"""The floor for the trainer benchmark: the same model, batch and optimizer in a bare loop.

    torchrun --nproc-per-node=W benchmarks/bare_loop.py --preset small --seq-len 128 \\
        --micro-batch 2 --grad-accum 2 --steps 60 --log-every 10

Each of the W ranks trains a plain `Transformer` (no FSDP, no checkpoints, no data loader: one
pre-made batch of random tokens) on its share of the global batch, with the trainer's AdamW
settings and gradient clipping, and no communication at all: the work one rank of the trainer
does, with nothing around it. The process group exists only for a barrier at start, so all ranks
begin timing together. Rank 0 prints the trainer's step-line format every `--log-every` steps
(and the host syncs there, as the trainer does), so the benchmark times both the same way.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the torch convention
from hyperpod_trainer.model import Transformer
from hyperpod_trainer.presets import PRESETS


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
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
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    shape = PRESETS[args.preset]
    torch.manual_seed(0)
    model = Transformer(shape, args.seq_len, activation_checkpointing=False)
    model.init_weights()
    model.to(device).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=not args.foreach,
    )
    bf16 = device.type == "cuda"
    tokens = torch.randint(0, shape.vocab_size, (args.micro_batch, args.seq_len + 1), device=device)
    tokens_per_step = args.micro_batch * args.grad_accum * args.seq_len * dist.get_world_size()
    dist.barrier()
    window = time.perf_counter()
    window_cpu = _cpu_seconds()
    for step in range(1, args.steps + 1):
        loss_sum = torch.zeros((), device=device)
        for _ in range(args.grad_accum):
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
