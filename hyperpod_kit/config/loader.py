"""Read an environment file into an `EnvironmentConfig`, keeping the YAML line of every value.

Every way a file can be wrong (missing, unreadable, not YAML, duplicate keys, wrong types, unknown
keys, rule violations) ends as a `ConfigError` carrying findings with a line, a path and a hint.
Nothing here raises anything else for bad input.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from hyperpod_kit.config.findings import ConfigError, Finding, Level, has_errors

if TYPE_CHECKING:
    from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.schema import EnvironmentConfig

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class LoadedEnvironment:
    """A valid config, where it came from, and what validation said that was not an error."""

    file: str
    config: EnvironmentConfig
    findings: list[Finding]
    lines: dict[Loc, int]


def load_environment(
    path: str | Path, *, suppress: Sequence[str] = (), aws: AwsFacade | None = None
) -> LoadedEnvironment:
    """Parse, check the schema, run the semantic validators (and, given `aws`, the checks that
    ask the account); raise `ConfigError` on any error."""
    from hyperpod_kit.config.aws import run_aws_checks
    from hyperpod_kit.config.validators import run_validators

    file = str(path)
    text = _read(file)
    data, lines = parse_yaml(file, text)
    config = _to_config(file, data, lines).at_source(Path(file).parent)
    raw = run_validators(config, suppress=[*suppress, *config.validation.suppress])
    if aws is not None and not has_errors(raw):
        raw += run_aws_checks(config, aws)
    findings = [f.at_line(f.line or line_of(lines, _path_to_loc(f.path))) for f in raw]
    if has_errors(findings):
        raise ConfigError(file, findings)
    return LoadedEnvironment(file=file, config=config, findings=findings, lines=lines)


def _read(file: str) -> str:
    p = Path(file)
    hint = "give the path of an environment file, e.g. environments/default.yaml"
    if not p.exists():
        _fail(file, "(file)", "no such file", hint)
    if p.is_dir():
        _fail(file, "(file)", "is a directory", hint)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        msg = "is not UTF-8 text"
    except OSError as e:
        msg = f"cannot be read ({e.strerror})"
    _fail(file, "(file)", msg, hint)


def _fail(file: str, path: str, message: str, hint: str, line: int | None = None) -> NoReturn:
    """Stop loading with one error finding."""
    raise ConfigError(file, [Finding(Level.ERROR, path, message, hint, line)])


# --- YAML with lines ---------------------------------------------------------------------------


def parse_yaml(file: str, text: str) -> tuple[Any, dict[Loc, int]]:
    """Safe-load one YAML document and map each key path to its 1-based line."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = _construct(loader, node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        problem = e.problem or e.context or "invalid YAML"
        _fail(
            file,
            "(yaml)",
            f"not valid YAML: {problem}",
            "check the indentation and quoting on this line; a value with ': ' or '#' needs quotes",
            line,
        )
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        _fail(
            file,
            "(yaml)",
            f"not valid YAML: character {e.character!r} is not allowed",
            "remove the control character (a stray escape or NUL from a paste?)",
            line,
        )
    except yaml.YAMLError as e:
        _fail(file, "(yaml)", f"not valid YAML: {e}", "check the file")
    if node is None or data is None:
        _fail(
            file,
            "(document)",
            "the file is empty",
            "start from environments/default.yaml; `hyperpod-kit schema` prints every key",
            1,
        )
    if not isinstance(data, dict):
        _fail(
            file,
            "(document)",
            f"the file holds a {_yaml_kind(data)}, not a mapping of keys",
            "an environment file is a mapping such as `name: dev` on the first line",
            node.start_mark.line + 1,
        )
    lines: dict[Loc, int] = {(): node.start_mark.line + 1}
    duplicates = list(_walk(node, (), lines))
    if duplicates:
        raise ConfigError(file, duplicates)
    return data, lines


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """Build the document; a value YAML cannot build (`!!int foo`) is a finding at its line."""
    culprit = _unconstructible(node, set(), set())
    if culprit is not None:
        bad, why = culprit
        raise yaml.constructor.ConstructorError(
            None, None, f"{why} ({bad.tag.rsplit(':', 1)[-1]} {bad.value!r})", bad.start_mark
        )
    return loader.construct_document(node)


def _unconstructible(
    node: yaml.Node, parents: set[int], checked: set[int]
) -> tuple[yaml.Node, str] | None:
    """The first node that cannot become a value: a bad tagged scalar, or an anchor in itself.

    `checked` makes a node shared through aliases cost one visit, not one per reference.
    """
    if id(node) in parents:
        return node, "an alias refers to the collection that contains it"
    if id(node) in checked:
        return None
    checked.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        try:
            yaml.SafeLoader("").construct_object(node)
        except yaml.YAMLError:
            raise  # an unknown tag: PyYAML's own message says it best
        except Exception:  # PyYAML raises ValueError, KeyError, IndexError... for a bad value
            return node, "this value cannot be read as its tag says"
        return None
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    for child in children:
        found = _unconstructible(child, parents | {id(node)}, checked)
        if found is not None:
            return found
    return None


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> Iterator[Finding]:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                yield Finding(
                    Level.ERROR,
                    format_loc((*loc, key)),
                    f"key given twice (first on line {seen[key]})",
                    "keep one; YAML would silently use the last",
                    line,
                )
            seen[key] = line
            lines[(*loc, key)] = line
            if isinstance(key_node, yaml.ScalarNode) and not key_node.tag.endswith(":str"):
                # `2400: x` reaches pydantic as the int 2400, `0x1f: x` as 31
                value = yaml.SafeLoader("").construct_object(key_node)
                if isinstance(value, int):
                    lines[(*loc, value)] = line
            yield from _walk(value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*loc, i)] = item.start_mark.line + 1
            yield from _walk(item, (*loc, i), lines)


def _yaml_kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    """The line of the deepest part of `loc` that the file has (a missing key: its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _path_to_loc(path: str) -> Loc:
    loc: list[str | int] = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            loc.append(int(part[1:-1]))
        elif part:
            loc.append(part)
    return tuple(loc)


# --- schema errors as findings -----------------------------------------------------------------


def _to_config(file: str, data: dict[str, Any], lines: dict[Loc, int]) -> EnvironmentConfig:
    try:
        return EnvironmentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(file, [_schema_finding(err, lines) for err in e.errors()]) from None


def _schema_finding(err: Any, lines: dict[Loc, int]) -> Finding:
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    field = _field_at(EnvironmentConfig, loc)
    hint = field_hint(field)
    if kind == "extra_forbidden":
        allowed = _fields_of(_model_at(EnvironmentConfig, loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]) if loc else "", allowed, n=1)
        message = "unknown key"
        hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required key is missing"
        hint = hint or (f"add '{loc[-1]}:' here" if loc else None)
    else:
        text = str(err["msg"]).removeprefix("Value error, ")
        message = f"{_show(value)}: {_lower_first(text)}"
        if kind in {"literal_error", "enum"}:
            hint = hint or f"use one of {err.get('ctx', {}).get('expected', '')}"
    return Finding(Level.ERROR, format_loc(loc), message, hint, line_of(lines, loc))


def field_hint(field: FieldInfo | None) -> str | None:
    """The ``x-hint`` a schema field carries, shown with its errors and in the reference."""
    extra = field.json_schema_extra if field else None
    value = extra.get("x-hint") if isinstance(extra, dict) else None
    return value if isinstance(value, str) else None


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, dict):
        text = "a mapping"
    elif isinstance(value, list):
        text = "a list"
    return text if len(text) <= 60 else text[:57] + "..."


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _unwrap(annotation: Any) -> Any:
    """The model or item type inside Optional[...], list[...], dict[..., ...], Annotated[...]."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        elif origin in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return annotation


def _model_at(model: type[BaseModel] | None, loc: Loc) -> type[BaseModel] | None:
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        inner = _unwrap(info.annotation) if info else None
        model = inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None
    return model


def _field_at(model: type[BaseModel], loc: Loc) -> FieldInfo | None:
    names = [p for p in loc if isinstance(p, str)]
    if not names:
        return None
    parent = _model_at(model, loc[: max(i for i, p in enumerate(loc) if isinstance(p, str))])
    return parent.model_fields.get(names[-1]) if parent else None


def _fields_of(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model else []
