"""A judged run as a terminal table, a JSON document, and pictures (PNG).

The table: one row a figure (check, subject, measured, floor, verdict, source), the columns
aligned, then the slowest pair and node in a line each, and the verdict with its counts. What the
records carry (node names, messages) passes `text.printable` before it reaches a terminal.

The JSON document (`--format json`, and report.json in the report folder) has stable keys:
`run`, `verdict`, `exit_code`, `counts`, `margin`, `floors`, `rows` (each row's keys as the
table's columns, figures as numbers, null where none), `worst`, `allreduce` (each record's
scope, nodes and rows), `fsx`, `nodes`.

Pictures need matplotlib, the optional extra `hyperpod-kit[verify]` (imported here only when a
picture is drawn, with the Agg backend: no display): the bus bandwidth against the message size
(a log2 axis) of all nodes and of the slowest pair with the floor as a line, and the file
system's write and read throughput as bars against its provisioned throughput.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.text import printable
from hyperpod_kit.verify.floors import Floors
from hyperpod_kit.verify.judge import Judged, Report, record_type, size_text
from hyperpod_kit.verify.records import AllReduce

PICTURES_NEED = "pictures need matplotlib: pip install 'hyperpod-kit[verify]'"
COLUMNS = ("CHECK", "SUBJECT", "MEASURED", "FLOOR", "VERDICT", "SOURCE")


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("GPUs", "devices", "nodes") and value == int(value):
        return f"{int(value)} {unit}"
    return f"{value:.1f} {unit}" if value < 1000 else f"{value:.0f} {unit}"


def _cells(row: Judged) -> tuple[str, ...]:
    return (
        row.check,
        row.subject,
        _figure(row.measured, row.unit),
        _figure(row.floor, row.unit),
        row.verdict,
        row.source,
    )


def header(report: Report) -> str:
    r = report.results
    start, end = r.start, r.end
    parts = [f"run {r.run}"]
    if start is not None:
        where = f"cluster {start.cluster or '?'}"
        if start.environment:
            where += f" (environment {start.environment})"
        nodes = sum(g.count for g in start.groups)
        groups = f"{len(start.groups)} group" + ("" if len(start.groups) == 1 else "s")
        parts.append(f"{where}, {nodes} nodes in {groups}" + (", local" if start.local else ""))
        parts.append(f"started {start.started}")
    if end is not None:
        took = f" ({end.seconds:.0f} s)" if end.seconds is not None else ""
        parts.append(f"finished {end.finished}{took}")
    return ", ".join(parts)


def table(report: Report) -> str:
    """The report for a terminal (each line printable)."""
    rows = [COLUMNS, *(_cells(r) for r in report.rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    out = [header(report)]
    for row in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    details = [r for r in report.rows if r.verdict in ("below", "error") and r.detail]
    for r in details:
        why = r.detail
        if r.measured is not None and r.threshold is not None:
            edge = _figure(r.threshold, r.unit)
            if r.threshold != r.floor:
                edge += f" ({report.floors.margin:g} x {_figure(r.floor, r.unit)})"
            why = f"{_figure(r.measured, r.unit)} under {edge}" + (f"; {why}" if why else "")
        out.append(f"{r.verdict}: {r.check} {r.subject}: {why}")
    out += [w.line for w in report.worst]
    out.append(summary(report))
    return printable("\n".join(out) + "\n")


def summary(report: Report) -> str:
    c = report.counts
    f = report.floors
    checked = f", checked {f.checked}" if f.checked else ""
    return (
        f"verdict: {report.verdict.upper()} ({c['pass']} pass, {c['below']} below, "
        f"{c['no-floor']} no floor, {c['error']} error); below: under {f.margin:g} x the "
        f"floor ({f.file}{checked}), counts under the floor itself"
    )


def _row_json(row: Judged) -> dict[str, Any]:
    return {
        "check": row.check,
        "subject": row.subject,
        "measured": row.measured,
        "floor": row.floor,
        "unit": row.unit,
        "verdict": row.verdict,
        "source": row.source,
        "detail": row.detail,
        "threshold": row.threshold,
    }


def _floors_json(floors: Floors, report: Report) -> dict[str, Any]:
    used = {
        r.source.split(" ", 1)[1] for r in report.rows if r.source.startswith(floors.file + " ")
    }
    return {
        "file": floors.file,
        "checked": floors.checked,
        "margin": floors.margin,
        "margin_reason": floors.margin_reason,
        "sources": {
            k: {"title": s.title, "url": s.url, "published": s.published, "says": s.says}
            for k, s in sorted(floors.sources.items())
            if k in used
        },
    }


def _allreduce_json(report: Report, a: AllReduce) -> dict[str, Any]:
    largest = a.largest
    return {
        "scope": a.scope,
        "subject": a.subject,
        "group": a.group,
        "nodes": list(a.nodes),
        "instance_type": record_type(report.results, a),
        "ranks": a.ranks,
        "backend": a.backend,
        "net_provider": a.net_provider,
        "peak_busbw_gb_s": max((r.busbw_gb_s for r in a.rows), default=None),
        "largest_size_bytes": largest.size_bytes if largest else None,
        "rows": [
            {
                "size_bytes": r.size_bytes,
                "time_us": r.time_us,
                "algbw_gb_s": r.algbw_gb_s,
                "busbw_gb_s": r.busbw_gb_s,
            }
            for r in a.rows
        ],
    }


def document(report: Report) -> dict[str, Any]:
    """The report as JSON (stable keys, see the module's docstring)."""
    r = report.results
    start = r.start
    provisioned = start.fsx.provisioned_mb_s if start and start.fsx else None
    return {
        "run": {
            "id": r.run,
            "runs_found": list(r.runs),
            "started": start.started if start else None,
            "finished": r.end.finished if r.end else None,
            "seconds": r.end.seconds if r.end else None,
            "cluster": start.cluster if start else None,
            "environment": start.environment if start else None,
            "local": start.local if start else None,
            "groups": [
                {
                    "name": g.name,
                    "partition": g.partition,
                    "instance_type": g.instance_type,
                    "count": g.count,
                }
                for g in (start.groups if start else ())
            ],
        },
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "counts": report.counts,
        "floors": _floors_json(report.floors, report),
        "rows": [_row_json(row) for row in report.rows],
        "worst": [
            {
                "kind": w.kind,
                "subject": w.subject,
                "measured": w.measured,
                "unit": w.unit,
                "line": w.line,
            }
            for w in report.worst
        ],
        "compared_size_bytes": report.compared_size,
        "allreduce": [_allreduce_json(report, a) for a in r.allreduce],
        "fsx": [
            {
                "path": f.path,
                "nodes": list(f.nodes),
                "write_mb_s": f.write_mb_s,
                "read_mb_s": f.read_mb_s,
                "metadata_ops_s": f.metadata_ops_s,
                "provisioned_mb_s": provisioned,
                "per_node": [
                    {
                        "node": n.node,
                        "write_mb_s": n.write_mb_s,
                        "read_mb_s": n.read_mb_s,
                        "metadata_ops_s": n.metadata_ops_s,
                    }
                    for n in f.per_node
                ],
            }
            for f in r.fsx
        ],
        "nodes": [
            {
                "node": n.node,
                "group": n.group,
                "instance_type": n.instance_type,
                "gpus": n.gpus,
                "efa_devices": n.efa_devices,
                "efa_provider": n.efa_provider,
                "errors": list(n.errors),
            }
            for n in r.nodes
        ],
    }


# --- pictures ----------------------------------------------------------------------------------


class PicturesUnavailableError(RuntimeError):
    """matplotlib is not installed (the optional extra `hyperpod-kit[verify]`)."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PicturesUnavailableError(PICTURES_NEED) from None
    return plt


def pictures(report: Report) -> dict[str, bytes]:
    """PNG files by name: allreduce.png (when the run has an all-reduce), fsx.png (when it
    measured the file system). PicturesUnavailableError without matplotlib."""
    r = report.results
    if not r.allreduce and not r.fsx:
        return {}
    plt = _pyplot()
    found = {}
    if r.allreduce:
        found["allreduce.png"] = _allreduce_png(plt, report)
    if r.fsx:
        found["fsx.png"] = _fsx_png(plt, report)
    return found


def _label(text: str) -> str:
    """Text for a picture: printable, and a `$` is not matplotlib's mathematics."""
    return printable(text).replace("$", r"\$")


def _png(plt: Any, fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _allreduce_png(plt: Any, report: Report) -> bytes:
    r = report.results
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    curves = [a for a in r.allreduce if a.scope == "all"]
    if report.slowest_pair is not None:
        curves.append(report.slowest_pair)
    elif not curves:
        curves = list(r.allreduce[:1])
    colours = ["tab:blue", "tab:red", "tab:green", "tab:orange"]
    for i, a in enumerate(curves):
        rows = sorted(a.rows, key=lambda row: row.size_bytes)
        label = _label(a.subject if a.scope == "all" else f"slowest pair: {a.subject}")
        ax.plot(
            [row.size_bytes for row in rows],
            [row.busbw_gb_s for row in rows],
            "o-",
            ms=3,
            color=colours[i % len(colours)],
            label=label,
        )
    for a in curves:
        floor = report.floors.allreduce_floor(record_type(r, a), len(a.nodes))
        if floor is not None:
            ax.axhline(
                floor.busbw_gb_s,
                color="0.4",
                ls="--",
                lw=1,
                label=f"floor {floor.busbw_gb_s:g} GB/s ({len(a.nodes)} nodes, {floor.source})",
            )
            if report.floors.margin < 1:
                ax.axhline(
                    floor.busbw_gb_s * report.floors.margin,
                    color="0.7",
                    ls=":",
                    lw=1,
                    label=f"{report.floors.margin:g} x floor",
                )
    ax.set_xscale("log", base=2)
    sizes = sorted({row.size_bytes for a in curves for row in a.rows if row.size_bytes > 0})
    ticks = sizes[:: 1 + len(sizes) // 12]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_text(t) for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"all-reduce bus bandwidth, {r.run}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(plt, fig)


def _fsx_png(plt: Any, report: Report) -> bytes:
    r = report.results
    f = r.fsx[-1]
    spec = r.start.fsx if r.start else None
    provisioned = spec.provisioned_mb_s if spec else None
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    names = ["all nodes", *(n.node for n in f.per_node)]
    write = [f.write_mb_s, *(n.write_mb_s or 0.0 for n in f.per_node)]
    read = [f.read_mb_s, *(n.read_mb_s or 0.0 for n in f.per_node)]
    xs = list(range(len(names)))
    ax.bar([x - 0.2 for x in xs], write, width=0.4, color="tab:blue", label="write")
    ax.bar([x + 0.2 for x in xs], read, width=0.4, color="tab:orange", label="read")
    if provisioned is not None:
        ax.axhline(
            provisioned, color="tab:red", ls="--", lw=1, label=f"provisioned {provisioned:g} MB/s"
        )
        margin = report.floors.margin
        if margin < 1:
            ax.axhline(
                provisioned * margin,
                color="tab:red",
                ls=":",
                lw=1,
                label=f"{margin:g} x provisioned (below under it)",
            )
    ax.set_xticks(xs)
    ax.set_xticklabels([_label(n) for n in names], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("throughput (MB/s)")
    ax.set_title(_label(f"FSx for Lustre, every node at once, {r.run}"), fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    return _png(plt, fig)


@dataclass(frozen=True)
class Rendered:
    """What a report folder gets: report.json's text and the pictures by name; `no_pictures`
    says why there are none when matplotlib is missing."""

    report: Report
    json_text: str
    pictures: dict[str, bytes]
    no_pictures: str | None = None

    def write_into(self, folder: Path) -> list[str]:
        """report.json and the pictures into `folder` (a staging folder); the names written."""
        (folder / "report.json").write_text(self.json_text, encoding="utf-8")
        for name, data in self.pictures.items():
            (folder / name).write_bytes(data)
        return ["report.json", *self.pictures]


def rendered(report: Report) -> Rendered:
    """The report's JSON text and pictures (none, with the reason, without matplotlib)."""
    text = json.dumps(document(report), indent=2) + "\n"
    try:
        return Rendered(report, text, pictures(report))
    except PicturesUnavailableError as e:
        return Rendered(report, text, {}, str(e))
