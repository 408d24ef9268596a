"""Crash-safe checkpoint layout on a shared file system, written with PyTorch DCP.

    <dir>/step_000120/            complete: DCP shards + .metadata + COMPLETE.json
    <dir>/step_000123.tmp/        being written (or abandoned by a crash)
    <dir>/latest                  "step_000120", replaced atomically

A save writes into ``step_N.tmp/``; only when every rank's shards and DCP's ``.metadata`` are on
disk does rank 0 write ``COMPLETE.json``, rename the folder to ``step_N/`` and then swap
``latest``. A crash at any point leaves the previous complete checkpoint untouched, and the next
launch deletes leftovers. Retention deletes a folder's marker first, so a half-deleted folder is
never mistaken for a complete one. One job per checkpoint directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver

MARKER = "COMPLETE.json"
LATEST = "latest"
DCP_METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_DIR = re.compile(r"^step_(\d+)\.tmp$")

Emit = Callable[..., None]


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    meta: dict[str, Any]


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / DCP_METADATA).is_file()


def read_info(path: Path) -> CheckpointInfo:
    meta = json.loads((path / MARKER).read_text())
    return CheckpointInfo(path=path, step=int(meta["step"]), meta=meta)


def complete_checkpoints(root: Path) -> list[CheckpointInfo]:
    """Complete checkpoints, oldest first."""
    if not root.is_dir():
        return []
    found = [read_info(p) for p in root.iterdir() if _STEP_DIR.match(p.name) and is_complete(p)]
    return sorted(found, key=lambda info: info.step)


def find_latest(root: Path) -> CheckpointInfo | None:
    """The newest complete checkpoint.

    Decided by the markers, not by `latest`: if a crash fell between the rename and the pointer
    update, the newer folder is complete and is the right one to resume. `latest` exists for
    people and tools (`cat latest`), and is only ever swapped to a complete folder.
    """
    found = complete_checkpoints(root)
    return found[-1] if found else None


def clean_incomplete(root: Path) -> list[Path]:
    """Delete `.tmp` folders and marker-less step folders left by a crash (rank 0, at start)."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for path in root.iterdir():
        abandoned = _TMP_DIR.match(path.name) or (
            _STEP_DIR.match(path.name) and not (path / MARKER).is_file()
        )
        if abandoned and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    for stray in root.glob(f"{LATEST}.*.tmp"):
        stray.unlink(missing_ok=True)
    return removed


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


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class _Pending:
    step: int
    tmp: Path
    future: Future[Any]
    meta: dict[str, Any]
    started: float
    blocking_s: float
    is_async: bool


class Checkpointer:
    """Saves (sync or async) and finalises checkpoints; rank 0 owns every rename and delete.

    `group` should be a gloo group used for nothing else: async saves run DCP's collectives from
    a background thread, which must not interleave with the training loop's collectives.
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
    ) -> None:
        self.root = root
        self.keep_last = keep_last
        self.async_save = async_save
        self.group = group
        self.rank = rank
        self.emit = emit
        self.before_marker = before_marker
        self.pending: _Pending | None = None
        self.last_step: int | None = None  # saved or loaded; never saved twice

    def save(
        self, step: int, state_dict: dict[str, Any], meta: dict[str, Any], *, blocking: bool
    ) -> None:
        """Checkpoint `step`; blocking saves (on exit) are finished before this returns."""
        self.wait()
        if step == self.last_step:
            return
        tmp = self.root / f"{step_dir_name(step)}.tmp"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier(group=self.group)
        started = time.monotonic()
        if self.async_save and not blocking:
            response = state_dict_saver.async_save(
                state_dict, checkpoint_id=str(tmp), process_group=self.group
            )
            # Newer torch may return an AsyncSaveResponse; the upload future is what matters.
            future = cast(Future[Any], getattr(response, "upload_completion", response))
            self.pending = _Pending(
                step, tmp, future, meta, started, time.monotonic() - started, is_async=True
            )
        else:
            state_dict_saver.save(state_dict, checkpoint_id=str(tmp), process_group=self.group)
            elapsed = time.monotonic() - started
            self._finalize(_Pending(step, tmp, Future(), meta, started, elapsed, is_async=False))
        self.last_step = step

    def poll(self) -> None:
        """Finalise a finished async save without waiting (called once per step)."""
        if self.pending is not None and self.pending.future.done():
            self.wait()

    def wait(self) -> None:
        """Block until the in-flight async save (if any) is written and finalised."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.future.result()
            self._finalize(pending)

    def _finalize(self, pending: _Pending) -> None:
        if self.rank != 0:
            return
        self.before_marker(pending.step)
        name = step_dir_name(pending.step)
        size = dir_bytes(pending.tmp)
        marker = {**pending.meta, "step": pending.step, "bytes": size, "time": time.time()}
        write_atomic(pending.tmp / MARKER, json.dumps(marker, indent=1, sort_keys=True))
        final = self.root / name
        if final.exists():  # a stale folder from an abandoned timeline (resume: false)
            (final / MARKER).unlink(missing_ok=True)
            shutil.rmtree(final)
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
            (path / MARKER).unlink(missing_ok=True)  # first: never "complete" while half-deleted
            shutil.rmtree(path, ignore_errors=True)
        return doomed

    def load(self, info: CheckpointInfo, state_dict: dict[str, Any]) -> None:
        state_dict_loader.load(state_dict, checkpoint_id=str(info.path), process_group=self.group)
        self.last_step = info.step
