"""Checks of the provenance the constructs record (hyperpod_kit/constructs/provenance.py), on a
synthesized assembly: every value of the file that a template property holds has its key, and
every key recorded holds the value the property has.

Shared by tests/integration/test_synth_examples.py (each example, on the assembly it already
synthesized) and test_provenance.py (the gates' findings on mutated values).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.cloud_assembly import read_json, stack_artifacts
from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.config.extends import read_layers
from hyperpod_kit.gates import Provenance, _metadata, at_path

# Properties whose values are not set from one key, each with the reason.
UNKEYED = {
    # Statements are merged, reordered and deduplicated by CDK (minimizePolicies): an index into
    # a policy document is not where a construct put the value. A finding there is reported at
    # the resource; IAM findings are about grants, which the file does not write.
    "PolicyDocument": "a policy document's statements are CDK's merge of every grant",
    "KeyPolicy": "a key policy's statements are CDK's merge of every grant",
    "AssumeRolePolicyDocument": "a trust policy is the toolkit's, not a value of the file",
}


@dataclass(frozen=True)
class Held:
    """A scalar a template property holds."""

    stack: str
    logical_id: str
    type: str
    path: str  # below Properties, `/` between levels
    value: Any


@dataclass
class Traced:
    """An assembly's templates with the provenance its manifest records."""

    held: list[Held]
    provenance: dict[str, Provenance]  # by stack label
    values: dict[str, str]  # literals of the file (`trace_values`), from every stack
    resources: dict[str, dict[str, Any]]  # by stack label

    @classmethod
    def read(cls, assembly: Path) -> Traced:
        manifest = read_json(assembly / "manifest.json", "manifest")
        values: dict[str, str] = {}
        provenance: dict[str, Provenance] = {}
        resources: dict[str, dict[str, Any]] = {}
        held: list[Held] = []
        for stack in stack_artifacts(assembly, manifest["artifacts"]):
            provenance[stack.label] = Provenance.of(_metadata(stack.folder, stack.artifact), values)
            template = stack.folder / stack.artifact["properties"]["templateFile"]
            resources[stack.label] = read_json(template, "template").get("Resources", {})
            for logical_id, resource in resources[stack.label].items():
                for path, value in _scalars(resource.get("Properties", {}), []):
                    held.append(Held(stack.label, logical_id, resource["Type"], path, value))
        return cls(held, provenance, values, resources)

    def key(self, held: Held) -> str | None:
        """The property's own key (or its literal's), None if it has none."""
        key = self.provenance[held.stack].property_key(held.logical_id, held.path)
        if key is None and isinstance(held.value, str):
            key = self.values.get(held.value)
        return key


def _scalars(value: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _scalars(item, [*path, str(name)])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _scalars(item, [*path, str(i)])
    else:
        yield "/".join(path), value


def file_strings(loaded: LoadedEnvironment) -> dict[str, list[str]]:
    """The string values the file (and its bases) writes, of three characters or more, with
    their keys. Numbers are left out: 90-day retentions and 900-second periods equal the file's
    numbers by chance in every environment, which says nothing of where they came from."""
    found: dict[str, list[str]] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for name, item in value.items():
                walk(item, f"{path}.{name}" if path else str(name))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif isinstance(value, str) and len(value) >= 3:
            found.setdefault(value, []).append(path)

    walk(read_layers(loaded.file).doc.data, "")
    return found


def untraced(assembly: Path, loaded: LoadedEnvironment) -> list[str]:
    """Template properties holding a string of the file with no key recorded for them."""
    traced = Traced.read(assembly)
    strings = file_strings(loaded)
    environment = {loaded.config.account, loaded.config.region} - {None}
    missing = []
    for held in traced.held:
        if not isinstance(held.value, str) or held.value not in strings:
            continue
        if held.path.split("/")[0] in UNKEYED:
            continue
        if held.value in environment:  # the stack's environment (`account`, `region`)
            continue
        if traced.key(held) is None:
            missing.append(
                f"{held.stack} {held.logical_id} ({held.type}) {held.path} = {held.value!r} "
                f"is written at {strings[held.value]} but has no key"
            )
    return missing


def misplaced(assembly: Path, loaded: LoadedEnvironment) -> list[str]:
    """Keys recorded for a property whose value is not the key's value (compared where both are
    plain scalars; the toolkit's spelling of an enum, `on_demand` for `OnDemand`, counts)."""
    traced = Traced.read(assembly)
    wrong = []
    for stack, provenance in traced.provenance.items():
        for logical_id, record in provenance.by_logical_id.items():
            properties = traced.resources[stack].get(logical_id, {}).get("Properties", {})
            for path, key in record.properties.items():
                held = at_path(properties, path.split("/"))
                value = value_at(loaded, key)
                if not _comparable(held, value):
                    continue
                if _spelt(value) not in _spelt(held):
                    wrong.append(f"{stack} {logical_id} {path} = {held!r}, but {key} is {value!r}")
    return wrong


def value_at(loaded: LoadedEnvironment, key: str) -> Any:
    """The config's value at a key path (`a.b[2].c`)."""
    value: Any = loaded.config
    for part in key.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("["):
            value = value[int(part[1:-1])]
        elif isinstance(value, dict):
            value = value[part]
        else:
            value = getattr(value, part)
    return value


def _comparable(held: Any, value: Any) -> bool:
    scalar = (str, int, float)
    if isinstance(held, bool) or isinstance(value, bool) or value is None or held is None:
        return False
    if isinstance(held, list) and all(isinstance(h, scalar) for h in held):
        return isinstance(value, (*scalar, list))
    return isinstance(held, scalar) and (isinstance(value, scalar) or hasattr(value, "exploded"))


def _spelt(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_spelt(v) for v in value)
    return str(value).replace("_", "").replace("-", "").lower()


def keyed_properties(assembly: Path, loaded: LoadedEnvironment) -> list[list[Any]]:
    """(key, resource type, property, verbatim) for every property a construct recorded a key
    for and the template sets, with list indexes as `[]` in keys and `*` in property paths, and
    whether the property holds the file's value as written (`lend_and_borrow` becomes
    `LendAndBorrow`: not verbatim, so the schema's enum says nothing of the file's value). The
    rows `registry_rules.json` is made from (hyperpod_kit/config/facts/cfn_registry.py), kept
    beside the goldens."""
    traced = Traced.read(assembly)
    found: dict[tuple[str, str, str], bool] = {}
    for stack, provenance in traced.provenance.items():
        for logical_id, record in provenance.by_logical_id.items():
            resource_type = traced.resources[stack].get(logical_id, {}).get("Type")
            if resource_type is None:
                continue
            properties = traced.resources[stack][logical_id].get("Properties", {})
            for path, key in record.properties.items():
                held = at_path(properties, path.split("/"))
                if held is None:
                    continue  # recorded, but not set here (autoscaling off)
                pattern = "/".join("*" if p.isdigit() else p for p in path.split("/"))
                row = (re.sub(r"\[\d+\]", "[]", key), resource_type, pattern)
                verbatim = _verbatim(held, value_at(loaded, key))
                found[row] = found.get(row, True) and verbatim
    return [[*row, verbatim] for row, verbatim in sorted(found.items())]


def _verbatim(held: Any, value: Any) -> bool:
    if isinstance(value, bool) or isinstance(held, bool):
        return held is value
    if hasattr(value, "exploded"):  # a CIDR block
        value = str(value)
    if isinstance(value, list | tuple):
        return isinstance(held, list) and [str(v) for v in value] == [str(h) for h in held]
    return isinstance(held, str | int | float) and held == value
