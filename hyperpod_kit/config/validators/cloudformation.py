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

from hyperpod_kit.config.facts import api_constraints
from hyperpod_kit.config.facts.cfn_registry import table
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.api import values_at, violation
from hyperpod_kit.config.validators.registry import validator


@cache
def _rules() -> tuple[str, list[dict[str, Any]]]:
    rules = table()
    owned = {row["key"] for row in api_constraints()["fields"]}
    rows = [{**row, "search": True} for row in rules["rows"] if row["key"] not in owned]
    return rules["cfn_lint"], rows


@validator("registry-schema", area="cloudformation")
def check_registry_schema(config: EnvironmentConfig) -> Iterator[Finding]:
    """Each value meets its property's registry schema; each resource type is in the region."""
    version, rows = _rules()
    reported: set[str] = set()
    absent: set[str] = set()  # resource types already said to be missing from the region
    for row in rows:
        for at, value, _ in values_at(config, row["key"]):
            if at in reported:
                continue
            if config.region in row.get("regions_without", ()):
                reported.add(at)
                if row["resource"] in absent:
                    continue
                absent.add(row["resource"])
                yield Finding(
                    Level.ERROR,
                    at,
                    f"{row['resource']} is not in {config.region}'s CloudFormation registry "
                    f"(cfn-lint {version}'s schemas), and this key creates one",
                    "choose a region that has it, or leave this feature out",
                )
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
