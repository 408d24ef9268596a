"""The update-rule table: well formed, each row with a source, and written against the
create-only properties that the installed cfn-lint ships (a cfn-lint bump that changes them fails
here, with a report of what changed, so that each bump is reviewed against the rules)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from cfnlint.version import __version__ as cfnlint_version

from hyperpod_kit.plan import (
    COMPARATORS,
    KINDS,
    UPDATE_RULES,
    record_registry,
    registry_create_only,
    registry_drift,
    update_rules,
)


def test_the_table_was_written_against_the_registry_cfn_lint_ships() -> None:
    drift = registry_drift()
    if drift and os.environ.get("HYPERPOD_KIT_UPDATE_RULES") == "1":
        record_registry()
        drift = registry_drift(update_rules())
    assert not drift, "\n".join(
        [
            "cfn-lint's registry schemas changed since update_rules.json was written. Review "
            "the rules of each type below, then record the new lists with "
            "HYPERPOD_KIT_UPDATE_RULES=1 pytest tests/unit/test_update_rules.py:",
            *drift,
        ]
    )


def test_a_bump_that_drops_create_only_paths_is_reported_readably() -> None:
    """What cfn-lint 1.51 -> 1.58 did to the HyperPod cluster, replayed on the record."""
    rules = update_rules()
    old = (*rules.registry["AWS::SageMaker::Cluster"], "/properties/InstanceGroups/*/InstanceType")
    bumped = dataclasses.replace(rules, registry={**rules.registry, "AWS::SageMaker::Cluster": old})
    (line,) = registry_drift(bumped)
    assert line.startswith(
        f"AWS::SageMaker::Cluster: cfn-lint {cfnlint_version} no longer marks create-only what "
        f"{rules.registry_cfn_lint} did: /properties/InstanceGroups/*/InstanceType (now an "
        "update to CloudFormation"
    )
    assert "/properties/InstanceGroups/*/InstanceType (nodes_recreated)" in line


def test_a_bump_that_adds_create_only_paths_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "rules.json"
    shutil.copy(UPDATE_RULES, copy)
    data = json.loads(copy.read_text())
    data["registry_create_only"]["types"]["AWS::S3::Bucket"] = ["/properties/BucketName"]
    copy.write_text(json.dumps(data))
    (line,) = registry_drift(update_rules(copy))
    assert (
        "AWS::S3::Bucket: cfn-lint 1.58.0 marks create-only (replace) what 1.58.0 did not: " in line
    )
    assert "/properties/BucketNamePrefix" in line


def test_every_rule_is_well_formed_and_sourced() -> None:
    raw = json.loads(UPDATE_RULES.read_text())
    assert raw["checked"] and set(raw["sources"])
    sources = set(raw["sources"]) | {"facts"}
    for rule in update_rules().rules:
        assert rule.kind in KINDS, rule
        assert rule.when in COMPARATORS or rule.when == "removed", rule
        assert rule.path.startswith("/properties/"), rule
        assert rule.why and any(name in rule.source for name in sources), rule
        if rule.when == "moves_backwards":
            assert rule.order, rule
        if rule.when == "removed":
            assert rule.path.endswith("/*"), rule
        if rule.type.startswith("AWS::"):
            assert registry_create_only(rule.type) is not None, f"cfn-lint knows no {rule.type}"


@pytest.mark.parametrize(
    ("when", "old", "new", "applies"),
    [
        ("decreased", 2400, 1200, True),
        ("decreased", 1200, 2400, False),
        ("increased", "2", "4", True),
        ("version_decreased", "1.32", "1.31", True),
        ("version_decreased", "1.9", "1.10", False),
        ("version_skips_minor", "1.9", "1.11", True),
        ("version_skips_minor", "1.9", "1.10", False),
        ("version_next_minor", "1.9", "1.10", True),
        # Aurora MySQL: Aurora's own release numerically, the MySQL major first
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", "8.0.mysql_aurora.3.04.3", True),
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", "8.0.mysql_aurora.3.05.1", True),
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", "8.0.mysql_aurora.3.05.2", False),
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", "8.0.mysql_aurora.3.05.10", False),
        ("engine_version_decreased", "8.0.mysql_aurora.3.09.0", "8.0.mysql_aurora.3.10.0", False),
        ("engine_version_decreased", "8.0.mysql_aurora.3.10.0", "8.0.mysql_aurora.3.9.0", True),
        ("engine_version_decreased", "8.0.mysql_aurora.3.04.0", "5.7.mysql_aurora.2.12.1", True),
        ("engine_version_decreased", "5.7.mysql_aurora.2.12.1", "8.0.mysql_aurora.3.04.0", False),
        ("engine_version_decreased", "16.4", "15.8", True),
        ("engine_version_decreased", "15.8", "16.4", False),
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", {"Ref": "Version"}, False),
        ("engine_version_decreased", "8.0.mysql_aurora.3.05.2", "latest", False),
        # Managed Grafana: major.minor
        ("version_decreased", "10.4", "9.4", True),
        ("version_decreased", "9.4", "10.4", False),
        ("version_decreased", "10.4", "10.4", False),
        ("changed", {"a": 1}, {"a": 2}, True),
    ],
)
def test_comparators(when: str, old: object, new: object, applies: bool) -> None:
    rule = update_rules().rules[0]  # only moves_backwards reads its rule (the order)
    assert COMPARATORS[when](old, new, rule) is applies


def test_authentication_mode_moves_one_way() -> None:
    rule = next(r for r in update_rules().rules if r.when == "moves_backwards")
    assert COMPARATORS["moves_backwards"]("API", "API_AND_CONFIG_MAP", rule)
    assert not COMPARATORS["moves_backwards"]("CONFIG_MAP", "API", rule)


def test_recording_after_review_makes_the_table_agree_again(tmp_path: Path) -> None:
    copy = tmp_path / "rules.json"
    text = UPDATE_RULES.read_text().replace('"/properties/BucketNamePrefix", ', "")
    copy.write_text(text)
    assert registry_drift(update_rules(copy))
    record_registry(copy)
    assert registry_drift(update_rules(copy)) == []
    assert copy.read_text() == UPDATE_RULES.read_text()  # one line per type, as written


def test_custom_names_are_create_only_names() -> None:
    """A name whose change is an update could not collide; each listed one is create-only."""
    rules = update_rules()
    assert rules.custom_name_source in json.loads(UPDATE_RULES.read_text())["sources"]
    for resource_type, (name, within) in rules.custom_names.items():
        create_only = registry_create_only(resource_type)
        assert create_only is not None and name in create_only, resource_type
        assert not within or within.startswith("/properties/"), resource_type
