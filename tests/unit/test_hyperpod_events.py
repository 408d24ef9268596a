"""`hyperpod_events.json`, the table of HyperPod's EventBridge events: every row has its rule in
the synthesized monitoring stack (its pattern, a message to every topic), its message rendered for
its sample names the cluster, the node or group and what to do, its diagnosis is what `status`
finds, and docs/health.md carries the table. The moto test (tests/integration/
test_hyperpod_events_routing.py) puts each sample and near miss through the rule's pattern."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config.facts import hyperpod_events, limit
from hyperpod_kit.config.facts.hyperpod_events import lookup, render_markdown, rows
from hyperpod_kit.config.validators import run_validators
from hyperpod_kit.operations.diagnosis import Evidence, diagnose, signatures
from tests.conftest import REPO
from tests.hyperpod_events_stack import CLUSTER_ARN, TOPICS, config, render, rules, synth

pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return synth(tmp_path_factory.mktemp("events"))


def test_the_table_is_dated_and_every_row_sourced() -> None:
    data = hyperpod_events.table()
    datetime.date.fromisoformat(data["date"])
    ids = [r.id for r in rows()]
    rule_ids = [r.rule_id for r in rows()]
    assert len(ids) == len(set(ids)) and len(rule_ids) == len(set(rule_ids))
    for r in rows():
        datetime.date.fromisoformat(r.checked)
        assert r.source and all(s.strip() for s in r.source), r.id
        assert r.sample["detail-type"] == r.near_miss["detail-type"] == r.detail_type, r.id
        assert r.sample["source"] == hyperpod_events.SOURCE, r.id
        assert r.orchestrator in (None, "slurm", "eks"), r.id
        # only sent with continuous provisioning (facts-hyperpod.md §5, the reference page)
        assert r.continuous_provisioning == (r.detail_type == "SageMaker HyperPod Cluster Event")
        # the input transformer reads <x> as its own field: none in the written words
        assert not re.search(r"[<>]", " ".join(r.message) + (r.what_to_do or "")), r.id


def test_every_row_has_its_rule_with_the_pattern_and_every_topic(template: dict[str, Any]) -> None:
    found = rules(template)
    assert set(found) == {r.rule_id for r in rows()}  # a Slurm cluster gets every row today
    for r in rows():
        rule = found[r.rule_id]
        assert rule["EventPattern"] == {
            "source": ["aws.sagemaker"],
            "detail-type": [r.detail_type],
            "detail": r.detail_pattern(CLUSTER_ARN),
        }, r.id
        sns = [t for t in rule["Targets"] if "InputTransformer" in t]
        assert len(sns) == 1 + len(TOPICS), r.id
        assert [t["Arn"] for t in sns if isinstance(t["Arn"], str)] == TOPICS, r.id


def test_rows_apply_where_their_detail_type_is_sent() -> None:
    by_id = {r.id: r for r in rows()}
    assert by_id["node-health"].applies(continuous=False, orchestrator="eks")
    assert not by_id["cluster-event-error"].applies(continuous=False, orchestrator="slurm")
    assert by_id["cluster-event-error"].applies(continuous=True, orchestrator="eks")
    assert not by_id["slurm-drift-detected"].applies(continuous=True, orchestrator="eks")
    assert by_id["slurm-drift-detected"].applies(continuous=True, orchestrator="slurm")


def test_only_error_events_reach_the_generic_rule_and_specific_rows_skip_them() -> None:
    """One message an event: an Error-level cluster event goes to `cluster-event-error` alone;
    every other cluster-event row leaves level Error out."""
    for r in rows():
        if r.detail_type != "SageMaker HyperPod Cluster Event":
            continue
        level = r.filter["EventDetails"].get("EventLevel")
        expected = ["Error"] if r.id == "cluster-event-error" else [{"anything-but": "Error"}]
        assert level == expected, r.id


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.id)
def test_the_message_names_the_cluster_the_node_and_what_to_do(
    template: dict[str, Any], row: hyperpod_events.EventRow
) -> None:
    rule = rules(template)[row.rule_id]
    target = next(t for t in rule["Targets"] if "InputTransformer" in t)
    text = render(target, row.sample)
    cluster = lookup(row.sample, row.names[0])
    assert cluster == "sample-cluster" and f"cluster {cluster}" in text, text
    for name in row.names:
        value = lookup(row.sample, name)
        assert value not in (None, ""), (row.id, name)
        assert str(value) in text, (row.id, name, text)
    if row.what_to_do is not None:
        todo = row.what_to_do.replace("{cluster}", config().cluster_name)
        assert f"What to do: {todo}" in text.splitlines(), text
    else:  # the node-health row: who repairs it, in this environment
        assert "What happens next: HyperPod's automatic recovery is off" in text, text
    assert "Time: " + row.sample["time"] in text


def test_a_rows_diagnosis_is_what_status_finds_in_its_sample() -> None:
    known = {s.id for s in signatures()}
    for r in rows():
        if r.diagnosis is None:
            continue
        assert r.diagnosis in known, r.id
        assert r.diagnosis_input, r.id
        found = diagnose([Evidence("failure_message", str(lookup(r.sample, r.diagnosis_input)))])
        assert [d.signature.id for d in found] == [r.diagnosis], r.id


def test_new_rules_stay_within_eventbridges_targets_and_the_validator_agrees(
    template: dict[str, Any],
) -> None:
    """At the validator's limit (3 topics and the remediation queue), with every row's rule,
    `monitoring-targets` finds nothing and no rule has more targets than EventBridge takes."""
    assert not list(run_validators(config(), only=["monitoring-targets"]))
    most = limit("eventbridge_targets_per_rule")
    counts = {k: len(v["Targets"]) for k, v in rules(template).items()}
    assert max(counts.values()) == most == counts["NodeHealth"], counts


def test_more_rules_than_an_alarm_reads_get_a_second_delivery_alarm(
    template: dict[str, Any],
) -> None:
    most = limit("cloudwatch_alarm_math_metrics")
    alarms = {
        p["Properties"]["AlarmName"]: p["Properties"]
        for p in template["Resources"].values()
        if p["Type"] == "AWS::CloudWatch::Alarm"
    }
    delivery = [v for k, v in alarms.items() if "alert-delivery-failures" in k]
    metrics = [len([m for m in a["Metrics"] if "MetricStat" in m]) for a in delivery]
    assert sum(metrics) == len(rules(template)) and max(metrics) <= most, metrics
    watched = json.dumps(delivery)
    for logical, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Events::Rule":
            assert json.dumps({"Ref": logical}) in watched, logical


def test_docs_health_carries_the_table() -> None:
    page = (REPO / "docs" / "health.md").read_text()
    begin, end = page.index(hyperpod_events.BEGIN), page.index(hyperpod_events.END)
    assert page[begin : end + len(hyperpod_events.END)] == render_markdown(), (
        "docs/health.md's events table is stale: paste the output of "
        "`python -m hyperpod_kit.config.facts.hyperpod_events` between its markers"
    )


def test_unconfirmed_shapes_say_so_in_the_docs() -> None:
    text = render_markdown()
    for r in rows():
        line = next(x for x in text.splitlines() if f"(`{r.id}`)" in x)
        assert ("not checked against a real event" in line) == (not r.shape_confirmed), r.id


def test_the_path_helper_reads_what_the_template_reads(tmp_path: Path) -> None:
    event = {"detail": {"A": {"B": "x"}}}
    assert lookup(event, "$.detail.A.B") == "x" and lookup(event, "detail.A.C") is None


def test_every_placeholder_of_a_message_is_a_field_it_reads(template: dict[str, Any]) -> None:
    """EventBridge reads `<name>` in an input template as a variable of its InputPathsMap: a
    written word in angle brackets would be refused at deploy. Every rule's, and every wording of
    what happens to an unhealthy node (the three recovery settings), has none."""
    from types import SimpleNamespace

    from hyperpod_kit.constructs.monitoring import ClusterMonitoring

    for rule in rules(template).values():
        for target in rule["Targets"]:
            transformer = target.get("InputTransformer")
            if transformer is None:
                continue
            used = set(re.findall(r"<([^<>]*)>", transformer["InputTemplate"]))
            assert used <= set(transformer.get("InputPathsMap", {})), used
    from hyperpod_kit.config import EnvironmentConfig
    from tests.conftest import default_data, merge

    for recovery, repair in (("Automatic", False), ("None", True), ("None", False)):
        conf = EnvironmentConfig.model_validate(merge(default_data(), {
            "cluster": {"node_recovery": recovery}, "monitoring": {"auto_repair": repair},
        }))  # fmt: skip
        doing = ClusterMonitoring._doing(SimpleNamespace(config=conf))  # type: ignore[arg-type]
        assert not re.search(r"[<>]", doing), doing
