"""One input and one output layer for every command: `hyperpod-kit` and the trainer's.

It lives here, in the trainer's package, because the trainer's image is built from
`assets/trainer` alone and cannot import `hyperpod_kit`; `hyperpod_kit` imports it from here
(`hyperpod_kit.outputs`, `hyperpod_kit.inputs`). Standard library only: no torch, no YAML.

Inputs (`read_bytes`, `read_text`, `read_json`, `input_file`, `input_folder`): only a regular
file is opened (a FIFO, socket or device is refused from `stat` and opened non-blocking, so
nothing waits), a symbolic link to a regular file is followed, a loop of links is one line, the
read stops at a stated limit, and text is decoded with the byte's line and column. Every input
is remembered for the rest of the command (`inputs_read`).

Outputs (`output_file`, `output_folder`, `FolderOutput`): refused before any work, without reading
the target, when the path is a symbolic link, a device, FIFO or socket; is the current folder or
one that contains it; is, contains or lies inside an input of the same command. A folder is
replaced whole only when it is missing, empty, or one this tool wrote (a marker file, with the
list of everything it wrote): a file in it that the tool did not write makes it refuse, naming the
file, `--force` or not; `--force` never removes what the tool did not write. A file is
overwritten only with `--force` (a regular file the user named), when it holds those bytes
already, or when it is still what the tool wrote there last. A file a command appends to
(`appendable`, `append_text`: records as JSON Lines) is missing or one whose content the command
recognises as its kind; anything else is refused.

Every refusal is a `PathError`: one line ``PATH: message. Hint: ...``; the commands exit 2.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import enum
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
TiB = 1 << 40

MARKER = ".hyperpod-kit"  # the marker file of a folder this toolkit wrote (both commands)


# --- errors ------------------------------------------------------------------------------------


class PathError(Exception):
    """A refusal about one path: ``PATH: message. Hint: hint.``; the command exits 2."""

    def __init__(self, path: Path | str, message: str, hint: str) -> None:
        self.path, self.message, self.hint = str(path), message, hint
        super().__init__(f"{path}: {message}. Hint: {hint}.")


class InputError(PathError):
    """An input that cannot be read as what it should be."""


class OutputError(PathError):
    """An output that may not be written."""


def os_error_line(e: OSError, fallback: Path | str, *, writing: bool = True) -> str:
    """One line for a file-system error (permissions, a full disk, a read-only folder)."""
    where = e.filename if e.filename is not None else fallback
    verb = "cannot write" if writing else "cannot read"
    hint = (
        "check the folder's permissions and free space, or choose another output"
        if writing
        else "check the path and its permissions"
    )
    return f"{where}: {verb} ({e.strerror or e}). Hint: {hint}."


# --- kinds of files ----------------------------------------------------------------------------

_NOT_REGULAR = (
    (stat.S_ISDIR, "is a folder, not a file"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a file"),
    (stat.S_ISSOCK, "is a socket, not a file"),
    (stat.S_ISCHR, "is a character device, not a file"),
    (stat.S_ISBLK, "is a block device, not a file"),
    (stat.S_ISLNK, "is a symbolic link"),
)


def not_regular(mode: int) -> str | None:
    """Why a file of this mode is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((said for test, said in _NOT_REGULAR if test(mode)), "is not a regular file")


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def size_text(size: int) -> str:
    """1.5 MiB, 300 KiB: bytes as a person reads them."""
    for unit, name in ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB")):
        if size >= unit:
            return f"{size / unit:.1f} {name}".replace(f".0 {name}", f" {name}")
    return f"{size / KiB:.0f} KiB" if size >= KiB else f"{size} bytes"


# --- the inputs of this command ----------------------------------------------------------------

_INPUTS: list[Path] = []  # real paths of everything read (or checked as an input folder)


def reset_inputs() -> None:
    """Forget the inputs: at the start of a command (tests call commands in one process)."""
    _INPUTS.clear()


def add_input(path: Path | str) -> None:
    """Remember `path` as an input of this command: no output may be, hold or lie inside it."""
    real = Path(os.path.realpath(path))
    if real not in _INPUTS:
        _INPUTS.append(real)


def inputs_read() -> tuple[Path, ...]:
    return tuple(_INPUTS)


def _stat_input(path: Path | str, what: str, hint: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(path, f"is a symbolic link to nothing ({what})", hint) from None
        raise InputError(
            path, f"no such {'folder' if what == 'folder' else 'file'}", hint
        ) from None
    except OSError as e:
        if e.errno == 40:  # ELOOP
            raise InputError(path, "is a loop of symbolic links", hint) from None
        raise InputError(path, f"cannot be read ({e.strerror})", hint) from None


def _check_file(path: Path | str, *, limit: int, what: str, hint: str) -> os.stat_result:
    st = _stat_input(path, what, hint)
    if (kind := not_regular(st.st_mode)) is not None:
        raise InputError(path, kind, hint)
    if st.st_size > limit:
        raise InputError(
            path,
            f"is {size_text(st.st_size)}; {_a(what)} may be at most {size_text(limit)}",
            "check that this is the right file",
        )
    return st


def input_file(
    path: Path | str, *, limit: int, what: str = "file", hint: str = "give the path of a file"
) -> Path:
    """Check `path` as an input file (regular, at most `limit` bytes) and remember it."""
    _check_file(path, limit=limit, what=what, hint=hint)
    add_input(path)
    return Path(path)


def input_folder(
    path: Path | str, *, what: str = "folder", hint: str = "give the path of a folder"
) -> Path:
    """Check `path` as an input folder (a directory, links followed) and remember it."""
    st = _stat_input(path, "folder", hint)
    if not stat.S_ISDIR(st.st_mode):
        kind = not_regular(st.st_mode) or "is a file"
        kind = "is a file" if stat.S_ISREG(st.st_mode) else kind.replace(", not a file", "")
        raise InputError(path, kind, hint)
    add_input(path)
    return Path(path)


def _read(path: Path | str, *, limit: int, what: str, hint: str) -> bytes:
    _check_file(path, limit=limit, what=what, hint=hint)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror})", hint) from None
    with os.fdopen(fd, "rb") as f:
        if (kind := not_regular(os.fstat(f.fileno()).st_mode)) is not None:
            raise InputError(path, kind, hint)
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise InputError(path, f"cannot be read ({e.strerror})", hint) from None
    if len(raw) > limit:
        raise InputError(path, f"is more than {size_text(limit)}, the most {_a(what)} may be", hint)
    return raw


def read_bytes(
    path: Path | str, *, limit: int, what: str = "file", hint: str = "give the path of a file"
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, remembered as an input. Nothing but
    a regular file is opened, and the open does not wait (O_NONBLOCK; `fstat` of what was opened
    guards against a swap between the check and the open)."""
    raw = _read(path, limit=limit, what=what, hint=hint)
    add_input(path)
    return raw


_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),  # before UTF-16: it starts with the UTF-16 LE mark
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
SAVE_AS_UTF8 = "save it as UTF-8 (in most editors: Save As, Encoding: UTF-8)"


@dataclass(frozen=True)
class DecodeProblem:
    """Where and why bytes are not UTF-8 text (`line`/`column` from 1)."""

    message: str
    hint: str
    line: int | None = None


def decode_problem(raw: bytes) -> DecodeProblem | None:
    """None when `raw` is UTF-8 text (a UTF-8 byte-order mark is fine), else what is wrong."""
    for bom, name in _WIDE_BOMS:
        if raw.startswith(bom):
            return DecodeProblem(f"the file is {name} text, not UTF-8", SAVE_AS_UTF8)
    if wide := _wide_without_bom(raw[:1024]):
        return DecodeProblem(
            f"the file looks like {wide} text (no byte-order mark), not UTF-8", SAVE_AS_UTF8
        )
    body = raw.removeprefix(codecs.BOM_UTF8)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = body[e.start]
        start = body.rfind(b"\n", 0, e.start) + 1
        line = body.count(b"\n", 0, e.start) + 1
        column = len(body[start : e.start].decode("utf-8", errors="replace")) + 1
        legacy = bytes([bad]).decode("cp1252", errors="replace")
        readable = legacy.isprintable() and legacy != "\ufffd"
        seen_as = f"; in Latin-1 / Windows-1252 it is '{legacy}'" if readable else ""
        return DecodeProblem(
            f"byte 0x{bad:02x} on line {line}, column {column} is not UTF-8 text",
            f"save the file as UTF-8{seen_as}",
            line,
        )
    return None


def _wide_without_bom(head: bytes) -> str | None:
    """UTF-16 or UTF-32 without a byte-order mark, told by where the NUL bytes of ASCII text sit."""
    if len(head) < 4 or b"\0" not in head:
        return None
    nul = [0.0] * 4
    for i in range(4):
        column = head[i::4]
        nul[i] = column.count(0) / len(column)
    hi, lo = 0.7, 0.3
    if nul[0] < lo and min(nul[1:]) > hi:
        return "UTF-32 (little-endian)"
    if min(nul[:3]) > hi and nul[3] < lo:
        return "UTF-32 (big-endian)"
    if max(nul[0], nul[2]) < lo and min(nul[1], nul[3]) > hi:
        return "UTF-16 (little-endian)"
    if min(nul[0], nul[2]) > hi and max(nul[1], nul[3]) < lo:
        return "UTF-16 (big-endian)"
    return None


def decode(path: Path | str, raw: bytes) -> str:
    """UTF-8 text, or an `InputError` naming the byte's line and column."""
    if (problem := decode_problem(raw)) is not None:
        raise InputError(path, problem.message, problem.hint)
    return raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")


def read_text(
    path: Path | str, *, limit: int, what: str = "file", hint: str = "give the path of a file"
) -> str:
    return decode(path, read_bytes(path, limit=limit, what=what, hint=hint))


def read_json(
    path: Path | str, *, limit: int, what: str = "JSON file", hint: str = "give a JSON file"
) -> Any:
    """The parsed JSON of a regular file; a syntax error is one line with its line and column."""
    text = read_text(path, limit=limit, what=what, hint=hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            path, f"is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})", hint
        ) from None
    except RecursionError:
        raise InputError(path, "is not valid JSON: nested too deeply", hint) from None


def read_json_object(path: Path | str, *, limit: int, what: str, hint: str) -> dict[str, Any]:
    data = read_json(path, limit=limit, what=what, hint=hint)
    if not isinstance(data, dict):
        raise InputError(path, f"is not {_a(what)}: a JSON object was expected", hint)
    return data


# --- outputs: what may be written where --------------------------------------------------------


def absolute(path: Path | str) -> Path:
    """Absolute and normalized, without following a symbolic link at the end."""
    return Path(os.path.abspath(path))


def _real(path: Path) -> Path:
    """The real path of `path`'s parent, joined with its own name (never following the last
    link: an output that is a link is refused anyway)."""
    return Path(os.path.realpath(path.parent)) / path.name


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_against_inputs(
    target: Path, shown: str, hint: str, allowed: Iterable[Path | str]
) -> None:
    real = _real(target)
    allow = {Path(os.path.realpath(a)) for a in allowed}
    for source in inputs_read():
        if source in allow and real == source:
            continue
        if real == source:
            raise OutputError(shown, "is an input of this command; nothing was written", hint)
        if _inside(source, real):
            raise OutputError(
                shown, f"contains {source}, an input of this command; nothing was written", hint
            )
        if _inside(real, source):
            raise OutputError(
                shown, f"lies inside {source}, an input of this command; nothing was written", hint
            )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == 20:  # ENOTDIR: a parent is a file
            return None
        raise OutputError(path, f"cannot be checked ({e.strerror})", "check its permissions") from e


def _check_common(target: Path, shown: str, hint: str, st: os.stat_result | None) -> None:
    """What no output may be: a link, a device, FIFO or socket; in a missing folder."""
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(shown, f"the folder {parent} does not exist", "create it first, " + hint)
    if not os.access(parent, os.W_OK):  # EROFS even for root on a read-only mount
        raise OutputError(
            shown,
            f"the folder {parent} is not writable (a read-only file system, or no permission)",
            hint,
        )
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(
            shown,
            "is a symbolic link; outputs are never written through a link",
            "give the real path, " + hint,
        )
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind = not_regular(st.st_mode) or "is not a regular file"
        raise OutputError(shown, f"{kind.replace(', not a file', '')}; nothing was written", hint)


@dataclass(frozen=True)
class FileWrite:
    """One checked file write: where, what, and whether it changes anything."""

    target: Path
    text: str
    changes: bool


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def output_file(
    target: Path | str,
    text: str,
    *,
    force: bool,
    ours: str | None = None,
    shown: str | None = None,
    other: str = "choose another output",
    updates: Path | str | None = None,
    writer: str | None = None,
) -> FileWrite:
    """Raise `OutputError` unless `text` may be written to the file `target`.

    An existing regular file may be replaced with `force`, when it already holds `text`, or when
    its SHA-256 is `ours` (what the tool wrote there before, unchanged since). `updates`: the one
    input this command documents as updated in place (a version lock), which it may rewrite.
    """
    path = absolute(target)
    name = shown if shown is not None else str(target)
    st = _lstat(path)
    _check_common(path, name, other, st)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(name, "is a folder, not a file", "give the path of a file")
    _check_against_inputs(path, name, other, [updates] if updates is not None else [])
    if st is None:
        return FileWrite(path, text, changes=True)
    wanted = text.encode("utf-8")
    if st.st_size == len(wanted) or ours is not None:
        try:
            current = _read(path, limit=max(len(wanted), 64 * MiB), what="file", hint=other)
        except InputError as e:
            raise OutputError(name, e.message, "check its permissions") from None
        if current == wanted:
            return FileWrite(path, text, changes=False)
        if ours is not None and hashlib.sha256(current).hexdigest() == ours:
            return FileWrite(path, text, changes=True)
    if force:
        return FileWrite(path, text, changes=True)
    by = f"after {writer} wrote it" if writer else "after it was written here"
    why = f"was edited {by}" if ours is not None else "exists"
    raise OutputError(
        name,
        f"{why} and would be overwritten; nothing was written",
        f"pass --force to overwrite it, or {other}",
    )


def default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_file(write: FileWrite) -> None:
    """Write through a temporary file in the same folder, renamed over the target (a rename
    replaces the directory entry: a link or special file put there since the check is replaced,
    never written through)."""
    if not write.changes:
        return
    target = write.target
    st = _lstat(target)
    mode = (st.st_mode & 0o777) if st is not None and stat.S_ISREG(st.st_mode) else default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.new.{os.getpid()}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(write.text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- output folders ----------------------------------------------------------------------------


def read_marker(folder: Path, tool: str) -> dict[str, Any] | None:
    """The marker of `folder` if it is a real folder marked by `tool`, else None."""
    path = folder / MARKER
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode) or not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        data = json.loads(decode(path, _read(path, limit=1 * MiB, what="marker", hint="")))
    except (OSError, PathError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("tool") != tool:
        return None
    return data if isinstance(data.get("kind"), str) else None


def marker_text(tool: str, version: str, kind: str, **extra: object) -> str:
    body = {"tool": tool, "version": version, "kind": kind, **extra}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def tree(folder: Path) -> list[str]:
    """Every entry below `folder` but the marker, as sorted relative POSIX paths (links and
    folders included, never followed)."""
    found: list[str] = []
    for top, dirs, files in os.walk(folder):
        rel = Path(top).relative_to(folder)
        for name in [*dirs, *files]:
            entry = (rel / name).as_posix()
            if entry != MARKER:
                found.append(entry)
    return sorted(found)


def not_written(folder: Path, marker: dict[str, Any]) -> list[str]:
    """Entries of `folder` that its marker does not list (the user's). A marker without a list
    (written before the tool recorded one) lists nothing: everything counts as the user's."""
    written = marker.get("written")
    recorded = set(written) if isinstance(written, list) else set()
    return [entry for entry in tree(folder) if entry not in recorded]


def _is_empty(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _named(entries: list[str]) -> str:
    shown = ", ".join(entries[:3])
    return shown + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")


@dataclass(frozen=True)
class Owner:
    """Who writes folders, and how its kinds of output are named in messages."""

    tool: str
    version: str
    kinds: dict[str, str]  # kind -> "a cloud assembly"
    defaults: dict[str, str]  # kind -> a default folder name for hints
    # kind -> (a file that tells what an unmarked folder is, what it is, what to do about it)
    recognised: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    foreign_hints: dict[str, str] = field(default_factory=dict)  # kind -> more of the hint


def output_folder(
    target: Path | str,
    kind: str,
    owner: Owner,
    *,
    shown: str | None = None,
    replace_own: bool = True,
    force_flag: str | None = None,
) -> Path:
    """Raise `OutputError` unless `target` may be replaced by a new output of `kind`.

    It may be missing, empty, or a folder `owner` wrote for `kind` holding nothing but what it
    wrote. `replace_own=False` (a command that replaces its own output only with --force): an
    existing output of ours is refused too, naming `force_flag`. Returns the absolute path.
    """
    path = absolute(target)
    name = shown if shown is not None else str(target)
    what = owner.kinds.get(kind, kind)
    hint = f"give a new or empty folder for {what} (e.g. {owner.defaults.get(kind, kind)})"
    if _inside(absolute(Path.cwd()), path):
        raise OutputError(name, "is the current folder or contains it", hint)
    st = _lstat(path)
    _check_common(path, name, hint, st)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(name, "is a file, not a folder", hint)
    _check_against_inputs(path, name, hint, [])
    if st is None or _is_empty(path):
        return path
    found = read_marker(path, owner.tool)
    if found is None and kind in owner.recognised:
        sign, what_it_is, todo = owner.recognised[kind]
        if (path / sign).is_file():
            raise OutputError(name, f"{what_it_is}; nothing was written", f"{hint}, or {todo}")
    if found is None:
        more = owner.foreign_hints.get(kind, "")
        raise OutputError(
            name,
            f"is a folder with files that {owner.tool} did not write (no {MARKER} marker); "
            "nothing was written",
            f"{hint}, or move those files away{more}",
        )
    if found["kind"] != kind:
        other = owner.kinds.get(found["kind"], found["kind"])
        raise OutputError(name, f"holds {other} written by {owner.tool}, not {what}", hint)
    if theirs := not_written(path, found):
        raise OutputError(
            name,
            f"holds what {owner.tool} did not write ({_named(theirs)}); nothing was written or "
            "removed",
            f"move those away first (a replaced folder keeps nothing of its old content), "
            f"or {hint}",
        )
    if not replace_own and force_flag is not None:
        raise OutputError(
            name, f"exists ({what} written before)", f"pass {force_flag} to replace it, or {hint}"
        )
    return path


def output_into_folder(
    target: Path | str, *, shown: str | None = None, hint: str, create_parents: bool = False
) -> Path:
    """Raise `OutputError` unless files may be added into the folder `target` (job files,
    workflows: each file is then checked on its own): not a link or special file, not the
    current folder or one containing it, not an input, holding one, or inside one."""
    path = absolute(target)
    name = shown if shown is not None else str(target)
    if _inside(absolute(Path.cwd()), path):
        raise OutputError(name, "is the current folder or contains it", hint)
    st = _lstat(path)
    if create_parents and st is None and not path.parent.exists():
        existing = next(p for p in path.parents if p.exists() or p.is_symlink())
        _check_common(existing / ".probe", name, hint, None)
        if existing.is_symlink() or not existing.is_dir():
            raise OutputError(name, f"{existing} is not a folder", hint)
    else:
        _check_common(path, name, hint, st)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(name, "is a file, not a folder", hint)
    _check_against_inputs(path, name, hint, [])
    return path


def existing_bytes(path: Path | str, *, limit: int) -> bytes:
    """The bytes of an existing output file, to compare with what would be written: read like
    an input (regular files only, bounded) but not remembered as one."""
    return _read(path, limit=limit, what="file", hint="move it away")


# --- output files a command appends to ----------------------------------------------------------


def appendable(
    target: Path | str,
    *,
    accepts: Callable[[bytes], str | None],
    limit: int,
    hint: str,
    shown: str | None = None,
) -> Path:
    """Raise `OutputError` unless lines may be appended to the file `target`: missing (it will be
    created), or a regular file of at most `limit` bytes that `accepts` (its bytes -> None when it
    is a file of the kind the command appends to, else what it is instead: a user's file is never
    appended to). Never a link, device, FIFO, socket or folder, nor an input of this command, nor
    in a missing or read-only folder. Returns the absolute path."""
    path = absolute(target)
    name = shown if shown is not None else str(target)
    st = _lstat(path)
    _check_common(path, name, hint, st)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(name, "is a folder, not a file", hint)
    _check_against_inputs(path, name, hint, [])
    if st is not None:
        try:
            current = _read(path, limit=limit, what="file", hint=hint)
        except InputError as e:
            raise OutputError(name, f"{e.message}; nothing was written", e.hint) from None
        if (why := accepts(current)) is not None:
            raise OutputError(name, f"{why}; nothing was written", hint)
    return path


def append_text(
    target: Path | str,
    text: str,
    *,
    accepts: Callable[[bytes], str | None],
    limit: int,
    hint: str,
    shown: str | None = None,
) -> None:
    """Append `text` to `target`, checked again first (`appendable`: the command may have run
    for minutes since its first check). Opened without following a link and without waiting
    (O_NOFOLLOW, O_NONBLOCK), written only if what was opened is a regular file, in one write
    (O_APPEND: lines other processes append stay whole); a last line without its newline gets
    one first, so that `text` starts a line."""
    path = appendable(target, accepts=accepts, limit=limit, hint=hint, shown=shown)
    name = shown if shown is not None else str(target)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, default_mode())
    except OSError as e:
        if e.errno in (40, 6):  # ELOOP: a link put there since the check; ENXIO: a FIFO
            raise OutputError(name, "is not a regular file; nothing was written", hint) from None
        raise
    try:
        st = os.fstat(fd)
        if (kind := not_regular(st.st_mode)) is not None:
            raise OutputError(name, f"{kind}; nothing was written", hint)
        data = text.encode("utf-8")
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


_SIBLING = r"^\.{name}\.(new|old)\.(\d+)\.[A-Za-z0-9_]+$"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftovers(target: Path, tool: str) -> Iterator[tuple[str, Path]]:
    """Siblings of `target` left by killed runs: ours (prefix and marker), their process gone."""
    pattern = re.compile(_SIBLING.format(name=re.escape(target.name)))
    try:
        names = sorted(os.listdir(target.parent))
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m is None or _pid_alive(int(m[2])):
            continue
        path = target.parent / name
        if read_marker(path, tool) is not None:
            yield m[1], path


def recover(target: Path, tool: str, say: Any = None) -> None:
    """Undo what killed runs left around `target`: a complete old output put aside is put back;
    a half-written new one is removed (only siblings with the tool's prefix and marker)."""
    for state, path in _leftovers(target, tool):
        if state == "old" and _lstat(target) is None:
            path.rename(target)
            if say is not None:
                say(f"{target}: restored from {path.name} (an interrupted run)")
        else:
            shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class FolderOutput:
    """An output folder replaced as a whole; checked before any work and again at the end.

    Built in a temporary sibling `.DIR.new.<pid>.<random>` (same parent: renames stay on one
    file system) and swapped in by renames: the old DIR aside to `.DIR.old.<pid>.<random>`, the
    new one to DIR, then the old one deleted (it held only what the tool wrote). A run killed
    before the second rename leaves the old DIR whole; one killed between them is put right by
    the next run (`recover`)."""

    target: Path
    kind: str
    owner: Owner
    shown: str
    replace_own: bool = True
    force_flag: str | None = None

    @classmethod
    def checked(
        cls,
        target: Path | str,
        kind: str,
        owner: Owner,
        *,
        shown: str | None = None,
        replace_own: bool = True,
        force_flag: str | None = None,
    ) -> FolderOutput:
        name = shown if shown is not None else str(target)
        path = output_folder(
            target, kind, owner, shown=name, replace_own=replace_own, force_flag=force_flag
        )
        return cls(path, kind, owner, name, replace_own, force_flag)

    def check(self) -> None:
        output_folder(
            self.target,
            self.kind,
            self.owner,
            shown=self.shown,
            replace_own=self.replace_own,
            force_flag=self.force_flag,
        )

    def _marker(self, folder: Path, **extra: object) -> None:
        text = marker_text(self.owner.tool, self.owner.version, self.kind, **extra)
        (folder / MARKER).write_text(text, encoding="utf-8")

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A new temporary sibling, marked as ours, removed on exit unless it was committed."""
        recover(self.target, self.owner.tool)
        self.check()
        prefix = f".{self.target.name}.new.{os.getpid()}."
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=self.target.parent))
        try:
            self._marker(folder)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def commit(self, staging: Path, **marker_extra: object) -> None:
        """Move the staging folder into place, replacing the previous output (checked again)."""
        recover(self.target, self.owner.tool)
        self.check()
        self._marker(staging, written=tree(staging), **marker_extra)
        replace_folder(staging, self.target)


def mark_written(folder: Path, owner: Owner, kind: str, **extra: object) -> None:
    """Mark a folder that something else filled for us (the CDK CLI's outdir) as ours, listing
    everything in it."""
    text = marker_text(owner.tool, owner.version, kind, written=tree(folder), **extra)
    (folder / MARKER).write_text(text, encoding="utf-8")


def replace_folder(new: Path, target: Path) -> None:
    """Rename `new` to `target`; an existing `target` (empty, or ours) is swapped out first."""
    st = _lstat(target)
    if st is not None and stat.S_ISDIR(st.st_mode):
        try:
            target.rmdir()  # empty: nothing to keep aside
        except OSError:
            aside = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.old.{os.getpid()}.", dir=target.parent)
            )
            aside.rmdir()
            target.rename(aside)
            new.rename(target)
            shutil.rmtree(aside, ignore_errors=True)
            return
    new.rename(target)


# --- declared kinds of command-line arguments --------------------------------------------------


class PathKind(enum.Enum):
    """What a command-line argument names; every argument of both commands declares one."""

    INPUT_FILE = "input file"
    INPUT_FOLDER = "input folder"
    INPUT_PATH = "input file or folder"
    OUTPUT_FILE = "output file"
    OUTPUT_FOLDER = "output folder"
    CLUSTER_PATH = "path on the cluster"  # e.g. /fsx/...: never checked here
    NOT_A_PATH = "not a path"


@dataclass(frozen=True)
class PathSpec:
    """An argument's declared kind; `template` places the path in a composite value
    (``NAME={}`` for ``--env NAME=FILE``); `limit` is an input's size limit; `example` a value
    that works, for an argument a command needs (tests fill it in)."""

    kind: PathKind
    template: str = "{}"
    limit: int | None = None
    example: str | None = None


ATTRIBUTE = "path_spec"


def declare(
    action: argparse.Action,
    kind: PathKind,
    *,
    template: str = "{}",
    limit: int | None = None,
    example: str | None = None,
) -> argparse.Action:
    """Declare what `action`'s value names (see `PathKind`); returns the action."""
    setattr(action, ATTRIBUTE, PathSpec(kind, template, limit, example))
    return action


def walk(
    parser: argparse.ArgumentParser, command: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]]:
    """Every argument of `parser` and its subcommands, with the subcommand's words."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*command, name))
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield command, parser, action


def spec_of(action: argparse.Action) -> PathSpec | None:
    """The declared kind; flags and fixed choices are not paths by their nature."""
    found = getattr(action, ATTRIBUTE, None)
    if isinstance(found, PathSpec):
        return found
    if action.nargs == 0 or action.choices is not None:
        return PathSpec(PathKind.NOT_A_PATH)
    return None
