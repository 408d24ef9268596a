"""Provenance, piece by piece: sections know their keys (config/keys.py), constructs record keys
for properties (constructs/provenance.py), and the gates read them back (gates.Provenance).
The end-to-end proof is tests/integration/test_provenance.py."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_fsx as fsx

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.keys import annotate, key_of
from hyperpod_kit.constructs.provenance import BuildError, building, trace, trace_values
from hyperpod_kit.gates import GateFinding, GateReport, Provenance
from hyperpod_kit.naming import PROVENANCE_METADATA
from tests.conftest import REPO


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    loaded = load_environment(REPO / "environments" / "slurm-platform.yaml")
    annotate(loaded.config)
    return loaded


def test_every_section_knows_its_key(loaded) -> None:  # type: ignore[no-untyped-def]
    config = loaded.config
    assert key_of(config) == ""
    assert key_of(config, "name") == "name"
    assert key_of(config.storage.lustre, "metadata.iops") == "storage.lustre.metadata.iops"
    group = config.cluster.instance_groups[1]
    assert key_of(group) == "cluster.instance_groups[1]"
    assert key_of(group, "instance_type") == "cluster.instance_groups[1].instance_type"
    # and the key leads to the line the value is written on
    file, line = loaded.at(key_of(group, "instance_type")).rsplit(":", 1)
    text = Path(file).read_text().splitlines()[int(line) - 1]
    assert "instance_type" in text or "name:" in text, text


def test_a_section_nobody_annotated_has_no_key() -> None:
    from hyperpod_kit.config.schema import LustreConfig

    assert key_of(LustreConfig(), "storage_capacity_gib") is None


def _resource(stack: cdk.Stack) -> fsx.CfnFileSystem:
    return fsx.CfnFileSystem(stack, "Fs", file_system_type="LUSTRE", subnet_ids=["subnet-1"])


def _records(construct: cdk.CfnResource) -> list[object]:
    return [e.data for e in construct.node.metadata if e.type == PROVENANCE_METADATA]


def test_trace_records_keys_and_refuses_a_field_that_is_not_there(loaded) -> None:  # type: ignore[no-untyped-def]
    stack = cdk.Stack(cdk.App(), "S")
    fs = _resource(stack)
    lustre = loaded.config.storage.lustre
    trace(fs, lustre, {"StorageCapacity": "storage_capacity_gib", "Unset": "existing"})
    (record,) = _records(fs)
    assert record == {
        "properties": {"StorageCapacity": "storage.lustre.storage_capacity_gib"},
        "section": "storage.lustre",
    }  # `existing` is None in this file: nothing is set from it
    with pytest.raises(KeyError, match="capacity_gb"):
        trace(fs, lustre, {"StorageCapacity": "capacity_gb"})


def _metadata(*records: tuple[str, str, dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    """Manifest metadata: (construct path, logical id, provenance record)."""
    found: dict[str, list[dict[str, object]]] = {}
    for path, logical_id, record in records:
        entries = found.setdefault(path, [])
        if logical_id:
            entries.append({"type": "aws:cdk:logicalId", "data": logical_id})
        entries.append({"type": PROVENANCE_METADATA, "data": record})
    return found


def _lint(where: str) -> GateFinding:
    return GateFinding("cfn-lint", "error", "env-storage", where, "E3034", "E3034 too big")


def test_the_gates_find_the_nearest_key_then_the_literal_then_the_section() -> None:
    keys = Provenance.of(
        _metadata(
            ("/env-storage", "", {"properties": {"Tags": "tags"}}),
            (
                "/env-storage/Lustre/FileSystem",
                "Fs",
                {
                    "section": "storage.lustre",
                    "properties": {"LustreConfiguration/MetadataConfiguration": "x.metadata"},
                },
            ),
            ("/env-network", "", {"values": {"subnet-0abc": "network.existing_vpc.subnet"}}),
        )
    )
    fs = "Resources/Fs/Properties"
    assert keys.key(_lint(f"{fs}/LustreConfiguration/MetadataConfiguration/Iops")) == (
        "x.metadata",
        True,
    )
    assert keys.key(_lint(f"{fs}/Tags/0/Value")) == ("tags", True)
    resources = {"Fs": {"Properties": {"SubnetIds": ["subnet-0abc"]}}}
    assert keys.key(_lint(f"{fs}/SubnetIds/0"), resources) == (
        "network.existing_vpc.subnet",
        True,
    )
    assert keys.key(_lint(f"{fs}/StorageCapacty")) == ("storage.lustre", False)
    assert keys.key(_lint("Resources/Other/Properties/X")) == (None, False)
    nag = GateFinding("cdk-nag", "error", "env-storage", "/env-storage/Lustre/FileSystem", "A", "")
    assert keys.key(nag) == ("storage.lustre", False)


def test_a_traced_finding_reads_as_the_file_s_line() -> None:
    finding = _lint("Resources/Fs/Properties/StorageCapacity")
    traced = GateFinding(**{**finding.__dict__, "key": "storage.lustre.x", "exact": True})
    assert traced.render(lambda key: "env.yaml:12") == (
        "env.yaml:12 storage.lustre.x: too big. "
        "(cfn-lint E3034 at env-storage Resources/Fs/Properties/StorageCapacity)"
    )
    assert finding.render() == (
        "cfn-lint error env-storage Resources/Fs/Properties/StorageCapacity: E3034 too big"
    )
    assert GateReport(findings=[traced]).traced  # the file's: exit 2
    section = GateFinding(**{**finding.__dict__, "key": "storage.lustre", "exact": False})
    assert not GateReport(findings=[traced, section]).traced  # not the file's alone: exit 1


def test_a_value_cdk_refuses_is_reported_at_the_key_it_quotes(loaded) -> None:  # type: ignore[no-untyped-def]
    from aws_cdk import aws_s3 as s3

    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(BuildError) as raised, building(loaded.config.storage):
        s3.Bucket(stack, "B", bucket_name="Bad_Name")
    assert raised.value.key == "storage"  # the value is not the file's: the section's key
    storage = loaded.config.storage
    lustre = storage.lustre.model_copy(update={"weekly_maintenance_start_time": "Bad_Name"})
    lustre._key = "storage.lustre"
    annotated = storage.model_copy(update={"lustre": lustre})
    annotated._key = "storage"
    with pytest.raises(BuildError) as raised, building(annotated):
        s3.Bucket(stack, "C", bucket_name="Bad_Name")
    assert raised.value.key == "storage.lustre.weekly_maintenance_start_time"
    assert raised.value.message.startswith("Invalid S3 bucket name (value: Bad_Name)")
    with pytest.raises(ZeroDivisionError), building(storage):  # Python's own: not the file's
        _ = 1 / 0


def test_trace_values_records_the_file_s_literals_on_the_stack(loaded) -> None:  # type: ignore[no-untyped-def]
    stack = cdk.Stack(cdk.App(), "S")
    trace_values(stack, loaded.config.cluster.instance_groups[0], ["name", "instance_type"])
    (record,) = [e.data for e in stack.node.metadata if e.type == PROVENANCE_METADATA]
    group = loaded.config.cluster.instance_groups[0]
    assert record == {
        "values": {
            group.name: "cluster.instance_groups[0].name",
            group.instance_type: "cluster.instance_groups[0].instance_type",
        }
    }
