"""Harness for the trainer's integration tests: real `torchrun` launches on CPU with gloo.

Every launch binds its rendezvous to 127.0.0.1 on a free port, uses one OpenMP thread per rank
(two cores, several ranks) and keeps stderr in a file so a chatty torchrun can never block the
stdout pipe that carries rank 0's JSON lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hyperpod_trainer.local import torchrun_command, torchrun_node_command

# The shared training recipe: global batch 12 splits as micro 2 x 2 ranks x 3, x 1 rank x 6 and
# x 3 ranks x 2, so the same job can run on 1, 2 or 3 ranks. The LR is high on purpose: the loss
# must move, or "equal losses after resume" would prove little.
STEPS = 12
GLOBAL_BATCH = 12
RECIPE = [
    "model.preset=tiny",
    "data.source=synthetic",
    "data.seq_len=32",
    f"train.steps={STEPS}",
    f"train.global_batch_size={GLOBAL_BATCH}",
    "train.micro_batch_size=2",
    "train.seed=7",
    "optim.lr=5e-3",
    "optim.min_lr=5e-4",
    "optim.warmup_steps=2",
]

LAUNCH_TIMEOUT_S = 180
# Words of the small texts the tokenizer tests train on and encode (prepare-data, fine-tuning).
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "trainer: runs real torchrun processes on CPU")


# Every launch of a test is the same job restarted (as Slurm --auto-resume or a requeue would),
# unless a test says otherwise: the checkpoint folder's lease lets it take over at once.
JOB_ID = "pytest-job"


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONUNBUFFERED="1",
        TORCH_ELASTIC_SHUTDOWN_TIMEOUT="20",
        HYPERPOD_TRAINER_JOB_ID=JOB_ID,
    )
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"):
        env.pop(var, None)
    env.update(extra or {})
    return env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def of(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    def losses(self) -> dict[int, float]:
        return {e["step"]: e["loss"] for e in self.of("step")}

    def explain(self) -> str:
        return (
            f"rc={self.returncode}\n--- stdout\n{self.stdout[-4000:]}\n"
            f"--- stderr\n{self.stderr[-6000:]}"
        )


def parse_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"event"')]


class Running:
    """A torchrun launch in flight, so a test can watch its steps and signal it."""

    def __init__(self, cmd: list[str], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = workdir / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=trainer_env(env),
        )
        self.lines: list[str] = []

    def wait_for_step(self, step: int, timeout: float = LAUNCH_TIMEOUT_S) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith('{"event": "step"') and json.loads(line)["step"] >= step:
                return
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"never reached step {step}:\n{''.join(self.lines)[-3000:]}")

    def descendants(self, *, depth: int) -> list[int]:
        """Processes under torchrun, found through /proc: depth 1 = the ranks, 2 = their
        DataLoader workers too."""
        parent_of: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parent_of[int(stat.parent.name)] = int(fields[1])
        found, level = [], [self.proc.pid]
        for _ in range(depth):
            level = [pid for pid, ppid in parent_of.items() if ppid in level]
            found += level
        return found

    def signal_workers(self, sig: signal.Signals, *, depth: int = 1) -> None:
        """Signal the ranks (depth 1), or every process below torchrun like Slurm (depth 2)."""
        pids = self.descendants(depth=depth)
        assert pids, "no worker processes found"
        for pid in pids:
            os.kill(pid, sig)

    def kill_job(self) -> None:
        """SIGKILL torchrun and every rank at once, as when a node disappears.

        torchrun starts each rank in its own session, so killing its process group would
        leave the ranks running: kill every process below it by pid, then torchrun.
        """
        for pid in [*self.descendants(depth=3), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def finish(self, timeout: float = LAUNCH_TIMEOUT_S) -> Result:
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        self._stderr.close()
        stdout = "".join(self.lines) + (rest or "")
        return Result(
            self.proc.returncode, stdout, self.stderr_path.read_text(), parse_events(stdout)
        )


def read_sample_log(directory: Path) -> dict[int, list[int]]:
    """step -> sample ids consumed in that step by all ranks; a step logged twice is an error."""
    by_step: dict[int, list[int]] = {}
    seen: set[tuple[int, int]] = set()
    for path in sorted(directory.glob("samples-rank*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (record["step"], record["rank"])
            assert key not in seen, f"step {key[0]} logged twice by rank {key[1]}"
            seen.add(key)
            by_step.setdefault(record["step"], []).extend(record["ids"])
    return by_step


@dataclass(frozen=True)
class Reference:
    """The uninterrupted 2-rank run every interrupted run is compared with."""

    losses: dict[int, float]
    samples: dict[int, list[int]]


@dataclass
class Harness:
    """What the tests get: the shared recipe and ways to launch and inspect runs."""

    workdir: Path
    steps: int = STEPS
    global_batch: int = GLOBAL_BATCH
    recipe: tuple[str, ...] = tuple(RECIPE)

    def start(self, nproc: int, sets: list[str], env: dict[str, str] | None = None) -> Running:
        return Running(torchrun_command(nproc, sets), self.workdir, env)

    def start_node(
        self, nnodes: int, node_rank: int, nproc: int, port: int, sets: list[str]
    ) -> Running:
        """One node of a multi-node job on loopback (static rendezvous on `port`)."""
        return Running(torchrun_node_command(nnodes, node_rank, nproc, port, sets), self.workdir)

    def launch(self, nproc: int, sets: list[str], env: dict[str, str] | None = None) -> Result:
        return self.start(nproc, sets, env).finish()

    def with_recipe(self, *sets: str) -> list[str]:
        return [*self.recipe, *sets]

    @staticmethod
    def read_samples(directory: Path) -> dict[int, list[int]]:
        return read_sample_log(directory)

    @staticmethod
    def direct(args: list[str], timeout: float = 60, env: dict[str, str] | None = None) -> Result:
        """`python -m hyperpod_trainer ARGS` without torchrun (a world of one)."""
        proc = subprocess.run(
            [sys.executable, "-m", "hyperpod_trainer", *args],
            capture_output=True,
            text=True,
            env=trainer_env(env),
            timeout=timeout,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr, parse_events(proc.stdout))


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    work = tmp_path_factory.mktemp("reference")
    cmd = torchrun_command(2, [*RECIPE, f"data.sample_log_dir={work / 'samples'}"])
    result = Running(cmd, work).finish()
    assert result.returncode == 0, result.explain()
    losses = result.losses()
    assert sorted(losses) == list(range(1, STEPS + 1)), result.explain()
    yield Reference(losses, read_sample_log(work / "samples"))
