"""Keys of the environment file renamed or removed between hyperpod-kit versions: a dated table.

A file written for an older hyperpod-kit may use a key that has since moved. Rather than the
generic "unknown key", the loader names the move at the file's line, with what to write now (a
made-up row):

    env.yaml:14 cluster.instance_groups[0].threads: was renamed to
    `cluster.instance_groups[0].threads_per_core` in hyperpod-kit 0.2.0 (2027-01-15): ... .
    Hint: write `threads_per_core:` instead of `threads:`.

Paths are dotted, with `[]` for the items of a list (as in docs/configuration.md). A key moved
twice is followed to where it is now. The table grows by one row per key a release renames or
removes, in release order; a test checks each row against the schema (the old path is no key of
it, the new one is) and the version and date against hyperpod_kit's own (docs/versions.md).
"""

from __future__ import annotations

from dataclasses import dataclass

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Move:
    since: str  # the hyperpod-kit version that renamed or removed the key
    date: str  # that version's release date, YYYY-MM-DD
    old: str  # the key's path before it: dotted, `[]` for a list's items
    new: str | None  # its path from `since` on; None: removed
    note: str = ""  # why, or what replaces a removed key


# Empty until a release renames or removes a key (0.1.0 is the first release).
MOVES: tuple[Move, ...] = ()


def pattern(loc: Loc) -> str:
    """A file's path as the table writes it: `cluster.instance_groups[].name`."""
    out = ""
    for part in loc:
        out += "[]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def moved(loc: Loc) -> tuple[str, str] | None:
    """(message, hint) for a key the file writes at `loc` that the table says has moved; None
    for a key the table does not know."""
    old = pattern(loc)
    steps: list[Move] = []
    seen: set[str] = set()
    path: str | None = old
    while path is not None and path not in seen:
        seen.add(path)
        move = next((m for m in MOVES if m.old == path), None)
        if move is None:
            break
        steps.append(move)
        path = move.new
    if not steps:
        return None
    final = steps[-1].new
    when = ", then ".join(f"hyperpod-kit {m.since} ({m.date})" for m in steps)
    notes = "; ".join(m.note.rstrip(".") for m in steps if m.note)
    leaf = old.rsplit(".", 1)[-1]
    if final is None:
        message = f"was removed in {when}"
        hint = f"remove `{leaf}:` (and what is under it)"
    else:
        now = _with_indices(final, old, loc)
        message = f"was renamed to `{now}` in {when}"
        same_parent = final.rsplit(".", 1)[0] == old.rsplit(".", 1)[0] and "." in old
        new_leaf = final.rsplit(".", 1)[-1]
        hint = (
            f"write `{new_leaf}:` instead of `{leaf}:` (the value stays as it is)"
            if same_parent or ("." not in old and "." not in final)
            else f"move the value to `{now}`"
        )
    return (f"{message}: {notes}" if notes else message), hint


def _with_indices(new: str, old: str, loc: Loc) -> str:
    """`new` with the file's list indices where it shares its start with `old`:
    `cluster.instance_groups[].bar` for `cluster.instance_groups[2].foo` is
    `cluster.instance_groups[2].bar`."""
    indices = iter(part for part in loc if isinstance(part, int))
    shared = 0
    while shared < min(len(new), len(old)) and new[shared] == old[shared]:
        shared += 1
    out, pos = "", 0
    while (at := new.find("[]", pos)) >= 0 and at + 2 <= shared:
        index = next(indices, None)
        if index is None:
            break
        out += f"{new[pos:at]}[{index}]"
        pos = at + 2
    return out + new[pos:]
