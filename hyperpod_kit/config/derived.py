"""Values that follow from the environment file, computed in one place.

Validators, job templates and constructs all need "which group does the job run on", "how many
ranks per node", "which deep health checks": deriving them once keeps the three from disagreeing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperpod_kit.config.facts import (
    InstanceType,
    accounting_facts,
    instance_type,
    task_governance_facts,
)
from hyperpod_kit.config.schema import (
    DEFAULT_DEEP_HEALTH_CHECKS,
    DeepHealthCheck,
    EnvironmentConfig,
    ExistingLustreConfig,
    InstanceGroupConfig,
    JobConfig,
    LustreConfig,
    TeamConfig,
)

FSX_MOUNT = "/fsx"
# hyperpod-kit's folder on every node (lifecycle/lib/settings.sh: HPK_LOG_DIR), and in it the
# spool the log shipper reads jobs' event files from (lifecycle/hooks.d/50-health.sh makes it).
NODE_LOG_DIR = "/var/log/hyperpod-kit"
JOB_EVENTS_DIR = f"{NODE_LOG_DIR}/jobs"
# Container images imported for Slurm jobs, one squashfs per image digest and per user
# (<IMAGES_DIR>/<uid>/<digest>.sqsh): the controller's lifecycle makes the folder (root, 1777),
# the rendered job imports into its own uid's folder (hyperpod_kit/jobs/templates).
IMAGES_DIR = f"{FSX_MOUNT}/.hyperpod-kit/images"
# `hyperpod-kit-verify`'s runs on FSx, one folder per run (docs/verify.md); the spool file of a
# run is <JOB_EVENTS_DIR>/<run>.jsonl, which the log shipper sends to the cluster's log group.
VERIFY_DIR = f"{FSX_MOUNT}/hyperpod-kit-verify"


def lustre_tib(lustre: LustreConfig) -> float:
    """The file system's capacity in TiB as FSx counts it for throughput: 1200 GiB = 1.2 TiB."""
    return lustre.storage_capacity_gib / 1000


def lustre_throughput_mb_s(lustre: LustreConfig) -> float:
    """Aggregate throughput in MB/s (10^6 bytes): capacity in TiB x the tier in MB/s per TiB."""
    return lustre_tib(lustre) * lustre.throughput_per_unit_storage


def ships_job_events(config: EnvironmentConfig) -> bool:
    """Whether the trainer's events reach the cluster's log group: Slurm jobs write them to the
    nodes' spool (JOB_EVENTS_DIR), which the log shipper of monitoring.enabled sends. On EKS the
    pods' output stays with the cluster's own log collection."""
    return config.orchestrator == "slurm" and config.monitoring.enabled


def continuous_provisioning(config: EnvironmentConfig) -> bool:
    """Whether the cluster uses continuous provisioning (``NodeProvisioningMode: Continuous``).

    HyperPod sends cluster events (``ListClusterEvents``, the EventBridge detail-type "SageMaker
    HyperPod Cluster Event") only then (facts-hyperpod.md §5, §7), so whatever listens for them
    asks this first."""
    return config.cluster.node_provisioning == "continuous"


def slurm_accounting(config: EnvironmentConfig) -> bool:
    """Whether the environment creates a Slurm accounting database and hands it to HyperPod
    (`Orchestrator.Slurm.AccountingDatabase`); `validate` refuses it off Slurm and without
    continuous provisioning."""
    return config.orchestrator == "slurm" and config.cluster.slurm.accounting.enabled


def accounting_engine_version(config: EnvironmentConfig) -> str:
    """The Aurora MySQL version of the accounting database: as written, else hyperpod-kit's
    default (facts/accounting.json, pinned in the lock)."""
    written = config.cluster.slurm.accounting.engine_version
    return written or str(accounting_facts()["default_engine_version"])


def slurm_teams(config: EnvironmentConfig) -> bool:
    """Whether the controller keeps Slurm accounts and associations for the file's teams."""
    return config.orchestrator == "slurm" and bool(config.teams)


def task_governance(config: EnvironmentConfig) -> bool:
    """Whether the environment runs HyperPod task governance (EKS): the add-on, the cluster
    policy and a compute allocation per team."""
    return config.orchestrator == "eks" and config.cluster.eks.task_governance.enabled


def governed_teams(config: EnvironmentConfig) -> list[TeamConfig]:
    """The teams that get a compute allocation (and so a namespace and queue): every team of a
    governed cluster, none elsewhere."""
    return list(config.teams) if task_governance(config) else []


def task_governance_addon_version(config: EnvironmentConfig) -> str:
    """The task governance add-on's version: as written, else hyperpod-kit's default
    (facts/task_governance.json, pinned in the lock)."""
    written = config.cluster.eks.addons.task_governance
    return written or str(task_governance_facts()["default_addon_version"])


def team_of(config: EnvironmentConfig, user: str | None) -> TeamConfig | None:
    """The team a person is a member of (validate keeps a person in one team)."""
    if user is None:
        return None
    return next((t for t in config.teams if user in t.members), None)


def job_team(config: EnvironmentConfig) -> TeamConfig | None:
    """The governed team the training job runs for: `trainer.job.team`, else the team of
    `trainer.job.user`; None without task governance or when neither names one."""
    teams = governed_teams(config)
    job = config.trainer.job
    if job.team is not None:
        return next((t for t in teams if t.name == job.team), None)
    found = team_of(config, job.user)
    return found if found is not None and found in teams else None


def job_priority_class(config: EnvironmentConfig) -> str | None:
    """The job's priority class (of the cluster policy): `trainer.job.priority`, else its team's;
    None without a governed team."""
    team = job_team(config)
    if team is None:
        return None
    return config.trainer.job.priority or team.priority


def slurm_config_strategy(config: EnvironmentConfig) -> str | None:
    """The `SlurmConfigStrategy` the request carries: as written, else Managed; none at all with
    continuous provisioning, where HyperPod takes only Merge and refuses the field."""
    written = config.cluster.slurm.config_strategy
    if continuous_provisioning(config):
        return written  # `validate` refuses one written here
    return written or "Managed"


def worker_role(config: EnvironmentConfig) -> str:
    """The role of the groups that run jobs: compute (Slurm) or worker (EKS)."""
    return "compute" if config.orchestrator == "slurm" else "worker"


def worker_groups(config: EnvironmentConfig) -> list[InstanceGroupConfig]:
    role = worker_role(config)
    return [g for g in config.cluster.instance_groups if g.role == role]


def job_group(config: EnvironmentConfig) -> InstanceGroupConfig | None:
    """The group the training job runs on: named by `trainer.job.instance_group`, or the only
    compute/worker group; None when that is ambiguous or names no such group."""
    groups = worker_groups(config)
    wanted = config.trainer.job.instance_group
    if wanted is not None:
        return next((g for g in groups if g.name == wanted), None)
    return groups[0] if len(groups) == 1 else None


def group_facts(group: InstanceGroupConfig | None) -> InstanceType | None:
    """What the table knows of a group's instance type: its first type for a flexible group,
    whose types `validate` keeps alike in GPUs and EFA where a job runs (None: unknown, e.g. an
    allowed new type)."""
    return instance_type(group.primary_type) if group is not None else None


def group_types_facts(group: InstanceGroupConfig) -> list[tuple[str, InstanceType | None]]:
    """Each type the group may get, with what the table knows of it."""
    return [(t, instance_type(t)) for t in group.types]


def processes_per_node(config: EnvironmentConfig) -> int:
    """Ranks per node: as set, else the job group's accelerators (one rank per GPU), else 1."""
    job = config.trainer.job
    if job.processes_per_node is not None:
        return job.processes_per_node
    facts = group_facts(job_group(config))
    return facts.processes_per_node if facts is not None and facts.processes_per_node else 1


def deep_health_checks(group: InstanceGroupConfig) -> list[DeepHealthCheck]:
    """As set, else both checks on accelerated types and none on CPU types."""
    if group.deep_health_checks is not None:
        # MultiNodeTrainingValidation never gets here: `validate` refuses it (CloudFormation
        # cannot set it).
        return [c for c in group.deep_health_checks if c != "MultiNodeTrainingValidation"]
    facts = instance_type(group.primary_type)
    return list(DEFAULT_DEEP_HEALTH_CHECKS) if facts is not None and facts.accelerated else []


def training_plan_of(config: EnvironmentConfig, group: InstanceGroupConfig) -> str | None:
    """The training plan a group uses: its own, else the cluster's (`uses_training_plan`)."""
    if group.training_plan_arn is not None:
        return group.training_plan_arn
    return config.cluster.training_plan_arn if uses_training_plan(config, group) else None


def uses_training_plan(config: EnvironmentConfig, group: InstanceGroupConfig) -> bool:
    """A training plan reserves accelerated capacity: it applies to the accelerated groups that
    run jobs (a type the table does not know counts as accelerated), never to a controller,
    login or CPU group."""
    if config.cluster.training_plan_arn is None or group.role not in ("compute", "worker"):
        return False
    if group.training_plan_arn is not None or group.capacity == "spot":
        return False  # its own plan, or spot capacity, which no plan reserves
    facts = instance_type(group.primary_type)
    return facts is None or facts.accelerated


def job_partition(config: EnvironmentConfig) -> str | None:
    """The job's Slurm partition: as set, else its compute group's partition."""
    job = config.trainer.job
    if job.partition is not None:
        return job.partition
    group = job_group(config)
    return group.slurm_partition if group is not None else None


@dataclass(frozen=True)
class TrainerSetting:
    """One `--set KEY=VALUE` the job templates pass to the trainer, and the environment-file key
    it comes from (so a value the trainer rejects is reported at the right line)."""

    key: str
    value: str
    source: str  # path in the environment file, e.g. "trainer.job.seq_len"


def trainer_settings(job: JobConfig) -> list[TrainerSetting]:
    """The trainer configuration a job runs with: its `--set` overrides, in order."""
    at = "trainer.job"

    def s(key: str, value: object, field: str | None) -> TrainerSetting:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return TrainerSetting(key, text, f"{at}.{field}" if field else at)

    settings = [
        s("model.preset", job.preset, "preset"),
        s("data.source", "tokens", None),
        s("data.path", job.data_path, "data_path"),
        s("data.token_dtype", job.token_dtype, "token_dtype"),
        s("data.seq_len", job.seq_len, "seq_len"),
        s("train.steps", job.max_steps, "max_steps"),
        s("train.global_batch_size", job.global_batch_size, "global_batch_size"),
        s("train.micro_batch_size", job.micro_batch_size, "micro_batch_size"),
        s("checkpoint.dir", job.checkpoint_dir, "checkpoint_dir"),
        s("checkpoint.every_steps", job.checkpoint_every, "checkpoint_every"),
        s("checkpoint.keep_last", job.keep_last, "keep_last"),
        s("checkpoint.async_save", True, None),
        s("checkpoint.resume", True, None),
    ]
    if job.task != "pretrain":  # only when not the trainer's default: jobs render as before
        settings.append(s("train.task", job.task, "task"))
    if job.activation_checkpointing:  # only when on: jobs without it render as before
        settings.append(s("model.activation_checkpointing", True, "activation_checkpointing"))
    return settings


@dataclass(frozen=True)
class DevicePlugins:
    """The device plugins hyperpod-kit deploys on EKS, and the instance types each runs on (empty:
    that plugin is not deployed). Types outside the instance table are in neither list."""

    nvidia_types: tuple[str, ...] = ()
    efa_types: tuple[str, ...] = ()
    unknown_types: tuple[str, ...] = field(default=(), compare=False)


def device_plugins(config: EnvironmentConfig) -> DevicePlugins | None:
    """What `cluster.eks.device_plugins` deploys, or None when it deploys nothing: off by default
    where HyperPod's chart brings both plugins (cluster.eks.helm_chart) and on an existing
    cluster (expected to run that chart). The NVIDIA plugin only on the groups' GPU types, the
    EFA plugin only on their EFA types (it crash-loops on others: sagemaker-hyperpod-cli #367)."""
    if config.orchestrator != "eks":
        return None
    eks = config.cluster.eks
    enabled = eks.device_plugins.enabled
    if enabled is None:
        enabled = eks.helm_chart is None and eks.existing_cluster_name is None
    if not enabled:
        return None
    types = sorted({t for g in config.cluster.instance_groups for t in g.types})
    known = {t: facts for t in types if (facts := instance_type(t)) is not None}
    plan = DevicePlugins(
        nvidia_types=tuple(t for t, f in known.items() if f.gpus > 0),
        efa_types=tuple(t for t, f in known.items() if f.efa),
        unknown_types=tuple(t for t in types if t not in known),
    )
    return plan if plan.nvidia_types or plan.efa_types else None


# --- Amazon Managed Service for Prometheus (docs/observability.md) ----------------------------

AMP_ADDON = "amazon-sagemaker-hyperpod-observability"


def names_at_synth(lustre: LustreConfig) -> ExistingLustreConfig | None:
    """An existing file system whose names are known at synth (an environment file's
    `storage.lustre.existing`); None for one the storage stack creates and for the app's own
    (`hyperpod_kit.cdk.ExistingResources.file_system`), whose names are CDK tokens (strings
    holding ``${Token[``) until deploy: a node reads those from the storage stack's parameter."""
    existing = lustre.existing
    if existing is None or "${Token[" in existing.dns_name + existing.mount_name:
        return None
    return existing


def prometheus_enabled(config: EnvironmentConfig) -> bool:
    """Whether metrics go to an Amazon Managed Service for Prometheus workspace."""
    return config.monitoring.prometheus.enabled


def prometheus_agents(config: EnvironmentConfig) -> bool:
    """Whether hyperpod-kit's own agent and exporters run on the nodes (Slurm); on EKS HyperPod's
    observability add-on collects instead."""
    return prometheus_enabled(config) and config.orchestrator == "slurm"


def creates_prometheus_workspace(config: EnvironmentConfig) -> bool:
    return prometheus_enabled(config) and config.monitoring.prometheus.workspace_arn is None


def observability_stack(config: EnvironmentConfig) -> bool:
    """Whether the environment has an observability stack: a workspace or Grafana to create."""
    prometheus = config.monitoring.prometheus
    return prometheus_enabled(config) and (
        prometheus.workspace_arn is None or prometheus.grafana.enabled
    )


def remediation_function(config: EnvironmentConfig) -> bool:
    """Whether monitoring deploys the remediation Lambda (fed by a queue that the node-health
    rule targets): auto_repair on while HyperPod's own recovery is off. With node_recovery:
    Automatic HyperPod performs the repairs itself, and a Lambda would only race it."""
    return config.monitoring.auto_repair and config.cluster.node_recovery == "None"


def alert_topics(config: EnvironmentConfig) -> int:
    """How many SNS topics get every alert: monitoring's own topic and each existing one the
    file lists. Each is a target of every EventBridge rule and an action of every alarm state."""
    return 1 + len(config.monitoring.subscribers.sns_topic_arns)


def creates_grafana_workspace(config: EnvironmentConfig) -> bool:
    """Whether the environment creates an Amazon Managed Grafana workspace."""
    return prometheus_enabled(config) and config.monitoring.prometheus.grafana.enabled


# The interface endpoints the network stack creates (`network.interface_endpoints`), by what the
# environment runs; here so that the network construct and `estimate` read one list.
BASE_ENDPOINTS = (
    "sagemaker.api",
    "sts",
    "ecr.api",
    "ecr.dkr",
    "logs",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
)
# EKS nodes also call EKS (joining, Pod Identity) and EC2: the VPC CNI (aws-node) assigns pod
# addresses and reads the instance's interfaces through the EC2 API.
EKS_ENDPOINTS = ("eks", "eks-auth", "ec2")
# Slurm accounting: HyperPod reads the database's secret for slurmdbd on the controller, and the
# rotation function (when rotation is on) calls Secrets Manager from the cluster's subnet.
ACCOUNTING_ENDPOINTS = ("secretsmanager",)
# Amazon Managed Service for Prometheus: remote write (and queries) go to the workspaces' data
# plane, `aps-workspaces` (the control plane, `aps`, is not called from the VPC).
PROMETHEUS_ENDPOINTS = ("aps-workspaces",)


def endpoint_services(*, eks: bool, accounting: bool, prometheus: bool) -> tuple[str, ...]:
    """The services that get an interface endpoint when `network.interface_endpoints` is on."""
    return (
        BASE_ENDPOINTS
        + (EKS_ENDPOINTS if eks else ())
        + (ACCOUNTING_ENDPOINTS if accounting else ())
        + (PROMETHEUS_ENDPOINTS if prometheus else ())
    )


def interface_endpoints(config: EnvironmentConfig) -> tuple[str, ...]:
    """The interface endpoints this environment's network stack creates (none when off)."""
    if not config.network.interface_endpoints:
        return ()
    return endpoint_services(
        eks=config.orchestrator == "eks",
        accounting=slurm_accounting(config),
        prometheus=prometheus_enabled(config),
    )


def workspace_id_of(arn: str) -> str:
    """``ws-...`` from a workspace ARN."""
    return arn.rsplit("/", 1)[-1]


def region_of_arn(arn: str) -> str:
    return arn.split(":")[3]


def account_of_arn(arn: str) -> str:
    return arn.split(":")[4]


def prometheus_endpoint(region: str, workspace_id: str) -> str:
    """The workspace's Prometheus endpoint, as `DescribeWorkspace` (and CloudFormation's
    PrometheusEndpoint) gives it: ends with a slash."""
    return f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{workspace_id}/"


def remote_write_url(endpoint: str) -> str:
    """The remote-write URL under a Prometheus endpoint."""
    return endpoint.rstrip("/") + "/api/v1/remote_write"


# --- what an environment deploys (app.py builds it; `status` compares AWS with it) -------------


def environment_areas(config: EnvironmentConfig) -> list[str]:
    """The areas of the environment's stacks (`naming.stack_name(name, area)`), in the order
    `app.build_environment` adds them; it checks its stacks against this list, so `status` can
    know them from the file alone, without a synth."""
    areas = ["network", "storage"]
    areas += ["observability"] if observability_stack(config) else []
    areas += ["accounting"] if slurm_accounting(config) else []
    areas += ["eks"] if config.orchestrator == "eks" else []
    areas += ["trainer"] if config.trainer.build_image else []
    areas += ["cluster"]
    areas += ["eks-addons"] if config.orchestrator == "eks" else []
    areas += ["studio"] if config.studio.enabled else []
    areas += ["monitoring"] if config.monitoring.enabled else []
    return areas


@dataclass(frozen=True)
class ExpectedDeployment:
    """What a deployed environment has, as its file says: the stacks' areas (deploy order), the
    cluster and each instance group with its target count, the file system (an existing one's
    id, or None for the storage stack's own), Studio with the people whose partition it waits
    for ("_shared" for one shared partition), the Slurm accounting database, monitoring."""

    areas: tuple[str, ...]
    cluster_name: str
    groups: tuple[tuple[str, int], ...]
    existing_file_system_id: str | None
    studio_partitions: tuple[str, ...] | None  # None: no Studio
    accounting: bool
    monitoring: bool


def expected_deployment(config: EnvironmentConfig) -> ExpectedDeployment:
    existing = config.storage.lustre.existing
    partitions: tuple[str, ...] | None = None
    if config.studio.enabled:
        partitions = (
            tuple(u.name for u in config.studio.selected(config.users))
            if config.studio.partitions == "per_user"
            else ("_shared",)
        )
    return ExpectedDeployment(
        areas=tuple(environment_areas(config)),
        cluster_name=config.cluster_name,
        groups=tuple((g.name, g.instance_count) for g in config.cluster.instance_groups),
        existing_file_system_id=existing.file_system_id if existing is not None else None,
        studio_partitions=partitions,
        accounting=slurm_accounting(config),
        monitoring=config.monitoring.enabled,
    )
