"""Remediation Lambda: reboot or replace the nodes HyperPod reports unhealthy, where HyperPod's
own recovery is off (cluster NodeRecovery None) and the environment allows repairs
(monitoring.auto_repair).

Input: SQS batches of EventBridge "SageMaker HyperPod Cluster Node Health Event"s (a direct
EventBridge invocation with one event works too). For each event whose HealthSummary names a
RepairAction of Reboot or Replace, the node is claimed in DynamoDB (node and action, for an hour),
so a repeated event, or the same event delivered twice, does nothing the second time; then
BatchRebootClusterNodes / BatchReplaceClusterNodes are called with at most 25 nodes each.

Per-node results: done (Successful), already handled (InstanceIdNotFound, InvalidInstanceStatus,
InstanceIdInUse: the node is gone or being repaired), or to retry (InternalServerError, or the
whole call failed): the claim is released and the SQS message reported as a batch item failure,
so SQS delivers it again (five times, then the dead-letter queue). A malformed event, or one for
another cluster, is logged and dropped: retrying it cannot help. A summary goes to the alert topic.

Plain boto3, no third-party packages.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

LOG = logging.getLogger("hyperpod-kit-remediation")
LOG.setLevel(logging.INFO)

NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
MAX_NODES_PER_CALL = 25  # BatchReboot/ReplaceClusterNodes accept 1 to 25 node ids
INSTANCE_ID = re.compile(r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$")
ALREADY_HANDLED = {"InstanceIdNotFound", "InvalidInstanceStatus", "InstanceIdInUse"}
HEALTHY = {"healthy", "schedulable"}
API = {"reboot": "batch_reboot_cluster_nodes", "replace": "batch_replace_cluster_nodes"}


@dataclass(frozen=True)
class Request:
    message_id: str
    instance_id: str
    action: str  # reboot | replace
    reason: str


@dataclass
class Outcome:
    done: dict[str, list[str]] = field(default_factory=lambda: {"reboot": [], "replace": []})
    already: list[str] = field(default_factory=list)  # "i-...: reason"
    duplicates: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)  # "i-...: reason"
    ignored: list[str] = field(default_factory=list)
    failed_messages: set[str] = field(default_factory=set)

    def response(self) -> dict[str, Any]:
        failures = [{"itemIdentifier": m} for m in sorted(self.failed_messages)]
        return {"batchItemFailures": failures}


@dataclass(frozen=True)
class Settings:
    cluster_arn: str
    cluster_name: str
    table: str
    topic_arn: str | None
    dedupe_seconds: int = 3600

    @classmethod
    def from_environment(cls) -> Settings:
        return cls(
            cluster_arn=os.environ["CLUSTER_ARN"],
            cluster_name=os.environ.get("CLUSTER_NAME", ""),
            table=os.environ["CLAIMS_TABLE"],
            topic_arn=os.environ.get("TOPIC_ARN") or None,
            dedupe_seconds=int(os.environ.get("DEDUPE_SECONDS", "3600")),
        )


def _action(summary: dict[str, Any]) -> str | None:
    """reboot / replace from HealthSummary.RepairAction (or a pending status), else None."""
    for value in (summary.get("RepairAction"), summary.get("HealthStatus")):
        text = str(value or "").lower()
        if "replace" in text:
            return "replace"
        if "reboot" in text:
            return "reboot"
    return None


def parse(message_id: str, body: Any, settings: Settings) -> Request | str:  # noqa: PLR0911
    """A request, or why the event is dropped (logged, never retried)."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return "not JSON"
    if not isinstance(body, dict):
        return "not a JSON object"
    if body.get("detail-type") != NODE_HEALTH:
        return f"not a node health event ({body.get('detail-type')!r})"
    detail = body.get("detail")
    if not isinstance(detail, dict):
        return "no detail"
    arn, name = detail.get("ClusterArn"), detail.get("ClusterName")
    if arn not in (None, settings.cluster_arn) or (
        arn is None and name not in (None, settings.cluster_name)
    ):
        return f"another cluster ({arn or name})"
    instance = detail.get("InstanceId")
    if not isinstance(instance, str) or not INSTANCE_ID.match(instance):
        return f"no valid InstanceId ({instance!r})"
    summary = detail.get("HealthSummary")
    if not isinstance(summary, dict):
        return f"{instance}: no HealthSummary"
    status = str(summary.get("HealthStatus") or "")
    action = _action(summary)
    if action is None:
        if status.lower() in HEALTHY:
            return f"{instance} is {status}"
        repair = summary.get("RepairAction")
        return f"{instance}: no repair named (HealthStatus {status!r}, RepairAction {repair!r})"
    reason = str(summary.get("HealthStatusReason") or status)
    return Request(message_id, instance, action, reason)


def _records(event: Any) -> list[tuple[str, Any]]:
    if isinstance(event, dict) and isinstance(event.get("Records"), list):
        return [
            (str(r.get("messageId", f"record-{i}")), r.get("body"))
            for i, r in enumerate(event["Records"])
            if isinstance(r, dict)
        ]
    return [("direct", event)]


def _claim(dynamodb: Any, settings: Settings, request: Request, now: int) -> bool:
    """True if this invocation may act on the node; False if it was acted on within the window."""
    try:
        dynamodb.put_item(
            TableName=settings.table,
            Item={
                "pk": {"S": f"{request.instance_id}#{request.action}"},
                "expires_at": {"N": str(now + settings.dedupe_seconds)},
                "message_id": {"S": request.message_id},
            },
            ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
            ExpressionAttributeValues={":now": {"N": str(now)}},
        )
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _release(dynamodb: Any, settings: Settings, request: Request) -> None:
    try:
        dynamodb.delete_item(
            TableName=settings.table, Key={"pk": {"S": f"{request.instance_id}#{request.action}"}}
        )
    except (ClientError, BotoCoreError):
        LOG.exception("could not release the claim on %s", request.instance_id)


def process(
    event: Any,
    *,
    settings: Settings,
    sagemaker: Any,
    dynamodb: Any,
    sns: Any | None,
    now: float | None = None,
) -> dict[str, Any]:
    """Handle one invocation with the given clients (the tests pass stubbed ones)."""
    moment = int(now if now is not None else time.time())
    outcome = Outcome()
    wanted: dict[tuple[str, str], Request] = {}
    for message_id, body in _records(event):
        parsed = parse(message_id, body, settings)
        if isinstance(parsed, str):
            LOG.warning("ignored message %s: %s", message_id, parsed)
            outcome.ignored.append(parsed)
            continue
        key = (parsed.instance_id, parsed.action)
        if key in wanted:
            outcome.duplicates.append(parsed.instance_id)
            continue
        wanted[key] = parsed
    claimed: dict[str, list[Request]] = {"reboot": [], "replace": []}
    for request in wanted.values():
        try:
            mine = _claim(dynamodb, settings, request, moment)
        except (ClientError, BotoCoreError) as e:
            LOG.error("cannot claim %s: %s", request.instance_id, e)
            outcome.retry.append(f"{request.instance_id}: claim failed ({e})")
            outcome.failed_messages.add(request.message_id)
            continue
        if mine:
            claimed[request.action].append(request)
        else:
            LOG.info(
                "%s: %s already requested within the window", request.instance_id, request.action
            )
            outcome.duplicates.append(request.instance_id)
    for action, requests in claimed.items():
        for start in range(0, len(requests), MAX_NODES_PER_CALL):
            _call(
                sagemaker=sagemaker,
                dynamodb=dynamodb,
                settings=settings,
                action=action,
                chunk=requests[start : start + MAX_NODES_PER_CALL],
                outcome=outcome,
            )
    _report(sns, settings, outcome)
    return outcome.response()


def _call(
    *,
    sagemaker: Any,
    dynamodb: Any,
    settings: Settings,
    action: str,
    chunk: list[Request],
    outcome: Outcome,
) -> None:
    by_id = {r.instance_id: r for r in chunk}
    try:
        response = getattr(sagemaker, API[action])(
            ClusterName=settings.cluster_arn, NodeIds=list(by_id)
        )
    except (ClientError, BotoCoreError) as e:
        LOG.error("%s of %d nodes failed: %s", action, len(chunk), e)
        for request in chunk:
            _release(dynamodb, settings, request)
            outcome.retry.append(f"{request.instance_id}: {e}")
            outcome.failed_messages.add(request.message_id)
        return
    for node in response.get("Successful", []):
        outcome.done[action].append(node)
    for failure in response.get("Failed", []):
        node, code = failure.get("NodeId", "?"), failure.get("ErrorCode", "?")
        text = f"{node}: {code} {failure.get('Message', '')}".strip()
        failed = by_id.get(node)
        if code in ALREADY_HANDLED or failed is None:
            outcome.already.append(text)
        else:
            _release(dynamodb, settings, failed)
            outcome.retry.append(text)
            outcome.failed_messages.add(failed.message_id)
    LOG.info("%s: %s", action, json.dumps(response, default=str))


def _report(sns: Any | None, settings: Settings, outcome: Outcome) -> None:
    lines = []
    for action, verb in (("replace", "Replacing"), ("reboot", "Rebooting")):
        if outcome.done[action]:
            lines.append(f"{verb} {len(outcome.done[action])}: " + ", ".join(outcome.done[action]))
    if outcome.already:
        lines.append("Already gone or being repaired: " + "; ".join(outcome.already))
    if outcome.retry:
        lines.append("Failed, will retry: " + "; ".join(outcome.retry))
    if not lines or sns is None or settings.topic_arn is None:
        return
    name = settings.cluster_name or settings.cluster_arn
    lines.insert(0, f"hyperpod-kit remediation for HyperPod cluster {name} (node_recovery: None):")
    try:
        sns.publish(
            TopicArn=settings.topic_arn,
            Subject=f"HyperPod {name}: node repairs"[:100],
            Message="\n".join(lines),
        )
    except (ClientError, BotoCoreError):
        LOG.exception("could not publish the summary")


def handler(event: Any, context: Any) -> dict[str, Any]:
    settings = Settings.from_environment()
    return process(
        event,
        settings=settings,
        sagemaker=boto3.client("sagemaker"),
        dynamodb=boto3.client("dynamodb"),
        sns=boto3.client("sns"),
    )
