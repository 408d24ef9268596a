"""`HyperPodHelmChart`: HyperPod's Helm chart, installed before the HyperPod cluster exists.

The chart (sagemaker-hyperpod-cli `helm_chart/HyperPodHelmChart`) carries the health-monitoring
agent, deep health checks, job auto-restart, Kubeflow's training operators and the NVIDIA and EFA
device plugins. It is in no Helm repository, and nothing is fetched at build, test or deploy time:
the environment file names a pinned copy of the folder, with its public dependencies vendored in
``charts/`` (``helm dependency build`` once, when pinning). Synth packages the folder as an S3
asset; the kubectl provider's `HelmChart` installs it from there as release
``hyperpod-dependencies`` in ``kube-system`` (the chart itself creates the ``aws-hyperpod``
namespace, whose name HyperPod fixes).

Synth reads the folder (offline) to catch what would fail at deploy: a dependency missing from
``charts/`` (helm refuses the install), or a device plugin that does not tolerate HyperPod's
health-check taint (it would not run on a node under deep health checks).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from aws_cdk import Annotations, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from hyperpod_kit.constructs.eks import HYPERPOD_HEALTH_TAINT, EksCluster

RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"
DEVICE_PLUGINS = ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")
"""Sub-charts whose DaemonSets must run on every node of their kind, health checks or not."""
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
                f"folder: {', '.join(self.missing_dependencies)}. Run `helm dependency build "
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
        policy = eks_cluster.kubectl_role.node.try_find_child("DefaultPolicy")
        assert policy is not None  # the grant above wrote to it
        NagSuppressions.add_resource_suppressions(
            policy,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The kubectl handler reads the Helm chart asset: grantRead on the CDK "
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


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def _vendored_names(charts: Path) -> set[str]:
    """Names of the charts in a chart's ``charts/`` folder: sub-folders and packed .tgz files."""
    names: set[str] = set()
    if not charts.is_dir():
        return names
    for entry in charts.iterdir():
        if entry.is_dir() and (entry / "Chart.yaml").is_file():
            names.add(str(_load_yaml(entry / "Chart.yaml").get("name", entry.name)))
        elif entry.suffix == ".tgz" and entry.is_file():
            names.update(_packed_names(entry))
    return names


def _packed_names(archive: Path) -> Iterable[str]:
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    data = yaml.safe_load(f.read())
                    if isinstance(data, dict) and "name" in data:
                        yield str(data["name"])


def missing_dependencies(path: Path) -> list[str]:
    """Dependencies of the chart at ``path`` that its ``charts/`` folder lacks. `helm install`
    checks every listed dependency, enabled or not, and never fetches one itself."""
    chart = _load_yaml(path / "Chart.yaml")
    wanted = [str(d.get("name")) for d in chart.get("dependencies") or [] if isinstance(d, dict)]
    have = _vendored_names(path / "charts")
    return [name for name in wanted if name not in have]


def chart_values(path: Path, *, region: str) -> dict[str, Any]:
    """Values passed over the chart's own: the region (the health-monitoring agent's image is
    regional, and before any node exists the chart cannot detect it), and HyperPod's health-check
    toleration for each device plugin whose values.yaml lacks it. Helm replaces lists rather than
    merging them, so the chart's own tolerations are repeated with it."""
    values: dict[str, Any] = {"global": {"region": region}}
    defaults = _load_yaml(path / "values.yaml")
    for plugin in DEVICE_PLUGINS:
        section = defaults.get(plugin)
        tolerations = section.get("tolerations") if isinstance(section, Mapping) else None
        current = list(tolerations) if isinstance(tolerations, list) else []
        if not _tolerates(current):
            values[plugin] = {"tolerations": [*current, dict(HYPERPOD_HEALTH_TAINT)]}
    return values


def _tolerates(tolerations: list[Any]) -> bool:
    taint = HYPERPOD_HEALTH_TAINT
    for t in tolerations:
        if not isinstance(t, Mapping):
            continue
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint["key"]):
            return True  # no key: tolerates every taint of that effect
        if t.get("key") == taint["key"] and t.get("value") == taint["value"]:
            return True
    return False
