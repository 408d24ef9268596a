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
from typing import Any, Protocol

from aws_cdk import Aws, Fn, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.config.derived import FSX_MOUNT, deep_health_checks, uses_training_plan
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig
from hyperpod_kit.constructs.network import describe_network_statement

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
    ) -> None:
        super().__init__(scope, id)
        if (config.orchestrator == "eks") != (eks is not None):
            raise ValueError("an EKS environment needs the EKS cluster handles, Slurm none")
        self.cluster_name = config.cluster_name
        self.execution_role = ExecutionRole(
            self, "ExecutionRole", subnet_id=subnet_id, security_group_ids=security_group_ids,
            eks=eks is not None,
        ).role  # fmt: skip
        lifecycle.grant_read(self.execution_role)
        if trainer_image is not None:
            trainer_image.grant_pull(self.execution_role)
        access_entry = None
        if eks is not None:
            access_entry = eks.grant_hyperpod_nodes(self, self.execution_role)
            _grant_eks_nodes(self.execution_role, eks.cluster_arn)
            if eks.node_security_group_id not in security_group_ids:
                security_group_ids = [*security_group_ids, eks.node_security_group_id]

        groups = [
            self._group(g, config=config, lifecycle=lifecycle, file_system=file_system)
            for g in config.cluster.instance_groups
        ]
        orchestrator = (
            sagemaker.CfnCluster.OrchestratorProperty(
                slurm=sagemaker.CfnCluster.ClusterOrchestratorSlurmConfigProperty(
                    slurm_config_strategy=config.cluster.slurm.config_strategy
                )
            )
            if eks is None
            else sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(
                    cluster_arn=eks.cluster_arn
                )
            )
        )
        self.cfn = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=self.cluster_name,
            instance_groups=groups,
            node_recovery=config.cluster.node_recovery,
            orchestrator=orchestrator,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=security_group_ids, subnets=[subnet_id]
            ),
        )
        # Stable: a new logical id would replace the cluster and every node with it. The cluster
        # holds no data (that is on FSx and S3), and a retained one would keep billing its
        # instances after `cdk destroy`, so it is deleted with the stack.
        self.cfn.override_logical_id(LOGICAL_ID)
        self.cfn.apply_removal_policy(RemovalPolicy.DESTROY)
        # The role's inline policy (ENI permissions, lifecycle reads) must exist before HyperPod
        # creates the nodes; the role itself is already referenced by every group.
        policy = self.execution_role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.cfn.node.add_dependency(policy)
        if access_entry is not None:  # nodes join the EKS cluster as soon as they boot
            self.cfn.node.add_dependency(access_entry)
        self.cluster_arn: str = self.cfn.attr_cluster_arn
        self.cluster_id: str = Fn.select(1, Fn.split("/", self.cfn.attr_cluster_arn))

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
                    volume_size_in_gb=group.ebs_volume_gib
                )
            )
        ]
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
        return cfn.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.instance_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=cfn.ClusterLifeCycleConfigProperty(
                source_s3_uri=lifecycle.source_s3_uri, on_create=lifecycle.on_create
            ),
            instance_storage_configs=storage,
            on_start_deep_health_checks=checks or None,
            slurm_config=slurm_config,
            training_plan_arn=_training_plan(config, group),
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


def _training_plan(config: EnvironmentConfig, group: InstanceGroupConfig) -> str | None:
    """The training plan of the groups it applies to (`uses_training_plan`)."""
    return config.cluster.training_plan_arn if uses_training_plan(config, group) else None


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
