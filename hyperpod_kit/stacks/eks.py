"""The EKS stack: what HyperPod needs before its cluster exists.

The EKS cluster (new, or an existing one referred to by name), its core add-ons and HyperPod's
Helm chart. Deploys after the network stack, in parallel with storage; the cluster stack takes
``eks.cluster_arn`` and ``eks.node_security_group_id`` from it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.eks_chart import HyperPodHelmChart
from hyperpod_kit.constructs.network import ClusterNetwork
from hyperpod_kit.naming import eks_cluster_name
from hyperpod_kit.stacks.discovery import publish

__all__ = ["EksStack", "eks_cluster_name"]


class EksStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: ClusterNetwork,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        eks_config = config.cluster.eks
        self.eks = EksCluster(
            self, "Eks", config=eks_config, name=eks_cluster_name(config), network=network
        )
        self.helm_chart: HyperPodHelmChart | None = None
        if eks_config.helm_chart is not None:
            self.helm_chart = HyperPodHelmChart(
                self,
                "HyperPodChart",
                eks_cluster=self.eks,
                path=config.resolve_path(eks_config.helm_chart),
            )
        publish(
            self,
            environment=config.name,
            area="eks",
            values={
                "cluster_name": self.eks.cluster_name,
                "cluster_arn": self.eks.cluster_arn,
            },
        )
