"""What every node check shares: the verdict it returns, the context it reads, and a way to run
a command that can never hang the caller.

Runs on HyperPod nodes with the system python3 (3.8 or newer, standard library only). Every path,
command and clock a check touches comes through `Context`, so the tests (and the offline demo) run
the real checks against recorded inputs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List

OK = "ok"
FAIL = "fail"
CANNOT_RUN = "cannot-run"
STATUSES = (OK, FAIL, CANNOT_RUN)

NONE, REBOOT, REPLACE = "none", "reboot", "replace"
ACTIONS = (NONE, REBOOT, REPLACE)
SEVERITY = {NONE: 0, REBOOT: 1, REPLACE: 2}


@dataclass(frozen=True)
class Verdict:
    """One check's answer. `recommended` is what the failure itself calls for (from the XID table,
    say); whether anything is done about it is the runner's decision, not the check's."""

    check: str
    status: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    recommended: str = NONE

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        if self.recommended not in ACTIONS:
            raise ValueError(f"recommended {self.recommended!r} is not one of {ACTIONS}")


def ok(check: str, reason: str, **details: Any) -> Verdict:
    return Verdict(check, OK, reason, details)


def fail(check: str, reason: str, recommended: str = NONE, **details: Any) -> Verdict:
    return Verdict(check, FAIL, reason, details, recommended)


def cannot_run(check: str, reason: str, **details: Any) -> Verdict:
    return Verdict(check, CANNOT_RUN, reason, details)


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: it did not finish (timed out) or could not start
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False  # the program is not installed
    stuck: bool = False  # killed, yet still not gone (uninterruptible sleep on a hung mount)

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        name = os.path.basename(self.argv[0]) if self.argv else "command"
        if self.missing:
            return f"{name} is not installed"
        if self.timed_out:
            return f"{name} did not answer in time" + (
                " (and is stuck in the kernel)" if self.stuck else ""
            )
        text = (self.stderr or self.stdout).strip().splitlines()
        return f"{name} exited {self.returncode}" + (f": {text[-1]}" if text else "")


Runner = Callable[[List[str], float], CommandResult]


def run_command(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> CommandResult:
    """Run `argv` and give up after `timeout` seconds, without ever blocking longer.

    `subprocess.run(timeout=...)` kills the child and then waits for it without a limit; a child
    blocked in the kernel on a hung Lustre mount or a lost GPU ignores SIGKILL until the kernel
    lets go, so that wait can last forever. Here the child gets its own process group, is killed
    with it, and is abandoned (not waited for) if it still does not exit.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except FileNotFoundError:
        return CommandResult(list(argv), None, missing=True)
    except PermissionError as e:
        return CommandResult(list(argv), None, stderr=str(e))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        stuck = False
        try:
            out, err = proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            stuck = True
            out, err = b"", b""
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        return CommandResult(list(argv), None, _text(out), _text(err), timed_out=True, stuck=stuck)
    return CommandResult(list(argv), proc.returncode, _text(out), _text(err))


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class InstanceFacts:
    """What the node should have, from the rendered instance-type table. None: not known."""

    instance_type: str | None = None
    gpus: int | None = None
    efa_interfaces: int | None = None


@dataclass
class Context:
    """Everything a check may read or run. `root` prefixes /proc, /sys and /opt/ml paths, so a
    test hands a check a fake /sys; mount points and volumes are real paths."""

    settings: dict[str, Any]
    facts: InstanceFacts = field(default_factory=InstanceFacts)
    node: str = ""
    root: str = "/"
    run: Runner = run_command
    statvfs: Callable[[str], Any] = os.statvfs
    clock: Callable[[], float] = time.time
    kernel_log: str | None = None  # a file to read instead of the kernel's own log
    state: dict[str, Any] = field(default_factory=dict)  # per-check memory between runs

    def path(self, absolute: str) -> str:
        """`absolute` under the context's root (the real one on a node)."""
        return os.path.join(self.root, absolute.lstrip("/"))

    def section(self, name: str) -> dict[str, Any]:
        value = self.settings.get(name) or {}
        return value if isinstance(value, dict) else {}

    def check_state(self, check: str) -> dict[str, Any]:
        mine = self.state.setdefault(check, {})
        if not isinstance(mine, dict):
            mine = self.state[check] = {}
        return mine


Check = Callable[[Context], Verdict]
