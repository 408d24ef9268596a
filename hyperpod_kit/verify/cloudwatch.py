"""A verify run's records from the cluster's log group.

The node command writes each record as a line of the jobs' spool, which the nodes' log shipper
sends to the cluster's log group (`/aws/sagemaker/Clusters/<name>/<id>`) as the stream
`hyperpod-kit/jobs/<run>/<instance-id>`, one event a line. The run is the newest among the
streams' names (or the one asked for); every event of its streams is read (every page), and the
events of each stream are numbered from 1 as the lines of a file (`SOURCE:LINE` of a finding:
the stream and the event's place in it). Streams and events through `operations.logs`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.naming import LOG_STREAMS
from hyperpod_kit.operations import logs
from hyperpod_kit.verify.records import RUN_ID, Line, UnknownRunError

PREFIX = f"{LOG_STREAMS['jobs']}verify-"  # hyperpod-kit/jobs/verify-<time>/<instance-id>
MAX_LINES = 200_000  # a run's events read at most (a 64-node run writes a few thousand)


class NoRunError(ValueError):
    """The log group holds no verify run."""


@dataclass(frozen=True)
class Found:
    group: str
    run: str
    runs: tuple[str, ...]  # every run in the group, oldest first
    streams: tuple[str, ...]  # the run's streams
    lines: tuple[Line, ...]


def run_of(stream: str) -> str | None:
    """The run id in a stream's name `hyperpod-kit/jobs/<run>/<instance-id>`, or None."""
    parts = stream.removeprefix(LOG_STREAMS["jobs"]).split("/")
    return parts[0] if RUN_ID.match(parts[0]) else None


def read_run(aws: AwsFacade, group: str, run: str | None = None) -> Found:
    """The lines of `run` (the newest by default) from the log group `group`."""
    by_run: dict[str, list[str]] = defaultdict(list)
    for stream in logs.streams(aws, group, prefix=PREFIX):
        found = run_of(stream.name)
        if found is not None:
            by_run[found].append(stream.name)
    runs = tuple(sorted(by_run))
    if not runs:
        raise NoRunError(f"{group}: no verify run in the log group (no stream {PREFIX}*)")
    if run is None:
        run = runs[-1]
    elif run not in by_run:
        raise UnknownRunError(
            f"{group}: no stream of run {run} (runs found: {', '.join(runs[-5:])})"
        )
    names = sorted(by_run[run])
    numbered: dict[str, int] = defaultdict(int)
    lines = []
    for event in logs.events(aws, group, names, limit=MAX_LINES):
        numbered[event.stream] += 1
        lines.append(Line(event.stream, numbered[event.stream], event.message))
    return Found(group, run, runs, tuple(names), tuple(lines))
