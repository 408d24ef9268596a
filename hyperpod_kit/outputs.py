"""Every write the `hyperpod-kit` command makes, through the one output layer it shares with the
trainer's command (`hyperpod_trainer.fileio`, imported through `hyperpod_kit.files`).

Folders (`synth -o DIR` and its `DIR.rejected`, `jobs -o DIR`, `logs --save DIR`, `verify --out
DIR`, `make demo`'s `--out DIR`, `pipeline bootstrap|codepipeline -o DIR`, `init --project DIR`,
the per-user cache of the pinned CDK CLI) carry the marker file `.hyperpod-kit` (tool, version,
kind, and the list of everything written). An output folder is replaced only if it is
missing, empty, or ours of the same kind holding nothing but what we wrote; anything else (a
file, a link, a device, a folder of someone else's, a file the user added to ours, the current
folder or one that contains it, an input of the command or a folder holding one) is refused
before any work with one line `PATH: message. Hint: ...` (exit 2), and nothing is touched.
`--force` never removes a file hyperpod-kit did not write.

Files (`schema -o FILE`, `init FILE`, the version lock, each file of `jobs` and `pipeline github`):
a missing parent folder is an error; an existing regular file is overwritten only with `--force`,
when it already holds exactly those bytes, or when it is still exactly what hyperpod-kit wrote
there last. The text goes to a temporary file in the same folder, renamed over the target.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from hyperpod_kit import __version__
from hyperpod_kit.files import fileio

MARKER = fileio.MARKER
TOOL = "hyperpod-kit"
ASSEMBLY = "cloud-assembly"
JOBS = "jobs"
DEMO = "demo"  # `make demo` (hyperpod_kit.local.demo): its timeline, plot and logs
LOGS = "logs"  # `logs --save DIR`: a cluster's log streams
CDK_CLI = "cdk-cli"  # the per-user cache of the pinned CDK CLI (hyperpod_kit/cdk_cli.py)
PROJECT = "project"  # `init --project DIR`: a repository for a team's environments
VERIFY = "verify-report"  # `verify --out DIR`, `make verify-demo`: a report and its pictures
OWNER = fileio.Owner(
    tool=TOOL,
    version=__version__,
    kinds={
        ASSEMBLY: "a cloud assembly", JOBS: "job files", DEMO: "a demo's output",
        LOGS: "exported logs", CDK_CLI: "the pinned CDK CLI", PROJECT: "a project",
        VERIFY: "a verify report",
    },
    defaults={
        ASSEMBLY: "-o cdk.out", JOBS: "-o jobs", DEMO: "--out demo-out",
        LOGS: "--save cluster-logs", CDK_CLI: "~/.cache/hyperpod-kit/aws-cdk-VERSION",
        PROJECT: "--project my-environments", VERIFY: "--out verify-report",
    },
    recognised={
        ASSEMBLY: (
            "manifest.json",
            f"is a cloud assembly without the {fileio.MARKER} marker (another CDK app's, or "
            "written before hyperpod-kit marked its outputs)",
            "remove it yourself if it is a cdk.out you no longer need (`rm -r` it; new ones "
            "carry the marker)",
        )
    },
    foreign_hints={JOBS: ", or pass --force to write the job files into it"},
)  # fmt: skip

OutputError = fileio.OutputError
FileWrite = fileio.FileWrite
digest = fileio.digest
write_file = fileio.write_file
replace_folder = fileio.replace_folder


def recover(target: Path) -> None:
    """Undo what killed runs left around `target` (see `fileio.recover`)."""
    fileio.recover(target, TOOL, say=lambda line: print(line, file=sys.stderr))


def write_error(e: OSError, fallback: Path | str) -> str:
    """One line for a file-system error while writing an output (permissions, a full disk)."""
    return fileio.os_error_line(e, fallback)


def marker(kind: str, **extra: object) -> dict[str, object]:
    return {"tool": TOOL, "version": __version__, "kind": kind, **extra}


def write_marker(folder: Path | str, kind: str, **extra: object) -> None:
    """Mark `folder` as written by hyperpod-kit (an output of `kind`), listing what is in it."""
    fileio.mark_written(Path(folder), OWNER, kind, **extra)


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of `folder` if it is a real directory marked by us, else None."""
    return fileio.read_marker(folder, TOOL)


def check_folder(target: Path | str, kind: str, *, shown: str | None = None) -> Path:
    """Raise `OutputError` unless `target` may be replaced by a new output of `kind`."""
    return fileio.output_folder(target, kind, OWNER, shown=shown)


class FolderOutput(fileio.FolderOutput):
    """An output folder of hyperpod-kit's, replaced as a whole (see `fileio.FolderOutput`)."""

    @classmethod
    def checked(  # type: ignore[override]
        cls, target: Path | str, kind: str, *, shown: str | None = None
    ) -> FolderOutput:
        name = shown if shown is not None else str(target)
        path = fileio.output_folder(target, kind, OWNER, shown=name)
        return cls(path, kind, OWNER, name)


def check_file(
    target: Path | str,
    text: str,
    *,
    force: bool,
    ours: str | None = None,
    shown: str | None = None,
    other: str = "choose another -o",
    updates: Path | str | None = None,
) -> FileWrite:
    """Raise `OutputError` unless `text` may be written to `target` (see `fileio.output_file`)."""
    return fileio.output_file(
        target, text, force=force, ours=ours, shown=shown, other=other, updates=updates,
        writer=TOOL,
    )  # fmt: skip


# --- a folder of files (jobs, a project) -------------------------------------------------------


def check_files_folder(folder: Path | str, *, kind: str, force: bool) -> bool:
    """Raise `OutputError` unless `write_files` may write into `folder`; True when it would
    create the folder whole (missing, or empty and unmarked), False when it would add files to
    a folder of ours of this kind, or (with `force`) to a folder of someone else's."""
    absolute = fileio.absolute(folder)
    what = OWNER.kinds.get(kind, kind)
    hint = f"give a new or empty folder for {what} (e.g. {OWNER.defaults.get(kind, kind)})"
    fileio.output_into_folder(folder, hint=hint)  # never the current folder, a link, an input
    found = read_marker(absolute)
    try:
        check_folder(folder, kind)
    except OutputError:
        # ours of this kind with other files in it, or a folder of the user's (only with force):
        # files are added or replaced one by one, nothing else is touched
        ours = found is not None and found["kind"] == kind
        if (
            not (ours or (force and found is None))
            or not absolute.is_dir()
            or absolute.is_symlink()
        ):
            raise
        return False
    return not absolute.exists() or (found is None and not any(absolute.iterdir()))


def _new_folders(folder: Path, name: str, shown: str) -> list[Path]:
    """The folders between `folder` and its file `name` (a relative POSIX path) that do not
    exist yet, outermost first; an existing one must be a real folder, never a link."""
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or not parts:
        raise ValueError(f"{name!r} is not a file name inside the folder")
    missing: list[Path] = []
    current = folder
    for part in parts[:-1]:
        current = current / part
        if missing or not os.path.lexists(current):
            missing.append(current)
        elif current.is_symlink() or not current.is_dir():
            raise OutputError(
                os.path.join(shown, os.path.relpath(current, folder)),
                "is a link or a file where a folder of ours goes; nothing was written",
                "move it away",
            )
    return missing


def write_files(
    folder: Path | str, files: Mapping[str, str], *, kind: str, force: bool
) -> list[FileWrite]:
    """Write `files` (relative POSIX path -> text; `bin/x` makes the folder `bin`) into
    `folder`, all checked before any is written.

    A missing or empty folder is created whole (staged, then renamed) and marked as ours. In a
    folder of ours everything else stays; each file is replaced only if it is unchanged since we
    wrote it, or with `force`. Any other folder is refused, unless `force`: then the named files
    are written into it (nothing else is touched, and it is not marked). A folder on the way to
    a file that is a link is refused. Returns the writes.
    """
    absolute = fileio.absolute(folder)
    found = read_marker(absolute)
    if check_files_folder(folder, kind=kind, force=force):
        for name in files:
            _new_folders(absolute, name, str(folder))  # the names themselves
        output = FolderOutput(absolute, kind, OWNER, str(folder))
        with output.staging() as staging:
            for name, text in files.items():
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_text(text, encoding="utf-8")
            output.commit(staging, files={n: digest(t) for n, t in sorted(files.items())})
        return [FileWrite(absolute / n, t, changes=True) for n, t in files.items()]
    recorded: dict[str, str] = dict(found.get("files", {})) if found else {}
    writes, new_folders = [], []
    for name, text in files.items():
        shown = os.path.join(str(folder), name)
        missing = _new_folders(absolute, name, str(folder))
        if missing:  # nothing can be in its place yet: its folder is new
            writes.append(FileWrite(absolute / name, text, changes=True))
            new_folders += [m for m in missing if m not in new_folders]
        else:
            ours = recorded.get(name)
            writes.append(check_file(absolute / name, text, force=force, ours=ours, shown=shown))
    for new in new_folders:
        new.mkdir(exist_ok=True)
    for write in writes:
        write_file(write)
    if found is not None:
        recorded.update({n: digest(t) for n, t in files.items()})
        written = sorted({*found.get("written", []), *recorded, *_folders_of(recorded)})
        updated = {
            **found,
            **marker(kind),
            "files": dict(sorted(recorded.items())),
            "written": written,
        }
        text = json.dumps(updated, indent=2, sort_keys=True) + "\n"
        write_file(FileWrite(absolute / MARKER, text, changes=True))
    return writes


def _folders_of(names: Mapping[str, str]) -> set[str]:
    """The folders the files `names` sit in (`a/b/c` -> `a`, `a/b`): ours, as they hold ours."""
    return {str(parent) for name in names for parent in PurePosixPath(name).parents} - {"."}
