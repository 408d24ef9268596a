"""`hyperpod-kit status FILE` and `hyperpod-kit logs FILE`: after a deploy, "is it up, and if not,
why", and the nodes' logs, through the one AWS facade (`hyperpod_kit.config.aws`).

status exit codes: 0 healthy (everything the file implies is deployed and well); 1 in progress,
not deployed (something the file names is missing: a stack, the cluster, an instance group, the
file system, Studio, the accounting database, monitoring), degraded or failed (with the diagnosis
when something failed); 2 bad input, no credentials, the account cannot be asked, or nothing of
the environment is deployed (one line that says which). logs: 0, or 2 for the same reasons.

What either prints as text passes `text.printable`: what AWS holds (node logs, failure
messages) reaches the terminal with its control characters and escape sequences written
visibly, never executed (`logs --save` keeps the events as they are).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.outputs import LOGS, FolderOutput, write_error
from hyperpod_kit.text import printable

if TYPE_CHECKING:  # boto3 is imported when status or logs runs, not for every command's parser
    from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
    from hyperpod_kit.operations import logs as node_logs
    from hyperpod_kit.operations.discovery import Deployed
    from hyperpod_kit.operations.status import ClusterState, Status

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
WATCH_LIMIT_S = 2 * 3600  # --watch gives up after this long, even if something is still moving
FOLLOW_EVERY_S = 5.0
_SINCE = re.compile(r"^(\d+)([smhd])$")
# --since goes back at most this far: CloudWatch Logs keeps events at most 10 years (its longest
# retention, 3653 days), so an older start finds nothing more.
SINCE_LIMIT_DAYS = 3653


STATUS_HELP = (
    "is the deployed environment up, and if not, why (stacks, cluster, nodes, storage, Studio, "
    "alarms, and a diagnosis of a failure)"
)
LOGS_HELP = (
    "the nodes' logs (lifecycle scripts, health verdicts, shipper) from the cluster's CloudWatch "
    "log group, the failing node first"
)


def add_status_arguments(st: argparse.ArgumentParser) -> None:
    st.epilog = _STATUS_EPILOG
    st.formatter_class = argparse.RawDescriptionHelpFormatter
    st.add_argument("--format", choices=["text", "json"], default="text",
                    help="text or JSON, on stdout (text)")  # fmt: skip
    st.add_argument("--watch", action="store_true",
                    help="refresh until nothing is in progress (at most 2 hours); with "
                    "--format json, one JSON document a line for each refresh")  # fmt: skip
    st.add_argument("--interval", type=interval_seconds, default=30.0, metavar="SECONDS",
                    help="with --watch: seconds between refreshes, above 0 and at most "
                    f"{WATCH_LIMIT_S} (30)")  # fmt: skip


def interval_seconds(text: str) -> float:
    """`--interval`: a finite number of seconds above 0, at most the watch's limit (nan, inf,
    0 and negatives are refused when the command line is parsed, not in the middle of a watch)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= WATCH_LIMIT_S):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0 and at most {WATCH_LIMIT_S}. Hint: "
            "e.g. --interval 30"
        )
    return value


def add_logs_arguments(lg: argparse.ArgumentParser) -> None:
    which = lg.add_mutually_exclusive_group()
    which.add_argument("--node", metavar="ID", help="one node: its instance id (i-...)")
    which.add_argument("--group", metavar="NAME", help="the nodes of one instance group")
    lg.add_argument("--since", metavar="AGE",
                    help="only events newer than this: 30m, 2h, 1d, or an ISO time")  # fmt: skip
    lg.add_argument("--grep", metavar="REGEX", help="only lines that match (Python regex)")
    lg.add_argument("--follow", action="store_true", help="keep printing new events (Ctrl-C)")
    lg.add_argument("--save", metavar="DIR",
                    help="export every stream (one file each) to DIR: new, empty, or an export "
                    "hyperpod-kit wrote")  # fmt: skip


_STATUS_EPILOG = """\
Node health is the health runner's newest verdicts in the cluster's log group (the API has no
health field): "log-group verdict" with the verdict's time; on EKS also "eks-label" (the node's
sagemaker.amazonaws.com/node-health-status, read from the cluster's Kubernetes API with the
caller's access entry); "unknown" when there is none.
Stacks are found by their hyperpod-kit:environment tag, the rest through the discovery
parameters /hyperpod-kit/<env>/<area>.
The cluster's newest operations (ListClusterOperations: scaling, deep health checks; the API does
not say who started one) and the training plans its groups run on (DescribeTrainingPlan: "error"
once ended, "warning" within 7 days of the end) are shown, and in --format json as "operations"
and "deadlines", each with its "line". Neither changes the exit code: a group an ended plan
leaves short of nodes is degraded on its own count.

exit codes:
  0  healthy: everything the file implies is there and well
  1  in progress; not deployed (a stack, the cluster, an instance group, the file system,
     Studio, the accounting database or monitoring the file names is missing: each named);
     degraded (a group short of the file's count, an unhealthy node, an alarm in ALARM, a
     partition not ready, little free space); or failed (with the likely cause)
  2  bad input: the file, no credentials, the account cannot be asked, or nothing deployed"""


def _facade(loaded: LoadedEnvironment) -> AwsFacade | None:
    """The facade, or None after one line: no credentials, or those of another account than
    the file's `account` (where nothing of it could be found)."""
    from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError

    aws = AwsFacade(loaded.config.region)
    if not aws.has_credentials():
        print(f"{loaded.file}: no AWS credentials found. Hint: configure them (aws configure, "
              "AWS_PROFILE, or SSO) for the account the environment is deployed in.",
              file=sys.stderr)  # fmt: skip
        return None
    wanted = loaded.config.account
    if wanted:
        try:
            actual = aws.account_id()
        except AwsUnavailableError as e:
            _unavailable(loaded, e)
            return None
        if actual != wanted:
            print(f"{loaded.file}: the credentials are for account {actual}, the environment "
                  f"is in {wanted}. Hint: use credentials of account {wanted} (e.g. "
                  "AWS_PROFILE).", file=sys.stderr)  # fmt: skip
            return None
    return aws


def _unavailable(loaded: LoadedEnvironment, e: AwsUnavailableError) -> int:
    print(f"{loaded.file}: cannot ask AWS ({e}). Hint: check the credentials' permissions, the "
          "network, and the region in the file.", file=sys.stderr)  # fmt: skip
    return EXIT_BAD_INPUT


def _nothing(loaded: LoadedEnvironment) -> int:
    c = loaded.config
    print(f"{loaded.file}: nothing of environment {c.name} is deployed in {c.region} (no stack "
          f"tagged hyperpod-kit:environment={c.name}, no /hyperpod-kit/{c.name}/* parameter). "
          f"Hint: deploy it first (hyperpod-kit deploy {loaded.file}), or use the credentials "
          "of the account it is in.", file=sys.stderr)  # fmt: skip
    return EXIT_BAD_INPUT


def status(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.config.aws import AwsUnavailableError
    from hyperpod_kit.operations.status import NothingDeployedError, collect

    if not (math.isfinite(args.interval) and 0 < args.interval <= WATCH_LIMIT_S):
        print(f"--interval: {args.interval!r} is not a number of seconds above 0 and at most "
              f"{WATCH_LIMIT_S}. Hint: e.g. --interval 30.", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    aws = _facade(loaded)
    if aws is None:
        return EXIT_BAD_INPUT
    deadline = time.monotonic() + WATCH_LIMIT_S
    while True:
        try:
            result = collect(loaded.config, aws)
        except NothingDeployedError:
            return _nothing(loaded)
        except AwsUnavailableError as e:
            return _unavailable(loaded, e)
        if args.format == "json":  # with --watch, JSON Lines: one document a refresh
            indent = None if args.watch else 2
            print(json.dumps(result.as_json(), indent=indent, default=str), flush=True)
        else:
            sys.stdout.write(printable(render(result)))
            sys.stdout.flush()
        if not args.watch or result.stable or time.monotonic() >= deadline:
            return result.exit_code
        time.sleep(args.interval)


def render(s: Status) -> str:
    out = [f"environment {s.environment} ({s.region}): {s.state.upper()}"]
    out.append("stacks:")
    for stack in s.stacks:
        reason = f" ({stack.reason})" if stack.reason else ""
        out.append(f"  {stack.name:<32} {stack.status}{reason}")
        for e in stack.events:
            why = f": {e.reason}" if e.reason else ""
            out.append(f"    {e.time} {e.resource} ({e.type}) {e.status}{why}")
    for missing in s.missing:
        if missing.startswith("stack "):
            out.append(f"  {missing.removeprefix('stack '):<32} not deployed")
    if s.cluster is not None:
        out += _render_cluster(s.cluster) + _render_operations(s)
    out += [f"{d.severity}: {d.line}" for d in s.deadlines]
    fs = s.file_system
    if fs is not None:
        free = "free space unknown" if fs.free_gib is None else f"{fs.free_gib:g} GiB free"
        out.append(f"file system {fs.id}: {fs.lifecycle}, {fs.capacity_gib} GiB, {free}"
                   + (f" ({fs.failure})" if fs.failure else ""))  # fmt: skip
        for a in fs.associations:
            out.append(f"  association {a.file_system_path} -> {a.data_repository_path}: "
                       f"{a.lifecycle}" + (f" ({a.failure})" if a.failure else ""))  # fmt: skip
    st = s.studio
    if st is not None:
        out.append(f"Studio domain {st.domain_id}: {st.status}"
                   + (f" ({st.failure})" if st.failure else ""))  # fmt: skip
        out.append(f"  partitions ready: {', '.join(st.partitions_ready) or 'none'}")
        for name, why in st.partitions_waiting.items():
            out.append(f"  partition {name}: {why}")
    db = s.accounting
    if db is not None:
        out.append(f"accounting database {db.identifier}: {db.status}")
    out.append("alarms in ALARM: " + (", ".join(a.name for a in s.alarms) or "none"))
    if s.problems:
        out.append("problems:")
        out += [f"  {p}" for p in s.problems]
    for d in s.diagnoses:
        out.append(d.render())
    return "\n".join(out) + "\n"


def _render_operations(s: Status) -> list[str]:
    """The cluster's newest operations (ListClusterOperations), or why they are not shown."""
    if s.operations_read:
        return [f"  operations: {s.operations_read}"]
    if s.operations:
        return ["  operations (newest first):", *(f"    {o.line}" for o in s.operations)]
    return [] if s.cluster is None or s.cluster.status == "NotFound" else ["  operations: none"]


def _render_cluster(c: ClusterState) -> list[str]:
    out: list[str] = []
    failure = f": {c.failure_message}" if c.failure_message else ""
    out.append(f"cluster {c.name}: {c.status}{failure}")
    for g in c.groups:
        out.append(f"  group {g.name:<16} {g.instance_type:<18} {g.current}/{g.target} "
                   f"nodes {g.status}".rstrip())  # fmt: skip
    for n in c.nodes:
        image = f" image {n.image_version_status}" if n.image_version_status else ""
        message = f" ({n.message})" if n.message else ""
        h = n.health
        seen = f" ({h.source}, {h.time})" if h.time else f" ({h.source})"
        out.append(f"  node {n.instance_id} {n.group:<16} {n.status}{message} health "
                   f"{h.value}{seen}: {h.reason}{image}")  # fmt: skip
    if c.eks_labels:
        out.append(f"  EKS health labels: {c.eks_labels}")
    if c.log_group:
        out.append(f"  logs: {c.log_group} (hyperpod-kit logs FILE)")
    return out


def since_ms(text: str | None, now: datetime.datetime | None = None) -> int | None:
    """`--since`: 30m, 2h, 1d, 45s, or an ISO 8601 time; ValueError with the reason."""
    if text is None:
        return None
    now = now or datetime.datetime.now(datetime.UTC)
    m = _SINCE.match(text.strip())
    oldest = now - datetime.timedelta(days=SINCE_LIMIT_DAYS)
    too_old = (f"goes back further than CloudWatch Logs keeps events ({SINCE_LIMIT_DAYS} days, "
               "10 years)")  # fmt: skip
    if m:
        if len(m[1].lstrip("0")) > 12:  # more than 3653 days in any unit; int() has a limit
            raise ValueError(too_old)
        seconds = int(m[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]
        if seconds > SINCE_LIMIT_DAYS * 86400:
            raise ValueError(too_old)
        return int((now - datetime.timedelta(seconds=seconds)).timestamp() * 1000)
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("is neither an age (30m, 2h, 1d) nor an ISO time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    if when < oldest:
        raise ValueError(too_old)
    return int(when.timestamp() * 1000)


def logs(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.config.aws import AwsUnavailableError

    try:
        start = since_ms(args.since)
    except ValueError as e:
        print(f"--since: {args.since!r} {e}. Hint: an age up to {SINCE_LIMIT_DAYS}d or an ISO "
              "time since then, e.g. --since 2h.", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    try:
        grep = re.compile(args.grep) if args.grep is not None else None
    except re.error as e:
        print(f"--grep: {args.grep!r} is not a regular expression ({e}). Hint: escape special "
              "characters, e.g. --grep 'FAILED in'.", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    # a folder we may not replace is refused before AWS is asked (OutputError: exit 2)
    output = None if args.save is None else FolderOutput.checked(args.save, LOGS)
    aws = _facade(loaded)
    if aws is None:
        return EXIT_BAD_INPUT
    try:
        return _logs(loaded, args, aws, output, start=start, grep=grep)
    except AwsUnavailableError as e:
        return _unavailable(loaded, e)


def cluster_log_group(loaded: LoadedEnvironment, deployed: Deployed) -> str | None:
    """The deployed cluster's log group, or None after one line: nothing of the environment is
    deployed, or its cluster has not published its name and id yet (`logs`, `verify`)."""
    from hyperpod_kit.operations import logs as node_logs

    if deployed.nothing:
        _nothing(loaded)
        return None
    group = node_logs.log_group(deployed)
    if group is None:
        print(f"{loaded.file}: the cluster of environment {loaded.config.name} has not "
              "published its name and id yet (no /hyperpod-kit/"
              f"{loaded.config.name}/cluster parameter). Hint: `hyperpod-kit status "
              f"{loaded.file}` shows how far the deploy got.", file=sys.stderr)  # fmt: skip
    return group


def _logs(
    loaded: LoadedEnvironment, args: argparse.Namespace, aws: AwsFacade,
    output: FolderOutput | None, *, start: int | None, grep: re.Pattern[str] | None,
) -> int:  # fmt: skip
    from hyperpod_kit.operations import logs as node_logs
    from hyperpod_kit.operations.discovery import discover
    from hyperpod_kit.operations.status import failing_nodes

    deployed = discover(loaded.config.name, aws)
    group = cluster_log_group(loaded, deployed)
    if group is None:
        return EXIT_BAD_INPUT
    first = failing_nodes(aws, deployed)
    streams = node_logs.select(node_logs.streams(aws, group), node=args.node,
                               group=args.group, first=first)  # fmt: skip
    if not streams:
        which = args.node or args.group or "any node"
        print(f"{group}: no log stream of {which} yet (a node that failed before its "
              "scripts ran has none; `hyperpod-kit status` shows the failure message)",
              file=sys.stderr)  # fmt: skip
        return EXIT_OK
    if output is not None:
        return _save(aws, group, streams, output, since=start, grep=grep)
    return _print(aws, group, streams, since=start, grep=grep, follow=args.follow)


def _print(
    aws: AwsFacade, group: str, streams: list[node_logs.Stream], *, since: int | None,
    grep: re.Pattern[str] | None, follow: bool,
) -> int:  # fmt: skip
    from hyperpod_kit.operations import logs as node_logs

    names = [s.name for s in streams]
    shown = set[tuple[str, int, str]]()
    while True:
        events = node_logs.events(aws, group, names, since_ms=since, grep=grep)
        if not follow:  # stream by stream, the failing node's first
            for stream in names:
                rows = [e for e in events if e.stream == stream]
                if rows:
                    print(printable(f"==> {stream} <=="))
                    for e in rows:
                        print(printable(f"{_stamp(e.timestamp_ms)} {e.message}"))
            return EXIT_OK
        for e in events:  # interleaved by time, each event once
            key = (e.stream, e.timestamp_ms, e.message)
            if key not in shown:
                shown.add(key)
                print(printable(f"{_stamp(e.timestamp_ms)} [{e.stream}] {e.message}"),
                      flush=True)  # fmt: skip
        if events:
            since = max(e.timestamp_ms for e in events)
        time.sleep(FOLLOW_EVERY_S)


def _stamp(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _save(
    aws: AwsFacade, group: str, streams: list[node_logs.Stream], output: FolderOutput, *,
    since: int | None, grep: re.Pattern[str] | None,
) -> int:  # fmt: skip
    from hyperpod_kit.operations import logs as node_logs

    try:
        with output.staging() as folder:
            for stream in streams:
                events = node_logs.events(aws, group, [stream.name], since_ms=since, grep=grep)
                text = "".join(f"{_stamp(e.timestamp_ms)} {e.message}\n" for e in events)
                (Path(folder) / node_logs.file_name(stream.name)).write_text(text, "utf-8")
            output.commit(folder, log_group=group, streams=[s.name for s in streams])
    except OSError as e:
        print(write_error(e, output.target), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"saved {len(streams)} streams of {group} to {output.target}", file=sys.stderr)
    return EXIT_OK
