"""`MonitoringStack` built in a bare app with the cluster's handles: event patterns and messages,
the topic's key and policies, subscriptions, alarms, metric filters, the dashboard, the optional
remediation Lambda, and both gates (cdk-nag, cfn-lint) on the synthesized template."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_kit.app import FEATURE_FLAGS
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.constructs import monitoring
from hyperpod_kit.constructs.monitoring import TRAINING_METRICS
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.stacks.monitoring import MonitoringStack
from tests.conftest import REPO, default_data, merge

pytestmark = pytest.mark.synth

CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
FS_ID = "fs-0123456789abcdef0"
EVENTS = REPO / "tests" / "data" / "health" / "events"
LOG_GROUP = "/aws/sagemaker/Clusters/hyperpod-dev/abcdef123456"
PAGER = "arn:aws:sns:us-west-2:111122223333:oncall-pager"
EXISTING_FS = {
    "file_system_id": FS_ID,
    "dns_name": f"{FS_ID}.fsx.us-west-2.amazonaws.com",
    "mount_name": "abcdefgh",
}


class Cluster:
    """The cluster's handles, as `MonitoredCluster` describes them (HyperPodCluster has them)."""

    cluster_arn = CLUSTER_ARN
    cluster_name = "hyperpod-dev"
    cluster_id = "abcdef123456"


class Built:
    def __init__(self, overrides: dict[str, Any], outdir: Path) -> None:
        self.config = EnvironmentConfig.model_validate(merge(default_data(), overrides))
        app = cdk.App(outdir=str(outdir), context=dict(FEATURE_FLAGS))
        self.stack = MonitoringStack(
            app,
            "hyperpod-dev-monitoring",
            config=self.config,
            cluster=Cluster(),
            file_system_id=FS_ID,
            env=cdk.Environment(region=self.config.region),
        )
        cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
        app.synth()
        self.outdir = outdir
        self.template = Template.from_stack(self.stack)
        self.json = self.template.to_json()

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.template.find_resources(kind)
        return found

    def props(self, kind: str) -> list[dict[str, Any]]:
        return [r["Properties"] for r in self.resources(kind).values()]

    def rule(self, detail_type: str) -> dict[str, Any]:
        (rule,) = [
            p for p in self.props("AWS::Events::Rule")
            if p["EventPattern"]["detail-type"] == [detail_type]
        ]  # fmt: skip
        return rule

    def rule_by_id(self, rule_id: str) -> dict[str, Any]:
        """The rule of construct id `rule_id` (a row of hyperpod_events.json)."""
        rule: dict[str, Any]
        (rule,) = [
            r["Properties"] for k, r in self.resources("AWS::Events::Rule").items()
            if re.fullmatch(f"Monitoring{rule_id}[0-9A-F]{{8}}", k)
        ]  # fmt: skip
        return rule

    def alarms(self) -> dict[str, dict[str, Any]]:
        return {p["AlarmName"]: p for p in self.props("AWS::CloudWatch::Alarm")}


SUBSCRIBED = {
    "monitoring": {
        "alarm_email": "ml-oncall@example.com",
        "subscribers": {
            "emails": ["alice@example.com", "ml-oncall@example.com"],
            "sns_topic_arns": [PAGER],
        },
    }
}
REMEDIATION = {"cluster": {"node_recovery": "None"}}
EKS_EXISTING_FS = {
    "orchestrator": "eks",
    "network": {
        "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
        "control_plane_availability_zone_id": "usw2-az1",
    },
    "cluster": {
        "instance_groups": [
            {"name": "w", "role": "worker", "instance_type": "ml.p5.48xlarge", "instance_count": 4}
        ]
    },
    "storage": {"lustre": {"existing": EXISTING_FS}},
}
VARIANTS = {
    "default": {},
    "continuous": {},  # built with continuous_provisioning() on (see `built`)
    "subscribed": SUBSCRIBED,
    "remediation": REMEDIATION,
    "eks": EKS_EXISTING_FS,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    @cache
    def build(name: str) -> Built:
        if name == "continuous":  # no environment file can ask for it yet
            with mock.patch.object(monitoring, "continuous_provisioning", return_value=True):
                return Built(VARIANTS[name], tmp_path_factory.mktemp(name))
        return Built(VARIANTS[name], tmp_path_factory.mktemp(name))

    return build


# --- EventBridge --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "detail_type", "detail"),
    [
        ("default", "SageMaker HyperPod Cluster State Change", {"ClusterArn": [CLUSTER_ARN]}),
        ("default", "SageMaker HyperPod Cluster Node Health Event", {"ClusterArn": [CLUSTER_ARN]}),
        (
            "continuous",
            "SageMaker HyperPod Cluster Event",
            {"EventDetails": {"ClusterArn": [CLUSTER_ARN], "EventLevel": ["Error"]}},
        ),
    ],
)
def test_rules_match_this_clusters_hyperpod_events(
    built: Any, variant: str, detail_type: str, detail: Any
) -> None:
    """The rules the stack had before the events table keep their construct ids (and logical
    ids): ClusterStateChange, NodeHealth, ClusterEvent (now its Error events; the table's other
    rows take the rest, tests/unit/test_hyperpod_events.py)."""
    rule_id = {
        "SageMaker HyperPod Cluster State Change": "ClusterStateChange",
        "SageMaker HyperPod Cluster Node Health Event": "NodeHealth",
        "SageMaker HyperPod Cluster Event": "ClusterEvent",
    }[detail_type]
    rule = built(variant).rule_by_id(rule_id)
    assert rule["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": [detail_type],
        "detail": detail,
    }
    (target,) = rule["Targets"]
    assert target["Arn"]["Ref"].startswith("MonitoringAlertsTopic")
    assert target["InputTransformer"]["InputPathsMap"]["time"] == "$.time"


def render(target: dict[str, Any], event: dict[str, Any]) -> str:
    """What EventBridge's input transformer sends SNS for `event` (string template lines)."""
    transformer = target["InputTransformer"]
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value: Any = event
        for part in path.removeprefix("$.").split("."):
            value = value.get(part, "") if isinstance(value, dict) else ""
        values[name] = str(value)
    text = re.sub(r"<([^>]+)>", lambda m: values[m.group(1)], transformer["InputTemplate"])
    return "\n".join(json.loads(line) for line in text.splitlines())


def event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return loaded


@pytest.mark.parametrize("variant", ["default", "subscribed", "remediation", "eks"])
def test_no_cluster_event_rule_where_it_can_never_fire(built: Any, variant: str) -> None:
    """AWS sends "SageMaker HyperPod Cluster Event" only with continuous provisioning, which no
    environment has yet: no rule, no dashboard line, no alarm input for it."""
    b = built(variant)
    types = [p["EventPattern"]["detail-type"] for p in b.props("AWS::Events::Rule")]
    assert ["SageMaker HyperPod Cluster Event"] not in types
    assert not [
        k for k in b.resources("AWS::Events::Rule") if k.startswith("MonitoringClusterEvent")
    ]
    assert "ClusterEvent" not in json.dumps(b.props("AWS::CloudWatch::Dashboard"))
    assert "ClusterEvent" not in json.dumps(b.alarms())


def test_with_continuous_provisioning_the_rule_feeds_the_dashboard_and_alarm(built: Any) -> None:
    b = built("continuous")
    (rule_id,) = [k for k in b.resources("AWS::Events::Rule") if "ClusterEvent" in k]
    assert rule_id in json.dumps(b.props("AWS::CloudWatch::Dashboard"))
    assert rule_id in json.dumps(b.alarms()["hyperpod-dev-alert-delivery-failures"])


def test_a_node_health_message_says_who_what_and_what_happens_next(built: Any) -> None:
    (target,) = built("default").rule("SageMaker HyperPod Cluster Node Health Event")["Targets"]
    text = render(target, event("node-health-replace"))
    assert text.splitlines() == [
        "HyperPod node health event in cluster hyperpod-dev: instance i-0a1b2c3d4e5f60718.",
        "What happened: Unhealthy: NvidiaGpuFallenOffBus: Xid 79 on GPU 0000:53:00",
        "Repair action: Replace. Recommendation: Replace the instance",
        "What happens next: HyperPod repairs it itself (node_recovery: Automatic): "
        "RepairAction above.",
        "Time: 2026-11-20T03:15:10Z. Console: https://us-west-2.console.aws.amazon.com/sagemaker"
        "/home?region=us-west-2#/cluster-management/hyperpod-dev",
        f"Logs: CloudWatch log group {LOG_GROUP}, stream of instance i-0a1b2c3d4e5f60718",
    ]


def test_the_message_says_who_repairs_when_hyperpod_does_not(built: Any) -> None:
    rule = built("remediation").rule("SageMaker HyperPod Cluster Node Health Event")
    sns_target = next(t for t in rule["Targets"] if "InputTransformer" in t)
    assert "remediation Lambda performs the RepairAction" in render(
        sns_target, event("node-health-reboot")
    )


def test_state_change_and_cluster_event_messages(built: Any) -> None:
    b = built("default")
    (state,) = b.rule("SageMaker HyperPod Cluster State Change")["Targets"]
    assert render(state, event("cluster-state-change")).startswith(
        "HyperPod cluster hyperpod-dev is now InService."
    )
    (provisioning,) = built("continuous").rule_by_id("ClusterEvent")["Targets"]
    text = render(provisioning, event("cluster-event"))
    assert (
        "What happened: Instance creation in Cluster hyperpod-dev and InstanceGroup compute" in text
    )
    assert (
        "Cluster hyperpod-dev, instance group compute, instance i-0391f86fa0fe0d465 "
        "(Instance, Error)." in text
    )


# --- the topic and its key ----------------------------------------------------------------------


def test_the_topic_uses_a_customer_managed_key_events_and_cloudwatch_may_use(built: Any) -> None:
    b = built("default")
    (key_id, key), = b.resources("AWS::KMS::Key").items()  # fmt: skip
    assert key["Properties"]["EnableKeyRotation"] is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    for service in ("events.amazonaws.com", "cloudwatch.amazonaws.com"):
        granted = [s for s in statements if s.get("Principal") == {"Service": service}]
        actions = {
            a
            for s in granted
            for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        }
        assert {"kms:Decrypt", "kms:GenerateDataKey"} <= actions, service
    (topic,) = b.props("AWS::SNS::Topic")
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_the_topic_requires_tls_and_lets_this_accounts_alarms_publish(built: Any) -> None:
    (policy,) = built("default").props("AWS::SNS::TopicPolicy")
    by_sid = {s.get("Sid"): s for s in policy["PolicyDocument"]["Statement"]}
    assert by_sid["AllowPublishThroughSSLOnly"]["Effect"] == "Deny"
    alarms = by_sid["CloudWatchAlarms"]
    assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert alarms["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert any(s["Principal"] == {"Service": "events.amazonaws.com"} for s in by_sid.values())


def test_subscribers_get_every_alert_once(built: Any) -> None:
    b = built("subscribed")
    emails = sorted(p["Endpoint"] for p in b.props("AWS::SNS::Subscription"))
    assert emails == ["alice@example.com", "ml-oncall@example.com"]
    assert {p["Protocol"] for p in b.props("AWS::SNS::Subscription")} == {"email"}
    for rule in b.props("AWS::Events::Rule"):
        assert PAGER in [t["Arn"] for t in rule["Targets"]]
    for name, alarm in b.alarms().items():
        assert PAGER in alarm["AlarmActions"] and PAGER in alarm["OKActions"], name
        assert len(alarm["AlarmActions"]) == 2, name


def _topics(n: int) -> list[str]:
    return [f"arn:aws:sns:us-west-2:111122223333:pager-{i}" for i in range(n)]


def test_validate_allows_exactly_what_eventbridge_and_cloudwatch_take(tmp_path: Path) -> None:
    """`monitoring-targets` and the construct agree: at the validator's limit (3 topics, the own
    topic and the remediation queue: 5 targets) the stack builds, with 5 targets on the
    node-health rule and 4 actions a state; one topic more, validate refuses it and CDK would
    have died at synth with a jsii traceback."""
    from hyperpod_kit.config.facts import limit
    from hyperpod_kit.config.validators import run_validators

    most = limit("eventbridge_targets_per_rule")
    at_limit = merge(REMEDIATION, {"monitoring": {"subscribers": {"sns_topic_arns": _topics(3)}}})
    b = Built(at_limit, tmp_path / "at-limit")
    assert not [f for f in run_validators(b.config, only=["monitoring-targets"])]
    assert len(b.rule(monitoring.NODE_HEALTH)["Targets"]) == most
    for name, alarm in b.alarms().items():
        assert len(alarm["AlarmActions"]) == len(alarm["OKActions"]) == 4, name

    over = merge(REMEDIATION, {"monitoring": {"subscribers": {"sns_topic_arns": _topics(4)}}})
    config = EnvironmentConfig.model_validate(merge(default_data(), over))
    (finding,) = run_validators(config, only=["monitoring-targets"])
    assert finding.path == "monitoring.subscribers.sns_topic_arns[3]"
    app = cdk.App(outdir=str(tmp_path / "over"), context=dict(FEATURE_FLAGS))
    stack = MonitoringStack(
        app, "over", config=config, cluster=Cluster(), file_system_id=FS_ID,
        env=cdk.Environment(region=config.region),
    )  # fmt: skip
    errors = [e for c in stack.node.find_all() for e in c.node.validate()]  # what synth runs
    assert errors == [f"Event rule cannot have more than {most} targets."], errors


def test_no_subscribers_still_makes_the_topic(built: Any) -> None:
    b = built("default")
    assert b.props("AWS::SNS::Subscription") == []
    assert len(b.props("AWS::SNS::Topic")) == 1


# --- alarms and metric filters ------------------------------------------------------------------


def test_alarms_and_their_thresholds(built: Any) -> None:
    alarms = built("default").alarms()
    assert set(alarms) == {
        "hyperpod-dev-lifecycle-script-failures",
        "hyperpod-dev-node-check-failures",
        "hyperpod-dev-node-repair-requests",
        "hyperpod-dev-node-health-events",
        "hyperpod-dev-alert-delivery-failures",
        "hyperpod-dev-fsx-free-capacity",
        "hyperpod-dev-fsx-throughput",
        "hyperpod-dev-training-non-finite-stops",
        "hyperpod-dev-health-agent-detections",
    }
    assert alarms["hyperpod-dev-node-health-events"]["Threshold"] == 3
    assert alarms["hyperpod-dev-health-agent-detections"]["Threshold"] == 1
    assert alarms["hyperpod-dev-lifecycle-script-failures"]["Threshold"] == 1
    free = alarms["hyperpod-dev-fsx-free-capacity"]
    assert (free["Threshold"], free["ComparisonOperator"]) == (10, "LessThanThreshold")
    expressions = [m.get("Expression") for m in free["Metrics"]]
    assert f"100 * free / {1200 * 2**30}" in expressions
    fsx_metric = next(m for m in free["Metrics"] if "MetricStat" in m)["MetricStat"]["Metric"]
    assert fsx_metric["Namespace"] == "AWS/FSx"
    assert fsx_metric["MetricName"] == "FreeDataStorageCapacity"
    assert fsx_metric["Dimensions"] == [{"Name": "FileSystemId", "Value": FS_ID}]
    throughput = alarms["hyperpod-dev-fsx-throughput"]
    assert "100 * (r + w) / PERIOD(r) / 300000000" in [
        m.get("Expression") for m in throughput["Metrics"]
    ]
    for alarm in alarms.values():
        assert alarm["TreatMissingData"] == "notBreaching"
        assert len(alarm["AlarmDescription"]) < 1024  # never cut short


def test_thresholds_follow_the_file(tmp_path: Path) -> None:
    b = Built(
        {"monitoring": {"alarms": {"lifecycle_failures": 2, "fsx_free_capacity_percent": 20}}},
        tmp_path,
    )
    alarms = b.alarms()
    assert alarms["hyperpod-dev-lifecycle-script-failures"]["Threshold"] == 2
    assert alarms["hyperpod-dev-fsx-free-capacity"]["Threshold"] == 20


def test_an_existing_file_system_gets_no_capacity_alarms(built: Any) -> None:
    alarms = built("eks").alarms()
    assert "hyperpod-dev-fsx-free-capacity" not in alarms
    assert "hyperpod-dev-fsx-throughput" not in alarms
    assert "hyperpod-dev-node-check-failures" in alarms
    assert "hyperpod-dev-training-non-finite-stops" not in alarms  # EKS ships no job events
    # on EKS a cluster event carries the agent's detections; the log alarm is Slurm's
    assert "hyperpod-dev-health-agent-detections" not in alarms


def test_metric_filters_read_the_clusters_log_group(built: Any) -> None:
    filters = {
        p["MetricTransformations"][0]["MetricName"]: p
        for p in built("default").props("AWS::Logs::MetricFilter")
    }
    assert {p["LogGroupName"] for p in filters.values()} == {LOG_GROUP}
    assert filters["LifecycleScriptFailures"]["FilterPattern"] == (
        '"hyperpod-kit lifecycle: FAILED in"'
    )
    assert filters["NodeCheckFailures"]["FilterPattern"] == (
        '{ ($.source = "hyperpod-kit-health") && ($.event = "verdict") && ($.status = "fail") }'
    )
    assert filters["NodeRepairRequests"]["FilterPattern"].endswith("($.executed IS TRUE) }")
    assert (
        filters["HealthAgentDetections"]["FilterPattern"] == '"HealthMonitoringAgentDetectionEvent"'
    )
    counted = filters["NodeCheckFailures"]["MetricTransformations"][0]
    assert (counted["MetricValue"], counted["MetricNamespace"]) == ("1", "HyperPodKit/hyperpod-dev")
    # Slurm jobs' events reach the group from the nodes' spool: one filter per trainer field.
    assert filters["TrainingTokensPerSecond"]["FilterPattern"] == (
        '{ ($.event = "step") && ($.tokens_per_s = *) }'
    )
    value = filters["TrainingTokensPerSecond"]["MetricTransformations"][0]
    assert (value["MetricValue"], value["Unit"]) == ("$.tokens_per_s", "Count/Second")
    assert "DefaultValue" not in value  # no step line, no data point (not a zero)
    assert filters["TrainingNonFiniteStops"]["FilterPattern"] == (
        '{ ($.event = "exit") && ($.reason = "non_finite") }'
    )
    assert filters["EvalLoss"]["FilterPattern"] == '{ ($.event = "eval") && ($.loss = *) }'
    assert {n for n in filters if n.startswith(("Training", "Checkpoint", "Eval"))} == {
        *TRAINING_METRICS,
        "TrainingNonFiniteStops",
    }


def test_on_eks_no_filter_pretends_to_read_training_metrics(built: Any) -> None:
    names = [
        p["MetricTransformations"][0]["MetricName"]
        for p in built("eks").props("AWS::Logs::MetricFilter")
    ]
    assert "NodeCheckFailures" in names
    assert not [n for n in names if n.startswith(("Training", "Checkpoint", "Eval"))]
    (dashboard,) = built("eks").props("AWS::CloudWatch::Dashboard")
    assert "Training:" not in json.dumps(dashboard["DashboardBody"])


def test_the_patterns_match_what_the_runner_writes() -> None:
    """The runner's verdict and decision lines carry the fields the metric filters select on (a
    JSON filter on a field the line lacks never matches)."""
    import io
    import sys

    sys.path.insert(0, str(REPO / "lifecycle" / "health"))
    import runner

    log = runner.JsonLog(None, stream=io.StringIO())
    node = runner.Node("n", "g", runner.InstanceFacts("ml.p4d.24xlarge", 8, 4))
    r = runner.Runner(settings={"checks": {}}, node=node, log=log, clock=lambda: 0.0)
    r._line("verdict", check="efa", status="fail")
    r._line("decision", action="replace", executed=True)
    verdict, decision = log.lines
    assert (verdict["source"], verdict["event"], verdict["status"]) == (
        "hyperpod-kit-health", "verdict", "fail",
    )  # fmt: skip
    assert (decision["event"], decision["executed"]) == ("decision", True)


# A detection line of HyperPod's health monitoring agent as the developer guide shows it
# (sagemaker-hyperpod-eks-resiliency-health-monitoring-agent, quoted by a HyperPod workshop page).
HMA_LINE = json.dumps(
    {
        "level": "info",
        "ts": "2024-08-21T18:35:35Z",
        "msg": "NPD caught event",
        "details": {
            "severity": "warn",
            "reason": "XidHardwareFailure",
            "message": "NVRM: Xid (PCI:0000:b9:00): 71, NVLink: fatal error detected on link 6",
        },
        "HealthMonitoringAgentDetectionEvent": "HealthEvent",
    }
)


def test_the_health_agent_filter_counts_the_agents_detection_lines(built: Any) -> None:
    """A quoted term in a CloudWatch filter pattern matches a line that contains it: the
    agent's detection line does, the agent's other lines (no detection key) do not."""
    (agent,) = [
        p for p in built("default").props("AWS::Logs::MetricFilter")
        if p["MetricTransformations"][0]["MetricName"] == "HealthAgentDetections"
    ]  # fmt: skip
    term = json.loads(agent["FilterPattern"])
    assert term in HMA_LINE
    assert term not in json.dumps({"level": "info", "msg": "NPD started"})
    alarm = built("default").alarms()["hyperpod-dev-health-agent-detections"]
    assert "SagemakerHealthMonitoringAgent/" in alarm["AlarmDescription"]


# --- dashboard ----------------------------------------------------------------------------------


def test_the_dashboard_shows_cluster_fsx_and_training(built: Any) -> None:
    (dashboard,) = built("default").props("AWS::CloudWatch::Dashboard")
    assert dashboard["DashboardName"] == "hyperpod-dev-hyperpod"
    body = json.dumps(dashboard["DashboardBody"])
    for piece in (
        "HyperPod events",
        "MatchedEvents",
        "NodeCheckFailures",
        "HealthAgentDetections",
        "LifecycleScriptFailures",
        "FreeDataStorageCapacity",
        "DataReadBytes",
        "MetadataOperations",
        "hyperpod-kit-health",
        LOG_GROUP,
        "cluster-management/hyperpod-dev",
    ):
        assert piece in body, piece
    for piece in (
        "Training: loss, held-out loss and step",
        "EvalLoss",
        "TrainingTokensPerSecond",
        "TrainingMFU",
        "CheckpointBlockingSeconds",
    ):
        assert piece in body, piece


# --- remediation --------------------------------------------------------------------------------


def test_no_remediation_lambda_while_hyperpod_repairs_nodes_itself(built: Any) -> None:
    b = built("default")
    assert b.resources("AWS::Lambda::Function") == {}
    assert b.resources("AWS::SQS::Queue") == {}


def test_no_remediation_lambda_with_auto_repair_off(tmp_path: Path) -> None:
    b = Built(merge(REMEDIATION, {"monitoring": {"auto_repair": False}}), tmp_path)
    assert b.resources("AWS::Lambda::Function") == {}
    (target,) = b.rule("SageMaker HyperPod Cluster Node Health Event")["Targets"]
    assert (
        "aws sagemaker batch-replace-cluster-nodes" in target["InputTransformer"]["InputTemplate"]
    )


def test_remediation_lambda_batches_node_health_events_from_an_encrypted_queue(built: Any) -> None:
    b = built("remediation")
    (function,) = b.props("AWS::Lambda::Function")
    assert (function["Runtime"], function["Handler"], function["Timeout"]) == (
        "python3.14",
        "remediation_handler.handler",
        60,
    )
    env = function["Environment"]["Variables"]
    assert env["CLUSTER_ARN"] == CLUSTER_ARN and env["DEDUPE_SECONDS"] == "3600"
    (mapping,) = b.props("AWS::Lambda::EventSourceMapping")
    assert mapping["BatchSize"] == 100
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}
    queues = b.resources("AWS::SQS::Queue")
    assert len(queues) == 2
    for queue in queues.values():
        assert "KmsMasterKeyId" in queue["Properties"]
    main = next(q for q in queues.values() if "RedrivePolicy" in q["Properties"])
    assert main["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 5
    rule = b.rule("SageMaker HyperPod Cluster Node Health Event")
    assert any("InputTransformer" not in t for t in rule["Targets"])  # the queue gets the raw event
    (table,) = b.props("AWS::DynamoDB::Table")
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_remediation_may_repair_this_cluster_only(built: Any) -> None:
    policies = built("remediation").props("AWS::IAM::Policy")
    repair = [
        s
        for p in policies
        for s in p["PolicyDocument"]["Statement"]
        if s.get("Sid") == "RepairClusterNodes"
    ]
    assert repair == [
        {
            "Action": ["sagemaker:BatchRebootClusterNodes", "sagemaker:BatchReplaceClusterNodes"],
            "Effect": "Allow",
            "Resource": CLUSTER_ARN,
            "Sid": "RepairClusterNodes",
        }
    ]
    alarms = built("remediation").alarms()
    assert {"hyperpod-dev-remediation-errors", "hyperpod-dev-remediation-dead-letters"} <= set(
        alarms
    )


def test_the_lambda_asset_holds_only_the_handler(built: Any) -> None:
    b = built("remediation")
    assets = [p for p in b.outdir.iterdir() if p.name.startswith("asset.")]
    (folder,) = [p for p in assets if (p / "remediation_handler.py").exists()]
    assert sorted(p.name for p in folder.iterdir()) == ["remediation_handler.py"]


# --- the stack ----------------------------------------------------------------------------------


def test_the_stack_publishes_its_handles(built: Any) -> None:
    (parameter,) = built("remediation").props("AWS::SSM::Parameter")
    assert parameter["Name"] == "/hyperpod-kit/hyperpod-dev/monitoring"
    text = json.dumps(parameter["Value"])
    for key in ("topic_arn", "dashboard_name", "metrics_namespace", "remediation_function"):
        assert key in text


def test_monitoring_off_builds_no_stack(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"monitoring\.enabled is false"):
        Built({"monitoring": {"enabled": False}}, tmp_path)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gates_pass_without_findings(built: Any, variant: str) -> None:
    report = check_assembly(built(variant).outdir)
    assert [f.render() for f in report.findings if f.level != "info"] == []


def test_every_lint_exception_says_why(built: Any) -> None:
    for resource in built("remediation").json["Resources"].values():
        ignored = (
            resource.get("Metadata", {})
            .get("cfn-lint", {})
            .get("config", {})
            .get("ignore_checks", [])
        )
        reasons = resource.get("Metadata", {}).get("hyperpod-kit:cfn-lint", {})
        assert set(ignored) == set(reasons) and all(len(r) > 40 for r in reasons.values())


def test_the_stack_takes_the_cluster_constructs_handles_across_stacks(tmp_path: Path) -> None:
    """Wired as app.py will: `HyperPodCluster` in the cluster stack, monitoring in its own."""
    from hyperpod_kit.constructs.hyperpod_cluster import FileSystemHandles, HyperPodCluster
    from tests.unit.test_hyperpod_cluster import SG, SUBNET, Scripts

    config = EnvironmentConfig.model_validate(merge(default_data(), REMEDIATION))
    app = cdk.App(outdir=str(tmp_path), context=dict(FEATURE_FLAGS))
    env = cdk.Environment(region=config.region)
    cluster_stack = cdk.Stack(app, "hyperpod-dev-cluster", env=env)
    cluster = HyperPodCluster(
        cluster_stack,
        "HyperPod",
        config=config,
        subnet_id=SUBNET,
        security_group_ids=[SG],
        file_system=FileSystemHandles(
            dns_name=f"{FS_ID}.fsx.us-west-2.amazonaws.com", mount_name="abcdefgh"
        ),
        lifecycle=Scripts(cluster_stack),
    )
    monitoring = MonitoringStack(
        app,
        "hyperpod-dev-monitoring",
        config=config,
        cluster=cluster,
        file_system_id=FS_ID,
        env=env,
    )
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()
    assert cluster_stack in monitoring.dependencies
    template = Template.from_stack(monitoring).to_json()
    (log_filter, *_) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Logs::MetricFilter"
    ]
    assert (
        "Fn::Join" in log_filter["LogGroupName"]
    )  # /aws/sagemaker/Clusters/<name>/<id from the ARN>
    report = check_assembly(tmp_path)
    assert [
        f.render() for f in report.findings if f.level != "info" and "monitoring" in f.stack
    ] == []


def test_the_lifecycle_filter_matches_the_line_on_create_prints_when_it_fails() -> None:
    """`on_create.sh` logs `FAILED in <step>` through common.sh's `log` before failing a node."""
    import subprocess

    from hyperpod_kit.constructs.monitoring import LIFECYCLE_FAILED

    template = (REPO / "lifecycle" / "on_create.sh.j2").read_text()
    (call,) = [line.strip() for line in template.splitlines() if "FAILED in" in line]
    assert call.startswith('log "FAILED in $STEP')
    common = REPO / "lifecycle" / "lib" / "common.sh"
    done = subprocess.run(
        ["bash", "-c", f'source "{common}"; STEP=install rc=1; {call}'],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert LIFECYCLE_FAILED in done.stderr, done.stderr
