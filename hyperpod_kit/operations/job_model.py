"""What `hyperpod-kit job` knows of a job, whichever scheduler runs it (docs/jobs.md).

The Slurm side (`operations.slurm_jobs`) reads squeue, `scontrol show job -o` and, where the
cluster keeps accounting, sacct; the EKS side (`operations.eks_jobs`) reads the HyperPodPyTorchJob
and its pods through the Kubernetes API. Both add the trainer's own progress, read from the JSON
lines rank 0 prints (hyperpod_trainer.metrics): `read_progress`. Light: the standard library only,
so a Studio space runs it with the package installed `--no-deps` (docs/install.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO


class JobError(Exception):
    """A job command that cannot go on: an unknown job, no cluster, no credentials, a scheduler
    that refused. One line, which the CLI prints as it is (exit 2)."""


@dataclass(frozen=True)
class Progress:
    """The trainer's progress from its JSON lines: the newest step and evaluation, the newest
    checkpoint, how often it resumed, and how it ended (its `exit` event), if it did."""

    step: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    last_checkpoint: int | None = None
    restarts: int = 0
    eval_loss: float | None = None
    eval_step: int | None = None
    exit: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step, "loss": self.loss, "tokens_per_s": self.tokens_per_s,
            "last_checkpoint": self.last_checkpoint, "restarts": self.restarts,
            "eval_loss": self.eval_loss, "eval_step": self.eval_step, "exit": self.exit,
        }  # fmt: skip


def read_progress(lines: Iterable[str]) -> Progress | None:
    """The progress in a job's output: its lines that are trainer events (a JSON object with an
    "event" key); every other line (torchrun's, Slurm's, a half-written last line) is skipped.
    None when there is no event yet. A restart is a `resume` event after the first start."""
    step = loss = tokens = checkpoint = eval_loss = eval_step = exit_event = None
    resumes, seen = 0, False
    for line in lines:
        text = line.strip()
        if not text.startswith("{") or '"event"' not in text:
            continue
        try:
            event = json.loads(text)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        seen = True
        kind = event.get("event")
        if kind == "step":
            step, loss, tokens = event.get("step"), event.get("loss"), event.get("tokens_per_s")
        elif kind == "checkpoint":
            checkpoint = event.get("step")
        elif kind == "resume":
            resumes += 1
        elif kind == "eval":
            eval_step, eval_loss = event.get("step"), event.get("loss")
        elif kind == "exit":
            exit_event = {k: v for k, v in event.items() if k != "event"}
    if not seen:
        return None
    return Progress(
        step=_int(step), loss=_float(loss), tokens_per_s=_float(tokens),
        last_checkpoint=_int(checkpoint), restarts=resumes, eval_loss=_float(eval_loss),
        eval_step=_int(eval_step), exit=exit_event,
    )  # fmt: skip


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class JobRecord:
    """One job as `list` and `show` print it.

    `state`: the scheduler's own word (Slurm's PENDING, RUNNING, COMPLETED, FAILED, CANCELLED,
    TIMEOUT, NODE_FAIL, ...; EKS: the HyperPodPyTorchJob's newest condition, Created, Running,
    Succeeded, Failed, or Pending before it has one). `where`: the partition or namespace.
    `output`: the job's output file as this machine reads it (Slurm; None on EKS, whose output is
    the pods' logs). `history`: with Slurm accounting, sacct's rows of the job (steps, requeues);
    empty without it. `progress`: the trainer's, None when it printed nothing yet."""

    id: str
    name: str
    state: str
    user: str | None = None
    where: str | None = None
    nodes: int | None = None
    reason: str | None = None
    submitted: str | None = None
    started: str | None = None
    ended: str | None = None
    exit_code: str | None = None
    output: str | None = None
    history: tuple[dict[str, str], ...] = ()
    progress: Progress | None = None
    details: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "state": self.state, "user": self.user,
            "where": self.where, "nodes": self.nodes, "reason": self.reason,
            "submitted": self.submitted, "started": self.started, "ended": self.ended,
            "exit_code": self.exit_code, "output": self.output, "history": list(self.history),
            "progress": self.progress.as_json() if self.progress else None,
            "details": dict(self.details),
        }  # fmt: skip


@dataclass(frozen=True)
class Capacity:
    """What a job would start on: `free` of `total` nodes (Slurm: idle nodes of the partition;
    EKS: ready nodes of the instance type with no training pod), and a line saying what was
    read."""

    free: int
    total: int
    detail: str


class Scheduler(Protocol):
    """The job commands' view of a cluster (`SlurmJobs`, `EksJobs`)."""

    kind: str  # "slurm" or "eks"

    def submit(self, text: str, *, filename: str, folder: Path) -> str:
        """Write the rendered job `text` as `folder/filename` and submit it; the job's id."""
        ...

    def jobs(self, *, everyone: bool = False) -> list[JobRecord]:
        """This user's jobs (`everyone`: all users'), newest first, with their progress."""
        ...

    def job(self, job_id: str) -> JobRecord:
        """One job, running or finished (`JobError` when the scheduler knows no such job)."""
        ...

    def logs(self, job_id: str, *, follow: bool, out: TextIO, poll_s: float = 2.0) -> None:
        """Copy the job's output to `out`; with `follow`, keep copying until the job ends."""
        ...

    def cancel(self, job_id: str) -> None:
        """Stop the job (`JobError` when it is unknown)."""
        ...

    def capacity(self, where: str | None) -> Capacity | None:
        """Free and total nodes where the job would run; None when it cannot be read."""
        ...


def output_lines(path: Path, *, limit: int = 8 << 20) -> list[str]:
    """The last `limit` bytes of a job's output file as lines (the first, maybe partial, line
    dropped when the file is longer); empty when it does not exist (yet)."""
    try:
        with path.open("rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(max(0, size - limit))
            data = stream.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > limit else lines
