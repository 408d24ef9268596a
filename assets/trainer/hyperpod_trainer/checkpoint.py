"""Crash-safe checkpoint layout on a shared file system, written with PyTorch DCP.

    <dir>/step_000120/            complete: DCP shards + .metadata + COMPLETE.json
    <dir>/step_000123.tmp/        being written (or abandoned by a crash)
    <dir>/latest                  "step_000120", replaced atomically

A save writes into ``step_N.tmp/``; only when every rank's shards and DCP's ``.metadata`` are on
disk does rank 0 write ``COMPLETE.json``, rename the folder to ``step_N/`` and then swap
``latest``. A crash at any point leaves the previous complete checkpoint untouched, and the next
launch deletes leftovers. Retention deletes a folder's marker first, so a half-deleted folder is
never mistaken for a complete one. One job per checkpoint directory (lease.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

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
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier(group=self.group)
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
        """Load `state_dict`'s keys (all or a subset of the checkpoint's) in place."""
        state_dict_loader.load(state_dict, checkpoint_id=str(info.path), process_group=self.group)
        self.last_step = info.step
