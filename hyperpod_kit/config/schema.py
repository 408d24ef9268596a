"""The environment file's schema: every key, its type and its default.

Phase one of validation. ``extra="forbid"`` everywhere, so a misspelt key is an error rather than a
silently ignored setting. Rules that relate several values (sizes, overlaps, regions) live in
``validators/``, where they can say more than a type can. A field's ``x-hint`` is shown with a
schema error on that field.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def hint(text: str, **extra: Any) -> dict[str, Any]:
    """JSON-schema extras for a field: the hint shown with its errors, plus any editor metadata."""
    return {"x-hint": text, **extra}


class Section(BaseModel):
    """Base of every section: unknown keys are errors and a loaded config never changes.

    Strict types: YAML's ``yes`` is not an instance count and ``"1200"`` is not a capacity.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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


class NetworkConfig(Section):
    vpc: NewVpcConfig | None = Field(
        default=None, description="Create a VPC (the default when existing_vpc is not set)."
    )
    existing_vpc: ExistingVpcConfig | None = Field(default=None, description="Use an existing VPC.")
    interface_endpoints: bool = Field(
        default=False,
        description="Interface endpoints for the AWS APIs that nodes call (clusters without NAT).",
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


# --- sections that later stacks fill in -------------------------------------------------------


class InstanceGroupConfig(Section):
    name: str = Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
    role: Literal["controller", "login", "compute", "worker"] = Field(
        description="controller/login/compute for Slurm; worker for EKS."
    )
    instance_type: str = Field(
        pattern=r"^ml\.[a-z0-9-]+\.[a-z0-9]+$", json_schema_extra=hint("like ml.p5.48xlarge")
    )
    instance_count: int = Field(ge=0)
    threads_per_core: Literal[1, 2] = 1
    ebs_volume_gib: int = Field(default=500, ge=1, le=16384)


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


class ClusterConfig(Section):
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    instance_groups: list[InstanceGroupConfig] = Field(default_factory=_default_groups)
    training_plan_arn: str | None = Field(
        default=None, pattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/.+$"
    )


class StudioConfig(Section):
    enabled: bool = False
    partitions: Literal["per_user", "shared"] = "per_user"
    users: list[Annotated[str, Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")]] = Field(
        default_factory=list
    )


class MonitoringConfig(Section):
    enabled: bool = True
    alarm_email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    auto_repair: bool = True


class ElasticConfig(Section):
    """HyperPodPyTorchJob ``elasticPolicy``: replicas come and go, the global batch stays."""

    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)
    replica_increment_step: int | None = Field(default=None, ge=1)
    replica_discrete_values: list[int] | None = None
    scaling_timeout_seconds: int = Field(default=600, ge=0)
    graceful_shutdown_timeout_seconds: int = Field(default=600, ge=0)
    faulty_scale_down_timeout_seconds: int = Field(default=600, ge=0)


class JobConfig(Section):
    """The training job that the job templates (sbatch, HyperPodPyTorchJob) launch."""

    name: str = Field(default="pretrain", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    preset: str = "llama-1b"
    nodes: int = Field(default=2, ge=1)
    processes_per_node: int = Field(default=8, ge=1, description="GPUs per node.")
    global_batch_size: int = Field(default=256, ge=1)
    micro_batch_size: int = Field(default=1, ge=1)
    seq_len: int = Field(default=4096, ge=8)
    max_steps: int = Field(default=1000, ge=1)
    data_path: str = Field(
        default="/fsx/data/tokens", description="Folder of tokenized shards (.npy or .bin)."
    )
    token_dtype: Literal["uint16", "uint32"] = Field(
        default="uint32",
        description="Token id width of .bin shards; Llama 3 vocabularies need uint32.",
    )
    checkpoint_dir: str = "/fsx/checkpoints"
    checkpoint_every: int = Field(default=100, ge=1)
    keep_last: int = Field(default=3, ge=1)
    auto_resume: bool = True
    stop_grace_seconds: int = Field(
        default=180,
        ge=30,
        description="Seconds between the stop signal (SIGTERM) and the kill: the final save.",
    )
    max_retries: int = Field(default=3, ge=0)
    partition: str | None = Field(default=None, description="Slurm partition (default: cluster's).")
    namespace: str = Field(default="default", description="Kubernetes namespace (EKS).")
    elastic: ElasticConfig | None = None


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
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    studio: StudioConfig = Field(default_factory=StudioConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
