"""`extends:`: an environment file written on top of a base file, merged before validation.

`extends` and `abstract` are loader directives: each file's are read and removed here, and the
schema only ever sees the merged document. So is `requires` (config/requires.py), checked in each
file before anything else. The rules (docs/environments.md):

* mappings merge key by key, recursively;
* a list whose items are all mappings with distinct `name`s (instance groups, users, ...) merges
  with the base's list of that kind item by item, by name; an item with a new name is appended;
* any other list, and any other value, replaces the base's;
* `null` removes the key the base sets (and is an error where no base sets it: a misspelt key
  would otherwise vanish silently).

Every value keeps the file and line it was written at, so a finding about an inherited value
points into the base. A chain is at most `MAX_CHAIN` files long; each file is read within the
loader's bounds.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.config.findings import ConfigError, Finding, Level
from hyperpod_kit.config.loader import (
    MAX_VALUES,
    Loc,
    _Document,
    _fail,
    _parse,
    _path_to_loc,
    _read,
    format_loc,
    origin_of,
)
from hyperpod_kit.config.requires import check_requires
from hyperpod_kit.text import control_characters, control_hint, describe, shown

EXTENDS, ABSTRACT = "extends", "abstract"
# A base of a base of a base is already a lot to follow; eight files bound the work (each is read
# within the loader's bounds) and no real hierarchy needs more.
MAX_CHAIN = 8
_HINT_EXTENDS = (
    "write the path of the base file, relative to this file's folder: extends: base.yaml"
)


@dataclass(frozen=True)
class Layer:
    """One file of a chain: its name as shown, its own document (directives removed)."""

    file: str
    doc: _Document


@dataclass(frozen=True)
class Layered:
    """The merged document (lines and files across the chain) and its layers, base first."""

    doc: _Document
    layers: tuple[Layer, ...]


def read_layers(file: str) -> Layered:
    """Read `file` and every base it extends, and merge them; `ConfigError` for any mistake."""
    chain: list[Layer] = []
    lines: list[int | None] = []  # the line of each file's `extends:`
    seen: list[Path] = []
    current, via = file, None
    while True:
        doc = _parse_base(current, _read_base(current, via), via)
        check_requires(current, doc)  # first: a newer file may use keys this version lacks
        extends, line = _directives(current, doc, top=not chain)
        chain.append(Layer(current, doc))
        lines.append(line)
        seen.append(Path(os.path.realpath(current)))  # never raises on a loop
        if extends is None:
            break
        base = os.path.normpath(os.path.join(os.path.dirname(current), extends))
        if Path(os.path.realpath(base)) in seen:
            # reported at the first `extends:` inside the loop: the file given, when it is in it
            first = seen.index(Path(os.path.realpath(base)))
            loop = " -> ".join([*(layer.file for layer in chain[first:]), base])
            _fail(
                chain[first].file,
                EXTENDS,
                f"the bases lead back to this file: {loop}",
                "a base cannot extend a file that extends it; remove one of these `extends:`",
                lines[first],
            )
        if len(chain) >= MAX_CHAIN:
            _fail(
                current,
                EXTENDS,
                f"the chain of bases is longer than {MAX_CHAIN} files",
                "merge some of the bases into one file",
                line,
            )
        current, via = base, (current, line, extends)
    layers = tuple(reversed(chain))
    merged = layers[0].doc
    for layer in layers[1:]:
        merged = _merge_docs(merged, layer, file)
    # each file is within the bound; together they may not be (keys and items, and scalars)
    if len(layers) > 1 and len(merged.lines) + len(merged.scalars) > MAX_VALUES:
        _fail(
            file,
            EXTENDS,
            f"with its bases, the environment holds more than {MAX_VALUES:,} values",
            "an environment has a few hundred: check that each `extends:` names the right file",
            lines[0],
        )
    return Layered(merged, layers)


def _read_base(file: str, via: tuple[str, int | None, str] | None) -> str:
    """The file's text; a base that cannot be read is reported at the `extends:` that names it."""
    if via is None:
        return _read(file)
    try:
        return _read(file)
    except ConfigError as e:
        parent, line, written = via
        said = e.findings[0].message
        folder = os.path.dirname(parent) or "."
        _fail(
            parent,
            EXTENDS,
            f"the base {written!r} ({file}): {said}",
            f"the path is relative to this file's folder ({folder}): check its spelling",
            line,
        )


def _parse_base(file: str, text: str, via: tuple[str, int | None, str] | None) -> _Document:
    """The parsed file; a base that is empty or not a mapping is reported at its `extends:`."""
    try:
        return _parse(file, text)
    except ConfigError as e:
        first = e.findings[0]
        if via is None or first.path != "(document)":
            raise  # a mistake inside the base: its own file and line
        parent, line, written = via
        _fail(
            parent,
            EXTENDS,
            f"the base {written!r} ({file}): {first.message}",
            "a base is an environment file: a mapping of keys such as `region: us-west-2`",
            line,
        )


def _directives(file: str, doc: _Document, *, top: bool) -> tuple[str | None, int | None]:
    """Take `extends` and `abstract` out of the document; the base's path and its line."""
    line = doc.lines.get((EXTENDS,))
    extends = doc.data.pop(EXTENDS) if EXTENDS in doc.data else None
    if line is not None and (not isinstance(extends, str) or not extends.strip()):
        _fail(file, EXTENDS, "should be the path of one base file", _HINT_EXTENDS, line)
    if isinstance(extends, str) and control_characters(extends):
        said = f"{shown(extends)} holds {describe(control_characters(extends)[0])}"
        _fail(file, EXTENDS, said, control_hint(extends), line)
    abstract = doc.data.pop(ABSTRACT, False)
    if not isinstance(abstract, bool):
        _fail(
            file,
            ABSTRACT,
            "should be true or false",
            "abstract: true marks a base that is validated only through the files that extend it",
            doc.lines.get((ABSTRACT,)),
        )
    if abstract and top:
        _fail(
            file,
            ABSTRACT,
            "this file is a base for other environments (abstract: true); it is validated only "
            "through the files that extend it",
            _overlay_hint(file),
            doc.lines.get((ABSTRACT,)),
        )
    return extends, line


def _overlay_hint(file: str) -> str:
    """Name the files beside `file` that extend it, to validate or synthesize instead."""
    path = Path(file)
    name = re.escape(path.name)
    extends = re.compile(rf"^extends:\s*[\"']?(\./)?{name}[\"']?\s*(#.*)?$", re.MULTILINE)
    found: list[str] = []
    for sibling in sorted(path.parent.glob("*.y*ml"))[:100]:
        try:  # only regular files, never waiting on a pipe; an unreadable one is skipped
            if sibling.name == path.name or not stat.S_ISREG(sibling.stat().st_mode):
                continue
            with sibling.open("rb") as f:
                head = f.read(64 << 10).decode("utf-8", errors="replace")
        except OSError:
            continue
        if extends.search(head):
            found.append(str(Path(os.path.dirname(file)) / sibling.name))
    if found:
        return f"validate or synthesize a file that extends it: {', '.join(found[:3])}"
    return f"validate or synthesize a file that extends it (extends: {path.name})"


# --- merging, with the origin of every value ---------------------------------------------------


_At = tuple[_Document, Loc]  # a value's document and its path there


def _into(at: _At, part: str | int) -> _At:
    return at[0], (*at[1], part)


def _named(value: Any) -> dict[Any, int] | None:
    """A list of mappings with distinct names: name -> index; else None."""
    if not isinstance(value, list) or not value:
        return None
    names: dict[Any, int] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str | int):
            return None
        if item["name"] in names:
            return None  # two of one name: replaced whole, so the duplicate is reported
        names[item["name"]] = i
    return names


class _Merge:
    """Builds the merged document's maps (line, file, scalar, key node of every path)."""

    def __init__(self, top: str) -> None:
        self.top = top
        self.lines: dict[Loc, int] = {}
        self.files: dict[Loc, str] = {}
        self.scalars: dict[Loc, Any] = {}
        self.keys: dict[Loc, Any] = {}
        self.findings: list[Finding] = []

    def place(self, doc: _Document, src: Loc, dst: Loc) -> None:
        if src in doc.lines:
            self.lines[dst] = doc.lines[src]
            self.files[dst] = doc.files.get(src, doc.file)
        if src in doc.scalars:
            self.scalars[dst] = doc.scalars[src]

    def take(self, value: Any, doc: _Document, src: Loc, dst: Loc) -> Any:
        """`value` as it is, with the origins of everything under it."""
        self.place(doc, src, dst)
        if isinstance(value, dict):
            for key, item in value.items():
                self._key(doc, src, dst, key)
                self.take(item, doc, (*src, key), (*dst, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.take(item, doc, (*src, i), (*dst, i))
        return value

    def _key(self, doc: _Document, src: Loc, dst: Loc, key: Any) -> None:
        for alias in {key, str(key)}:
            if (*src, alias) in doc.keys:
                self.keys[(*dst, alias)] = doc.keys[(*src, alias)]
            if alias != key and (*src, alias) in doc.lines:
                self.lines.setdefault((*dst, alias), doc.lines[(*src, alias)])

    def merge(self, base: Any, b: _At, over: Any, o: _At, dst: Loc) -> Any:
        """`over` written on `base`; `b` and `o` say where each is (document and path)."""
        if isinstance(base, dict) and isinstance(over, dict):
            return self._mappings(base, b, over, o, dst)
        base_names, over_names = _named(base), _named(over)
        if base_names is not None and over_names is not None:
            self.place(*o, dst)
            items: list[Any] = []
            for i, item in enumerate(base):
                j = over_names.get(item["name"])
                at = (*dst, len(items))
                if j is None:
                    items.append(self.take(item, b[0], (*b[1], i), at))
                else:
                    items.append(self.merge(item, _into(b, i), over[j], _into(o, j), at))
            for j, item in enumerate(over):
                if item["name"] not in base_names:
                    items.append(self.take(item, o[0], (*o[1], j), (*dst, len(items))))
            return items
        return self.take(over, o[0], o[1], dst)

    def _mappings(
        self, base: dict[Any, Any], b: _At, over: dict[Any, Any], o: _At, dst: Loc
    ) -> dict[Any, Any]:
        self.place(*o, dst)
        out: dict[Any, Any] = {}
        for key, value in base.items():
            if key not in over:
                self._key(b[0], b[1], dst, key)
                out[key] = self.take(value, b[0], (*b[1], key), (*dst, key))
            elif over[key] is not None:
                self._key(o[0], o[1], dst, key)
                out[key] = self.merge(value, _into(b, key), over[key], _into(o, key), (*dst, key))
        for key, value in over.items():
            if key in base:
                continue
            if value is None:
                self._nothing_to_remove(o[0], (*o[1], key), dst, key)
                continue
            self._key(o[0], o[1], dst, key)
            out[key] = self.take(value, o[0], (*o[1], key), (*dst, key))
        return out

    def _nothing_to_remove(self, doc: _Document, src: Loc, dst: Loc, key: Any) -> None:
        file = doc.files.get(src, doc.file)
        self.findings.append(
            Finding(
                Level.ERROR,
                format_loc((*dst, key)),
                "null removes a key that a base sets, but no base sets this one",
                "check the key's spelling, or remove the line",
                doc.lines.get(src),
                file=None if file == self.top else file,
            )
        )


def _merge_docs(base: _Document, layer: Layer, top: str) -> _Document:
    m = _Merge(top)
    data = m.merge(base.data, (base, ()), layer.doc.data, (layer.doc, ()), ())
    if m.findings:
        raise ConfigError(top, m.findings)
    tags = base.explicit_tags | layer.doc.explicit_tags
    return _Document(data, m.lines, m.scalars, m.keys, tags, file=top, files=m.files)


# --- validate --explain ------------------------------------------------------------------------


class UnknownKeyError(Exception):
    """`--explain` of a key the environment does not have; carries a hint."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Setting:
    """Where one file of the chain sets a key: its line and the value it writes (None: removes)."""

    file: str
    line: int | None
    value: Any


@dataclass(frozen=True)
class Explanation:
    key: str
    value: Any  # the final value, defaults applied
    settings: tuple[Setting, ...]  # base first; empty when the value is the schema's default
    chain: tuple[str, ...]  # every file of the chain, base first

    def render(self) -> str:
        lines = [f"{self.key}: {_json(self.value)}"]
        if not self.settings:
            lines.append("  no file sets it: the default")
        for i, s in enumerate(reversed(self.settings)):
            where = f"{s.file}:{s.line}" if s.line else s.file
            if i == 0:
                verb = "removed by" if s.value is None else "set by"
                # a mapping written on a base's mapping adds to it: show what this file writes
                merged = isinstance(s.value, dict) and len(self.settings) > 1
                lines.append(
                    f"  {verb} {where}" + (f" (merged: {_json(s.value)})" if merged else "")
                )
            else:
                shown = "null" if s.value is None else _json(s.value)
                lines.append(f"  over   {where} ({shown})")
        if len(self.chain) > 1:
            lines.append(f"  files  {' -> '.join(self.chain)}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "set_by": [{"file": s.file, "line": s.line, "value": s.value} for s in self.settings],
            "files": list(self.chain),
        }


def explain(
    key: str, final: dict[str, Any], merged: _Document, layers: Sequence[Layer]
) -> Explanation:
    """The final value of `key` (a dotted path; items of a named list by name, any list item by
    `[index]`), and each file of the chain that sets or removes it."""
    parts = _path_to_loc(key)
    if not parts:
        raise UnknownKeyError(
            "no key given", "a dotted path such as storage.lustre.storage_capacity_gib"
        )
    value, real = _resolve(final, parts, key)
    names = _names_along(merged.data, real)  # the same item in each layer, by its name
    settings: list[Setting] = []
    for layer in layers:
        found = _find(layer.doc.data, names)
        if found is not None:
            file, line = origin_of(layer.doc, found[1])
            settings.append(Setting(file, line, found[0]))
    return Explanation(key, value, tuple(settings), tuple(layer.file for layer in layers))


def _resolve(data: Any, parts: Loc, key: str) -> tuple[Any, Loc]:
    """The value at `parts` in `data`, and its path with list items by index."""
    node: Any = data
    real: list[str | int] = []
    for part in parts:
        step = _step(node, part)
        if step is None:
            at = _dotted(real)
            if isinstance(node, list):
                said = f"{at} has no item named {part!r}"
            elif isinstance(node, dict):
                said = f"no key {part!r} under {at}" if at else f"no top-level key {part!r}"
            else:
                said = f"{at} is a single value, with no key {part!r} under it"
            raise UnknownKeyError(said, _choices(node, real))
        node = node[step]
        real.append(step)
    return node, tuple(real)


def _step(node: Any, part: str | int) -> str | int | None:
    if isinstance(node, dict):
        if part in node:
            return part
        return str(part) if str(part) in node else None
    if isinstance(node, list):
        if isinstance(part, int) and 0 <= part < len(node):
            return part
        for i, item in enumerate(node):
            if isinstance(item, dict) and str(item.get("name")) == str(part):
                return i
    return None


def _dotted(real: list[str | int]) -> str:
    return format_loc(tuple(real)) if real else ""


def _choices(node: Any, real: list[str | int]) -> str:
    here = _dotted(real)
    if isinstance(node, dict) and node:
        return f"the keys {'under ' + here if here else 'at the top'}: {', '.join(map(str, node))}"
    if isinstance(node, list):
        names = [str(i["name"]) for i in node if isinstance(i, dict) and "name" in i]
        if names:
            return f"the items of {here} by name: {', '.join(names)} (or by index: {here}[0])"
        return f"the items of {here} by index: {here}[0] .. {here}[{max(len(node) - 1, 0)}]"
    return f"explain {here} itself"


def _names_along(data: Any, real: Loc) -> list[str | int | tuple[str, Any]]:
    """`real` with each list index of the merged data replaced by the item's name, if it has one."""
    out: list[str | int | tuple[str, Any]] = []
    node = data
    for part in real:
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            item = node[part]
            named = isinstance(item, dict) and "name" in item
            out.append(("name", item["name"]) if named else part)
            node = item
        elif isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        else:  # a default the files do not write: no file can set what lies below
            out.append(part)
            node = None
    return out


def _find(data: Any, names: list[str | int | tuple[str, Any]]) -> tuple[Any, Loc] | None:
    """The value a layer writes at `names` (None included: a removal) and its path there."""
    node: Any = data
    loc: list[str | int] = []
    for part in names:
        if isinstance(part, tuple):
            if not isinstance(node, list):
                return None
            index = next(
                (i for i, item in enumerate(node) if isinstance(item, dict)
                 and item.get("name") == part[1]),
                None,
            )  # fmt: skip
            if index is None:
                return None
            node, loc = node[index], [*loc, index]
        elif _step(node, part) == part:
            node, loc = node[part], [*loc, part]
        else:
            return None
    return node, tuple(loc)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)
