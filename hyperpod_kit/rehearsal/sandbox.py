"""A node in a sandbox: a folder stands for ``/``, the recording fakes (`fakes.py`) come first on
PATH, and the scripts of an upload run as HyperPod would run them.

The node scripts spell every absolute path ``$ROOT/...`` (``HYPERPOD_KIT_ROOT`` sets it), so they
write only under the sandbox root. When this runs as root, the scripts run as ``nobody``, so a path
that misses its ROOT prefix fails instead of writing to this machine's /etc. The lifecycle sandbox
tests and the deploy rehearsal (`actors.py`) both use it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperpod_kit.rehearsal.fakes import install_fakes

SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534
# What a HyperPod AMI already has in /etc/passwd and /etc/group (the accounts the scripts meet).
BASE_PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "ubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n"
    "slurm:x:401:401::/var/lib/slurm:/usr/sbin/nologin\n"
)
BASE_GROUP = "root:x:0:\nubuntu:x:1000:\nslurm:x:401:\n"


class Node:
    """One sandboxed node: a root folder, the fakes, the upload in `bundle`.

    `resource_config` is what HyperPod writes to /opt/ml/config/resource_config.json; `ip` this
    node's address in it (``hostname -I`` answers it). `world`/`seed`: where AWS's state lives
    when several sandboxes share it (see fakes.py); by default, in this node's own state."""

    def __init__(
        self,
        base: Path,
        *,
        bundle: Path,
        resource_config: Mapping[str, Any] | None = None,
        ip: str | None = None,
        world: Path | None = None,
        seed: Path | None = None,
        python: str = SYSTEM_PYTHON,
        extra_fakes: tuple[str, ...] = (),
    ) -> None:
        self.base, self.bundle = base, bundle
        self.root, self.state, self.bin = base / "root", base / "fake", base / "bin"
        self.world, self.seed = world, seed
        for d in (self.root, self.state):
            d.mkdir(parents=True, exist_ok=True)
        install_fakes(self.bin, python, extra=extra_fakes)
        self.write("/etc/passwd", BASE_PASSWD)
        self.write("/etc/group", BASE_GROUP)
        (self.root / "fsx").mkdir(exist_ok=True)
        self.write("/opt/slurm/etc/plugstack.conf", "# HyperPod's plugstack\n")
        if resource_config is not None:
            self.write("/opt/ml/config/resource_config.json", json.dumps(resource_config))
        if ip is not None:
            self.knob("ips", f"172.17.0.1 {ip}")
        self.knob("mounts", "/fsx /opt/dlami/nvme /opt/sagemaker")
        self.knob("packages", "logrotate\n")  # what dpkg has installed (Ubuntu's base system)

    def write(self, node_path: str, text: str) -> Path:
        path = self.root / node_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def knob(self, name: str, value: str | None) -> None:
        path = self.state / name
        if value is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "HYPERPOD_KIT_ROOT": str(self.root),
            "FAKE_ROOT": str(self.root),
            "FAKE_STATE": str(self.state),
            "FAKE_BIN": str(self.bin),
            "HOME": str(self.base),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.base / "tmp"),
        }
        if self.world is not None:
            env["FAKE_AWS"] = str(self.world)
        if self.seed is not None:
            env["FAKE_SEED"] = str(self.seed)
        return env | dict(extra or {})

    def run(
        self, *command: str, env: Mapping[str, str] | None = None, timeout: int = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a command of the upload (default: on_create.sh) as HyperPod would, in the sandbox."""
        for record in ("calls.jsonl", "aws.jsonl"):
            (self.state / record).unlink(missing_ok=True)
        argv = ["bash", *(command or (str(self.bundle / "on_create.sh"),))]
        (self.base / "tmp").mkdir(exist_ok=True)
        if os.geteuid() == 0:  # run unprivileged: a missing $ROOT prefix cannot touch this machine
            shared = [p for p in (self.world, self.seed) if p is not None]
            for path in (self.base, *shared):
                subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(path)], check=True)
            argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        try:
            return subprocess.run(
                argv, cwd=self.bundle, env=self.env(env), capture_output=True, text=True,
                timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return subprocess.CompletedProcess(argv, 124, out, f"timed out after {timeout} s")

    def calls(self, name: str | None = None) -> list[list[str]]:
        """The faked commands the last run made, as argv lists (optionally only `name`)."""
        path = self.state / "calls.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [[r["cmd"], *r["args"]] for r in rows if name is None or r["cmd"] == name]

    def aws_calls(self) -> list[dict[str, Any]]:
        """The last run's aws CLI calls: {"args", "rc", "error"} each."""
        path = self.state / "aws.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    def owners(self) -> dict[str, list[int]]:
        path = self.state / "owners"
        rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
        return {p: [int(u), int(g)] for p, u, g in rows}
