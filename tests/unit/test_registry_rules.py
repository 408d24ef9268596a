"""CloudFormation's registry schemas as data (facts/cfn_registry.py, registry_rules.json) and the
`registry-schema` check that reads them before any synth."""

from __future__ import annotations

from typing import Any

import pytest

from hyperpod_kit.config.facts import api_constraints
from hyperpod_kit.config.facts import registry_rules as table
from hyperpod_kit.config.facts.cfn_registry import (
    constraints,
    property_schema,
    refresh,
    rows,
    type_gaps,
)
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import run_validators
from hyperpod_kit.config.validators.cloudformation import CREATED_WHEN
from tests.conftest import REPO, default_data, merge


def test_the_table_is_what_the_goldens_and_the_pinned_cfn_lint_make() -> None:
    """A construct that traces a new property (the goldens' keys.json change) or a cfn-lint
    bump that changes a schema fails here until the table is regenerated
    (`python -m hyperpod_kit.config.facts.cfn_registry`)."""
    written = table()
    assert refresh(REPO / "tests" / "golden", today=written["generated"]) == written


def test_every_type_some_region_lacks_says_when_the_file_creates_it() -> None:
    assert set(table()["regions_without"]) <= set(CREATED_WHEN)


def test_the_schema_is_read_through_its_definitions() -> None:
    spec = property_schema("AWS::SageMaker::Cluster", "InstanceGroups/*/ThreadsPerCore")
    assert spec is not None and constraints(spec) == {"min": 1, "max": 2}
    assert property_schema("AWS::SageMaker::Cluster", "InstanceGroups/*/NoSuchThing") is None
    assert property_schema("Custom::Thing", "X") is None


def test_a_property_that_does_not_hold_the_file_s_value_carries_no_rule() -> None:
    """`teams[].sharing: lend_and_borrow` becomes `LendAndBorrow`: the schema's enum is about
    the toolkit's spelling, not the file's."""
    keyed = [
        ("teams[].sharing", "AWS::SageMaker::ComputeQuota",
         "ComputeQuotaConfig/ResourceSharingConfig/Strategy", False),
        ("cluster.instance_groups[].threads_per_core", "AWS::SageMaker::Cluster",
         "InstanceGroups/*/ThreadsPerCore", True),
    ]  # fmt: skip
    assert [r["key"] for r in rows(keyed)] == ["cluster.instance_groups[].threads_per_core"]
    assert "AWS::SageMaker::ComputeQuota" in type_gaps(t for _, t, _, _ in keyed)


def _registry_findings(config: EnvironmentConfig) -> list[Any]:
    return run_validators(config, only=["registry-schema"])


def test_a_type_the_region_lacks_is_refused_where_the_file_creates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table's regions are cfn-lint's: an environment in one whose registry lacks the task
    governance types is refused at the key that turns them on, and only when it does."""
    gaps = table()["regions_without"]
    region = gaps["AWS::SageMaker::ClusterSchedulerConfig"][0]
    base = merge(default_data(), {"region": region, "orchestrator": "eks"})
    worker = {"name": "w", "role": "worker", "instance_type": "ml.g5.8xlarge", "instance_count": 1}
    base["cluster"] = {"instance_groups": [worker]}
    off = EnvironmentConfig.model_validate(base)
    assert not [f for f in _registry_findings(off) if "ClusterSchedulerConfig" in f.message]
    on = EnvironmentConfig.model_validate(
        merge(base, {"cluster": {"eks": {"task_governance": {"enabled": True}}}})
    )
    said = [f for f in _registry_findings(on) if "ClusterSchedulerConfig" in f.message]
    assert [f.path for f in said] == ["cluster.eks.task_governance.enabled"]
    assert region in said[0].message and "cfn-lint" in said[0].message


def test_a_value_the_schema_refuses_is_refused_before_synth() -> None:
    """Each row the api-constraints check does not own refuses a value made from its own rule
    (put in past the schema, as a value `validate`'s schema did not know to refuse would be),
    at its key; the value the default writes passes."""
    from tests.integration.test_provenance import mutate

    owned = {row["key"] for row in api_constraints()["fields"]}
    mine = [r for r in table()["rows"] if r["key"] not in owned and "[]" not in r["key"]]
    assert mine, "no registry row of its own: the check would be dead"
    config = EnvironmentConfig.model_validate(
        merge(default_data(), {"kms_key_arn": "arn:aws:kms:us-west-2:111122223333:key/"
                                               "1234abcd-12ab-34cd-56ef-1234567890ab"})
    )  # fmt: skip
    assert _registry_findings(config) == []
    for row in mine:
        if "enum" in row:
            bad: Any = "NotOneOfThem"
        elif "max_length" in row:
            bad = "a" * (row["max_length"] + 1)
        elif "min_length" in row and row["min_length"] > 0:
            bad = ""
        else:
            continue
        said = _registry_findings(mutate(config, {row["key"]: bad}))
        assert [f.path for f in said] == [row["key"]], (row, said)
        assert "CloudFormation registry schema" in said[0].message
