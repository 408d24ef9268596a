"""Pins: the values a deploy of an environment depends on that would otherwise float (an instance
group's AMI release on EKS, the Kubernetes version, EKS add-ons, Helm charts, the Slurm
configuration strategy, the accounting database's engine), as the file and the toolkit's dated
tables decide them; and the combinations of them known to break (`facts/compatibility.json`). The
lock file that records pins is `hyperpod_kit/lock.py`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from hyperpod_kit.config.derived import (
    AMP_ADDON,
    accounting_engine_version,
    device_plugins,
    prometheus_enabled,
    slurm_accounting,
    slurm_config_strategy,
    task_governance,
    task_governance_addon_version,
)
from hyperpod_kit.config.facts import HERE as FACTS
from hyperpod_kit.config.facts import eks_addons, grafana_versions, helm_chart_pins, instance_type
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig

Source = Literal["file", "default", "deployed", "latest"]
COMPATIBILITY = FACTS / "compatibility.json"
# The EKS add-ons the stacks install, by their key under cluster.eks.addons: (add-on, whether a
# new cluster only has it: an existing cluster brings its own core add-ons).
ADDONS = {
    "vpc_cni": ("vpc-cni", True),
    "kube_proxy": ("kube-proxy", True),
    "coredns": ("coredns", True),
    "pod_identity_agent": ("eks-pod-identity-agent", True),
    "cert_manager": ("cert-manager", False),
    "training_operator": ("amazon-sagemaker-hyperpod-training-operator", False),
    "task_governance": ("amazon-sagemaker-hyperpod-taskgovernance", False),
    "observability": (AMP_ADDON, False),
}
# Add-ons installed only when a feature of the file asks for them: (whether it does, the version a
# deploy takes when the file writes none: a default of hyperpod-kit's dated tables, or None where
# no source gives one, and then "latest").
OPTIONAL_ADDONS: dict[
    str,
    tuple[Callable[[EnvironmentConfig], bool], Callable[[EnvironmentConfig], str] | None],
] = {
    "task_governance": (task_governance, task_governance_addon_version),
    "observability": (prometheus_enabled, None),
}


def addons_of(config: EnvironmentConfig) -> dict[str, tuple[str, bool]]:
    """ADDONS less the optional ones this environment does not install."""
    return {
        key: row
        for key, row in ADDONS.items()
        if key not in OPTIONAL_ADDONS or OPTIONAL_ADDONS[key][0](config)
    }


def installed_addons(config: EnvironmentConfig) -> list[str]:
    """The EKS add-ons whose deployed versions `lock --from-deployed` asks for: every one the
    stacks may install, less those of a feature the environment leaves off."""
    return [addon for addon, _ in addons_of(config).values()]


@dataclass(frozen=True)
class Pin:
    key: str
    value: str | None
    source: Source
    what: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "what": self.what}


# --- what synth resolves -----------------------------------------------------------------------


def _written(model: Any, name: str) -> bool:
    return name in model.model_fields_set and getattr(model, name) is not None


def ami_pin_key(group: str) -> str:
    """The pin of a group's HyperPod AMI release (EKS clusters only)."""
    return f"cluster.instance_groups[{group}].image_release_version"


def resolved_pins(config: EnvironmentConfig) -> dict[str, Pin]:
    """The pins of this environment as the file and the toolkit's tables decide them. A group's
    AMI release is pinned on an EKS cluster only: AWS takes `ImageReleaseVersion` on EKS
    clusters alone (facts/orchestrator_rules.json), and a Slurm group runs HyperPod's latest AMI
    of its creation, moved by `UpdateClusterSoftware` (docs/platform.md)."""
    pins: list[Pin] = []
    for g in config.cluster.instance_groups if config.orchestrator == "eks" else []:
        if g.image_id not in (None, "default"):
            continue  # an AMI of the user's own: nothing of HyperPod's to pin
        release = g.image_release_version
        pins.append(
            Pin(
                ami_pin_key(g.name),
                release,
                "file" if release is not None else "latest",
                f"the HyperPod AMI release of group {g.name}",
            )
        )
    if config.orchestrator == "slurm":
        written = _written(config.cluster.slurm, "config_strategy")
        strategy = slurm_config_strategy(config)
        pins.append(
            Pin(
                "cluster.slurm.config_strategy",
                strategy,
                "file" if written else "default",
                "Slurm's configuration strategy (none: HyperPod merges, continuous provisioning)",
            )
        )
    if slurm_accounting(config):
        written = _written(config.cluster.slurm.accounting, "engine_version")
        pins.append(
            Pin(
                "cluster.slurm.accounting.engine_version",
                accounting_engine_version(config),
                "file" if written else "default",
                "Aurora MySQL version of the Slurm accounting database",
            )
        )
    if config.orchestrator == "eks":
        pins += list(_eks_pins(config))
    grafana = config.monitoring.prometheus.grafana
    if prometheus_enabled(config) and grafana.enabled:
        pins.append(
            Pin(
                "monitoring.prometheus.grafana.version",
                grafana.version,
                "file" if "version" in grafana.model_fields_set else "default",
                "Grafana version of the Amazon Managed Grafana workspace",
            )
        )
    return {p.key: p for p in pins}


def _eks_pins(config: EnvironmentConfig) -> Iterator[Pin]:
    eks = config.cluster.eks
    new = eks.existing_cluster_name is None
    if new:
        yield Pin(
            "cluster.eks.kubernetes_version",
            eks.kubernetes_version,
            "file" if "kubernetes_version" in eks.model_fields_set else "default",
            "Kubernetes version of the EKS cluster",
        )
    defaults = type(eks.addons)()
    for key, (addon, new_only) in addons_of(config).items():
        if new_only and not new:
            continue
        value = getattr(eks.addons, key)
        default = OPTIONAL_ADDONS[key][1] if key in OPTIONAL_ADDONS else None
        if _written(eks.addons, key):
            source: Source = "file"
        elif default is not None:
            value, source = default(config), "default"
        elif getattr(defaults, key) is not None:
            source = "default"
        else:
            source = "latest"
        yield Pin(f"cluster.eks.addons.{key}", value, source, f"EKS add-on {addon}")
    plugins = device_plugins(config)
    if plugins is not None:
        charts = helm_chart_pins()
        wanted = [
            ("nvidia-device-plugin", plugins.nvidia_types),
            ("aws-efa-k8s-device-plugin", plugins.efa_types),
        ]
        for chart, types in wanted:
            if types:
                yield Pin(
                    f"charts.{chart}",
                    charts[chart].version,
                    "default",
                    f"Helm chart {chart} (as HyperPod's own chart pins it)",
                )
    if eks.helm_chart is not None:
        yield Pin(
            "cluster.eks.helm_chart",
            _chart_version(config.resolve_path(eks.helm_chart)),
            "file",
            "HyperPod's Helm chart (the version in its Chart.yaml)",
        )


def _chart_version(folder: Path) -> str | None:
    try:
        data = yaml.safe_load((folder / "Chart.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version is not None else None


# --- combinations known to break ---------------------------------------------------------------


def compatibility_table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(COMPATIBILITY.read_text(encoding="utf-8"))
    return table


def incompatible(config: EnvironmentConfig) -> Iterator[Finding]:
    """Findings for each row of the compatibility table this environment matches."""
    pins = resolved_pins(config)
    table = compatibility_table()
    for row in table["rules"]:
        if all(_holds(config, pins, cond) for cond in row["when"]):
            yield Finding(
                Level[row["level"].upper()],
                row["at"],
                f"{row['why']} ({row['source']}; table checked {table['checked']})",
                row["hint"],
            )


def _holds(config: EnvironmentConfig, pins: dict[str, Pin], cond: dict[str, Any]) -> bool:
    if "pin" in cond:
        pin = pins.get(cond["pin"])
        value = pin.value if pin is not None else None
        if "in" in cond:
            return value in cond["in"]
        if "matches" in cond:
            return value is not None and re.fullmatch(cond["matches"], value) is not None
        return (value is not None) == bool(cond.get("set", True))
    if cond.get("worker_type_without_efa"):
        role = "compute" if config.orchestrator == "slurm" else "worker"
        return any(
            (facts := instance_type(t)) is not None and not facts.efa_interfaces
            for g in config.cluster.instance_groups
            if g.role == role
            for t in g.types
        )
    raise ValueError(f"unknown condition {cond}")


# --- values of finite sets that AWS changes ----------------------------------------------------


def _numbers(version: str) -> tuple[int, ...]:
    """v1.20.1-eksbuild.3 -> (1, 20, 1, 3): compared as numbers, build last."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def unlisted_versions(config: EnvironmentConfig) -> Iterator[Finding]:
    """The file's (or, after the lock is applied, the lock's) versions against the dated tables:
    an EKS add-on of a new cluster against EKS's latest for the cluster's minor, kube-proxy tied
    to that minor (`eks_addons.json`); the Grafana version against Managed Grafana's majors
    (`grafana_versions.json`). Engine versions are slurm-accounting's, Kubernetes versions
    eks's and eks-version-calendar's."""
    eks = config.cluster.eks
    if config.orchestrator == "eks" and eks.existing_cluster_name is None:
        yield from _addon_versions(config)
    grafana = config.monitoring.prometheus.grafana
    if prometheus_enabled(config) and grafana.enabled:
        table = grafana_versions()
        major = grafana.version.split(".")[0]
        if major not in table["majors"]:
            yield Finding(
                Level.WARNING,
                "monitoring.prometheus.grafana.version",
                f"Amazon Managed Grafana documents Grafana {', '.join(table['majors'])} (majors; "
                f"table checked {table['checked']}), not {grafana.version}",
                "check with `hyperpod-kit validate --aws` (grafana:ListVersions), or use a "
                "documented version",
            )


def _addon_versions(config: EnvironmentConfig) -> Iterator[Finding]:
    table = eks_addons()
    minor = config.cluster.eks.kubernetes_version
    for addon, row in table["addons"].items():
        key = row["key"]
        version = getattr(config.cluster.eks.addons, key)
        if version is None:
            continue
        at = f"cluster.eks.addons.{key}"
        latest = row["latest"].get(minor)
        if row.get("same_minor"):
            own = ".".join(str(n) for n in _numbers(version)[:2])
            use = f"use {latest}" if latest else f"use a {addon} v{minor}.x build"
            if _numbers(own) > _numbers(minor):
                yield Finding(
                    Level.ERROR,
                    at,
                    f"{addon} {version} is for Kubernetes {own}, newer than the cluster's "
                    f"{minor}: Kubernetes' version skew policy forbids a kube-proxy newer than "
                    "the API server",
                    use,
                )
                continue
            if own != minor:
                yield Finding(
                    Level.WARNING,
                    at,
                    f"{addon} {version} is for Kubernetes {own}; EKS pairs a {minor} cluster "
                    f"with {addon} of its own minor (table checked {table['checked']})",
                    use,
                )
                continue
        if latest is not None and _numbers(version) > _numbers(latest):
            yield Finding(
                Level.WARNING,
                at,
                f"{addon} {version} is newer than the latest EKS listed for Kubernetes {minor} "
                f"({latest}; table checked {table['checked']}): EKS may not offer it for this "
                "minor",
                f"check with `hyperpod-kit validate --aws` (eks:DescribeAddonVersions), or use "
                f"{latest}",
            )
