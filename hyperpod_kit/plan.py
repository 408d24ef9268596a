"""What a new synth would change against a baseline assembly, offline: replacements first.

`cdk diff` needs credentials to read the deployed stacks; CI often has none. This compares two
cloud assemblies (the baseline is usually the `cdk.out` of what is deployed, or of main) and
says, per resource, whether it is added, updated, replaced or removed. A property change causes a
replacement when CloudFormation's resource schema lists it as create-only (read from cfn-lint's
bundled schemas); a replacement then spreads to everything whose create-only properties refer to
the replaced resource, across stacks through exports. Replacing or removing a stateful resource
(a file system, a bucket, a cluster) is what `plan` exists to catch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

STATEFUL_TYPES = frozenset(
    {
        "AWS::FSx::FileSystem", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::SageMaker::Cluster",
        "AWS::SageMaker::Domain", "AWS::EKS::Cluster", "AWS::EFS::FileSystem",
        "AWS::DynamoDB::Table",
    }
)  # fmt: skip

Action = Literal["add", "update", "replace", "refuse", "remove"]

# Properties that the registry schema does not mark create-only but whose change the service
# refuses: CloudFormation would try an update and fail (and roll back) mid-deploy.
REFUSED_PROPERTIES: dict[str, tuple[str, ...]] = {
    # HyperPod's API-driven Slurm: a group's NodeType cannot change (recreate the group).
    "AWS::SageMaker::Cluster": ("/properties/InstanceGroups/*/SlurmConfig/NodeType",),
}
# List items are paired by the value that names them, so a reordered list is not read as every
# item changing (an instance group moved in the file is the same group).
LIST_KEYS = ("InstanceGroupName", "Name", "Key", "Id")
_SUB_REF = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


@dataclass(frozen=True)
class Change:
    stack: str
    logical_id: str
    type: str
    action: Action
    why: tuple[str, ...] = ()
    retained: bool = False

    @property
    def stateful(self) -> bool:
        return self.type in STATEFUL_TYPES

    @property
    def dangerous(self) -> bool:
        """Replacing or removing a stateful resource (its data lost or orphaned), or an update
        the service refuses (the deploy fails and rolls back half-way)."""
        return self.action == "refuse" or (self.stateful and self.action in ("replace", "remove"))

    def render(self) -> str:
        mark = {"add": "+", "update": "~", "replace": "!", "refuse": "!", "remove": "-"}[
            self.action
        ]
        label = {"replace": "REPLACE", "remove": "REMOVE", "refuse": "UPDATE REFUSED"}.get(
            self.action, self.action
        )
        extra = " (stateful)" if self.stateful and self.action != "add" else ""
        if self.action == "remove" and self.retained:
            extra += " (retained: orphaned, not deleted)"
        why = f": {'; '.join(self.why)}" if self.why else ""
        return f"{mark} {self.stack} {self.logical_id} ({self.type}) {label}{extra}{why}"


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)

    @property
    def dangerous(self) -> list[Change]:
        return [c for c in self.changes if c.dangerous]

    def summary(self) -> str:
        counts = {a: sum(1 for c in self.changes if c.action == a) for a in
                  ("add", "update", "replace", "refuse", "remove")}  # fmt: skip
        refused = f", {counts['refuse']} the service refuses" if counts["refuse"] else ""
        return (
            f"{counts['add']} to add, {counts['update']} to update, {counts['replace']} to "
            f"replace, {counts['remove']} to remove{refused}; {len(self.dangerous)} dangerous "
            "(stateful replaced or removed, or refused)"
        )


def load_templates(assembly: Path) -> dict[str, dict[str, Any]]:
    """Stack name -> template, for every stack of a cloud assembly folder."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    return {
        name: json.loads((assembly / art["properties"]["templateFile"]).read_text())
        for name, art in manifest.get("artifacts", {}).items()
        if art.get("type") == "aws:cloudformation:stack"
    }


def plan(baseline: Path, candidate: Path) -> Plan:
    old, new = load_templates(baseline), load_templates(candidate)
    changes: dict[tuple[str, str], Change] = {}
    for stack in sorted(old.keys() | new.keys()):
        before = old.get(stack, {}).get("Resources", {})
        after = new.get(stack, {}).get("Resources", {})
        for logical in sorted(before.keys() | after.keys()):
            change = _compare(stack, logical, before.get(logical), after.get(logical))
            if change is not None:
                changes[(stack, logical)] = change
    _spread_replacements(new, changes)
    order = {"remove": 0, "refuse": 1, "replace": 2, "update": 3, "add": 4}
    ranked = sorted(changes.values(), key=lambda c: (not c.dangerous, order[c.action], c.stack))
    return Plan(ranked)


def _compare(  # noqa: PLR0911 - one return per kind of change
    stack: str, logical: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> Change | None:
    if after is None:
        assert before is not None
        retained = before.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")
        return Change(stack, logical, before["Type"], "remove", retained=retained)
    if before is None:
        return Change(stack, logical, after["Type"], "add")
    kind = after["Type"]
    if before["Type"] != kind:
        return Change(stack, logical, kind, "replace", (f"type was {before['Type']}",))
    props_before, props_after = before.get("Properties", {}), after.get("Properties", {})
    if props_before == props_after and _policies(before) == _policies(after):
        return None
    create_only = _changed(props_before, props_after, create_only_properties(kind))
    if create_only:
        return Change(stack, logical, kind, "replace", tuple(f"{p} changed" for p in create_only))
    refused = _changed(props_before, props_after, REFUSED_PROPERTIES.get(kind, ()))
    if refused:
        why = tuple(f"{p} changed, which the service refuses" for p in refused)
        return Change(stack, logical, kind, "refuse", why)
    changed = sorted(k for k in props_before.keys() | props_after.keys()
                     if props_before.get(k) != props_after.get(k))  # fmt: skip
    return Change(stack, logical, kind, "update", tuple(changed) or ("policies",))


def _policies(resource: dict[str, Any]) -> tuple[Any, ...]:
    return resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")


def _spread_replacements(
    templates: dict[str, dict[str, Any]], changes: dict[tuple[str, str], Change]
) -> None:
    """A replaced resource has a new id: whatever refers to it in a create-only property is
    replaced too. Repeats until nothing new is replaced (chains across stacks via exports)."""
    exports = {
        str(out["Export"]["Name"]): (stack, out["Value"])
        for stack, t in templates.items()
        for out in t.get("Outputs", {}).values()
        if isinstance(out.get("Export", {}).get("Name"), str)
    }
    grew = True
    while grew:
        grew = False
        replaced = {key for key, c in changes.items() if c.action == "replace"}
        for stack, template in templates.items():
            for logical, res in template.get("Resources", {}).items():
                current = changes.get((stack, logical))
                if current is not None and current.action in ("replace", "add"):
                    continue
                reasons = [
                    f"{where} refers to replaced {dep[1]}"
                    for pointer in create_only_properties(res["Type"])
                    for where, value in _values(res.get("Properties", {}), pointer).items()
                    for dep in _references(stack, value, exports)
                    if dep in replaced
                ]
                if reasons:
                    changes[(stack, logical)] = Change(stack, logical, res["Type"], "replace",
                                                       tuple(reasons))  # fmt: skip
                    grew = True


def _references(
    stack: str, value: Any, exports: dict[str, tuple[str, Any]]
) -> set[tuple[str, str]]:
    """(stack, logical id) of every resource that `value` refers to, through imports too."""
    found: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not inner.startswith("AWS::"):
                found.add((stack, inner))
            elif key == "Fn::GetAtt":
                target = inner[0] if isinstance(inner, list) else str(inner).split(".")[0]
                found.add((stack, str(target)))
            elif key == "Fn::ImportValue" and isinstance(inner, str) and inner in exports:
                producer, exported = exports[inner]
                found |= _references(producer, exported, exports)
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                found |= {(stack, name) for name in _SUB_REF.findall(str(text))}
                found |= _references(stack, inner[1] if isinstance(inner, list) else None, exports)
            else:
                found |= _references(stack, inner, exports)
    elif isinstance(value, list):
        for item in value:
            found |= _references(stack, item, exports)
    return found


def _values(properties: dict[str, Any], pointer: str) -> dict[str, Any]:
    """The values at a schema pointer, by where they are: ``/properties/LustreConfiguration/
    DeploymentType`` gives one (None when absent); ``/properties/InstanceGroups/*/InstanceType``
    one per list item, named by the item (``InstanceGroups[gpu].InstanceType``)."""
    found: dict[str, Any] = {}

    def walk(node: Any, parts: list[str], where: str) -> None:
        if not parts:
            found[where] = node
            return
        part, rest = parts[0], parts[1:]
        if part == "*":
            for i, item in enumerate(node if isinstance(node, list) else []):
                label = next((str(item[k]) for k in LIST_KEYS if isinstance(item, dict)
                              and isinstance(item.get(k), str)), str(i))  # fmt: skip
                walk(item, rest, f"{where}[{label}]")
        else:
            walk(node.get(part) if isinstance(node, dict) else None, rest,
                 f"{where}.{part}" if where else part)  # fmt: skip

    walk(properties, pointer.split("/")[2:], "")
    return found


def _changed(before: dict[str, Any], after: dict[str, Any], pointers: tuple[str, ...]) -> list[str]:
    """Where the values at `pointers` differ; list items only in one template are additions or
    removals (updates), not changes."""
    changed: list[str] = []
    for pointer in pointers:
        old, new = _values(before, pointer), _values(after, pointer)
        changed += [where for where in old if where in new and old[where] != new[where]]
    return changed


@cache
def create_only_properties(resource_type: str) -> tuple[str, ...]:
    """Properties whose change replaces the resource, from the CloudFormation registry schema
    bundled with cfn-lint (offline)."""
    from cfnlint.schema import ResourceNotFoundError
    from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    except ResourceNotFoundError:  # an unknown type: nothing is known to replace it
        return ()
    return tuple(p for p in schema.get("createOnlyProperties", []) if p.startswith("/properties/"))
