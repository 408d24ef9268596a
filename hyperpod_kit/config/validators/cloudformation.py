"""CloudFormation's registry schemas: every value the file feeds to a resource property meets the
rules the property's schema states (pattern, enum, length, range, list length), and every
resource type the file's keys create exists in the environment's region, before any synth.

The table is `facts/registry_rules.json` (`facts/cfn_registry.py` makes it from the constructs'
provenance and the pinned cfn-lint's schemas). A key that botocore's request model also
constrains is left to `api-constraints`, which checks the API's own rule; one finding per value.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from hyperpod_kit.config.facts import api_constraints, regions, registry_rules
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.api import WHEN, values_at, violation
from hyperpod_kit.config.validators.registry import validator

# The resource types some region's registry lacks (the table's `regions_without`): when the file
# creates one (api.WHEN's condition; None: always) and the key a finding is placed at.
CREATED_WHEN: dict[str, tuple[str | None, str]] = {
    "AWS::SageMaker::Cluster": (None, "region"),
    "AWS::SageMaker::ClusterSchedulerConfig": (
        "eks-governance", "cluster.eks.task_governance.enabled"
    ),
    "AWS::SageMaker::ComputeQuota": ("eks-governance", "teams"),
    "AWS::SageMaker::Domain": ("studio", "studio.enabled"),
    "AWS::SageMaker::StudioLifecycleConfig": ("studio", "studio.apps"),
    "AWS::FSx::FileSystem": ("file-system-new", "storage.lustre"),
}  # fmt: skip


def _having(without: list[str]) -> list[str]:
    """The regions HyperPod is offered in (`regions.json`) whose registry has the type."""
    return sorted(name for name, r in regions().items() if r.hyperpod and name not in without)


@cache
def _rules() -> tuple[str, list[dict[str, Any]], dict[str, list[str]]]:
    rules = registry_rules()
    owned = {row["key"] for row in api_constraints()["fields"]}
    rows = [{**row, "search": True} for row in rules["rows"] if row["key"] not in owned]
    return rules["cfn_lint"], rows, rules["regions_without"]


@validator("registry-schema", area="cloudformation")
def check_registry_schema(config: EnvironmentConfig) -> Iterator[Finding]:
    """Each resource type the file creates is in its region's registry; each value meets its
    property's registry schema."""
    version, rows, gaps = _rules()
    for type_name, without in gaps.items():
        when, key = CREATED_WHEN[type_name]
        if config.region in without and (when is None or WHEN[when](config)):
            yield Finding(
                Level.ERROR,
                key,
                f"{type_name} is not in {config.region}'s CloudFormation registry (cfn-lint "
                f"{version}'s schemas, what the synth gate checks against: E3006); this "
                "environment creates one",
                f"use a HyperPod region whose registry has it ({', '.join(_having(without))}), "
                "or leave this feature out until a cfn-lint that has it is pinned",
            )
    reported: set[str] = set()
    for row in rows:
        for at, value, _ in values_at(config, row["key"]):
            if at in reported:
                continue
            broken = violation(row, value)
            if broken is not None:
                reported.add(at)
                message, hint = broken
                yield Finding(
                    Level.ERROR,
                    at,
                    f"{message} (CloudFormation registry schema, cfn-lint {version})",
                    hint,
                )
