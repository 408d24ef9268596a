"""The node health runner (lifecycle/health/runner.py) on the local Slurm's node, through its real
command line, as the systemd timer runs it on a HyperPod node.

What is real: the runner and its checks, the settings rendered from the environment file
(`node_health_settings`), and `scontrol` against the local slurmctld (SLURM_CONF in the runner's
environment), so `state=fail reason=Action:Replace` lands on a real Slurm node. What stands in for
the node: a folder for /fsx (`settings.fsx.mount_path`), and a fake root (`--root`) whose
/proc/mounts shows that folder as a Lustre mount and whose /proc/uptime is past the boot grace.

Faults the runner acts on, as docs/health.md describes them: `hang_fsx` (the probe's file is a
FIFO, so its write blocks as on a hung Lustre client, until the runner's deadline kills it) and
`read_only_fsx` (the mount shows `ro`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.health_settings import node_health_settings
from hyperpod_kit.local.slurm import BASE_PATH, LocalSlurm
from hyperpod_kit.paths import LIFECYCLE_DIR

RUNNER = LIFECYCLE_DIR / "health" / "runner.py"
PROBE_DIR = ".hyperpod-kit-health"  # lifecycle/health/checks/fsx.py
UPTIME_S = 86_400.0  # a node up for a day: past the boot grace
RUNNER_TIMEOUT_S = 120.0
# The checks that can pass on a CPU machine without EFA: the GPU and EFA checks would fail here
# for want of hardware, and the disk check reads this machine's real volumes.
LOCAL_CHECKS = ("fsx-mount",)


@dataclass(frozen=True)
class RunnerResult:
    """One run of the runner: exit status, its JSON lines, and when it ran (Unix time)."""

    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    started: float
    ended: float

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == "verdict"]

    @property
    def decision(self) -> dict[str, Any]:
        found = [line for line in self.lines if line.get("event") == "decision"]
        if len(found) != 1:
            raise ValueError(f"expected one decision line, got {self.lines} ({self.stderr})")
        return found[0]


class HealthNode:
    """The local Slurm node as the health runner sees it; `run` runs the real runner on it."""

    def __init__(
        self,
        folder: Path,
        *,
        slurm: LocalSlurm,
        config: EnvironmentConfig,
        fsx: Path,
        checks: Sequence[str] = LOCAL_CHECKS,
    ) -> None:
        self.folder = folder
        self.slurm = slurm
        self.fsx = fsx
        self.checks = tuple(checks)
        self.root = folder / "root"
        self.state_file = folder / "state.json"
        self.log_file = folder / "health.jsonl"
        self.settings_file = folder / "settings.json"
        settings = node_health_settings(config)
        # The one documented substitution: the mount the check probes is this folder, not /fsx.
        settings["fsx"]["mount_path"] = str(fsx)
        self.settings = settings
        groups = settings.get("repairable_groups") or []
        if not groups:
            raise ValueError("the environment has no compute group whose nodes HyperPod repairs")
        self.instance_group = str(groups[0])
        (self.root / "proc").mkdir(parents=True, exist_ok=True)
        (self.root / "proc" / "uptime").write_text(f"{UPTIME_S:.2f} {UPTIME_S:.2f}\n")
        self.settings_file.write_text(json.dumps(settings, indent=2) + "\n")
        self._mount("rw")

    @property
    def node(self) -> str:
        return self.slurm.node

    @property
    def probe(self) -> Path:
        """The file the fsx-mount check writes (fsx.py: `<mount>/.hyperpod-kit-health/<node>`)."""
        return self.fsx / PROBE_DIR / f"{self.node}.probe"

    # -- faults ----------------------------------------------------------------------------------

    def _mount(self, options: str) -> None:
        (self.root / "proc" / "mounts").write_text(
            "/dev/nvme0n1p1 / ext4 rw,relatime 0 0\n"
            f"10.1.0.5@tcp:/abcdefgh {self.fsx} lustre {options},flock,lazystatfs 0 0\n"
        )

    def hang_fsx(self) -> None:
        """The mount stops answering: the probe's write blocks (a FIFO with no reader)."""
        self.probe.parent.mkdir(parents=True, exist_ok=True)
        if self.probe.exists() or self.probe.is_symlink():
            self.probe.unlink()
        os.mkfifo(self.probe)

    def read_only_fsx(self) -> None:
        """The mount is read-only (as a Lustre client remounts itself after some errors)."""
        self._mount("ro")

    def heal_fsx(self) -> None:
        """Undo both faults (what a reboot or a replacement gives: a fresh, writable mount)."""
        if self.probe.exists() or self.probe.is_symlink():
            self.probe.unlink()
        self._mount("rw")

    def forget(self) -> None:
        """A replaced node starts with no state (the state file is on its root volume)."""
        for path in (self.state_file, self.state_file.with_name(self.state_file.name + ".lock")):
            path.unlink(missing_ok=True)

    # -- the runner ------------------------------------------------------------------------------

    def argv(self, *, now: float | None = None, dry_run: bool = False) -> list[str]:
        # The node's own python3 where there is one (the unit runs /usr/bin/python3): the runner
        # needs nothing but the standard library.
        python = shutil.which("python3", path=BASE_PATH) or sys.executable
        argv = [
            python,
            str(RUNNER),
            "run",
            "--settings", str(self.settings_file),
            "--node-name", self.node,
            "--instance-group", self.instance_group,
            "--checks", ",".join(self.checks),
            "--orchestrator", "slurm",
            "--state-file", str(self.state_file),
            "--log-file", str(self.log_file),
            "--root", str(self.root),
        ]  # fmt: skip
        if now is not None:
            argv += ["--now", repr(float(now))]
        if dry_run:
            argv.append("--dry-run")
        return argv

    def run(self, *, now: float | None = None, dry_run: bool = False) -> RunnerResult:
        """One pass of the runner, with `scontrol` on PATH talking to the local slurmctld."""
        started = time.time()
        result = subprocess.run(
            self.argv(now=now, dry_run=dry_run),
            env=self.slurm.client_env(),
            capture_output=True,
            text=True,
            timeout=RUNNER_TIMEOUT_S,
            check=False,
        )
        lines = []
        for text in result.stdout.splitlines():
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(line, dict):
                lines.append(line)
        return RunnerResult(result.returncode, lines, result.stderr, started, time.time())
