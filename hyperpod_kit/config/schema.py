"""The environment file's schema: every key, its type and its default.

Phase one of validation. ``extra="forbid"`` everywhere, so a misspelt key is an error rather than a
silently ignored setting. Rules that relate several values (sizes, overlaps, regions) live in
``validators/``, where they can say more than a type can. A field's ``x-hint`` is shown with a
schema error on that field.

Every string of the file is one line of text: the ``control-characters`` check refuses line
breaks, carriage returns, NUL and the other control characters in all of them. No field is
multi-line today; one that must be says so in its description and sets ``x-multi-line`` (see
``hyperpod_kit/text.py``), which lets line breaks and tabs through.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr

from hyperpod_kit.config.kubernetes_names import (
    DNS1035_LABEL_PATTERN,
    DNS1123_LABEL_PATTERN,
    LABEL_VALUE_MAX,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_PATTERN,
    QUALIFIED_NAME_TOTAL_MAX,
)


def hint(text: str, **extra: Any) -> dict[str, Any]:
    """JSON-schema extras for a field: the hint shown with its errors, plus any editor metadata."""
    return {"x-hint": text, **extra}


class Section(BaseModel):
    """Base of every section: unknown keys are errors and a loaded config never changes.

    Strict types: YAML's ``yes`` is not an instance count and ``"1200"`` is not a capacity.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    # Where in the file this section is written (`config/keys.py`): set by `keys.annotate`.
    _key: str | None = PrivateAttr(default=None)


def _cidr_text(value: object) -> object:
    if not isinstance(value, (str, IPv4Network)):
        raise ValueError("a CIDR block is written as text, like 10.0.0.0/16")
    return value


Cidr = Annotated[IPv4Network, BeforeValidator(_cidr_text), Field(strict=False)]


Retention = Literal["retain", "destroy"]

VpcId = Annotated[
    str,
    Field(pattern=r"^vpc-[0-9a-f]{8,17}$", json_schema_extra=hint("like vpc-0123456789abcdef0")),
]
SubnetId = Annotated[
    str,
    Field(
        pattern=r"^subnet-[0-9a-f]{8,17}$", json_schema_extra=hint("like subnet-0123456789abcdef0")
    ),
]
SecurityGroupId = Annotated[
    str, Field(pattern=r"^sg-[0-9a-f]{8,17}$", json_schema_extra=hint("like sg-0123456789abcdef0"))
]
RouteTableId = Annotated[
    str,
    Field(pattern=r"^rtb-[0-9a-f]{8,17}$", json_schema_extra=hint("like rtb-0123456789abcdef0")),
]
S3Event = Literal["NEW", "CHANGED", "DELETED"]
ALL_S3_EVENTS: list[S3Event] = ["NEW", "CHANGED", "DELETED"]


# --- network -----------------------------------------------------------------------------------


class NewVpcConfig(Section):
    """A VPC created for the environment: one public subnet for the NAT gateway, one large private
    subnet for the cluster, FSx and Studio, both in the environment's availability zone."""

    cidr: Cidr = Field(
        default=IPv4Network("10.0.0.0/16"),
        description="The VPC's IPv4 CIDR block (/16 to /28).",
        json_schema_extra=hint("a network address such as 10.0.0.0/16"),
    )
    public_subnet_cidr: Cidr = Field(
        default=IPv4Network("10.0.0.0/24"),
        description="Small public subnet that holds the NAT gateway.",
        json_schema_extra=hint("a network address inside the VPC CIDR, such as 10.0.0.0/24"),
    )
    private_subnet_cidr: Cidr = Field(
        default=IPv4Network("10.0.128.0/17"),
        description="Large private subnet for nodes, FSx and Studio (HyperPod uses many addresses "
        "per instance for EFA).",
        json_schema_extra=hint("a network address inside the VPC CIDR, such as 10.0.128.0/17"),
    )
    flow_logs: bool = Field(default=True, description="VPC flow logs to CloudWatch Logs.")
    control_plane_subnet_cidr: Cidr | None = Field(
        default=None,
        description="EKS only: a second private subnet, in "
        "network.control_plane_availability_zone_id, that only the EKS control plane uses (EKS "
        "needs subnets in two zones; HyperPod nodes stay in the environment's zone).",
        json_schema_extra=hint("a /24 or larger inside the VPC CIDR, such as 10.0.1.0/24"),
    )
    database_subnet_cidr: Cidr | None = Field(
        default=None,
        description="Slurm accounting only: a small private subnet, in "
        "network.database_availability_zone_id, that only the accounting database's subnet "
        "group uses (a DB subnet group spans two zones; HyperPod nodes stay in the "
        "environment's zone). It has no route out: the database needs none.",
        json_schema_extra=hint("a /28 or larger inside the VPC CIDR, such as 10.0.2.0/28"),
    )


class ExistingVpcConfig(Section):
    """A VPC that already exists. Nothing is looked up (synth stays offline): give what it needs."""

    vpc_id: VpcId
    private_subnet_id: SubnetId = Field(
        description="A private subnet in the environment's availability zone, with a route out "
        "(NAT) unless interface_endpoints is on."
    )
    cidr: Cidr = Field(
        description="The VPC's CIDR block (for the interface endpoints' security group).",
        json_schema_extra=hint("the VPC's primary CIDR, such as 10.0.0.0/16"),
    )
    route_table_ids: list[RouteTableId] = Field(
        default_factory=list,
        description="Route tables to attach an S3 gateway endpoint to; empty: none is created.",
    )
    control_plane_subnet_ids: list[SubnetId] = Field(
        default_factory=list,
        description="EKS only: private subnets in other availability zones for the EKS control "
        "plane (with private_subnet_id they must span two zones).",
    )
    database_subnet_ids: list[SubnetId] = Field(
        default_factory=list,
        description="Slurm accounting only: private subnets in other availability zones for the "
        "accounting database's subnet group (with private_subnet_id they must span two zones; "
        "not checked offline: RDS refuses the subnet group otherwise).",
    )


class NetworkConfig(Section):
    vpc: NewVpcConfig | None = Field(
        default=None, description="Create a VPC (the default when existing_vpc is not set)."
    )
    existing_vpc: ExistingVpcConfig | None = Field(default=None, description="Use an existing VPC.")
    interface_endpoints: bool = Field(
        default=False,
        description="Interface endpoints for the AWS APIs that nodes call (clusters without NAT; "
        "on EKS also `ec2`, which the VPC CNI calls).",
    )
    internet: bool = Field(
        default=True,
        description="The cluster subnet reaches the internet (a NAT). false: an existing VPC "
        "without one: nodes never run `apt-get update` and install packages only from the "
        "lifecycle upload (cluster.node_setup.packages, cluster.slurm.enroot_pyxis_packages); "
        "needs interface_endpoints. Studio apps in such a VPC cannot reach package registries.",
    )
    control_plane_availability_zone_id: str | None = Field(
        default=None,
        pattern=r"^[a-z]{3,6}\d-az\d+$",
        description="EKS only: the second zone, for network.vpc.control_plane_subnet_cidr.",
        json_schema_extra=hint("another AZ ID of the region, like usw2-az1"),
    )
    database_availability_zone_id: str | None = Field(
        default=None,
        pattern=r"^[a-z]{3,6}\d-az\d+$",
        description="Slurm accounting only: the second zone, for "
        "network.vpc.database_subnet_cidr. RDS places the database in either zone of its "
        "subnet group.",
        json_schema_extra=hint("another AZ ID of the region, like usw2-az1"),
    )

    @property
    def new_vpc(self) -> NewVpcConfig | None:
        """The VPC to create, or None when an existing one is used."""
        if self.existing_vpc is not None:
            return None
        return self.vpc or NewVpcConfig()


# --- storage -----------------------------------------------------------------------------------


class BucketConfig(Section):
    """The S3 bucket that holds data sets and checkpoints and backs the file system."""

    name: str | None = Field(
        default=None,
        description="Name for a new bucket; left out, CloudFormation generates one.",
        json_schema_extra=hint("3-63 lowercase letters, digits, dots and hyphens"),
    )
    existing_name: str | None = Field(
        default=None,
        description="Use this existing bucket instead of creating one.",
        json_schema_extra=hint("3-63 lowercase letters, digits, dots and hyphens"),
    )
    encryption: Literal["s3-managed", "kms"] = Field(
        default="s3-managed", description="Default encryption of a new bucket."
    )
    removal_policy: Retention = Field(
        default="retain", description="What `cdk destroy` does with a new bucket."
    )


class DataRepositoryAssociationConfig(Section):
    """A link between a file system directory and an S3 prefix (a data repository association)."""

    file_system_path: str = Field(
        default="/data",
        description="Directory in the file system, starting with /.",
        json_schema_extra=hint("an absolute path such as /data"),
    )
    s3_prefix: str = Field(
        default="data/",
        description="Prefix in the bucket, ending with / (empty: the whole bucket).",
        json_schema_extra=hint("a prefix such as data/"),
    )
    import_policy: list[S3Event] = Field(
        default_factory=lambda: list(ALL_S3_EVENTS),
        description="S3 events imported automatically into the file system.",
    )
    export_policy: list[S3Event] = Field(
        default_factory=lambda: list(ALL_S3_EVENTS),
        description="File system changes exported automatically to S3.",
    )
    batch_import_meta_data_on_create: bool = Field(
        default=True, description="Import the prefix's metadata when the association is created."
    )
    imported_file_chunk_size_mib: int = Field(
        default=1024, ge=1, le=512000, description="Stripe size of imported files."
    )


class MetadataConfig(Section):
    mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = Field(
        default="AUTOMATIC", description="Metadata IOPS provisioning (PERSISTENT_2)."
    )
    iops: int | None = Field(
        default=None,
        description="Metadata IOPS with USER_PROVISIONED: 1500, 3000, 6000, 12000, or a multiple "
        "of 12000 up to 192000.",
    )


class ExistingLustreConfig(Section):
    """A file system that already exists. Synth is offline, so its DNS and mount names are given."""

    file_system_id: str = Field(
        pattern=r"^fs-[0-9a-f]{8,17}$", json_schema_extra=hint("like fs-0123456789abcdef0")
    )
    dns_name: str = Field(
        pattern=r"^fs-[0-9a-f]{8,17}\.fsx\.[a-z0-9-]+\.amazonaws\.com$",
        json_schema_extra=hint("like fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"),
    )
    mount_name: str = Field(
        pattern=r"^[a-z0-9]{8}$",
        json_schema_extra=hint("8 characters, as `aws fsx describe-file-systems` shows"),
    )


class LustreConfig(Section):
    """FSx for Lustre PERSISTENT_2, Lustre 2.15, in the cluster subnet."""

    existing: ExistingLustreConfig | None = Field(
        default=None, description="Use an existing file system instead of creating one."
    )
    storage_capacity_gib: int = Field(
        default=1200, gt=0, description="1200 or a multiple of 2400 GiB."
    )
    throughput_per_unit_storage: int = Field(
        default=250,
        description="MB/s per TiB of storage: 125, 250, 500 or 1000.",
        json_schema_extra={"enum": [125, 250, 500, 1000]},
    )
    data_compression: Literal["LZ4", "NONE"] = Field(default="LZ4")
    file_system_type_version: Literal["2.15"] = Field(default="2.15")
    metadata: MetadataConfig = Field(default_factory=MetadataConfig)
    data_repository_associations: list[DataRepositoryAssociationConfig] = Field(
        default_factory=lambda: [DataRepositoryAssociationConfig()],
        description="Links between file system directories and bucket prefixes (at most 8).",
    )
    automatic_backup_retention_days: int = Field(
        default=0, ge=0, le=90, description="Daily automatic backups kept this many days (0: off)."
    )
    weekly_maintenance_start_time: str | None = Field(
        default=None,
        pattern=r"^[1-7]:([01]\d|2[0-3]):[0-5]\d$",
        description="d:HH:MM in UTC, d=1 is Monday.",
        json_schema_extra=hint("like 7:03:00 (Sunday 03:00 UTC)"),
    )
    removal_policy: Retention = Field(
        default="retain", description="What `cdk destroy` does with a new file system."
    )


class StorageConfig(Section):
    bucket: BucketConfig = Field(default_factory=BucketConfig)
    lustre: LustreConfig = Field(default_factory=LustreConfig)


INSTANCE_TYPE = r"^ml\.[a-z0-9-]+\.[a-z0-9]+$"
# Kubernetes names (config/kubernetes_names.py): a job's name is a DNS-1035 label (its pods get
# Services), a namespace a DNS-1123 label.
DNS_LABEL = DNS1035_LABEL_PATTERN
NAMESPACE = DNS1123_LABEL_PATTERN
# A priority class of task governance's cluster policy (the API's pattern: an RFC 1123 label).
PRIORITY_CLASS_NAME = DNS1123_LABEL_PATTERN


# --- people ------------------------------------------------------------------------------------

USER_NAME = r"^[a-z][a-z0-9-]{0,31}$"


class UserConfig(Section):
    """A person of the environment: one POSIX identity on the cluster's nodes and in Studio, so
    files written by a job and from a notebook have the same owner."""

    name: str = Field(
        pattern=USER_NAME,
        description="Login name on the nodes and Studio profile name.",
        json_schema_extra=hint(
            "1-32 lowercase letters, digits and hyphens, starting with a letter"
        ),
    )
    uid: int = Field(
        ge=10000,
        le=4000000,
        description="POSIX user id, 10000-4000000 (Studio's range), not 65534-65535 (the nodes' "
        "nobody). Never give a removed user's uid to someone else: their files on FSx would "
        "change owner.",
    )
    gid: int = Field(default=1001, ge=1001, le=4000000, description="POSIX group id, 1001-4000000.")
    admin: bool = Field(default=False, description="Passwordless sudo on the cluster's nodes.")


# Slurm account names: sacctmgr keeps accounts in lower case; `root` is Slurm's own account.
TEAM_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class TeamQuotaConfig(Section):
    """Compute a team is guaranteed on one instance type (EKS task governance: an item of its
    compute allocation's `ComputeQuotaResources`): whole instances, or accelerators of them."""

    instance_type: str = Field(
        pattern=INSTANCE_TYPE,
        description="An instance type of one of the cluster's worker groups.",
        json_schema_extra=hint("a worker group's type, like ml.p5.48xlarge"),
    )
    instances: int | None = Field(
        default=None,
        ge=0,
        description="Instances of the type guaranteed to the team (`Count`). Exclusive with "
        "accelerators.",
    )
    accelerators: int | None = Field(
        default=None,
        ge=0,
        description="Accelerators (GPUs, Trainium chips) of the type guaranteed to the team "
        "(`Accelerators`; HyperPod gives the matching share of vCPUs and memory). Exclusive with "
        "instances.",
    )


TeamSharing = Literal["lend_and_borrow", "lend", "dont_lend"]


class TeamConfig(Section):
    """A team. On Slurm: one Slurm account, with the fair share and GPU limit of the team and an
    association for each member (docs/accounting.md). On EKS, with task governance: a compute
    allocation of HyperPod's, which gives the team its namespace and queue
    (docs/governance.md)."""

    name: str = Field(
        pattern=TEAM_NAME,
        description="The team's Slurm account (jobs run with --account=<name>); on EKS the "
        "team of a compute allocation, whose namespace is hyperpod-ns-<name> (no underscores "
        "there).",
        json_schema_extra=hint(
            "1-32 lowercase letters, digits, hyphens and underscores, starting with a letter"
        ),
    )
    members: list[Annotated[str, Field(pattern=USER_NAME)]] = Field(
        default_factory=list,
        description="Names of `users` in the team; a person is in at most one team, which is "
        "their default account (on EKS, the team of the jobs they run).",
        json_schema_extra=hint("names from the top-level users list, like [alice, bob]"),
    )
    fairshare: int = Field(
        default=1,
        ge=1,
        le=1000000,
        description="The team's shares under Slurm's root account (Fairshare): its part of the "
        "cluster is fairshare / the sum of every team's. On EKS the team's fair-share weight "
        "(FairShareWeight, at most 100): its part of idle compute when "
        "cluster.eks.task_governance.fair_share is on.",
    )
    gpu_limit: int | None = Field(
        default=None,
        ge=0,
        description="Slurm: GPUs the team's running jobs may hold at once (GrpTRES=gres/gpu=N on "
        "its account). Left out: no limit. Enforced only where the cluster enforces limits "
        "(AccountingStorageEnforce=limits). On EKS a team's share is its quota.",
    )
    quota: list[TeamQuotaConfig] = Field(
        default_factory=list,
        description="EKS task governance: the compute guaranteed to the team, per instance type "
        "of the worker groups (at most 15). Empty: the team runs only on idle compute it "
        "borrows.",
    )
    priority: str | None = Field(
        default=None,
        pattern=PRIORITY_CLASS_NAME,
        description="EKS task governance: the priority class (of "
        "cluster.eks.task_governance.priority_classes) the team's jobs get unless the job names "
        "one (trainer.job.priority).",
    )
    sharing: TeamSharing = Field(
        default="lend_and_borrow",
        description="EKS task governance: lend_and_borrow (idle compute of the team's quota "
        "goes to others, and the team borrows theirs), lend (lends only) or dont_lend "
        "(`ResourceSharingConfig.Strategy`). Jobs on borrowed compute can be preempted when its "
        "team reclaims it.",
    )
    borrow_limit_percent: int | None = Field(
        default=None,
        ge=1,
        le=500,
        description="EKS task governance, with lend_and_borrow: how much idle compute the team "
        "may borrow, 1-500 percent of its quota (`BorrowLimit`; CloudFormation's reference). "
        "Left out: HyperPod's default (50).",
    )
    preempt_own_tasks: bool = Field(
        default=True,
        description="EKS task governance: the team's higher-priority jobs preempt its own "
        "lower-priority ones (`PreemptTeamTasks: LowerPriority`); false: Never.",
    )


# --- cluster -----------------------------------------------------------------------------------

NAME_63 = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
DeepHealthCheck = Literal["InstanceStress", "InstanceConnectivity"]
# What the file may write: MultiNodeTrainingValidation is in the API's model but CloudFormation's
# schema refuses it (cfn-lint E3030), so `validate` refuses it with that reason rather than as an
# unknown word (validators/platform.py).
DeepHealthCheckName = Literal[
    "InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation"
]
DEFAULT_DEEP_HEALTH_CHECKS: tuple[DeepHealthCheck, ...] = ("InstanceStress", "InstanceConnectivity")
# A key's ARN (CloudWatch Logs takes no alias): a key id is a UUID, or mrk-<32 hex> for a
# multi-Region key.
KMS_KEY_ARN = (
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/"
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})$"
)
TRAINING_PLAN_ARN = r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/.+$"
# Kubernetes label keys and values, and taint keys and values (config/kubernetes_names.py): a
# pattern cannot measure a key's prefix (253) and name (63) apart; `kubernetes-names` does.
K8S_KEY = QUALIFIED_NAME_PATTERN
K8S_VALUE = LABEL_VALUE_PATTERN
TaintEffect = Literal[
    "NoSchedule", "PreferNoSchedule", "NoExecute"
]  # kubernetes_names.TAINT_EFFECTS


class GroupLifecycleConfig(Section):
    """Steps of your own on a group's nodes, after hyperpod-kit's lifecycle script."""

    scripts: list[str] = Field(
        default_factory=list,
        description="Shell scripts (paths relative to the environment file) run as root, in "
        "order, at the end of node provisioning. HyperPod runs them again on replaced nodes, so "
        "each must be idempotent.",
    )
    stage: Literal["on_create", "on_init_complete"] = Field(
        default="on_create",
        description="When HyperPod runs the group's lifecycle script: on_create (OnCreate: "
        "during provisioning, the default) or on_init_complete (OnInitComplete: after "
        "HyperPod's own AMI-based set-up, Slurm and Docker included). The two are exclusive.",
    )


class KubernetesTaint(Section):
    key: str = Field(
        min_length=1,
        max_length=QUALIFIED_NAME_TOTAL_MAX,
        pattern=K8S_KEY,
        description="Taint key (a Kubernetes qualified name, optionally with a DNS prefix).",
        json_schema_extra=hint("like example.com/dedicated or gpu"),
    )
    value: str | None = Field(
        default=None,
        min_length=1,
        max_length=LABEL_VALUE_MAX,
        pattern=K8S_VALUE,
        description="Taint value (a Kubernetes label value).",
    )
    effect: TaintEffect = Field(description="What the taint does to pods that do not tolerate it.")


class GroupKubernetesConfig(Section):
    """Labels and taints HyperPod keeps on the group's nodes (EKS: `KubernetesConfig`,
    reconciled by HyperPod). The rendered EKS job selects the labels of its group and tolerates
    its taints."""

    labels: dict[
        Annotated[str, Field(min_length=1, max_length=QUALIFIED_NAME_TOTAL_MAX, pattern=K8S_KEY)],
        Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=K8S_VALUE)],
    ] = Field(default_factory=dict, description="Node labels (at most 50).")
    taints: list[KubernetesTaint] = Field(
        default_factory=list, description="Node taints (at most 50)."
    )


class RollingDeployment(Section):
    """How HyperPod rolls an AMI update through a group in batches (`DeploymentConfig`; EKS
    clusters only: AWS updates a Slurm group all at once)."""

    batch_size: int = Field(
        default=1, ge=1, description="Nodes updated at a time: a count, or a percentage."
    )
    batch_unit: Literal["instances", "percent"] = Field(
        default="instances", description="What batch_size counts."
    )
    rollback_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Nodes rolled back at a time (same unit). Default: HyperPod's.",
    )
    wait_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="Wait between batches, 0-3600 seconds."
    )
    rollback_on_alarms: bool = Field(
        default=True,
        description="Roll back when one of hyperpod-kit's health alarms fires during the update "
        "(lifecycle-script failures, node-check failures, node health events: the monitoring "
        "stack's alarms, by their fixed names). Needs monitoring.enabled.",
    )


class AmiUpdatesConfig(Section):
    """Scheduled AMI updates of a group (`ScheduledUpdateConfig`)."""

    schedule: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^cron\(.+\)$",
        description="When HyperPod updates the group's AMI: a cron expression, in UTC.",
        json_schema_extra=hint("like cron(0 3 ? * SUN *)"),
    )
    deployment: RollingDeployment = Field(
        default_factory=RollingDeployment,
        description="How the update rolls through the group in batches: EKS clusters only (a "
        "Slurm group is updated all at once). Default on EKS: one node at a time, rolled back "
        "on the health alarms.",
    )


class AutoPatchConfig(Section):
    """Automatic OS security patches of a group (`AutoPatchConfig`)."""

    strategy: Literal["when_idle", "when_all_idle"] = Field(
        description="when_idle: each node is patched once it runs no job; when_all_idle: the "
        "group is patched once none of its nodes runs a job."
    )
    deployment: RollingDeployment | None = Field(
        default=None,
        description="How patches roll through the group in batches: EKS clusters only. "
        "Default: HyperPod's.",
    )


class GroupNetworkConfig(Section):
    """The group's own network settings (`OverrideVpcConfig`, `NetworkInterface`)."""

    interface_type: Literal["efa", "efa-only"] | None = Field(
        default=None,
        description="efa: EFA with ENA (IP networking too); efa-only: the EFA device without "
        "ENA. Left out: HyperPod's default for the type. EFA types only.",
    )
    subnet_ids: list[SubnetId] | None = Field(
        default=None,
        description="Private subnets of the cluster's (existing) VPC for this group's nodes "
        "instead of the cluster's subnet.",
    )
    security_group_ids: list[SecurityGroupId] | None = Field(
        default=None,
        description="Security groups for this group's nodes (with subnet_ids; default: the "
        "cluster's). Each needs all-traffic rules to itself for EFA.",
    )


class InstanceGroupConfig(Section):
    name: str = Field(
        pattern=NAME_63,
        description="Instance group name (letters, digits, hyphens; 1-63).",
        json_schema_extra=hint("letters, digits and single hyphens, like gpu-a"),
    )
    role: Literal["controller", "login", "compute", "worker"] = Field(
        description="controller/login/compute for Slurm; worker for EKS."
    )
    instance_type: str | None = Field(
        default=None,
        pattern=INSTANCE_TYPE,
        description="A HyperPod instance type (`ml.` prefix). Exclusive with instance_types.",
        json_schema_extra=hint("like ml.p5.48xlarge"),
    )
    instance_count: int = Field(ge=0, le=6758)
    instance_types: list[Annotated[str, Field(pattern=INSTANCE_TYPE)]] | None = Field(
        default=None,
        description="A flexible group: the instance types it may get, in priority order (2-20; "
        "`InstanceRequirements`). Exclusive with instance_type.",
    )
    min_instance_count: int | None = Field(
        default=None,
        ge=0,
        le=6758,
        description="Nodes the group needs to be InService (HyperPod rolls the group back if "
        "they are not there within 3 hours); at most instance_count.",
    )
    capacity: Literal["on_demand", "spot"] | None = Field(
        default=None,
        description="on_demand or spot capacity (`CapacityRequirements`). Left out: on-demand "
        "(or the training plan's reserved capacity).",
    )
    training_plan_arn: str | None = Field(
        default=None,
        pattern=TRAINING_PLAN_ARN,
        description="This group's own training plan (instead of cluster.training_plan_arn). A "
        "plan reserves one instance type.",
        json_schema_extra=hint("like arn:aws:sagemaker:us-west-2:111122223333:training-plan/x"),
    )
    image_release_version: str | None = Field(
        default=None,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$",
        description="The HyperPod AMI release the group runs (MAJOR.MINOR.PATCH); EKS clusters "
        "only (a Slurm group runs HyperPod's latest AMI). Left out: the version recorded in the "
        "environment's lock, else the latest at deploy.",
        json_schema_extra=hint("like 1.2.3"),
    )
    image_id: str | None = Field(
        default=None,
        pattern=r"^(ami-[0-9a-fA-F]{8,17}|default)$",
        description="An AMI of your own (unencrypted, owned by the account) or `default`.",
        json_schema_extra=hint("like ami-0123456789abcdef0"),
    )
    threads_per_core: Literal[1, 2] = Field(
        default=1,
        description="1 disables hyperthreading (usual for training). Types without SMT "
        "(Graviton, Grace) take 1 only.",
    )
    ebs_volume_gib: int = Field(
        default=500, ge=1, le=16384, description="Extra EBS volume per node, at /opt/sagemaker."
    )
    ebs_kms_key_arn: str | None = Field(
        default=None,
        pattern=KMS_KEY_ARN,
        description="Customer managed KMS key for the extra EBS volume (default: an AWS owned "
        "key).",
    )
    root_volume_kms_key_arn: str | None = Field(
        default=None,
        pattern=KMS_KEY_ARN,
        description="Customer managed KMS key for the root volume (default: an AWS owned key).",
    )
    deep_health_checks: list[DeepHealthCheckName] | None = Field(
        default=None,
        description="Deep health checks HyperPod runs on a node before it takes work. Default: "
        "InstanceStress and InstanceConnectivity on accelerated types, none on CPU types.",
    )
    partition: str | None = Field(
        default=None,
        pattern=NAME_63,
        description="Slurm compute groups: the partition their nodes form (default: the group's "
        "name). Every node is also in the `dev` partition.",
        json_schema_extra=hint("letters, digits and single hyphens, no dots, like gpu"),
    )
    lifecycle: GroupLifecycleConfig = Field(default_factory=GroupLifecycleConfig)
    kubernetes: GroupKubernetesConfig | None = Field(
        default=None, description="EKS: labels and taints of the group's nodes."
    )
    network: GroupNetworkConfig | None = Field(default=None)
    ami_updates: AmiUpdatesConfig | None = Field(
        default=None,
        description="Scheduled AMI updates: in batches on EKS, the whole group at once on Slurm.",
    )
    auto_patch: AutoPatchConfig | None = Field(
        default=None, description="Automatic OS security patches."
    )

    @property
    def slurm_partition(self) -> str:
        return self.partition or self.name

    @property
    def types(self) -> list[str]:
        """Every instance type the group may get, in priority order (one for a fixed group)."""
        if self.instance_types is not None:
            return list(self.instance_types)
        return [self.instance_type] if self.instance_type is not None else []

    @property
    def primary_type(self) -> str:
        """The type the group asks for first ("" when the file names none: `validate` refuses)."""
        types = self.types
        return types[0] if types else ""

    @property
    def type_key(self) -> str:
        """The key of the file that names the group's types."""
        return "instance_types" if self.instance_types is not None else "instance_type"


def _default_groups() -> list[InstanceGroupConfig]:
    return [
        InstanceGroupConfig(
            name="controller", role="controller", instance_type="ml.m5.xlarge", instance_count=1
        ),
        InstanceGroupConfig(
            name="login", role="login", instance_type="ml.m5.xlarge", instance_count=1
        ),
        InstanceGroupConfig(
            name="compute", role="compute", instance_type="ml.g5.8xlarge", instance_count=2
        ),
    ]


AURORA_MYSQL_VERSION = r"^8\.0\.mysql_aurora\.3\.\d{2}\.\d+(\.\d+)?$"
DB_SCHEMA_NAME = r"^[a-zA-Z0-9$_]{1,64}$"


class AccountingConfig(Section):
    """Slurm accounting in a database of the environment's own: Aurora Serverless v2
    (MySQL-compatible) beside the cluster, its credentials in Secrets Manager, handed to HyperPod
    as `Orchestrator.Slurm.AccountingDatabase` (needs continuous provisioning). Left off,
    HyperPod keeps accounting in a database on the controller (docs/accounting.md)."""

    enabled: bool = False
    engine_version: str | None = Field(
        default=None,
        pattern=AURORA_MYSQL_VERSION,
        description="Aurora MySQL version. Left out: hyperpod-kit's default (a dated table), "
        "pinned in the environment's lock.",
        json_schema_extra=hint("like 8.0.mysql_aurora.3.10.6"),
    )
    min_capacity: float = Field(
        default=0.5,
        ge=0.5,
        le=256,
        description="Aurora Serverless v2 capacity the database never goes below, in ACUs (0.5 "
        "steps). slurmdbd keeps a connection open, so the database never pauses.",
    )
    max_capacity: float = Field(
        default=2,
        ge=1,
        le=256,
        description="Aurora Serverless v2 capacity the database may grow to, in ACUs (0.5 "
        "steps): large sacct and sreport queries scale it up for a while.",
    )
    database_name: str = Field(
        default="slurm_acct_db",
        pattern=DB_SCHEMA_NAME,
        description="The schema slurmdbd keeps its tables in (AccountingDatabase.Name). "
        "Written out so that a replaced cluster keeps the same history (HyperPod's default "
        "names it after the cluster's id).",
        json_schema_extra=hint("letters, digits, $ and _, like slurm_acct_db"),
    )
    backup_retention_days: int = Field(
        default=7, ge=1, le=35, description="Days of automated backups (point-in-time restore)."
    )
    rotation: bool = Field(
        default=False,
        description="Rotate the database password in Secrets Manager every rotation_days. Off: "
        "whether HyperPod's slurmdbd reads a rotated password is not verified "
        "(docs/accounting.md).",
    )
    rotation_days: int = Field(
        default=30, ge=1, le=1000, description="Days between two rotations, with rotation on."
    )
    removal_policy: Literal["retain", "snapshot", "destroy"] = Field(
        default="retain",
        description="What `cdk destroy` does with the database and its secret: retain (and "
        "deletion protection on), snapshot (a final snapshot, then delete), destroy.",
    )


class SlurmConfig(Section):
    """Slurm set up by HyperPod from the API (Orchestrator.Slurm and each group's SlurmConfig)."""

    config_strategy: Literal["Managed", "Overwrite", "Merge"] | None = Field(
        default=None,
        description="Managed: the API is the source of truth and manual slurm.conf edits make "
        "updates fail. Overwrite: the API's config replaces manual edits. Merge: both are kept. "
        "Left out: Managed; with continuous provisioning HyperPod takes only Merge and refuses "
        "the field, so it is left out of the request.",
    )
    enroot_pyxis: bool = Field(
        default=True,
        description="Containers in jobs (`srun --container-image`) through enroot and pyxis.",
    )
    enroot_pyxis_packages: str | None = Field(
        default=None,
        description="Folder (relative to the environment file) of enroot and pyxis .deb packages "
        "built for the cluster's Slurm, installed on nodes whose AMI has none. Left out: the "
        "AMI's copy is used, and jobs with a container image fail where it has none.",
    )
    accounting: AccountingConfig = Field(default_factory=AccountingConfig)


KUBERNETES_VERSION = r"^1\.\d{2}$"
ADDON_VERSION = r"^v\d+\.\d+\.\d+-eksbuild\.\d+$"


class EksAddonsConfig(Section):
    """EKS add-on versions (`aws eks describe-addon-versions --addon-name NAME`). Left out: the
    version EKS picks for the cluster's Kubernetes version at create time."""

    vpc_cni: str = Field(
        default="v1.20.1-eksbuild.3",
        pattern=ADDON_VERSION,
        description="Amazon VPC CNI; HyperPod needs 1.18.3 or newer.",
        json_schema_extra=hint("like v1.20.1-eksbuild.3"),
    )
    coredns: str | None = Field(default=None, pattern=ADDON_VERSION)
    kube_proxy: str | None = Field(default=None, pattern=ADDON_VERSION)
    pod_identity_agent: str | None = Field(default=None, pattern=ADDON_VERSION)
    cert_manager: str | None = Field(default=None, pattern=ADDON_VERSION)
    training_operator: str | None = Field(
        default=None,
        pattern=ADDON_VERSION,
        description="amazon-sagemaker-hyperpod-training-operator (runs HyperPodPyTorchJob).",
    )
    task_governance: str | None = Field(
        default=None,
        pattern=ADDON_VERSION,
        description="amazon-sagemaker-hyperpod-taskgovernance (HyperPod's Kueue), with "
        "cluster.eks.task_governance. Left out: hyperpod-kit's default (a dated table), pinned "
        "in the environment's lock.",
        json_schema_extra=hint("like v1.6.0-eksbuild.1"),
    )
    observability: str | None = Field(
        default=None,
        pattern=ADDON_VERSION,
        description="amazon-sagemaker-hyperpod-observability (with monitoring.prometheus).",
    )


ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$"


class DevicePluginsConfig(Section):
    """The NVIDIA and EFA device plugins (Helm charts pinned as HyperPod's chart pins them), for
    clusters where HyperPod's chart does not bring them: without them no pod can ask for a GPU
    or an EFA interface, and GPU jobs stay Pending."""

    enabled: bool | None = Field(
        default=None,
        description="Deploy them. Left out: on for a new EKS cluster without "
        "cluster.eks.helm_chart (HyperPod's chart ships both, and a second copy conflicts), off "
        "for an existing cluster (expected to run HyperPod's chart). The NVIDIA plugin runs on "
        "the groups' GPU types, the EFA plugin on their EFA types, each only where some group "
        "has one.",
    )
    nvidia_chart: str | None = Field(
        default=None,
        description="Folder (relative to the environment file) of the nvidia-device-plugin "
        "chart at the pinned version, for a cluster whose kubectl handler cannot reach "
        "https://nvidia.github.io/k8s-device-plugin (no NAT). Left out: installed from there "
        "at deploy.",
    )
    efa_chart: str | None = Field(
        default=None,
        description="Folder of the aws-efa-k8s-device-plugin chart at the pinned version, for "
        "a cluster whose kubectl handler cannot reach https://aws.github.io/eks-charts/. Left "
        "out: installed from there at deploy.",
    )


class PriorityClassConfig(Section):
    """A priority class of the cluster policy (`SchedulerConfig.PriorityClasses`): jobs that name
    it are queued and preempt by its weight."""

    name: str = Field(
        pattern=PRIORITY_CLASS_NAME,
        max_length=40,
        description="The class's name; a job names it in its kueue.x-k8s.io/priority-class "
        "label as <name>-priority.",
        json_schema_extra=hint("lowercase letters, digits and hyphens, like training"),
    )
    weight: int = Field(
        ge=0, le=100, description="0-100: a higher weight is queued first and preempts lower."
    )


class TaskGovernanceConfig(Section):
    """HyperPod task governance (EKS): the `amazon-sagemaker-hyperpod-taskgovernance` add-on
    (Kueue), a cluster policy with priority classes and fair share, and a compute allocation per
    team of the top-level `teams` (docs/governance.md)."""

    enabled: bool = False
    priority_classes: list[PriorityClassConfig] = Field(
        default_factory=list,
        description="The cluster policy's priority classes (at most 10). Empty: tasks are "
        "queued first-come first-served.",
    )
    fair_share: bool = Field(
        default=True,
        description="Teams borrow idle compute by their fair-share weight (teams[].fairshare); "
        "false: first come, first served (`SchedulerConfig.FairShare`).",
    )


class EksConfig(Section):
    """The EKS cluster HyperPod orchestrates through: created here, or an existing one."""

    kubernetes_version: str = Field(
        default="1.33",
        pattern=KUBERNETES_VERSION,
        description="Kubernetes version of a new EKS cluster: one in EKS's extended support is "
        "a warning, one past it an error (a dated calendar).",
        json_schema_extra=hint('a version HyperPod supports, quoted, like "1.33"'),
    )
    existing_cluster_name: str | None = Field(
        default=None,
        pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$",
        description="Use this EKS cluster (same account and region; authentication mode API or "
        "API_AND_CONFIG_MAP, HyperPod's Helm chart installed) instead of creating one.",
    )
    existing_cluster_security_group_id: SecurityGroupId | None = Field(
        default=None,
        description="With existing_cluster_name: a security group on that cluster's control "
        "plane (its cluster security group, `aws eks describe-cluster --query "
        "cluster.resourcesVpcConfig.clusterSecurityGroupId`). Studio's apps get HTTPS (443) "
        "to it for kubectl, through an ingress rule the Studio stack adds and removes; "
        "required with studio.enabled.",
    )
    admin_role_arns: list[Annotated[str, Field(pattern=ROLE_ARN)]] = Field(
        default_factory=list,
        description="IAM roles given cluster-admin through EKS access entries.",
    )
    public_access_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Empty: the API endpoint is private (reach it from the VPC). Otherwise the "
        "endpoint is also public, from these CIDRs only (public addresses, at most 40: EKS's "
        "quota).",
    )
    hyperpod_access_entry: bool = Field(
        default=False,
        description="Create a HYPERPOD_LINUX access entry for the cluster's execution role. Off: "
        "HyperPod is expected to create it (undocumented either way).",
    )
    helm_chart: str | None = Field(
        default=None,
        description="Folder (relative to the environment file) of the HyperPod Helm chart "
        "(sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart at a commit you pin), installed "
        "before the HyperPod cluster. Left out: health monitoring, deep health checks and job "
        "auto-restart are missing.",
    )
    device_plugins: DevicePluginsConfig = Field(default_factory=DevicePluginsConfig)
    addons: EksAddonsConfig = Field(default_factory=EksAddonsConfig)
    task_governance: TaskGovernanceConfig = Field(default_factory=TaskGovernanceConfig)


class AutoscalingConfig(Section):
    """Karpenter-based autoscaling that HyperPod manages (EKS; `AutoScaling` and a cluster role
    allowed to add and delete the cluster's nodes)."""

    enabled: bool = False
    autoscaler: Literal["Karpenter"] = Field(
        default="Karpenter", description="The only autoscaler HyperPod offers."
    )


class TieredCheckpointingConfig(Section):
    """Managed tiered checkpointing (`TieredStorageConfig`): a memory daemon on every node
    keeps checkpoints in CPU memory for training code that uses AWS's checkpointing library
    (the bundled trainer does not: docs/trainer.md)."""

    enabled: bool = False
    memory_percent: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Share of each node's memory given to checkpoints (HyperPod takes 20-100). "
        "Left out: HyperPod's default.",
    )


class NodeSetupConfig(Section):
    """What the lifecycle scripts set up on every node besides people and containers
    (docs/lifecycle.md, "Node set-up"). Each is idempotent and rerun on every replaced node."""

    ssh_keys: bool = Field(
        default=True,
        description="Slurm: each user gets an ed25519 key pair in their FSx home "
        "(~/.ssh/id_ed25519, made once by the controller, never overwritten) authorized in "
        "~/.ssh/authorized_keys, and nodes trust each other's host keys inside the VPC, so "
        "`ssh` between nodes and multi-node launchers work.",
    )
    pam_slurm_adopt: bool = Field(
        default=False,
        description="Slurm compute nodes: pam_slurm_adopt in sshd's account stack, so a user "
        "reaches a node only while a job of theirs runs there (admins, root and ubuntu "
        "always). The module comes from the AMI or `packages` (built for the cluster's Slurm), "
        "and Slurm must run with PrologFlags=Contain, which HyperPod's slurm.conf decides: "
        "nodes where either is missing say so and change nothing. Off by default: it takes "
        "away ssh access people use.",
    )
    logrotate: bool = Field(
        default=True,
        description="Rotate hyperpod-kit's logs (/var/log/hyperpod-kit/*.log) and, on Slurm, "
        "the Slurm daemons' logs (/var/log/slurm/*.log) unless the AMI rotates them already.",
    )
    hold_lustre_client: bool = Field(
        default=True,
        description="apt-mark hold the Lustre client packages of the running kernel (and "
        "lustre-client-modules-aws, which would pull in a newer kernel), so an upgrade cannot "
        "leave the node without a Lustre module. Nodes without apt are left as they are.",
    )
    container_storage: Literal["none", "nvme", "ebs"] = Field(
        default="none",
        description="EKS: containerd's and kubelet's data (/var/lib/containerd, "
        "/var/lib/kubelet) bind-mounted from the instance's NVMe (/opt/dlami/nvme; the EBS "
        "volume where a node has none) or the group's EBS volume (/opt/sagemaker), set up "
        "before the two start, so images do not fill the root volume. none: where the AMI puts "
        "them.",
    )
    packages: str | None = Field(
        default=None,
        description="Folder (relative to the environment file) of .deb packages uploaded with "
        "the lifecycle scripts, installed on nodes that lack what a step needs: a "
        "*pam*slurm*adopt*.deb built for the cluster's Slurm, logrotate_*.deb.",
    )


class ClusterConfig(Section):
    name: str | None = Field(
        default=None,
        pattern=NAME_63,
        description="HyperPod cluster name (default: the environment's name).",
        json_schema_extra=hint("letters, digits and single hyphens, 1-63"),
    )
    node_recovery: Literal["Automatic", "None"] = Field(
        default="Automatic",
        description="Automatic: HyperPod reboots or replaces a node that fails a health check.",
    )
    instance_groups: list[InstanceGroupConfig] = Field(
        default_factory=_default_groups, description="The cluster's instance groups (at most 100)."
    )
    operator_policy: bool = Field(
        default=False,
        description="true: the cluster stack also creates an IAM managed policy with the "
        "statements `hyperpod-kit nodes --print-policy` prints (list, replace, reboot and delete "
        "this cluster's nodes; stack output OperatorPolicyArn), for the people or roles who "
        "operate the nodes to be given. Attach it yourself; while it is attached, turning this "
        "off fails to delete it.",
    )
    node_provisioning: Literal["on_create", "continuous"] = Field(
        default="on_create",
        description="continuous (`NodeProvisioningMode: Continuous`): groups scale without "
        "blocking each other, partial capacity is kept, failed nodes are retried, and HyperPod "
        "sends cluster events. Needed by autoscaling (and by Slurm accounting databases).",
    )
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    tiered_checkpointing: TieredCheckpointingConfig = Field(
        default_factory=TieredCheckpointingConfig
    )
    training_plan_arn: str | None = Field(
        default=None,
        pattern=TRAINING_PLAN_ARN,
        description="A SageMaker training plan whose reserved capacity the accelerated compute "
        "groups use; a plan is for one instance type, which they must share.",
        json_schema_extra=hint(
            "like arn:aws:sagemaker:us-west-2:111122223333:training-plan/my-plan"
        ),
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    eks: EksConfig = Field(default_factory=EksConfig)
    node_setup: NodeSetupConfig = Field(default_factory=NodeSetupConfig)


StudioApp = Literal["JupyterLab", "CodeEditor"]
STUDIO_INSTANCE_TYPE = r"^ml\.[a-z0-9]+\.[a-z0-9]+$"


def _default_apps() -> list[StudioApp]:
    return ["JupyterLab", "CodeEditor"]


class StudioConfig(Section):
    """A SageMaker Studio domain (VPC-only, IAM auth) in the cluster's subnet: one profile per
    selected person of `users`, with that person's uid/gid and their FSx partition mounted."""

    enabled: bool = False
    partitions: Literal["per_user", "shared"] = Field(
        default="per_user",
        description="per_user: each profile mounts only /<name> of the file system (/fsx/<name> "
        "on the nodes, owned by the user, mode 0700). shared: every profile mounts shared_path "
        "(root-owned, mode 1777: anyone writes, only owners delete).",
    )
    include: list[Annotated[str, Field(pattern=USER_NAME)]] | None = Field(
        default=None,
        description="Names of `users` who get a Studio profile. Left out: every user.",
        json_schema_extra=hint("names from the top-level users list, like [alice, bob]"),
    )
    exclude: list[Annotated[str, Field(pattern=USER_NAME)]] = Field(
        default_factory=list,
        description="Names of `users` who get no Studio profile (applied after include).",
    )
    users: list[
        Annotated[
            str,
            Field(
                pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
                json_schema_extra=hint("letters, digits and single hyphens, like alice"),
            ),
        ]
    ] = Field(
        default_factory=list,
        description="Deprecated: the same as `include` (people are now defined once, in the "
        "top-level `users`, with their uid and gid).",
    )
    shared_path: str = Field(
        default="/shared",
        description="partitions: shared only: the directory every profile mounts.",
        json_schema_extra=hint("an absolute path such as /shared"),
    )
    apps: list[StudioApp] = Field(
        default_factory=_default_apps,
        description="The applications users get, each once (other Studio apps are hidden); each "
        "one starts with hyperpod-kit's lifecycle configuration.",
    )
    spaces: bool = Field(
        default=True,
        description="Create one private space per user and app with the file system attached, "
        "so it is mounted on first open. Off: users create their own spaces and attach it.",
    )
    space_ebs_gib: int = Field(
        default=20, ge=5, le=16384, description="EBS volume of each created space (its home)."
    )
    default_instance_type: str = Field(
        default="ml.t3.medium",
        pattern=STUDIO_INSTANCE_TYPE,
        description="Instance type a space starts on.",
        json_schema_extra=hint("a Studio instance type like ml.t3.medium"),
    )
    instance_types: list[Annotated[str, Field(pattern=STUDIO_INSTANCE_TYPE)]] = Field(
        default_factory=lambda: ["ml.t3.medium", "ml.t3.large", "ml.m5.large", "ml.m5.xlarge"],
        description="Instance types users may start apps on (enforced by the execution role).",
    )
    idle_shutdown_minutes: int | None = Field(
        default=120,
        ge=60,
        le=525600,
        description="Stop an app idle this long (60-525600); null: never.",
    )
    partition_timeout_minutes: int = Field(
        default=20,
        ge=5,
        le=110,
        description="How long deploy waits for the cluster's nodes to report a new user's "
        "partition before it fails (the node-side sync runs every few minutes).",
    )

    def selected(self, users: list[UserConfig]) -> list[UserConfig]:
        """The people who get a profile: `include` (or the deprecated `users`; neither: all),
        minus `exclude`, in the order of `users`. Unknown names are the validator's business."""
        wanted = self.include if self.include is not None else (self.users or None)
        chosen = [u for u in users if wanted is None or u.name in wanted]
        return [u for u in chosen if u.name not in self.exclude]

    def file_system_path(self, user: str) -> str:
        """The directory of the file system a user's profile mounts (Studio's FileSystemPath)."""
        return f"/{user}" if self.partitions == "per_user" else self.shared_path


Remediation = Literal["none", "reboot", "replace"]
# The node checks (lifecycle/health/checks/) and what a failure asks for unless the file says
# otherwise. gpu-count and gpu-errors never act: HyperPod's health-monitoring agent watches GPU
# count, nvidia-smi and XID/DCGM errors itself and repairs the node; a second actor would fight it.
NODE_CHECK_DEFAULTS: dict[str, Remediation] = {
    "gpu-count": "none",
    "gpu-errors": "none",
    "efa": "replace",
    "fsx-mount": "reboot",
    "disk-space": "none",
}
NODE_CHECK_NAMES = tuple(NODE_CHECK_DEFAULTS)
AGENT_COVERED_CHECKS = frozenset({"gpu-count", "gpu-errors"})


class SubscribersConfig(Section):
    """Who gets the alerts: the environment's SNS topic delivers to these."""

    emails: list[str] = Field(
        default_factory=list,
        description="E-mail addresses subscribed to the alert topic (each confirms once, from "
        "the message AWS sends). monitoring.alarm_email is one more.",
    )
    sns_topic_arns: list[str] = Field(
        default_factory=list,
        description="Existing SNS topics (same region) that also get every alert, e.g. a pager "
        "integration. Their access policy, and key policy when encrypted, must let "
        "events.amazonaws.com and cloudwatch.amazonaws.com publish.",
    )


class NodeChecksConfig(Section):
    """Health checks on the cluster's nodes, run by a systemd timer (never slurm.conf's
    HealthCheckProgram, which is drift under the Managed strategy)."""

    checks: list[str] = Field(
        default_factory=lambda: list(NODE_CHECK_NAMES),
        description="Checks to run: gpu-count, gpu-errors (XID and ECC), efa, fsx-mount, "
        "disk-space. A check that cannot run on a node (no GPU on a CPU group) says so and "
        "does nothing.",
    )
    interval_seconds: int = Field(
        default=300, description="Seconds between two runs of the checks on a node (60-3600)."
    )
    remediation: dict[str, Remediation] = Field(
        default_factory=dict,
        description="What a failing check asks HyperPod for: none (log and alert), reboot or "
        "replace. Defaults: efa replace, fsx-mount reboot, disk-space none. gpu-count and "
        "gpu-errors only log and alert: HyperPod's health-monitoring agent acts on them.",
    )
    fsx_timeout_seconds: int = Field(
        default=30,
        description="A stat and a small write on /fsx must finish within this many seconds.",
    )
    min_free_disk_percent: int = Field(
        default=5, ge=1, le=50, description="Free space (and inodes) below this fails disk-space."
    )
    volumes: list[str] = Field(
        default_factory=lambda: ["/", "/opt/sagemaker", "/opt/dlami/nvme"],
        description="Root and container volumes disk-space watches; one that is not there on a "
        "node is skipped.",
    )
    cooldown_minutes: int = Field(
        default=30,
        ge=5,
        le=1440,
        description="After asking for a reboot or replacement, a node asks for nothing else "
        "for this long, so a flapping check cannot repair a node twice.",
    )


class AlarmsConfig(Section):
    """CloudWatch alarm thresholds; every alarm notifies the subscribers."""

    fsx_free_capacity_percent: int = Field(
        default=10,
        ge=1,
        le=90,
        description="Alarm when the file system's free capacity falls below this share.",
    )
    fsx_throughput_percent: int = Field(
        default=90,
        ge=10,
        le=100,
        description="Alarm when client throughput stays above this share of the file system's "
        "provisioned throughput (capacity x tier) for 15 minutes.",
    )
    lifecycle_failures: int = Field(
        default=1,
        ge=1,
        description="Alarm when this many lifecycle-script failures are logged within 15 minutes.",
    )
    node_health_events: int = Field(
        default=3,
        ge=1,
        description="Alarm when this many node health events arrive within 15 minutes (each is "
        "also sent on its own): several nodes at once points at something shared.",
    )


AMP_WORKSPACE_ARN = r"^arn:aws[a-z-]*:aps:[a-z0-9-]+:\d{12}:workspace/ws-[a-zA-Z0-9-]{1,64}$"
GrafanaAuthentication = Literal["iam_identity_center", "saml"]


class GrafanaConfig(Section):
    """An Amazon Managed Grafana workspace that reads the Prometheus workspace (docs/
    observability.md). Off by default: a workspace costs money for every active user."""

    enabled: bool = False
    authentication: GrafanaAuthentication = Field(
        default="iam_identity_center",
        description="How people sign in: iam_identity_center (IAM Identity Center must be "
        "enabled in the account or its organization; users and groups are assigned to the "
        "workspace in its console) or saml (your identity provider's metadata URL).",
    )
    saml_metadata_url: str | None = Field(
        default=None,
        pattern=r"^https://[^\s]+$",
        description="saml only: the identity provider's SAML metadata URL.",
        json_schema_extra=hint("an https:// URL your identity provider publishes"),
    )
    saml_role_attribute: str = Field(
        default="role",
        pattern=r"^[A-Za-z0-9_:./-]{1,256}$",
        description="saml only: the assertion attribute that carries a user's roles.",
    )
    saml_admin_values: list[Annotated[str, Field(pattern=r"^[^\s]{1,256}$")]] = Field(
        default_factory=list,
        description="saml only: values of that attribute that make a user a Grafana admin.",
    )
    version: str = Field(
        default="10.4",
        pattern=r"^\d{1,2}\.\d{1,2}$",
        description="Grafana version of the workspace (GrafanaVersion); pinned in the lock: "
        "left to the service, a new workspace would take whatever it offers that day.",
        json_schema_extra=hint('a version Amazon Managed Grafana offers, quoted, like "10.4"'),
    )


class ExportersConfig(Section):
    """Slurm: the exporters each node's Prometheus agent scrapes (EKS: HyperPod's observability
    add-on runs its own)."""

    node: bool = Field(
        default=True,
        description="prometheus-node-exporter from Ubuntu's archive (or the packages folder): "
        "CPU, memory, disks, file systems (FSx included), network, on every node.",
    )
    dcgm: bool = Field(
        default=False,
        description="NVIDIA's DCGM exporter (GPU utilization, memory, temperature, power, XID "
        "and ECC errors) on GPU nodes: NVIDIA's image from nvcr.io by its digest, run by "
        "Docker. Needs a route to nvcr.io (network.internet).",
    )
    efa: bool = Field(
        default=False,
        description="An EFA exporter (node_exporter built with the amazonefa collector) on "
        "EFA nodes: the binary `efa-exporter` from the packages folder (nothing is fetched "
        "from GitHub at boot).",
    )
    slurm: bool = Field(
        default=False,
        description="A Slurm exporter on the controller: the binary `slurm-exporter` "
        "(rivosinc/prometheus-slurm-exporter, built by you) from the packages folder.",
    )


class PrometheusConfig(Section):
    """Amazon Managed Service for Prometheus beside CloudWatch (docs/observability.md): a new
    workspace or an existing one, metrics remote-written to it with SigV4, optional Grafana."""

    enabled: bool = False
    workspace_arn: str | None = Field(
        default=None,
        pattern=AMP_WORKSPACE_ARN,
        description="An existing workspace (same region; same account, or one whose policy "
        "lets the nodes' role remote-write). Left out: a workspace is created, encrypted with "
        "kms_key_arn when the file names one, and retained when the stack goes.",
        json_schema_extra=hint("like arn:aws:aps:us-west-2:111122223333:workspace/ws-0123abcd"),
    )
    retention_days: int | None = Field(
        default=None,
        ge=1,
        le=1095,
        description="A created workspace only: days its metrics are kept (left out: the "
        "service's default).",
    )
    scrape_interval_seconds: int = Field(
        default=60,
        ge=10,
        le=300,
        description="Slurm: how often each node's agent scrapes its exporters (every sample is "
        "billed by the workspace).",
    )
    exporters: ExportersConfig = Field(default_factory=ExportersConfig)
    packages: str | None = Field(
        default=None,
        description="Folder (relative to the environment file) uploaded with the lifecycle "
        "scripts: prometheus_*.deb and prometheus-node-exporter_*.deb (with what they depend "
        "on) for nodes without internet, `efa-exporter` and `slurm-exporter` binaries for "
        "those exporters.",
    )
    grafana: GrafanaConfig = Field(default_factory=GrafanaConfig)


class MonitoringConfig(Section):
    """Alerts, alarms, a dashboard and node health checks that ask HyperPod to repair nodes."""

    enabled: bool = True
    alarm_email: str | None = Field(
        default=None,
        pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
        description="An e-mail address that gets every alert (one of the subscribers).",
        json_schema_extra=hint("an e-mail address like ml-oncall@example.com"),
    )
    auto_repair: bool = Field(
        default=True,
        description="Node checks may ask HyperPod to reboot or replace their node (and, with "
        "cluster.node_recovery: None, a Lambda performs the repairs HyperPod's node health events "
        "recommend). false: alerts only.",
    )
    subscribers: SubscribersConfig = Field(default_factory=SubscribersConfig)
    node_checks: NodeChecksConfig = Field(default_factory=NodeChecksConfig)
    alarms: AlarmsConfig = Field(default_factory=AlarmsConfig)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)

    @property
    def emails(self) -> list[str]:
        """Every e-mail subscriber, alarm_email first, each once."""
        found = ([self.alarm_email] if self.alarm_email else []) + self.subscribers.emails
        return list(dict.fromkeys(found))


# --- trainer -----------------------------------------------------------------------------------


class ElasticConfig(Section):
    """HyperPodPyTorchJob ``elasticPolicy`` (EKS): replicas come and go, the global batch stays."""

    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)
    replica_increment_step: int | None = Field(default=None, ge=1)
    replica_discrete_values: list[int] | None = None
    scaling_timeout_seconds: int = Field(default=600, ge=0)
    graceful_shutdown_timeout_seconds: int = Field(default=600, ge=0)
    faulty_scale_down_timeout_seconds: int = Field(default=600, ge=0)


class JobConfig(Section):
    """The training job that the job templates (sbatch, HyperPodPyTorchJob) launch."""

    name: str = Field(
        default="pretrain",
        pattern=DNS_LABEL,
        max_length=40,
        description="Job name: a DNS label of at most 40 characters (Kubernetes adds suffixes "
        "such as -pod-0 to name pods and services).",
        json_schema_extra=hint("lowercase letters, digits and hyphens, starting with a letter"),
    )
    instance_group: str | None = Field(
        default=None,
        description="The compute (Slurm) or worker (EKS) group the job runs on; needed when "
        "there are several.",
    )
    preset: str = Field(default="llama-1b", description="The trainer's model preset.")
    task: Literal["pretrain", "sft"] = Field(
        default="pretrain",
        description="What the trainer does (its train.task): pretrain on token shards, or sft: "
        "fine-tune on `prepare-data --format chat` shards, the loss on the assistant's tokens "
        "only (docs/trainer.md, Fine-tuning).",
    )
    nodes: int = Field(default=2, ge=1)
    processes_per_node: int | None = Field(
        default=None,
        ge=1,
        description="Ranks per node (default: the instance type's GPU count).",
    )
    global_batch_size: int = Field(default=256, ge=1)
    micro_batch_size: int = Field(default=1, ge=1)
    seq_len: int = Field(default=4096, ge=8)
    activation_checkpointing: bool = Field(
        default=False,
        description="Recompute each transformer block's activations in backward (the trainer's "
        "model.activation_checkpointing): far less memory per GPU for about a third more compute.",
    )
    max_steps: int = Field(default=1000, ge=1)
    data_path: str = Field(
        default="/fsx/data/tokens", description="Folder of tokenized shards (.npy or .bin)."
    )
    token_dtype: Literal["uint16", "uint32"] = Field(
        default="uint32",
        description="Token id width of .bin shards; Llama 3 vocabularies need uint32.",
    )
    checkpoint_dir: str = Field(
        default="/fsx/checkpoints",
        description="On the shared file system, so a replaced node resumes from it.",
    )
    checkpoint_every: int = Field(default=100, ge=1)
    keep_last: int = Field(default=3, ge=1)
    auto_resume: bool = True
    stop_grace_seconds: int = Field(
        default=180,
        ge=30,
        le=3600,
        description="Seconds between the stop signal (SIGTERM) and the kill: the final save.",
    )
    max_retries: int = Field(default=3, ge=0, le=100)
    partition: str | None = Field(
        default=None,
        pattern=NAME_63,
        description="Slurm partition (default: the job's compute group's partition).",
    )
    namespace: str = Field(
        default="training",
        pattern=NAMESPACE,
        max_length=63,
        description="Kubernetes namespace of the job (EKS); the EKS stack creates it with the "
        "FSx volume claim. A job of a team under task governance runs in the team's namespace "
        "(hyperpod-ns-<team>) instead.",
    )
    user: str | None = Field(
        default=None,
        pattern=USER_NAME,
        description="EKS: run the job's pods as this user of `users` (runAsUser/runAsGroup/"
        "fsGroup), so checkpoints belong to them.",
    )
    team: str | None = Field(
        default=None,
        pattern=TEAM_NAME,
        description="EKS task governance: the team (of `teams`) whose namespace and queue the "
        "job runs in. Left out: the team of `user`, if any.",
    )
    priority: str | None = Field(
        default=None,
        pattern=PRIORITY_CLASS_NAME,
        description="EKS task governance: the job's priority class (of "
        "cluster.eks.task_governance.priority_classes). Left out: its team's `priority`.",
    )
    template: str | None = Field(
        default=None,
        description="Your own jinja2 sbatch template (path relative to the environment file) "
        "instead of the bundled one; it gets the same validated values, each through the filter "
        "of where it lands (`| q` in the script, `| sbatch` on an #SBATCH line: docs/trainer.md).",
    )
    elastic: ElasticConfig | None = Field(
        default=None, description="EKS only: elastic replicas (HyperPodPyTorchJob)."
    )


class TrainerConfig(Section):
    build_image: bool = Field(
        default=True, description="Build assets/trainer/Dockerfile into ECR at deploy."
    )
    job: JobConfig = Field(default_factory=JobConfig)


# --- the whole file ----------------------------------------------------------------------------


class ValidationConfig(Section):
    suppress: list[str] = Field(
        default_factory=list,
        description="Names of semantic checks whose warnings and infos are not shown.",
    )
    allow_instance_types: list[Annotated[str, Field(pattern=r"^ml\.[a-z0-9-]+\.[a-z0-9]+$")]] = (
        Field(
            default_factory=list,
            description="Instance types newer than hyperpod-kit's table, accepted as they are "
            "(their GPUs and EFA interfaces are unknown, so checks that need them are skipped).",
        )
    )
    allow_availability_zone_ids: list[Annotated[str, Field(pattern=r"^[a-z]{3,6}\d-az\d+$")]] = (
        Field(
            default_factory=list,
            description="Availability zone IDs newer than hyperpod-kit's table.",
        )
    )
    allow_regions: list[Annotated[str, Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")]] = Field(
        default_factory=list, description="Regions newer than hyperpod-kit's table."
    )
    allow_kubernetes_versions: list[Annotated[str, Field(pattern=KUBERNETES_VERSION)]] = Field(
        default_factory=list,
        description="Kubernetes versions HyperPod supports that are newer than hyperpod-kit's "
        "list.",
    )


class EnvironmentConfig(Section):
    """One environment: everything `cdk deploy` creates, from this file alone."""

    name: str = Field(
        pattern=r"^[a-z][a-z0-9-]{1,22}[a-z0-9]$",
        description="Prefix of stack and resource names.",
        json_schema_extra=hint(
            "3-24 lowercase letters, digits and hyphens, starting with a letter"
        ),
    )
    region: str = Field(
        pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$", json_schema_extra=hint("like us-west-2")
    )
    account: str | None = Field(
        default=None,
        pattern=r"^\d{12}$",
        description="AWS account id; left out, the stacks deploy to the credentials' account.",
        json_schema_extra=hint("12 digits"),
    )
    availability_zone_id: str = Field(
        pattern=r"^[a-z]{3,6}\d-az\d+$",
        description="Availability zone ID (not name): IDs are the same in every account.",
        json_schema_extra=hint(
            "an AZ ID like usw2-az2; `aws ec2 describe-availability-zones` lists them"
        ),
    )
    orchestrator: Literal["slurm", "eks"] = "slurm"
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Tags on every stack and resource (at most 47: hyperpod-kit adds up to 3 of "
        "its own; keys and values may not start with aws:, nor with rds: where the Slurm "
        "accounting database is created).",
    )
    kms_key_arn: str | None = Field(
        default=None,
        pattern=KMS_KEY_ARN,
        description="The environment's customer-managed KMS key (symmetric, in the environment's "
        "region; its ARN, not an alias): envelope-encrypts a new EKS cluster's secrets and "
        "encrypts every CloudWatch log group the stacks create. Its key policy must let "
        "logs.<region>.amazonaws.com use it (docs/security.md). Left out: EKS secrets get a key "
        "created for them (rotated yearly, retained on delete) and log groups use CloudWatch "
        "Logs' default encryption. On an EKS cluster the environment creates, adding, removing "
        "or changing it replaces the cluster (its encryption is create-only).",
        json_schema_extra=hint(
            "a key ARN, not an alias: arn:aws:kms:<region>:<account>:key/<key id>"
        ),
    )
    users: list[UserConfig] = Field(
        default_factory=list,
        description="The environment's people: created on the cluster's nodes with homes on FSx, "
        "and given Studio profiles with the same uid and gid.",
    )
    teams: list[TeamConfig] = Field(
        default_factory=list,
        description="The environment's teams. Slurm: each a Slurm account with its fair share "
        "and GPU limit, its members' associations created on the controller "
        "(docs/accounting.md). EKS, with cluster.eks.task_governance: each a compute allocation "
        "with its quota, fair-share weight and default priority, its namespace and queue made by "
        "HyperPod (docs/governance.md).",
    )
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    studio: StudioConfig = Field(default_factory=StudioConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)

    _source_dir: Path | None = PrivateAttr(default=None)
    _written_in: dict[str, Path] = PrivateAttr(default_factory=dict)

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or self.name

    def at_source(
        self, source_dir: Path, written_in: dict[str, Path] | None = None
    ) -> EnvironmentConfig:
        """This config, knowing the folder its relative paths (scripts, templates) start from;
        `written_in`: values written in a base (`extends:`) in another folder, and that folder."""
        self._source_dir = source_dir.resolve()
        self._written_in = {value: folder.resolve() for value, folder in (written_in or {}).items()}
        return self

    def resolve_path(self, path: str) -> Path:
        """A path from the file: absolute as is, relative to the folder of the environment file
        that writes it (a base's own folder for a path the base writes)."""
        p = Path(path).expanduser()
        start = self._written_in.get(path) or self._source_dir or Path.cwd()
        return p if p.is_absolute() else start / p
