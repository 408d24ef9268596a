"""Which device plugins an EKS environment gets, offline: only without HyperPod's chart, the
NVIDIA plugin on GPU types, the EFA plugin on EFA types, pinned as HyperPod's chart pins them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.derived import DevicePlugins, device_plugins
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.facts import helm_chart_pins
from tests.conftest import REPO, default_data, merge

CHART = REPO / "tests" / "data" / "hyperpod-helm-chart"


def eks_config(*types: str, **eks: Any) -> EnvironmentConfig:
    groups = [
        {"name": f"g{i}", "role": "worker", "instance_type": t, "instance_count": 1}
        for i, t in enumerate(types)
    ]
    return EnvironmentConfig.model_validate(
        merge(
            default_data(),
            {
                "orchestrator": "eks",
                "network": {
                    "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
                    "control_plane_availability_zone_id": "usw2-az1",
                },
                "cluster": {"instance_groups": groups, "eks": eks},
                "validation": {"allow_instance_types": ["ml.p9.48xlarge"]},
            },
        )
    )


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("eks.yaml", DevicePlugins(("ml.g5.12xlarge",), ("ml.g5.12xlarge",))),
        ("studio-eks.yaml", DevicePlugins(("ml.g5.12xlarge",), ("ml.g5.12xlarge",))),
        ("eks-existing.yaml", None),  # an existing cluster is expected to run HyperPod's chart
        ("default.yaml", None),  # Slurm
    ],
)
def test_the_shipped_examples(example: str, expected: DevicePlugins | None) -> None:
    assert device_plugins(load_environment(REPO / "environments" / example).config) == expected


def test_each_plugin_only_on_the_types_that_have_its_device() -> None:
    plugins = device_plugins(eks_config("ml.p5.48xlarge", "ml.g5.xlarge", "ml.trn1.32xlarge"))
    assert plugins == DevicePlugins(
        nvidia_types=("ml.g5.xlarge", "ml.p5.48xlarge"),  # GPUs; g5.xlarge has no EFA
        efa_types=("ml.p5.48xlarge", "ml.trn1.32xlarge"),  # EFA; Trainium has no NVIDIA GPU
    )


def test_nothing_where_no_type_has_either_device() -> None:
    assert device_plugins(eks_config("ml.m5.xlarge")) is None
    assert device_plugins(eks_config("ml.m5.xlarge", device_plugins={"enabled": True})) is None


def test_never_beside_hyperpods_chart_and_on_an_existing_cluster_only_when_asked() -> None:
    assert device_plugins(eks_config("ml.p5.48xlarge", helm_chart=str(CHART))) is None
    existing = {"existing_cluster_name": "ml"}
    assert device_plugins(eks_config("ml.p5.48xlarge", **existing)) is None
    asked = eks_config("ml.p5.48xlarge", **existing, device_plugins={"enabled": True})
    assert device_plugins(asked) == DevicePlugins(("ml.p5.48xlarge",), ("ml.p5.48xlarge",))
    off = eks_config("ml.p5.48xlarge", device_plugins={"enabled": False})
    assert device_plugins(off) is None


def test_a_type_outside_the_table_gets_neither_plugin() -> None:
    plugins = device_plugins(eks_config("ml.p5.48xlarge", "ml.p9.48xlarge"))
    assert plugins is not None and plugins.unknown_types == ("ml.p9.48xlarge",)
    assert "ml.p9.48xlarge" not in plugins.nvidia_types + plugins.efa_types


def test_the_pins_are_the_versions_hyperpods_chart_lists() -> None:
    """The stand-in chart mirrors HyperPod's Chart.yaml dependency list (its versions and
    repositories): the plugins deployed without the chart are the ones the chart would bring."""
    listed = {
        d["name"]: (d["version"], d["repository"])
        for d in yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    }
    for name, pin in helm_chart_pins().items():
        assert listed[name] == (pin.version, pin.repository), name


def test_the_facts_table_names_its_source_and_date() -> None:
    import json

    from hyperpod_kit.config import facts

    data = json.loads((Path(facts.__file__).parent / "helm_charts.json").read_text())
    assert (
        data["checked"] == facts.helm_charts_checked()
        and "sagemaker-hyperpod-cli" in data["source"]
    )
