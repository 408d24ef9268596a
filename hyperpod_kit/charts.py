"""A Helm chart folder's own files, read offline with no CDK: `validate` checks which chart a
local device-plugin folder holds (`chart_identity`), and the EKS constructs read the pinned
HyperPod chart's dependencies and values (`constructs/eks_chart_folder.py`). It sits outside
`constructs/` so that `config/` imports no construct code (tests/unit/test_house.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_mapping(path: Path) -> dict[str, Any]:
    """A chart's YAML file (Chart.yaml, values.yaml) as a mapping: {} when it is missing or is
    not a mapping."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def chart_identity(path: Path) -> tuple[str | None, str | None]:
    """The (name, version) a chart folder's Chart.yaml declares; None where it says nothing."""
    chart = read_mapping(path / "Chart.yaml")
    name, version = chart.get("name"), chart.get("version")
    return (str(name) if name is not None else None, str(version) if version is not None else None)
