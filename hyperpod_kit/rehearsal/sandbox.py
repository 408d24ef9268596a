"""A node in a sandbox: a folder stands for ``/``, the recording fakes (`fakes.py`) come first on
PATH, and the scripts of an upload run as HyperPod would run them.

The node scripts spell every absolute path ``$ROOT/...`` (``HYPERPOD_KIT_ROOT`` sets it), so they
write only under the sandbox root. The lifecycle sandbox tests and the deploy rehearsal
(`actors.py`) both use it.

Where this machine has Debian's bubblewrap (``bwrap``) and may use it, every command runs inside
it (`Isolation`): all namespaces new (no network but a loopback of its own, its own processes),
uid and gid 65534, no capabilities, a clean environment; it sees read-only ``/usr`` (``/bin``,
``/lib*`` and ``/sbin`` as links into it, or read-only where they are folders),
``/etc/alternatives``, a generated ``/etc/passwd`` and ``/etc/group``, the upload and the fakes'
code; read-write only this node's own folder (its root, state, fakes folder, home and temporary
folder) and the shared fake AWS (`world`; what the deploy made, `seed`, read-only); an empty
``/tmp``; nothing else of this machine (no ``$HOME``, no repository, nothing else of the temporary
folder). Without it (`isolation_problem` says why), commands run as the invoking user, as
``nobody`` when that is root: the rehearsal then runs no script of the user's own (`actors.py`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
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
# The program that isolates (a seam: the tests name one that does not exist to play a machine
# without it), and what the isolated process sees of this machine's /etc besides.
BWRAP = "bwrap"
SANDBOX_PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
SANDBOX_GROUP = "root:x:0:\nnogroup:x:65534:\n"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/alternatives", "/etc/ld.so.cache")


@dataclass(frozen=True)
class Isolation:
    """bubblewrap, found at `bwrap` and checked to work here (see the module doc)."""

    bwrap: str

    def argv(
        self, command: list[str], *, writable: list[Path], readable: list[Path], cwd: Path
    ) -> list[str]:
        """`command` inside bubblewrap; `writable` and `readable` bound at their own paths, in
        that order (so a readable path inside a writable one stays read-only)."""
        argv = [*self._base()]
        for path in writable:
            argv += ["--bind", str(path), str(path)]
        for path in readable:
            argv += ["--ro-bind", str(path), str(path)]
        return [*argv, "--chdir", str(cwd), "--", *command]

    def _base(self) -> list[str]:
        argv = [
            self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--uid", str(NOBODY), "--gid", str(NOBODY),
            "--hostname", "node",
        ]  # fmt: skip
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for path in SYSTEM_FILES:
            if os.path.exists(path):
                argv += ["--ro-bind", path, path]
        return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


def _not_aws(variable: str) -> bool:
    return not variable.startswith("AWS_") or variable in ("AWS_REGION", "AWS_DEFAULT_REGION")


def find_isolation() -> Isolation | None:
    """bubblewrap where this machine has it and lets it make its namespaces, else None."""
    found, _ = _probe(shutil.which(BWRAP))
    return found


def isolation_problem() -> str | None:
    """Why there is no isolation here, in a few words (None where there is)."""
    _, problem = _probe(shutil.which(BWRAP))
    return problem


@functools.cache
def _probe(bwrap: str | None) -> tuple[Isolation | None, str | None]:
    if bwrap is None:
        return None, f"{BWRAP} not found (Debian/Ubuntu: apt-get install bubblewrap)"
    if not Path(SYSTEM_PYTHON).exists():
        return None, f"{SYSTEM_PYTHON} not found (the fakes run with the system's python)"
    isolation = Isolation(bwrap)
    argv = isolation.argv(["/usr/bin/true"], writable=[], readable=[], cwd=Path("/"))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{bwrap}: {e}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        return None, f"{bwrap} cannot make its namespaces here: {lines[-1]}"
    return isolation, None


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
        isolate: bool | None = None,
    ) -> None:
        """`isolate`: None, in bubblewrap where this machine has it; True, in bubblewrap or an
        error; False, in the folder alone (as the invoking user, ``nobody`` when that is root)."""
        self.isolation = find_isolation() if isolate is not False else None
        if isolate and self.isolation is None:
            raise RuntimeError(f"no isolation here: {isolation_problem()}")
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
        # Nothing of AWS's but a region: no credentials, profile or endpoint reaches a script.
        return {k: v for k, v in (env | dict(extra or {})).items() if _not_aws(k)}

    def run(
        self, *command: str, env: Mapping[str, str] | None = None, timeout: int = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a command of the upload (default: on_create.sh) as HyperPod would, in the sandbox."""
        for record in ("calls.jsonl", "aws.jsonl"):
            (self.state / record).unlink(missing_ok=True)
        argv = ["bash", *(command or (str(self.bundle / "on_create.sh"),))]
        (self.base / "tmp").mkdir(exist_ok=True)
        if self.isolation is not None:
            argv = self._isolated(argv)
        elif os.geteuid() == 0:  # unprivileged: a missing $ROOT prefix cannot touch this machine
            shared = [p for p in (self.world, self.seed) if p is not None]
            for path in (self.base, *shared):
                subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(path)], check=True)
            argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        try:
            return subprocess.run(
                argv, cwd=self.bundle, env=self.env(env), capture_output=True, text=True,
                timeout=timeout, check=False, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return subprocess.CompletedProcess(argv, 124, out, f"timed out after {timeout} s")

    def _isolated(self, argv: list[str]) -> list[str]:
        """`argv` in bubblewrap: this node's folder and the shared fake AWS writable; the upload,
        the fakes' code, what the deploy made and the generated accounts read-only."""
        assert self.isolation is not None
        etc = self.base / ".sandbox-etc"
        etc.mkdir(exist_ok=True)
        (etc / "passwd").write_text(SANDBOX_PASSWD)
        (etc / "group").write_text(SANDBOX_GROUP)
        writable = [self.base, *([self.world] if self.world is not None else [])]
        fakes = [self.bin / "fakes.py", self.bin / "fast-fake"]
        readable = [etc, self.bundle, *fakes, *([self.seed] if self.seed is not None else [])]
        wrapped = self.isolation.argv(argv, writable=writable, readable=readable, cwd=self.bundle)
        at = wrapped.index("--chdir")  # the accounts the isolated process sees, in /etc
        accounts = ["--ro-bind", str(etc / "passwd"), "/etc/passwd"]
        accounts += ["--ro-bind", str(etc / "group"), "/etc/group"]
        return [*wrapped[:at], *accounts, *wrapped[at:]]

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
