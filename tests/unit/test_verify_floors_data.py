"""`verify_floors.json` (issue #28 `verify`): the floors table is data, its rules checked on data.

Read with the json module only (the loader, `hyperpod_kit/verify/floors.py`, is the report's).
`_problems()` returns every broken rule as a sentence; the real table must have none, and each
rule is shown to fire on a copy of the table with one thing broken beside the untouched rest.

Bus bandwidth bound: nccl-tests' busbw can exceed an instance's line rate on 2 nodes (NCCL's tree
algorithm, S6 of the table; the published 2-node p4de and p5 figures do). What no all-reduce
without in-network reduction can beat is the bandwidth-optimal lower bound on traffic (S7): each
of m nodes sends at least 2(m-1)/m x S bytes, so algbw <= B x m / (2(m-1)) and
busbw = algbw x 2(n-1)/n < B x m/(m-1), B the node's line rate in GB/s (gbps / 8). A row is
checked against that bound at its smallest node count, where the bound is loosest.
"""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

FACTS = Path(__file__).resolve().parents[2] / "hyperpod_kit" / "config" / "facts"
ROW_KEYS = {"instance_type", "nodes_min", "nodes_max", "size_bytes", "busbw_gb_s", "source", "note"}
SOURCE_KEYS = {"title", "url", "published", "says"}


def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FACTS / "verify_floors.json").read_text())
    return data


def _types() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FACTS / "instance_types.json").read_text())["types"]
    return data


def _is_date(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problems(table: dict[str, Any], types: dict[str, Any]) -> list[str]:
    """Every broken rule of the table, one sentence each; [] for a good table."""
    return [
        *_top_problems(table),
        *_source_problems(table),
        *_network_problems(table, types),
        *_row_problems(table, types),
        *_overlap_problems(table.get("allreduce", [])),
        *_fsx_problems(table),
    ]


def _top_problems(table: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if set(table) != {"checked", "margin", "sources", "network", "allreduce", "fsx"}:
        problems.append(f"top-level keys {sorted(table)}")
    if not _is_date(table.get("checked")):
        problems.append(f"checked {table.get('checked')!r} is not an ISO date")
    margin = table.get("margin", {})
    value = margin.get("value")
    if not (_is_number(value) and 0 < value <= 1) or not margin.get("reason"):
        problems.append(f"margin {margin!r} needs a value in (0, 1] and a reason")
    return problems


def _source_problems(table: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    sources: dict[str, Any] = table.get("sources", {})
    for key, source in sources.items():
        if set(source) != SOURCE_KEYS:
            problems.append(f"source {key}: keys {sorted(source)}")
        if not str(source.get("url", "")).startswith("https://"):
            problems.append(f"source {key}: url {source.get('url')!r} does not start with https://")
        if not str(source.get("says", "")).strip() or not str(source.get("title", "")).strip():
            problems.append(f"source {key}: empty title or says")
        published = source.get("published")
        if published != "undated" and not _is_date(published):
            problems.append(
                f"source {key}: published {published!r} is neither an ISO date nor 'undated'"
            )
    text = json.dumps({k: v for k, v in table.items() if k != "sources"})
    for key in sources:
        if not any(cite in text for cite in (f'"{key}"', f"({key})", f"({key},", f" {key},")):
            problems.append(f"source {key} is cited nowhere")
    return problems


def _network_problems(table: dict[str, Any], types: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for name, row in table.get("network", {}).items():
        if name not in types:
            problems.append(f"network {name}: not in instance_types.json")
        if set(row) != {"gbps", "source"}:
            problems.append(
                f"network {name}: keys {sorted(row)} (GPUs and EFA live in instance_types.json)"
            )
        if not (_is_number(row.get("gbps")) and row["gbps"] > 0):
            problems.append(f"network {name}: gbps {row.get('gbps')!r} is not a positive number")
        if row.get("source") not in table.get("sources", {}):
            problems.append(f"network {name}: source {row.get('source')!r} is not in sources")
    return problems


def _row_problems(table: dict[str, Any], types: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for i, row in enumerate(table.get("allreduce", [])):
        where = f"allreduce[{i}] {row.get('instance_type')}"
        if set(row) != ROW_KEYS:
            problems.append(f"{where}: keys {sorted(row)}")
            continue
        if row["instance_type"] not in types:
            problems.append(f"{where}: not in instance_types.json")
        if row["source"] not in table.get("sources", {}):
            problems.append(f"{where}: source {row['source']!r} is not in sources")
        if not str(row["note"]).strip():
            problems.append(f"{where}: empty note")
        size = row["size_bytes"]
        if not (isinstance(size, int) and size > 0 and size & (size - 1) == 0):
            problems.append(f"{where}: size_bytes {size!r} is not a power of two")
        problems += [f"{where}: {p}" for p in _nodes_and_busbw(row, table.get("network", {}))]
    return problems


def _nodes_and_busbw(row: dict[str, Any], network: dict[str, Any]) -> list[str]:
    low, high, busbw = row["nodes_min"], row["nodes_max"], row["busbw_gb_s"]
    if not (isinstance(low, int) and isinstance(high, int)):
        return ["node counts must be integers"]
    problems: list[str] = []
    if low < 2:
        problems.append(f"nodes_min {low} < 2 (a floor is for traffic between nodes)")
    if low > high:
        problems.append(f"nodes_min {low} > nodes_max {high}")
    if not (_is_number(busbw) and busbw > 0):
        return [*problems, f"busbw_gb_s {busbw!r} is not positive"]
    line = network.get(row["instance_type"], {}).get("gbps")
    if _is_number(line) and low >= 2:
        bound = line / 8 * low / (low - 1)
        if busbw >= bound:
            problems.append(
                f"busbw {busbw} GB/s >= {bound:.2f}, the most {low} nodes at {line} Gbps give"
            )
    return problems


def _overlap_problems(rows: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    for i, row in enumerate(rows):
        for j, other in enumerate(rows[:i]):
            if set(row) != ROW_KEYS or set(other) != ROW_KEYS:
                continue
            same = (row["instance_type"], row["size_bytes"]) == (
                other["instance_type"],
                other["size_bytes"],
            )
            if (
                same
                and row["nodes_min"] <= other["nodes_max"]
                and other["nodes_min"] <= row["nodes_max"]
            ):
                problems.append(
                    f"allreduce[{j}] and [{i}] overlap: the judge could not tell which row applies"
                )
    return problems


def _fsx_problems(table: dict[str, Any]) -> list[str]:
    fsx = table.get("fsx", {})
    if set(fsx) != {"formula", "source"} or not str(fsx.get("formula", "")).strip():
        return [f"fsx {fsx!r} needs a formula and a source"]
    if fsx["source"] not in table.get("sources", {}):
        return [f"fsx: source {fsx['source']!r} is not in sources"]
    return []


def test_the_table_breaks_no_rule() -> None:
    assert _problems(_table(), _types()) == []


def test_the_table_has_rows_to_judge_by() -> None:
    """Not a shape test: an empty table would pass every rule above and judge nothing."""
    table = _table()
    assert table["network"] and table["allreduce"] and table["sources"]
    accelerated = {name for name, row in _types().items() if row["accelerators"] > 0}
    assert set(table["network"]) <= accelerated


def _first_row(table: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = table["allreduce"][0]
    return row


def _first_network(table: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = next(iter(table["network"].values()))
    return row


def _break_source_key(t: dict[str, Any]) -> None:
    _first_row(t)["source"] = "S999"


def _break_network_source(t: dict[str, Any]) -> None:
    _first_network(t)["source"] = "nowhere"


def _break_url(t: dict[str, Any]) -> None:
    next(iter(t["sources"].values()))["url"] = "http://example.com/floors"


def _break_says(t: dict[str, Any]) -> None:
    next(iter(t["sources"].values()))["says"] = "  "


def _break_published(t: dict[str, Any]) -> None:
    next(iter(t["sources"].values()))["published"] = "last spring"


def _break_orphan(t: dict[str, Any]) -> None:
    t["sources"]["S999"] = {
        "title": "t",
        "url": "https://example.com",
        "published": "undated",
        "says": "s",
    }


def _break_type(t: dict[str, Any]) -> None:
    _first_row(t)["instance_type"] = "ml.p9.96xlarge"


def _break_network_type(t: dict[str, Any]) -> None:
    t["network"]["p5.48xlarge"] = {"gbps": 3200, "source": "S1"}


def _break_gpus_repeated(t: dict[str, Any]) -> None:
    _first_network(t)["gpus"] = 8


def _break_nodes_order(t: dict[str, Any]) -> None:
    row = _first_row(t)
    row["nodes_min"], row["nodes_max"] = row["nodes_max"] + 1, row["nodes_min"]


def _break_single_node(t: dict[str, Any]) -> None:
    _first_row(t)["nodes_min"] = 1


def _break_size(t: dict[str, Any]) -> None:
    _first_row(t)["size_bytes"] = 1_000_000_000


def _break_busbw_zero(t: dict[str, Any]) -> None:
    _first_row(t)["busbw_gb_s"] = 0


def _break_busbw_over_bound(t: dict[str, Any]) -> None:
    row = _first_row(t)
    nodes = row["nodes_min"]
    row["busbw_gb_s"] = t["network"][row["instance_type"]]["gbps"] / 8 * nodes / (nodes - 1)


def _break_overlap(t: dict[str, Any]) -> None:
    t["allreduce"].append(copy.deepcopy(_first_row(t)))


def _break_checked(t: dict[str, Any]) -> None:
    t["checked"] = "29/11/2026"


def _break_margin(t: dict[str, Any]) -> None:
    t["margin"]["value"] = 1.5


def _break_fsx_source(t: dict[str, Any]) -> None:
    t["fsx"]["source"] = "S999"


BREAKS = {
    "source key": (_break_source_key, "source 'S999' is not in sources"),
    "network source": (_break_network_source, "source 'nowhere' is not in sources"),
    "url": (_break_url, "does not start with https://"),
    "says": (_break_says, "empty title or says"),
    "published": (_break_published, "neither an ISO date"),
    "orphan source": (_break_orphan, "source S999 is cited nowhere"),
    "instance type": (_break_type, "ml.p9.96xlarge: not in instance_types.json"),
    "network type": (_break_network_type, "network p5.48xlarge: not in instance_types.json"),
    "gpus repeated": (_break_gpus_repeated, "GPUs and EFA live in instance_types.json"),
    "nodes order": (_break_nodes_order, "> nodes_max"),
    "single node": (_break_single_node, "nodes_min 1 < 2"),
    "size": (_break_size, "is not a power of two"),
    "busbw zero": (_break_busbw_zero, "busbw_gb_s 0 is not positive"),
    "busbw over bound": (_break_busbw_over_bound, "the most 2 nodes at"),
    "overlap": (_break_overlap, "overlap"),
    "checked": (_break_checked, "is not an ISO date"),
    "margin": (_break_margin, "needs a value in (0, 1]"),
    "fsx source": (_break_fsx_source, "fsx: source 'S999'"),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_rule_fires_on_a_broken_copy(name: str) -> None:
    table, types = _table(), _types()
    broken = copy.deepcopy(table)
    change, expected = BREAKS[name]
    change(broken)
    problems = _problems(broken, types)
    assert any(expected in problem for problem in problems), problems
    assert _problems(table, types) == []  # the good neighbour, untouched


def test_the_bound_is_not_the_line_rate() -> None:
    """On 2 nodes the bound is twice the line rate; with more nodes it tightens (4/3, 8/7, ...)."""
    table = copy.deepcopy(_table())
    row = _first_row(table)
    line = table["network"][row["instance_type"]]["gbps"] / 8
    row["nodes_min"], row["nodes_max"] = 2, 2
    row["busbw_gb_s"] = round(line * 1.5, 2)
    assert _problems(table, _types()) == []
    row["nodes_min"], row["nodes_max"] = 4, 4
    assert any("the most 4 nodes at" in p for p in _problems(table, _types()))
