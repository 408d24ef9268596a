"""The cluster stack: the lifecycle scripts and the HyperPod cluster (after network and storage;
on EKS, after the EKS stack)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
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
            data_bucket=data_bucket,
            prometheus=prometheus,
        )
        if config.studio.enabled:
            # The Studio stack of earlier releases attached its node grants to this role and
            # imports the role's name; CloudFormation refuses to drop an export still imported,
            # and this stack deploys first. Kept exported until every deployed Studio stack has
            # been updated without it (then removable: plan shows the removed output).
            self.export_value(self.cluster.execution_role.role_name)
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
