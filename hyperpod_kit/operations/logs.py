"""A cluster's node logs in CloudWatch Logs: which streams belong to which node, their events, the
health runner's newest verdict, and an export of every stream.

The group is HyperPod's own, `/aws/sagemaker/Clusters/<cluster-name>/<cluster-id>` (the names
from the cluster stack's discovery parameter); its streams are per instance
(`hyperpod_kit.naming.LOG_STREAMS`: HyperPod's `LifecycleConfig/<group>/<instance-id>`, the
streams the nodes' shipper sends, the health-monitoring agent's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.naming import LOG_STREAMS, cluster_log_group_name
from hyperpod_kit.operations.discovery import Deployed

MISSING = ("ResourceNotFoundException",)
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")
MAX_EVENTS = 10_000  # one stream's events read at a time, at most


@dataclass(frozen=True)
class Stream:
    name: str
    kind: str  # a key of LOG_STREAMS, or "other"
    instance_id: str | None
    group: str | None  # the instance group, for HyperPod's LifecycleConfig/<group>/<id>
    last_event_ms: int | None


@dataclass(frozen=True)
class LogEvent:
    stream: str
    timestamp_ms: int
    message: str


# Where a node's health came from: the health runner's newest verdicts in the cluster's log group,
# on EKS the node's label `sagemaker.amazonaws.com/node-health-status` (HyperPod's own verdict,
# read from the cluster's Kubernetes API by `status`), or nothing. HyperPod's node health events
# go to the alert topic and are not stored (docs/troubleshooting.md).
LOG_GROUP_VERDICT, EKS_LABEL, UNKNOWN = "log-group verdict", "eks-label", "unknown"


@dataclass(frozen=True)
class Health:
    """A node's health: "healthy", "unhealthy" or "unknown", where that was read (`source`), the
    time of the verdict, and for an unhealthy node each failed check ("check: reason")."""

    value: str
    source: str
    reason: str
    time: str | None = None
    stream: str | None = None
    failed: tuple[str, ...] = ()


def log_group(deployed: Deployed) -> str | None:
    """The cluster's log group, from the cluster stack's discovery parameter; None before it."""
    name, cluster_id = (
        deployed.handle("cluster", "cluster_name"),
        deployed.handle("cluster", "cluster_id"),
    )
    return cluster_log_group_name(name, cluster_id) if name and cluster_id else None


def classify(name: str) -> Stream:
    """A stream's kind, node and instance group, from its name: the per-instance streams end with
    the instance id; others are the node's when an instance id appears in them."""
    kind = next((k for k, prefix in LOG_STREAMS.items() if name.startswith(prefix)), "other")
    parts = name.split("/")
    found = INSTANCE_ID.findall(name)
    instance_id = found[-1] if found else None
    if kind in ("lifecycle", "shipped-lifecycle", "health", "jobs") and len(parts) >= 3:
        instance_id = parts[-1]
    group = parts[1] if kind == "lifecycle" and len(parts) >= 3 else None
    return Stream(name, kind, instance_id, group, None)


def streams(aws: AwsFacade, group: str, *, prefix: str | None = None) -> list[Stream]:
    """Every stream of the group (none when the group does not exist yet), or those whose name
    starts with `prefix`."""
    kwargs: dict[str, Any] = {"logStreamNamePrefix": prefix} if prefix else {}
    rows = aws.pages("logs", "describe_log_streams", "logStreams", missing=MISSING,
                     logGroupName=group, **kwargs)  # fmt: skip
    found = []
    for row in rows:
        s = classify(row["logStreamName"])
        found.append(Stream(s.name, s.kind, s.instance_id, s.group, row.get("lastEventTimestamp")))
    return found


def select(
    found: Iterable[Stream], *, node: str | None = None, group: str | None = None,
    first: Iterable[str] = (),
) -> list[Stream]:  # fmt: skip
    """The streams of one node (`node`: an instance id, or a part of the stream name) or of one
    instance group, the nodes named in `first` (a failing node) before the others."""
    chosen = [
        s
        for s in found
        if (node is None or s.instance_id == node or (s.instance_id is None and node in s.name))
        and (group is None or s.group == group)
    ]
    if group is not None:  # the shipped streams of the group's nodes, found by instance id
        ids = {s.instance_id for s in chosen if s.instance_id}
        chosen += [s for s in found if s.group is None and s.instance_id in ids and s not in chosen]
    first = list(first)
    order = {iid: i for i, iid in enumerate(first)}
    kinds = [*LOG_STREAMS, "other"]
    return sorted(
        chosen,
        key=lambda s: (order.get(s.instance_id or "", len(order)), s.instance_id or "",
                       kinds.index(s.kind), s.name),
    )  # fmt: skip


def events(
    aws: AwsFacade,
    group: str,
    stream_names: list[str],
    *,
    since_ms: int | None = None,
    grep: re.Pattern[str] | None = None,
    limit: int = MAX_EVENTS,
) -> list[LogEvent]:
    """The events of `stream_names` (oldest first), since `since_ms`, matching `grep`."""
    found: list[LogEvent] = []
    for start in range(0, len(stream_names), 100):  # FilterLogEvents takes 100 streams a call
        kwargs: dict[str, Any] = {
            "logGroupName": group,
            "logStreamNames": stream_names[start : start + 100],
        }
        if since_ms is not None:
            kwargs["startTime"] = since_ms
        rows = aws.pages("logs", "filter_log_events", "events", missing=MISSING, limit=limit,
                         **kwargs)  # fmt: skip
        for row in rows:
            message = str(row.get("message", "")).rstrip("\n")
            if grep is None or grep.search(message):
                found.append(LogEvent(row["logStreamName"], int(row["timestamp"]), message))
    return sorted(found, key=lambda e: (e.timestamp_ms, e.stream))


def tail(aws: AwsFacade, group: str, stream: str, lines: int = 200) -> list[str]:
    """The newest `lines` messages of one stream (oldest first)."""
    page = aws.call(
        f"logs:GetLogEvents {stream}",
        aws.client("logs").get_log_events,
        logGroupName=group,
        logStreamName=stream,
        limit=lines,
        startFromHead=False,
        missing=MISSING,
    )
    return [str(e.get("message", "")).rstrip("\n") for e in (page or {}).get("events", [])]


def health(aws: AwsFacade, group: str, instance_id: str) -> Health:
    """The runner's newest verdicts (the lines of its newest run, one time stamp) of a node, read
    from the newest events of its stream (GetLogEvents from the end)."""
    stream = f"{LOG_STREAMS['health']}{instance_id}"
    verdicts = []
    for line in tail(aws, group, stream):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("event") == "verdict":
            verdicts.append(row)
    if not verdicts:
        return Health("unknown", UNKNOWN, f"no verdict of the health runner in {stream}")
    newest = max(str(v.get("time", "")) for v in verdicts)
    run = [v for v in verdicts if str(v.get("time", "")) == newest]
    failed = tuple(f"{v.get('check')}: {v.get('reason')}" for v in run if v.get("status") == "fail")
    if failed:
        return Health("unhealthy", LOG_GROUP_VERDICT, "; ".join(failed), newest, stream, failed)
    reason = f"{len(run)} checks passed or could not run"
    return Health("healthy", LOG_GROUP_VERDICT, reason, newest, stream)


def file_name(stream: str) -> str:
    """A stream's file in an export: its name with "/" as "__", then ".log"."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", stream.replace("/", "__"))
    return f"{safe}.log"
