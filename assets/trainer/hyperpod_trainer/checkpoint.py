"""Crash-safe checkpoint layout on a shared file system, written with PyTorch DCP.

    <dir>/step_000120/            complete: OWNER.json + DCP shards + .metadata + COMPLETE.json
    <dir>/step_000123.tmp/        being written (or abandoned by a crash)
    <dir>/latest                  "step_000120", replaced atomically
    <dir>/damaged/step_000126/    complete once, failed verification at a start: kept, never read
    <dir>/FAILED.json             a final failure: every later launch exits at once with its code

A save writes ``OWNER.json`` into ``step_N.tmp/`` before anything else; only when every rank's
shards and DCP's ``.metadata`` are on disk does rank 0 write ``COMPLETE.json`` (with the size of
every file), rename the folder to ``step_N/`` and then swap ``latest``. A crash at any point
leaves the previous complete checkpoint untouched, and the next launch deletes our leftovers
(folders with OWNER.json and no COMPLETE.json). A folder we did not write is never touched.
Before resuming, the newest complete checkpoint is verified (every file `.metadata` names, the
recorded sizes); a damaged one is moved into ``damaged/`` and the previous one is tried.
Retention deletes a folder's marker first and its owner file last, so a half-deleted folder is
never mistaken for a complete one nor for someone else's. One job per directory (lease.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from . import fileio
from .fileio import MiB

MARKER = "COMPLETE.json"
OWNER = "OWNER.json"  # written first into every folder the trainer creates
LATEST = "latest"
DCP_METADATA = ".metadata"
DAMAGED = "damaged"
FAILED = "FAILED.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_DIR = re.compile(r"^step_(\d+)\.(tmp|old)$")  # being written; being pruned

Emit = Callable[..., None]


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    meta: dict[str, Any]


# COMPLETE.json lists every file of a checkpoint with its size: about 100 bytes a file, so even
# thousands of DCP shards stay far below this; FAILED.json is one line.
RECORD_LIMIT = 64 * MiB


def _read_record(path: Path) -> Any:
    """A JSON record of ours through the input layer: a regular file within RECORD_LIMIT (a FIFO
    or device put there is refused from stat, never opened, so nothing waits on it)."""
    return json.loads(fileio.read_text(path, limit=RECORD_LIMIT, what="checkpoint record"))


def read_marker(path: Path) -> dict[str, Any] | None:
    """The folder's COMPLETE.json as a mapping with an integer step, else None."""
    try:
        meta = _read_record(path / MARKER)
    except (OSError, ValueError, RecursionError, fileio.PathError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        return None
    return meta


def is_ours(path: Path) -> bool:
    """Whether the trainer wrote this folder: its owner file, or (checkpoints written before
    owner files existed) a COMPLETE.json of the trainer's form."""
    return (path / OWNER).is_file() or read_marker(path) is not None


def complete_checkpoints(root: Path) -> list[CheckpointInfo]:
    """Our checkpoints with a readable completion marker, oldest first (not yet verified)."""
    if not root.is_dir():
        return []
    found: list[CheckpointInfo] = []
    for path in root.iterdir():
        meta = read_marker(path) if _STEP_DIR.match(path.name) and path.is_dir() else None
        if meta is not None:
            found.append(CheckpointInfo(path=path, step=int(meta["step"]), meta=meta))
    return sorted(found, key=lambda info: info.step)


def remove_owned(path: Path) -> None:
    """Delete one of our folders: its marker first, its owner file last, so that at every
    moment it is either complete or recognisably ours and interrupted."""
    (path / MARKER).unlink(missing_ok=True)
    for child in path.iterdir():
        if child.name == OWNER:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    (path / OWNER).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.rmdir()


def clean_incomplete(root: Path) -> tuple[list[Path], list[Path]]:
    """Rank 0, at start: delete our interrupted saves and prunings (`step_N.tmp`, `step_N.old`
    with our owner file); return (removed, foreign): step folders we did not write are listed
    and left alone."""
    removed: list[Path] = []
    foreign: list[Path] = []
    if not root.is_dir():
        return removed, foreign
    for path in sorted(root.iterdir()):
        if not (_TMP_DIR.match(path.name) or _STEP_DIR.match(path.name)) or not path.is_dir():
            continue
        if not is_ours(path):
            foreign.append(path)
        elif _TMP_DIR.match(path.name):
            remove_owned(path)
            removed.append(path)
    for stray in root.glob(f"{LATEST}.*.tmp"):
        stray.unlink(missing_ok=True)
    return removed, foreign


def write_owner(path: Path, step: int) -> None:
    """Mark `path` as the trainer's, before anything else is written into it."""
    write_atomic(path / OWNER, json.dumps({"writer": "hyperpod_trainer", "step": step}))


def file_sizes(path: Path) -> dict[str, int]:
    """Size of every file below `path` but the completion marker, by relative path."""
    return {
        p.relative_to(path).as_posix(): p.stat().st_size
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


def verify(info: CheckpointInfo) -> str | None:
    """Why this complete checkpoint cannot be loaded, or None if it is intact.

    Checks DCP's `.metadata` (present, readable), that every file it names exists and holds
    the bytes it points into, and that every file has the size recorded in COMPLETE.json
    (checkpoints written before sizes were recorded get the first two checks only).
    """
    if not (info.path / DCP_METADATA).is_file():
        return f"{DCP_METADATA} is missing"
    return _check_recorded_sizes(info) or _check_metadata_files(info.path)


def _check_recorded_sizes(info: CheckpointInfo) -> str | None:
    recorded = info.meta.get("files")
    if not isinstance(recorded, dict):
        return None
    for name, size in sorted(recorded.items()):
        target = info.path / name
        if not target.is_file():
            return f"{name} is missing"
        actual = target.stat().st_size
        if actual != size:
            return f"{name} has {actual} bytes, {MARKER} recorded {size}"
    return None


def _check_metadata_files(path: Path) -> str | None:
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # any unreadable metadata means damaged, whatever raised
        return f"{DCP_METADATA} is unreadable ({type(exc).__name__}: {exc})"
    needed: dict[str, int] = {}
    for item in (metadata.storage_data or {}).values():
        name = getattr(item, "relative_path", None)
        if isinstance(name, str):
            end = int(item.offset) + int(item.length)
            needed[name] = max(needed.get(name, 0), end)
    for name, end in sorted(needed.items()):
        target = path / name
        if not target.is_file():
            return f"{name} is missing (named by {DCP_METADATA})"
        if target.stat().st_size < end:
            return f"{name} has {target.stat().st_size} bytes, {DCP_METADATA} needs {end}"
    return None


def move_aside(root: Path, path: Path) -> Path:
    """Move a damaged checkpoint into `<root>/damaged/` (a new name if one is taken)."""
    aside = root / DAMAGED
    aside.mkdir(exist_ok=True)
    target = aside / path.name
    n = 1
    while target.exists():
        n += 1
        target = aside / f"{path.name}.{n}"
    os.rename(path, target)
    _fsync_dir(root)
    return target


@dataclass
class ResumeScan:
    """What rank 0 found and did in the checkpoint folder before resuming."""

    latest: CheckpointInfo | None = None  # the newest intact checkpoint
    removed: list[Path] = field(default_factory=list)  # our interrupted saves, deleted
    foreign: list[Path] = field(default_factory=list)  # not ours: left alone
    damaged: list[tuple[Path, Path, str]] = field(default_factory=list)  # (was, now, why)

    @property
    def none_intact(self) -> bool:
        """Complete checkpoints existed and every one of them is damaged."""
        return self.latest is None and bool(self.damaged)


def prepare_resume(root: Path) -> ResumeScan:
    """Rank 0, holding the lease: clean our leftovers, then check our `step_N` folders newest
    first and move each damaged one aside (no readable COMPLETE.json: a renamed folder always
    had one), until an intact one is found. Older ones are neither read nor moved."""
    scan = ResumeScan()
    scan.removed, scan.foreign = clean_incomplete(root)
    foreign = set(scan.foreign)
    ours = [
        p
        for p in (root.iterdir() if root.is_dir() else [])
        if _STEP_DIR.match(p.name) and p.is_dir() and p not in foreign
    ]
    for path in sorted(ours, key=lambda p: int(p.name.split("_")[1]), reverse=True):
        meta = read_marker(path)
        if meta is None:
            problem: str | None = f"{MARKER} is missing or unreadable"
        else:
            info = CheckpointInfo(path=path, step=int(meta["step"]), meta=meta)
            problem = verify(info)
            if problem is None:
                scan.latest = info
                break
        scan.damaged.append((path, move_aside(root, path), problem or ""))
    if scan.damaged and scan.latest is not None:
        write_atomic(root / LATEST, scan.latest.path.name + "\n")
    return scan


def record_final_failure(root: Path, code: int, reason: str) -> None:
    """Make every later launch on this folder exit at once with `code` (`final_failure`)."""
    record = {"exit_code": code, "reason": reason, "time": time.time()}
    write_atomic(root / FAILED, json.dumps(record, indent=1, sort_keys=True))


def final_failure(root: Path, *, unreadable_code: int) -> tuple[int, str] | None:
    """(exit code, reason) of a recorded final failure in this folder, else None; a record
    that cannot be read is still final (`unreadable_code`), never a crash that loops."""
    try:
        if not os.path.lexists(root / FAILED):
            return None
        record = _read_record(root / FAILED)
        return int(record["exit_code"]), str(record["reason"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError, fileio.PathError):
        return unreadable_code, f"{root / FAILED} is unreadable"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write-then-rename, so readers see the old or the new content, never a torn file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


@dataclass
class _Pending:
    step: int
    tmp: Path
    meta: dict[str, Any]
    started: float
    blocking_s: float
    is_async: bool
    upload: Future[Any] | None = None  # async: the shards are written (DCP's upload future)
    staging: Future[Any] | None = None  # async: the state is copied off the training tensors
    finalized: Future[None] | None = None  # rank 0: marker, rename, `latest`, retention done


def build_stager(*, on_gpu: bool) -> AsyncStager:
    """The stager for async saves: copies the state dict off the training tensors in a thread.

    On GPUs into pinned host memory with non-blocking copies on a side stream (the buffers are
    cached by the stager and reused by every later save). On CPU tensors pinned memory and
    non-blocking copies need an accelerator, so the copy is a plain one, still in the thread.
    Either way the copy may still run when `async_save` returns: the caller must wait for the
    staging future before anything changes those tensors (the optimizer step).
    """
    return DefaultStager(
        StagingOptions(
            use_pinned_memory=on_gpu,
            use_shared_memory=False,
            use_async_staging=True,
            use_non_blocking_copy=on_gpu,
        )
    )


class Checkpointer:
    """Saves (sync or async) and finalises checkpoints; rank 0 owns every rename and delete.

    `group` should be a gloo group used for nothing else: async saves run DCP's collectives from
    a background thread, which must not interleave with the training loop's collectives.

    Finalising (size, marker, rename, `latest`, retention) runs on rank 0 in its own thread, so
    the training loop never waits for file-system metadata operations or the deletion of old
    checkpoints; the next save and the exit wait for it.
    """

    def __init__(
        self,
        root: Path,
        *,
        keep_last: int,
        async_save: bool,
        group: dist.ProcessGroup,
        rank: int,
        emit: Emit,
        before_marker: Callable[[int], None] = lambda step: None,
        stager: AsyncStager | None = None,
        still_holder: Callable[[], bool] = lambda: True,
    ) -> None:
        self.root = root
        self.keep_last = keep_last
        self.async_save = async_save
        self.group = group
        self.rank = rank
        self.emit = emit
        self.before_marker = before_marker
        self.stager = stager
        self.still_holder = still_holder
        self.pending: _Pending | None = None
        self.last_step: int | None = None  # saved or loaded; never saved twice
        self._finalizer = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-finalize")
            if rank == 0
            else None
        )

    def save(
        self, step: int, state_dict: dict[str, Any], meta: dict[str, Any], *, blocking: bool
    ) -> None:
        """Checkpoint `step`; blocking saves (on exit) are finished before this returns."""
        self.wait()
        if step == self.last_step:
            return
        tmp = self.root / f"{step_dir_name(step)}.tmp"
        # Rank 0 prepares the folder (owner file first) and tells everyone whether it may: a
        # folder of that name that we did not write is never touched, so that save is skipped.
        blocked: list[str | None] = [None]
        if self.rank == 0:
            blocked[0] = self._prepare(step, tmp)
        dist.broadcast_object_list(blocked, src=0, group=self.group)  # also the barrier
        if blocked[0] is not None:
            self.emit("checkpoint_skipped", step=step, reason=blocked[0])
            return
        started = time.monotonic()
        if self.async_save and not blocking:
            response = state_dict_saver.async_save(
                state_dict,
                checkpoint_id=str(tmp),
                process_group=self.group,
                async_stager=self.stager,
            )
            if isinstance(response, AsyncSaveResponse):
                upload, staging = response.upload_completion, response.staging_completion
            else:  # staging finished inside async_save (a synchronous stager)
                upload, staging = response, None
            pending = _Pending(
                step, tmp, meta, started, time.monotonic() - started, True, upload, staging
            )
        else:
            state_dict_saver.save(state_dict, checkpoint_id=str(tmp), process_group=self.group)
            pending = _Pending(step, tmp, meta, started, time.monotonic() - started, False)
        if self._finalizer is not None:
            pending.finalized = self._finalizer.submit(self._finish, pending)
        self.pending = pending
        self.last_step = step
        if blocking:
            self.wait()

    def _prepare(self, step: int, tmp: Path) -> str | None:
        final = self.root / step_dir_name(step)
        for path in (tmp, final):
            if path.exists() and not is_ours(path):
                return f"{path} exists and was not written by the trainer: left alone"
        if tmp.exists():
            remove_owned(tmp)
        tmp.mkdir(parents=True)
        write_owner(tmp, step)
        return None

    def wait_for_staging(self) -> float:
        """Block until an async save has copied the state off the training tensors.

        Call before anything modifies them (the optimizer step). Does not wait for the write.
        Returns the seconds waited, which count as time the save blocked training.
        """
        pending = self.pending
        if pending is None or pending.staging is None:
            return 0.0
        started = time.monotonic()
        pending.staging.result()
        waited = time.monotonic() - started
        pending.blocking_s += waited
        pending.staging = None
        return waited

    def poll(self) -> None:
        """Drop a save that is completely done (and raise its error, if it failed)."""
        pending = self.pending
        if pending is None:
            return
        done = pending.finalized if pending.finalized is not None else pending.upload
        if done is None or done.done():
            self.wait()

    def wait(self) -> None:
        """Block until the in-flight save (if any) is written and, on rank 0, finalised."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.staging is not None:
            pending.staging.result()
        if pending.upload is not None:
            pending.upload.result()
        if pending.finalized is not None:
            pending.finalized.result()

    def close(self) -> None:
        self.wait()
        if self._finalizer is not None:
            self._finalizer.shutdown(wait=True)
        if self.stager is not None:
            self.stager.close()

    def _finish(self, pending: _Pending) -> None:
        """Rank 0's finalizer thread: wait for the shards of every rank, then finalise."""
        if pending.upload is not None:
            # DCP's coordinator (rank 0) writes .metadata only after every rank reported its
            # writes, so rank 0's own upload being done means all shards are on disk.
            pending.upload.result()
        self._finalize(pending)

    def _finalize(self, pending: _Pending) -> None:
        self.before_marker(pending.step)
        if not self.still_holder():
            # Another job took the folder over (lease.py): leave the .tmp, touch nothing else.
            return
        name = step_dir_name(pending.step)
        files = file_sizes(pending.tmp)
        size = sum(files.values())
        marker = {
            **pending.meta,
            "step": pending.step,
            "bytes": size,
            "files": files,  # what verify() checks before a resume
            "time": time.time(),
        }
        write_atomic(pending.tmp / MARKER, json.dumps(marker, indent=1, sort_keys=True))
        final = self.root / name
        if final.exists():  # a stale folder of ours from an abandoned timeline (resume: false)
            if not is_ours(final):  # appeared since save() looked: leave both
                self.emit("checkpoint_skipped", step=pending.step, reason=f"{final} is not ours")
                return
            remove_owned(final)
        os.rename(pending.tmp, final)
        _fsync_dir(self.root)
        write_atomic(self.root / LATEST, name + "\n")
        removed = self._prune()
        self.emit(
            "checkpoint",
            step=pending.step,
            path=str(final),
            bytes=size,
            seconds=round(time.monotonic() - pending.started, 4),
            blocking_seconds=round(pending.blocking_s, 4),
            async_save=pending.is_async,
            pruned=[p.name for p in removed],
        )

    def _prune(self) -> list[Path]:
        found = complete_checkpoints(self.root)
        doomed = [info.path for info in found[: max(0, len(found) - self.keep_last)]]
        for path in doomed:
            # Renamed first (atomic): a pruning cut short is a `.old` leftover, not a damaged
            # checkpoint; then the marker first and the owner file last.
            pruning = path.with_name(f"{path.name}.old")
            if pruning.is_dir() and is_ours(pruning):
                remove_owned(pruning)
            os.rename(path, pruning)
            remove_owned(pruning)
        return doomed

    def load(self, info: CheckpointInfo, state_dict: dict[str, Any]) -> None:
        """Load `state_dict`'s keys (all or a subset of the checkpoint's) in place."""
        state_dict_loader.load(state_dict, checkpoint_id=str(info.path), process_group=self.group)
        self.last_step = info.step
