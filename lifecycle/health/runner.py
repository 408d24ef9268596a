#!/usr/bin/env python3
"""hyperpod-kit node health runner: run the node checks, log each verdict as one JSON line, and
decide whether to ask HyperPod to reboot or replace this node.

    runner.py run   [--settings FILE] [--dry-run] [--checks a,b] [--node-name N]
                    [--instance-group G | --instance-type T] [--orchestrator slurm|eks]
                    [--state-file F] [--log-file F] [--root DIR] [--kernel-log F] [--now EPOCH]
    runner.py units [--settings FILE] [--out DIR] [--instance-group G] [--root DIR]
                    # the systemd service and timer; --root: the node's / (a sandbox in tests)

How a request reaches HyperPod:
  Slurm  scontrol update node=<n> state=fail reason=Action:Reboot | Action:Replace
         (HyperPod reads the reason, case-sensitive; the running job finishes its step first)
  EKS    kubectl label node <n> sagemaker.amazonaws.com/node-health-status=
         UnschedulablePendingReboot | UnschedulablePendingReplacement --overwrite
         (with the node's own kubelet credentials: a kubelet may patch its own Node object, and
         NodeRestriction guards only kubernetes.io / k8s.io labels; HyperPod acts on the label
         only with NodeRecovery=Automatic)

Rules, in order: GPU checks never act (HyperPod's agent does); nothing acts with auto_repair off;
nothing acts during the first minutes after boot (a mount may still be coming up); nothing acts
while the node is already failing or labelled for an Action; one request per cooldown, so a
flapping check cannot repair a node twice; a check that fails again soon after the reboot it asked
for asks for a replacement. Exit status: 0 healthy, 1 a check failed, 2 bad usage or settings.

Runs with the node's python3 (3.8+), standard library only. Runs from a systemd timer, never from
slurm.conf's HealthCheckProgram (editing slurm.conf is drift under the Managed strategy).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, List

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from checks import (  # noqa: E402
    AGENT_COVERED,
    CANNOT_RUN,
    CHECKS,
    DEFAULT_REMEDIATION,
    FAIL,
    NONE,
    REBOOT,
    REPLACE,
    SEVERITY,
    CommandResult,
    Context,
    InstanceFacts,
    Verdict,
    run_command,
)

SOURCE = "hyperpod-kit-health"
SETTINGS_VERSION = 1
DEFAULT_SETTINGS = os.path.join(HERE, "settings.json")
DEFAULT_STATE = "/var/lib/hyperpod-kit/health/state.json"
DEFAULT_LOG = "/var/log/hyperpod-kit/health.jsonl"
LOG_ROTATE_BYTES = 10 * 2**20
UNIT = "hyperpod-kit-health"

SLURM_REASON = {REBOOT: "Action:Reboot", REPLACE: "Action:Replace"}
EKS_LABEL = "sagemaker.amazonaws.com/node-health-status"
EKS_VALUE = {REBOOT: "UnschedulablePendingReboot", REPLACE: "UnschedulablePendingReplacement"}
# Unschedulable: HyperPod is running a deep health check on the node.
EKS_BUSY = {"Unschedulable", *EKS_VALUE.values()}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Run = Callable[[List[str], float], CommandResult]


class UsageError(Exception):
    """Bad arguments or settings: exit 2 with the message, never a traceback."""


# --- who this node is ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    name: str
    instance_group: str | None
    facts: InstanceFacts
    instance_id: str | None = None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _local_addresses() -> set[str]:
    found = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.254.254.254", 1))  # no packet is sent; picks the outbound address
        found.add(s.getsockname()[0])
    with contextlib.suppress(OSError):
        found.update(socket.gethostbyname_ex(socket.gethostname())[2])
    return found


def _group_from_resource_config(root: str, instance_id: str | None) -> str | None:
    """HyperPod writes /opt/ml/config/resource_config.json on every node: the groups and their
    instances (InstanceName, InstanceId, CustomerIpAddress). Find this node in it."""
    text = _read(os.path.join(root, "opt/ml/config/resource_config.json"))
    if not text:
        return None
    try:
        groups = json.loads(text).get("InstanceGroups", [])
    except (ValueError, AttributeError):
        return None
    addresses = _local_addresses()
    for group in groups:
        for instance in group.get("Instances", []):
            if (instance_id and instance.get("InstanceId") == instance_id) or instance.get(
                "CustomerIpAddress"
            ) in addresses:
                name = group.get("Name") or group.get("InstanceGroupName")
                return str(name) if name else None
    return None


def _own_type(root: str, known: dict[str, Any]) -> str | None:
    """The node's own instance type from the firmware (Nitro writes the EC2 type, like
    p5.48xlarge, as the product name), when it is one of the settings' types."""
    product = _read(os.path.join(root, "sys/devices/virtual/dmi/id/product_name"))
    name = f"ml.{product}" if product else None
    return name if name in known else None


def resolve_node(
    settings: dict[str, Any],
    orchestrator: str,
    *,
    root: str,
    node_name: str | None = None,
    instance_group: str | None = None,
    instance_type: str | None = None,
) -> Node:
    """This node's name (as Slurm or Kubernetes knows it), group and expected hardware."""
    instance_id = _read(os.path.join(root, "sys/devices/virtual/dmi/id/board_asset_tag"))
    if instance_id is not None and not instance_id.startswith("i-"):
        instance_id = None  # not an EC2 Nitro instance (a laptop, a test)
    if node_name is None:
        if orchestrator == "eks" and instance_id:
            node_name = f"hyperpod-{instance_id}"  # HyperPod's EKS node names
        else:
            node_name = socket.gethostname().split(".")[0]
    if instance_group is None and instance_type is None:
        instance_group = _group_from_resource_config(root, instance_id)
    groups = settings.get("groups") or {}
    types = settings.get("instance_types") or {}
    if instance_type is None and instance_group is not None:
        instance_type = groups.get(instance_group)
    if instance_type is None and instance_group is not None:
        instance_type = _own_type(root, types)  # a flexible group: any of its types
    table = types.get(instance_type or "", {})
    facts = InstanceFacts(
        instance_type=instance_type,
        gpus=table.get("gpus"),
        efa_interfaces=table.get("efa_interfaces"),
    )
    return Node(node_name, instance_group, facts, instance_id)


# --- asking HyperPod ----------------------------------------------------------------------------


class Slurm:
    """Requests through Slurm: HyperPod watches for nodes failed with an Action: reason."""

    def __init__(self, run: Run, scontrol: str = "scontrol") -> None:
        self.run = run
        self.scontrol = scontrol

    def pending(self, node: str) -> str | None:
        """The Action the node is already failing or draining for, if any."""
        result = self.run([self.scontrol, "show", "node", node, "--oneliner"], 15)
        if not result.succeeded:
            return None
        fields: dict[str, str] = {}
        for token in result.stdout.split():
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        text = result.stdout
        reason = text.split("Reason=", 1)[1].strip() if "Reason=" in text else ""
        state = fields.get("State", "").upper()
        if reason.startswith("Action:") and any(s in state for s in ("FAIL", "DRAIN", "DOWN")):
            return reason.split()[0]
        return None

    def request(self, node: str, action: str) -> CommandResult:
        argv = [self.scontrol, "update", f"node={node}", "state=fail"]
        return self.run([*argv, f"reason={SLURM_REASON[action]}"], 30)


class Eks:
    """Requests through the node-health-status label that HyperPod's EKS agent acts on."""

    def __init__(self, run: Run, kubectl: str = "kubectl", kubeconfig: str | None = None) -> None:
        self.run = run
        self.base = [kubectl] + (["--kubeconfig", kubeconfig] if kubeconfig else [])

    def pending(self, node: str) -> str | None:
        path = "{.metadata.labels.sagemaker\\.amazonaws\\.com/node-health-status}"
        result = self.run([*self.base, "get", "node", node, "-o", f"jsonpath={path}"], 15)
        value = result.stdout.strip() if result.succeeded else ""
        return value if value in EKS_BUSY else None

    def request(self, node: str, action: str) -> CommandResult:
        label = f"{EKS_LABEL}={EKS_VALUE[action]}"
        return self.run([*self.base, "label", "node", node, label, "--overwrite"], 30)


# --- deciding -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    action: str  # none | reboot | replace
    check: str | None
    why: str


def remediation(settings: dict[str, Any], check: str) -> str:
    """What a failure of `check` may ask for: never anything for the checks HyperPod's agent
    acts on, else the rendered setting, else the check's default."""
    if check in AGENT_COVERED:
        return NONE
    chosen = ((settings.get("checks") or {}).get(check) or {}).get("remediation")
    return str(chosen) if chosen in SEVERITY else DEFAULT_REMEDIATION.get(check, NONE)


def decide(  # noqa: PLR0911 (the rules read best as one early return each)
    verdicts: list[Verdict],
    *,
    settings: dict[str, Any],
    state: dict[str, Any],
    now: float,
    uptime: float | None,
    pending: Callable[[], str | None],
    group: str | None = None,
) -> Decision:
    """The one action this run takes (the most severe a failing check asks for), or why none.
    `pending` is asked only when some check wants an action."""
    wanted = [(remediation(settings, v.check), v) for v in verdicts if v.status == FAIL]
    wanted = [(a, v) for a, v in wanted if a != NONE]
    if not wanted:
        failing = [v.check for v in verdicts if v.status == FAIL]
        if not failing:
            return Decision(NONE, None, "every check passed or could not run")
        covered = [c for c in failing if c in AGENT_COVERED]
        why = "failing checks only alert (remediation none)"
        if covered:
            why += "; " + ", ".join(covered) + " are acted on by HyperPod's health-monitoring agent"
        return Decision(NONE, failing[0], why)
    action, verdict = max(wanted, key=lambda av: SEVERITY[av[0]])
    check = verdict.check
    if not settings.get("auto_repair", True):
        return Decision(NONE, check, f"auto_repair is off: {check} would ask for {action}")
    repairable = settings.get("repairable_groups")
    if group is not None and isinstance(repairable, list) and group not in repairable:
        return Decision(
            NONE,
            check,
            f"group {group} is not a compute or worker group, whose nodes HyperPod repairs on "
            f"request; {check} would ask for {action}: repair it by hand",
        )
    grace = float(settings.get("boot_grace_seconds", 600))
    if uptime is not None and uptime < grace:
        return Decision(
            NONE, check, f"booted {uptime:.0f} s ago; no {action} in the first {grace:.0f} s"
        )
    last = state.get("last_action") or {}
    since = now - float(last.get("at", -1e12))
    cooldown = float(settings.get("cooldown_seconds", 1800))
    if since < cooldown:
        return Decision(
            NONE,
            check,
            f"asked for {last.get('action')} ({last.get('check')}) {since:.0f} s ago; "
            f"cooldown {cooldown:.0f} s",
        )
    already = pending()
    if already:
        return Decision(NONE, check, f"the node is already marked {already}")
    escalate = float(settings.get("escalate_within_seconds", 6 * 3600))
    if (
        action == REBOOT
        and last.get("action") == REBOOT
        and last.get("check") == check
        and since < escalate
    ):
        return Decision(
            REPLACE, check, f"{check} fails again {since:.0f} s after the reboot it asked for"
        )
    return Decision(action, check, f"{check} failed: {verdict.reason}")


# --- state and log ------------------------------------------------------------------------------


def load_state(path: str) -> dict[str, Any]:
    text = _read(path)
    if not text:
        return {}
    try:
        state = json.loads(text)
    except ValueError:
        return {}  # a torn or hand-edited file: start over rather than never act again
    return state if isinstance(state, dict) else {}


def save_state(path: str, state: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: str) -> Iterator[bool]:
    """True when this run holds the lock; False when another run is still going."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                yield False
                return
            raise
        yield True


class JsonLog:
    """One JSON object per line, to a file (shipped to CloudWatch) and to stdout (the journal)."""

    def __init__(self, path: str | None, stream: IO[str] | None = None) -> None:
        self.path = path
        self.stream = stream if stream is not None else sys.stdout
        self.lines: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.lines.append(record)
        text = json.dumps(record, sort_keys=False, default=str)
        self.stream.write(text + "\n")
        self.stream.flush()
        if not self.path:
            return
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            if os.path.exists(self.path) and os.path.getsize(self.path) > LOG_ROTATE_BYTES:
                os.replace(self.path, self.path + ".1")
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            print(f"{SOURCE}: cannot write {self.path}: {e}", file=sys.stderr)


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Runner:
    """One pass of the checks on one node. Every outside dependency is a field, so phase 2's
    local-Slurm harness and the demo drive the real thing: `run` (commands), `clock`, `root`
    (/proc, /sys, /opt/ml), `kernel_log`, the state and log paths."""

    settings: dict[str, Any]
    node: Node
    orchestrator: str = "slurm"
    state_file: str = DEFAULT_STATE
    log: JsonLog = field(default_factory=lambda: JsonLog(DEFAULT_LOG))
    root: str = "/"
    kernel_log: str | None = None
    run: Run = run_command
    clock: Callable[[], float] = time.time
    statvfs: Callable[[str], Any] = os.statvfs
    dry_run: bool = False
    only: list[str] | None = None

    def client(self) -> Slurm | Eks:
        tools = self.settings.get("tools") or {}
        if self.orchestrator == "eks":
            kubeconfig = (self.settings.get("eks") or {}).get("kubeconfig")
            return Eks(self.run, str(tools.get("kubectl", "kubectl")), kubeconfig)
        return Slurm(self.run, str(tools.get("scontrol", "scontrol")))

    def uptime(self) -> float | None:
        text = _read(os.path.join(self.root, "proc/uptime"))
        try:
            return float(text.split()[0]) if text else None
        except ValueError:
            return None

    def checks(self) -> list[str]:
        configured = list((self.settings.get("checks") or {}).keys())
        names = self.only if self.only is not None else configured
        unknown = [n for n in names if n not in CHECKS]
        if unknown:
            raise UsageError(f"unknown checks {unknown}; known: {sorted(CHECKS)}")
        return names

    def once(self) -> int:
        if not self.settings.get("enabled", True):
            self._line("skipped", why="monitoring is off in the environment file")
            return EXIT_OK
        with locked(self.state_file + ".lock") as mine:
            if not mine:
                self._line("skipped", why="another run is still going")
                return EXIT_OK
            return self._once()

    def _once(self) -> int:
        now = self.clock()
        state = load_state(self.state_file)
        ctx = Context(
            settings=self.settings,
            facts=self.node.facts,
            node=self.node.name,
            root=self.root,
            run=self.run,
            statvfs=self.statvfs,
            clock=self.clock,
            kernel_log=self.kernel_log,
            state=state.setdefault("checks", {}),
        )
        verdicts = [self._check(name, ctx) for name in self.checks()]
        client = self.client()
        decision = decide(
            verdicts,
            settings=self.settings,
            state=state,
            now=now,
            uptime=self.uptime(),
            pending=lambda: client.pending(self.node.name),
            group=self.node.instance_group,
        )
        for v in verdicts:
            self._line(
                "verdict",
                check=v.check,
                status=v.status,
                reason=v.reason,
                recommended=v.recommended,
                remediation=remediation(self.settings, v.check),
                acts=decision.action != NONE and v.check == decision.check,
                details=v.details,
            )
        executed = False
        command: list[str] | None = None
        error = None
        if decision.action != NONE and not self.dry_run:
            result = client.request(self.node.name, decision.action)
            command, executed = result.argv, result.succeeded
            if executed:
                record = {"action": decision.action, "check": decision.check, "at": now}
                state["last_action"] = record
                state["actions"] = ([*state.get("actions", []), record])[-20:]
            else:
                error = result.describe()
        self._line(
            "decision",
            action=decision.action,
            check=decision.check,
            why=decision.why,
            dry_run=self.dry_run,
            executed=executed,
            command=command,
            error=error,
        )
        state["last_run"] = now
        save_state(self.state_file, state)
        return EXIT_FAILED if any(v.status == FAIL for v in verdicts) else EXIT_OK

    def _check(self, name: str, ctx: Context) -> Verdict:
        try:
            return CHECKS[name](ctx)
        except Exception as e:  # one broken check must not silence the others
            return Verdict(name, CANNOT_RUN, f"the check crashed: {type(e).__name__}: {e}")

    def _line(self, event: str, **fields: Any) -> None:
        record = {
            "time": _iso(self.clock()),
            "source": SOURCE,
            "event": event,
            "node": self.node.name,
            "instance_id": self.node.instance_id,
            "instance_group": self.node.instance_group,
            "instance_type": self.node.facts.instance_type,
            "orchestrator": self.orchestrator,
        }
        record.update(fields)
        self.log.write(record)


# --- systemd units ------------------------------------------------------------------------------


def units(
    settings: dict[str, Any],
    *,
    runner: str,
    settings_path: str,
    python: str,
    instance_group: str | None = None,
) -> dict[str, str]:
    """The service and timer that run the checks every `interval_seconds` (systemd kills a run
    that outlasts the interval; the runner's own deadlines make that a last resort)."""
    interval = int(settings.get("interval_seconds", 300))
    group = f" --instance-group {instance_group}" if instance_group else ""
    service = f"""[Unit]
Description=hyperpod-kit node health checks (docs/health.md)
After=network-online.target remote-fs.target

[Service]
Type=oneshot
ExecStart={python} {runner} run --settings {settings_path}{group}
TimeoutStartSec={interval}
Nice=10
# exit 1 means a check failed: logged, not a unit failure
SuccessExitStatus=1
"""
    timer = f"""[Unit]
Description=Run hyperpod-kit node health checks every {interval} s

[Timer]
OnBootSec=120
OnUnitActiveSec={interval}
RandomizedDelaySec=30
AccuracySec=10

[Install]
WantedBy=timers.target
"""
    return {f"{UNIT}.service": service, f"{UNIT}.timer": timer}


# --- command line -------------------------------------------------------------------------------


def load_settings(path: str) -> dict[str, Any]:
    text = _read(path)
    if text is None:
        raise UsageError(f"cannot read settings {path}")
    try:
        settings = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{path} is not JSON: {e}") from e
    if not isinstance(settings, dict) or settings.get("version") != SETTINGS_VERSION:
        raise UsageError(f"{path}: expected settings version {SETTINGS_VERSION}")
    return settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runner.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="one pass of the checks (the default)")
    run.add_argument("--settings", default=DEFAULT_SETTINGS)
    run.add_argument("--dry-run", action="store_true", help="decide and log, ask for nothing")
    run.add_argument("--checks", help="comma-separated subset of the configured checks")
    run.add_argument("--orchestrator", choices=("slurm", "eks"))
    run.add_argument("--node-name", help="the node's Slurm or Kubernetes name")
    run.add_argument("--instance-group")
    run.add_argument("--instance-type")
    run.add_argument("--state-file", default=DEFAULT_STATE)
    run.add_argument("--log-file", default=DEFAULT_LOG)
    run.add_argument("--root", default="/", help="prefix of /proc, /sys and /opt/ml (tests)")
    run.add_argument("--kernel-log", help="read kernel-log lines from this file")
    run.add_argument("--now", type=float, help="the clock, as a Unix time (tests, the demo)")
    out = sub.add_parser("units", help="write the systemd service and timer")
    out.add_argument("--settings", default=DEFAULT_SETTINGS)
    out.add_argument("--out", help="folder to write them to (default: print)")
    out.add_argument("--python", default="/usr/bin/python3")
    out.add_argument("--instance-group", help="the node's group (the lifecycle's HPK_GROUP)")
    out.add_argument(
        "--root", default="/", help="the node's / as seen here: units name paths below it (tests)"
    )
    return p


def node_path(path: str, root: str) -> str:
    """`path` as the node sees it when `root` stands for its / (the lifecycle's sandbox)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    if root == "/":
        return path
    if os.path.commonpath([path, root]) != root:
        raise UsageError(f"{path} is not under --root {root}")
    return "/" + os.path.relpath(path, root)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "units", "-h", "--help"):
        argv.insert(0, "run")
    args = parser().parse_args(argv)
    command = args.command
    try:
        settings = load_settings(args.settings)
        if command == "units":
            files = units(
                settings,
                runner=node_path(__file__, args.root),
                settings_path=node_path(args.settings, args.root),
                instance_group=args.instance_group,
                python=args.python,
            )
            for name, text in files.items():
                if args.out:
                    os.makedirs(args.out, exist_ok=True)
                    with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
                        f.write(text)
                else:
                    sys.stdout.write(f"# {name}\n{text}\n")
            return EXIT_OK
        orchestrator = args.orchestrator or str(settings.get("orchestrator", "slurm"))
        node = resolve_node(
            settings,
            orchestrator,
            root=args.root,
            node_name=args.node_name,
            instance_group=args.instance_group,
            instance_type=args.instance_type,
        )
        fixed = args.now
        runner = Runner(
            settings=settings,
            node=node,
            orchestrator=orchestrator,
            state_file=args.state_file,
            log=JsonLog(args.log_file or None),
            root=args.root,
            kernel_log=args.kernel_log,
            clock=(lambda: float(fixed)) if fixed is not None else time.time,
            dry_run=args.dry_run,
            only=[c for c in args.checks.split(",") if c] if args.checks else None,
        )
        return runner.once()
    except UsageError as e:
        print(f"{SOURCE}: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
