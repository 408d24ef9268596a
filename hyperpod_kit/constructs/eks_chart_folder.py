"""A pinned HyperPod Helm chart folder, read offline: vendored dependencies and the values to
pass over its own. No CDK import; what `validate` reads of a chart folder (which chart it holds)
is in `hyperpod_kit/charts.py`, outside `constructs/`.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from hyperpod_kit.charts import read_mapping
from hyperpod_kit.naming import HEALTH_LABEL

HYPERPOD_HEALTH_TAINT: dict[str, str] = {
    "key": HEALTH_LABEL,
    "operator": "Equal",
    "value": "Unschedulable",
    "effect": "NoSchedule",
}
"""HyperPod taints a node with this while its deep health checks run; whatever must run on every
node (device plugins, health agents) tolerates it."""

DEVICE_PLUGINS = ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")
"""Sub-charts whose DaemonSets must run on every node of their kind, health checks or not."""


def _vendored_names(charts: Path) -> set[str]:
    """Names of the charts in a chart's ``charts/`` folder: sub-folders and packed .tgz files."""
    names: set[str] = set()
    if not charts.is_dir():
        return names
    for entry in charts.iterdir():
        if entry.is_dir() and (entry / "Chart.yaml").is_file():
            names.add(str(read_mapping(entry / "Chart.yaml").get("name", entry.name)))
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
    chart = read_mapping(path / "Chart.yaml")
    wanted = [str(d.get("name")) for d in chart.get("dependencies") or [] if isinstance(d, dict)]
    have = _vendored_names(path / "charts")
    return [name for name in wanted if name not in have]


def chart_values(path: Path, *, region: str) -> dict[str, Any]:
    """Values passed over the chart's own: the region (the health-monitoring agent's image is
    regional, and before any node exists the chart cannot detect it), and HyperPod's health-check
    toleration for each device plugin whose values.yaml lacks it. Helm replaces lists rather than
    merging them, so the chart's own tolerations are repeated with it."""
    values: dict[str, Any] = {"global": {"region": region}}
    defaults = read_mapping(path / "values.yaml")
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
