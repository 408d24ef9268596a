"""`hyperpod_events.json`: the EventBridge events of HyperPod that the monitoring stack routes,
one rule per row (`hyperpod_kit.constructs.monitoring`), and the table of them in docs/health.md
(`python -m hyperpod_kit.config.facts.hyperpod_events` prints it; a test fails when the page's copy
is stale)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from hyperpod_kit.config.facts import HERE

SOURCE = "aws.sagemaker"
FIELD = re.compile(r"\{(\$\.[A-Za-z0-9_.-]+)\}")  # {$.detail.X}: a field of the event
BEGIN = "<!-- hyperpod-events: generated from hyperpod_kit/config/facts/hyperpod_events.json -->"
END = "<!-- /hyperpod-events -->"


@dataclass(frozen=True)
class EventRow:
    id: str
    rule_id: str
    title: str
    detail_type: str
    filter: dict[str, Any]
    continuous_provisioning: bool
    orchestrator: str | None
    message: tuple[str, ...]
    what_to_do: str | None
    names: tuple[str, ...]
    diagnosis: str | None
    diagnosis_input: str | None
    sample: dict[str, Any]
    near_miss: dict[str, Any]
    near_miss_is: str
    sample_from: str
    shape_confirmed: bool
    source: tuple[str, ...]
    checked: str

    @property
    def arn_path(self) -> tuple[str, ...]:
        """Where the cluster ARN is in `detail`."""
        if self.detail_type == "SageMaker HyperPod Cluster Event":
            return ("EventDetails", "ClusterArn")
        return ("ClusterArn",)

    def detail_pattern(self, cluster_arn: str) -> dict[str, Any]:
        """The rule's `detail` filter: this cluster's ARN and the row's own filter."""
        detail: dict[str, Any] = json.loads(json.dumps(self.filter))
        node = detail
        for key in self.arn_path[:-1]:
            node = node.setdefault(key, {})
        node[self.arn_path[-1]] = [cluster_arn]
        return detail

    def applies(self, *, continuous: bool, orchestrator: str) -> bool:
        if self.continuous_provisioning and not continuous:
            return False
        return self.orchestrator in (None, orchestrator)


@cache
def table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((HERE / "hyperpod_events.json").read_text())
    return loaded


@cache
def rows() -> tuple[EventRow, ...]:
    """The table's rows, lists as tuples (`diagnosis_input` may be left out)."""
    names = [f.name for f in fields(EventRow)]

    def value(row: dict[str, Any], name: str) -> Any:
        item: Any = row[name] if name != "diagnosis_input" else row.get(name)
        return tuple(item) if name in _TUPLES else item

    return tuple(EventRow(**{n: value(r, n) for n in names}) for r in table()["events"])


_TUPLES = ("message", "names", "source")


def lookup(event: dict[str, Any], dotted: str) -> Any:
    value: Any = event
    for part in dotted.removeprefix("$.").split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _filter_text(row: EventRow) -> str:
    if not row.filter:
        return "this cluster's ARN"
    return "this cluster's ARN and `" + json.dumps(row.filter, separators=(",", ":")) + "`"


def render_markdown() -> str:
    """docs/health.md's table of events (between its markers)."""
    data = table()
    out = [
        BEGIN,
        f"<!-- `python -m hyperpod_kit.config.facts.hyperpod_events`; table dated {data['date']}. "
        "tests/unit/test_hyperpod_events.py fails when this copy is stale. -->",
        "",
        "| event | detail-type | rule (filter) | where | shape | what to do | diagnosis |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows():
        where = []
        if r.continuous_provisioning:
            where.append("continuous provisioning")
        if r.orchestrator:
            where.append({"slurm": "Slurm", "eks": "EKS"}[r.orchestrator])
        shape = "sourced event" if r.shape_confirmed else "not checked against a real event"
        todo = r.what_to_do or "the message says who repairs the node (below)"
        out.append(
            f"| {r.title} (`{r.id}`) | {r.detail_type} | `{r.rule_id}` ({_cell(_filter_text(r))}) "
            f"| {', '.join(where) or 'every cluster'} | {shape} | {_cell(todo)} "
            f"| {f'`{r.diagnosis}`' if r.diagnosis else '-'} |"
        )
    out += ["", "Sources, per row:", ""]
    for r in rows():
        sources = "; ".join(r.source)
        out.append(f"- `{r.id}`: {sources} (read {r.checked}). Sample: {r.sample_from}.")
    out += ["", END]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(render_markdown())
