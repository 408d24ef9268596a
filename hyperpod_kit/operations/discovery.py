"""Find what an environment has deployed: its stacks (by the environment tag every stack carries)
and the handles each stack publishes in SSM (`hyperpod_kit.stacks.discovery`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.naming import ENVIRONMENT_TAG, parameter_name

AREAS = (
    "network", "storage", "accounting", "eks", "trainer", "cluster", "eks-addons", "studio",
    "monitoring",
)  # fmt: skip
PUBLISHED = ("network", "storage", "accounting", "eks", "cluster", "studio", "monitoring")


@dataclass(frozen=True)
class Deployed:
    """The environment's top-level stacks (DescribeStacks rows) and the published handles."""

    environment: str
    stacks: list[dict[str, Any]] = field(default_factory=list)
    nested: list[dict[str, Any]] = field(default_factory=list)
    handles: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def nothing(self) -> bool:
        return not self.stacks and not self.handles

    def handle(self, area: str, key: str) -> str | None:
        return self.handles.get(area, {}).get(key)


def discover(environment: str, aws: AwsFacade) -> Deployed:
    """Every stack tagged with the environment's name (nested stacks apart), and every area's
    discovery parameter that exists."""
    stacks = [
        s
        for s in aws.pages("cloudformation", "describe_stacks", "Stacks")
        if any(
            t.get("Key") == ENVIRONMENT_TAG and t.get("Value") == environment
            for t in s.get("Tags", [])
        )
    ]
    handles: dict[str, dict[str, str]] = {}
    ssm = aws.client("ssm")
    for area in PUBLISHED:
        name = parameter_name(environment, area)
        found = aws.call(
            f"ssm:GetParameter {name}", ssm.get_parameter, Name=name, missing=("ParameterNotFound",)
        )
        if found is None:
            continue
        try:
            value = json.loads(found["Parameter"]["Value"])
        except (KeyError, ValueError):
            continue
        if isinstance(value, dict):
            handles[area] = {str(k): str(v) for k, v in value.items()}
    top = [s for s in stacks if not s.get("ParentId")]
    nested = [s for s in stacks if s.get("ParentId")]
    return Deployed(environment, stacks=top, nested=nested, handles=handles)
