"""The benchmark's torchtitan job, checked on CPU against the pinned torchtitan (no GPU needed).

A throwaway venv layered over this interpreter's packages (the pinned torch 2.13.0 is reused,
never replaced) gets the benchmark's pinned torchtitan packages from the package registry with
--no-deps. There, the job built from the benchmark's own arguments goes through torchtitan's
ConfigManager and model builder (benchmarks/torchtitan_job.py describe): the model must have our
preset's shapes and torchtitan's FLOPs per token must agree with flops.py, so an API drift in
torchtitan, or a wrong job, fails here and not on a lent GPU.

Why not pins in requirements-dev.txt: tyro (torchtitan's config parser) needs typeguard >= 4,
which jsii (the CDK) pins to 2.13.3, so the dev venv cannot hold both; and triton, which
torchtitan's model code imports, could change what torch.compile does in the trainer's CPU
tests. Skipped only if the registry cannot be reached, and that skip fails under CI=true.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.trainer import (
    _TITAN_LINE,
    TORCHTITAN_LEFT_OUT,
    TORCHTITAN_REQUIREMENTS,
    TORCHTITAN_VERSION,
    build_parser,
    describe_torchtitan,
    overlay_venv,
    prepare_torchtitan_data,
    torchtitan_differences,
    torchtitan_job,
)
from hyperpod_trainer.flops import flops_per_token
from hyperpod_trainer.presets import PRESETS

# pip's words when no registry answered (not: a registry lacks a version). Every pinned package
# is on the registry, so "from versions: none" means none was listed: nothing was reached.
UNREACHABLE = re.compile(
    r"\(from versions: none\)|NewConnectionError|ConnectTimeoutError|Name or service not known|"
    r"Temporary failure in name resolution|Network is unreachable|Connection refused|ProxyError"
)
PIP_TIMEOUT_S = 1500  # the first run downloads about 300 MB (triton, pyarrow)

# torchtitan's model code imports triton. The CPU torch wheel has none (CUDA builds bring their
# own, which is why the benchmark's list leaves it out): this one is imported here, never run.
TRITON_WITHOUT_CUDA = "triton==3.6.0"


def torchtitan_requirements() -> list[str]:
    extra = [] if importlib.util.find_spec("triton") else [TRITON_WITHOUT_CUDA]
    return [*TORCHTITAN_REQUIREMENTS, *extra]


def _unreachable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the package registry must be reachable under CI: {reason}", pytrace=False)
    pytest.skip(f"package registry unreachable: {reason}")


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


@pytest.fixture(scope="module")
def titan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The torchtitan venv's python (about 1 GB, removed afterwards)."""
    root = tmp_path_factory.mktemp("torchtitan")
    py = overlay_venv(root / "venv")
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
         *torchtitan_requirements()],
        capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False,
    )  # fmt: skip
    if install.returncode != 0:
        output = install.stdout + install.stderr
        found = UNREACHABLE.search(output)
        if found:
            line = next(x for x in output.splitlines() if found.group(0) in x)
            _unreachable(line.strip()[:300])
        pytest.fail(f"pip install failed:\n{output[-4000:]}", pytrace=False)
    try:
        yield py
    finally:
        shutil.rmtree(root / "venv", ignore_errors=True)


def _env(tmp: Path) -> dict[str, str]:
    """Offline: nothing but the registry may be reached, and only by pip."""
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp / "hf"))


@pytest.mark.slow
def test_pins_agree_with_torchtitans_requirements(titan: Path) -> None:
    """`pip check` on the pinned packages: nothing missing but what is left out on purpose,
    no version outside what torchtitan and the others ask for."""
    check = subprocess.run(
        [str(titan), "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    ours = {_name(r) for r in TORCHTITAN_REQUIREMENTS}
    wrong = []
    for line in check.stdout.splitlines():
        if _name(line) not in ours:
            continue  # this interpreter's own packages (jsii's typeguard pin, ...)
        missing = re.search(r"requires (\S+), which is not installed", line)
        if missing and _name(missing.group(1)) in TORCHTITAN_LEFT_OUT:
            continue
        wrong.append(line)
    assert not wrong, "\n".join(wrong)


# The benchmark's documented GPU comparison, and its CPU defaults under --compare-torchtitan.
ARGUMENTS = {
    "llama-1b": ["--device", "cuda", "--nproc", "1", "--preset", "llama-1b", "--seq-len",
                 "2048", "--micro-batch", "4", "--grad-accum", "1", "--compare-torchtitan"],
    "small": ["--device", "cuda", "--compare-torchtitan"],
    "llama-8b": ["--device", "cuda", "--nproc", "8", "--preset", "llama-8b", "--seq-len",
                 "8192", "--micro-batch", "1", "--grad-accum", "2", "--compare-torchtitan"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(ARGUMENTS))
def test_job_builds_our_model_in_torchtitan(titan: Path, tmp_path: Path, preset: str) -> None:
    args = build_parser().parse_args(ARGUMENTS[preset])
    shape = PRESETS[args.preset]
    job = torchtitan_job(args, shape, tmp_path)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    prepare_torchtitan_data(titan, job, documents=40)
    described = describe_torchtitan(titan, job_file, _env(tmp_path))

    assert described["torchtitan"] == TORCHTITAN_VERSION
    assert torchtitan_differences(described, shape, args.seq_len) == []
    # The same facts, spelled out here rather than trusted to the function above.
    params = described["parameters"]
    hd = shape.head_dim
    assert described["n_layers"] == shape.n_layers
    assert params["layers.0.attention.qkv_linear.wqkv.weight"] == [
        (shape.n_heads + 2 * shape.n_kv_heads) * hd,
        shape.dim,
    ]
    assert params["layers.0.attention.wo.weight"] == [shape.dim, shape.n_heads * hd]
    assert params["layers.0.feed_forward.w1.weight"] == [shape.ffn_dim, shape.dim]
    assert params["tok_embeddings.weight"] == [shape.vocab_size, shape.dim]
    assert described["tied"] is shape.tie_embeddings
    assert ("lm_head.weight" in params) is not shape.tie_embeddings  # one tensor when tied
    assert described["rope_theta"] == shape.rope_theta
    assert described["nparams"] == shape.num_params()
    # torchtitan 0.3.0 counts a tied output projection (all parameters, the shared one once) and
    # the norm weights; flops.py counts the output projection and not the norms.
    norms = (2 * shape.n_layers + 1) * shape.dim
    ours = flops_per_token(shape, args.seq_len).per_token
    assert described["flops_per_token"] == ours + 6 * norms
    assert (described["flops_per_token"] - ours) / ours < 1e-3
    # The job carries the benchmark's batch, length and steps, and torchtitan's loader reads
    # our corpus through our tokenizer.
    assert described["training"] == {
        "local_batch_size": args.micro_batch,
        "global_batch_size": args.micro_batch * args.nproc * args.grad_accum,
        "seq_len": args.seq_len,
        "steps": args.warmup + args.timed,
        "max_norm": 1.0,
    }
    assert described["checkpoint"] is False
    assert described["compile"] is True
    data = described["data"]
    assert data["vocab_size"] == shape.vocab_size
    assert data["inputs"]["input"] == [args.micro_batch, args.seq_len]
    assert data["labels"] == [args.micro_batch, args.seq_len]
    assert data["max_token"] < shape.vocab_size


def test_torchtitan_step_line_parses() -> None:
    """torchtitan 0.3.0's step line (components/metrics.py, colours included)."""
    red, green, blue, cyan, magenta, reset = (f"\033[{c}m" for c in (31, 32, 34, 36, 35, 39))
    line = (
        f"[rank0]:[titan] 2026-11-27 12:00:00,000 - root - INFO - {red}step: 20  "
        f"{green}loss:  7.12345  grad_norm:  1.2345  memory: 12.34GiB(15.60%)  "
        f"{blue}tps: 12,345  {cyan}tflops: 98.76  {magenta}mfu: 9.99%{reset}"
    )
    m = _TITAN_LINE.search(line)
    assert m is not None
    assert (m["step"], m["mem"], m["tps"], m["mfu"]) == ("20", "12.34", "12,345", "9.99")
    no_mfu = _TITAN_LINE.search(line.replace("9.99%", "N/A"))
    assert no_mfu is not None and no_mfu["mfu"] is None


def test_cpu_venv_adds_triton_only_without_one() -> None:
    """torchtitan's model imports triton; the CPU torch wheel has none, CUDA builds bring it."""
    extra = torchtitan_requirements()[len(TORCHTITAN_REQUIREMENTS) :]
    has_triton = importlib.util.find_spec("triton") is not None
    assert [_name(r) for r in extra] == ([] if has_triton else ["triton"])
    names = {_name(r) for r in TORCHTITAN_REQUIREMENTS}
    assert not names & {"torch", "triton"}, "the venv must use this interpreter's torch"
