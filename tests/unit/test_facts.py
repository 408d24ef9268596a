"""The dated fact tables: in step with botocore and with the fact sheet they are generated from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.facts import (
    HERE,
    ami_accounts,
    api_constraints,
    eks_only,
    eks_versions,
    instance_type,
    instance_types,
    instance_types_checked,
    limit,
    regions,
    threads_per_core,
)
from hyperpod_kit.config.facts.refresh import api_constraints as refresh_api_table
from hyperpod_kit.config.facts.refresh import botocore_instance_types, refresh
from tests.conftest import REPO, default_data

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
    for name in ("instance_types.json", "regions.json"):  # api_constraints.json: below
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


# --- the API's constraints and the rules' tables -------------------------------------------------


def test_api_table_is_what_the_installed_botocore_generates() -> None:
    """`api_constraints.json` is botocore's model as pinned (requirements.txt): a bump of botocore
    or cfn-lint fails here until `python -m hyperpod_kit.config.facts.refresh --api` is run and
    its diff reviewed."""
    import botocore

    committed = api_constraints()
    fresh = refresh_api_table(today=committed["generated"])
    assert committed["botocore"] == botocore.__version__
    assert committed == fresh
    pinned = (REPO / "requirements.txt").read_text()
    assert f"botocore=={botocore.__version__}" in pinned


def test_every_row_of_the_api_table_can_be_checked() -> None:
    """Each row's path exists in the schema (or names a derivation), its condition and owner are
    known, and its pattern compiles the way the check compiles it."""
    from hyperpod_kit.config.validators import REGISTRY
    from hyperpod_kit.config.validators.api import DERIVATIONS, WHEN, _pattern, values_at

    config = EnvironmentConfig.model_validate(default_data())
    for row in api_constraints()["fields"]:
        if "value" in row:
            assert row["value"] in DERIVATIONS, row
        else:
            list(values_at(config, row["key"]))  # an unknown key is an AttributeError
        assert row.get("when", "slurm") in WHEN, row
        assert row.get("owner", "api-constraints") in REGISTRY, row
        if "pattern" in row:
            _pattern(row["pattern"])
    keys = {row["key"] for row in api_constraints()["fields"]}
    assert {"cluster.instance_groups[].name", "tags.keys()", "studio.instance_types[]"} <= keys


@pytest.mark.parametrize(
    ("api", "facts"),
    [
        (
            "sagemaker:CreateCluster:InstanceGroups",
            {"type": "list", "min_items": 1, "max_items": 100},
        ),
        (
            "sagemaker:CreateStudioLifecycleConfig:StudioLifecycleConfigContent",
            {"max_length": 16384},
        ),
        ("sagemaker:CreateCluster:InstanceGroups[].InstanceCount", {"min": 0, "max": 6758}),
        ("sagemaker:CreateCluster:InstanceGroups[].ThreadsPerCore", {"min": 1, "max": 2}),
        ("cloudformation:CreateStack:Tags[].Value", {"min_length": 1, "max_length": 256}),
    ],
)
def test_api_table_holds_the_limits_the_rules_rely_on(api: str, facts: dict[str, Any]) -> None:
    (row,) = [r for r in api_constraints()["fields"] if r["api"] == api]
    assert {k: row[k] for k in facts} == facts


def test_threads_per_core_covers_every_family_and_says_where_the_sheet_is_silent() -> None:
    """A new family in the instance-type table needs a row (known, or null for unknown)."""
    table = json.loads((HERE / "threads_per_core.json").read_text())
    families = {name.split(".")[1] for name in instance_types()}
    assert set(table["families"]) == families
    assert table["sources"]["fact_sheet"].startswith("silent")
    assert threads_per_core("ml.m7g.xlarge") == ((1,), table["families"]["m7g"]["source"])
    assert threads_per_core("ml.p5.48xlarge") == ((1, 2), table["families"]["p5"]["source"])
    found = threads_per_core("ml.m8a.16xlarge")
    assert found is not None and found[0] is None  # unknown, never guessed
    assert threads_per_core("ml.zz9.xlarge") is None


def test_eks_calendar_is_dated_and_ordered() -> None:
    table = eks_versions()
    assert table["checked"] == "2026-11-25"
    for version, row in table["versions"].items():
        assert row["standard_until"] or row["extended_until"], version
        if row["standard_until"] and row["extended_until"]:
            assert row["standard_until"] < row["extended_until"], version


def test_ami_accounts_say_they_were_not_read_from_a_hyperpod_ami() -> None:
    table = ami_accounts()
    assert table["read_from_hyperpod_ami"] is False
    assert "not read from a HyperPod AMI" in table["sources"]["note"]
    names = {n for group in table["names"].values() for n in group}
    assert {"root", "nobody", "ubuntu", "slurm"} <= names
    assert [0, 999] in table["uid_ranges"] and [65534, 65535] in table["uid_ranges"]


def test_limits_name_their_source() -> None:
    assert limit("eks_public_access_cidrs") == 40
    assert limit("tags_per_resource") - limit("kit_tags_per_resource") == 47
    table = json.loads((HERE / "limits.json").read_text())
    assert all(row["source"] and row["kind"] for row in table["limits"].values())


def test_the_eks_only_release_is_in_the_words_of_the_installed_registry_schema() -> None:
    """`orchestrator_rules.json` quotes CloudFormation's schema of AWS::SageMaker::Cluster: the
    installed cfn-lint's copy still says it (a newer one that drops the words fails here, and the
    table and `ami-updates-eks-only` are read again)."""
    from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER
    from cfnlint.version import __version__ as cfn_lint

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(
        "us-east-1", "AWS::SageMaker::Cluster"
    ).schema
    group = schema["definitions"]["ClusterInstanceGroup"]["properties"]
    row = eks_only("image_release_version")
    assert row["quote"] in group["ImageReleaseVersion"]["description"]
    assert f"cfn-lint {cfn_lint}" in row["cite"]
    # the batches' settings are one DeploymentConfig, under both places a group takes it
    deployment = eks_only("deployment")
    for parent in ("ScheduledUpdateConfig", "AutoPatchConfig"):
        assert "DeploymentConfig" in schema["definitions"][parent]["properties"]
        assert f"{parent}.DeploymentConfig" in deployment["property"]
    assert set(schema["definitions"]["DeploymentConfig"]["properties"]) == {
        "RollingUpdatePolicy", "WaitIntervalInSeconds", "AutoRollbackConfiguration",
    }  # fmt: skip


def test_hyperpod_kits_own_tags_leave_room_for_the_files() -> None:
    """`kit_tags_per_resource` is measured, not guessed: no resource of any example's templates
    (the golden copies `test_synth_examples` keeps current, nested stacks included) carries more
    tags of hyperpod-kit's own than it says, so the 47 tags `tags` allows always fit in 50."""
    import yaml

    most = limit("kit_tags_per_resource")
    seen = 0
    for example in sorted((REPO / "tests" / "golden").iterdir()):
        env = yaml.safe_load((REPO / "environments" / f"{example.name}.yaml").read_text())
        theirs = set(env.get("tags", {}))
        for path in example.glob("*.template.json"):
            for logical, resource in json.loads(path.read_text()).get("Resources", {}).items():
                tags = (resource.get("Properties") or {}).get("Tags")
                if isinstance(tags, list):
                    keys = [t.get("Key") for t in tags if isinstance(t, dict)]
                elif isinstance(tags, dict):
                    keys = list(tags)
                else:
                    continue
                own = [k for k in keys if k not in theirs]
                assert len(own) <= most, (example.name, path.name, logical, own)
                seen = max(seen, len(own))
    assert seen == most, "the table overstates hyperpod-kit's tags: lower kit_tags_per_resource"
