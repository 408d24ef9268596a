"""The dated fact tables: in step with botocore and with the fact sheet they are generated from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperpod_kit.config.facts import (
    HERE,
    instance_type,
    instance_types,
    instance_types_checked,
    regions,
)
from hyperpod_kit.config.facts.refresh import botocore_instance_types, refresh

SHEET = Path(__file__).resolve().parents[3] / "shared" / "facts-instance-types.md"


def test_table_holds_exactly_the_types_hyperpods_api_accepts() -> None:
    """botocore's ClusterInstanceType is what CreateCluster accepts; a newer botocore with new
    types fails here until `python -m hyperpod_kit.config.facts.refresh SHEET` is run."""
    assert set(instance_types()) == botocore_instance_types()
    assert len(instance_types()) == 209
    assert instance_types_checked() == "2026-11-23"


@pytest.mark.skipif(not SHEET.is_file(), reason="the team's fact sheet is not beside the checkout")
def test_committed_tables_are_what_the_fact_sheet_generates(tmp_path: Path) -> None:
    refresh(SHEET, out=tmp_path)
    for name in ("instance_types.json", "regions.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((HERE / name).read_text())


@pytest.mark.parametrize(
    ("name", "gpus", "efa", "rdma", "addresses", "ranks"),
    [
        ("ml.p5.48xlarge", 8, 32, True, 33, 8),
        ("ml.p5en.48xlarge", 8, 16, True, 17, 8),
        ("ml.p4d.24xlarge", 8, 4, True, 5, 8),  # RDMA read only: device RDMA is on
        ("ml.g5.8xlarge", 1, 1, False, 2, 1),  # EFA without device RDMA
        ("ml.g5.xlarge", 1, 0, False, 1, 1),  # no EFA
        ("ml.g6e.48xlarge", 8, 4, True, 5, 8),
        ("ml.trn1.32xlarge", 0, 8, True, 9, 32),  # Trainium: ranks are NeuronCores
        ("ml.m5.xlarge", 0, 0, False, 1, 0),
    ],
)
def test_instance_facts(  # noqa: PLR0917 - one parameter per column of the table above
    name: str, gpus: int, efa: int, rdma: bool, addresses: int, ranks: int
) -> None:
    t = instance_type(name)
    assert t is not None
    assert (t.gpus, t.efa_interfaces, t.device_rdma) == (gpus, efa, rdma)
    assert t.addresses_per_node == addresses
    assert t.processes_per_node == ranks


def test_unknown_counts_stay_unknown() -> None:
    """The sheet has no EFA count for p6e-gb200: None, never 0, and EFA is still on."""
    gb200 = instance_type("ml.p6e-gb200.36xlarge")
    assert gb200 is not None
    assert gb200.efa_interfaces is None and gb200.efa and gb200.device_rdma
    assert gb200.addresses_per_node == 1 + 17  # one per network card, the most it can take


def test_regions_and_zones() -> None:
    table = regions()
    assert table["us-west-2"].az_ids == ("usw2-az1", "usw2-az2", "usw2-az3", "usw2-az4")
    assert "cac1-az3" not in table["ca-central-1"].az_ids  # a real gap
    assert table["us-east-1"].hyperpod_offered and not table["ca-west-1"].hyperpod_offered
    assert len(table) == 36
