"""`DevicePlugins`: the NVIDIA and EFA device plugins, where HyperPod's Helm chart is not installed.

Without a device plugin no node advertises `nvidia.com/gpu` or `vpc.amazonaws.com/efa`, so every
pod that asks for one (every training job) stays Pending. HyperPod's chart ships both plugins; an
environment without it (`cluster.eks.helm_chart` left out, as in the shipped EKS examples) gets
them here, and one with it never does (a second copy conflicts). The charts and versions are the
ones HyperPod's chart pins (`config/facts/helm_charts.json`), with what its values set for them:

- both tolerate HyperPod's health-check taint (`sagemaker.amazonaws.com/node-health-status=
  Unschedulable:NoSchedule`), so the plugins run while deep health checks do;
- each runs only on the environment's instance types that have its device, by node affinity on
  `node.kubernetes.io/instance-type` (the NVIDIA chart's own affinity needs NFD labels that
  HyperPod nodes lack; the EFA plugin crash-loops on a node without EFA).

Through the EKS construct's kubectl provider, like HyperPod's chart: from the public repository
at deploy (the kubectl handler downloads it; nothing is fetched at synth or in tests), or, for a
cluster without a route out, from a local folder of the chart (`cluster.eks.device_plugins.*_chart`)
packaged as an S3 asset. Not verified on a cluster (docs/eks.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from hyperpod_kit.config.derived import DevicePlugins as DevicePluginTypes
from hyperpod_kit.config.facts import ChartPin, helm_chart_pins
from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.eks_chart import EXCLUDE, suppress_chart_asset_read
from hyperpod_kit.constructs.eks_chart_folder import HYPERPOD_HEALTH_TAINT

NVIDIA = "nvidia-device-plugin"
EFA = "aws-efa-k8s-device-plugin"
NAMESPACE = "kube-system"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def nvidia_values(instance_types: tuple[str, ...]) -> dict[str, Any]:
    """Over the chart's defaults: HyperPod's GPU types by affinity, GPU and health tolerations."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": INSTANCE_TYPE_LABEL,
                                    "operator": "In",
                                    "values": list(instance_types),
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            dict(HYPERPOD_HEALTH_TAINT),
        ],
    }


def efa_values(instance_types: tuple[str, ...]) -> dict[str, Any]:
    """Over the chart's defaults: only the EFA types (its `supportedInstanceLabels` affinity),
    EFA and health tolerations (the chart adds CriticalAddonsOnly itself)."""
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": list(instance_types)},
        "tolerations": [
            {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
            dict(HYPERPOD_HEALTH_TAINT),
        ],
    }


class DevicePlugins(Construct):
    """One Helm release per plugin with instance types to run on, in ``kube-system``.

    Handles: ``charts`` (release name -> `eks.HelmChart`), ``pins`` (name -> `ChartPin`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster,
        plugins: DevicePluginTypes,
        nvidia_chart: Path | None = None,
        efa_chart: Path | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.pins = helm_chart_pins()
        self.charts: dict[str, eks.HelmChart] = {}
        wanted = [
            (NVIDIA, plugins.nvidia_types, nvidia_chart, nvidia_values),
            (EFA, plugins.efa_types, efa_chart, efa_values),
        ]
        for name, types, folder, values in wanted:
            if types:
                self.charts[name] = self._release(
                    eks_cluster, self.pins[name], folder, values(types)
                )

    def _release(
        self,
        eks_cluster: EksCluster,
        pin: ChartPin,
        folder: Path | None,
        values: dict[str, Any],
    ) -> eks.HelmChart:
        construct_id = "".join(p.capitalize() for p in pin.name.split("-"))
        source: dict[str, Any]
        if folder is None:
            source = {"chart": pin.name, "repository": pin.repository, "version": pin.version}
        else:
            asset = s3_assets.Asset(self, f"{construct_id}Asset", path=str(folder), exclude=EXCLUDE)
            source = {"chart_asset": asset}
        chart = eks.HelmChart(
            self,
            construct_id,
            cluster=eks_cluster.cluster,
            release=pin.name,
            namespace=NAMESPACE,
            create_namespace=False,
            values=values,
            **source,
        )
        # After the core add-ons: the plugins' DaemonSets need the VPC CNI on every node.
        for addon in eks_cluster.addons.values():
            chart.node.add_dependency(addon)
        eks_cluster.kubectl_ready(chart)
        if folder is not None:
            suppress_chart_asset_read(eks_cluster)
        return chart
