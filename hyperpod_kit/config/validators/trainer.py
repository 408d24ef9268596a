"""Training-job rules, checked before a job is rendered: the group it runs on, ranks against GPUs,
paths on the shared file system, batch arithmetic, elastic bounds, and the trainer's own checks."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hyperpod_kit.config.derived import (
    FSX_MOUNT,
    group_facts,
    job_group,
    processes_per_node,
    trainer_settings,
    worker_groups,
    worker_role,
)
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import ElasticConfig, EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator
from hyperpod_trainer.memory import GIB, MemoryEstimate, estimate_memory

JOB = "trainer.job"
# Trainer keys whose rules this module checks itself (with better hints).
BATCH_KEYS = frozenset({"train.global_batch_size", "train.micro_batch_size"})
# Folders that live on one node: a checkpoint there is gone when HyperPod replaces the node.
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/opt/dlami/nvme", "/opt/sagemaker", "/home", "/root",
              "/scratch", "/mnt/local", "/local")  # fmt: skip


def _within(elastic: ElasticConfig, n: int) -> bool:
    return elastic.min_replicas <= n <= elastic.max_replicas


def _listing(values: list[int], most: int = 5) -> str:
    shown = ", ".join(str(v) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def _nearest_multiple(value: int, unit: int) -> int:
    return unit * max(1, round(value / unit))


def _divides(global_batch: int, micro: int, world: int) -> bool:
    return global_batch % (micro * world) == 0


def _on_fsx(path: str) -> bool:
    return path == FSX_MOUNT or path.startswith(FSX_MOUNT + "/")


@validator("job-global-batch", area="trainer")
def check_global_batch(config: EnvironmentConfig) -> Iterator[Finding]:
    """The global batch splits into micro batches on every rank."""
    job = config.trainer.job
    world = job.nodes * processes_per_node(config)
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
    if config.orchestrator == "slurm":
        yield Finding(
            Level.ERROR,
            at,
            "elastic replicas are a HyperPodPyTorchJob feature (EKS); a Slurm job has a fixed "
            "node count",
            "remove elastic, or use orchestrator: eks",
        )
        return
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
    ranks = processes_per_node(config)
    step = elastic.replica_increment_step or 1
    limit = job.global_batch_size // (job.micro_batch_size * ranks)
    sizes = elastic.replica_discrete_values or range(
        elastic.min_replicas, min(elastic.max_replicas, limit + step) + 1, step
    )
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
    if elastic.graceful_shutdown_timeout_seconds < job.stop_grace_seconds:
        yield Finding(
            Level.ERROR,
            f"{at}.graceful_shutdown_timeout_seconds",
            f"{elastic.graceful_shutdown_timeout_seconds} s is shorter than stop_grace_seconds "
            f"({job.stop_grace_seconds} s): a scale-down would kill the trainer during its "
            "final save",
            f"use at least {job.stop_grace_seconds}",
        )
    if not elastic.min_replicas <= job.nodes <= elastic.max_replicas:
        yield Finding(
            Level.ERROR,
            f"{JOB}.nodes",
            f"{job.nodes} nodes is outside the elastic range "
            f"[{elastic.min_replicas}, {elastic.max_replicas}]",
            "start within the range",
        )


@validator("job-instance-group", area="trainer")
def check_job_group(config: EnvironmentConfig) -> Iterator[Finding]:
    """The job runs on one compute (Slurm) or worker (EKS) group, large enough for its nodes
    (and, elastic, for its largest replica count)."""
    job = config.trainer.job
    groups = worker_groups(config)
    role = worker_role(config)
    if not groups:
        return  # instance-group-roles says so
    group = job_group(config)
    if group is None:
        names = [g.name for g in groups]
        if job.instance_group is None:
            yield Finding(
                Level.ERROR,
                f"{JOB}.instance_group",
                f"the cluster has {len(groups)} {role} groups ({', '.join(names)}); the job "
                "must name one",
                f"add instance_group: {names[0]}",
            )
        else:
            close = difflib.get_close_matches(job.instance_group, names, n=1)
            yield Finding(
                Level.ERROR,
                f"{JOB}.instance_group",
                f"{job.instance_group!r} is not a {role} group",
                f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(names)}",
            )
        return
    if job.nodes > group.instance_count:
        yield Finding(
            Level.ERROR,
            f"{JOB}.nodes",
            f"{job.nodes} nodes, but group {group.name!r} has {group.instance_count}",
            f"use at most {group.instance_count} nodes, or raise that group's instance_count",
        )
    if job.elastic is not None and job.elastic.max_replicas > group.instance_count:
        yield Finding(
            Level.ERROR,
            f"{JOB}.elastic.max_replicas",
            f"{job.elastic.max_replicas} replicas, but group {group.name!r} has "
            f"{group.instance_count} nodes",
            f"use at most {group.instance_count}",
        )


@validator("job-processes-per-node", area="trainer")
def check_processes(config: EnvironmentConfig) -> Iterator[Finding]:
    """One rank per GPU: the bundled trainer needs NVIDIA GPUs, and no more ranks than GPUs."""
    job = config.trainer.job
    group = job_group(config)
    facts = group_facts(group)
    if group is None or facts is None:
        return
    at = f"{JOB}.processes_per_node"
    if facts.accelerator_kind != "gpu":
        what = "Trainium chips" if facts.accelerator_kind == "trainium" else "no GPU"
        yield Finding(
            Level.ERROR,
            f"{JOB}.instance_group" if job.instance_group else at,
            f"the job's group {group.name!r} is {group.primary_type}, with {what}; the bundled "
            "trainer runs on NVIDIA GPUs",
            "run the job on a GPU group (e.g. ml.p5.48xlarge)",
        )
        return
    ranks = job.processes_per_node
    if ranks is None:
        return
    if ranks > facts.gpus:
        yield Finding(
            Level.ERROR,
            at,
            f"{ranks} processes per node, but {group.primary_type} has {facts.gpus} "
            f"GPU{'s' if facts.gpus > 1 else ''}",
            f"use {facts.gpus} (or leave processes_per_node out: one rank per GPU)",
        )
    elif ranks < facts.gpus:
        yield Finding(
            Level.WARNING,
            at,
            f"{ranks} processes per node leave {facts.gpus - ranks} of {facts.gpus} GPUs of "
            f"{group.primary_type} idle",
            f"use {facts.gpus}",
        )


@validator("job-paths", area="trainer")
def check_paths(config: EnvironmentConfig) -> Iterator[Finding]:
    """Data and checkpoints are absolute paths; checkpoints are on the shared file system, so
    that a job resumed on a replaced node finds them."""
    job = config.trainer.job
    for key in ("data_path", "checkpoint_dir"):
        value: str = getattr(job, key)
        at = f"{JOB}.{key}"
        if not value.startswith("/"):
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} is a relative path; every node and container starts in another folder",
                f"use an absolute path on the shared file system, like {FSX_MOUNT}/{value}",
            )
        elif key == "checkpoint_dir" and not _on_fsx(value):
            local = next((p for p in NODE_LOCAL if value == p or value.startswith(p + "/")), None)
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} is "
                + (f"node-local ({local})" if local else f"outside the shared {FSX_MOUNT}")
                + ": a node HyperPod replaces comes back without it, and auto-resume starts over",
                f"use a folder under {FSX_MOUNT}, like {FSX_MOUNT}/checkpoints/{job.name}",
            )
        elif key == "data_path" and not _on_fsx(value):
            yield Finding(
                Level.WARNING,
                at,
                f"{value!r} is outside the shared {FSX_MOUNT}; every node must have the same data "
                "there",
                f"put the token shards under {FSX_MOUNT}",
            )


@validator("job-auto-resume", area="trainer")
def check_auto_resume(config: EnvironmentConfig) -> Iterator[Finding]:
    """Auto-resume needs HyperPod to replace faulty nodes (`node_recovery: Automatic`)."""
    if config.trainer.job.auto_resume and config.cluster.node_recovery == "None":
        yield Finding(
            Level.ERROR,
            f"{JOB}.auto_resume",
            "auto_resume needs cluster.node_recovery: Automatic; with None a faulty node is "
            "never replaced and the job cannot resume",
            "set cluster.node_recovery: Automatic, or auto_resume: false",
        )


@validator("job-orchestrator", area="trainer")
def check_job_orchestrator(config: EnvironmentConfig) -> Iterator[Finding]:
    """Settings of the other orchestrator's job template are not silently ignored."""
    job = config.trainer.job
    fields = job.model_fields_set
    ignored: list[str]
    if config.orchestrator == "slurm":
        ignored = [k for k in ("namespace", "user") if k in fields]
    else:
        ignored = [k for k in ("partition", "template") if k in fields]
    for key in ignored:
        yield Finding(
            Level.WARNING,
            f"{JOB}.{key}",
            f"{key} is used only by the "
            + ("EKS" if config.orchestrator == "slurm" else "Slurm")
            + " job template; it is ignored here",
            f"remove {key}",
        )
    if (
        config.orchestrator == "eks"
        and job.user is not None
        and job.user not in {u.name for u in config.users}
    ):
        yield Finding(
            Level.ERROR,
            f"{JOB}.user",
            f"{job.user!r} is not in users",
            "add the person to users, or name one who is",
        )
    if job.partition is not None and config.orchestrator == "slurm":
        partitions = {g.slurm_partition for g in worker_groups(config)} | {"dev"}
        if job.partition not in partitions:
            yield Finding(
                Level.ERROR,
                f"{JOB}.partition",
                f"no compute group forms partition {job.partition!r}",
                f"use one of {', '.join(sorted(partitions))}",
            )


def trainer_config_module() -> ModuleType:
    """The trainer's own (torch-free) config module: one source for presets, dtypes and rules.

    The trainer's package ships in hyperpod-kit's wheel (hyperpod_kit/files.py).
    """
    import hyperpod_trainer.config as module

    return module


@validator("job-trainer-config", area="trainer")
def check_trainer_config(config: EnvironmentConfig) -> Iterator[Finding]:
    """The trainer accepts the job's settings (preset, token dtype, sequence length...): the
    trainer's own `--check` rules, run here without torch."""
    trainer = trainer_config_module()
    job = config.trainer.job
    settings = trainer_settings(job)
    try:
        trainer.load_config(None, [f"{s.key}={s.value}" for s in settings])
    except trainer.ConfigError as e:
        if e.path in BATCH_KEYS:
            return  # job-global-batch says it, with the nearest size that works
        source = next(
            (s.source for s in settings if e.path == s.key or e.path.startswith(s.key + ".")),
            next((s.source for s in settings if s.key.split(".")[0] == e.path.split(".")[0]), JOB),
        )
        hint = "the bundled trainer's rule; see docs/trainer.md"
        if e.path == "model.preset":
            presets = sorted(trainer_presets())
            close = difflib.get_close_matches(job.preset, presets, n=1)
            hint = (
                f"did you mean {close[0]!r}? " if close else ""
            ) + f"presets: {', '.join(presets)}"
        yield Finding(Level.ERROR, source, f"the trainer rejects it: {e.message}", hint)


def trainer_presets() -> list[str]:
    presets: dict[str, object] = trainer_config_module().PRESETS
    return list(presets)


@dataclass(frozen=True)
class JobMemory:
    """The job's memory per GPU at its smallest size (`nodes`: the job's, or elastic, its fewest
    replicas) on the GPUs of its group."""

    memory: MemoryEstimate
    gpu_gib: float
    nodes: int
    ranks: int
    instance_type: str

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.gpu_gib * GIB


def smallest_nodes(config: EnvironmentConfig) -> int:
    """The fewest nodes the job runs on: its own, or elastic, its smallest replica count."""
    job = config.trainer.job
    if job.elastic is None or config.orchestrator != "eks":
        return job.nodes
    sizes = job.elastic.replica_discrete_values or [job.elastic.min_replicas]
    return max(1, min(job.nodes, *sizes))


def job_memory(
    config: EnvironmentConfig,
    *,
    nodes: int | None = None,
    checkpointing: bool | None = None,
    micro: int | None = None,
) -> JobMemory | None:
    """The job's memory estimate per GPU (hyperpod_trainer.memory), or None: no single GPU group,
    a GPU of unknown memory, or a setting the trainer refuses (its own validator says so).
    nodes, checkpointing and micro replace the job's (the hint tries them)."""
    trainer = trainer_config_module()
    job = config.trainer.job
    group = job_group(config)
    facts = group_facts(group)
    if group is None or facts is None or facts.accelerator_kind != "gpu":
        return None
    if not facts.accelerator_memory_gib:
        return None
    try:
        cfg = trainer.load_config(None, [f"{s.key}={s.value}" for s in trainer_settings(job)])
    except trainer.ConfigError:
        return None
    nodes = nodes or smallest_nodes(config)
    ranks = nodes * processes_per_node(config)
    memory = estimate_memory(
        cfg.shape(),
        seq_len=cfg.data.seq_len,
        micro_batch_size=micro or cfg.train.micro_batch_size,
        world_size=ranks,
        activation_checkpointing=(
            cfg.model.activation_checkpointing if checkpointing is None else checkpointing
        ),
        gpu_bytes=int(facts.accelerator_memory_gib * GIB),
        loss_chunk_tokens=cfg.train.loss_chunk_tokens,
    )
    return JobMemory(memory, facts.accelerator_memory_gib, nodes, ranks, group.primary_type)


# The most nodes the hint proposes.
MAX_HINT_NODES = 4096


def _fewest_nodes(config: EnvironmentConfig, now: JobMemory, **change: Any) -> int | None:
    """The fewest nodes at which the job (with `change`) fits, or None: the part that sharding
    does not shrink is already too large. The sharded state falls as 1/ranks."""
    gpu = now.gpu_gib * GIB
    rest = now.memory.total - now.memory.states
    if rest >= gpu:
        return None
    per_node = processes_per_node(config)
    nodes = max(now.nodes + 1, math.ceil(now.memory.states * now.ranks / (gpu - rest) / per_node))
    while nodes <= MAX_HINT_NODES:  # the states' rounding up may need one more
        found = job_memory(config, nodes=nodes, **change)
        if found is not None and found.fits:
            return nodes
        nodes += 1
    return None


def _memory_hint(config: EnvironmentConfig, now: JobMemory) -> str:
    """What makes the job fit, each alone: more nodes (the fewest), activation checkpointing,
    a micro batch of 1; else more nodes with both switches, or only a GPU with more memory."""
    job = config.trainer.job
    group = job_group(config)
    key = "elastic.min_replicas" if smallest_nodes(config) != job.nodes else "nodes"

    def more_nodes(nodes: int) -> str:
        grow = group is not None and nodes > group.instance_count
        return f"{key}: {nodes} or more" + (" (and the group's instance_count)" if grow else "")

    def fits(**change: Any) -> bool:
        found = job_memory(config, **change)
        return found is not None and found.fits

    options = []
    nodes = _fewest_nodes(config, now)
    if nodes is not None:
        options.append(more_nodes(nodes))
    if not job.activation_checkpointing and fits(checkpointing=True):
        options.append("activation_checkpointing: true")
    if job.micro_batch_size > 1 and fits(micro=1):
        options.append("micro_batch_size: 1")
    if options:
        return "any of: " + "; ".join(options)
    switches: dict[str, Any] = {"checkpointing": True, "micro": 1}
    least = job_memory(config, **switches)
    assert least is not None
    both = [
        text
        for text, missing in (
            ("activation_checkpointing: true", not job.activation_checkpointing),
            ("micro_batch_size: 1", job.micro_batch_size > 1),
        )
        if missing
    ]
    nodes = _fewest_nodes(config, least, **switches)
    if nodes is not None:
        return more_nodes(nodes) + (f" with {' and '.join(both)}" if both else "")
    rest = (least.memory.total - least.memory.states) / GIB
    return (
        f"a GPU with more memory: all but the sharded training state take {rest:.1f} GiB "
        "whatever the node count"
        + (", even with activation checkpointing and micro batches of 1" if both else "")
    )


@validator("job-memory", area="trainer")
def check_job_memory(config: EnvironmentConfig) -> Iterator[Finding]:
    """The job fits its GPUs (docs/trainer.md, "Presets and memory per GPU"), at its smallest
    elastic size. An error when what the job's activation settings do not touch (training state,
    gathered units, output head, allowance) already exceeds the GPU's memory; a warning when only
    the activations, counted as eager PyTorch saves them (an upper count: torch.compile saves
    less), push it over."""
    now = job_memory(config)
    if now is None or now.fits:
        return
    job = config.trainer.job
    memory = now.memory
    level = Level.ERROR if memory.total - memory.activations > now.gpu_gib * GIB else Level.WARNING
    where = f"{now.ranks} GPU{'s' if now.ranks > 1 else ''} of {now.instance_type}"
    if now.nodes != job.nodes:
        where += f" (its smallest elastic size, {now.nodes} replica{'s' if now.nodes > 1 else ''})"
    yield Finding(
        level,
        f"{JOB}.preset",
        f"{job.preset} needs about {memory.total / GIB:.1f} GiB per GPU ({memory.parts()}) on "
        f"{where}, which have {now.gpu_gib:g} GiB each",
        _memory_hint(config, now),
    )
