"""Each row of `hyperpod_events.json` through its synthesized rule on a moto server: the rule's
EventPattern, as the template has it, on a bus with an SQS queue as its target; every row's
sample and near miss put with `put_events`. A row's sample reaches its own queue and no other
(one message an event); its near miss does not reach its queue."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hyperpod_kit.config.facts.hyperpod_events import rows
from tests.hyperpod_events_stack import rules, synth
from tests.moto_server import MotoServer

pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def patterns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {k: v["EventPattern"] for k, v in rules(synth(tmp_path_factory.mktemp("ev"))).items()}


def _entry(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "Source": event["source"],
        "DetailType": event["detail-type"],
        "Detail": json.dumps(event["detail"]),
        "Resources": event["resources"],
    }


def _received(sqs: Any, url: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return got
        got += [json.loads(m["Body"])["detail"] for m in batch]
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )


def test_each_sample_reaches_its_rule_alone_and_no_near_miss_does(
    patterns: dict[str, Any], moto: MotoServer
) -> None:
    events, sqs = moto.client("events"), moto.client("sqs")
    queues = {}
    for row in rows():
        url = sqs.create_queue(QueueName=f"ev-{row.id}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
        events.put_rule(Name=row.rule_id, EventPattern=json.dumps(patterns[row.rule_id]))
        events.put_targets(Rule=row.rule_id, Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
        queues[row.id] = url
    put = [row.sample for row in rows()] + [row.near_miss for row in rows()]
    for start in range(0, len(put), 10):  # PutEvents takes 10 entries a call
        answer = events.put_events(Entries=[_entry(e) for e in put[start : start + 10]])
        assert answer["FailedEntryCount"] == 0, answer
    got = {row.id: _received(sqs, queues[row.id]) for row in rows()}
    for row in rows():
        assert row.sample["detail"] in got[row.id], (row.id, "sample did not arrive")
        assert row.near_miss["detail"] not in got[row.id], (row.id, "near miss arrived")
        elsewhere = [k for k, v in got.items() if k != row.id and row.sample["detail"] in v]
        assert elsewhere == [], (row.id, "sample also reached", elsewhere)


def test_an_event_of_another_cluster_reaches_no_rule(
    patterns: dict[str, Any], moto: MotoServer
) -> None:
    """Every rule is this cluster's: the same samples from another cluster match none."""
    events, sqs = moto.client("events"), moto.client("sqs")
    url = sqs.create_queue(QueueName="all")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    for name, pattern in patterns.items():
        events.put_rule(Name=name, EventPattern=json.dumps(pattern))
        events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
    ours = "arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster"
    other = [
        json.loads(json.dumps(row.sample).replace(ours, ours.replace("sample-", "other-")))
        for row in rows()
    ]
    for start in range(0, len(other), 10):
        events.put_events(Entries=[_entry(e) for e in other[start : start + 10]])
    assert _received(sqs, url) == []
    # and the control: the samples themselves do arrive there
    events.put_events(Entries=[_entry(rows()[0].sample)])
    assert len(_received(sqs, url)) == 1
