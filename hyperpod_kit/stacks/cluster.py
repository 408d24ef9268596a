"""The cluster stack: the lifecycle scripts and the HyperPod cluster (after network and storage;
on EKS, after the EKS stack)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.hyperpod_cluster import (
    AccountingHandles,
    EksOrchestrator,
    FileSystemHandles,
    HyperPodCluster,
    PullableImage,
)
from hyperpod_kit.constructs.lifecycle import LifecycleScripts
from hyperpod_kit.constructs.lustre import LustreFileSystem
from hyperpod_kit.constructs.network import ClusterNetwork
from hyperpod_kit.constructs.observability import PrometheusHandles
from hyperpod_kit.constructs.operator_policy import NodeOperatorPolicy
from hyperpod_kit.naming import OBSERVABILITY_AREA, parameter_name
from hyperpod_kit.stacks.discovery import publish


class ClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: ClusterNetwork,
        lustre: LustreFileSystem,
        data_bucket: s3.IBucket,
        trainer_image: PullableImage | None = None,
        eks: EksOrchestrator | None = None,
        accounting: AccountingHandles | None = None,
        prometheus: PrometheusHandles | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.lifecycle = LifecycleScripts(self, "Lifecycle", config=config)
        self.cluster = HyperPodCluster(
            self,
            "HyperPod",
            config=config,
            subnet_id=network.private_subnet_id,
            security_group_ids=[network.cluster_security_group_id],
            file_system=FileSystemHandles(dns_name=lustre.dns_name, mount_name=lustre.mount_name),
            lifecycle=self.lifecycle,
            trainer_image=trainer_image,
            eks=eks,
            accounting=accounting,
        )
        # No node provisions before its scripts and the users file are in S3: the pointer
        # parameter is written only after both uploads completed.
        self.cluster.cfn.node.add_dependency(self.lifecycle.pointer)
        if config.orchestrator == "slurm" or config.studio.enabled:
            # EKS with Studio: the sync runs partitions-only (docs/lifecycle.md), and reads the
            # same pointer and users file.
            self.lifecycle.grant_user_sync(self.cluster.execution_role)
        if self.lifecycle.reads_storage_handles:
            # Studio: the Slurm controller's token hook (the data bucket's name) or, on EKS, the
            # FSx host mount (the file system's names) reads the storage stack's handles while
            # the node provisions; granted here, not in the Studio stack, which deploys after the
            # nodes' first provisioning.
            iam.Grant.add_to_principal(
                grantee=self.cluster.execution_role,
                actions=["ssm:GetParameter"],
                resource_arns=[
                    self.format_arn(
                        service="ssm",
                        resource="parameter",
                        resource_name=parameter_name(config.name, "storage").lstrip("/"),
                    )
                ],
            )
        if config.studio.enabled:
            # The Studio stack of earlier releases attached its node grants to this role and
            # imports the role's name; CloudFormation refuses to drop an export still imported,
            # and this stack deploys first. Kept exported until every deployed Studio stack has
            # been updated without it (then removable: plan shows the removed output).
            self.export_value(self.cluster.execution_role.role_name)
        if config.orchestrator == "slurm" and config.studio.enabled:
            # The controller's Slurm token issuer runs while the controller provisions: its
            # grants must exist before the nodes do, not come with the Studio stack after them.
            self.lifecycle.grant_slurm_token_issuer(
                self.cluster.execution_role, environment=config.name, data_bucket=data_bucket
            )
        if prometheus is not None and config.orchestrator == "slurm":
            # Each node's Prometheus agent remote-writes as the node's role from its first
            # provisioning on (and reads a created workspace's address from its handles): granted
            # here, before the nodes exist (the cluster depends on the role's policy).
            prometheus.grant_remote_write(self.cluster.execution_role)
            if prometheus.created:
                iam.Grant.add_to_principal(
                    grantee=self.cluster.execution_role,
                    actions=["ssm:GetParameter"],
                    resource_arns=[
                        self.format_arn(
                            service="ssm",
                            resource="parameter",
                            resource_name=parameter_name(config.name, OBSERVABILITY_AREA).lstrip(
                                "/"
                            ),
                        )
                    ],
                )
        if config.cluster.operator_policy:  # `hyperpod-kit nodes`' policy, attached to no one
            self.operator_policy = NodeOperatorPolicy(self, "OperatorPolicy", config=config)
        publish(
            self,
            environment=config.name,
            area="cluster",
            values={
                "cluster_name": self.cluster.cluster_name,
                "cluster_arn": self.cluster.cluster_arn,
                "cluster_id": self.cluster.cluster_id,
                "execution_role_arn": self.cluster.execution_role.role_arn,
                "lifecycle_s3_uri": self.lifecycle.source_s3_uri,
            },
        )
