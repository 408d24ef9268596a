"""What a job template may use: validated values of the environment file, and the hardware facts of
the job's instance type. Nothing else reaches a template, so a template (the bundled one or a
user's) cannot be handed a raw string from the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hyperpod_kit.config.derived import (
    FSX_MOUNT,
    IMAGES_DIR,
    JOB_EVENTS_DIR,
    NODE_LOG_DIR,
    group_facts,
    job_group,
    job_partition,
    job_priority_class,
    job_team,
    processes_per_node,
    ships_job_events,
    trainer_settings,
)
from hyperpod_kit.config.facts import InstanceType
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.jobs.image import JobImage
from hyperpod_kit.naming import (
    parameter_name,
    priority_class_label_value,
    team_local_queue,
    team_namespace,
)
from hyperpod_kit.templating import ShellCode

RDZV_PORT = 29500
# Values that go into `#SBATCH` lines or Kubernetes names unquoted: validated by the schema's
# patterns already; checked again here so that a bypassed validation can never inject a line.
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class UnsafeValueError(ValueError):
    """A value that a template would place unquoted is not a plain identifier."""


def _word(value: str, what: str) -> str:
    if not _WORD.fullmatch(value):  # fullmatch: `$` would let a trailing line break through
        raise UnsafeValueError(f"{what} {value!r} is not a plain identifier")
    return value


@dataclass(frozen=True)
class JobValues:
    name: str
    nodes: int
    processes_per_node: int
    partition: str | None
    stop_grace_seconds: int
    shutdown_timeout_seconds: int
    auto_resume: bool
    max_retries: int
    checkpoint_dir: str
    namespace: str
    # EKS task governance: the job's team queue (kueue.x-k8s.io/queue-name) and priority class
    # (kueue.x-k8s.io/priority-class, `<class>-priority`); None outside task governance.
    queue: str | None = None
    priority_class: str | None = None


@dataclass(frozen=True)
class NetworkValues:
    """The job's interconnect, from the instance-type table."""

    instance_type: str | None
    efa: bool
    efa_interfaces: int | None  # None: EFA, but the table does not know how many interfaces
    device_rdma: bool

    @property
    def environment(self) -> list[tuple[str, str]]:
        """libfabric's settings for this type, as the public FSDP examples set them (the sbatch
        and the HyperPodPyTorchJob both use this list): the EFA provider where the type has EFA;
        device RDMA only where the device has it (libfabric aborts otherwise); no huge pages
        for EFA's buffers (with them, the data loader's `os.fork()` of its workers can fail with
        "Cannot allocate memory"); and no CUDA sync-memops attribute on every buffer (fewer
        memory synchronisations, for FSDP's throughput)."""
        if not self.efa:
            return []
        values = [("FI_PROVIDER", "efa")]
        if self.device_rdma:
            values.append(("FI_EFA_USE_DEVICE_RDMA", "1"))
        values += [("FI_EFA_USE_HUGE_PAGE", "0"), ("FI_EFA_SET_CUDA_SYNC_MEMOPS", "0")]
        return values


@dataclass(frozen=True)
class PlacementValues:
    """Where the job's pods go on EKS: the labels HyperPod keeps on its group's nodes
    (`kubernetes.labels`), the taints they carry (tolerated), and, for a flexible group, every
    type the group may get."""

    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str | None, str], ...] = ()  # (key, value, effect)
    instance_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocalRun:
    """Render for a machine without HyperPod (the local Slurm test, `make demo`): no container,
    no `--auto-resume` (Slurm's `--requeue` instead), FSx is a local folder."""

    fsx_root: Path
    python: str


@dataclass(frozen=True)
class JobContext:
    environment: str
    job: JobValues
    network: NetworkValues
    placement: PlacementValues
    settings: list[tuple[str, str]]  # the trainer's --set KEY=VALUE, in order
    image: JobImage | None  # decided at render time (hyperpod_kit/jobs/image.py)
    image_parameter: str  # where the trainer stack publishes its URI (for people, not jobs)
    region: str
    images_dir: str  # one folder per uid under it, one squashfs per image digest
    fsx_mount: str
    node_log_dir: str | None  # mounted into the container: the trainer's events file is in it
    rdzv_port: int
    local: LocalRun | None
    launcher: ShellCode  # hyperpod-kit's own code: output without a filter
    # The trainer's subcommand and its words, before the settings (`verify`'s benchmark:
    # `bench-allreduce ...`); empty: the trainer trains.
    command: tuple[str, ...] = ()

    def as_template_vars(self) -> dict[str, object]:
        return {
            "environment": self.environment,
            "job": self.job,
            "network": self.network,
            "settings": self.settings,
            # The URI as a string (also for templates of users' own, which always got one).
            "image": self.image.uri if self.image is not None else None,
            "image_source": self.image.source if self.image is not None else None,
            "image_needs_account": self.image is not None and self.image.needs_account,
            "image_cacheable": self.image is not None and self.image.cacheable,
            "image_parameter": self.image_parameter,
            "region": self.region,
            "images_dir": self.images_dir,
            "fsx_mount": self.fsx_mount,
            "node_log_dir": self.node_log_dir,
            "rdzv_port": self.rdzv_port,
            "local": self.local,
            "launcher": self.launcher,
            "command": self.command,
        }


def network_values(facts: InstanceType | None, *, local: LocalRun | None) -> NetworkValues:
    """The interconnect of a job on `facts`' type (none on this machine: `local`)."""
    efa = facts is not None and facts.efa and local is None
    return NetworkValues(
        instance_type=facts.name if facts is not None else None,
        efa=efa,
        efa_interfaces=facts.efa_interfaces if efa and facts is not None else 0,
        device_rdma=efa and facts is not None and facts.device_rdma,
    )


def shutdown_timeout(stop_grace_seconds: int) -> int:
    """How long torchrun waits for the ranks after forwarding SIGTERM: the grace period less the
    time the scheduler needs to deliver the signal and torchrun to exit."""
    return max(stop_grace_seconds - 10, 1)


def job_context(
    config: EnvironmentConfig, *, image: JobImage | None = None, local: LocalRun | None = None
) -> JobContext:
    """The values every job template gets, from a config that passed validation."""
    job = config.trainer.job
    group = job_group(config)
    facts = group_facts(group)
    partition = job_partition(config) if config.orchestrator == "slurm" else None
    k8s = group.kubernetes if group is not None else None
    # Under task governance the job runs in its team's namespace and queue (None on Slurm).
    team = job_team(config) if local is None else None
    priority = job_priority_class(config) if team is not None else None

    def on_this_machine(value: str) -> str:
        if local is not None and (value == FSX_MOUNT or value.startswith(FSX_MOUNT + "/")):
            return str(local.fsx_root) + value[len(FSX_MOUNT) :]
        return value

    settings = [(s.key, on_this_machine(s.value)) for s in trainer_settings(job)]
    # Rank 0's events go to the node's spool; its log shipper sends them to the cluster's log
    # group, where metric filters make the dashboard's training graphs.
    ship_events = ships_job_events(config) and local is None
    if ship_events:
        settings.append(("metrics.events_file", f"{JOB_EVENTS_DIR}/{{job_id}}.jsonl"))
    return JobContext(
        environment=config.name,
        job=JobValues(
            name=_word(job.name, "job name"),
            nodes=job.nodes,
            processes_per_node=processes_per_node(config),
            partition=_word(partition, "partition") if partition else None,
            stop_grace_seconds=job.stop_grace_seconds,
            shutdown_timeout_seconds=shutdown_timeout(job.stop_grace_seconds),
            auto_resume=job.auto_resume,
            max_retries=job.max_retries,
            checkpoint_dir=on_this_machine(job.checkpoint_dir),
            namespace=_word(team_namespace(team.name) if team else job.namespace, "namespace"),
            queue=_word(team_local_queue(team.name), "queue") if team else None,
            priority_class=_word(priority_class_label_value(priority), "priority class")
            if priority
            else None,
        ),
        placement=PlacementValues(
            labels=tuple(sorted(k8s.labels.items())) if k8s is not None else (),
            taints=tuple((t.key, t.value, t.effect) for t in k8s.taints) if k8s else (),
            instance_types=tuple(group.types) if group is not None else (),
        ),
        network=network_values(facts, local=local),
        settings=settings,
        image=image,
        image_parameter=parameter_name(config.name, "trainer-image"),
        region=config.region,
        images_dir=IMAGES_DIR,
        fsx_mount=FSX_MOUNT,
        node_log_dir=NODE_LOG_DIR if ship_events else None,
        rdzv_port=RDZV_PORT,
        local=local,
        # A constant of ours, never a value from the file: it sits inside a quoted script.
        launcher=ShellCode('"$HYPERPOD_PYTHON" -m torch.distributed.run' if local else "torchrun"),
    )
