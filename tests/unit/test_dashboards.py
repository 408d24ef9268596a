"""Dashboards as code: the Grafana dashboards of assets/dashboards/ are well-formed import files
whose PromQL names only metrics and labels the exporters hyperpod-kit runs produce
(hyperpod_kit/config/facts/exporter_metrics.json; docs/observability.md says how to import them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.paths import ASSETS

DASHBOARDS = sorted((ASSETS / "dashboards").glob("*.json"))
FACTS = Path(__file__).resolve().parents[2] / "hyperpod_kit/config/facts/exporter_metrics.json"
TABLE = json.loads(FACTS.read_text())
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# PromQL's words that are not metric names (functions, aggregations, keywords used here).
PROMQL_WORDS = {
    "rate", "irate", "increase", "sum", "avg", "max", "min", "count", "by", "without", "on",
    "ignoring", "group_left", "group_right", "and", "or", "unless", "label_values", "topk",
}  # fmt: skip
_SELECTOR = re.compile(r"\{[^}]*\}")
_LABEL_MATCH = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_WORD = re.compile(r"(?<![\w$\"])([A-Za-z_:][A-Za-z0-9_:]*)")
_DURATION = re.compile(r"\[[0-9a-z$_]+\]")


def _exporter(board: dict[str, Any]) -> str:
    (tag,) = [t for t in board["tags"] if t.startswith("exporter:")]
    return str(tag.removeprefix("exporter:"))


def _queries(board: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in board["panels"] for t in p["targets"]]
    found += [v["query"] for v in board["templating"]["list"]]
    return found


def _metrics_and_labels(expr: str) -> tuple[set[str], set[str]]:
    labels = {m for sel in _SELECTOR.findall(expr) for m in _LABEL_MATCH.findall(sel)}
    labels |= {w.strip() for g in _GROUPING.findall(expr) for w in g.split(",") if w.strip()}
    bare = _GROUPING.sub(" ", _DURATION.sub(" ", _SELECTOR.sub(" ", expr)))
    bare = re.sub(r'"[^"]*"', " ", bare)
    # label_values(metric, label): the second argument is a label
    for _metric, label in re.findall(r"label_values\(\s*([\w:]+)[^,]*,\s*(\w+)\s*\)", expr):
        labels.add(label)
        bare = bare.replace(label, " ")
    metrics = {w for w in _WORD.findall(bare) if w not in PROMQL_WORDS}
    return metrics, labels


def test_there_is_a_dashboard_for_every_exporter() -> None:
    assert {_exporter(json.loads(d.read_text())) for d in DASHBOARDS} == {
        "node", "dcgm", "efa", "slurm",
    }  # fmt: skip


def test_uids_and_titles_are_unique() -> None:
    boards = [json.loads(d.read_text()) for d in DASHBOARDS]
    assert len({b["uid"] for b in boards}) == len(boards)
    assert len({b["title"] for b in boards}) == len(boards)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_an_import_file(path: Path) -> None:
    board = json.loads(path.read_text())
    assert re.fullmatch(r"[a-z0-9-]{1,40}", board["uid"])  # Grafana: at most 40 characters
    assert board["title"] and "hyperpod-kit" in board["tags"]
    assert "id" not in board  # an import gets its own id
    (source,) = board["__inputs"]
    assert source["name"] == "DS_PROMETHEUS" and source["pluginId"] == "prometheus"
    assert isinstance(board["schemaVersion"], int)
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids) and board["panels"]
    for panel in board["panels"]:
        assert panel["title"] and panel["type"] == "timeseries"
        assert panel["datasource"] == DATASOURCE
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["targets"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip()
    for variable in board["templating"]["list"]:
        assert variable["datasource"] == DATASOURCE


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_queries_name_only_what_the_exporters_produce(path: Path) -> None:
    board = json.loads(path.read_text())
    exporter = _exporter(board)
    metrics_ok = set(TABLE["metrics"][exporter]) | set(TABLE["metrics"]["agent"])
    labels_ok = set(TABLE["labels"][exporter]) | set(TABLE["labels"]["agent"])
    for expr in _queries(board):
        metrics, labels = _metrics_and_labels(expr)
        assert metrics, expr
        assert metrics <= metrics_ok, f"{expr}: {sorted(metrics - metrics_ok)}"
        assert labels <= labels_ok, f"{expr}: {sorted(labels - labels_ok)}"
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")


def test_the_checker_sees_a_metric_no_exporter_produces() -> None:
    metrics, labels = _metrics_and_labels(
        'sum by (gpu) (rate(DCGM_FI_PROF_NVLINK{cluster=~"$c"}[5m]))'
    )
    assert metrics == {"DCGM_FI_PROF_NVLINK"} and labels == {"gpu", "cluster"}
    assert not metrics <= set(TABLE["metrics"]["dcgm"])


def test_every_listed_metric_is_used_by_a_dashboard() -> None:
    used = set()
    for d in DASHBOARDS:
        for expr in _queries(json.loads(d.read_text())):
            used |= _metrics_and_labels(expr)[0]
    listed = {m for names in TABLE["metrics"].values() for m in names}
    assert listed == used
