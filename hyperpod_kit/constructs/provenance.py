"""Provenance: which key of the environment file each CloudFormation property came from.

A construct that sets a property from a config value says so where it sets it::

    fs = fsx.CfnFileSystem(self, "FileSystem", storage_capacity=lustre.storage_capacity_gib, ...)
    trace(fs, lustre, {"StorageCapacity": "storage_capacity_gib", ...})

`trace` records, as construct metadata (`naming.PROVENANCE_METADATA`, in the assembly's manifest,
not in the template), the resource's section key (`storage.lustre`) and a key per property path
(`StorageCapacity` -> `storage.lustre.storage_capacity_gib`). The gates (`hyperpod_kit.gates`)
read it back to report a cfn-lint or cdk-nag finding at the file's line; a property without its
own key is reported at its resource's section.

`building(section)` is the same for errors: a CDK or jsii error raised while the block builds from
that section becomes a `BuildError` that names the key, which the commands print as a finding
(`FILE:LINE key: message`) with exit 2.

This is the one mechanism: tests/integration/test_provenance.py fails when a template property
whose value is a value of the file has no key, and when a key's value is not the property's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import aws_cdk as cdk
from constructs import IConstruct

from hyperpod_kit.config.keys import key_of
from hyperpod_kit.config.schema import Section
from hyperpod_kit.naming import PROVENANCE_METADATA


class BuildError(Exception):
    """A CDK or jsii error raised while building from the key `key` of the file."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


def trace(
    construct: IConstruct | cdk.Stack,
    section: Section,
    properties: Mapping[str, str] | None = None,
    *,
    at: str = "",
) -> None:
    """Record that `construct`'s CloudFormation resource (itself, or an L2's default child) is
    built from `section`, and that each property path (CloudFormation's names, `/` between
    levels, list indexes as numbers; below `at` when given) holds the value of `section`'s field
    (a dotted path, `[i]` for list items). Nothing is recorded for a section without a key."""
    section_key = key_of(section)
    if section_key is None:
        return
    # A stack's record holds for every resource in it (the tags every resource gets).
    resource = construct if isinstance(construct, cdk.Stack) else _resource(construct)
    prefix = f"{at.strip('/')}/" if at else ""
    keys = {}
    for path, field in (properties or {}).items():
        if _check_field(section, field) is None:
            continue  # nothing written there: the property is the toolkit's, or not set
        key = key_of(section, field)
        if key is not None:
            keys[prefix + path.strip("/")] = key
    record: dict[str, object] = {"properties": keys}
    if not at and not isinstance(construct, cdk.Stack):  # a resource built from several
        record["section"] = section_key  # sections (a group each) has no one section
    resource.node.add_metadata(PROVENANCE_METADATA, record)


def trace_values(scope: IConstruct, section: Section, fields: list[str]) -> None:
    """Record that the literal values of `fields` (ids of existing resources the file names)
    came from their keys, wherever the stacks pass them on: a finding on a property that holds
    one of them is reported at its key. Recorded on `scope`'s stack; read for the whole app."""
    values: dict[str, str] = {}
    for field in fields:
        value = _check_field(section, field)
        items = value if isinstance(value, (list, tuple)) else [value]
        for i, item in enumerate(items):
            key = key_of(section, field if items is not value else f"{field}[{i}]")
            if isinstance(item, str) and key is not None:
                values.setdefault(item, key)
    if values:
        cdk.Stack.of(scope).node.add_metadata(PROVENANCE_METADATA, {"values": values})


def _check_field(section: Section, field: str) -> object:
    """The value at `field` below `section` (None where a section on the way is None); raise
    if `field` is not a path of the model: a key that names nothing would send a user to a line
    that does not say what the finding is about."""
    value: object = section
    for part in field.replace("[", ".[").split("."):
        if not part or value is None:
            continue
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(value, (list, tuple)) or index >= len(value):
                raise KeyError(f"{key_of(section)}: no item {part} in {field!r}")
            value = value[index]
        elif isinstance(value, dict):
            value = value.get(part)
        elif part in type(value).model_fields:  # type: ignore[attr-defined]
            value = getattr(value, part)
        else:
            raise KeyError(f"{type(section).__name__} has no field {field!r} (provenance)")
    return value


def _resource(construct: IConstruct) -> cdk.CfnResource:
    if isinstance(construct, cdk.CfnResource):
        return construct
    child = construct.node.default_child
    if not isinstance(child, cdk.CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource to trace")
    return child


@contextmanager
def building(section: Section) -> Iterator[None]:
    """Errors that CDK or jsii raise inside the block are the file's: at the key below
    `section` whose value the message quotes (the longest, when several do), else at
    `section`'s own key."""
    from jsii.errors import JavaScriptError, JSIIError

    try:
        yield
    except (JSIIError, RuntimeError) as e:
        if not isinstance(e, JSIIError) and not isinstance(e.__cause__, JavaScriptError):
            raise  # Python's own error: a defect of the toolkit, not a value of the file
        message = _first_line(str(e))
        key = _quoted(section, message) or key_of(section)
        if key is None:
            raise
        raise BuildError(key, message) from None


def _quoted(section: Section, message: str) -> str | None:
    """The key of the longest text value below `section` (three characters or more) that
    `message` contains."""
    found = [(len(v), k) for k, v in _texts(section, key_of(section) or "") if v in message]
    return max(found)[1] if found else None


def _texts(value: object, key: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Section):
        for name in type(value).model_fields:
            yield from _texts(getattr(value, name), f"{key}.{name}" if key else name)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _texts(item, f"{key}[{i}]")
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _texts(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, str) and len(value) >= 3:
        yield key, value


def _first_line(text: str) -> str:
    """A jsii error's message without the JavaScript stack that follows it."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else "CDK refused the value"
