"""Read an environment file into an `EnvironmentConfig`, keeping the YAML line of every value.

Every way a file can be wrong (missing, too big, not UTF-8, not YAML, an alias bomb, duplicate
keys, wrong types, unknown keys, rule violations) ends as a `ConfigError` carrying findings with a
line, a path and a hint. Nothing here raises anything else for bad input.

The work is bounded, so any file answers in well under a second:

* the file is read up to `MAX_FILE_BYTES` and refused above it;
* the YAML is composed node by node, counting values as aliases would expand them (each anchor's
  expanded size is measured once, when it is defined, and an alias adds it in O(1)), and stops at
  the first node past `MAX_VALUES` or deeper than `MAX_DEPTH`, naming that line. Nothing after
  composition (line map, construction, pydantic, validators) sees more than `MAX_VALUES` values.

YAML merge keys (``<<: *defaults``, ``<<: [*a, *b]``) work: keys written in the mapping override
merged ones (so they are not "given twice"), and earlier mappings in a merge list win over later
ones. A value reached through an alias or a merge reports the line where it is written, inside the
anchor: that is the line to edit, and the path says which copy is meant.

A file may extend a base file (`extends:`, config/extends.py): the bases are read with the same
bounds and merged under it before the schema sees anything, and a finding about a value that
came from a base carries that file (`Finding.file`) and its line.

This module reads one document; `config/environment.py` puts the pieces together
(`load_environment`: the file and its bases, the schema, the validators), so that `extends.py`,
which reads each base with this module, is not imported back by it.
"""

from __future__ import annotations

import codecs
import datetime
import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from hyperpod_kit.config.findings import ConfigError, Finding, Level
from hyperpod_kit.config.moves import moved
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.files import fileio
from hyperpod_kit.text import control_characters, control_hint, describe, shown

Loc = tuple[str | int, ...]

# An environment file is a few KB (the largest example is under 3 KB; a hundred instance groups
# make about 15 KB). 256 KiB agrees with MAX_VALUES below (10,000 values of block YAML are about
# 150-250 KB), so a bigger file is padding or the wrong file. PyYAML's pure-Python scanner is the
# slowest step on a file with few values: about 0.25 s for the worst 256 KiB measured (a file of
# `...` lines; 1 MiB of it took 0.9 s), which keeps any file well inside the 2 s budget.
MAX_FILE_BYTES = 256 << 10
# Values (every key, value and list item) after aliases and merges are expanded. The default file
# has about 80; a large one (50 groups, 500 Studio users, 50 tags) about 2,000. Composing 10,000
# values takes ~0.2 s, and everything downstream is linear in them.
MAX_VALUES = 10_000
# The schema is six levels deep; 32 leaves room for any mistake worth a schema error, and keeps
# every recursive step (PyYAML's composer, the line walk, pydantic) far from Python's limit.
MAX_DEPTH = 32
# A number longer than this is a mistake (an account id has 12 digits); converting a longer one
# can take seconds (YAML 1.1 reads `1:2:3:...` as base 60) or fail (Python's 4,300-digit limit).
MAX_NUMBER_CHARS = 100

_MERGE = "tag:yaml.org,2002:merge"
_TAG_PREFIX = "tag:yaml.org,2002:"
_HINT_START = "start from environments/default.yaml; `hyperpod-kit schema` prints every key"
_HINT_SYNTAX = (
    "check the indentation and quoting on this line; a value with ': ' or '#' needs quotes"
)


def _fail(file: str, path: str, message: str, hint: str, line: int | None = None) -> NoReturn:
    """Stop loading with one error finding."""
    raise ConfigError(file, [Finding(Level.ERROR, path, message, hint, line)])


# --- reading bytes into text -------------------------------------------------------------------


def _read(file: str) -> str:
    """The file's text, through the one input layer (`hyperpod_trainer.fileio`): only a regular
    file is opened and nothing waits on a pipe or a device; a link to a regular file is followed,
    a loop of links is named; at most `MAX_FILE_BYTES`; UTF-8 with the bad byte's line."""
    hint = "give the path of an environment file, e.g. environments/default.yaml"
    try:
        raw = fileio.read_bytes(file, limit=MAX_FILE_BYTES, what="environment file", hint=hint)
    except fileio.InputError as e:
        if e.message.startswith("is ") and "may be at most" in e.message:
            hint = "an environment file is a few KB: check that this is the right file"
        _fail(file, "(file)", e.message, hint)
    problem = fileio.decode_problem(raw)
    if problem is not None:
        _fail(file, "(file)", problem.message, problem.hint)
    return raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")


# --- YAML, bounded -----------------------------------------------------------------------------


class _BoundError(Exception):
    """Composition stopped at a bound; carries the finding's message, hint and line."""

    def __init__(self, message: str, hint: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.hint, self.line = message, hint, line


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing with a count of values as aliases would expand them.

    Each node is composed once; an anchored node's expanded size and height are kept when it is
    complete, so an alias costs one lookup however deep the aliases of aliases go. The count
    runs while composing, so a bomb stops at the alias that crosses the bound, not after.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.values = 0
        self.depth = 0
        self.open: list[list[int]] = []  # [expanded size, height below] per node being composed
        self.measured: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (size, height)
        self.explicit_tags: set[yaml.Node] = set()  # scalars whose tag is written (`!!int 5`)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            node = typing.cast(yaml.Node, super().compose_node(parent, index))
            measured = self.measured.get(id(node))
            line = _line_of_mark(event.start_mark)
            anchor = f"(anchor &{event.anchor} on line {node.start_mark.line + 1})"
            if measured is None:
                raise _BoundError(
                    f"the alias *{event.anchor} is inside the collection it refers to {anchor}",
                    "a value cannot contain itself; write the values out instead",
                    line,
                )
            size, height = measured
            if self.depth + height > MAX_DEPTH:
                raise _BoundError(
                    f"the alias *{event.anchor} nests values more than {MAX_DEPTH} levels deep "
                    f"{anchor}",
                    "aliases of aliases multiply; use each anchor directly",
                    line,
                )
            self.values += size
            if self.values > MAX_VALUES:
                raise _BoundError(
                    f"the alias *{event.anchor} expands the file past {MAX_VALUES:,} values "
                    f"{anchor}",
                    "aliases of aliases multiply (a YAML 'billion laughs'); an environment file "
                    "has a few hundred values: write them out, or alias each anchor only once",
                    line,
                )
            self._add_to_parent(size, height)
            return node
        self.depth += 1
        self.values += 1
        line = _line_of_mark(event.start_mark)
        if self.depth > MAX_DEPTH:
            raise _BoundError(
                f"values are nested more than {MAX_DEPTH} levels deep",
                "an environment file nests a few levels; look for an unclosed [ or { or "
                "runaway indentation above this line",
                line,
            )
        if self.values > MAX_VALUES:
            raise _BoundError(
                f"the file holds more than {MAX_VALUES:,} values",
                "an environment file has a few hundred: check that this is the right file",
                line,
            )
        self.open.append([1, 0])
        composed = super().compose_node(parent, index)
        size, below = self.open.pop()
        self.depth -= 1
        if event.anchor is not None:
            self.measured[id(composed)] = (size, below + 1)
        self._add_to_parent(size, below + 1)
        return composed

    def _add_to_parent(self, size: int, height: int) -> None:
        if self.open:
            top = self.open[-1]
            top[0] += size
            top[1] = max(top[1], height)

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        node = super().compose_scalar_node(anchor)
        if event.tag not in (None, "!"):
            self.explicit_tags.add(node)
        kind = node.tag.removeprefix(_TAG_PREFIX)
        if kind in ("int", "float") and len(node.value) > MAX_NUMBER_CHARS:
            raise _BoundError(
                f"a number {len(node.value):,} characters long",
                f"numbers here are short (an account id has 12 digits); quote it if it is text: "
                f'"{node.value[:12]}..."',
                node.start_mark.line + 1,
            )
        return node


@dataclass
class _Document:
    """A parsed file: the data, the line of every path, and how each scalar was written."""

    data: dict[Any, Any]
    lines: dict[Loc, int]
    scalars: dict[Loc, yaml.ScalarNode] = field(default_factory=dict)
    keys: dict[Loc, yaml.ScalarNode] = field(default_factory=dict)
    explicit_tags: set[yaml.Node] = field(default_factory=set)
    file: str = ""  # the file it was read from (merged: the file that extends the others)
    files: dict[Loc, str] = field(default_factory=dict)  # merged: the file of each path


def parse_yaml(file: str, text: str) -> tuple[Any, dict[Loc, int]]:
    """Safe-load one YAML document and map each key path to its 1-based line."""
    doc = _parse(file, text)
    return doc.data, doc.lines


def _parse(file: str, text: str) -> _Document:
    try:
        loader = _BoundedLoader(text)
        try:
            node = loader.get_single_node()
            walk = _Walk()
            if node is not None:
                walk.node(node, ())
                if walk.findings:
                    raise ConfigError(file, walk.findings)
            data = _construct(loader, node) if node is not None else None
        finally:
            loader.dispose()
    except _BoundError as e:
        _fail(file, "(yaml)", e.message, e.hint, e.line)
    except RecursionError:  # the bounds above keep far from this; never a traceback regardless
        _fail(file, "(yaml)", "values are nested too deep", "flatten the file", None)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if e.context and "duplicate anchor" in e.context:  # PyYAML's problem: "second occurrence"
            problem = f"{e.context.split(';')[0]} (first on line {_line_of_mark(e.context_mark)})"
        _fail(
            file, "(yaml)", f"not valid YAML: {problem}", _yaml_hint(problem), _line_of_mark(mark)
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
        _fail(file, "(document)", "the file is empty", _HINT_START, 1)
    if not isinstance(data, dict):
        _fail(
            file,
            "(document)",
            f"the file holds {_a(_yaml_kind(data))}, not a mapping of keys",
            "an environment file is a mapping such as `name: dev` on the first line",
            node.start_mark.line + 1,
        )
    walk.lines[()] = node.start_mark.line + 1
    return _Document(data, walk.lines, walk.scalars, walk.keys, loader.explicit_tags, file=file)


def _line_of_mark(mark: Any) -> int | None:
    return mark.line + 1 if mark else None


# The fix for each YAML error that is not a matter of syntax, by a phrase of PyYAML's message.
_YAML_HINTS = {
    "could not determine a constructor": "remove the tag (the `!` word before the value); write "
    "plain YAML values",
    "undefined alias": "define the anchor (`&name`) on a value above the alias (`*name`) that "
    "uses it",
    "duplicate anchor": "give each anchor (`&name`) its own name",
    "another document": "an environment file is one document: remove the `---` line and what "
    "follows",
    "unhashable key": "a key is a name such as `region`, not a list or a mapping",
    "cannot be read as its tag says": "remove the tag (the `!!` word before the value), or write "
    "a value of that type",
}


def _yaml_hint(problem: str) -> str:
    """The fix for a YAML error PyYAML names; indentation and quoting for syntax errors."""
    return next((hint for key, hint in _YAML_HINTS.items() if key in problem), _HINT_SYNTAX)


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """Build the document; a value YAML cannot build (`!!int foo`) is a finding at its line."""
    try:
        return loader.construct_document(node)
    except yaml.YAMLError:
        raise
    except Exception:  # PyYAML raises ValueError, KeyError, AttributeError... for a bad value
        bad = _unconstructible(node, set())
        where = bad or node
        tag = where.tag.removeprefix(_TAG_PREFIX)
        value = _short(bad.value) if bad is not None else "..."
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"this value cannot be read as its tag says ({tag} {value!r})",
            where.start_mark,
        ) from None


def _unconstructible(node: yaml.Node, checked: set[int]) -> yaml.ScalarNode | None:
    """The first scalar that cannot become a value; each node (aliased or not) is tried once."""
    if id(node) in checked:
        return None
    checked.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        return node if node.tag != _MERGE and _fails_to_construct(node) else None
    children: Iterable[yaml.Node] = ()
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    for child in children:
        found = _unconstructible(child, checked)
        if found is not None:
            return found
    return None


def _fails_to_construct(node: yaml.ScalarNode) -> bool:
    try:
        yaml.constructor.SafeConstructor().construct_object(node)
    except yaml.YAMLError:
        return False  # construct_document reports those itself, with their mark
    except Exception:
        return True
    return False


class _Walk:
    """The line of every path, the scalar written at each, duplicate keys and bad merges.

    Runs on the composed nodes before construction (which flattens merges in place). A node
    reached through several aliases is walked under each path, which `MAX_VALUES` bounds, but
    its keys are checked for duplicates once.
    """

    def __init__(self) -> None:
        self.lines: dict[Loc, int] = {}
        self.scalars: dict[Loc, yaml.ScalarNode] = {}
        self.keys: dict[Loc, yaml.ScalarNode] = {}
        self.findings: list[Finding] = []
        self._pairs: dict[int, list[tuple[str, yaml.ScalarNode, yaml.Node]]] = {}

    def node(self, node: yaml.Node, loc: Loc) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, key_node, value_node in self._effective_pairs(node, loc):
                line = key_node.start_mark.line + 1
                self.lines[(*loc, key)] = line
                if not key_node.tag.endswith(":str"):
                    # `2400: x` reaches pydantic as the int 2400, `~: x` as None ('None')
                    value = _scalar_value(key_node)
                    if value is not None or key_node.tag.endswith(":null"):
                        for alias in (value, str(value)):
                            if isinstance(alias, str | int):
                                self.lines.setdefault((*loc, alias), line)
                                self.keys[(*loc, alias)] = key_node
                self.node(value_node, (*loc, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines[(*loc, i)] = item.start_mark.line + 1
                self.node(item, (*loc, i))
        elif isinstance(node, yaml.ScalarNode):
            self.scalars[loc] = node

    def _effective_pairs(
        self, node: yaml.MappingNode, loc: Loc
    ) -> list[tuple[str, yaml.ScalarNode, yaml.Node]]:
        """The mapping's keys as YAML reads them: its own, then merged ones it does not set."""
        memo = self._pairs.get(id(node))
        if memo is not None:
            return memo
        own: dict[str, tuple[yaml.ScalarNode, yaml.Node]] = {}
        merges: list[tuple[yaml.ScalarNode, yaml.Node]] = []
        pairs: list[tuple[str, yaml.ScalarNode, yaml.Node]] = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a list or mapping as a key: construction says "unhashable key"
            if key_node.tag == _MERGE:
                if merges:
                    first = merges[0][0].start_mark.line + 1
                    self._error(
                        (*loc, "<<"),
                        f"key given twice (first on line {first})",
                        "merge several mappings with one key: `<<: [*a, *b]`",
                        key_node,
                    )
                merges.append((key_node, value_node))
                continue
            key = str(key_node.value)
            if key in own:
                first = own[key][0].start_mark.line + 1
                self._error(
                    (*loc, key),
                    f"key given twice (first on line {first})",
                    "keep one; YAML would silently use the last",
                    key_node,
                )
            own[key] = (key_node, value_node)
            pairs.append((key, key_node, value_node))  # every one, so each is checked too
        for key_node, value_node in merges:
            for source in self._merge_sources(key_node, value_node, loc):
                for key, kn, vn in self._effective_pairs(source, loc):
                    if key not in own:
                        own[key] = (kn, vn)
                        pairs.append((key, kn, vn))
        self._pairs[id(node)] = pairs
        return pairs

    def _merge_sources(
        self, key_node: yaml.ScalarNode, value: yaml.Node, loc: Loc
    ) -> list[yaml.MappingNode]:
        if isinstance(value, yaml.MappingNode):
            return [value]
        if isinstance(value, yaml.SequenceNode) and all(
            isinstance(item, yaml.MappingNode) for item in value.value
        ):
            return [item for item in value.value if isinstance(item, yaml.MappingNode)]
        what = "a list that holds more than mappings"
        if isinstance(value, yaml.ScalarNode):
            what = "an empty value" if value.value == "" else "a single value"
        self._error(
            (*loc, "<<"),
            f"`<<` merges mappings into this one, but its value is {what}",
            "write `<<: *name` with `&name` on a mapping, or `<<: [*a, *b]` for several",
            key_node,
        )
        return []

    def _error(self, loc: Loc, message: str, hint: str, node: yaml.Node) -> None:
        line = node.start_mark.line + 1
        self.findings.append(Finding(Level.ERROR, format_loc(loc), message, hint, line))


def _scalar_value(node: yaml.ScalarNode) -> Any:
    """The value YAML builds from one scalar, or None when it cannot build one."""
    try:
        return yaml.constructor.SafeConstructor().construct_object(node)
    except Exception:
        return None


def _yaml_kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def origin_of(doc: _Document, loc: Loc) -> tuple[str, int | None]:
    """The file and line of the deepest part of `loc` that the document has; a merged document
    (`extends:`) knows the file of each value, a plain one is all `doc.file`."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in doc.lines:
            return doc.files.get(loc[:end], doc.file), doc.lines[loc[:end]]
    return doc.file, None


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


_PATH_PART = re.compile(r"\[([^\]]*)\]|([^.\[]+)")


def _path_to_loc(path: str) -> Loc:
    """`a.b[0].c[example.com/key]` as a location: a bracketed number is a list index, other
    bracketed text one mapping key, dots and all (a label key such as `example.com/pool`)."""
    loc: list[str | int] = []
    for bracketed, plain in _PATH_PART.findall(path):
        if plain:
            loc.append(plain)
        elif bracketed.isdigit():
            loc.append(int(bracketed))
        elif bracketed:
            loc.append(bracketed)
    return tuple(loc)


# --- schema errors as findings -----------------------------------------------------------------


def _to_config(file: str, doc: _Document) -> EnvironmentConfig:
    try:
        return EnvironmentConfig.model_validate(doc.data)
    except ValidationError as e:
        raise ConfigError(file, schema_findings(EnvironmentConfig, e.errors(), doc)) from None


def schema_findings(
    model: type[BaseModel], errors: Sequence[Any], doc: _Document | None = None
) -> list[Finding]:
    """pydantic's errors as findings in the file's terms: no class names, no union member tags,
    one finding per path, the line of the value, and a hint that says what to write."""
    doc = doc or _Document({}, {})
    by_loc: dict[Loc, list[tuple[Any, _Where]]] = {}
    for err in errors:
        where = _where(model, tuple(err["loc"]))
        by_loc.setdefault(where.loc, []).append((err, where))
    # A union member that got further (a mapping's own keys) explains the mistake better than the
    # other members' "should be a valid integer"; drop the shallow ones under a deeper one.
    deep = {loc[:end] for loc in by_loc for end in range(len(loc))}
    findings = []
    for loc, group in by_loc.items():
        if loc in deep and all(w.union_at is not None for _, w in group):
            continue
        findings.append(_schema_finding(group, doc, model))
    return findings


@dataclass(frozen=True)
class _Where:
    """An error's location with pydantic's union member tags taken out, and what sits there."""

    loc: Loc
    annotation: Any  # the type expected at loc (None when unknown)
    field: FieldInfo | None  # the model field loc ends on, for its x-hint and default
    model: type[BaseModel] | None  # the model that holds loc's last key
    is_key: bool = False  # the error is about a dict key, not its value
    union_at: Loc | None = None  # loc of the union this error came through, if any


def _where(root: type[BaseModel], raw: Loc) -> _Where:
    ann: Any = root
    out: list[str | int] = []
    info: FieldInfo | None = None
    parent: type[BaseModel] | None = None
    union_at: Loc | None = None
    is_key = into_item = False
    for part in raw:
        ann, _ = _strip(ann)
        if part == "[key]":
            is_key = True
            continue
        members = _union_members(ann)
        if members is not None:  # pydantic names the member it tried here
            union_at = tuple(out)
            ann = _member(members, part)
            continue
        out.append(part)
        info, into_item = None, False
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            parent = ann
            info = ann.model_fields.get(part) if isinstance(part, str) else None
            ann = info.annotation if info else None
        elif typing.get_origin(ann) in (list, set, frozenset, dict):
            args = typing.get_args(ann)
            ann, into_item = (args[-1] if args else None), True
        else:
            ann = None
    if into_item:  # a list item's own Annotated[str, Field(...)] carries its x-hint
        ann, info = _strip(ann)
    return _Where(tuple(out), ann, info, parent, is_key, union_at)


def _strip(annotation: Any) -> tuple[Any, FieldInfo | None]:
    """`annotation` without Annotated[...] and `| None`; the FieldInfo Annotated carried."""
    meta: FieldInfo | None = None
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            args = typing.get_args(annotation)
            infos = [a for a in args[1:] if isinstance(a, FieldInfo)]
            meta = infos[-1] if infos else meta
            annotation = args[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation, meta
            annotation = members[0]
        else:
            return annotation, meta


def _union_members(annotation: Any) -> list[Any] | None:
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    return [a for a in typing.get_args(annotation) if a is not type(None)]


def _member(members: list[Any], tag: str | int) -> Any:
    """The union member pydantic's tag names (a model by class name; others by type name)."""
    for m in members:
        inner, _ = _strip(m)
        name = getattr(inner, "__name__", None)
        if name == tag or str(tag).startswith(f"{name}["):
            return m
    return None


def _schema_finding(
    group: list[tuple[Any, _Where]], doc: _Document, root: type[BaseModel]
) -> Finding:
    err, where = group[0]
    loc, kind, value = where.loc, err["type"], err.get("input")
    path = format_loc(loc)
    hint = field_hint(where.field)
    node = doc.scalars.get(loc)
    key_node = doc.keys.get(loc) if where.is_key or kind == "invalid_key" else None
    if kind == "extra_forbidden" and (move := moved(loc)) is not None:
        message, hint = move  # a key of an older hyperpod-kit: say where it went
    elif kind == "extra_forbidden":
        allowed = _fields_of(where.model)
        name = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(name, allowed, n=1) if len(name) < 100 else []
        message = "unknown key"
        hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required key is missing"
        hint = hint or (f"add '{loc[-1]}:' here" if loc else None)
    elif key_node is not None or kind == "invalid_key":
        # a key YAML read as a number, boolean or null: name it as written, `[2400]`, `tags[yes]`
        text = key_node.value if key_node is not None else _show(value)
        path = f"{format_loc(loc[:-1]) if loc[:-1] else ''}[{_short(text)}]"
        message = f"{_written(key_node, value)}: keys should be strings"
        said = key_node and _yaml_read(
            key_node, value, doc, {str}, key="text" if where.is_key else "name"
        )
        hint = said or "a key is a name such as `region`"
    elif value is None:
        message, hint = _empty(where, node, hint)
    elif isinstance(value, str) and control_characters(value):
        # a pattern would also refuse it, but "should match '^...$'" hides the reason
        message = f"{shown(value)} holds {describe(control_characters(value)[0])}"
        hint = control_hint(value)
    else:
        texts = list(dict.fromkeys(_plain(e, root) for e, _ in group))
        if len(texts) > 1 and all(t.startswith("input should be ") for t in texts):
            texts = [texts[0], *(t.removeprefix("input should be ") for t in texts[1:])]
        message = f"{_written(node, value)}: {' or '.join(texts)}"
        said = node and _yaml_read(node, value, doc, _expects(group))
        if said and hint and not _matches(where.field, node.value if node else ""):
            said = f"{hint}, in quotes ({said.split(';')[0]})"  # quoting alone will not do
        if said:
            hint = said
        elif kind in {"literal_error", "enum"}:
            hint = hint or f"use one of {err.get('ctx', {}).get('expected', '')}"
        elif kind in {"model_type", "dict_type", "model_attributes_type"}:
            hint = hint or _mapping_hint(where, value)
    source, line = origin_of(doc, loc)
    file = None if source == doc.file else source
    return Finding(Level.ERROR, path, message, hint, line, file=file)


def _written(node: yaml.ScalarNode | None, value: Any) -> str:
    """The value as the file has it: `0123` rather than the 83 YAML made of it."""
    if node is not None and node.style is None and not isinstance(value, str) and node.value:
        return _short(node.value)
    return _show(value)


# pydantic's wording for an error type, where its own names a Python class or says "dictionary
# or instance of StorageConfig"; the rest of its messages are plain English already.
_PLAIN = {
    "model_type": "input should be a valid dictionary (a mapping of keys)",
    "model_attributes_type": "input should be a valid dictionary (a mapping of keys)",
    "dataclass_type": "input should be a valid dictionary (a mapping of keys)",
    "dict_type": "input should be a valid dictionary (a mapping of keys)",
    "is_instance_of": "input is not a value of the right kind",
    "is_subclass_of": "input is not a value of the right kind",
}
_JARGON = re.compile(r"\b(?:Union|Optional|Literal|Annotated)\[.*?\]|\s*or instance of \w+")


def _plain(err: Any, root: type[BaseModel]) -> str:
    kind = err["type"]
    text = _PLAIN.get(kind) or str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        text = text.removeprefix(prefix)
    text = _JARGON.sub("", text)
    for name in _model_names(root):
        text = re.sub(rf"\b{name}\b", "a mapping", text)
    return _lower_first(text)


_MODEL_NAMES: dict[type[BaseModel], list[str]] = {}


def _model_names(root: type[BaseModel]) -> list[str]:
    """Names of the model classes under `root`, which must never reach a user."""
    if root not in _MODEL_NAMES:
        seen: set[type[BaseModel]] = set()
        todo: list[Any] = [root]
        while todo:
            ann = todo.pop()
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                if ann in seen:
                    continue
                seen.add(ann)
                todo.extend(f.annotation for f in ann.model_fields.values())
            else:
                todo.extend(typing.get_args(ann))
        _MODEL_NAMES[root] = sorted((m.__name__ for m in seen), key=len, reverse=True)
    return _MODEL_NAMES[root]


def _expects(group: list[tuple[Any, _Where]]) -> set[type]:
    """The Python types the errors at one path say were wanted."""
    wanted = {
        "string_type": str,
        "int_type": int,
        "float_type": float,
        "bool_type": bool,
        "list_type": list,
        "dict_type": dict,
        "model_type": dict,
    }
    out: set[type] = set()
    for err, _ in group:
        if err["type"] in wanted:
            out.add(wanted[err["type"]])
        elif err["type"] == "literal_error":
            expected = str(err.get("ctx", {}).get("expected", ""))
            out.add(str if "'" in expected else int)
    return out


def _yaml_read(
    node: yaml.ScalarNode, value: Any, doc: _Document, expects: set[type], *, key: str = ""
) -> str | None:
    """Say how YAML turned what was written into `value`, when that is the mistake.

    `expects` holds the types the schema wanted; `key` is set for a key rather than a value:
    "name" where keys are names (a section), "text" where they are free text (`tags`).
    """
    scalars = expects & {str, int, float, bool}
    if not scalars:
        return None  # a section or list was wanted: not a matter of how a scalar was read
    text = _short(node.value)
    subject = "the key " if key else ""
    said: str | None = None
    if node in doc.explicit_tags:
        tag = node.tag.removeprefix(_TAG_PREFIX)
        made = _kind_word(value)
        made = made if made == "text" else _a(made)
        said = f"the tag !!{tag} makes {subject}{text} {made}; remove the tag"
    elif node.style is None and not isinstance(value, str):
        read = f"YAML read {subject}{text} as {_as(value)}"
        if key == "name":
            said = f"{read}; a key here is a name such as `region`"
        elif str in scalars:
            said = f'{read}; quote it: "{text}"'
        elif _show(value) != text:  # `yes` for a number; `true` for a number needs no lesson
            said = f"{read}; write {_a(_type_word(scalars))}"
    elif (
        node.style is not None
        and isinstance(value, str)
        and type(_resolve_plain(node.value)) in scalars - {str}
    ):
        said = f"the quotes make it text; write it without them: {text}"
    return said


def _resolve_plain(text: str) -> Any:
    """What YAML would read `text` as, written without quotes."""
    if len(text) > MAX_NUMBER_CHARS:
        return text
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return _scalar_value(yaml.ScalarNode(tag, text))


def _as(value: Any) -> str:
    if value is None:
        return "null (no value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {_show(value)}"
    if isinstance(value, datetime.datetime):
        return "a date and time"
    if isinstance(value, datetime.date):
        return "a date"
    return _a(_kind_word(value))


def _kind_word(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, datetime.date):
        return "date"
    if isinstance(value, bytes):
        return "binary value"
    if isinstance(value, str):
        return "text"
    return _yaml_kind(value)


def _type_word(types_: set[type]) -> str:
    words = {int: "whole number", float: "number", bool: "boolean (true or false)"}
    return " or ".join(sorted(words.get(t, "value") for t in types_))


def _empty(where: _Where, node: yaml.ScalarNode | None, hint: str | None) -> tuple[str, str]:
    """`storage:` with nothing under it reads as null: say so, and what to write."""
    written = node.value if node is not None and node.style is None else ""
    ann, _ = _strip(where.annotation)
    last = where.loc[-1] if where.loc else None
    remove = "remove the empty `-` item" if isinstance(last, int) else f"remove '{last}:'"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        keys = ", ".join(list(ann.model_fields)[:4])
        return "is empty", f"{remove}, or add keys under it, such as {keys}"
    if typing.get_origin(ann) is list:
        return "is empty", f"{remove}, or add items under it, each on a line `- ...`"
    if typing.get_origin(ann) is dict:
        return "is empty", f"{remove}, or add `key: value` lines under it"
    if written:  # `null` or `~` written out
        said = f'YAML reads {written} as no value; quote it if you mean the text: "{written}"'
        return "has no value", said
    default = _default_text(where.field)
    fix = f"remove the key to use the default ({default})" if default else None
    return "has no value", hint or fix or f"write a value after '{last}:'"


def _default_text(info: FieldInfo | None) -> str | None:
    if info is None or info.is_required():
        return None
    value = info.get_default(call_default_factory=True)
    if value is None or isinstance(value, BaseModel | list | dict):
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _matches(info: FieldInfo | None, text: str) -> bool:
    """Whether `text` passes the field's pattern (a field without one: True)."""
    patterns = [getattr(m, "pattern", None) for m in (info.metadata if info else [])]
    return all(re.search(p, text) for p in patterns if isinstance(p, str))


def _mapping_hint(where: _Where, value: Any) -> str | None:
    ann, _ = _strip(where.annotation)
    name = str(where.loc[-1]) if where.loc else "it"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        keys = ", ".join(list(ann.model_fields)[:4])
        if isinstance(where.loc[-1:][0] if where.loc else None, int):
            return f"each item is a mapping of keys, such as {keys}"
        if isinstance(value, list):
            return f"write the keys indented under '{name}:' without `- `, such as {keys}"
        return f"write keys indented under '{name}:', such as {keys}"
    if isinstance(value, list):
        return f"write `key: value` lines indented under '{name}:', without `- `"
    return None


def field_hint(field: FieldInfo | None) -> str | None:
    """The ``x-hint`` a schema field carries, shown with its errors and in the reference."""
    extra = field.json_schema_extra if field else None
    value = extra.get("x-hint") if isinstance(extra, dict) else None
    return value if isinstance(value, str) else None


def _show(value: Any) -> str:
    """A value as the file would write it, cut to 60 characters."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, dict | list | tuple | set | bytes):
        return _a("mapping" if isinstance(value, dict) else _kind_word(value))
    if isinstance(value, int) and value.bit_length() > 200:
        return "a very long number"
    return _short(repr(value) if isinstance(value, str) else str(value))


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _fields_of(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model else []
