"""One number of an environment file changed in place, every other byte kept (`nodes delete
--edit-file`): the count of an instance group at the line the loader gives for it.

The value is found as the YAML parser sees it (the scalar's own characters at that line, so a
flow mapping `{name: compute, instance_count: 2}`, quotes, comments and CRLF line endings are
kept), and the edit is refused, with one line, unless the line holds exactly that key with the
expected number written as a number: a count reached through an anchor, an alias or a merge
(`<<: *defaults`), written on another line, or not a plain decimal, is the user's to edit. The
edited text is parsed again: it must differ from the original in that one value and nothing else.

This module computes the new text; writing it is the output layer's (`hyperpod_kit.outputs`).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from hyperpod_kit.config.findings import ConfigError
from hyperpod_kit.config.loader import MAX_FILE_BYTES, Loc, _parse
from hyperpod_kit.files import fileio

_NUMBER = re.compile(r"(['\"]?)(0|[1-9][0-9]*)\1")


class EditRefusedError(Exception):
    """The edit cannot be made safely: ``FILE:LINE key: why. Hint: ...``, one line."""


@dataclass(frozen=True)
class CountEdit:
    """`key` (the last part of the path, e.g. ``instance_count``) of the group `group`, written
    at `file`:`line`, from `before` to `after`."""

    file: str
    line: int
    key: str
    group: str
    before: int
    after: int

    def where(self) -> str:
        return f"{self.file}:{self.line} {self.key}"


def read_text(file: str) -> tuple[bytes, str]:
    """The file's UTF-8 byte-order mark (or b"") and its text, through the input layer."""
    hint = "give the path of an environment file"
    raw = fileio.read_bytes(file, limit=MAX_FILE_BYTES, what="environment file", hint=hint)
    bom = codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b""
    try:
        return bom, raw[len(bom) :].decode("utf-8")
    except UnicodeDecodeError:
        raise EditRefusedError(f"{file}: not UTF-8 text; nothing was written. Hint: "
                               "save it as UTF-8.") from None  # fmt: skip


def apply(edit: CountEdit, text: str) -> str:
    """`text` (the file `edit.file`, without its byte-order mark) with the one number changed;
    `EditRefusedError` when the line does not hold it as expected."""
    where = edit.where()
    hint = f"edit it by hand: {edit.before} -> {edit.after}"
    try:
        doc = _parse(edit.file, text)
    except ConfigError as e:
        raise EditRefusedError(f"{where}: the file no longer parses ({e}); nothing was "
                               f"written. Hint: {hint}.") from None  # fmt: skip
    at_line = [loc for loc in doc.scalars
               if loc and loc[-1] == edit.key and doc.lines.get(loc) == edit.line]  # fmt: skip
    if len(at_line) != 1:
        why = ("does not hold it" if not at_line else f"is reached by {len(at_line)} paths "
               "(an anchor merged into several groups)")  # fmt: skip
        raise EditRefusedError(f"{where}: the line {why}; nothing was written. Hint: {hint}.")
    loc = at_line[0]
    node = doc.scalars[loc]
    shared = [other for other, n in doc.scalars.items() if n is node and other != loc]
    if shared or node.start_mark.line + 1 != edit.line:
        why = "an anchor or alias shares the value" if shared else "the value is on another line"
        raise EditRefusedError(f"{where}: {why}; nothing was written. Hint: {hint}.")
    name = doc.scalars.get((*loc[:-1], "name"))
    if name is not None and name.value != edit.group:
        raise EditRefusedError(f"{where}: the line is group {name.value!r}'s, not "
                               f"{edit.group!r}'s; nothing was written. Hint: {hint}.")  # fmt: skip
    start, end = node.start_mark.index, node.end_mark.index
    written = text[start:end]
    match = _NUMBER.fullmatch(written)
    if match is None or int(match.group(2)) != edit.before:
        raise EditRefusedError(f"{where}: the line holds {written!r}, not {edit.before}; nothing "
                               f"was written. Hint: {hint}.")  # fmt: skip
    quote = match.group(1)
    new = f"{text[:start]}{quote}{edit.after}{quote}{text[end:]}"
    _check_only_that_changed(edit, loc, doc.data, _parse(edit.file, new).data, hint)
    return new


def _check_only_that_changed(edit: CountEdit, loc: Loc, old: object, new: object,
                             hint: str) -> None:  # fmt: skip
    expected = _set(old, loc, edit.after if isinstance(_get(old, loc), int) else str(edit.after))
    if new != expected:
        raise EditRefusedError(f"{edit.where()}: the edit would change more than this "
                               f"value (an anchor or merge); nothing was written. Hint: "
                               f"{hint}.")  # fmt: skip


def _get(data: object, loc: Loc) -> object:
    for part in loc:
        data = data[part]  # type: ignore[index]
    return data


def _set(data: object, loc: Loc, value: object) -> object:
    """A copy of `data` with the value at `loc` replaced (the rest shared)."""
    if not loc:
        return value
    head, rest = loc[0], loc[1:]
    if isinstance(data, dict):
        return {**data, head: _set(data[head], rest, value)}
    if isinstance(data, list) and isinstance(head, int):
        return [*data[:head], _set(data[head], rest, value), *data[head + 1 :]]
    raise KeyError(head)
