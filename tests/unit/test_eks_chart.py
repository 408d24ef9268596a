"""What synth reads from a pinned HyperPod Helm chart folder, offline: vendored dependencies and
the device plugins' health-check toleration."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.constructs.eks_chart_folder import (
    HYPERPOD_HEALTH_TAINT,
    _tolerates,
    chart_values,
    missing_dependencies,
)

CHART = Path(__file__).resolve().parents[1] / "data" / "hyperpod-helm-chart"
TAINT = dict(HYPERPOD_HEALTH_TAINT)


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    copy = tmp_path / "HyperPodHelmChart"
    shutil.copytree(CHART, copy)
    return copy


def _pack(folder: Path) -> None:
    """Replace a vendored sub-chart folder by its packed form, as `helm dependency update` leaves
    charts from a repository (charts/<name>-<version>.tgz)."""
    meta = yaml.safe_load((folder / "Chart.yaml").read_text())
    archive = folder.parent / f"{meta['name']}-{meta['version']}.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    shutil.rmtree(folder)


def test_the_stand_in_chart_has_every_dependency_vendored() -> None:
    assert missing_dependencies(CHART) == []
    assert "STAND-IN" in (CHART / "Chart.yaml").read_text()


def test_packed_dependencies_count_as_vendored(chart: Path) -> None:
    _pack(chart / "charts" / "nvidia-device-plugin")
    assert (chart / "charts" / "nvidia-device-plugin-0.16.1.tgz").is_file()
    assert missing_dependencies(chart) == []


def test_a_missing_dependency_is_reported_even_when_disabled(chart: Path) -> None:
    """helm install checks every dependency the chart lists, whatever its condition says."""
    shutil.rmtree(chart / "charts" / "job-auto-restart")
    values = yaml.safe_load((chart / "values.yaml").read_text())
    values["job-auto-restart"]["enabled"] = False
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    assert missing_dependencies(chart) == ["job-auto-restart"]


def test_a_chart_whose_dependencies_were_never_built(chart: Path) -> None:
    shutil.rmtree(chart / "charts")
    assert missing_dependencies(chart) == [
        "training-operators",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "health-monitoring-agent",
        "deep-health-check",
        "job-auto-restart",
    ]


def test_values_carry_the_region_and_nothing_else_when_plugins_tolerate(chart: Path) -> None:
    assert chart_values(chart, region="eu-west-1") == {"global": {"region": "eu-west-1"}}


def test_a_device_plugin_without_the_toleration_gets_it_beside_its_own(chart: Path) -> None:
    values = yaml.safe_load((chart / "values.yaml").read_text())
    efa = values["aws-efa-k8s-device-plugin"]
    efa["tolerations"] = [t for t in efa["tolerations"] if t.get("key") != TAINT["key"]]
    del values["nvidia-device-plugin"]["tolerations"]
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    out = chart_values(chart, region="us-west-2")
    # Helm replaces lists: the chart's own tolerations are kept, HyperPod's is added.
    assert out["aws-efa-k8s-device-plugin"] == {"tolerations": [*efa["tolerations"], TAINT]}
    assert out["nvidia-device-plugin"] == {"tolerations": [TAINT]}


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        (TAINT, True),
        ({"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": TAINT["key"], "operator": "Exists"}, True),  # every effect
        ({"operator": "Exists"}, True),  # every taint
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": TAINT["key"], "operator": "Equal", "value": "Schedulable"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, False),
        ("not a mapping", False),
    ],
)
def test_which_tolerations_cover_the_health_check_taint(toleration: Any, ok: bool) -> None:
    assert _tolerates([toleration]) is ok


def test_a_chart_without_values_file(tmp_path: Path) -> None:
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.0\n")
    assert missing_dependencies(tmp_path) == []
    out = chart_values(tmp_path, region="us-east-1")
    assert out["nvidia-device-plugin"] == {"tolerations": [TAINT]}


def test_packed_names_read_the_chart_yaml_inside(tmp_path: Path) -> None:
    """The name comes from the archive's Chart.yaml, not from its file name."""
    archive = tmp_path / "charts" / "renamed.tgz"
    archive.parent.mkdir()
    data = b"apiVersion: v2\nname: cert-manager\nversion: v1.18.2\n"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("cert-manager/Chart.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "Chart.yaml").write_text(
        "apiVersion: v2\nname: x\nversion: 0.1.0\ndependencies:\n  - name: cert-manager\n"
    )
    assert missing_dependencies(tmp_path) == []


def test_the_folder_reader_imports_no_cdk() -> None:
    """`validate` may use it without paying for aws-cdk-lib's import."""
    import subprocess
    import sys

    code = (
        "import sys, hyperpod_kit.constructs.eks_chart_folder; "
        "sys.exit(any(m.startswith(('aws_cdk', 'jsii')) for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
