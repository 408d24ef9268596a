"""`HyperPodCluster`: the SageMaker HyperPod cluster (`AWS::SageMaker::Cluster`) and its
execution role, for Slurm (API-driven: `Orchestrator.Slurm` and per-group `SlurmConfig`, FSx
mounted natively) or EKS (`Orchestrator.Eks`).

What it needs comes in as typed props: the network (subnet, security group), the file system's
handles, the lifecycle scripts' S3 prefix, the trainer image (to let nodes pull it) and, on EKS,
the EKS cluster. What it hands back: ``cluster_arn``, ``cluster_name``, ``cluster_id``,
``execution_role``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aws_cdk import Acknowledgment, Aws, Fn, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.config.derived import (
    FSX_MOUNT,
    continuous_provisioning,
    deep_health_checks,
    slurm_config_strategy,
    training_plan_of,
)
from hyperpod_kit.config.schema import (
    AutoPatchConfig,
    EnvironmentConfig,
    InstanceGroupConfig,
    RollingDeployment,
)
from hyperpod_kit.constructs.network import describe_network_statement
from hyperpod_kit.constructs.provenance import trace
from hyperpod_kit.naming import OBSERVABILITY_AREA, parameter_name, rollback_alarm_names

if TYPE_CHECKING:
    from hyperpod_kit.constructs.observability import PrometheusHandles

LOGICAL_ID = "HyperPodCluster"
INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
NODE_TYPES = {"controller": "Controller", "login": "Login", "compute": "Compute"}


class LifecycleSource(Protocol):
    """Where HyperPod finds the lifecycle scripts (an unpacked S3 prefix) and which to run."""

    @property
    def source_s3_uri(self) -> str: ...

    @property
    def on_create(self) -> str: ...

    def grant_read(self, grantee: iam.IGrantable) -> object: ...


@runtime_checkable
class NodeLifecycle(LifecycleSource, Protocol):
    """Lifecycle scripts that do more on the nodes than run (`LifecycleScripts`): the pointer
    parameter written once both uploads completed, the user sync, the storage handles read while
    a node provisions, Studio's Slurm token issuer. `HyperPodCluster` wires what they need."""

    @property
    def pointer(self) -> IConstruct: ...

    @property
    def reads_storage_handles(self) -> bool: ...

    def grant_user_sync(self, grantee: iam.IGrantable) -> object: ...

    def grant_slurm_token_issuer(
        self, grantee: iam.IGrantable, *, environment: str, data_bucket: s3.IBucket
    ) -> None: ...


class PullableImage(Protocol):
    def grant_pull(self, grantee: iam.IGrantable) -> object: ...


class EksOrchestrator(Protocol):
    """The EKS cluster HyperPod orchestrates through."""

    @property
    def cluster_arn(self) -> str: ...

    @property
    def node_security_group_id(self) -> str: ...

    def grant_hyperpod_nodes(self, scope: Construct, role: iam.IRole) -> IConstruct | None:
        """The access entry for the nodes' role (or None when HyperPod is left to create it)."""
        ...


class AccountingHandles(Protocol):
    """The Slurm accounting database HyperPod's slurmdbd connects to, and its secret."""

    @property
    def endpoint(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def database_name(self) -> str: ...

    @property
    def secret_arn(self) -> str: ...

    def grant_secret_read(self, grantee: iam.IGrantable) -> object: ...


@dataclass(frozen=True)
class FileSystemHandles:
    """The FSx for Lustre file system nodes mount at /fsx (Slurm: HyperPod mounts it itself)."""

    dns_name: str
    mount_name: str


class HyperPodCluster(Construct):
    """The cluster, its instance groups and execution role.

    Handles: ``cluster_arn``, ``cluster_name``, ``cluster_id`` (the last part of the ARN, used in
    log group and SSM target names), ``execution_role``, ``cfn`` (the `CfnCluster`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        subnet_id: str,
        security_group_ids: list[str],
        file_system: FileSystemHandles,
        lifecycle: LifecycleSource,
        trainer_image: PullableImage | None = None,
        eks: EksOrchestrator | None = None,
        accounting: AccountingHandles | None = None,
        data_bucket: s3.IBucket | None = None,
        prometheus: PrometheusHandles | None = None,
    ) -> None:
        """With `LifecycleScripts` (a `NodeLifecycle`) as ``lifecycle``, what the nodes' scripts
        do while they provision is granted and ordered here (`_wire`): ``data_bucket`` is the
        data bucket (Studio on Slurm: the token issuer uploads the client there), ``prometheus``
        the workspace the nodes remote-write to (Slurm)."""
        super().__init__(scope, id)
        if (config.orchestrator == "eks") != (eks is not None):
            raise ValueError("an EKS environment needs the EKS cluster handles, Slurm none")
        if accounting is not None and eks is not None:
            raise ValueError("an accounting database is for Slurm clusters")
        self.cluster_name = config.cluster_name
        self.execution_role = ExecutionRole(
            self, "ExecutionRole", subnet_id=subnet_id, security_group_ids=security_group_ids,
            eks=eks is not None,
        ).role  # fmt: skip
        lifecycle.grant_read(self.execution_role)
        if accounting is not None:
            # HyperPod configures slurmdbd on the controller from the secret; which principal
            # reads it is not documented where we could read: the nodes' role is granted, in its
            # default policy, which exists before the cluster (docs/accounting.md).
            accounting.grant_secret_read(self.execution_role)
        if trainer_image is not None:
            trainer_image.grant_pull(self.execution_role)
        access_entry = None
        if eks is not None:
            access_entry = eks.grant_hyperpod_nodes(self, self.execution_role)
            _grant_eks_nodes(self.execution_role, eks.cluster_arn)
            if eks.node_security_group_id not in security_group_ids:
                security_group_ids = [*security_group_ids, eks.node_security_group_id]

        self.security_group_ids = list(security_group_ids)  # a group's override default
        groups = [
            self._group(g, config=config, lifecycle=lifecycle, file_system=file_system)
            for g in config.cluster.instance_groups
        ]
        orchestrator = (
            sagemaker.CfnCluster.OrchestratorProperty(
                slurm=sagemaker.CfnCluster.ClusterOrchestratorSlurmConfigProperty(
                    slurm_config_strategy=slurm_config_strategy(config),
                    accounting_database=(
                        sagemaker.CfnCluster.ClusterAccountingDatabaseProperty(
                            endpoint=accounting.endpoint,
                            port=accounting.port,
                            name=accounting.database_name,
                            secret_arn=accounting.secret_arn,
                        )
                        if accounting is not None
                        else None
                    ),
                )
            )
            if eks is None
            else sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(
                    cluster_arn=eks.cluster_arn
                )
            )
        )
        cfn = sagemaker.CfnCluster
        # Karpenter on EKS: HyperPod adds and deletes nodes through a role of the cluster's.
        self.autoscaling_role: iam.Role | None = None
        autoscaling = None
        if config.cluster.autoscaling.enabled:
            self.autoscaling_role = AutoscalingRole(self, "AutoscalingRole", config=config).role
            autoscaling = cfn.ClusterAutoScalingConfigProperty(
                mode="Enable", auto_scaler_type=config.cluster.autoscaling.autoscaler
            )
        tiered = config.cluster.tiered_checkpointing
        self.cfn = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=self.cluster_name,
            instance_groups=groups,
            node_recovery=config.cluster.node_recovery,
            node_provisioning_mode="Continuous" if continuous_provisioning(config) else None,
            auto_scaling=autoscaling,
            cluster_role=(
                self.autoscaling_role.role_arn if self.autoscaling_role is not None else None
            ),
            tiered_storage_config=(
                cfn.TieredStorageConfigProperty(
                    mode="Enable", instance_memory_allocation_percentage=tiered.memory_percent
                )
                if tiered.enabled
                else None
            ),
            orchestrator=orchestrator,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=security_group_ids, subnets=[subnet_id]
            ),
        )
        # Stable: a new logical id would replace the cluster and every node with it. The cluster
        # holds no data (that is on FSx and S3), and a retained one would keep billing its
        # instances after `cdk destroy`, so it is deleted with the stack.
        if config.orchestrator == "eks" and any(
            g.image_release_version for g in config.cluster.instance_groups
        ):
            # aws-cdk-lib 2.275 writes ImageReleaseVersion, and its bundled copy of the
            # resource's schema is older than the property; cfn-lint 1.58's (the gate) has it.
            Validations.of(self.cfn).acknowledge(
                Acknowledgment(
                    id="CloudFormation-Validate::F3002",
                    reason="ImageReleaseVersion is in CloudFormation's current schema (cfn-lint "
                    "1.58 checks it); aws-cdk-lib 2.275's built-in validator carries an older one",
                )
            )
        self._trace(config)
        self.cfn.override_logical_id(LOGICAL_ID)
        self.cfn.apply_removal_policy(RemovalPolicy.DESTROY)
        # The role's inline policy (ENI permissions, lifecycle reads) must exist before HyperPod
        # creates the nodes; the role itself is already referenced by every group.
        for role in (self.execution_role, self.autoscaling_role):
            policy = role.node.try_find_child("DefaultPolicy") if role is not None else None
            if policy is not None:
                self.cfn.node.add_dependency(policy)
        if access_entry is not None:  # nodes join the EKS cluster as soon as they boot
            self.cfn.node.add_dependency(access_entry)
        self.cluster_arn: str = self.cfn.attr_cluster_arn
        self.cluster_id: str = Fn.select(1, Fn.split("/", self.cfn.attr_cluster_arn))
        if isinstance(lifecycle, NodeLifecycle):
            self._wire(config, lifecycle, data_bucket, prometheus)

    def _wire(
        self,
        config: EnvironmentConfig,
        lifecycle: NodeLifecycle,
        data_bucket: s3.IBucket | None,
        prometheus: PrometheusHandles | None,
    ) -> None:
        """What the lifecycle scripts do on the nodes while they provision, granted to the
        execution role's default policy (on which the cluster depends) before any node exists."""
        role = self.execution_role
        # No node provisions before its scripts and the users file are in S3: the pointer
        # parameter is written only after both uploads completed.
        self.cfn.node.add_dependency(lifecycle.pointer)
        if config.orchestrator == "slurm" or config.studio.enabled:
            # EKS with Studio: the sync runs partitions-only (docs/lifecycle.md), and reads the
            # same pointer and users file.
            lifecycle.grant_user_sync(role)
        if lifecycle.reads_storage_handles:
            # Studio: the Slurm controller's token hook (the data bucket's name) or, on EKS, the
            # FSx host mount (the file system's names) reads the storage stack's handles while
            # the node provisions; granted here, not in the Studio stack, which deploys after the
            # nodes' first provisioning.
            self._grant_parameter_read(parameter_name(config.name, "storage"))
        if config.orchestrator == "slurm" and config.studio.enabled:
            # The controller's Slurm token issuer runs while the controller provisions: its
            # grants must exist before the nodes do, not come with the Studio stack after them.
            if data_bucket is None:
                raise ValueError("Studio on Slurm needs the data bucket (data_bucket=)")
            lifecycle.grant_slurm_token_issuer(
                role, environment=config.name, data_bucket=data_bucket
            )
        if prometheus is not None and config.orchestrator == "slurm":
            # Each node's Prometheus agent remote-writes as the node's role from its first
            # provisioning on (and reads a created workspace's address from its handles).
            prometheus.grant_remote_write(role)
            if prometheus.created:
                self._grant_parameter_read(parameter_name(config.name, OBSERVABILITY_AREA))

    def _grant_parameter_read(self, name: str) -> None:
        iam.Grant.add_to_principal(
            grantee=self.execution_role,
            actions=["ssm:GetParameter"],
            resource_arns=[
                Stack.of(self).format_arn(
                    service="ssm", resource="parameter", resource_name=name.lstrip("/")
                )
            ],
        )

    def _trace(self, config: EnvironmentConfig) -> None:
        """The keys of the file each property of the cluster came from (provenance.py)."""
        cluster = config.cluster
        trace(self.cfn, cluster, {
            "NodeRecovery": "node_recovery",
            "AutoScaling/AutoScalerType": "autoscaling.autoscaler",
            "TieredStorageConfig/InstanceMemoryAllocationPercentage":
                "tiered_checkpointing.memory_percent",
        })  # fmt: skip
        trace(self.cfn, config, {"ClusterName": "cluster.name" if cluster.name else "name"})
        if config.orchestrator == "slurm":
            trace(self.cfn, cluster.slurm, {
                "Orchestrator/Slurm/SlurmConfigStrategy": "config_strategy",
            })  # fmt: skip
        for i, group in enumerate(cluster.instance_groups):
            keys = {
                "InstanceGroupName": "name",
                "InstanceType": "instance_type",
                "InstanceRequirements/InstanceTypes": "instance_types",
                "InstanceCount": "instance_count",
                "MinInstanceCount": "min_instance_count",
                "CapacityRequirements": "capacity",
                "ThreadsPerCore": "threads_per_core",
                "ImageId": "image_id",
                "ImageReleaseVersion": "image_release_version",
                "LifeCycleConfig": "lifecycle",
                "InstanceStorageConfigs/0/EbsVolumeConfig/VolumeSizeInGB": "ebs_volume_gib",
                "InstanceStorageConfigs/0/EbsVolumeConfig/VolumeKmsKeyId": "ebs_kms_key_arn",
                "OnStartDeepHealthChecks": "deep_health_checks",
                "SlurmConfig/PartitionNames": "partition" if group.partition else "name",
                "TrainingPlanArn": "training_plan_arn",
                "KubernetesConfig/Labels": "kubernetes.labels",
                "NetworkInterface/InterfaceType": "network.interface_type",
                "OverrideVpcConfig/Subnets": "network.subnet_ids",
                "OverrideVpcConfig/SecurityGroupIds": "network.security_group_ids",
                "ScheduledUpdateConfig": "ami_updates",
                "ScheduledUpdateConfig/ScheduleExpression": "ami_updates.schedule",
                "ScheduledUpdateConfig/DeploymentConfig": "ami_updates.deployment",
                "AutoPatchConfig": "auto_patch",
            }
            if group.root_volume_kms_key_arn is not None:
                keys["InstanceStorageConfigs/1/EbsVolumeConfig/VolumeKmsKeyId"] = (
                    "root_volume_kms_key_arn"
                )
            if group.kubernetes is not None:
                for t, _ in enumerate(group.kubernetes.taints):
                    keys[f"KubernetesConfig/Taints/{t}"] = f"kubernetes.taints[{t}]"
            if group.training_plan_arn is None:  # the cluster's, where it applies
                del keys["TrainingPlanArn"]
                trace(
                    self.cfn,
                    cluster,
                    {"TrainingPlanArn": "training_plan_arn"},
                    at=f"InstanceGroups/{i}",
                )
            trace(self.cfn, group, keys, at=f"InstanceGroups/{i}")

    def _group(
        self,
        group: InstanceGroupConfig,
        *,
        config: EnvironmentConfig,
        lifecycle: LifecycleSource,
        file_system: FileSystemHandles,
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        cfn = sagemaker.CfnCluster
        storage = [
            cfn.ClusterInstanceStorageConfigProperty(
                ebs_volume_config=cfn.ClusterEbsVolumeConfigProperty(
                    volume_size_in_gb=group.ebs_volume_gib, volume_kms_key_id=group.ebs_kms_key_arn
                )
            )
        ]
        if group.root_volume_kms_key_arn is not None:
            # The root volume takes a key and no size (HyperPod sizes it).
            storage.append(
                cfn.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=cfn.ClusterEbsVolumeConfigProperty(
                        root_volume=True, volume_kms_key_id=group.root_volume_kms_key_arn
                    )
                )
            )
        slurm_config = None
        if config.orchestrator == "slurm":
            # HyperPod mounts the file system itself when the node is provisioned.
            storage.append(
                cfn.ClusterInstanceStorageConfigProperty(
                    fsx_lustre_config=cfn.ClusterFsxLustreConfigProperty(
                        dns_name=file_system.dns_name,
                        mount_name=file_system.mount_name,
                        mount_path=FSX_MOUNT,
                    )
                )
            )
            slurm_config = cfn.ClusterSlurmConfigProperty(
                node_type=NODE_TYPES[group.role],
                partition_names=[group.slurm_partition] if group.role == "compute" else None,
            )
        checks = deep_health_checks(group)
        stage = group.lifecycle.stage
        network = group.network
        kubernetes = group.kubernetes
        # AWS takes an AMI release and batched updates on EKS clusters only
        # (facts/orchestrator_rules.json; `validate` refuses them on Slurm): a Slurm group runs
        # HyperPod's latest AMI, and its scheduled updates take the whole group at once.
        eks = config.orchestrator == "eks"
        return cfn.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_requirements=(
                cfn.InstanceRequirementsProperty(instance_types=list(group.instance_types))
                if group.instance_types is not None
                else None
            ),
            instance_count=group.instance_count,
            min_instance_count=group.min_instance_count,
            capacity_requirements=_capacity(group),
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            image_id=group.image_id,
            image_release_version=group.image_release_version if eks else None,
            life_cycle_config=cfn.ClusterLifeCycleConfigProperty(
                source_s3_uri=lifecycle.source_s3_uri,
                on_create=lifecycle.on_create if stage == "on_create" else None,
                on_init_complete=lifecycle.on_create if stage == "on_init_complete" else None,
            ),
            instance_storage_configs=storage,
            on_start_deep_health_checks=checks or None,
            slurm_config=slurm_config,
            training_plan_arn=training_plan_of(config, group),
            kubernetes_config=(
                cfn.ClusterKubernetesConfigProperty(
                    labels=dict(kubernetes.labels) or None,
                    taints=[
                        cfn.ClusterKubernetesTaintProperty(
                            key=t.key, value=t.value, effect=t.effect
                        )
                        for t in kubernetes.taints
                    ]
                    or None,
                )
                if kubernetes is not None and (kubernetes.labels or kubernetes.taints)
                else None
            ),
            network_interface=(
                cfn.ClusterNetworkInterfaceProperty(interface_type=network.interface_type)
                if network is not None and network.interface_type is not None
                else None
            ),
            override_vpc_config=(
                cfn.VpcConfigProperty(
                    subnets=list(network.subnet_ids),
                    security_group_ids=list(network.security_group_ids or self.security_group_ids),
                )
                if network is not None and network.subnet_ids
                else None
            ),
            scheduled_update_config=(
                cfn.ScheduledUpdateConfigProperty(
                    schedule_expression=group.ami_updates.schedule,
                    deployment_config=(
                        _deployment(config, group.ami_updates.deployment) if eks else None
                    ),
                )
                if group.ami_updates is not None
                else None
            ),
            auto_patch_config=_auto_patch(config, group.auto_patch, batches=eks),
        )


def _grant_eks_nodes(role: iam.IRole, cluster_arn: str) -> None:
    """What HyperPod EKS nodes need beyond the VPC CNI policy: Pod Identity credentials from this
    EKS cluster, and image pulls for the cluster's system pods (HyperPod's agents and device
    plugins come from AWS-owned ECR repositories that differ per region)."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="PodIdentity",
            actions=["eks-auth:AssumeRoleForPodIdentity"],
            resources=[cluster_arn],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="PullSystemImages",
            actions=[
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:GetDownloadUrlForLayer",
            ],
            resources=[f"arn:{Aws.PARTITION}:ecr:{Aws.REGION}:*:repository/*"],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"])
    )


def _capacity(group: InstanceGroupConfig) -> Any:
    if group.capacity is None:
        return None
    if group.capacity == "spot":
        return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(spot={})
    return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(on_demand={})


def _deployment(config: EnvironmentConfig, rolling: RollingDeployment | None) -> Any:
    """A rolling deployment: batches, the wait between them, and the alarms that roll it back
    (the monitoring stack's, by their fixed names: `naming.rollback_alarm_names`)."""
    if rolling is None:
        return None
    cfn = sagemaker.CfnCluster
    unit = "INSTANCE_COUNT" if rolling.batch_unit == "instances" else "CAPACITY_PERCENTAGE"
    return cfn.DeploymentConfigProperty(
        rolling_update_policy=cfn.RollingUpdatePolicyProperty(
            maximum_batch_size=cfn.CapacitySizeConfigProperty(type=unit, value=rolling.batch_size),
            rollback_maximum_batch_size=(
                cfn.CapacitySizeConfigProperty(type=unit, value=rolling.rollback_batch_size)
                if rolling.rollback_batch_size is not None
                else None
            ),
        ),
        wait_interval_in_seconds=rolling.wait_seconds,
        auto_rollback_configuration=(
            [cfn.AlarmDetailsProperty(alarm_name=name) for name in rollback_alarm_names(config)]
            if rolling.rollback_on_alarms
            else None
        ),
    )


def _auto_patch(config: EnvironmentConfig, patch: AutoPatchConfig | None, *, batches: bool) -> Any:
    if patch is None:
        return None
    return sagemaker.CfnCluster.AutoPatchConfigProperty(
        patching_strategy={"when_idle": "WhenIdle", "when_all_idle": "WhenAllIdle"}[patch.strategy],
        deployment_config=_deployment(config, patch.deployment) if batches else None,
    )


class AutoscalingRole(Construct):
    """The role HyperPod assumes to add and delete the cluster's nodes for Karpenter
    (`ClusterRole`): trusted by hyperpod.sagemaker.amazonaws.com, allowed the two node calls on
    this account's clusters and, where a group's volumes use a customer key, the KMS grants the
    new nodes' volumes need (the HyperPod autoscaling guide's policy, scoped to the keys)."""

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("hyperpod.sagemaker.amazonaws.com"),
            description="HyperPod autoscaling (Karpenter) of the cluster's nodes (hyperpod-kit)",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="AddAndDeleteNodes",
                actions=["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"],
                # The cluster's own ARN would be a circular reference (the cluster names this
                # role); its name is fixed, so the ARN is known up to its id.
                resources=[
                    f"arn:{Aws.PARTITION}:sagemaker:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/*"
                ],
                conditions={"StringEquals": {"aws:ResourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        keys = sorted(
            {
                k
                for g in config.cluster.instance_groups
                for k in (g.ebs_kms_key_arn, g.root_volume_kms_key_arn)
                if k is not None
            }
        )
        if keys:
            via = {"StringLike": {"kms:ViaService": f"sagemaker.{Aws.REGION}.amazonaws.com"}}
            # Grants for the volumes of the nodes it adds, only for AWS resources (the guide's
            # policy, split: GrantIsForAWSResource is a condition of CreateGrant alone).
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="GrantNewNodeVolumes",
                    actions=["kms:CreateGrant"],
                    resources=keys,
                    conditions={**via, "Bool": {"kms:GrantIsForAWSResource": "true"}},
                )
            )
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="DescribeVolumeKeys",
                    actions=["kms:DescribeKey"],
                    resources=keys,
                    conditions=via,
                )
            )
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "HyperPod names the cluster this role serves; the cluster's ARN "
                    "ends in an id it chooses, and the cluster refers to this role, so the "
                    "grant covers this account's clusters in this region (cluster/*, with "
                    "aws:ResourceAccount), as the HyperPod autoscaling guide writes it.",
                    "applies_to": [
                        "Resource::arn:<AWS::Partition>:sagemaker:<AWS::Region>:"
                        "<AWS::AccountId>:cluster/*"
                    ],
                }
            ],
            apply_to_children=True,
        )


class ExecutionRole(Construct):
    """The role every node assumes: AWS's managed instance policy plus the network-interface
    permissions HyperPod needs in a VPC, scoped to the cluster's subnet and security groups where
    EC2 allows it (and, on EKS, what the VPC CNI and Pod Identity need)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        subnet_id: str,
        security_group_ids: list[str],
        eks: bool,
    ) -> None:
        super().__init__(scope, id)
        managed = [iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_POLICY)]
        if eks:
            managed.append(iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKS_CNI_Policy"))
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            managed_policies=managed,
            description="HyperPod cluster nodes (hyperpod-kit)",
        )
        eni = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:network-interface/*"
        subnet = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:subnet/{subnet_id}"
        groups = [
            f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:security-group/{sg}"
            for sg in security_group_ids
        ]
        statements = [
            iam.PolicyStatement(
                sid="CreateNodeInterfaces",
                actions=["ec2:CreateNetworkInterface"],
                resources=[eni, subnet, *groups],
            ),
            iam.PolicyStatement(
                sid="ManageNodeInterfaces",
                actions=[
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    *(
                        [
                            "ec2:AssignPrivateIpAddresses",
                            "ec2:UnassignPrivateIpAddresses",
                            "ec2:ModifyNetworkInterfaceAttribute",
                        ]
                        if eks
                        else []
                    ),
                ],
                resources=[eni],
            ),
            # DetachNetworkInterface is authorized on the instance as well as the interface.
            iam.PolicyStatement(
                sid="DetachNodeInterfaces",
                actions=["ec2:DetachNetworkInterface"],
                resources=[
                    eni,
                    f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:instance/*",
                ],
            ),
            iam.PolicyStatement(
                sid="TagNodeInterfaces",
                actions=["ec2:CreateTags"],
                resources=[eni],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
            ),
            describe_network_statement(),
        ]
        for statement in statements:
            self.role.add_to_principal_policy(statement)
        reasons: list[dict[str, Any]] = [
            {
                "id": "AwsSolutions-IAM4",
                "reason": f"{INSTANCE_POLICY} is the policy AWS maintains for HyperPod nodes "
                "(logs and metrics under /aws/sagemaker/Clusters, SSM sessions, sagemaker-* "
                "lifecycle buckets)"
                + (
                    "; AmazonEKS_CNI_Policy is what the VPC CNI on HyperPod EKS nodes needs to "
                    "manage pod interfaces"
                    if eks
                    else ""
                ),
                "applies_to": [
                    f"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{INSTANCE_POLICY}",
                    f"Policy::arn:<AWS::Partition>:iam::aws:policy/{INSTANCE_POLICY}",
                    "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKS_CNI_Policy",
                ],
            },
            {
                "id": "AwsSolutions-IAM5",
                "reason": "Network interfaces are created by HyperPod at run time, so their ids "
                "are unknown (network-interface/*; creation is limited to the cluster subnet and "
                "security groups, tagging to interfaces being created; detaching also names the "
                "node's instance, whose id HyperPod chooses); EC2 Describe* actions "
                "support no resource-level permissions; ECR GetAuthorizationToken has no "
                "resource; S3 object reads are limited to the lifecycle prefix"
                + (
                    "; on EKS, image pulls cover ECR repositories of this region in any account, "
                    "because HyperPod's agents and device plugins come from AWS-owned accounts "
                    "that differ per region."
                    if eks
                    else "."
                ),
            },
        ]
        NagSuppressions.add_resource_suppressions(self.role, reasons, apply_to_children=True)
