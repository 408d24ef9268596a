"""The real-Slurm tests' fixtures: one local cluster per session (`hyperpod_kit.local.slurm`), and
the training job exactly as `hyperpod-kit jobs` renders it (the local variant), run under it.

Skipped, with the reason, only where Slurm cannot be installed or started; under `CI=true` that is
a failure instead, because CI installs Slurm (`.ci/run`) and these tests must run there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hyperpod_kit.config import load_environment
from hyperpod_kit.config.derived import job_partition
from hyperpod_kit.jobs import LocalRun, render_jobs
from hyperpod_kit.local import LocalSlurm, SlurmJob, SlurmUnavailableError
from hyperpod_kit.local.slurm import free_port
from tests.conftest import DEFAULT_FILE, default_data, merge

# The default environment, with the job scaled to the bundled trainer's tiny preset on CPU: one
# node, two ranks, a few seconds of training with a checkpoint every 10 steps, uint16 token shards
# under /fsx. The compute group becomes a type with GPUs to spare, so two ranks per node is valid.
STEPS = 40
CHECKPOINT_EVERY = 10
GLOBAL_BATCH = 16
VOCAB = 256  # the tiny preset's
COMPUTE_TYPE = "ml.g5.12xlarge"
JOB = {
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


def job_environment() -> dict[str, Any]:
    data = merge(default_data(), {"trainer": {"job": JOB}})
    for group in data["cluster"]["instance_groups"]:
        if group["role"] == "compute":
            group["instance_type"] = COMPUTE_TYPE
    return data


# What a job gets besides a clean login environment: gloo on loopback, like the trainer tests,
# and a rendezvous port of its own (the script's default, 29500, may be taken on a shared machine).
JOB_ENV = {"GLOO_SOCKET_IFNAME": "lo"}
JOB_TIMEOUT_S = 240.0


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"Slurm must run under CI (.ci/run installs it): {reason}", pytrace=False)
    pytest.skip(f"no local Slurm: {reason}")


@pytest.fixture(scope="session")
def local_slurm() -> Iterator[LocalSlurm]:
    """One cluster for the session, its partition the default environment's compute partition;
    stopped by pid at the end, whatever happened."""
    partition = job_partition(load_environment(DEFAULT_FILE).config) or "compute"
    slurm = LocalSlurm(partition=partition)
    try:
        slurm.start()
    except SlurmUnavailableError as e:
        _unavailable(str(e))
    try:
        yield slurm
    finally:
        slurm.stop()


@contextlib.contextmanager
def job_slot(slurm: LocalSlurm) -> Iterator[list[str]]:
    """Afterwards, whatever happened, jobs whose ids were added to the list are cancelled and the
    node is back: the next test finds the cluster as the session started it."""
    submitted: list[str] = []
    try:
        yield submitted
    finally:
        for job_id in submitted:
            if not slurm.job(job_id).finished:
                slurm.cancel(job_id)
                slurm.wait_finished(job_id, 60)
        slurm.return_node()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed Slurm test shows the queue, the node and the daemons' logs."""
    report = yield
    slurm = getattr(item, "funcargs", {}).get("local_slurm")
    if report.failed and isinstance(slurm, LocalSlurm):
        report.sections.append(("local Slurm", slurm.diagnostics()))
    return report


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
    return {e["step"]: e["loss"] for e in of(found, "step")}


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
    def prepare(cls, folder: Path) -> TrainingJob:
        folder.mkdir(parents=True)
        environment = folder / "environment.yaml"
        environment.write_text(yaml.safe_dump(job_environment(), sort_keys=False))
        config = load_environment(environment).config  # raises on any error finding
        fsx = folder / "fsx"
        write_token_shards(fsx / "data" / "tokens")
        (job,) = render_jobs(config, local=LocalRun(fsx_root=fsx, python=sys.executable))
        assert job.kind == "sbatch"
        script = folder / job.filename
        script.write_text(job.text)
        return cls(folder, environment, fsx, script)

    @property
    def checkpoints(self) -> Path:
        return self.fsx / "checkpoints"

    def submit(self, slurm: LocalSlurm) -> str:
        env = {**JOB_ENV, "HYPERPOD_RDZV_PORT": str(free_port())}
        return slurm.sbatch(self.script, workdir=self.folder, env=env)

    def wait_for_checkpoint(self, slurm: LocalSlurm, job_id: str, step: int) -> int:
        """Wait until a complete checkpoint at `step` or later exists, while the job runs."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            done = [s for s in complete_steps(self.checkpoints) if s >= step]
            if done:
                return done[-1]
            job = slurm.job(job_id)
            assert job.state in ("PENDING", "RUNNING"), f"{job}\n{explain(job)}"
            time.sleep(0.1)
        raise AssertionError(f"no checkpoint at step {step} or later\n{explain(slurm.job(job_id))}")


def explain(job: SlurmJob) -> str:
    try:
        text = job.stdout.read_text(errors="replace")
    except (KeyError, OSError) as e:
        return f"(no output: {e})"
    return f"--- {job.stdout} (tail)\n{text[-6000:]}"


@dataclass(frozen=True)
class CompletedRun:
    job: SlurmJob
    training: TrainingJob
    output: str
    events: list[dict[str, Any]]


@pytest.fixture(scope="session")
def uninterrupted(
    local_slurm: LocalSlurm, tmp_path_factory: pytest.TempPathFactory
) -> CompletedRun:
    """The job run once under Slurm from start to end: the reference for every interrupted run
    (the trainer is deterministic on CPU for the same world size)."""
    training = TrainingJob.prepare(tmp_path_factory.mktemp("slurm") / "uninterrupted")
    with job_slot(local_slurm) as submitted:
        submitted.append(job_id := training.submit(local_slurm))
        job = local_slurm.wait_finished(job_id, JOB_TIMEOUT_S)
    output = job.stdout.read_text(errors="replace")
    assert job.state == "COMPLETED", f"{job}\n{explain(job)}"
    return CompletedRun(job, training, output, events(output))


@pytest.fixture
def slot(local_slurm: LocalSlurm) -> Iterator[list[str]]:
    """`job_slot` for one test."""
    with job_slot(local_slurm) as submitted:
        yield submitted
