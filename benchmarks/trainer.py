"""Benchmark the bundled trainer: tokens/s, MFU and memory against a floor from the same run.

    python benchmarks/trainer.py                          # CPU: 2 ranks, gloo, "small" preset
    python benchmarks/trainer.py --device cuda --nproc 1 --preset llama-1b --seq-len 2048 \\
        --micro-batch 4 --grad-accum 1 --compare-torchtitan --torchtitan-wheels /fsx/wheels
    python benchmarks/trainer.py --ab train.defer_grad_sync=false   # a lever, off vs default

Per repeat (default 3; launches interleaved, their order rotated; medians reported):

- **ours**: `torchrun -m hyperpod_trainer` with checkpointing on (async saves every
  `--ckpt-every` steps, at least 3 inside the timed window) and its data loader;
- **bare** (CPU, and GPU unless `--no-bare`): benchmarks/bare_loop.py, the same model, batch
  and optimizer in a bare loop with no FSDP, checkpoints or data loader, at the same world size,
  its gradients all-reduced across ranks by DDP as data-parallel training needs (a plain module
  at world size 1); ours / bare is the framework overhead as a number (goal >= 0.95);
- **ours + SET** for each `--ab SET`: the same as ours with those overrides, to measure a lever;
- **torchtitan** (`--compare-torchtitan`, CUDA only): torchtitan's Llama 3 trainer, pinned
  (0.3.0), installed from local wheels into its own venv, given the same model (our preset's
  exact shape, tied or not), batch, optimizer and schedule (benchmarks/torchtitan_job.py); the
  model torchtitan builds is checked against ours before it is timed; ours / torchtitan.

Tokens/s is wall-clock: the arrival times of rank 0's step lines at step `--warmup` and at step
`--warmup + --timed` (>= 10 and >= 50), so it includes everything that blocks training, saves
included. FLOPs per token and MFU come from hyperpod_trainer/flops.py (torchtitan's convention:
the output projection counted even when tied, as torchtitan 0.3.0 does too; torchtitan also
counts the norm weights, 0.005 % more for llama-1b) and its dated table of dense BF16 peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import site
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperpod_trainer.config import OptimConfig
from hyperpod_trainer.flops import PEAKS_AS_OF, flops_per_token, peak_tflops
from hyperpod_trainer.local import free_port, torchrun_command
from hyperpod_trainer.presets import PRESETS, ModelShape

BARE_LOOP = Path(__file__).with_name("bare_loop.py")
TORCHTITAN_VERSION = "0.3.0"  # the pinned torchtitan release the GPU comparison installs


@dataclass
class Launch:
    name: str
    started: float
    returncode: int = 0
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (arrival, event)

    def of(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.events if e["event"] == kind]

    def arrival(self, step: int) -> float:
        for t, e in self.of("step"):
            if e["step"] == step:
                return t
        raise SystemExit(f"{self.name}: no step line for step {step}")


def _launch(name: str, cmd: list[str], log: Path, env: dict[str, str]) -> Launch:
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
    print(f"  {name}: {time.monotonic() - launch.started:.1f} s", file=sys.stderr)
    return launch


def _environment(device: str) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "device": device,
    }
    if device == "cuda" and torch.cuda.is_available():
        out["device_name"] = torch.cuda.get_device_name(0)
        out["gpus"] = torch.cuda.device_count()
    else:
        out["device_name"] = platform.processor() or platform.machine()
    return out


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.last_step = args.warmup + args.timed
        self.global_batch = args.micro_batch * args.nproc * args.grad_accum
        self.tokens_per_step = self.global_batch * args.seq_len
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        if args.device == "cpu":
            self.env.setdefault("OMP_NUM_THREADS", "1")
            self.env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        self.shape = PRESETS[args.preset]

    def ours_sets(self, repeat: int, variant: str) -> list[str]:
        a = self.args
        ckpt = self.workdir / f"rep{repeat}" / f"ckpt-{variant}"
        shutil.rmtree(ckpt, ignore_errors=True)
        sets = [
            f"model.preset={a.preset}",
            f"data.seq_len={a.seq_len}",
            f"train.steps={self.last_step}",
            f"train.global_batch_size={self.global_batch}",
            f"train.micro_batch_size={a.micro_batch}",
            f"train.device={a.device}",
            "optim.warmup_steps=2",
            f"metrics.log_every={a.log_every}",
            f"checkpoint.dir={ckpt}",
            f"checkpoint.every_steps={a.ckpt_every}",
            "checkpoint.async_save=true",
            "checkpoint.keep_last=2",
        ]
        return [*sets, *a.set]

    def run_ours(self, repeat: int, variant: str, extra: list[str]) -> Launch:
        sets = [*self.ours_sets(repeat, variant), *extra]
        log = self.workdir / f"rep{repeat}" / f"{variant}.log"
        return _launch(variant, torchrun_command(self.args.nproc, sets), log, self.env)

    def run_bare(self, repeat: int) -> Launch:
        a = self.args
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={a.nproc}",
            "--nnodes=1",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-backend=c10d",
            str(BARE_LOOP),
            f"--preset={a.preset}",
            f"--seq-len={a.seq_len}",
            f"--micro-batch={a.micro_batch}",
            f"--grad-accum={a.grad_accum}",
            f"--steps={self.last_step}",
            f"--log-every={a.log_every}",
            f"--device={a.device}",
        ]
        if "optim.fused=false" in a.set:
            cmd.append("--foreach")  # the same optimizer on both sides
        return _launch("bare", cmd, self.workdir / f"rep{repeat}" / "bare.log", self.env)

    def figures(self, launch: Launch) -> dict[str, float]:
        """Wall-clock tokens/s over the timed window, peak memory, the saves inside it."""
        a = self.args
        t0, t1 = launch.arrival(a.warmup), launch.arrival(self.last_step)
        timed = [e for _, e in launch.of("step") if a.warmup < e["step"] <= self.last_step]
        out = {
            "tokens_per_s": a.timed * self.tokens_per_step / (t1 - t0),
            "memory_mb": max(e.get("memory_mb", 0.0) for _, e in launch.of("step")),
            # Rank 0's CPU seconds per step over the timed window (all its threads): the work
            # done, which other jobs on a shared machine do not inflate the way they do wall time.
            "cpu_s_per_step": statistics.mean(e["cpu_s"] for e in timed),
        }
        saves = [e for t, e in launch.of("checkpoint") if a.warmup < e["step"] < self.last_step]
        if launch.of("checkpoint"):
            out["saves_in_window"] = len(saves)
            if saves:
                out["save_blocking_s"] = statistics.mean(e["blocking_seconds"] for e in saves)
                out["save_total_s"] = statistics.mean(e["seconds"] for e in saves)
                out["checkpoint_mb"] = statistics.mean(e["bytes"] for e in saves) / 2**20
        return out


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in runs for k in r})
    return {k: statistics.median(r[k] for r in runs if k in r) for k in keys}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (GPUs) on this node")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10, help="steps before timing (>= 10)")
    parser.add_argument("--timed", type=int, default=50, help="steps timed (>= 50)")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--ckpt-every", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="extra trainer override")
    parser.add_argument(
        "--ab", action="append", default=[], metavar="K=V[,K=V]", help="a lever variant"
    )
    parser.add_argument("--no-bare", action="store_true", help="skip the bare-loop floor")
    parser.add_argument("--peak-tflops", type=float, help="override the peak table (per device)")
    parser.add_argument("--compare-torchtitan", action="store_true")
    parser.add_argument("--torchtitan-wheels", type=Path, help="wheels for the torchtitan venv")
    parser.add_argument(
        "--torchtitan-requirements",
        action="store_true",
        help="print the pinned packages the torchtitan venv installs, then exit",
    )
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.torchtitan_requirements:
        print("\n".join(TORCHTITAN_REQUIREMENTS))
        return
    _validate(parser, args)
    _run(args, args.workdir or Path(tempfile.mkdtemp(prefix="trainer-bench-")))


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.warmup < 10 or args.timed < 50:
        parser.error("--warmup must be >= 10 and --timed >= 50")
    if args.warmup % args.log_every or args.timed % args.log_every:
        parser.error("--warmup and --timed must be multiples of --log-every")
    if args.compare_torchtitan and args.device != "cuda":
        parser.error("torchtitan's Llama 3 trainer does not run on CPU: not measured")
    first_save = args.ckpt_every * (args.warmup // args.ckpt_every + 1)
    if len(range(first_save, args.warmup + args.timed, args.ckpt_every)) < 3:
        parser.error("--ckpt-every leaves fewer than 3 saves inside the timed window")


def _measure(args: argparse.Namespace, bench: Bench) -> dict[str, list[dict[str, float]]]:
    """Every variant once per repeat, in a rotated order; figures per launch."""
    variants: dict[str, list[str]] = {"ours": []}
    variants.update({f"ours+{ab}": ab.split(",") for ab in args.ab})
    order = [*variants, *([] if args.no_bare else ["bare"])]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in order}
    for repeat in range(args.repeats):
        (bench.workdir / f"rep{repeat}").mkdir(parents=True, exist_ok=True)
        shift = repeat % len(order)
        for name in order[shift:] + order[:shift]:
            if name == "bare":
                launch = bench.run_bare(repeat)
            else:
                launch = bench.run_ours(repeat, name.replace("/", "_"), variants[name])
            results[name].append(bench.figures(launch))
    return results


def _run(args: argparse.Namespace, workdir: Path) -> None:
    bench = Bench(args, workdir)
    print(f"benchmark in {workdir}", file=sys.stderr)
    results = _measure(args, bench)
    with_bare = "bare" in results
    env = _environment(args.device)
    flops = flops_per_token(bench.shape, args.seq_len)
    peak: tuple[str, float] | None = None
    if args.peak_tflops:
        peak = ("--peak-tflops", args.peak_tflops)
    elif args.device == "cuda":
        peak = peak_tflops(env.get("device_name", ""))
    summary: dict[str, Any] = {
        "environment": env,
        "config": {
            "preset": args.preset,
            "tied_output": bench.shape.tie_embeddings,
            "params": bench.shape.num_params(),
            "nproc": args.nproc,
            "global_batch": bench.global_batch,
            "micro_batch": args.micro_batch,
            "grad_accum": args.grad_accum,
            "seq_len": args.seq_len,
            "warmup_steps": args.warmup,
            "timed_steps": args.timed,
            "checkpoint_every": args.ckpt_every,
            "repeats": args.repeats,
            "extra_sets": args.set,
        },
        "flops_per_token": flops.per_token,
        "peak": {"source": peak[0], "tflops": peak[1], "table_as_of": PEAKS_AS_OF}
        if peak
        else None,
        "results": {name: _median(runs) for name, runs in results.items()},
        "per_launch": results,
    }
    for med in summary["results"].values():
        if peak is not None:
            med["mfu"] = flops.per_token * med["tokens_per_s"] / (peak[1] * 1e12 * args.nproc)
    ours = summary["results"]["ours"]["tokens_per_s"]
    if with_bare:
        summary["ours_over_bare"] = ours / summary["results"]["bare"]["tokens_per_s"]
    ours_cpu = summary["results"]["ours"]["cpu_s_per_step"]
    for ab in args.ab:
        variant = summary["results"][f"ours+{ab}"]
        summary[f"ours+{ab}_over_ours"] = variant["tokens_per_s"] / ours
        summary[f"ours+{ab}_cpu_over_ours"] = variant["cpu_s_per_step"] / ours_cpu
    if with_bare:
        summary["ours_cpu_over_bare"] = ours_cpu / summary["results"]["bare"]["cpu_s_per_step"]
    if args.compare_torchtitan:
        titan = run_torchtitan(args, bench, workdir)
        summary["torchtitan"] = titan
        if "tokens_per_s" in titan:
            summary["ours_over_torchtitan"] = ours / titan["tokens_per_s"]
    else:
        summary["torchtitan"] = "not measured"
    _print(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


def _print(s: dict[str, Any]) -> None:
    env, cfg = s["environment"], s["config"]
    print(
        f"{cfg['preset']} ({cfg['params'] / 1e6:.1f}M params, tied output={cfg['tied_output']}), "
        f"{env['device']} x{cfg['nproc']} ({env['device_name']}), torch {env['torch']}, "
        f"CUDA {env['cuda']}"
    )
    print(
        f"global batch {cfg['global_batch']} x {cfg['seq_len']} tokens; timed steps "
        f"{cfg['warmup_steps'] + 1}-{cfg['warmup_steps'] + cfg['timed_steps']}; median of "
        f"{cfg['repeats']}; FLOPs/token {s['flops_per_token'] / 1e6:.1f}M"
    )
    for name, med in s["results"].items():
        line = (
            f"  {name:<36} {med['tokens_per_s']:>9,.0f} tokens/s  {med['memory_mb']:>6,.0f} MB"
            f"  {med['cpu_s_per_step'] * 1e3:>6,.0f} ms CPU/step"
        )
        if "saves_in_window" in med:
            line += (
                f"  {med['saves_in_window']:.0f} saves in window, "
                f"blocking {med.get('save_blocking_s', 0) * 1e3:.0f} ms each"
            )
        if "mfu" in med:
            line += f"  MFU {med['mfu'] * 100:.1f} %"
        print(line)
    if "ours_over_bare" in s:
        print(
            f"ours / bare loop: {s['ours_over_bare']:.3f} tokens/s "
            f"(CPU time per step: {s['ours_cpu_over_bare']:.3f})"
        )
    for key, value in s.items():
        if key.endswith("_over_ours") and not key.endswith("_cpu_over_ours"):
            name = key.removesuffix("_over_ours")
            cpu = s[f"{name}_cpu_over_ours"]
            print(f"{name} / ours: {value:.3f} tokens/s (CPU time per step: {cpu:.3f})")
    if "ours_over_torchtitan" in s:
        print(f"ours / torchtitan: {s['ours_over_torchtitan']:.3f}")
    else:
        print(f"torchtitan: {s['torchtitan']}")
    if s["peak"] is None:
        print("MFU: not measured (no peak for this device; CPU has no entry in the table)")


# -- torchtitan (GPU only) ----------------------------------------------------------------------
#
# The GPU path has never been executed (no GPU was lent to this work); its job configuration and
# model are checked on CPU against the pinned torchtitan by
# tests/integration/trainer/test_torchtitan_job.py. The GPU machines have no network, so the
# packages come from --torchtitan-wheels, prepared where there is network, with the image's
# Python (binary wheels are per Python version):
#     pip download --no-deps -d WHEELS $(python benchmarks/trainer.py --torchtitan-requirements)

TORCHTITAN_JOB = Path(__file__).with_name("torchtitan_job.py")

# What torchtitan 0.3.0's trainer, Llama 3 model and text data path import, at the versions pip's
# resolver picks for torchtitan 0.3.0's own requirements (checked 2026-11-27). Installed with
# --no-deps into a venv layered over this interpreter's packages (`overlay_venv`), so torch is
# the one already here and is never replaced; the rest (numpy, pyyaml, requests, tqdm, filelock,
# jinja2, packaging) come from this interpreter too. A test checks these pins against each other
# and against torchtitan's requirements with `pip check`.
TORCHTITAN_REQUIREMENTS = (
    f"torchtitan=={TORCHTITAN_VERSION}",
    "spmd_types==0.2.3",
    "tyro==1.0.17",
    "docstring_parser==0.18.0",
    "typeguard==4.6.1",  # tyro needs >= 4; jsii pins 2.13.3: why this is not in requirements-dev
    "torchdata==0.11.0",
    "tokenizers==0.23.3",
    "datasets==4.7.0",  # torchtitan 0.3.0: datasets<4.8
    "dill==0.4.0",
    "multiprocess==0.70.18",
    "xxhash==4.1.0",
    "pandas==3.1.1",
    "pyarrow==26.0.1",
    "fsspec==2026.2.0",
    "huggingface_hub==1.33.0",  # datasets 4.7: huggingface-hub<2.0
    "httpx==0.28.1",
    "httpcore==1.0.9",
    "tensorboard==2.21.0",  # torch.utils.tensorboard, imported by torchtitan's metrics
    "protobuf==7.36.2",
    "absl-py==2.5.1",
)
# torchtitan's requirements left out: only features the benchmark's job leaves off import them.
TORCHTITAN_LEFT_OUT = {
    "wandb": "metrics.enable_wandb",
    "einops": "Flux and the multimodal data path",
    "torch-checkpointing": "the alternative checkpointer (checkpointing is off)",
    "grpcio": "TensorBoard's server (only its event writer is imported)",
    "markdown": "TensorBoard's server",
    "tensorboard-data-server": "TensorBoard's server",
}
# Not triton, which torchtitan's model code imports: CUDA builds of torch bring the one they were
# built with, and a second one must not shadow it. (The CPU test adds one: the CPU wheel has none.)


def overlay_venv(path: Path) -> Path:
    """A venv whose packages shadow this interpreter's, which it still sees (torch included);
    returns its python. Not `--system-site-packages`: from inside a venv that would expose the
    base interpreter's packages, not this one's (where torch is)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    py = path / "bin" / "python"
    out = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    lines = [f"import site; site.addsitedir({d!r})" for d in ours if Path(d).is_dir()]
    (Path(out.stdout.strip()) / "zz_overlay.pth").write_text("\n".join(lines) + "\n")
    return py


def torchtitan_job(args: argparse.Namespace, shape: ModelShape, workdir: Path) -> dict[str, Any]:
    """torchtitan's job from the benchmark's arguments: the same model, batch, optimizer and
    schedule as ours (benchmarks/torchtitan_job.py turns it into torchtitan's config objects).
    torch-free, so what the benchmark asks for is testable without torchtitan."""
    o = OptimConfig()
    data = workdir / "torchtitan-data"
    global_batch = args.micro_batch * args.nproc * args.grad_accum
    scaling = (
        None
        if shape.rope_type == "default"
        else {
            "factor": shape.rope_factor,
            "low_freq_factor": shape.rope_low_freq_factor,
            "high_freq_factor": shape.rope_high_freq_factor,
            "original_max_position": shape.rope_original_max_position,
        }
    )
    return {
        "model": {
            "dim": shape.dim,
            "n_layers": shape.n_layers,
            "n_heads": shape.n_heads,
            "n_kv_heads": shape.n_kv_heads,
            "ffn_dim": shape.ffn_dim,
            "vocab_size": shape.vocab_size,
            "norm_eps": shape.norm_eps,
            "rope_theta": shape.rope_theta,
            "rope_scaling": scaling,
            "tie_embeddings": shape.tie_embeddings,
            "max_seq_len": args.seq_len,
        },
        # sdpa is refused for language models in 0.3.0 (document masking needs flex or varlen)
        "attn_backend": "flex",
        "training": {
            "local_batch_size": args.micro_batch,
            "global_batch_size": global_batch,
            "seq_len": args.seq_len,
            "max_norm": 1.0,
            "steps": args.warmup + args.timed,
        },
        "optimizer": {
            "lr": o.lr,
            "min_lr": o.min_lr,
            "betas": [o.beta1, o.beta2],
            "eps": o.eps,
            "weight_decay": o.weight_decay,
            "warmup_steps": 2,  # as ours_sets
        },
        "log_freq": args.log_every,
        "compile": True,
        "hf_assets_path": str(data / "tokenizer"),
        "dataset_path": str(data / "corpus"),
        "dump_folder": str(workdir / "torchtitan-out"),
    }


def prepare_torchtitan_data(py: Path, job: dict[str, Any], *, documents: int = 20000) -> None:
    """The corpus (one folder of JSON lines: load_dataset reads every JSON file in it) and a
    byte-level tokenizer with the model's vocabulary size."""
    corpus = Path(job["dataset_path"])
    corpus.mkdir(parents=True, exist_ok=True)
    _synthetic_corpus(corpus / "train.jsonl", documents)
    _byte_tokenizer(py, Path(job["hf_assets_path"]), job["model"]["vocab_size"])


def describe_torchtitan(py: Path, job_file: Path, env: dict[str, str]) -> dict[str, Any]:
    """torchtitan's own reading of the job (torchtitan_job.py describe): shapes, FLOPs, data."""
    out = subprocess.run(
        [str(py), str(TORCHTITAN_JOB), "describe", str(job_file)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"torchtitan_job.py describe failed:\n{out.stderr[-4000:]}")
    described: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return described


def torchtitan_differences(described: dict[str, Any], shape: ModelShape, seq_len: int) -> list[str]:
    """Where torchtitan's model (as `describe` reports it) is not our preset's: [] if equal.

    FLOPs: torchtitan counts 6 x every parameter except an untied embedding (a tied one is
    the output projection, counted since 0.3.0) plus the same attention term, so its figure is
    ours plus 6 x the norm weights."""
    scaled = shape.rope_type != "default"
    want: dict[str, Any] = {
        "dim": shape.dim,
        "n_layers": shape.n_layers,
        "n_heads": shape.n_heads,
        "n_kv_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab_size,
        "ffn_dim": shape.ffn_dim,
        "norm_eps": shape.norm_eps,
        "rope_theta": shape.rope_theta,
        "rope_scaling": "llama" if scaled else "none",
        "tied": shape.tie_embeddings,
        "nparams": shape.num_params(),
        "flops_per_token": flops_per_token(shape, seq_len).per_token
        + 6 * (2 * shape.n_layers + 1) * shape.dim,
    }
    if scaled:
        want["rope_factor"] = shape.rope_factor
        want["rope_low_freq_factor"] = shape.rope_low_freq_factor
        want["rope_high_freq_factor"] = shape.rope_high_freq_factor
        want["rope_original_max_position"] = shape.rope_original_max_position
    return [
        f"{key}: torchtitan {described.get(key)!r}, ours {value!r}"
        for key, value in want.items()
        if described.get(key) != value
    ]


_TITAN_LINE = re.compile(
    r"step:\s*(?P<step>\d+).*?memory:\s*(?P<mem>[\d.]+)GiB.*?tps:\s*(?P<tps>[\d,]+)"
    r"(?:.*?mfu:\s*(?P<mfu>[\d.]+)%)?"
)


def run_torchtitan(args: argparse.Namespace, bench: Bench, workdir: Path) -> dict[str, Any]:
    if args.torchtitan_wheels is None or not args.torchtitan_wheels.is_dir():
        return {"status": "not measured: --torchtitan-wheels DIR is required (no network)"}
    py = overlay_venv(workdir / "torchtitan-venv")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--find-links",
         str(args.torchtitan_wheels), *TORCHTITAN_REQUIREMENTS],
        check=True,
    )  # fmt: skip
    job = torchtitan_job(args, bench.shape, workdir)
    job_file = workdir / "torchtitan-job.json"
    job_file.write_text(json.dumps(job, indent=1))
    prepare_torchtitan_data(py, job)
    env = dict(bench.env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    described = describe_torchtitan(py, job_file, env)
    differences = torchtitan_differences(described, bench.shape, args.seq_len)
    if differences:
        return {"status": "not measured: torchtitan's model is not ours: " + "; ".join(differences)}
    log = workdir / "torchtitan.log"
    cmd = [str(py), "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           "--standalone", str(TORCHTITAN_JOB), "train", str(job_file)]  # fmt: skip
    with log.open("w") as out:
        rc = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
        ).returncode
    if rc != 0:
        return {"status": f"not measured: torchtitan exited {rc}; see {log}"}
    steps = [m for m in map(_TITAN_LINE.search, log.read_text().splitlines()) if m]
    timed = [m for m in steps if int(m["step"]) > args.warmup]
    if not timed:
        return {"status": f"not measured: no step lines after warm-up in {log}"}
    result: dict[str, Any] = {
        "status": "measured",
        "version": described["torchtitan"],
        "tokens_per_s": statistics.median(
            float(m["tps"].replace(",", "")) * args.nproc for m in timed
        ),  # torchtitan's tps is per device
        "memory_gib": max(float(m["mem"]) for m in timed),
        "flops_per_token_torchtitan": described["flops_per_token"],
    }
    if all(m["mfu"] for m in timed):
        result["mfu_reported"] = statistics.median(float(m["mfu"]) / 100 for m in timed)
    return result


def _synthetic_corpus(path: Path, documents: int = 20000) -> None:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    with path.open("w") as f:
        for i in range(documents):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(600))
            f.write(json.dumps({"text": text}) + "\n")


def _byte_tokenizer(py: Path, folder: Path, vocab_size: int) -> None:
    """A generated byte-level BPE tokenizer.json with the model's vocabulary size."""
    folder.mkdir(parents=True, exist_ok=True)
    script = f"""
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 byte symbols
vocab = {{c: i for i, c in enumerate(alphabet)}}
vocab.update({{f"<|reserved_{{i}}|>": i for i in range(len(alphabet), {vocab_size})}})
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.save({str(folder / "tokenizer.json")!r})
"""
    subprocess.run([str(py), "-c", script], check=True)


if __name__ == "__main__":
    main()
