"""Per-step records: JSON lines on stdout (rank 0), optional events file, TensorBoard / MLflow,
sample ids.

JSON lines because every consumer (a person tailing a Slurm log, CloudWatch, the tests and the
benchmark) can read them without this package. TensorBoard and MLflow are imported lazily and
are optional: a missing package is one warning, never a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import threading
from pathlib import Path
from typing import IO, Any

from .config import MetricsConfig
from .lease import job_file_name


def info(message: str, *, rank: int) -> None:
    """Human-readable progress on stderr, rank 0 only, so stdout stays machine-readable."""
    if rank == 0:
        print(f"hyperpod_trainer: {message}", file=sys.stderr, flush=True)


class Metrics:
    def __init__(self, cfg: MetricsConfig, *, rank: int, stream: IO[str] | None = None) -> None:
        self.cfg = cfg
        self.rank = rank
        self.stream = stream or sys.stdout
        self._tb: Any = None
        self._mlflow: Any = None
        self._events: IO[str] | None = None
        self._lock = threading.Lock()  # checkpoint events come from the finalizer thread
        if rank == 0:
            self._open_sinks()

    def _open_sinks(self) -> None:
        if self.cfg.events_file:
            path = self.cfg.events_file.replace("{job_id}", job_file_name())
            try:
                self._events = open_events_file(path)
            except OSError as e:
                info(f"metrics.events_file {path} not written: {e.strerror or e}", rank=0)
        if self.cfg.tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                info("tensorboard is not installed; metrics.tensorboard_dir ignored", rank=0)
            else:
                self._tb = SummaryWriter(log_dir=self.cfg.tensorboard_dir)
        if self.cfg.mlflow:
            try:
                import mlflow
            except ImportError:
                info("mlflow is not installed; metrics.mlflow ignored", rank=0)
            else:
                mlflow.set_experiment(self.cfg.mlflow_experiment)
                mlflow.start_run()
                self._mlflow = mlflow

    def event(self, name: str, **fields: Any) -> None:
        if self.rank == 0:
            line = json.dumps({"event": name, **fields}) + "\n"
            with self._lock:
                self.stream.write(line)
                self.stream.flush()
                if self._events is not None:
                    try:
                        self._events.write(line)
                        self._events.flush()
                    except OSError as e:  # a full disk must not stop training
                        info(f"metrics.events_file: {e}; no more events written there", rank=0)
                        self._close_events()

    def step(self, step: int, fields: dict[str, Any]) -> None:
        if step % self.cfg.log_every:
            return
        self.event("step", step=step, **fields)
        numeric = {k: float(v) for k, v in fields.items() if isinstance(v, int | float)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(f"train/{key}", value, step)
        if self._mlflow is not None:
            self._mlflow.log_metrics(numeric, step=step)

    def evaluation(self, step: int, fields: dict[str, Any]) -> None:
        """A held-out evaluation (evaluate.py): an "eval" line, and eval/* in TensorBoard/MLflow."""
        self.event("eval", step=step, **fields)
        numeric = {k: float(v) for k, v in fields.items() if isinstance(v, int | float)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(f"eval/{key}", value, step)
        if self._mlflow is not None:
            self._mlflow.log_metrics({f"eval_{k}": v for k, v in numeric.items()}, step=step)

    def _close_events(self) -> None:
        events, self._events = self._events, None
        if events is not None:
            with contextlib.suppress(OSError):
                events.close()

    def close(self) -> None:
        with self._lock:
            self._close_events()
        if self._tb is not None:
            self._tb.close()
        if self._mlflow is not None:
            self._mlflow.end_run()


def open_events_file(path: str) -> IO[str]:
    """Append to `path`, which may sit in a folder other users write to (the node's spool):
    never through a link, and only to a regular file of our own. A restart of the job appends.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise OSError(0, "not a regular file of this user's (left alone)")
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


class SampleLog:
    """Appends `{"step", "rank", "world_size", "ids"}` per step, so tests can audit the data order.

    One file per rank (no collective needed); lines are flushed per step so a SIGKILL loses at
    most the step being written.
    """

    def __init__(self, directory: str | None, *, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self._file: IO[str] | None = None
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
            self._file = (Path(directory) / f"samples-rank{rank}.jsonl").open("a")

    def record(self, step: int, ids: list[int]) -> None:
        if self._file is not None:
            line = {"step": step, "rank": self.rank, "world_size": self.world_size, "ids": ids}
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
