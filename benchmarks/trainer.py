"""Benchmark the bundled trainer: checkpoint overhead, checkpoint I/O, and resume start-up.

    python benchmarks/trainer.py                      # CPU: 2 ranks, gloo, "small" preset
    python benchmarks/trainer.py --device cuda --nproc 8 --preset llama-1b \\
        --seq-len 2048 --micro-batch 4 --peak-tflops 989   # H100 dense BF16 peak, per GPU

Per repeat (default 3, interleaved, medians reported), four launches of the real
`torchrun -m hyperpod_trainer`, read through its JSON lines:

1. baseline, no checkpoints              -> step time, tokens/s (and MFU when --peak-tflops)
2. async checkpoint every K steps        -> wall time per step incl. save stalls, vs baseline
3. sync checkpoint every K steps         -> same, plus save MB/s
4. resume from (3)'s last checkpoint     -> load MB/s, launch-to-first-step vs the fresh run (1)

Wall time per step is measured between rank 0's step lines as they arrive, so it includes the
part of a save that blocks training (the trainer's own step_time_s does not). Because launches
on a shared machine drift by more than a small save costs, a second ratio is computed from the
trainer's own timings: 1 + (seconds a save blocks training) / (K x step time).
Needs the trainer installed (`pip install -e assets/trainer`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperpod_trainer.local import torchrun_command

WARMUP_STEPS = 2  # first steps pay for allocator warm-up and lazy init; not timed


@dataclass
class Launch:
    name: str
    started: float
    returncode: int = 0
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (arrival, event)

    def of(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.events if e["event"] == kind]

    def first_step_s(self) -> float:
        return self.of("step")[0][0] - self.started

    def wall_per_step(self) -> float:
        """Mean arrival interval of step lines after warm-up (includes blocking save time)."""
        steps = self.of("step")[WARMUP_STEPS - 1 :]
        return (steps[-1][0] - steps[0][0]) / (len(steps) - 1)

    def median(self, key: str) -> float:
        return float(statistics.median(e[key] for _, e in self.of("step")[WARMUP_STEPS:]))


def run(name: str, nproc: int, sets: list[str], log: Path) -> Launch:
    cmd = torchrun_command(nproc, sets)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    launch = Launch(name, time.monotonic())
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith('{"event"'):
                launch.events.append((time.monotonic(), json.loads(line)))
        launch.returncode = proc.wait()
    if launch.returncode != 0:
        sys.exit(f"{name} failed (rc={launch.returncode}); see {log}")
    print(f"  {name}: done in {time.monotonic() - launch.started:.1f}s", file=sys.stderr)
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (GPUs) on this node")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--ckpt-every", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peak-tflops", type=float, help="peak dense TFLOP/s of ONE device, for MFU (e.g. 989)"
    )
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    if args.device == "cpu":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainer-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    global_batch = args.micro_batch * args.nproc * args.grad_accum
    common = [
        f"model.preset={args.preset}",
        f"data.seq_len={args.seq_len}",
        f"train.steps={args.steps}",
        f"train.global_batch_size={global_batch}",
        f"train.micro_batch_size={args.micro_batch}",
        f"train.device={args.device}",
        "optim.warmup_steps=2",
        "checkpoint.keep_last=2",
    ]
    print(f"benchmark in {workdir}", file=sys.stderr)
    # Interleaved repeats, median per figure: on a shared machine a single launch is noise.
    reps = [_repeat(args, common, workdir / f"rep{r}", r) for r in range(args.repeats)]
    figures: dict[str, Any] = {
        "device": args.device,
        "nproc": args.nproc,
        "preset": args.preset,
        "params": _params(args.preset),
        "global_batch": global_batch,
        "seq_len": args.seq_len,
        "checkpoint_every": args.ckpt_every,
        "repeats": args.repeats,
    }
    for key in reps[0]:
        figures[key] = statistics.median(rep[key] for rep in reps)
    if args.peak_tflops:
        peak = args.peak_tflops * 1e12 * args.nproc
        figures["mfu"] = 6 * figures["params"] * figures["tokens_per_s"] / peak
    _print_table(figures)
    if args.json:
        args.json.write_text(json.dumps({**figures, "per_repeat": reps}, indent=1))


def _repeat(
    args: argparse.Namespace, common: list[str], workdir: Path, index: int
) -> dict[str, float]:
    workdir.mkdir(parents=True, exist_ok=True)
    every = f"checkpoint.every_steps={args.ckpt_every}"
    variants = {
        "baseline": common,
        "async": [
            *common,
            f"checkpoint.dir={workdir / 'ck-async'}",
            every,
            "checkpoint.async_save=true",
        ],
        "sync": [*common, f"checkpoint.dir={workdir / 'ck-sync'}", every],
    }
    # Rotate the order per repeat so that no variant always runs first (or after a resume).
    names = list(variants)
    names = names[index % 3 :] + names[: index % 3]
    done = {name: run(name, args.nproc, variants[name], workdir / f"{name}.log") for name in names}
    base, async_run, sync_run = done["baseline"], done["async"], done["sync"]
    resumed = run(
        "resume",
        args.nproc,
        [*common, f"checkpoint.dir={workdir / 'ck-sync'}", f"train.steps={args.steps + 3}"],
        workdir / "resume.log",
    )
    sync_ck = [e for _, e in sync_run.of("checkpoint")]
    async_ck = [e for _, e in async_run.of("checkpoint") if e["async_save"]]
    (_, resume_event) = resumed.of("resume")[0]
    return {
        "step_time_s": base.median("step_time_s"),
        "tokens_per_s": base.median("tokens_per_s"),
        "wall_none_s": base.wall_per_step(),
        "wall_async_s": async_run.wall_per_step(),
        "wall_sync_s": sync_run.wall_per_step(),
        "async_ratio": async_run.wall_per_step() / base.wall_per_step(),
        "sync_ratio": sync_run.wall_per_step() / base.wall_per_step(),
        # The same overhead from the trainer's own timings: time a save blocks training,
        # spread over the steps between saves. Immune to load drift between launches, blind
        # to the CPU an async writer steals from the ranks while they compute.
        "async_blocking_ratio": 1
        + statistics.mean(e["blocking_seconds"] for e in async_ck)
        / (args.ckpt_every * base.median("step_time_s")),
        "sync_blocking_ratio": 1
        + statistics.mean(e["seconds"] for e in sync_ck)
        / (args.ckpt_every * base.median("step_time_s")),
        # Step time of the checkpointing runs themselves, to show how noisy the machine is.
        "step_time_async_s": async_run.median("step_time_s"),
        "step_time_sync_s": sync_run.median("step_time_s"),
        "checkpoint_mb": statistics.mean(e["bytes"] for e in sync_ck) / 2**20,
        "sync_save_s": statistics.mean(e["seconds"] for e in sync_ck),
        "async_blocking_s": statistics.mean(e["blocking_seconds"] for e in async_ck),
        "async_total_s": statistics.mean(e["seconds"] for e in async_ck),
        "load_s": resume_event["seconds"],
        "load_mb": resume_event["bytes"] / 2**20,
        "first_step_fresh_s": base.first_step_s(),
        "first_step_resume_s": resumed.first_step_s(),
        "first_step_ratio": resumed.first_step_s() / base.first_step_s(),
    }


def _params(preset: str) -> int:
    from hyperpod_trainer.presets import PRESETS

    return int(PRESETS[preset].num_params())


def _print_table(f: dict[str, Any]) -> None:
    every = f["checkpoint_every"]
    rows = [
        ("model", f"{f['preset']} ({f['params'] / 1e6:.1f}M params), {f['device']} x{f['nproc']}"),
        ("global batch x seq", f"{f['global_batch']} x {f['seq_len']}"),
        ("repeats (median shown)", str(f["repeats"])),
        (
            "step time (none/async/sync runs)",
            f"{f['step_time_s'] * 1e3:.1f} / {f['step_time_async_s'] * 1e3:.1f} / "
            f"{f['step_time_sync_s'] * 1e3:.1f} ms",
        ),
        ("tokens/s (global)", f"{f['tokens_per_s']:.0f}"),
        ("wall/step, no checkpoints", f"{f['wall_none_s'] * 1e3:.1f} ms"),
        (
            f"wall/step, async save every {every}",
            f"{f['wall_async_s'] * 1e3:.1f} ms  (ratio {f['async_ratio']:.3f}; "
            f"blocking-time ratio {f['async_blocking_ratio']:.3f})",
        ),
        (
            f"wall/step, sync save every {every}",
            f"{f['wall_sync_s'] * 1e3:.1f} ms  (ratio {f['sync_ratio']:.3f}; "
            f"blocking-time ratio {f['sync_blocking_ratio']:.3f})",
        ),
        ("checkpoint size", f"{f['checkpoint_mb']:.1f} MB"),
        (
            "sync save",
            f"{f['sync_save_s']:.3f} s  ({f['checkpoint_mb'] / f['sync_save_s']:.0f} MB/s)",
        ),
        (
            "async save: blocking / total",
            f"{f['async_blocking_s']:.3f} s / {f['async_total_s']:.3f} s",
        ),
        ("load on resume", f"{f['load_s']:.3f} s  ({f['load_mb'] / f['load_s']:.0f} MB/s)"),
        (
            "launch -> first step",
            f"fresh {f['first_step_fresh_s']:.2f} s, resume {f['first_step_resume_s']:.2f} s "
            f"(ratio {f['first_step_ratio']:.2f})",
        ),
    ]
    if "mfu" in f:
        rows.append(("MFU (6N x tokens/s / peak)", f"{f['mfu'] * 100:.1f} %"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
