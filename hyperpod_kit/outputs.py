"""Every write the `hyperpod-kit` command makes: it never destroys what it did not write.

Folders (`synth -o DIR` and its `DIR.rejected`, `jobs -o DIR`, `logs --save DIR`, `make demo`'s
`--out DIR`, `pipeline bootstrap|codepipeline -o DIR`). A folder is ours when it holds the marker
file `.hyperpod-kit` (a small JSON: tool, version, kind). An output folder is replaced only if it
is missing, empty, or ours of the same kind; anything else (a file, a symbolic link, a folder of
someone else's, the current folder or one that contains it) is refused before any work, with one
line `PATH: message. Hint: ...` (exit 2), and nothing is touched. A command with `--force`
(`pipeline codepipeline`) replaces a folder of someone else's when it is given, and only that.

A new folder is built in a temporary sibling, `.DIR.new.<pid>.<random>` (same parent, so renames
stay on one file system), and swapped in by renames:

    1. rename the old DIR aside to `.DIR.old.<pid>.<random>`   (an empty old DIR is just removed)
    2. rename the new folder to DIR
    3. delete the old one

A run killed before step 2 leaves the previous DIR whole (only a `.DIR.new.*` sibling remains). A
run killed between 1 and 2 leaves DIR missing and the previous output complete in `.DIR.old.*`:
the next run that writes DIR puts it back first (or `mv .DIR.old.<pid>.<random> DIR` by hand). The
next run also deletes the leftovers of killed runs, and only those: a sibling with our prefix,
our marker inside, and the id of a process that no longer runs.

Files (`schema -o FILE`, each file of `jobs`): a missing parent folder is an error; an existing
file is overwritten only with `--force` (or when it already holds exactly those bytes; in a jobs
folder of ours, also when it is still exactly what hyperpod-kit wrote there last). The text goes to
a temporary file in the same folder, which is then renamed over the target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit import __version__

MARKER = ".hyperpod-kit"
TOOL = "hyperpod-kit"
ASSEMBLY = "cloud-assembly"
JOBS = "jobs"
DEMO = "demo"  # `make demo` (hyperpod_kit.local.demo): its timeline, plot and logs
LOGS = "logs"  # `logs --save DIR`: a cluster's log streams
_KIND_NAMES = {
    ASSEMBLY: "a cloud assembly", JOBS: "job files", DEMO: "a demo's output",
    LOGS: "exported logs",
}  # fmt: skip


class OutputError(Exception):
    """A refusal to write: `PATH: message. Hint: ...`; the command exits 2."""

    def __init__(self, path: Path | str, message: str, hint: str) -> None:
        super().__init__(f"{path}: {message}. Hint: {hint}.")


def write_error(e: OSError, fallback: Path | str) -> str:
    """One line for a file-system error while writing an output (permissions, a full disk)."""
    where = e.filename if e.filename is not None else fallback
    return (
        f"{where}: cannot write ({e.strerror or e}). Hint: check the folder's permissions and "
        "free space, or choose another -o"
    )


# --- the marker --------------------------------------------------------------------------------


def marker(kind: str, **extra: object) -> dict[str, object]:
    return {"tool": TOOL, "version": __version__, "kind": kind, **extra}


def write_marker(folder: Path | str, kind: str, **extra: object) -> None:
    """Mark `folder` as written by hyperpod-kit (an output of `kind`)."""
    text = json.dumps(marker(kind, **extra), indent=2, sort_keys=True) + "\n"
    (Path(folder) / MARKER).write_text(text, encoding="utf-8")


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of `folder` if it is a real directory marked by us, else None."""
    path = folder / MARKER
    if folder.is_symlink() or not folder.is_dir() or path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("tool") != TOOL:
        return None
    return data if isinstance(data.get("kind"), str) else None


# --- folders -----------------------------------------------------------------------------------


def _absolute(path: Path | str) -> Path:
    """Absolute and normalized, without following a symbolic link at the end."""
    return Path(os.path.abspath(path))


def _is_same_or_inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_folder(
    target: Path | str, kind: str, *, shown: str | None = None, force: bool | None = None
) -> Path:
    """Raise `OutputError` unless `target` may be replaced by a new output of `kind`.

    Returns the absolute path. `shown` is how to name it in a message (the path as given).
    `force`: None for a command without --force; False when it has one that was not given (a
    refusal names it); True when it was given: a folder of someone else's is then replaced too
    (never the current folder, a link, a file, or an output of ours of another kind).
    """
    absolute = _absolute(target)
    name = shown if shown is not None else str(target)
    what = _KIND_NAMES.get(kind, kind)
    force_hint = ", or pass --force to write the job files into it" if kind == JOBS else ""
    hint = f"give a new or empty folder for {what} (e.g. -o {_default_for(kind)}){force_hint}"
    if force is False:  # a folder of someone else's: this command replaces it with --force
        force_hint = ", or pass --force to replace it"
    cwd = _absolute(Path.cwd())
    if _is_same_or_inside(cwd, absolute):
        raise OutputError(name, "is the current folder or contains it", hint)
    parent = absolute.parent
    if not parent.is_dir():
        raise OutputError(
            name, f"the folder {parent} does not exist", "create it first, or choose another -o"
        )
    if absolute.is_symlink():
        raise OutputError(
            name, "is a symbolic link; hyperpod-kit replaces only folders it wrote", hint
        )
    if not absolute.exists():
        return absolute
    if not absolute.is_dir():
        raise OutputError(name, "is a file, not a folder", hint)
    found = read_marker(absolute)
    if found is not None:
        if found["kind"] == kind:
            return absolute
        raise OutputError(
            name,
            f"holds {_KIND_NAMES.get(found['kind'], found['kind'])} written by hyperpod-kit, "
            f"not {_KIND_NAMES.get(kind, kind)}",
            hint,
        )
    if force or _is_empty(absolute):
        return absolute
    if (absolute / "manifest.json").is_file():
        raise OutputError(
            name,
            f"is a cloud assembly without the {MARKER} marker (another CDK app's, or written "
            "before hyperpod-kit marked its outputs); nothing was written",
            f"give a new or empty folder for {what}, or remove it yourself if it is a cdk.out "
            "you no longer need (`rm -r` it; new ones carry the marker)"
            + (", or pass --force to replace it" if force is False else ""),
        )
    raise OutputError(
        name,
        f"is a folder with files that hyperpod-kit did not write (no {MARKER} marker); "
        "nothing was written",
        f"give a new or empty folder for {what}, or move those files away{force_hint}",
    )


def _default_for(kind: str) -> str:
    return {ASSEMBLY: "cdk.out", DEMO: "demo-out", LOGS: "cluster-logs"}.get(kind, "jobs")


def _is_empty(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


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


def _leftovers(target: Path) -> Iterator[tuple[str, Path]]:
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
        if read_marker(path) is not None:
            yield m[1], path


def recover(target: Path) -> None:
    """Undo what killed runs left around `target` (only ours, see the module docstring)."""
    for state, path in _leftovers(target):
        if state == "old" and not target.exists() and not target.is_symlink():
            path.rename(target)
            print(f"{target}: restored from {path.name} (an interrupted run)", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class FolderOutput:
    """An output folder that is replaced as a whole; check it before doing any work."""

    target: Path
    kind: str
    force: bool | None = None  # as `check_folder`'s

    @classmethod
    def checked(
        cls, target: Path | str, kind: str, *, shown: str | None = None, force: bool | None = None
    ) -> FolderOutput:
        return cls(check_folder(target, kind, shown=shown, force=force), kind, force)

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A new temporary sibling, marked as ours, removed on exit unless it was committed."""
        recover(self.target)
        check_folder(self.target, self.kind, force=self.force)
        prefix = f".{self.target.name}.new.{os.getpid()}."
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=self.target.parent))
        try:
            write_marker(folder, self.kind)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def commit(self, staging: Path, **marker_extra: object) -> None:
        """Move the staging folder into place, replacing the previous output (checked again)."""
        recover(self.target)
        check_folder(self.target, self.kind, force=self.force)
        write_marker(staging, self.kind, **marker_extra)
        replace_folder(staging, self.target)


def replace_folder(new: Path, target: Path) -> None:
    """Rename `new` to `target`; an existing `target` (empty, or ours) is swapped out first."""
    if target.is_dir() and not target.is_symlink():
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


# --- files -------------------------------------------------------------------------------------


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FileWrite:
    """One checked file write: where, what, and whether it changes anything."""

    target: Path
    text: str
    changes: bool


def check_file(
    target: Path | str,
    text: str,
    *,
    force: bool,
    ours: str | None = None,
    shown: str | None = None,
    other: str = "choose another -o",
) -> FileWrite:
    """Raise `OutputError` unless `text` may be written to `target`.

    An existing file may be replaced with `force`, when it already holds `text`, or when its
    SHA-256 is `ours` (what hyperpod-kit wrote there before, unchanged since). `other` ends the
    hint of a refusal: how to name another file.
    """
    absolute = _absolute(target)
    name = shown if shown is not None else str(target)
    parent = absolute.parent
    if not parent.is_dir():
        raise OutputError(
            name, f"the folder {parent} does not exist", f"create it first, or {other}"
        )
    if absolute.is_symlink():
        raise OutputError(
            name, "is a symbolic link; hyperpod-kit writes only regular files", "give the real path"
        )
    if not absolute.exists():
        return FileWrite(absolute, text, changes=True)
    if absolute.is_dir():
        raise OutputError(name, "is a folder, not a file", "give the path of a file")
    try:
        current = absolute.read_bytes()
    except OSError as e:
        raise OutputError(name, f"cannot be read ({e.strerror})", "check its permissions") from e
    if current == text.encode("utf-8"):
        return FileWrite(absolute, text, changes=False)
    if force or (ours is not None and hashlib.sha256(current).hexdigest() == ours):
        return FileWrite(absolute, text, changes=True)
    why = "was edited after hyperpod-kit wrote it" if ours is not None else "exists"
    raise OutputError(
        name,
        f"{why} and would be overwritten; nothing was written",
        f"pass --force to overwrite it, or {other}",
    )


def write_file(write: FileWrite) -> None:
    """Write through a temporary file in the same folder, renamed over the target."""
    if not write.changes:
        return
    target = write.target
    mode = (target.stat().st_mode & 0o777) if target.exists() else _default_mode()
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


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


# --- a folder of files (jobs) ------------------------------------------------------------------


def write_files(
    folder: Path | str, files: Mapping[str, str], *, kind: str, force: bool
) -> list[FileWrite]:
    """Write `files` (name -> text) into `folder`, all checked before any is written.

    A missing or empty folder is created whole (staged, then renamed) and marked as ours. In a
    folder of ours everything else stays; each file is replaced only if it is unchanged since we
    wrote it, or with `force`. Any other folder is refused, unless `force`: then the named files
    are written into it (nothing else is touched, and it is not marked). Returns the writes.
    """
    absolute = _absolute(folder)
    foreign = False
    try:
        check_folder(folder, kind)
    except OutputError:
        if not (force and absolute.is_dir() and not absolute.is_symlink()):
            raise
        if (other := read_marker(absolute)) is not None and other["kind"] != kind:
            raise
        foreign = True
    found = read_marker(absolute)
    if not foreign and (not absolute.exists() or (found is None and _is_empty(absolute))):
        output = FolderOutput(absolute, kind)
        with output.staging() as staging:
            for name, text in files.items():
                (staging / name).write_text(text, encoding="utf-8")
            output.commit(staging, files={n: digest(t) for n, t in sorted(files.items())})
        return [FileWrite(absolute / n, t, changes=True) for n, t in files.items()]
    recorded: dict[str, str] = dict(found.get("files", {})) if found else {}
    writes = [
        check_file(
            absolute / name,
            text,
            force=force,
            ours=recorded.get(name),
            shown=os.path.join(str(folder), name),
        )
        for name, text in files.items()
    ]
    for write in writes:
        write_file(write)
    if found is not None:
        recorded.update({n: digest(t) for n, t in files.items()})
        updated = {**found, **marker(kind), "files": dict(sorted(recorded.items()))}
        text = json.dumps(updated, indent=2, sort_keys=True) + "\n"
        write_file(FileWrite(absolute / MARKER, text, changes=True))
    return writes
