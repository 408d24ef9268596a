"""Training-job rules: batch arithmetic and elastic bounds, checked before a job is rendered."""

from __future__ import annotations

from collections.abc import Iterator

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import validator

JOB = "trainer.job"


def _nearest_multiple(value: int, unit: int) -> int:
    return unit * max(1, round(value / unit))


def _divides(global_batch: int, micro: int, world: int) -> bool:
    return global_batch % (micro * world) == 0


@validator("job-global-batch", area="trainer")
def check_global_batch(config: EnvironmentConfig) -> Iterator[Finding]:
    """The global batch splits into micro batches on every rank."""
    job = config.trainer.job
    world = job.nodes * job.processes_per_node
    if not _divides(job.global_batch_size, job.micro_batch_size, world):
        yield Finding(
            Level.ERROR,
            f"{JOB}.global_batch_size",
            f"{job.global_batch_size} is not a multiple of micro_batch_size x ranks "
            f"({job.micro_batch_size} x {world})",
            f"use {_nearest_multiple(job.global_batch_size, job.micro_batch_size * world)}",
        )


@validator("job-elastic", area="trainer")
def check_elastic(config: EnvironmentConfig) -> Iterator[Finding]:
    """Elastic bounds are ordered, and the global batch splits at every replica count."""
    job = config.trainer.job
    elastic = job.elastic
    if elastic is None:
        return
    at = f"{JOB}.elastic"
    if elastic.min_replicas > elastic.max_replicas:
        yield Finding(
            Level.ERROR,
            f"{at}.min_replicas",
            f"min_replicas {elastic.min_replicas} is above max_replicas {elastic.max_replicas}",
            "swap them",
        )
    if elastic.replica_increment_step is not None and elastic.replica_discrete_values is not None:
        yield Finding(
            Level.ERROR,
            f"{at}.replica_discrete_values",
            "replica_increment_step and replica_discrete_values are exclusive",
            "keep one",
        )
    sizes = elastic.replica_discrete_values or list(
        range(elastic.min_replicas, elastic.max_replicas + 1, elastic.replica_increment_step or 1)
    )
    for n in sizes:
        if not elastic.min_replicas <= n <= elastic.max_replicas:
            yield Finding(
                Level.ERROR,
                f"{at}.replica_discrete_values",
                f"{n} is outside [{elastic.min_replicas}, {elastic.max_replicas}]",
                "keep every value within min_replicas..max_replicas",
            )
        elif not _divides(job.global_batch_size, job.micro_batch_size, n * job.processes_per_node):
            yield Finding(
                Level.ERROR,
                f"{JOB}.global_batch_size",
                f"with {n} replicas ({n * job.processes_per_node} ranks) the global batch "
                f"{job.global_batch_size} does not split into micro batches of "
                f"{job.micro_batch_size}",
                "choose a global batch divisible by micro_batch_size x ranks at every size",
            )
    if not elastic.min_replicas <= job.nodes <= elastic.max_replicas:
        yield Finding(
            Level.ERROR,
            f"{JOB}.nodes",
            f"{job.nodes} nodes is outside the elastic range "
            f"[{elastic.min_replicas}, {elastic.max_replicas}]",
            "start within the range",
        )
