"""Benchmark the bundled trainer: tokens/s, MFU and memory against a floor from the same run.

    python benchmarks/trainer.py                          # CPU: 2 ranks, gloo, "small" preset
    python benchmarks/trainer.py --device cuda --nproc 1 --preset llama-1b --seq-len 2048 \\
        --micro-batch 4 --grad-accum 1 --compare-torchtitan --torchtitan-wheels /fsx/wheels
    python benchmarks/trainer.py --ab train.defer_grad_sync=false   # a lever, off vs default

Per repeat (default 3; launches interleaved, their order rotated; medians reported):

- **ours**: `torchrun -m hyperpod_trainer` with checkpointing on (async saves every
  `--ckpt-every` steps, at least 3 inside the timed window) and its data loader;
- **bare** (CPU, and GPU unless `--no-bare`): benchmarks/bare_loop.py, the same model, batch
  and optimizer as a plain module in a bare loop with no FSDP, checkpoints or data loader, at the
  same world size; ours / bare is the framework overhead as a number (goal >= 0.95);
- **ours + SET** for each `--ab SET`: the same as ours with those overrides, to measure a lever;
- **torchtitan** (`--compare-torchtitan`, CUDA only): torchtitan's Llama 3 trainer, pinned,
  installed from local wheels into its own venv, on the nearest equal configuration (untied
  output projection on both sides); ours / torchtitan.

Tokens/s is wall-clock: the arrival times of rank 0's step lines at step `--warmup` and at step
`--warmup + --timed` (>= 10 and >= 50), so it includes everything that blocks training, saves
included. FLOPs per token and MFU come from hyperpod_trainer/flops.py (torchtitan's convention,
output projection counted even when tied) and its dated table of dense BF16 peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hyperpod_trainer.flops import PEAKS_AS_OF, flops_per_token, peak_tflops
from hyperpod_trainer.local import free_port, torchrun_command
from hyperpod_trainer.presets import PRESETS

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
        shape = PRESETS[args.preset]
        if args.compare_torchtitan:
            shape = replace(shape, tie_embeddings=False)  # torchtitan's Llama 3 is untied
        self.shape = shape

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
        if self.shape.tie_embeddings != PRESETS[a.preset].tie_embeddings:
            sets.append("model.tie_embeddings=false")
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


def main() -> None:
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
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
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
# Written without a GPU to run it on: the path is complete but has never been executed. The GPU
# machines have no network, so everything comes from --torchtitan-wheels, prepared where there is
# network with:  pip download torchtitan==0.3.0 tokenizers tomli -d WHEELS  (torch excluded: the
# venv sees the image's CUDA torch through --system-site-packages).

_TITAN_LINE = re.compile(
    r"step:\s*(?P<step>\d+).*?memory:\s*(?P<mem>[\d.]+)GiB.*?tps:\s*(?P<tps>[\d,]+)"
    r"(?:.*?mfu:\s*(?P<mfu>[\d.]+)%)?"
)

_TITAN_LAUNCHER = """
import sys
from torchtitan.models import llama3
from torchtitan.models.llama3 import TransformerModelArgs
# The nearest equal configuration to hyperpod_trainer's preset (untied output projection).
llama3.llama3_args["hyperpod"] = TransformerModelArgs(**{args})
from torchtitan.train import main
sys.exit(main())
"""


def run_torchtitan(args: argparse.Namespace, bench: Bench, workdir: Path) -> dict[str, Any]:
    if args.torchtitan_wheels is None or not args.torchtitan_wheels.is_dir():
        return {"status": "not measured: --torchtitan-wheels DIR is required (no network)"}
    venv = workdir / "torchtitan-venv"
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-index", "--find-links",
         str(args.torchtitan_wheels), f"torchtitan=={TORCHTITAN_VERSION}", "tokenizers"],
        check=True,
    )  # fmt: skip
    shape = bench.shape
    model_args = {
        "dim": shape.dim,
        "n_layers": shape.n_layers,
        "n_heads": shape.n_heads,
        "n_kv_heads": shape.n_kv_heads,
        "vocab_size": shape.vocab_size,
        "ffn_dim_multiplier": shape.ffn_dim / int(8 * shape.dim / 3),
        "multiple_of": 256,
        "rope_theta": shape.rope_theta,
        "norm_eps": shape.norm_eps,
        "max_seq_len": args.seq_len,
    }
    data = workdir / "torchtitan-data"
    data.mkdir(exist_ok=True)
    _synthetic_corpus(data / "train.jsonl")
    _byte_tokenizer(py, data / "tokenizer", shape.vocab_size)
    (workdir / "titan_launch.py").write_text(_TITAN_LAUNCHER.replace("{args}", repr(model_args)))
    toml = workdir / "torchtitan.toml"
    toml.write_text(
        f"""[job]
dump_folder = "{workdir / "torchtitan-out"}"
[metrics]
log_freq = {args.log_every}
[model]
name = "llama3"
flavor = "hyperpod"
hf_assets_path = "{data / "tokenizer"}"
[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8
implementation = "fused"
[lr_scheduler]
warmup_steps = 2
[training]
local_batch_size = {args.micro_batch}
global_batch_size = {bench.global_batch}
seq_len = {args.seq_len}
max_norm = 1.0
steps = {bench.last_step}
dataset = "c4_test"
dataset_path = "{data}"
mixed_precision_param = "bfloat16"
[parallelism]
data_parallel_shard_degree = -1
[compile]
enable = true
components = ["model", "loss"]
[activation_checkpoint]
mode = "none"
[checkpoint]
enable = false
"""
    )
    log = workdir / "torchtitan.log"
    launcher = str(workdir / "titan_launch.py")
    cmd = [str(py), "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           "--standalone", launcher, "--job.config_file", str(toml)]  # fmt: skip
    with log.open("w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0:
        return {"status": f"not measured: torchtitan exited {rc}; see {log}"}
    steps = [m for m in map(_TITAN_LINE.search, log.read_text().splitlines()) if m]
    timed = [m for m in steps if int(m["step"]) > args.warmup]
    if not timed:
        return {"status": f"not measured: no step lines after warm-up in {log}"}
    result: dict[str, Any] = {
        "status": "measured",
        "version": TORCHTITAN_VERSION,
        "tokens_per_s": statistics.median(
            float(m["tps"].replace(",", "")) * args.nproc for m in timed
        ),  # torchtitan's tps is per device
        "memory_gib": max(float(m["mem"]) for m in timed),
    }
    if all(m["mfu"] for m in timed):
        result["mfu_reported"] = statistics.median(float(m["mfu"]) / 100 for m in timed)
    return result


def _synthetic_corpus(path: Path) -> None:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    with path.open("w") as f:
        for i in range(20000):
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
tok.save("{folder / "tokenizer.json"}")
"""
    subprocess.run([str(py), "-c", script], check=True)


if __name__ == "__main__":
    main()
