"""`HyperPodHelmChart`: HyperPod's Helm chart, installed before the HyperPod cluster exists.

The chart (sagemaker-hyperpod-cli `helm_chart/HyperPodHelmChart`) carries the health-monitoring
agent, deep health checks, job auto-restart, Kubeflow's training operators and the NVIDIA and EFA
device plugins. It is in no Helm repository, and nothing is fetched at build, test or deploy time:
the environment file names a pinned copy of the folder, with its public dependencies vendored in
``charts/`` (``helm dependency update`` once, when pinning; docs/eks.md). Synth packages the
folder as an S3 asset; the kubectl provider's `HelmChart` installs it from there as release
``hyperpod-dependencies`` in ``kube-system`` (the chart itself creates the ``aws-hyperpod``
namespace, whose name HyperPod fixes).

Synth reads the folder (offline) to catch what would fail at deploy: a dependency missing from
``charts/`` (helm refuses the install), or a device plugin that does not tolerate HyperPod's
health-check taint (it would not run on a node under deep health checks).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Annotations, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.eks_chart_folder import chart_values, missing_dependencies

RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"
EXCLUDE = [".git", ".github", "*.swp", ".DS_Store"]


class HyperPodHelmChart(Construct):
    """HyperPod's chart from a pinned folder, through ``eks``'s kubectl provider.

    Handles: ``chart`` (the `eks.HelmChart`, for ordering), ``asset``, ``values`` (what is passed
    over the chart's own values.yaml), ``missing_dependencies``.
    """

    def __init__(self, scope: Construct, id: str, *, eks_cluster: EksCluster, path: Path) -> None:
        super().__init__(scope, id)
        self.missing_dependencies = missing_dependencies(path)
        if self.missing_dependencies:
            # An error annotation fails the synth gate with this message (no traceback, no
            # template deployed); helm would refuse the install at deploy time anyway.
            Annotations.of(self).add_error(
                f"the Helm chart in {path} lists dependencies that are not in its charts/ "
                f"folder: {', '.join(self.missing_dependencies)}. Run `helm dependency update "
                f"{path}` once where the chart is pinned, and keep charts/ with it"
            )
        self.values = chart_values(path, region=Stack.of(self).region)
        self.asset = s3_assets.Asset(self, "Asset", path=str(path), exclude=EXCLUDE)
        self.chart = eks.HelmChart(
            self,
            "Release",
            cluster=eks_cluster.cluster,
            chart_asset=self.asset,
            release=RELEASE,
            namespace=NAMESPACE,
            create_namespace=False,
            values=self.values,
        )
        # After the core add-ons: the chart's DaemonSets need the VPC CNI on every node.
        for addon in eks_cluster.addons.values():
            self.chart.node.add_dependency(addon)
        eks_cluster.kubectl_ready(self.chart)
        suppress_chart_asset_read(eks_cluster)


def suppress_chart_asset_read(eks_cluster: EksCluster) -> None:
    """cdk-nag IAM5 on the kubectl handler's policy, which CDK writes when a chart comes from an
    S3 asset (grantRead on the CDK assets bucket). Idempotent: several charts may ask."""
    policy = eks_cluster.kubectl_role.node.try_find_child("DefaultPolicy")
    assert policy is not None  # the asset's grant wrote to it
    NagSuppressions.add_resource_suppressions(
        policy,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The kubectl handler reads the Helm chart assets: grantRead on the CDK "
                "assets bucket (its objects, bucket/*, with s3:GetObject*/GetBucket*/List*).",
                applies_to=[
                    "Action::s3:GetObject*",
                    "Action::s3:GetBucket*",
                    "Action::s3:List*",
                    RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:s3:::cdk-[^/]+\/\*$/"),
                ],
            )
        ],
        apply_to_children=True,
    )
