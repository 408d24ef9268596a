"""The remediation Lambda (assets/functions/remediation/remediation_handler.py) with botocore
Stubber clients: batches above 25 nodes, per-node errors, repeated and malformed events, a failed
call."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.conftest import REPO

HANDLER = REPO / "assets" / "functions" / "remediation" / "remediation_handler.py"
DATA = REPO / "tests" / "data" / "health" / "events"
spec = importlib.util.spec_from_file_location("remediation_handler", HANDLER)
assert spec is not None and spec.loader is not None
handler = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = handler  # dataclasses look their module up there
spec.loader.exec_module(handler)

CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
TOPIC = "arn:aws:sns:us-west-2:111122223333:hyperpod-dev-alerts"
TABLE = "hyperpod-dev-claims"
NOW = 1_790_000_000
SETTINGS = handler.Settings(
    cluster_arn=CLUSTER_ARN, cluster_name="hyperpod-dev", table=TABLE, topic_arn=TOPIC
)


def event(name: str, **detail: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    loaded["detail"].update(detail)
    return loaded


def node(i: int) -> str:
    return f"i-{i:017x}"


def replace_event(i: int) -> dict[str, Any]:
    return event("node-health-replace", InstanceId=node(i))


def sqs(*bodies: Any) -> dict[str, Any]:
    records = []
    for i, body in enumerate(bodies):
        text = body if isinstance(body, str) else json.dumps(body)
        records.append({"messageId": f"m{i}", "body": text, "eventSource": "aws:sqs"})
    return {"Records": records}


class Clients:
    def __init__(self) -> None:
        kw: dict[str, Any] = {
            "region_name": "us-west-2",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        self.sagemaker = boto3.client("sagemaker", **kw)
        self.dynamodb = boto3.client("dynamodb", **kw)
        self.sns = boto3.client("sns", **kw)
        self.stubs = {c: Stubber(getattr(self, c)) for c in ("sagemaker", "dynamodb", "sns")}

    def claim(self, instance: str, action: str, message: str) -> None:
        self.stubs["dynamodb"].add_response(
            "put_item",
            {},
            {
                "TableName": TABLE,
                "Item": {
                    "pk": {"S": f"{instance}#{action}"},
                    "expires_at": {"N": str(NOW + 3600)},
                    "message_id": {"S": message},
                },
                "ConditionExpression": "attribute_not_exists(pk) OR expires_at < :now",
                "ExpressionAttributeValues": {":now": {"N": str(NOW)}},
            },
        )

    def claimed_already(self) -> None:
        self.stubs["dynamodb"].add_client_error(
            "put_item", service_error_code="ConditionalCheckFailedException", http_status_code=400
        )

    def release(self, instance: str, action: str) -> None:
        self.stubs["dynamodb"].add_response(
            "delete_item", {}, {"TableName": TABLE, "Key": {"pk": {"S": f"{instance}#{action}"}}}
        )

    def repair(self, operation: str, nodes: list[str], response: dict[str, Any]) -> None:
        self.stubs["sagemaker"].add_response(
            operation, response, {"ClusterName": CLUSTER_ARN, "NodeIds": nodes}
        )

    def summary(self) -> list[str]:
        published: list[str] = []

        def keep(**kw: Any) -> None:
            published.append(kw["params"]["Message"])

        self.stubs["sns"].add_response(
            "publish",
            {"MessageId": "1"},
            {"TopicArn": TOPIC, "Subject": "HyperPod hyperpod-dev: node repairs", "Message": ANY},
        )
        self.sns.meta.events.register("before-parameter-build.sns.Publish", keep)
        return published

    def process(self, payload: Any) -> dict[str, Any]:
        result: dict[str, Any] = handler.process(
            payload,
            settings=SETTINGS,
            sagemaker=self.sagemaker,
            dynamodb=self.dynamodb,
            sns=self.sns,
            now=NOW,
        )
        return result


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    for stub in c.stubs.values():
        stub.activate()
    yield c
    for stub in c.stubs.values():
        stub.assert_no_pending_responses()
        stub.deactivate()


def test_thirty_unhealthy_nodes_take_two_calls_of_at_most_25(clients: Clients) -> None:
    nodes = [node(i) for i in range(30)]
    for i, n in enumerate(nodes):
        clients.claim(n, "replace", f"m{i}")
    clients.repair("batch_replace_cluster_nodes", nodes[:25], {"Successful": nodes[:25]})
    clients.repair("batch_replace_cluster_nodes", nodes[25:], {"Successful": nodes[25:]})
    published = clients.summary()
    response = clients.process(sqs(*[replace_event(i) for i in range(30)]))
    assert response == {"batchItemFailures": []}
    assert published[0].splitlines()[1].startswith("Replacing 30: " + nodes[0])


def test_reboot_and_replace_go_to_their_own_api(clients: Clients) -> None:
    reboot = event("node-health-reboot")
    replace = event("node-health-replace")
    clients.claim(reboot["detail"]["InstanceId"], "reboot", "m0")
    clients.claim(replace["detail"]["InstanceId"], "replace", "m1")
    clients.repair(
        "batch_reboot_cluster_nodes", [reboot["detail"]["InstanceId"]],
        {"Successful": [reboot["detail"]["InstanceId"]]},
    )  # fmt: skip
    clients.repair(
        "batch_replace_cluster_nodes", [replace["detail"]["InstanceId"]],
        {"Successful": [replace["detail"]["InstanceId"]]},
    )  # fmt: skip
    published = clients.summary()
    assert clients.process(sqs(reboot, replace)) == {"batchItemFailures": []}
    assert "Rebooting 1: i-0b1c2d3e4f5a6b7c8" in published[0]


def test_per_node_errors_retry_only_what_can_succeed_later(clients: Clients) -> None:
    done, gone, busy, flaky = node(1), node(2), node(3), node(4)
    for i, n in enumerate([done, gone, busy, flaky]):
        clients.claim(n, "replace", f"m{i}")
    clients.repair(
        "batch_replace_cluster_nodes",
        [done, gone, busy, flaky],
        {
            "Successful": [done],
            "Failed": [
                {"NodeId": gone, "ErrorCode": "InstanceIdNotFound", "Message": "not in cluster"},
                {"NodeId": busy, "ErrorCode": "InvalidInstanceStatus", "Message": "ShuttingDown"},
                {"NodeId": flaky, "ErrorCode": "InternalServerError", "Message": "try again"},
            ],
        },
    )
    clients.release(flaky, "replace")  # so the retry can claim it again
    published = clients.summary()
    response = clients.process(sqs(*[replace_event(i) for i in (1, 2, 3, 4)]))
    assert response == {"batchItemFailures": [{"itemIdentifier": "m3"}]}
    text = published[0]
    assert f"Replacing 1: {done}" in text
    assert f"{gone}: InstanceIdNotFound not in cluster" in text
    assert f"Failed, will retry: {flaky}: InternalServerError try again" in text


def test_a_repeated_event_does_nothing_twice(clients: Clients) -> None:
    first = replace_event(7)
    again = copy.deepcopy(first)
    again["id"] = "another-delivery-of-the-same-news"
    clients.claim(node(7), "replace", "m0")
    clients.repair("batch_replace_cluster_nodes", [node(7)], {"Successful": [node(7)]})
    clients.summary()
    assert clients.process(sqs(first, again)) == {"batchItemFailures": []}
    # A later invocation with the same event finds the claim and calls nothing.
    clients.claimed_already()
    assert clients.process(sqs(first)) == {"batchItemFailures": []}


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps(event("cluster-state-change")),
        json.dumps({**event("node-health-replace"), "detail": "oops"}),
        json.dumps(event("node-health-replace", InstanceId="node-7")),
        json.dumps(event("node-health-replace", ClusterArn=CLUSTER_ARN.replace("abc", "zzz"))),
        json.dumps(event("node-health-replace", HealthSummary=None)),
        json.dumps(event("node-health-healthy")),
        json.dumps(
            event("node-health-replace", HealthSummary={"HealthStatus": "Unhealthy"})
        ),  # unhealthy, but no repair named: nothing to do
    ],
    ids=[
        "not-json",
        "not-an-object",
        "other-detail-type",
        "detail-not-object",
        "bad-instance-id",
        "other-cluster",
        "no-health-summary",
        "healthy",
        "no-repair-action",
    ],
)
def test_a_malformed_or_irrelevant_event_is_logged_and_dropped(
    clients: Clients, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert clients.process(sqs(body)) == {"batchItemFailures": []}
    assert "ignored message m0" in caplog.text


def test_a_failed_call_releases_the_claims_and_retries_the_messages(clients: Clients) -> None:
    clients.claim(node(1), "replace", "m0")
    clients.claim(node(2), "replace", "m1")
    clients.stubs["sagemaker"].add_client_error(
        "batch_replace_cluster_nodes", service_error_code="ThrottlingException"
    )
    clients.release(node(1), "replace")
    clients.release(node(2), "replace")
    clients.summary()
    response = clients.process(sqs(replace_event(1), replace_event(2)))
    assert response == {"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m1"}]}


def test_a_direct_eventbridge_invocation_works_too(clients: Clients) -> None:
    clients.claim(node(9), "replace", "direct")
    clients.repair("batch_replace_cluster_nodes", [node(9)], {"Successful": [node(9)]})
    clients.summary()
    assert clients.process(replace_event(9)) == {"batchItemFailures": []}


def test_the_handler_reads_its_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLUSTER_ARN", CLUSTER_ARN)
    monkeypatch.setenv("CLAIMS_TABLE", TABLE)
    monkeypatch.setenv("TOPIC_ARN", TOPIC)
    monkeypatch.setenv("DEDUPE_SECONDS", "600")
    settings = handler.Settings.from_environment()
    assert (settings.cluster_arn, settings.table, settings.dedupe_seconds) == (
        CLUSTER_ARN, TABLE, 600,
    )  # fmt: skip
