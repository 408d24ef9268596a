"""The real-Slurm tests' fixtures: one local cluster per session (`hyperpod_kit.local.slurm`), and
the training job exactly as `hyperpod-kit jobs` renders it (the local variant), run under it.

Skipped, with the reason, only where Slurm cannot be installed or started; under `CI=true` that is
a failure instead, because CI installs Slurm (`.ci/run`) and these tests must run there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hyperpod_kit.config.derived import job_partition
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.local import LocalSlurm, SlurmJob, SlurmUnavailableError
from hyperpod_kit.local.training import (  # the job and its output, shared with `make demo`
    CHECKPOINT_EVERY,
    GLOBAL_BATCH,
    JOB_TIMEOUT_S,
    STEPS,
    TrainingJob,
    complete_steps,
    events,
    explain,
    job_environment,
    losses,
    of,
)
from tests.conftest import DEFAULT_FILE

__all__ = [
    "CHECKPOINT_EVERY",
    "GLOBAL_BATCH",
    "JOB_TIMEOUT_S",
    "STEPS",
    "CompletedRun",
    "TrainingJob",
    "complete_steps",
    "events",
    "explain",
    "job_environment",
    "losses",
    "of",
]


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
