"""The API's own constraints: every value the file feeds to a request, checked against the table
`facts/refresh.py` generates from botocore's service models (`api_constraints.json`).

A row of the table ties a path of the file to a request field (`sagemaker:CreateCluster:
InstanceGroups[].InstanceGroupName`) and carries what the model says of it: pattern, length,
range, enum, list length, and whether CloudFormation wants a list's items unique. Values the
request gets from the file through a name of hyperpod-kit's (the EKS cluster's `<cluster>-eks`, a
space's `<user>-jupyterlab`) come from the derivations below, so the finding still names the key
to change. Rows that another validator owns (`owner`) are left to it: its findings know more
(an allow-list, a rounding hint).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from hyperpod_kit.config.derived import deep_health_checks
from hyperpod_kit.config.facts import api_constraints
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator
from hyperpod_kit.naming import (
    LIFECYCLE_KINDS,
    eks_cluster_name,
    studio_domain_name,
    studio_lifecycle_config_name,
    studio_space_name,
)

# A value at a path of the file, and what hyperpod-kit makes of it ("" when sent as written).
Value = tuple[str, Any, str]
Derivation = Callable[[EnvironmentConfig], Iterator[Value]]

# When a request is made at all.
WHEN: dict[str, Callable[[EnvironmentConfig], bool]] = {
    "slurm": lambda c: c.orchestrator == "slurm",
    "eks": lambda c: c.orchestrator == "eks",
    "eks-new": lambda c: c.orchestrator == "eks" and c.cluster.eks.existing_cluster_name is None,
    "studio": lambda c: c.studio.enabled,
    "file-system-new": lambda c: c.storage.lustre.existing is None,
    "slurm-accounting": lambda c: c.orchestrator == "slurm" and c.cluster.slurm.accounting.enabled,
    "eks-governance": lambda c: c.orchestrator == "eks" and c.cluster.eks.task_governance.enabled,
}

# A generated bucket name is at most 63 characters; its length is what DataRepositoryPath counts.
_LONGEST_BUCKET = "b" * 63
_DIGEST = "0" * 8  # a lifecycle configuration's name ends with 8 hex digits of its content's hash

DERIVATIONS: dict[str, Derivation] = {}


def derivation(name: str) -> Callable[[Derivation], Derivation]:
    def register(fn: Derivation) -> Derivation:
        DERIVATIONS[name] = fn
        return fn

    return register


GROUPS = "cluster.instance_groups"


@derivation("cluster_name")
def _cluster_name(config: EnvironmentConfig) -> Iterator[Value]:
    if config.cluster.name is not None:
        yield "cluster.name", config.cluster.name, ""
    else:
        yield "name", config.cluster_name, "the cluster's name (the environment's)"


@derivation("eks_cluster_name")
def _eks_cluster_name(config: EnvironmentConfig) -> Iterator[Value]:
    at = "cluster.name" if config.cluster.name is not None else "name"
    yield at, eks_cluster_name(config), "the EKS cluster's name"


@derivation("slurm_partitions")
def _slurm_partitions(config: EnvironmentConfig) -> Iterator[Value]:
    for i, g in enumerate(config.cluster.instance_groups):
        if g.role != "compute":
            continue
        if g.partition is not None:
            yield f"{GROUPS}[{i}].partition", g.partition, ""
        else:
            yield f"{GROUPS}[{i}].name", g.name, "the group's partition (its name)"


@derivation("deep_health_checks")
def _deep_health_checks(config: EnvironmentConfig) -> Iterator[Value]:
    for i, g in enumerate(config.cluster.instance_groups):
        checks = deep_health_checks(g)
        if checks:  # an empty list is left out of the request
            yield f"{GROUPS}[{i}].deep_health_checks", list(checks), ""


@derivation("data_repository_paths")
def _data_repository_paths(config: EnvironmentConfig) -> Iterator[Value]:
    bucket = config.storage.bucket
    name = bucket.existing_name or bucket.name or _LONGEST_BUCKET
    at = "storage.lustre.data_repository_associations"
    for i, dra in enumerate(config.storage.lustre.data_repository_associations):
        yield f"{at}[{i}].s3_prefix", f"s3://{name}/{dra.s3_prefix}", "the data repository path"


@derivation("studio_domain_name")
def _studio_domain_name(config: EnvironmentConfig) -> Iterator[Value]:
    yield "name", studio_domain_name(config.name), "the Studio domain's name"


@derivation("studio_lifecycle_config_names")
def _studio_lifecycle_config_names(config: EnvironmentConfig) -> Iterator[Value]:
    for app in config.studio.apps:
        name = studio_lifecycle_config_name(config.name, app, _DIGEST)
        yield "name", name, f"the {app} lifecycle configuration's name"


@derivation("studio_lifecycle_configs")
def _studio_lifecycle_configs(config: EnvironmentConfig) -> Iterator[Value]:
    return iter(())  # measured by studio-lifecycle-size, which renders the script


def _selected(config: EnvironmentConfig) -> Iterator[tuple[int, Any]]:
    chosen = {u.name for u in config.studio.selected(config.users)}
    for i, user in enumerate(config.users):
        if user.name in chosen:
            yield i, user


@derivation("studio_profile_names")
def _studio_profile_names(config: EnvironmentConfig) -> Iterator[Value]:
    for i, user in _selected(config):
        yield f"users[{i}].name", user.name, ""


@derivation("studio_space_names")
def _studio_space_names(config: EnvironmentConfig) -> Iterator[Value]:
    if not config.studio.spaces:
        return
    for i, user in _selected(config):
        for app in dict.fromkeys(config.studio.apps):
            if app in LIFECYCLE_KINDS:
                name = studio_space_name(user.name, app)
                yield f"users[{i}].name", name, f"{user.name}'s {app} space's name"


@derivation("studio_uids")
def _studio_uids(config: EnvironmentConfig) -> Iterator[Value]:
    for i, user in _selected(config):
        yield f"users[{i}].uid", user.uid, ""


@derivation("studio_gids")
def _studio_gids(config: EnvironmentConfig) -> Iterator[Value]:
    for i, user in _selected(config):
        yield f"users[{i}].gid", user.gid, ""


@derivation("studio_file_system_paths")
def _studio_file_system_paths(config: EnvironmentConfig) -> Iterator[Value]:
    studio = config.studio
    if studio.partitions == "shared":
        yield "studio.shared_path", studio.shared_path, ""
        return
    for i, user in _selected(config):
        yield f"users[{i}].name", studio.file_system_path(user.name), f"{user.name}'s partition"


def values_at(config: EnvironmentConfig, key: str) -> Iterator[Value]:
    """The values at a path of the file: `a.b`, `list[]` (each item), `map.keys()` and
    `map.values()` (each key or value, at `map.<key>`). A key that is not set gives nothing."""
    found: list[tuple[str, Any]] = [("", config)]
    for part in key.replace("[]", ".[]").split("."):
        step: list[tuple[str, Any]] = []
        for at, node in found:
            if part == "[]":
                step += [(f"{at}[{i}]", item) for i, item in enumerate(node)]
            elif part in ("keys()", "values()"):
                for k, v in node.items():
                    step.append((f"{at}.{k}", k if part == "keys()" else v))
            else:
                child = getattr(node, part)
                if child is not None:
                    step.append((f"{at}.{part}" if at else part, child))
        found = step
    return ((at, value, "") for at, value in found)


def _values(config: EnvironmentConfig, row: dict[str, Any]) -> Iterator[Value]:
    if "value" in row:
        return DERIVATIONS[row["value"]](config)
    return values_at(config, row["key"])


def api_name(row: dict[str, Any]) -> str:
    """`sagemaker:CreateCluster:ClusterName` as a person reads it; a registry row's resource
    type and property (`validators/cloudformation.py`)."""
    if "resource" in row:
        return f"{row['resource']} {row['property']}"
    service, operation, member = row["api"].split(":")
    return f"{service} {operation} {member}"


@functools.cache
def _pattern(text: str) -> Any:
    """botocore's pattern, compiled: Java-style classes (\\p{L}, in tag patterns) need `regex`
    (imported only then: it costs a few hundredths of a second), the rest `re`."""
    if "\\p{" not in text:
        return re.compile(text)
    import regex  # type: ignore[import-untyped]  # no stubs pinned

    return regex.compile(text)


def _subject(value: Any, made: str) -> str:
    """The value as the message shows it (cut to 60 characters), and what it is if not as
    written."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:56] + "...'"
    return f"{made} {text}" if made else text


def violation(row: dict[str, Any], value: Any, made: str = "") -> tuple[str, str] | None:
    """(message, hint) for the first constraint of `row` that `value` breaks, or None."""
    if isinstance(value, list | tuple | dict):
        return _list_violation(row, value, api_name(row))
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _range_violation(row, value, made)
    text = str(value)
    return (
        _enum_violation(row, text, made)
        or _length_violation(row, text, made)
        or _pattern_violation(row, text, made)
    )


def _range_violation(row: dict[str, Any], value: int, made: str) -> tuple[str, str] | None:
    lo, hi = row.get("min"), row.get("max")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        return (
            f"{_subject(value, made)} is outside {lo}-{hi}, what {api_name(row)} takes",
            f"use a value from {lo} to {hi}",
        )
    return None


def _enum_violation(row: dict[str, Any], text: str, made: str) -> tuple[str, str] | None:
    enum = row.get("enum")
    if enum is None or text in enum:
        return None
    shown = ", ".join(enum) if len(enum) <= 6 else f"{len(enum)} values"
    close = difflib.get_close_matches(text, enum, n=3, cutoff=0.6)
    if close:
        hint = f"did you mean {' or '.join(close)}?"
    elif len(enum) <= 6:
        hint = f"use one of {shown}"
    else:
        hint = (
            f"botocore's {row['shape']} lists them (hyperpod_kit/config/facts/api_constraints.json)"
        )
    return f"{_subject(text, made)} is not one of the values {api_name(row)} takes ({shown})", hint


def _length_violation(row: dict[str, Any], text: str, made: str) -> tuple[str, str] | None:
    lo, hi = row.get("min_length"), row.get("max_length")
    subject, api = _subject(text, made), api_name(row)
    if hi is not None and len(text) > hi:
        return (
            f"{subject} has {len(text)} characters; {api} takes at most {hi}",
            row.get("long_hint", f"shorten it to {hi} characters or fewer"),
        )
    if lo is not None and len(text) < lo:
        return (
            f"{subject} has {len(text)} characters; {api} takes at least {lo}",
            row.get("short_hint", f"give at least {lo} characters"),
        )
    return None


def _pattern_violation(row: dict[str, Any], text: str, made: str) -> tuple[str, str] | None:
    pattern = row.get("pattern")
    if pattern is None:
        return None
    # botocore's patterns match the whole value; a JSON schema's (the registry's) match anywhere
    compiled = _pattern(pattern)
    if (compiled.search if row.get("search") else compiled.fullmatch)(text) is not None:
        return None
    return (
        f"{_subject(text, made)} does not match {api_name(row)}'s pattern {pattern}",
        row.get("hint", "change the value to match the pattern"),
    )


def _list_violation(row: dict[str, Any], items: Any, api: str) -> tuple[str, str] | None:
    if row.get("type") in ("list", "map"):
        lo, hi = row.get("min_items"), row.get("max_items")
        if hi is not None and len(items) > hi:
            return f"{len(items)} items; {api} takes at most {hi}", f"keep at most {hi}"
        if lo is not None and len(items) < lo:
            return f"{len(items)} items; {api} takes at least {lo}", f"give at least {lo}"
    return None


def _duplicates(row: dict[str, Any], at: str, items: Any) -> Iterator[Finding]:
    if "unique" not in row or isinstance(items, dict):
        return
    first: dict[str, int] = {}
    for j, item in enumerate(items):
        i = first.setdefault(str(item), j)
        if i != j:
            yield Finding(
                Level.ERROR,
                f"{at}[{j}]",
                f"{str(item)!r} is also item {i} ({row['unique']})",
                "list each item once",
            )


@validator("api-constraints", area="api")
def check_api_constraints(config: EnvironmentConfig) -> Iterator[Finding]:
    """Each value meets what the request field it becomes takes, as botocore's model says
    (pattern, length, range, enum, list length), and lists CloudFormation wants unique have no
    repeated item. One finding per value: the first field that refuses it."""
    table = api_constraints()
    version = table["botocore"]
    reported: set[str] = set()
    for row in table["fields"]:
        if "owner" in row or ("when" in row and not WHEN[row["when"]](config)):
            continue
        for at, value, made in _values(config, row):
            if at in reported:
                continue
            if isinstance(value, list | tuple):
                dupes = list(_duplicates(row, at, value))
                if dupes:
                    reported.add(at)
                    yield from dupes
                    continue
            broken = violation(row, value, made)
            if broken is not None:
                reported.add(at)
                message, hint = broken
                yield Finding(Level.ERROR, at, f"{message} (botocore {version})", hint)
