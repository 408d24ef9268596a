"""A throwaway Slurm cluster on this machine: munged, slurmctld and one slurmd per node (one node
by default, `nodes=N` for more), on loopback.

Why real daemons and not a mock: what has to be shown (a node lost mid-run, the job cancelled
"DUE TO NODE FAILURE" and requeued, the trainer resuming from its newest complete checkpoint) is
Slurm's behaviour, not ours. Debian's Slurm 22.05 runs as root on 127.0.0.1 without cgroups
(`proctrack/linuxproc`, `task/none`), so no machine of its own is needed.

Everything belongs to one `LocalSlurm`: a temporary root with the config, the munge key and
socket, state, spool, logs and pid files, and free TCP ports for slurmctld and slurmd, so several
sessions can run side by side. Every process it starts, and every process of a job on its nodes,
carries `HYPERPOD_LOCAL_SLURM=<root>:<role>` in its environment; that is how they are found again
and killed by pid, never by name, which leaves other sessions' daemons alone.

The node is named after this host, because the job script works out its rendezvous host from the
Slurm node list and torchrun must be able to resolve it.

With `nodes=N` (N > 1) there are N slurmd on this one host, Slurm's multiple-slurmd layout, which
Debian's 22.05 runs: nodes `<host>`, `<host>-2`, `<host>-3` ... (`LocalSlurm.nodes`), each
NodeName line with NodeHostname this host, NodeAddr 127.0.0.1 and a `Port=` of its own, the
slurmd's spool folder, pid and log file named with `%n` (`log/slurmd.<node>.log`), each slurmd
started as `slurmd -D -N <node>`, all nodes in the one partition. Only the first name resolves,
so a job across nodes must meet on 127.0.0.1 (`LocalSlurm.rendezvous_host`), not on its first
node's name as on a real cluster. A node's slurmd, and the slurmstepd it forks, carry the role
`node:<name>`; a job's processes carry the marker sbatch gave the job (`job_env`) on whatever
node they run, and Slurm's SLURMD_NODENAME tells which: together they are that node's processes,
so one node can be lost (`lose_node(node=...)`) while the others keep running.

With ``accounting=True`` the cluster also keeps Slurm accounting the way a HyperPod cluster with
an accounting database does: a MariaDB of its own (data folder, socket and a free TCP port under
the root, a `slurm` user with a password that may create its schema, as the database user of the
secret must) and Debian's slurmdbd in front of it, associations and limits enforced, fair share
by `priority/multifactor`, GPUs accounted as `gres/gpu` (AccountingStorageTRES) so that a GPU
limit can be set. That is Slurm 22.05 and MariaDB 10.11, not HyperPod's Slurm 24.11+ against
Aurora: what it shows is Slurm's behaviour and our scripts', not HyperPod's slurmdbd set-up.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# `scontrol show ... -o`'s fields: the job commands' parser (hyperpod-kit job reads them too)
from hyperpod_kit.operations.slurm_jobs import parse_key_values as parse_fields

MARKER = "HYPERPOD_LOCAL_SLURM"
CONTROLLER = "controller"
NODE = "node"
# slurmctld, slurmd and munged live in sbin, which a non-login PATH may lack.
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "squeue", "scancel", "srun")  # srun: inside jobs
INSTALL_HINT = "Debian/Ubuntu: apt-get install slurmctld slurmd slurm-client munge"
# Accounting: the database daemons and the clients that read accounting.
ACCOUNTING_DAEMONS = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb")
ACCOUNTING_CLIENTS = ("sacctmgr", "sacct", "sshare", "sreport")
ACCOUNTING_HINT = "Debian/Ubuntu: apt-get install slurmdbd mariadb-server mariadb-client"
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 30.0
POLL_S = 0.2
# Job states after which a job will not run again (a --requeue job lost with its node goes back
# to PENDING instead of NODE_FAIL).
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
     "DEADLINE", "PREEMPTED"}
)  # fmt: skip
# `slurmd -C` fields that describe the node's processors; RealMemory is left out so that a
# slightly different reading at registration never drains the node.
HARDWARE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
_PARTITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SlurmUnavailableError(RuntimeError):
    """Slurm cannot run on this machine; the message says why."""


class SlurmError(RuntimeError):
    """A Slurm command failed, or Slurm did not reach a state in time."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))


def node_name() -> str:
    """The Slurm node name: this host's short name, as slurmd would pick it."""
    return socket.gethostname().split(".")[0]


def unavailable_reason(*, accounting: bool = False) -> str | None:
    """Why a local Slurm cannot run here (binaries, privileges, name resolution); None when it
    can be tried. Starting the daemons can still fail: `LocalSlurm.start` says why then."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return f"Slurm is not installed: {', '.join(missing)} not found ({INSTALL_HINT})"
    if accounting:
        missing = [n for n in (*ACCOUNTING_DAEMONS, *ACCOUNTING_CLIENTS) if _which(n) is None]
        if missing:
            return (
                f"Slurm accounting is not installed: {', '.join(missing)} not found "
                f"({ACCOUNTING_HINT})"
            )
    if os.geteuid() != 0:
        return "the local Slurm runs slurmd as root (it starts jobs for their user); run as root"
    name = node_name()
    try:
        socket.gethostbyname(name)
    except OSError as e:
        return (
            f"this host's name {name!r} does not resolve ({e}); the job's torchrun rendezvous "
            "uses the Slurm node name, so it must (add it to /etc/hosts)"
        )
    return None


def node_hardware(slurmd: str) -> str:
    """The node's processor layout as slurmd detects it (`slurmd -C`), so the configured node
    always matches the real one; just the CPU count if that fails."""
    fallback = f"CPUs={os.cpu_count() or 1}"
    try:
        out = subprocess.run(
            [slurmd, "-C"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return fallback
    fields = parse_fields(out.stdout.splitlines()[0]) if out.stdout.strip() else {}
    found = [f"{key}={fields[key]}" for key in HARDWARE_KEYS if key in fields]
    return " ".join(found) if out.returncode == 0 and "CPUs" in fields else fallback


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class SlurmJob:
    """One job as `scontrol show job` sees it."""

    id: str
    fields: Mapping[str, str]

    @property
    def state(self) -> str:
        return self.fields.get("JobState", "")

    @property
    def reason(self) -> str:
        return self.fields.get("Reason", "")

    @property
    def restarts(self) -> int:
        return int(self.fields.get("Restarts", "0"))

    @property
    def exit_code(self) -> str:
        return self.fields.get("ExitCode", "")

    @property
    def node_list(self) -> str:
        return self.fields.get("NodeList", "")

    @property
    def stdout(self) -> Path:
        return Path(self.fields["StdOut"])

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def __str__(self) -> str:
        return (
            f"job {self.id}: {self.state} reason={self.reason} restarts={self.restarts} "
            f"exit={self.exit_code} nodes={self.node_list or '-'}"
        )


@dataclass(frozen=True)
class JobProcess:
    """A process of a job, with the environment Slurm started it with."""

    pid: int
    argv: tuple[str, ...]
    environ: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class _Proc:
    pid: int
    argv: tuple[str, ...]
    environ: dict[str, str]


def _processes() -> Iterator[_Proc]:
    """Every readable process on this machine, with its argv and starting environment.
    Zombies (empty environment) and processes that vanish meanwhile are skipped."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw_env = (entry / "environ").read_bytes()
            raw_argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if not raw_env:
            continue
        environ: dict[str, str] = {}
        for item in raw_env.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                environ[key.decode(errors="replace")] = value.decode(errors="replace")
        argv = tuple(a.decode(errors="replace") for a in raw_argv.split(b"\0") if a)
        yield _Proc(int(entry.name), argv, environ)


def node_names(count: int, host: str | None = None) -> list[str]:
    """The names of `count` local nodes: this host's short name first (it resolves: a one-node
    job's rendezvous), then `<host>-2`, `<host>-3` ... (they need not resolve: every node's
    address is 127.0.0.1, and a several-node job meets on 127.0.0.1)."""
    if count < 1:
        raise ValueError(f"a local Slurm needs at least one node, not {count}")
    host = host or node_name()
    return [host, *(f"{host}-{i}" for i in range(2, count + 1))]


def slurm_conf(
    *,
    root: Path,
    node: str,
    hardware: str,
    partition: str,
    controller_port: int,
    slurmd_port: int,
    munge_socket: Path,
    slurmdbd_port: int | None = None,
    nodes: Mapping[str, int] | None = None,
) -> str:
    """slurm.conf for one node on 127.0.0.1, every path under `root`; with `slurmdbd_port`,
    accounting through that slurmdbd, associations and limits enforced, fair share.

    With `nodes` (each node's name to its slurmd's port, `node` among them, more than one), one
    slurmd per node on this host (Slurm's multiple-slurmd layout): each NodeName line with its
    own `Port=`, NodeHostname this host (`node`), NodeAddr 127.0.0.1; the slurmd's spool, pid
    and log file named after its node (`%n`); all of them in the one partition."""
    several = nodes is not None and len(nodes) > 1
    if nodes is not None and node not in nodes:
        raise ValueError(f"the first node {node!r} is not among the nodes {sorted(nodes)}")
    if several:
        assert nodes is not None
        slurmd_files = f"""\
# Several slurmd on this host, one per node: their files are told apart by node name (%n).
SlurmdSpoolDir={root}/spool/%n
SlurmdPidFile={root}/run/slurmd.%n.pid
SlurmdLogFile={root}/log/slurmd.%n.log"""
        node_lines = "\n".join(
            f"NodeName={name} NodeHostname={node} NodeAddr=127.0.0.1 Port={port} {hardware} "
            "State=UNKNOWN"
            for name, port in nodes.items()
        )
        members = ",".join(nodes)
    else:
        slurmd_files = f"""\
SlurmdSpoolDir={root}/spool
SlurmdPidFile={root}/run/slurmd.pid
SlurmdLogFile={root}/log/slurmd.log"""
        node_lines = f"NodeName={node} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN"
        members = node
    if slurmdbd_port is None:
        accounting = """\
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none"""
    else:
        accounting = f"""\
# Accounting as on a HyperPod cluster with an accounting database: every job recorded by
# slurmdbd, a job needs an association (--account), limits (GrpTRES) enforced, GPUs accounted.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={slurmdbd_port}
# The munge socket clients and slurmctld reach slurmdbd through (AuthInfo is slurmctld's only).
AccountingStoragePass={munge_socket}
AccountingStorageEnforce=associations,limits
AccountingStorageTRES=gres/gpu
GresTypes=gpu
PriorityType=priority/multifactor
PriorityWeightFairshare=10000"""
    return f"""\
# Written by hyperpod_kit.local.slurm: a cluster on loopback, private to one session.
ClusterName=hyperpod-local
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Slurm finds this session's munged through its socket, not the system one.
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmctldLogFile={root}/log/slurmctld.log
{slurmd_files}
SlurmctldDebug=info
SlurmdDebug=info
# No site SPANK plugins (pyxis): the local job variant runs without containers.
PlugStackConfig={root}/plugstack.conf
# No cgroups: processes are tracked through /proc, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
{accounting}
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# 1: a node an administrator (or this harness) set DOWN stays down until `state=resume`; one
# that was only unresponsive (a busy machine) comes back when its slurmd registers.
ReturnToService=1
SlurmdTimeout=30
SlurmctldTimeout=10
MessageTimeout=10
# Finished jobs stay visible to `scontrol show job` (there is no accounting database).
MinJobAge=600
{node_lines}
PartitionName={partition} Nodes={members} Default=YES MaxTime=INFINITE State=UP
"""


def slurmdbd_conf(
    *, root: Path, node: str, port: int, munge_socket: Path, db_port: int, password: str
) -> str:
    """slurmdbd.conf for this cluster's slurmdbd, its MariaDB on 127.0.0.1:`db_port`."""
    return f"""\
# Written by hyperpod_kit.local.slurm: this session's slurmdbd, in front of its own MariaDB.
AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost={node}
DbdAddr=127.0.0.1
DbdPort={port}
SlurmUser=root
PidFile={root}/run/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser={DB_USER}
StoragePass={password}
StorageLoc={DB_NAME}
"""


class LocalSlurm:
    """munged + slurmctld + one slurmd per node (`nodes`, default 1), on loopback, as root,
    stopped by pid.

        with LocalSlurm(partition="compute") as slurm:
            job_id = slurm.sbatch(script, workdir=folder)
            slurm.wait_job(job_id, lambda job: job.finished)

    `start` raises `SlurmUnavailableError` (with the reason and the daemons' logs) when Slurm is not
    installed or its daemons do not come up; `stop` kills everything this instance started, and
    every job process on its nodes, even after a failure. With `accounting`, a MariaDB and a
    slurmdbd of its own as well (module docstring).

    `nodes`: the node names, first `node` (this host's short name); `rendezvous_host`: where a
    job's ranks meet (the node name with one node, 127.0.0.1 with several). The node methods
    (`node_info`, `wait_node`, `lose_node`, `return_node`, `job_processes`) take a node name and
    default to the first node.
    """

    def __init__(
        self,
        *,
        partition: str = "compute",
        base_dir: Path | None = None,
        keep: bool = False,
        accounting: bool = False,
        nodes: int = 1,
    ) -> None:
        if not _PARTITION.match(partition):
            raise ValueError(f"partition {partition!r} is not a plain Slurm name")
        self.nodes: list[str] = node_names(nodes)
        self.node = self.nodes[0]
        # One node: its name, which resolves. Several: they all are 127.0.0.1 and only the first
        # name resolves, so a job script must meet on 127.0.0.1, not on its first node's name.
        self.rendezvous_host = "127.0.0.1" if nodes > 1 else self.node
        self.partition = partition
        self.accounting = accounting
        self.cluster_name = "hyperpod-local"  # slurm.conf's ClusterName
        self._db_port = 0
        self._db_password = ""
        self.keep = keep
        self._base_dir = base_dir
        self.root = Path()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._consoles: list[IO[bytes]] = []
        self._bins: dict[str, str] = {}
        self._state = "new"

    # -- paths -----------------------------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "run" / "munge.socket"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def db_socket(self) -> Path:
        return self.root / "run" / "mariadb.socket"

    @property
    def daemons(self) -> dict[str, int]:
        """The pids of this instance's running daemons, by name."""
        return {name: p.pid for name, p in self._procs.items() if p.poll() is None}

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT_S) -> LocalSlurm:
        """Write the configuration, start the daemons, and wait until every node is idle."""
        if self._state != "new":
            raise RuntimeError(f"this LocalSlurm is {self._state}; make a new one")
        reason = unavailable_reason(accounting=self.accounting)
        if reason is not None:
            raise SlurmUnavailableError(reason)
        names: tuple[str, ...] = (*DAEMONS, *CLIENTS)
        if self.accounting:
            names += (*ACCOUNTING_DAEMONS, *ACCOUNTING_CLIENTS)
        self._bins = {name: _which(name) or name for name in names}
        self.root = Path(tempfile.mkdtemp(prefix="hyperpod-slurm-", dir=self._base_dir))
        self._state = "started"
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        try:
            self._write_files()
            self._start_munged(deadline)
            if self.accounting:
                self._start_database(deadline)
                self._start_slurmdbd(deadline)
            self._start_slurmctld(deadline)
            for name in self.nodes:
                self._start_slurmd(name)
            for name in self.nodes:
                self.wait_node(
                    lambda n: n.get("State") == "IDLE", "idle", deadline - time.monotonic(), name
                )
        except (SlurmError, OSError, subprocess.SubprocessError) as e:
            report = self.diagnostics()
            self.stop()
            raise SlurmUnavailableError(f"the local Slurm did not start: {e}\n{report}") from e
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every job process on the nodes, then the daemons; remove the root unless `keep`.
        Safe to call twice, and after a failed start."""
        if self._state != "started":
            return
        self._state = "stopped"
        atexit.unregister(self.stop)
        try:
            self._kill_marked(NODE)  # job processes, their steps and slurmd, at once
            for node in self.nodes:  # with several nodes: each node's slurmd and steps
                self._kill_marked(self._node_role(node))
            slurmds = [self._slurmd(node) for node in self.nodes]
            for name in (*slurmds, "slurmctld", "slurmdbd", "mariadbd", "munged"):
                self._terminate(name)
            self._kill_marked(None)  # whatever of ours is left (slurmctld's slurmscriptd)
        finally:
            for console in self._consoles:
                console.close()
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    def _write_files(self) -> None:
        self.root.chmod(0o755)  # munged requires its socket's folders to be searchable by all
        for sub in ("run", "state", "spool", "log"):
            (self.root / sub).mkdir(mode=0o755)
        if len(self.nodes) > 1:
            for node in self.nodes:  # SlurmdSpoolDir=spool/%n
                (self.root / "spool" / node).mkdir(mode=0o755)
        secret = self.root / "munge"
        secret.mkdir(mode=0o700)
        key = secret / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (self.root / "plugstack.conf").write_text("")
        # slurmctld, one slurmd per node, and with accounting slurmdbd and MariaDB.
        ports: list[int] = []
        while len(ports) < 1 + len(self.nodes) + (2 if self.accounting else 0):
            port = free_port()
            if port not in ports:
                ports.append(port)
        controller_port = ports.pop(0)
        slurmd_ports = dict(zip(self.nodes, ports, strict=False))
        del ports[: len(self.nodes)]
        slurmdbd_port = ports[0] if self.accounting else None
        self.conf.write_text(
            slurm_conf(
                root=self.root,
                node=self.node,
                hardware=node_hardware(self._bins["slurmd"]),
                partition=self.partition,
                controller_port=controller_port,
                slurmd_port=slurmd_ports[self.node],
                munge_socket=self.munge_socket,
                slurmdbd_port=slurmdbd_port,
                nodes=slurmd_ports if len(self.nodes) > 1 else None,
            )
        )
        if self.accounting:
            assert slurmdbd_port is not None
            self._db_port = ports[1]
            self._db_password = secrets.token_hex(16)
            dbd_conf = self.root / "slurmdbd.conf"  # beside slurm.conf: where slurmdbd looks
            dbd_conf.write_text(
                slurmdbd_conf(
                    root=self.root,
                    node=self.node,
                    port=slurmdbd_port,
                    munge_socket=self.munge_socket,
                    db_port=self._db_port,
                    password=self._db_password,
                )
            )
            dbd_conf.chmod(0o600)  # slurmdbd refuses a config others can read

    def _spawn(self, name: str, argv: list[str], role: str) -> None:
        console = (self.logs / f"{name}.console").open("ab")
        self._consoles.append(console)
        self._procs[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            env=self._env(role),
            cwd=self.root,
            start_new_session=True,  # a Ctrl-C meant for pytest does not reach the daemons
        )

    def _start_munged(self, deadline: float) -> None:
        secret = self.root / "munge"
        self._spawn(
            "munged",
            [
                self._bins["munged"],
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={secret / 'munge.key'}",
                f"--seed-file={secret / 'munged.seed'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--log-file={self.logs / 'munged.log'}",
            ],
            CONTROLLER,
        )
        self._until(self.munge_socket.exists, "munged's socket", deadline, "munged")

    def _start_slurmctld(self, deadline: float) -> None:
        self._spawn("slurmctld", [self._bins["slurmctld"], "-D", "-f", str(self.conf)], CONTROLLER)

        def up() -> bool:
            ping = self._run(["scontrol", "ping"], check=False)
            return ping.returncode == 0 and "is UP" in ping.stdout

        self._until(up, "slurmctld to answer", deadline, "slurmctld")

    def _start_database(self, deadline: float) -> None:
        """A MariaDB of this cluster's: a data folder under the root, its socket and a TCP port
        on loopback, and the `slurm` user slurmdbd logs in as, allowed to create its schema."""
        data = self.root / "mysql"
        self._run(
            [
                "mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                "--auth-root-authentication-method=normal", "--skip-test-db",
                "--skip-name-resolve",
            ],
            env=self._env(CONTROLLER),
            timeout=120,
        )  # fmt: skip
        self._spawn(
            "mariadbd",
            [
                self._bins["mariadbd"], "--no-defaults", f"--datadir={data}",
                f"--socket={self.db_socket}", f"--port={self._db_port}",
                "--bind-address=127.0.0.1", f"--pid-file={self.root / 'run' / 'mariadbd.pid'}",
                f"--log-error={self.logs / 'mariadb.log'}", "--user=root", "--skip-name-resolve",
                # Slurm's recommended lock wait; a small buffer pool (slurmdbd logs that it
                # recommends more, which a test's few jobs do not need).
                "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900",
            ],
            CONTROLLER,
        )  # fmt: skip

        def up() -> bool:
            return self._sql("SELECT 1", check=False).returncode == 0

        self._until(up, "MariaDB to answer", deadline, "mariadbd")
        self._sql(
            f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{self._db_password}'; "
            f"GRANT ALL PRIVILEGES ON `{DB_NAME}`.* TO '{DB_USER}'@'127.0.0.1';"
        )

    def _sql(self, statement: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(
            ["mariadb", "--no-defaults", f"--socket={self.db_socket}", "-uroot", "-e", statement],
            check=check,
        )

    def _start_slurmdbd(self, deadline: float) -> None:
        """slurmdbd (it creates its tables on first start), then this cluster in its database."""
        self._spawn("slurmdbd", [self._bins["slurmdbd"], "-D"], CONTROLLER)

        def up() -> bool:
            return self._run(["sacctmgr", "-nP", "show", "cluster"], check=False).returncode == 0

        self._until(up, "slurmdbd to answer", deadline, "slurmdbd")
        self._run(["sacctmgr", "-i", "add", "cluster", self.cluster_name])

    def _slurmd(self, node: str) -> str:
        """The daemon name (`daemons`, `log`) of a node's slurmd: `slurmd` with one node,
        `slurmd.<node>` with several (its log file is `slurmd.%n.log`)."""
        return "slurmd" if len(self.nodes) == 1 else f"slurmd.{node}"

    def _node_role(self, node: str) -> str:
        """The marker role of a node's slurmd and of the slurmstepd it forks: `node` with one
        node (the same as its jobs'), `node:<name>` with several."""
        return NODE if len(self.nodes) == 1 else f"{NODE}:{node}"

    def _node_name(self, node: str | None) -> str:
        if node is None:
            return self.node
        if node not in self.nodes:
            raise ValueError(f"{node!r} is not a node of this cluster ({', '.join(self.nodes)})")
        return node

    def _start_slurmd(self, node: str | None = None) -> None:
        node = self._node_name(node)
        self._spawn(
            self._slurmd(node),
            [self._bins["slurmd"], "-D", "-N", node, "-f", str(self.conf)],
            self._node_role(node),
        )

    def _terminate(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _reap(self) -> None:
        """Collect daemons of ours that have exited (killed with the node, or crashed)."""
        for name, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[name]

    # -- processes -------------------------------------------------------------------------------

    def _marker(self, role: str) -> str:
        return f"{self.root}:{role}"

    def _env(self, role: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean, login-like environment: this cluster's config, and the role marker."""
        user = os.environ.get("USER", "root")
        env = {
            "PATH": BASE_PATH,
            "HOME": os.environ.get("HOME", "/root"),
            "USER": user,
            "LOGNAME": user,
            "LANG": "C.UTF-8",
            "SLURM_CONF": str(self.conf),
        }
        env.update(extra or {})
        if role is not None:
            env[MARKER] = self._marker(role)
        return env

    def _marked(self, role: str | None) -> list[_Proc]:
        """This instance's processes: of one role, or all of them."""
        mine = self._marker("")
        return [
            p
            for p in _processes()
            if p.pid != os.getpid()
            and (
                p.environ.get(MARKER) == self._marker(role)
                if role is not None
                else p.environ.get(MARKER, "").startswith(mine)
            )
        ]

    def _on_node(self, node: str) -> list[_Proc]:
        """The processes of one node: its slurmd and the slurmstepd it forks (they inherit its
        marker), and the job processes Slurm started there. A job's processes carry the marker
        `sbatch` gave the job (`job_env`), whatever node they run on, and Slurm's
        SLURMD_NODENAME, the node whose slurmstepd started them. With one node: every process
        marked `node`, as ever."""
        role = self._node_role(node)
        if role == NODE:
            return self._marked(NODE)
        own, job = self._marker(role), self._marker(NODE)
        return [
            p
            for p in self._marked(None)
            if p.environ.get(MARKER) == own
            or (p.environ.get(MARKER) == job and p.environ.get("SLURMD_NODENAME") == node)
        ]

    def _kill_marked(self, role: str | None) -> list[int]:
        """SIGKILL this instance's processes (of `role`) until none is left."""
        return self._kill(lambda: self._marked(role), self._marker(role or "*"))

    def _kill(self, select: Callable[[], list[_Proc]], what: str) -> list[int]:
        """SIGKILL the processes `select` finds until none is left: what dies with a node.
        Rescans, because a process may fork between the scan and its kill."""
        killed: list[int] = []
        found: list[_Proc] = []
        for _ in range(100):
            found = select()
            if not found:
                self._reap()
                return killed
            for proc in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.append(proc.pid)
            self._reap()
            time.sleep(0.05)
        raise SlurmError(f"processes of {what} survive SIGKILL: {found}")

    def job_processes(self, job_id: str, node: str | None = None) -> list[JobProcess]:
        """The live processes of a job (batch script, steps, the programs they run), with the
        environment Slurm gave them, e.g. `SLURM_RESTART_COUNT`: on `node`, or on every node."""
        if node is not None or len(self.nodes) == 1:
            found = self._on_node(self._node_name(node))
        else:
            found = [p for name in self.nodes for p in self._on_node(name)]
        return [
            JobProcess(p.pid, p.argv, p.environ)
            for p in found
            if p.environ.get("SLURM_JOB_ID") == job_id
        ]

    # -- commands --------------------------------------------------------------------------------

    def _run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        command = [self._bins.get(argv[0], argv[0]), *argv[1:]]
        result = subprocess.run(
            command,
            env=dict(env) if env is not None else self._env(None),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise SlurmError(
                f"{' '.join(argv)} exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result

    def scontrol(self, *args: str) -> str:
        return self._run(["scontrol", *args]).stdout

    def client(self, command: str, *args: str, check: bool = True) -> str:
        """One of the cluster's clients (sacctmgr, sacct, sshare, sreport ...) on its config."""
        return self._run([command, *args], check=check).stdout

    def sinfo(self, *args: str) -> str:
        return self._run(["sinfo", *args]).stdout

    def squeue(self, *args: str) -> str:
        return self._run(["squeue", *args]).stdout

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a client of this cluster (the health runner's `scontrol`): a clean
        login-like environment, `extra`, and this cluster's SLURM_CONF; no job marker."""
        return self._env(None, extra)

    def job_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a job submitted here starts with (sbatch exports its environment): a clean
        login-like environment, `extra`, this cluster's SLURM_CONF and the node marker."""
        return self._env(NODE, extra)

    def sbatch(
        self,
        script: Path,
        *,
        workdir: Path,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> str:
        """Submit `script` from `workdir` (where `--output=%x_%j.out` lands); the job id."""
        out = self._run(
            ["sbatch", "--parsable", f"--chdir={workdir}", *args, str(script)],
            env=self.job_env(env),
        ).stdout
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> SlurmJob:
        line = self.scontrol("show", "job", "-o", job_id).strip()
        return SlurmJob(job_id, parse_fields(line))

    def node_info(self, node: str | None = None) -> dict[str, str]:
        """`scontrol show node` of `node` (default the first)."""
        return parse_fields(self.scontrol("show", "node", "-o", self._node_name(node)).strip())

    def cancel(self, job_id: str) -> None:
        """scancel; a job that has already finished is not an error."""
        self._run(["scancel", job_id], check=False)

    def release(self, job_id: str) -> None:
        """Start a requeued job now: Slurm holds it PENDING on its begin time for a while after
        a node failure (`BeginTime=now` is refused by 22.05; `StartTime=now` is not)."""
        self.scontrol("update", f"jobid={job_id}", "StartTime=now")

    # -- waiting ---------------------------------------------------------------------------------

    def _until(
        self, ready: Callable[[], bool], what: str, deadline: float, daemon: str | None = None
    ) -> None:
        while True:
            if daemon is not None:
                proc = self._procs.get(daemon)
                if proc is None or proc.poll() is not None:
                    code = None if proc is None else proc.returncode
                    raise SlurmError(f"{daemon} exited ({code}) while waiting for {what}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"timed out waiting for {what}")
            time.sleep(POLL_S)

    def wait_job(
        self,
        job_id: str,
        until: Callable[[SlurmJob], bool],
        what: str,
        timeout: float,
    ) -> SlurmJob:
        """Poll `scontrol show job` until `until(job)`; SlurmError with the last state if not."""
        last: list[SlurmJob] = []

        def ready() -> bool:
            last[:] = [self.job(job_id)]
            return until(last[0])

        try:
            self._until(ready, f"job {job_id}: {what}", time.monotonic() + timeout)
        except SlurmError as e:
            raise SlurmError(f"{e}; last seen {last[0] if last else 'nothing'}") from None
        return last[0]

    def wait_finished(self, job_id: str, timeout: float) -> SlurmJob:
        return self.wait_job(job_id, lambda job: job.finished, "to finish", timeout)

    def wait_node(
        self,
        until: Callable[[dict[str, str]], bool],
        what: str,
        timeout: float,
        node: str | None = None,
    ) -> dict[str, str]:
        """Poll `node_info(node)` until `until(info)`; SlurmError with the last state if not."""
        node = self._node_name(node)
        last: list[dict[str, str]] = []

        def ready() -> bool:
            last[:] = [self.node_info(node)]
            return until(last[0])

        deadline = time.monotonic() + timeout
        try:
            self._until(ready, f"node {node} {what}", deadline)
        except SlurmError as e:
            seen = last[0] if last else {}
            raise SlurmError(
                f"{e}; state {seen.get('State')}, reason {seen.get('Reason')}"
            ) from None
        return last[0]

    # -- node loss -------------------------------------------------------------------------------

    def lose_node(
        self, reason: str = "node lost: replaced", *, node: str | None = None
    ) -> list[int]:
        """Lose a node (default the first) the way HyperPod's replacement does: every process on
        it dies at once (SIGKILL: slurmd, the job's steps, torchrun and its ranks; nothing gets
        to save), and the node is DOWN; the other nodes keep running. Slurm then cancels its
        jobs "DUE TO NODE FAILURE" and requeues those submitted with `--requeue`. The pids
        killed."""
        node = self._node_name(node)
        killed = self._kill(lambda: self._on_node(node), f"node {node}")
        self.scontrol("update", f"nodename={node}", "state=down", f"reason={reason}")
        return killed

    def return_node(self, timeout: float = START_TIMEOUT_S, node: str | None = None) -> None:
        """Bring a node (default the first) back as a replacement would: a fresh slurmd
        registers under the same name, then the node is resumed (`state=resume`: clears DOWN,
        DRAIN and an Action: FAIL) and idle."""
        node = self._node_name(node)
        deadline = time.monotonic() + timeout
        if self._slurmd(node) not in self.daemons:
            before = self.node_info(node).get("SlurmdStartTime")
            self._start_slurmd(node)
            self.wait_node(
                lambda n: n.get("SlurmdStartTime") != before and "NOT_RESPONDING" not in n["State"],
                "to register a new slurmd",
                deadline - time.monotonic(),
                node,
            )
        state = self.node_info(node).get("State", "")
        if any(s in state for s in ("DOWN", "DRAIN", "FAIL")):
            self.scontrol("update", f"nodename={node}", "state=resume")
        self.wait_node(
            lambda n: n.get("State") == "IDLE", "idle", deadline - time.monotonic(), node
        )

    # -- diagnostics -----------------------------------------------------------------------------

    def log(self, daemon: str) -> str:
        """A daemon's log so far ("slurmctld", "slurmd", "munged"; with several nodes a node's
        slurmd is "slurmd.<node>")."""
        path = self.logs / f"{daemon}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def diagnostics(self, lines: int = 40) -> str:
        """Queue, node and the tail of every daemon log: what to read when a test fails."""
        if self._state == "new":
            return "(the local Slurm was never started)"
        parts: list[str] = []
        commands: list[list[str]] = []
        if self.conf.is_file():
            commands = [["sinfo"], ["squeue"], ["scontrol", "show", "node", ",".join(self.nodes)]]
        if self.accounting:
            commands.append(["sacctmgr", "-nP", "show", "assoc"])
        for argv in commands:
            try:
                out = self._run(argv, check=False, timeout=10)
                text = (out.stdout + out.stderr).strip()
            except (OSError, subprocess.SubprocessError) as e:
                text = str(e)
            parts.append(f"--- {' '.join(argv)}\n{text}")
        for path in sorted(self.logs.glob("*")) if self.logs.is_dir() else []:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts)
