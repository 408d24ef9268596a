"""The records of a verify run (the one format between the suite and the report, issue #28's
contract): JSON Lines, one object a line, each with the run id (`verify-YYYYMMDDTHHMMSSZ`) and a
`type`. `parse` turns lines into typed records; a line that is not a record of the contract is a
`RecordError` that reads `SOURCE:LINE: reason` (the command exits 2 on it). `pick` keeps one run:
the newest (run ids sort by their UTC time), or the one asked for.

Keys the contract does not name are ignored (a newer suite may add some); a key it names with a
value of the wrong type, a missing one, or an unknown `type` is refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

RUN_ID = re.compile(r"^verify-\d{8}T\d{6}Z$")
MAX_LINE = 1 << 20  # one record's line, at most
MAX_RESULTS_BYTES = 64 << 20  # a run's file (`verify --results`), at most


class RecordError(ValueError):
    """A line that is not a record: `SOURCE:LINE: reason`."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source, self.line, self.reason = source, line, reason


@dataclass(frozen=True)
class Line:
    """One line of input: where it came from (a file, or a log group's stream) and its text."""

    source: str
    number: int
    text: str


@dataclass(frozen=True)
class Group:
    name: str
    partition: str | None
    instance_type: str | None
    count: int


@dataclass(frozen=True)
class FsxSpec:
    """The file system as the run found it: its provisioned throughput is the FSx floor."""

    path: str
    provisioned_mb_s: float | None
    capacity_gib: float | None
    per_tib_mb_s: float | None
    deployment_type: str | None


@dataclass(frozen=True)
class Run:
    run: str
    started: str
    environment: str | None
    cluster: str | None
    groups: tuple[Group, ...]
    fsx: FsxSpec | None
    local: bool


@dataclass(frozen=True)
class NodeCheck:
    run: str
    node: str
    group: str | None
    instance_type: str | None
    gpus: int
    gpu_names: tuple[str, ...]
    efa_devices: int
    efa_provider: str | None
    errors: tuple[str, ...]


@dataclass(frozen=True)
class Row:
    """One message size of an all-reduce: GB/s are 1e9 bytes/s (nccl-tests)."""

    size_bytes: int
    count: int | None
    iterations: int | None
    time_us: float | None
    algbw_gb_s: float
    busbw_gb_s: float


@dataclass(frozen=True)
class AllReduce:
    run: str
    scope: Literal["all", "pair"]
    group: str | None
    nodes: tuple[str, ...]
    ranks: int | None
    ranks_per_node: int | None
    backend: str | None
    dtype: str | None
    net_provider: str | None
    rows: tuple[Row, ...]

    @property
    def subject(self) -> str:
        if self.scope == "pair":
            return " <-> ".join(self.nodes)
        return f"all nodes ({len(self.nodes)})"

    def at(self, size_bytes: int) -> Row | None:
        return next((r for r in self.rows if r.size_bytes == size_bytes), None)

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.size_bytes, default=None)


@dataclass(frozen=True)
class FsxNode:
    node: str
    write_mb_s: float | None
    read_mb_s: float | None
    metadata_ops_s: float | None


@dataclass(frozen=True)
class Fsx:
    """Throughput in MB/s (1e6 bytes/s, as FSx states it), the nodes together and each."""

    run: str
    path: str
    nodes: tuple[str, ...]
    bytes_per_node: int | None
    write_mb_s: float
    read_mb_s: float
    metadata_ops_s: float | None
    per_node: tuple[FsxNode, ...]


@dataclass(frozen=True)
class Scheduling:
    run: str
    group: str | None
    partition: str | None
    expected: int
    nodes: tuple[str, ...]
    job_id: str | None
    state: str
    seconds: float | None
    # The partition's nodes no job could run on when the run started: (node, state, reason).
    unavailable: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Studio:
    run: str
    user: str
    path: str
    exists: bool
    owner_uid: int | None
    expected_uid: int | None
    mode: str | None
    expected_mode: str | None


@dataclass(frozen=True)
class Error:
    """A check that could not run."""

    run: str
    check: str
    message: str


@dataclass(frozen=True)
class End:
    run: str
    finished: str
    seconds: float | None


Record = Run | NodeCheck | AllReduce | Fsx | Scheduling | Studio | Error | End


@dataclass(frozen=True)
class Results:
    """One run's records, by type, in the order they came."""

    run: str
    start: Run | None = None
    nodes: tuple[NodeCheck, ...] = ()
    allreduce: tuple[AllReduce, ...] = ()
    fsx: tuple[Fsx, ...] = ()
    scheduling: tuple[Scheduling, ...] = ()
    studio: tuple[Studio, ...] = ()
    errors: tuple[Error, ...] = ()
    end: End | None = None
    runs: tuple[str, ...] = ()  # every run id the input held, oldest first

    def group(self, name: str | None) -> Group | None:
        groups = self.start.groups if self.start else ()
        return next((g for g in groups if g.name == name), None)


# --- reading one value -------------------------------------------------------------------------


class _BadValueError(Exception):
    """A value of the wrong type: the reason, without the line (added by `parse_line`)."""


T = TypeVar("T")
_NAMES = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


def _get(d: dict[str, Any], key: str, kind: type[T], *, where: str, optional: bool = False) -> Any:
    """`d[key]` if it is of `kind` (an int for float too; never a bool for a number); None for
    a missing or null value when `optional`."""
    value = d.get(key)
    if value is None:
        if optional:
            return None
        raise _BadValueError(f"{where}{key} is missing")
    number = kind in (int, float) and isinstance(value, bool)
    fits = isinstance(value, int | float) if kind is float else isinstance(value, kind)
    if number or not fits:
        raise _BadValueError(
            f"{where}{key} is {_shown(value)}, not {_NAMES.get(kind, kind.__name__)}"
        )
    if kind is float:
        if not math.isfinite(value):
            raise _BadValueError(f"{where}{key} is not a finite number")
        return float(value)
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _strings(d: dict[str, Any], key: str, *, where: str, optional: bool = False) -> tuple[str, ...]:
    values = _get(d, key, list, where=where, optional=optional) or []
    if not all(isinstance(v, str) for v in values):
        raise _BadValueError(f"{where}{key} is not a list of strings")
    return tuple(values)


def _objects(d: dict[str, Any], key: str, *, where: str) -> list[dict[str, Any]]:
    values = _get(d, key, list, where=where)
    for i, v in enumerate(values):
        if not isinstance(v, dict):
            raise _BadValueError(f"{where}{key}[{i}] is {_shown(v)}, not an object")
    return list(values)


def _non_negative(value: float | None, what: str) -> None:
    if value is not None and value < 0:
        raise _BadValueError(f"{what} is {value:g}, below 0")


# --- each type ---------------------------------------------------------------------------------


def _run(d: dict[str, Any], run: str) -> Run:
    groups = []
    for i, g in enumerate(_objects(d, "groups", where="")):
        w = f"groups[{i}]."
        count = _get(g, "count", int, where=w)
        _non_negative(count, f"{w}count")
        groups.append(
            Group(
                _get(g, "name", str, where=w),
                _get(g, "partition", str, where=w, optional=True),
                _get(g, "instance_type", str, where=w, optional=True),
                count,
            )
        )
    fsx = None
    f = _get(d, "fsx", dict, where="", optional=True)
    if f is not None:
        w = "fsx."
        fsx = FsxSpec(
            _get(f, "path", str, where=w),
            _get(f, "provisioned_mb_s", float, where=w, optional=True),
            _get(f, "capacity_gib", float, where=w, optional=True),
            _get(f, "per_tib_mb_s", float, where=w, optional=True),
            _get(f, "deployment_type", str, where=w, optional=True),
        )
        _non_negative(fsx.provisioned_mb_s, "fsx.provisioned_mb_s")
    return Run(
        run,
        _get(d, "started", str, where=""),
        _get(d, "environment", str, where="", optional=True),
        _get(d, "cluster", str, where="", optional=True),
        tuple(groups),
        fsx,
        bool(_get(d, "local", bool, where="", optional=True)),
    )


def _node(d: dict[str, Any], run: str) -> NodeCheck:
    gpus, efa = _get(d, "gpus", int, where=""), _get(d, "efa_devices", int, where="")
    _non_negative(gpus, "gpus")
    _non_negative(efa, "efa_devices")
    return NodeCheck(
        run,
        _get(d, "node", str, where=""),
        _get(d, "group", str, where="", optional=True),
        _get(d, "instance_type", str, where="", optional=True),
        gpus,
        _strings(d, "gpu_names", where="", optional=True),
        efa,
        _get(d, "efa_provider", str, where="", optional=True),
        _strings(d, "errors", where="", optional=True),
    )


def _allreduce(d: dict[str, Any], run: str) -> AllReduce:
    scope = _get(d, "scope", str, where="")
    if scope not in ("all", "pair"):
        raise _BadValueError(f'scope is {_shown(scope)}, not "all" or "pair"')
    nodes = _strings(d, "nodes", where="")
    if scope == "pair" and len(nodes) != 2:
        raise _BadValueError(f"a pair's nodes are {len(nodes)}, not 2")
    rows = []
    for i, r in enumerate(_objects(d, "rows", where="")):
        w = f"rows[{i}]."
        row = Row(
            _get(r, "size_bytes", int, where=w),
            _get(r, "count", int, where=w, optional=True),
            _get(r, "iterations", int, where=w, optional=True),
            _get(r, "time_us", float, where=w, optional=True),
            _get(r, "algbw_gb_s", float, where=w),
            _get(r, "busbw_gb_s", float, where=w),
        )
        for name in ("size_bytes", "time_us", "algbw_gb_s", "busbw_gb_s"):
            _non_negative(getattr(row, name), w + name)
        rows.append(row)
    return AllReduce(
        run,
        scope,
        _get(d, "group", str, where="", optional=True),
        nodes,
        _get(d, "ranks", int, where="", optional=True),
        _get(d, "ranks_per_node", int, where="", optional=True),
        _get(d, "backend", str, where="", optional=True),
        _get(d, "dtype", str, where="", optional=True),
        _get(d, "net_provider", str, where="", optional=True),
        tuple(rows),
    )


def _fsx(d: dict[str, Any], run: str) -> Fsx:
    per_node = []
    for i, n in enumerate(_objects(d, "per_node", where="") if "per_node" in d else []):
        w = f"per_node[{i}]."
        per_node.append(
            FsxNode(
                _get(n, "node", str, where=w),
                _get(n, "write_mb_s", float, where=w, optional=True),
                _get(n, "read_mb_s", float, where=w, optional=True),
                _get(n, "metadata_ops_s", float, where=w, optional=True),
            )
        )
    fsx = Fsx(
        run,
        _get(d, "path", str, where=""),
        _strings(d, "nodes", where=""),
        _get(d, "bytes_per_node", int, where="", optional=True),
        _get(d, "write_mb_s", float, where=""),
        _get(d, "read_mb_s", float, where=""),
        _get(d, "metadata_ops_s", float, where="", optional=True),
        tuple(per_node),
    )
    for name in ("write_mb_s", "read_mb_s", "metadata_ops_s"):
        _non_negative(getattr(fsx, name), name)
    return fsx


def _scheduling(d: dict[str, Any], run: str) -> Scheduling:
    job = d.get("job_id")
    return Scheduling(
        run,
        _get(d, "group", str, where="", optional=True),
        _get(d, "partition", str, where="", optional=True),
        _get(d, "expected", int, where=""),
        _strings(d, "nodes", where=""),
        None if job is None else str(job),
        _get(d, "state", str, where=""),
        _get(d, "seconds", float, where="", optional=True),
        tuple(
            (
                _get(u, "node", str, where="unavailable"),
                _get(u, "state", str, where="unavailable"),
                _get(u, "reason", str, where="unavailable", optional=True) or "",
            )
            for u in (_objects(d, "unavailable", where="") if "unavailable" in d else [])
        ),
    )


def _studio(d: dict[str, Any], run: str) -> Studio:
    return Studio(
        run,
        _get(d, "user", str, where=""),
        _get(d, "path", str, where=""),
        _get(d, "exists", bool, where=""),
        _get(d, "owner_uid", int, where="", optional=True),
        _get(d, "expected_uid", int, where="", optional=True),
        _get(d, "mode", str, where="", optional=True),
        _get(d, "expected_mode", str, where="", optional=True),
    )


def _error(d: dict[str, Any], run: str) -> Error:
    return Error(run, _get(d, "check", str, where=""), _get(d, "message", str, where=""))


def _end(d: dict[str, Any], run: str) -> End:
    return End(
        run, _get(d, "finished", str, where=""), _get(d, "seconds", float, where="", optional=True)
    )


TYPES: dict[str, Callable[[dict[str, Any], str], Record]] = {
    "run": _run,
    "node": _node,
    "allreduce": _allreduce,
    "fsx": _fsx,
    "scheduling": _scheduling,
    "studio": _studio,
    "error": _error,
    "end": _end,
}


def parse_line(line: Line) -> Record | None:
    """The record of one line; None for a blank line. RecordError for anything else."""
    if not line.text.strip():
        return None

    def bad(reason: str) -> RecordError:
        return RecordError(line.source, line.number, reason)

    if len(line.text) > MAX_LINE:
        raise bad(f"the line is longer than {MAX_LINE} characters; a record is one short line")
    try:
        data = json.loads(line.text)
    except ValueError as e:
        reason = getattr(e, "msg", str(e))
        raise bad(f"not JSON ({reason}); each line is one JSON object of the run") from None
    except RecursionError:
        raise bad("not JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise bad(f'a JSON {type(data).__name__}, not an object with "run" and "type"')
    run = data.get("run")
    if not isinstance(run, str) or not RUN_ID.match(run):
        raise bad(f"run is {_shown(run)}, not a run id like verify-20261129T080000Z")
    kind = data.get("type")
    reader = TYPES.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise bad(f"type is {_shown(kind)}, not one of {', '.join(TYPES)}")
    try:
        return reader(data, run)
    except _BadValueError as e:
        raise bad(f"{kind} record: {e}") from None


def parse(lines: Iterable[Line]) -> list[Record]:
    """Every record of `lines`, in order; the same record twice (two streams of one run, a
    file read twice) is kept once. RecordError at the first bad line."""
    found: list[Record] = []
    seen: set[Record] = set()  # frozen dataclasses of tuples: hashable
    for line in lines:
        record = parse_line(line)
        if record is not None and record not in seen:
            seen.add(record)
            found.append(record)
    return found


def lines_of(text: str, source: str) -> list[Line]:
    """A file's lines, numbered from 1."""
    return [Line(source, i, t) for i, t in enumerate(text.splitlines(), start=1)]


def run_ids(records: Iterable[Record]) -> list[str]:
    """The runs the records belong to, oldest first."""
    return sorted({r.run for r in records})


class UnknownRunError(ValueError):
    pass


def pick(records: list[Record], run: str | None = None) -> Results:
    """The records of one run: `run`, or the newest. UnknownRunError when it has none."""
    ids = run_ids(records)
    if run is None:
        if not ids:
            raise UnknownRunError("no records of any run")
        run = ids[-1]
    elif run not in ids:
        known = ", ".join(ids[-5:]) or "none"
        raise UnknownRunError(f"no records of run {run} (runs found: {known})")
    mine = [r for r in records if r.run == run]
    starts = [r for r in mine if isinstance(r, Run)]
    ends = [r for r in mine if isinstance(r, End)]
    return Results(
        run=run,
        start=starts[0] if starts else None,
        nodes=tuple(r for r in mine if isinstance(r, NodeCheck)),
        allreduce=tuple(r for r in mine if isinstance(r, AllReduce)),
        fsx=tuple(r for r in mine if isinstance(r, Fsx)),
        scheduling=tuple(r for r in mine if isinstance(r, Scheduling)),
        studio=tuple(r for r in mine if isinstance(r, Studio)),
        errors=tuple(r for r in mine if isinstance(r, Error)),
        end=ends[-1] if ends else None,
        runs=tuple(ids),
    )
