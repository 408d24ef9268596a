"""One job per checkpoint folder: a lease with the job's identity and a generation number.

A copy-pasted job file started on the same `checkpoint.dir` would otherwise interleave its
checkpoints with the first job's and each would resume the other's. The lease lives in
``<dir>/.lease/gen-<N>.json``; the newest generation is the holder. Rank 0 of a job:

- takes generation N+1 if there is no lease, if the holder is the same job (a restart by torchrun,
  Slurm `--auto-resume`, a requeue), if the holder released it at a clean exit, or if the holder
  is gone: its heartbeat is older than `timeout_s` by the wall clock, or did not move while this
  job watched it for `timeout_s` (which needs no agreement between the nodes' clocks);
- otherwise refuses, naming the holder;
- renews its generation from a background thread every `timeout_s / 4`, and notices when a newer
  generation appeared (another job decided it was gone), after which it must stop writing.

A generation file is created with `link(2)`, which fails if the name exists, so two jobs that
decide at the same moment cannot both take generation N+1 (POSIX, including Lustre). Renewals
replace the file by rename, so readers never see a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

LEASE_DIR = ".lease"
_GEN_FILE = re.compile(r"^gen-(\d{6,})\.json$")

# Where the job's identity comes from, most specific first. A restart of the same job keeps it
# (Slurm keeps SLURM_JOB_ID across --auto-resume and requeue; set HYPERPOD_TRAINER_JOB_ID from
# the job's name on EKS); a second submission of the same file gets another one.
JOB_ID_VARIABLES = ("HYPERPOD_TRAINER_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


def _job_source(env: dict[str, str] | None) -> tuple[str, str]:
    env = dict(os.environ) if env is None else env
    for name in JOB_ID_VARIABLES:
        value = env.get(name, "")
        if value and value != "none":  # torchrun's default --rdzv-id is the literal "none"
            return name, value
    return "host", socket.gethostname()


def job_identity(env: dict[str, str] | None = None) -> str:
    """The job this process belongs to; the host name when no launcher says (a laptop)."""
    name, value = _job_source(env)
    return f"{name}={value}"


def job_file_name(env: dict[str, str] | None = None) -> str:
    """The job's id as one safe file-name component (what "{job_id}" in a path becomes)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "_", _job_source(env)[1])[:120].lstrip("._-")
    return value or "job"


@dataclass(frozen=True)
class LeaseRecord:
    job_id: str
    generation: int
    host: str
    pid: int
    acquired_at: float
    renewed_at: float
    beats: int
    released: bool = False

    def describe(self, now: float) -> str:
        state = "released" if self.released else f"renewed {now - self.renewed_at:.0f} s ago"
        return (
            f"job {self.job_id} (host {self.host}, pid {self.pid}, generation {self.generation}, "
            f"{state})"
        )


class LeaseHeldError(Exception):
    """Another live job holds the folder."""


def _write(path: Path, record: LeaseRecord) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w") as f:
        json.dump(asdict(record), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _create_exclusive(path: Path, record: LeaseRecord) -> bool:
    """Create `path` with `record` only if it does not exist yet (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    with tmp.open("w") as f:
        json.dump(asdict(record), f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


class Lease:
    def __init__(
        self,
        root: Path,
        *,
        job_id: str,
        timeout_s: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.dir = root / LEASE_DIR
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.record: LeaseRecord | None = None
        self.lost: str | None = None  # why this job no longer holds the lease
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- reading --------------------------------------------------------------------------------

    def _generations(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        found = (_GEN_FILE.match(p.name) for p in self.dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def _path(self, generation: int) -> Path:
        return self.dir / f"gen-{generation:06d}.json"

    def _read(self, generation: int) -> LeaseRecord | None:
        try:
            return LeaseRecord(**json.loads(self._path(generation).read_text()))
        except (OSError, ValueError, TypeError):
            return None  # deleted meanwhile by a newer holder, or not a lease file

    def holder(self) -> LeaseRecord | None:
        gens = self._generations()
        return self._read(gens[-1]) if gens else None

    # -- taking ---------------------------------------------------------------------------------

    def _gone(self, holder: LeaseRecord) -> bool:
        """True when the holder is this job, released the lease, or stopped renewing it."""
        if holder.job_id == self.job_id or holder.released:
            return True
        if self.clock() - holder.renewed_at > self.timeout_s:
            return True
        # Its clock may differ from ours: watch the heartbeat counter with our own clock.
        deadline = self.monotonic() + self.timeout_s
        while self.monotonic() < deadline:
            self.sleep(min(1.0, self.timeout_s / 8))
            now = self._read(holder.generation)
            if now is None or now.beats != holder.beats or now.released:
                # Renewed: alive, unless it released or a newer generation replaced it.
                return now is None or now.released
        return True

    def acquire(self) -> LeaseRecord:
        """Take the next generation, or raise LeaseHeldError naming the live holder."""
        self.dir.mkdir(parents=True, exist_ok=True)
        while True:
            gens = self._generations()
            previous = gens[-1] if gens else 0
            holder = self._read(previous) if previous else None
            if holder is not None and not self._gone(holder):
                raise LeaseHeldError(holder.describe(self.clock()))
            if previous and previous != self._generations()[-1]:
                continue  # someone took a newer generation while we watched: look again
            now = self.clock()
            record = LeaseRecord(
                job_id=self.job_id,
                generation=previous + 1,
                host=socket.gethostname(),
                pid=os.getpid(),
                acquired_at=now,
                renewed_at=now,
                beats=0,
            )
            if _create_exclusive(self._path(record.generation), record):
                self.record = record
                for old in gens:  # best effort; the newest generation decides anyway
                    self._path(old).unlink(missing_ok=True)
                return record

    # -- holding --------------------------------------------------------------------------------

    def check(self) -> bool:
        """Still the holder? Sets `lost` (and returns False) once a newer generation exists."""
        with self._lock:
            if self.record is None:
                return False
            if self.lost is None:
                gens = self._generations()
                newest = gens[-1] if gens else 0
                if newest != self.record.generation:
                    other = self._read(newest)
                    who = other.describe(self.clock()) if other else f"generation {newest}"
                    self.lost = f"the lease on {self.dir.parent} was taken over by {who}"
            return self.lost is None

    def renew(self) -> None:
        with self._lock:
            record = self.record
        if record is None or not self.check():
            return
        renewed = replace(record, renewed_at=self.clock(), beats=record.beats + 1)
        _write(self._path(record.generation), renewed)
        with self._lock:
            self.record = renewed

    def start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.timeout_s / 4):
                # A slow or flaky file system: try again next beat; the expiry is generous.
                with contextlib.suppress(OSError):
                    self.renew()

        self._thread = threading.Thread(target=beat, name="checkpoint-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """At a clean exit: stop renewing and mark the lease free for the next job at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            record = self.record
        if record is not None and self.check():
            _write(self._path(record.generation), replace(record, released=True))
