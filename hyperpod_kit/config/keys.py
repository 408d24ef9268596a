"""Keys: where in the environment file a section of a loaded config was written.

Constructs receive sections of the config (`config.storage.lustre`), not the whole file; to say
which key of the file a CloudFormation property came from (`constructs/provenance.py`), a section
must know its own path. `annotate` walks a config once and gives every section its path, in the
form findings use (`cluster.instance_groups[1].instance_type`), which `LoadedEnvironment.origin`
turns into a file and a line; `key_of` reads it back.

A section the walk has not reached (a config built in a test, or a section a construct made
itself) has no key, and `key_of` says so with `None`: provenance is then simply missing, never
wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from hyperpod_kit.config.schema import EnvironmentConfig, Section


def annotate(config: EnvironmentConfig) -> EnvironmentConfig:
    """Give every section of `config` its key path; returns `config`. Idempotent. A section
    object met at two paths (a shared default) keeps the first: its values are then equal at
    both, and the first is where a user most likely wrote them."""
    seen: set[int] = set()
    for path, section in _sections(config, ""):
        if id(section) in seen:
            continue
        seen.add(id(section))
        section._key = path
    return config


def key_of(section: Section, field: str = "") -> str | None:
    """The key of `field` (a dotted path below `section`, `[i]` for list items), or of the
    section itself; None when the section was not reached by `annotate`."""
    base = section._key
    if base is None:
        return None
    if not field:
        return base
    joint = "" if not base or field.startswith("[") else "."
    return f"{base}{joint}{field}"


def _sections(value: Any, path: str) -> Iterator[tuple[str, Section]]:
    if isinstance(value, Section):
        yield path, value
        for name in type(value).model_fields:
            yield from _sections(getattr(value, name), _join(path, name))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _sections(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _sections(item, _join(path, str(name)))
    elif isinstance(value, BaseModel):  # not a Section: nothing of the file below it
        return


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
