"""Training-job rules: batch arithmetic and elastic bounds, checked before a job is rendered."""

from __future__ import annotations

from collections.abc import Iterator

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import ElasticConfig, EnvironmentConfig
from hyperpod_kit.config.validators import validator

JOB = "trainer.job"


def _within(elastic: ElasticConfig, n: int) -> bool:
    return elastic.min_replicas <= n <= elastic.max_replicas


def _listing(values: list[int], most: int = 5) -> str:
    shown = ", ".join(str(v) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


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
    outside = [n for n in (elastic.replica_discrete_values or []) if not _within(elastic, n)]
    if outside:
        yield Finding(
            Level.ERROR,
            f"{at}.replica_discrete_values",
            f"{_listing(outside)} {'is' if len(outside) == 1 else 'are'} outside "
            f"[{elastic.min_replicas}, {elastic.max_replicas}]",
            "keep every value within min_replicas..max_replicas",
        )
    # Past global / (micro x ranks per replica) replicas nothing divides: a range scan stops
    # one step beyond, so a huge max_replicas costs nothing.
    step = elastic.replica_increment_step or 1
    limit = job.global_batch_size // (job.micro_batch_size * job.processes_per_node)
    sizes = elastic.replica_discrete_values or range(
        elastic.min_replicas, min(elastic.max_replicas, limit + step) + 1, step
    )
    ranks = job.processes_per_node
    failing = [
        n
        for n in sizes
        if _within(elastic, n)
        and not _divides(job.global_batch_size, job.micro_batch_size, n * ranks)
    ]
    if failing:
        yield Finding(
            Level.ERROR,
            f"{JOB}.global_batch_size",
            f"with {_listing(failing)} replicas ({ranks} rank{'s' if ranks > 1 else ''} per "
            f"replica) the global batch "
            f"{job.global_batch_size} does not split into micro batches of {job.micro_batch_size}",
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
