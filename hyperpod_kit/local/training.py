"""The environment's training job rendered for this machine and run under the local Slurm: the
bundled trainer's tiny preset on CPU, and how to read what it did (its JSON lines, its complete
checkpoints).

Shared by the real-Slurm tests (tests/integration/slurm) and `make demo`, so both run the very job
`hyperpod-kit jobs` renders (the local variant: no container, `--requeue`, FSx a local folder).
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.jobs import LocalRun, render_jobs
from hyperpod_kit.local.slurm import LocalSlurm, SlurmError, SlurmJob, free_port
from hyperpod_kit.paths import DEFAULT_ENVIRONMENT

# The default environment, with the job scaled to the bundled trainer's tiny preset on CPU: one
# node, two ranks, a few seconds of training with a checkpoint every 10 steps, uint16 token shards
# under /fsx. The compute group becomes a type with GPUs to spare, so two ranks per node is valid.
STEPS = 40
CHECKPOINT_EVERY = 10
GLOBAL_BATCH = 16
VOCAB = 256  # the tiny preset's
COMPUTE_TYPE = "ml.g5.12xlarge"
JOB: dict[str, Any] = {
    "preset": "tiny",
    "nodes": 1,
    "processes_per_node": 2,
    "global_batch_size": GLOBAL_BATCH,
    "micro_batch_size": 4,
    "seq_len": 128,
    "max_steps": STEPS,
    "checkpoint_every": CHECKPOINT_EVERY,
    "keep_last": 3,
    "token_dtype": "uint16",
    "data_path": "/fsx/data/tokens",
    "checkpoint_dir": "/fsx/checkpoints",
}
# What a job gets besides a clean login environment: gloo on loopback, like the trainer tests,
# and a rendezvous port of its own (the script's default, 29500, may be taken on a shared machine).
JOB_ENV = {"GLOO_SOCKET_IFNAME": "lo"}
JOB_TIMEOUT_S = 240.0


def default_environment() -> dict[str, Any]:
    """environments/default.yaml as data."""
    data = yaml.safe_load(DEFAULT_ENVIRONMENT.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{DEFAULT_ENVIRONMENT} is not a mapping")
    return data


def job_environment(
    *,
    steps: int = STEPS,
    checkpoint_every: int = CHECKPOINT_EVERY,
    monitoring: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The default environment with the local job (and, if given, a `monitoring` section)."""
    data = copy.deepcopy(default_environment())
    job = {**JOB, "max_steps": steps, "checkpoint_every": checkpoint_every}
    data.setdefault("trainer", {}).setdefault("job", {}).update(job)
    for group in data["cluster"]["instance_groups"]:
        if group["role"] == "compute":
            group["instance_type"] = COMPUTE_TYPE
    if monitoring is not None:
        data["monitoring"] = copy.deepcopy(monitoring)
    return data


# --- the trainer's output --------------------------------------------------------------------


def events(text: str) -> list[dict[str, Any]]:
    """The trainer's JSON lines in a job's output (stderr and other ranks share the file)."""
    found = []
    for line in text.splitlines():
        if line.startswith('{"event"'):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def of(found: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in found if e["event"] == name]


def losses(found: list[dict[str, Any]]) -> dict[int, float]:
    return {int(e["step"]): float(e["loss"]) for e in of(found, "step")}


_STEP_DIR = re.compile(r"^step_(\d+)$")


def complete_steps(checkpoints: Path) -> list[int]:
    """Steps with a complete checkpoint, by the trainer's rule (docs/trainer.md): a `step_N/`
    folder holding COMPLETE.json and DCP's .metadata; `.tmp` folders never count."""
    if not checkpoints.is_dir():
        return []
    return sorted(
        int(m.group(1))
        for p in checkpoints.iterdir()
        if (m := _STEP_DIR.match(p.name))
        and (p / "COMPLETE.json").is_file()
        and (p / ".metadata").is_file()
    )


def explain(job: SlurmJob) -> str:
    """The tail of a job's output: what to read when it did not do what was expected."""
    try:
        text = job.stdout.read_text(errors="replace")
    except (KeyError, OSError) as e:
        return f"(no output: {e})"
    return f"--- {job.stdout} (tail)\n{text[-6000:]}"


# --- the job ---------------------------------------------------------------------------------


def write_token_shards(folder: Path, *, shards: int = 2, tokens: int = 40_000) -> None:
    """uint16 `.npy` shards of learnable runs (a start and a stride mod the vocabulary), so the
    loss moves; the same files every time (fixed seed)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for shard in range(shards):
        runs, total = [], 0
        while total < tokens:
            start, stride = int(rng.integers(VOCAB)), int(rng.choice([1, 3, 5, 7]))
            run = (start + stride * np.arange(int(rng.integers(16, 64)))) % VOCAB
            runs.append(run)
            total += len(run)
        np.save(folder / f"shard_{shard:03d}.npy", np.concatenate(runs).astype(np.uint16))


@dataclass
class TrainingJob:
    """The environment's training job rendered for this machine: an environment file, a local
    FSx root with token shards, and the sbatch script `render_jobs(..., local=...)` writes."""

    folder: Path
    environment: Path
    fsx: Path
    script: Path

    @classmethod
    def prepare(cls, folder: Path, data: dict[str, Any] | None = None) -> TrainingJob:
        """Render the job of environment `data` (default: `job_environment()`) into `folder`."""
        folder.mkdir(parents=True)
        environment = folder / "environment.yaml"
        environment.write_text(yaml.safe_dump(data or job_environment(), sort_keys=False))
        config = load_environment(environment).config  # raises on any error finding
        fsx = folder / "fsx"
        write_token_shards(fsx / "data" / "tokens")
        (job,) = render_jobs(config, local=LocalRun(fsx_root=fsx, python=sys.executable))
        if job.kind != "sbatch":
            raise ValueError(f"expected an sbatch job for the local Slurm, got {job.kind}")
        script = folder / job.filename
        script.write_text(job.text)
        return cls(folder, environment, fsx, script)

    @property
    def checkpoints(self) -> Path:
        return self.fsx / "checkpoints"

    def submit(self, slurm: LocalSlurm, *, args: Sequence[str] = ()) -> str:
        """sbatch the job (`args`: more sbatch options, such as --account)."""
        env = {**JOB_ENV, "HYPERPOD_RDZV_PORT": str(free_port())}
        return slurm.sbatch(self.script, workdir=self.folder, env=env, args=args)

    def wait_for_checkpoint(
        self, slurm: LocalSlurm, job_id: str, step: int, timeout: float = JOB_TIMEOUT_S
    ) -> int:
        """Wait until a complete checkpoint at `step` or later exists, while the job runs; the
        newest such step. SlurmError if the job stops running first, or on the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [s for s in complete_steps(self.checkpoints) if s >= step]
            if done:
                return done[-1]
            job = slurm.job(job_id)
            if job.state not in ("PENDING", "RUNNING"):
                raise SlurmError(f"{job} before a checkpoint at step {step}\n{explain(job)}")
            time.sleep(0.1)
        raise SlurmError(f"no checkpoint at step {step} or later\n{explain(slurm.job(job_id))}")
