"""Cluster rules: the instance groups each orchestrator needs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import validator

GROUPS = "cluster.instance_groups"


@validator("instance-group-names", area="cluster")
def check_group_names(config: EnvironmentConfig) -> Iterator[Finding]:
    """Instance group names are unique."""
    groups = config.cluster.instance_groups
    first: dict[str, int] = {}
    for i, g in enumerate(groups):
        if first.setdefault(g.name, i) != i:
            yield Finding(
                Level.ERROR,
                f"{GROUPS}[{i}].name",
                f"{g.name!r} is used by another group",
                "give each instance group its own name",
            )


@validator("instance-group-roles", area="cluster")
def check_group_roles(config: EnvironmentConfig) -> Iterator[Finding]:
    """Slurm has one controller (1 instance) and no workers; EKS has only workers."""
    groups = config.cluster.instance_groups
    roles = Counter(g.role for g in groups)
    if config.orchestrator == "slurm":
        if roles["controller"] != 1:
            yield Finding(
                Level.ERROR,
                GROUPS,
                f"a Slurm cluster has exactly one controller group, not {roles['controller']}",
                "add one group with role: controller and instance_count: 1",
            )
        for i, g in enumerate(groups):
            if g.role == "worker":
                yield Finding(
                    Level.ERROR,
                    f"{GROUPS}[{i}].role",
                    "role worker is for EKS clusters",
                    "use compute on Slurm",
                )
            if g.role == "controller" and g.instance_count != 1:
                yield Finding(
                    Level.ERROR,
                    f"{GROUPS}[{i}].instance_count",
                    f"the controller group has {g.instance_count} instances",
                    "use 1",
                )
    else:
        for i, g in enumerate(groups):
            if g.role != "worker":
                yield Finding(
                    Level.ERROR,
                    f"{GROUPS}[{i}].role",
                    f"role {g.role} is for Slurm clusters",
                    "use worker on EKS",
                )
