"""The public API of the construct library (`hyperpod_kit.cdk.__all__`) as data: names, kinds,
signatures, dataclass fields, public methods, and every key of the settings (`EnvironmentConfig`,
with its type, whether it is required and its default).

``python -m hyperpod_kit.api_snapshot`` writes it to docs/api-snapshot.json (``--check``: exit 1
if the file differs). tests/unit/test_api_snapshot.py fails when the API differs from the file
and CHANGELOG.md's [Unreleased] names no changed entry: a change to the API is a decision that
users read about, not a side effect.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

SNAPSHOT = Path(__file__).resolve().parents[1] / "docs" / "api-snapshot.json"
_MODULE_PREFIX = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Z_a-z][A-Za-z0-9_]*\b)")


def snapshot() -> dict[str, Any]:
    """{"names": {name: entry}, "settings": {key: field}} for `hyperpod_kit.cdk.__all__`."""
    import hyperpod_kit.cdk as library
    from hyperpod_kit.config.schema import EnvironmentConfig

    names = {name: _entry(getattr(library, name)) for name in sorted(library.__all__)}
    return {"names": names, "settings": dict(_settings(EnvironmentConfig, ""))}


def _entry(value: Any) -> dict[str, Any]:
    if inspect.isclass(value):
        entry: dict[str, Any] = {"kind": "class"}
        if issubclass(value, BaseModel):
            entry["kind"] = "settings model"  # its fields: "settings"
            return entry
        if dataclasses.is_dataclass(value):
            entry["fields"] = {f.name: _type(f.type) for f in dataclasses.fields(value)}
        elif not issubclass(value, BaseException):
            entry["init"] = _signature(value.__init__)
        entry["members"] = dict(_members(value))
        return entry
    if inspect.isfunction(value):
        return {"kind": "function", "signature": _signature(value)}
    return {"kind": "constant", "value": _plain(value)}


def _members(cls: type) -> Iterator[tuple[str, str]]:
    """Public methods and properties the class (or a class of ours above it) defines."""
    for owner in reversed(cls.__mro__):
        if not owner.__module__.startswith("hyperpod_kit."):
            continue
        for name, member in vars(owner).items():
            if name.startswith("_"):
                continue
            if isinstance(member, property):
                yield name, "property"
            elif isinstance(member, classmethod | staticmethod):
                yield name, _signature(member.__func__)
            elif inspect.isfunction(member):
                yield name, _signature(member)


def _signature(function: Any) -> str:
    return _short(str(inspect.signature(function)))


def _short(text: str) -> str:
    """Types without their modules: the API names them by what they are."""
    return _MODULE_PREFIX.sub("", text.replace("typing.", ""))


def _type(annotation: Any) -> str:
    """A type as it reads in code, without modules and without validators' metadata (whose
    reprs carry addresses)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, str):
        text = _short(annotation)
    elif annotation is type(None) or annotation is None:
        text = "None"
    elif origin is typing.Annotated:
        text = _type(args[0])
    elif origin in (typing.Union, types.UnionType):
        text = " | ".join(_type(a) for a in args)
    elif origin is typing.Literal:
        text = f"Literal[{', '.join(repr(a) for a in args)}]"
    elif origin is not None:
        name = getattr(origin, "__name__", None) or _short(repr(origin))
        text = f"{name}[{', '.join(_type(a) for a in args)}]" if args else name
    else:
        text = annotation.__name__ if isinstance(annotation, type) else _short(repr(annotation))
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _settings(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every key below `model`: its type, whether it is required, its default; a list's items
    as ``key[]``, a map's values as ``key{}``, each union's models under the same key."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        field: dict[str, Any] = {"type": _type(info.annotation), "required": info.is_required()}
        if info.default is not PydanticUndefined:
            field["default"] = _plain(info.default)
        elif info.default_factory is not None:
            field["default"] = "(computed)"
        yield key, field
        for path, nested in _models(info.annotation, key):
            yield from _settings(nested, f"{path}.")


def _models(annotation: Any, key: str) -> Iterator[tuple[str, type[BaseModel]]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield key, annotation
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset):
        for arg in args:
            yield from _models(arg, f"{key}[]")
    elif origin is dict:
        yield from _models(args[-1], f"{key}{{}}")
    elif origin in (typing.Union, types.UnionType, typing.Annotated) or origin is not None:
        for arg in args:
            yield from _models(arg, key)


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperpod_kit.api_snapshot")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render(snapshot())
    if args.check:
        same = SNAPSHOT.is_file() and SNAPSHOT.read_text() == text
        if not same:
            print(f"{SNAPSHOT} differs from the API: run python -m hyperpod_kit.api_snapshot")
        return 0 if same else 1
    SNAPSHOT.write_text(text)
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
