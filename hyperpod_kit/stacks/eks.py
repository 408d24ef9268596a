"""The EKS stack: what HyperPod needs before its cluster exists.

The EKS cluster (new, or an existing one referred to by name), its core add-ons, HyperPod's Helm
chart, and where that chart is not installed, the NVIDIA and EFA device plugins. Deploys after
the network stack, in parallel with storage; the cluster stack takes ``eks.cluster_arn`` and
``eks.node_security_group_id`` from it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.derived import device_plugins
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.eks_chart import HyperPodHelmChart
from hyperpod_kit.constructs.eks_device_plugins import DevicePlugins
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
            self,
            "Eks",
            config=eks_config,
            name=eks_cluster_name(config),
            network=network,
            secrets_key_arn=config.kms_key_arn,
        )
        self.helm_chart: HyperPodHelmChart | None = None
        if eks_config.helm_chart is not None:
            self.helm_chart = HyperPodHelmChart(
                self,
                "HyperPodChart",
                eks_cluster=self.eks,
                path=config.resolve_path(eks_config.helm_chart),
            )
        self.device_plugins: DevicePlugins | None = None
        plugins = device_plugins(config)
        if plugins is not None:
            folders = eks_config.device_plugins
            self.device_plugins = DevicePlugins(
                self,
                "DevicePlugins",
                eks_cluster=self.eks,
                plugins=plugins,
                nvidia_chart=config.resolve_path(folders.nvidia_chart)
                if folders.nvidia_chart
                else None,
                efa_chart=config.resolve_path(folders.efa_chart) if folders.efa_chart else None,
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
