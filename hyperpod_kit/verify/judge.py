"""Judge one run against its floors (issue #28's contract): a row a figure, each with a verdict.

- node: `gpus` against the type's GPUs and `efa_devices` against its EFA interfaces
  (instance_types.json), exact counts (no margin: 31 of 32 devices is a missing device); a local
  run (`"local": true`) or a type the table lacks has no floor; a node's `errors` are an error.
- all-reduce ("all" and each pair): the bus bandwidth at the floor row's message size against
  `busbw_gb_s` of the row of the type whose node range holds the record's nodes; no row, or no
  measurement at that size: no floor (the bandwidth at the largest size is shown).
- FSx: the nodes' write and read throughput together against the run's provisioned throughput;
  metadata operations have no floor.
- scheduling: the job COMPLETED on the expected number of nodes; Studio: the home folder exists
  with the expected owner and mode. Both pass or are below, without a floor.
- an `error` record is an error (a check that could not run), and so is a run without its
  `end` record (it did not finish).

A measured figure is below its floor when under `margin x floor` (verify_floors.json). Exit
codes: 0 when every row passes or has no floor, 1 when any is below or an error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from hyperpod_kit.files import fileio
from hyperpod_kit.verify.floors import Floors, node_floor
from hyperpod_kit.verify.records import AllReduce, Fsx, Results

Verdict = Literal["pass", "below", "no-floor", "error"]
VERDICTS: tuple[Verdict, ...] = ("pass", "below", "no-floor", "error")
EXIT_OK, EXIT_FAILED = 0, 1
INSTANCE_TYPES = "instance_types.json"
RUN_RECORD = "run record"


@dataclass(frozen=True)
class Judged:
    """One figure: what was checked, of what, measured against which floor, and the verdict."""

    check: str
    subject: str
    measured: float | None
    floor: float | None
    unit: str
    verdict: Verdict
    source: str
    detail: str = ""
    threshold: float | None = (
        None  # below means under this: margin x floor, or for counts the floor
    )


@dataclass(frozen=True)
class Worst:
    """The slowest of a kind (a pair, a node), named under the table."""

    kind: str
    subject: str
    measured: float
    unit: str
    line: str


@dataclass(frozen=True)
class Report:
    results: Results
    floors: Floors
    rows: tuple[Judged, ...]
    worst: tuple[Worst, ...] = ()
    compared_size: int | None = None  # the message size pairs are compared at
    slowest_pair: AllReduce | None = None

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}

    @property
    def verdict(self) -> Verdict:
        counts = self.counts
        if counts["error"]:
            return "error"
        if counts["below"]:
            return "below"
        return "pass" if counts["pass"] else "no-floor"

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.verdict in ("below", "error") else EXIT_OK


def judge(results: Results, floors: Floors, *, counts: Mapping[str, int] | None = None) -> Report:
    """Every figure of `results` against `floors`; `counts`: each group's node count in the
    environment file (`--report`), which the scheduling check expects rather than the number of
    nodes the partition had when the run started."""
    rows: list[Judged] = []
    rows += _run_rows(results)
    rows += _node_rows(results)
    size, pair_figures = _pair_figures(results)
    rows += _allreduce_rows(results, floors)
    rows += _fsx_rows(results, floors)
    rows += _scheduling_rows(results, counts or {})
    rows += _studio_rows(results)
    rows += [
        Judged(e.check, "could not run", None, None, "", "error", "-", e.message)
        for e in results.errors
    ]
    worst, slowest = _worst(results, pair_figures, size)
    return Report(results, floors, tuple(rows), tuple(worst), size, slowest)


def _judged(
    check: str,
    subject: str,
    measured: float,
    floor: float | None,
    *,
    unit: str,
    source: str,
    floors: Floors | None = None,
    detail: str = "",
) -> Judged:
    """pass or below (under the margin, or for counts under the floor itself), or no floor."""
    if floor is None:
        return Judged(check, subject, measured, None, unit, "no-floor", source, detail)
    threshold = floor * floors.margin if floors is not None else floor
    verdict: Verdict = "below" if measured < threshold else "pass"
    return Judged(check, subject, measured, floor, unit, verdict, source, detail, threshold)


def _run_rows(results: Results) -> list[Judged]:
    rows = []
    if results.start is None:
        rows.append(
            Judged(
                "run",
                "start",
                None,
                None,
                "",
                "error",
                "-",
                "no run record: the groups, instance types and the file system's "
                "provisioned throughput are unknown",
            )
        )
    if results.end is None:
        rows.append(
            Judged(
                "run",
                "end",
                None,
                None,
                "",
                "error",
                "-",
                "no end record: the run did not finish (or is still running)",
            )
        )
    return rows


def _local(results: Results) -> bool:
    return results.start is not None and results.start.local


def _node_type(results: Results, group: str | None, fallback: str | None) -> str | None:
    found = results.group(group)
    return found.instance_type if found is not None and found.instance_type else fallback


def _node_rows(results: Results) -> list[Judged]:
    rows: list[Judged] = []
    for n in results.nodes:
        kind = None if _local(results) else _node_type(results, n.group, n.instance_type)
        floor = node_floor(kind)
        why = (
            "a local run"
            if _local(results)
            else f"{kind or 'no instance type'} not in {INSTANCE_TYPES}"
        )
        detail = why if floor is None else (kind or "")
        for check, measured, expected, unit in (
            ("node.gpus", n.gpus, None if floor is None else floor.gpus, "GPUs"),
            ("node.efa", n.efa_devices, None if floor is None else floor.efa_devices, "devices"),
        ):
            source = INSTANCE_TYPES if expected is not None else "-"
            rows.append(
                _judged(check, n.node, measured, expected, unit=unit, source=source, detail=detail)
            )
        if floor is not None and floor.efa_devices:  # an EFA type: libfabric's efa provider
            rows.append(_provider_row("node.provider", n.node, n.efa_provider, kind, "fi_info"))
        if n.errors:
            rows.append(Judged("node", n.node, None, None, "", "error", "-", "; ".join(n.errors)))
    return rows


def _provider_row(
    check: str, subject: str, provider: str | None, kind: str | None, how: str
) -> Judged:
    """pass when the provider is libfabric's efa on a type that has EFA: else the traffic goes
    over TCP sockets at a fraction of the fabric (the issue's "EFA is not in use")."""
    ok = provider == "efa"
    detail = f"{how}: {provider or 'no efa provider'}; {kind} has EFA"
    return Judged(check, subject, None, None, "", "pass" if ok else "below", INSTANCE_TYPES, detail)


def record_type(results: Results, record: AllReduce) -> str | None:
    """The instance type of an all-reduce's nodes: its group's, or its node records' (one)."""
    if _local(results):
        return None
    kind = _node_type(results, record.group, None)
    if kind is not None:
        return kind
    kinds = {n.instance_type for n in results.nodes if n.node in record.nodes}
    return kinds.pop() if len(kinds) == 1 else None


size_text = fileio.size_text  # 1 GiB, 1.5 MiB: a message size as a person reads it


def _allreduce_rows(results: Results, floors: Floors) -> list[Judged]:
    rows = []
    for record in sorted(results.allreduce, key=lambda r: (r.scope != "all", r.nodes)):
        kind = record_type(results, record)
        node = None if _local(results) else node_floor(kind)
        if record.scope == "all" and record.backend == "nccl" and node and node.efa_devices:
            rows.append(
                _provider_row(
                    "allreduce.net", record.subject, record.net_provider, kind, "NCCL's network"
                )
            )
        floor = floors.allreduce_floor(kind, len(record.nodes))
        at = record.at(floor.size_bytes) if floor is not None else None
        if floor is not None and at is not None:
            source = f"{floors.file} {floor.source}"
            detail = f"at {size_text(floor.size_bytes)}, {kind}"
            rows.append(
                _judged(
                    "allreduce",
                    record.subject,
                    at.busbw_gb_s,
                    floor.busbw_gb_s,
                    unit="GB/s",
                    source=source,
                    floors=floors,
                    detail=detail,
                )
            )
            continue
        largest = record.largest
        if largest is None:
            rows.append(
                Judged(
                    "allreduce",
                    record.subject,
                    None,
                    None,
                    "GB/s",
                    "error",
                    "-",
                    "no rows: the benchmark measured nothing",
                )
            )
            continue
        if floor is not None:
            why = f"no measurement at the floor's {size_text(floor.size_bytes)}"
        else:
            why = f"no floor for {kind or 'an unknown type'} with {len(record.nodes)} nodes"
        rows.append(
            Judged(
                "allreduce",
                record.subject,
                largest.busbw_gb_s,
                None,
                "GB/s",
                "no-floor",
                "-",
                f"at {size_text(largest.size_bytes)}; {why}",
            )
        )
    return rows


def _fsx_rows(results: Results, floors: Floors) -> list[Judged]:
    rows = []
    spec = results.start.fsx if results.start is not None else None
    provisioned = spec.provisioned_mb_s if spec is not None else None
    for f in results.fsx:
        subject = f"all nodes ({len(f.nodes)})"
        source = RUN_RECORD if provisioned is not None else "-"
        why = "" if provisioned is not None else "provisioned throughput unknown"
        for check, measured in (("fsx.write", f.write_mb_s), ("fsx.read", f.read_mb_s)):
            rows.append(
                _judged(
                    check,
                    subject,
                    measured,
                    provisioned,
                    unit="MB/s",
                    source=source,
                    floors=floors,
                    detail=why,
                )
            )
        if f.metadata_ops_s is not None:
            rows.append(
                _judged(
                    "fsx.metadata",
                    subject,
                    f.metadata_ops_s,
                    None,
                    unit="ops/s",
                    source="-",
                    detail="no floor for metadata operations",
                )
            )
    return rows


def _scheduling_rows(results: Results, counts: Mapping[str, int]) -> list[Judged]:
    rows = []
    for s in results.scheduling:
        subject = f"partition {s.partition}" if s.partition else f"group {s.group}"
        got = len(set(s.nodes))
        expected = counts.get(s.group or "", s.expected)
        ok = s.state == "COMPLETED" and got >= expected
        job = f"job {s.job_id} " if s.job_id else ""
        detail = f"{job}{s.state} on {got} of {expected} nodes"
        if expected != s.expected:
            detail += f" (the environment file's count; the partition had {s.expected})"
        if s.unavailable:
            detail += "; unavailable: " + ", ".join(
                f"{node} ({state}{': ' + reason if reason else ''})"
                for node, state, reason in s.unavailable
            )
        rows.append(
            Judged(
                "scheduling",
                subject,
                got,
                expected,
                "nodes",
                "pass" if ok else "below",
                "-",
                detail,
            )
        )
    return rows


def _studio_rows(results: Results) -> list[Judged]:
    rows = []
    for s in results.studio:
        wrong = []
        if not s.exists:
            wrong.append(f"{s.path} does not exist")
        else:
            if s.expected_uid is not None and s.owner_uid != s.expected_uid:
                wrong.append(f"owner uid {s.owner_uid}, not {s.expected_uid}")
            if s.expected_mode is not None and s.mode != s.expected_mode:
                wrong.append(f"mode {s.mode}, not {s.expected_mode}")
        detail = "; ".join(wrong) or f"{s.path} owner {s.owner_uid} mode {s.mode}"
        rows.append(
            Judged("studio", s.user, None, None, "", "below" if wrong else "pass", "-", detail)
        )
    return rows


# --- the slowest pair and node -----------------------------------------------------------------


def _pair_figures(results: Results) -> tuple[int | None, dict[tuple[str, ...], float]]:
    """The message size pairs are compared at (the largest every pair measured) and each pair's
    bus bandwidth there."""
    pairs = [p for p in results.allreduce if p.scope == "pair" and p.rows]
    if not pairs:
        return None, {}
    common = set.intersection(*({r.size_bytes for r in p.rows} for p in pairs))
    if not common:
        return None, {}
    size = max(common)
    return size, {p.nodes: p.at(size).busbw_gb_s for p in pairs}  # type: ignore[union-attr]


def _worst(
    results: Results, figures: dict[tuple[str, ...], float], size: int | None
) -> tuple[list[Worst], AllReduce | None]:
    worst: list[Worst] = []
    slowest = None
    if figures and size is not None:
        nodes = min(figures, key=lambda k: (figures[k], k))
        slowest = next(p for p in results.allreduce if p.scope == "pair" and p.nodes == nodes)
        others = [v for k, v in figures.items() if k != nodes]
        best = f"; the fastest pair {max(others):.1f}" if others else ""
        worst.append(
            Worst(
                "pair",
                slowest.subject,
                figures[nodes],
                "GB/s",
                f"slowest pair: {slowest.subject}, {figures[nodes]:.1f} GB/s bus "
                f"bandwidth at {size_text(size)}{best}",
            )
        )
        worst += _slowest_node_of_pairs(figures, size)
    for f in results.fsx:
        worst += _fsx_worst(f)
    worst += _fewest(results)
    return worst, slowest


def _slowest_node_of_pairs(figures: dict[tuple[str, ...], float], size: int) -> list[Worst]:
    """The node whose pairs are slowest on average: with three or more nodes, a slow link or
    NIC shows in every pair of one node."""
    of: dict[str, list[float]] = defaultdict(list)
    for nodes, value in figures.items():
        for node in nodes:
            of[node].append(value)
    if len(of) < 3:
        return []
    mean = {n: sum(v) / len(v) for n, v in of.items()}
    node = min(mean, key=lambda n: (mean[n], n))
    rest = sorted(v for n, v in mean.items() if n != node)
    line = (
        f"slowest node by its pairs: {node}, {mean[node]:.1f} GB/s on average over "
        f"{len(of[node])} pairs at {size_text(size)} (the next {rest[0]:.1f})"
    )
    return [Worst("node-pairs", node, mean[node], "GB/s", line)]


def _fsx_worst(f: Fsx) -> list[Worst]:
    found = []
    for what, who in (("write", "writer"), ("read", "reader")):
        values = {n.node: getattr(n, f"{what}_mb_s") for n in f.per_node}
        values = {n: v for n, v in values.items() if v is not None}
        if len(set(values.values())) < 2:  # one node, or all alike: none is slowest
            continue
        node = min(values, key=lambda n: (values[n], n))
        median = sorted(values.values())[len(values) // 2]
        found.append(
            Worst(
                f"fsx-{what}",
                node,
                values[node],
                "MB/s",
                f"slowest FSx {who}: {node}, {values[node]:.0f} MB/s (median of "
                f"{len(values)} nodes {median:.0f})",
            )
        )
    return found


def _fewest(results: Results) -> list[Worst]:
    """The node with the fewest GPUs (or EFA devices) when the nodes do not all show the same."""
    found = []
    for what, unit in (("gpus", "GPUs"), ("efa_devices", "EFA devices")):
        values: dict[str, int] = {n.node: getattr(n, what) for n in results.nodes}
        if len(set(values.values())) < 2:
            continue
        node = min(values, key=lambda n: (values[n], n))
        most = max(values.values())
        found.append(
            Worst(
                what,
                node,
                values[node],
                unit,
                f"fewest {unit}: {node}, {values[node]} (others up to {most})",
            )
        )
    return found
