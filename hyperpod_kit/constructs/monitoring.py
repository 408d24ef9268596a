"""`ClusterMonitoring`: how a HyperPod cluster's troubles reach people, and what repairs itself.

    HyperPod events (EventBridge) ─┐
    CloudWatch alarms ─────────────┼─► SNS topic (customer-managed KMS key) ─► e-mail, your topics
    remediation Lambda summaries ──┘
    node health events ─► SQS ─► remediation Lambda ─► BatchReboot/ReplaceClusterNodes
                                 (only with node_recovery: None and auto_repair: true)

The topic's key is customer managed because EventBridge and CloudWatch cannot publish to a topic
encrypted with `aws/sns`: its key policy grants `events.amazonaws.com` and
`cloudwatch.amazonaws.com`. Metric filters read the cluster's log group
`/aws/sagemaker/Clusters/<name>/<id>`, which HyperPod creates with the cluster; the node-side
runner's lines reach it through the nodes' log shipper (lifecycle/bin/hyperpod-kit-ship-logs), the
jobs' step lines only when someone ships the job output there (see docs/health.md).
What the node-side runner reads is `hyperpod_kit.health_settings.node_health_settings()`.
"""

from __future__ import annotations

import re
from typing import Protocol

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hyperpod_kit.config.derived import (
    continuous_provisioning,
    remediation_function,
    ships_job_events,
)
from hyperpod_kit.config.facts import hyperpod_events, limit
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.functions import (
    function_logs_and_role,
    outside_vpc,
    plain_variables,
    runs,
    skip_function_checks,
)
from hyperpod_kit.constructs.provenance import trace
from hyperpod_kit.constructs.security import lint_exception
from hyperpod_kit.naming import alarm_name, cluster_log_group_name
from hyperpod_kit.paths import FUNCTIONS_DIR

REMEDIATION_CODE = FUNCTIONS_DIR / "remediation"
SOURCE = "aws.sagemaker"
STATE_CHANGE = "SageMaker HyperPod Cluster State Change"
NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"
HEALTH_SOURCE = "hyperpod-kit-health"  # the node-side runner's "source" field
LIFECYCLE_FAILED = "hyperpod-kit lifecycle: FAILED in"  # lifecycle/on_create.sh.j2, on failure
# Metric name -> (trainer event, its JSON field, unit, statistic): the trainer's "step", "eval"
# and "checkpoint" lines (assets/trainer/hyperpod_trainer/metrics.py, checkpoint.py), as they
# reach the cluster's log group from the nodes' spool (Slurm jobs rendered by `hyperpod-kit jobs`).
TRAINING_METRICS: dict[str, tuple[str, str, cw.Unit, str]] = {
    "TrainingStep": ("step", "$.step", cw.Unit.COUNT, "Maximum"),
    "TrainingLoss": ("step", "$.loss", cw.Unit.NONE, "Average"),
    "TrainingTokensPerSecond": ("step", "$.tokens_per_s", cw.Unit.COUNT_PER_SECOND, "Average"),
    "TrainingStepSeconds": ("step", "$.step_time_s", cw.Unit.SECONDS, "Average"),
    "TrainingMFU": ("step", "$.mfu", cw.Unit.NONE, "Average"),
    "EvalLoss": ("eval", "$.loss", cw.Unit.NONE, "Average"),
    "EvalPerplexity": ("eval", "$.perplexity", cw.Unit.NONE, "Average"),
    "CheckpointSeconds": ("checkpoint", "$.seconds", cw.Unit.SECONDS, "Average"),
    "CheckpointBlockingSeconds": ("checkpoint", "$.blocking_seconds", cw.Unit.SECONDS, "Average"),
}
DEDUPE_SECONDS = 3600
WINDOW = Duration.minutes(15)


class MonitoredCluster(Protocol):
    """What monitoring needs of the cluster (`HyperPodCluster` has it)."""

    @property
    def cluster_arn(self) -> str: ...

    @property
    def cluster_name(self) -> str: ...

    @property
    def cluster_id(self) -> str: ...


def console_url(region: str, cluster_name: str) -> str:
    return (
        f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}"
        f"#/cluster-management/{cluster_name}"
    )


class AlertTopic(Construct):
    """The SNS topic every alert goes through, encrypted with a key EventBridge and CloudWatch
    may use, and its subscribers. Handles: ``topic``, ``key``, ``extra_topics`` (existing topics
    that get the same alerts)."""

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig) -> None:
        super().__init__(scope, id)
        account, region = Aws.ACCOUNT_ID, Aws.REGION
        self.key = kms.Key(
            self,
            "Key",
            description=f"hyperpod-kit {config.name}: alert topic and remediation queue",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        for service in ("events.amazonaws.com", "cloudwatch.amazonaws.com"):
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"Publish{service.split('.')[0].capitalize()}",
                    principals=[iam.ServicePrincipal(service)],
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=["*"],  # in a key policy, "*" is this key
                )
            )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"HyperPod {config.cluster_name}",
            master_key=self.key,
            enforce_ssl=True,
        )
        alarms = f"arn:{Aws.PARTITION}:cloudwatch:{region}:{account}:alarm:*"
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnLike": {"aws:SourceArn": alarms},
                    "StringEquals": {"aws:SourceAccount": account},
                },
            )
        )
        monitoring = config.monitoring
        for email in monitoring.emails:
            subscription = self.topic.add_subscription(subs.EmailSubscription(email))
            written = (
                "alarm_email"
                if email == monitoring.alarm_email
                else f"subscribers.emails[{monitoring.subscribers.emails.index(email)}]"
            )
            trace(subscription, monitoring, {"Endpoint": written})
        self.extra_topics: list[sns.ITopic] = [
            sns.Topic.from_topic_arn(self, f"Existing{i}", arn)
            for i, arn in enumerate(config.monitoring.subscribers.sns_topic_arns)
        ]

    @property
    def all_topics(self) -> list[sns.ITopic]:
        return [self.topic, *self.extra_topics]

    def notify(self, alarm: cw.Alarm) -> cw.Alarm:
        """Send the alarm, and its recovery, to every topic."""
        for topic in self.all_topics:
            alarm.add_alarm_action(cw_actions.SnsAction(topic))
            alarm.add_ok_action(cw_actions.SnsAction(topic))
        return alarm


def _field(path: str) -> str:
    return events.EventField.from_path(path)


def _message(row: hyperpod_events.EventRow, values: dict[str, str]) -> str:
    """The row's message lines: `{$.path}` a field of the event, `{name}` this environment's."""
    ours = re.compile(r"\{([a-z_]+)\}")
    values = {**values, "what_to_do": ours.sub(lambda m: values[m.group(1)], row.what_to_do or "")}
    lines = []
    for written in row.message:
        line = hyperpod_events.FIELD.sub(lambda m: _field(m.group(1)), written)
        lines.append(ours.sub(lambda m: values[m.group(1)], line))
    return "\n".join(lines)


class ClusterMonitoring(Construct):
    """Alerts, alarms and a dashboard for one HyperPod cluster and its file system.

    Handles: ``alerts`` (`AlertTopic`), ``rules`` (name -> `events.Rule`), ``alarms``,
    ``dashboard``, ``log_group_name``, ``namespace`` (of the custom metrics), ``remediation``
    (`RemediationFunction` or None).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        cluster: MonitoredCluster,
        file_system_id: str,
    ) -> None:
        super().__init__(scope, id)
        self.config = config
        self.region = Stack.of(self).region
        self.namespace = f"HyperPodKit/{config.name}"
        self.log_group_name = cluster_log_group_name(cluster.cluster_name, cluster.cluster_id)
        self.training_metrics = ships_job_events(config)
        self.alerts = AlertTopic(self, "Alerts", config=config)
        self.alarms: list[cw.Alarm] = []
        # With node_recovery: Automatic HyperPod performs the repairs its health events name;
        # a Lambda doing the same would only race it. It acts only where HyperPod will not.
        self.remediation: RemediationFunction | None = None
        if remediation_function(config):
            self.remediation = RemediationFunction(
                self, "Remediation", config=config, cluster=cluster, alerts=self.alerts
            )
        self.rules = self._event_rules(cluster)
        metrics = self._metric_filters()
        self._node_alarms(metrics)
        if self.training_metrics:
            self._training_alarms(metrics)
        fsx = self._fsx_alarms(file_system_id)
        if self.remediation is not None:
            self._remediation_alarms(self.remediation)
        self.dashboard = self._dashboard(metrics, fsx)

    # --- EventBridge ----------------------------------------------------------------------------

    def _doing(self) -> str:
        """What happens to an unhealthy node, in this environment's words."""
        if self.config.cluster.node_recovery == "Automatic":
            return "HyperPod repairs it itself (node_recovery: Automatic): RepairAction above."
        if self.config.monitoring.auto_repair:
            return (
                "HyperPod's automatic recovery is off (node_recovery: None); hyperpod-kit's "
                "remediation Lambda performs the RepairAction above and reports here."
            )
        return (
            # No angle brackets: EventBridge reads <name> in an input template as a variable.
            "Nobody repairs it automatically (node_recovery: None, auto_repair: false). "
            "To replace it: hyperpod-kit nodes FILE replace with the instance id above, or aws "
            f"sagemaker batch-replace-cluster-nodes --cluster-name {self.config.cluster_name} "
            "--node-ids and that id"
        )

    def _event_rules(self, cluster: MonitoredCluster) -> dict[str, events.Rule]:
        """One rule per row of `hyperpod_events.json` that applies here (its detail-type is sent
        for this cluster, its orchestrator is this one), filtered on this cluster's ARN and the
        row's own filter, each with the row's message to every topic."""
        values = {
            "console": console_url(self.region, self.config.cluster_name),
            "logs": f"Logs: CloudWatch log group {self.log_group_name}",
            "doing": self._doing(),
            "cluster": self.config.cluster_name,
        }
        continuous = continuous_provisioning(self.config)
        rules = {}
        for row in hyperpod_events.rows():
            # Cluster events are sent only with continuous provisioning: a rule elsewhere would
            # never match, and its empty graph and silent alarm inputs would only mislead.
            if not row.applies(continuous=continuous, orchestrator=self.config.orchestrator):
                continue
            rule = events.Rule(
                self,
                row.rule_id,
                description=f"HyperPod {row.detail_type} of {self.config.cluster_name}"
                + (f": {row.title}" if row.filter else ""),
                event_pattern=events.EventPattern(
                    source=[hyperpod_events.SOURCE],
                    detail_type=[row.detail_type],
                    detail=row.detail_pattern(cluster.cluster_arn),
                ),
            )
            message = events.RuleTargetInput.from_multiline_text(_message(row, values))
            for topic in self.alerts.all_topics:
                rule.add_target(targets.SnsTopic(topic, message=message))
            if row.detail_type == NODE_HEALTH and self.remediation is not None:
                rule.add_target(targets.SqsQueue(self.remediation.queue))
            # The stack may deploy to "the credentials' account" (no account in the file); the rule
            # and its targets are always in the same stack, so the environment cannot differ.
            Annotations.of(rule).acknowledge_warning(
                "@aws-cdk/aws-events:ruleUnresolvedEnvironment",
                "rule and targets share one stack",
            )
            rules[row.rule_id] = rule
        return rules

    # --- metrics from the cluster's log group ---------------------------------------------------

    def _metric_filters(self) -> dict[str, cw.Metric]:
        """Counts and values from log lines: lifecycle failures (the line `on_create.sh` prints
        before it fails a node: `<time> hyperpod-kit lifecycle: FAILED in <step> (exit N); ...`),
        node-check verdicts and repair requests (the runner's JSON lines), HyperPod's agent
        detections and, on Slurm, the trainer's events (rank 0's JSON lines, which the job
        writes to the node's spool and the node's shipper sends: `training_metrics`)."""
        group = logs.LogGroup.from_log_group_name(self, "ClusterLogGroup", self.log_group_name)
        health = f'($.source = "{HEALTH_SOURCE}")'
        # (metric, pattern, value, unit, statistic); a value of "1" counts lines
        count = ("1", cw.Unit.COUNT, "Sum")
        specs: list[tuple[str, str, str, cw.Unit, str]] = [
            ("LifecycleScriptFailures", f'"{LIFECYCLE_FAILED}"', *count),
            (
                "NodeCheckFailures",
                f'{{ {health} && ($.event = "verdict") && ($.status = "fail") }}',
                *count,
            ),
            (
                "NodeRepairRequests",
                f'{{ {health} && ($.event = "decision") && ($.executed IS TRUE) }}',
                *count,
            ),
            ("HealthAgentDetections", '"HealthMonitoringAgentDetectionEvent"', *count),
        ]
        if self.training_metrics:
            specs += [
                (name, f'{{ ($.event = "{event}") && ({field} = *) }}', field, unit, statistic)
                for name, (event, field, unit, statistic) in TRAINING_METRICS.items()
            ]
            specs.append(
                (
                    "TrainingNonFiniteStops",
                    '{ ($.event = "exit") && ($.reason = "non_finite") }',
                    *count,
                )
            )
        metrics: dict[str, cw.Metric] = {}
        for name, pattern, value, unit, statistic in specs:
            counts = value == "1"
            metric_filter = logs.MetricFilter(
                self,
                name,
                log_group=group,
                filter_pattern=logs.FilterPattern.literal(pattern),
                metric_namespace=self.namespace,
                metric_name=name,
                metric_value=value,
                default_value=0 if counts else None,
                unit=unit,
            )
            metrics[name] = metric_filter.metric(statistic=statistic, period=Duration.minutes(5))
        return metrics

    # --- alarms ---------------------------------------------------------------------------------

    def _alarm(
        self,
        id: str,
        *,
        name: str,
        metric: cw.IMetric,
        threshold: float,
        description: str,
        comparison: cw.ComparisonOperator = (
            cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        ),
        periods: int = 1,
    ) -> cw.Alarm:
        alarm = cw.Alarm(
            self,
            id,
            metric=metric,
            alarm_name=alarm_name(self.config.name, name),
            alarm_description=description[:1024],
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.alarms.append(self.alerts.notify(alarm))
        return alarm

    def _insights(self, where: str) -> str:
        return f"CloudWatch Logs Insights on {self.log_group_name}: {where}"

    def _log_alarm(
        self, id: str, metric: cw.Metric, name: str, why: str, *, query: str, threshold: float = 1
    ) -> cw.Alarm:
        """An alarm on a count of log lines (a metric filter's metric), saying what the lines
        mean and the Logs Insights query that finds them. `id`: pinned, it names the logical id
        of an alarm with a fixed name (a replacement would fail)."""
        return self._alarm(
            id,
            name=name,
            metric=metric.with_(period=WINDOW),
            threshold=threshold,
            description=why + " " + self._insights(query),
        )

    def _node_alarms(self, metrics: dict[str, cw.Metric]) -> None:
        limits = self.config.monitoring.alarms
        self._log_alarm(
            "LifecycleFailuresAlarm",
            metrics["LifecycleScriptFailures"],
            "lifecycle-script-failures",
            "A lifecycle script failed on a node; HyperPod fails or retries its provisioning.",
            query=f"fields @timestamp, @logStream, @message | filter @message like "
            f'"{LIFECYCLE_FAILED}" (streams LifecycleConfig/<group>/<instance-id>; the node '
            "keeps /var/log/hyperpod-kit/lifecycle.log)",
            threshold=limits.lifecycle_failures,
        )
        self._log_alarm(
            "NodeCheckFailuresAlarm",
            metrics["NodeCheckFailures"],
            "node-check-failures",
            "A hyperpod-kit node check failed on a node. gpu-count and gpu-errors only alert "
            "(HyperPod's agent acts on them); efa, fsx-mount and disk-space may have asked "
            "HyperPod for a repair (see the repair-requests alarm).",
            query=f'fields @timestamp, node, check, reason | filter source = "{HEALTH_SOURCE}" '
            'and status = "fail"',
        )
        self._log_alarm(
            "NodeRepairRequestsAlarm",
            metrics["NodeRepairRequests"],
            "node-repair-requests",
            "A node asked HyperPod to reboot or replace it (Slurm: state=fail "
            "reason=Action:Reboot|Action:Replace; EKS: the node-health-status label). Running "
            "jobs finish their step, then HyperPod's repair ends them; --requeue / auto-resume "
            "jobs restart from their last checkpoint.",
            query="fields @timestamp, node, action, check, why | filter source = "
            f'"{HEALTH_SOURCE}" and event = "decision" and executed = 1',
        )
        if self.config.orchestrator == "slurm":
            # HyperPod's agent writes its detections to the node's stream
            # SagemakerHealthMonitoringAgent/<group>/<instance-id> (JSON lines with
            # "HealthMonitoringAgentDetectionEvent": "HealthEvent", docs/health.md); on EKS a
            # cluster event carries them, on Slurm only this log does.
            self._log_alarm(
                "HealthAgentDetectionsAlarm",
                metrics["HealthAgentDetections"],
                "health-agent-detections",
                "HyperPod's health monitoring agent logged a detection on a node (a GPU, Xid, "
                "NVLink, EFA or Neuron fault). On Slurm no HyperPod cluster event carries it: "
                "this alarm is how it reaches the topic. HyperPod reboots or replaces the node "
                "as node_recovery says; the line names the reason.",
                query="fields @timestamp, @logStream, details.reason, details.message | filter "
                "@message like /HealthMonitoringAgentDetectionEvent/ (streams "
                "SagemakerHealthMonitoringAgent/<group>/<instance-id>)",
            )
        rule = self.rules["NodeHealth"]
        self._alarm(
            "NodeHealthEventsAlarm",
            name="node-health-events",
            metric=cw.Metric(
                namespace="AWS/Events",
                metric_name="MatchedEvents",
                dimensions_map={"RuleName": rule.rule_name},
                statistic="Sum",
                period=WINDOW,
            ),
            threshold=limits.node_health_events,
            description=f"{limits.node_health_events} or more HyperPod node health events "
            "within 15 minutes (each one is also sent on its own). Several nodes at once points "
            "at something they share: the file system, the network, a placement group, a bad "
            "AMI or lifecycle change.",
        )
        # An alarm on metric math reads at most 10 metrics (`limits.json`): with more rules
        # (continuous provisioning on Slurm), a second alarm reads the rest.
        most = limit("cloudwatch_alarm_math_metrics")
        rules = list(self.rules.values())
        for n, start in enumerate(range(0, len(rules), most)):
            failed = {
                f"f{i}": cw.Metric(
                    namespace="AWS/Events",
                    metric_name="FailedInvocations",
                    dimensions_map={"RuleName": r.rule_name},
                    statistic="Sum",
                    period=WINDOW,
                )
                for i, r in enumerate(rules[start : start + most], start)
            }
            self._alarm(
                "AlertDeliveryAlarm" + (str(n + 1) if n else ""),
                name="alert-delivery-failures" + (f"-{n + 1}" if n else ""),
                metric=cw.MathExpression(
                    expression=" + ".join(f"FILL({k}, 0)" for k in failed),
                    using_metrics=dict(failed),
                    label="FailedInvocations",
                    period=WINDOW,
                ),
                threshold=1,
                description="EventBridge could not deliver HyperPod events to a target (the "
                "alert topic, a subscribed topic or the remediation queue): alerts are being "
                "lost. Check the target's access policy and its KMS key policy "
                "(events.amazonaws.com needs kms:GenerateDataKey and kms:Decrypt).",
            )

    def _training_alarms(self, metrics: dict[str, cw.Metric]) -> None:
        self._log_alarm(
            "TrainingNonFiniteStopsAlarm",
            metrics["TrainingNonFiniteStops"],
            "training-non-finite-stops",
            "A training job stopped after too many non-finite steps in a row (exit code 3, "
            "train.max_nonfinite_steps); it saved nothing after them and its last good "
            "checkpoint is kept. A restart resumes from that checkpoint into the same divergence "
            "unless the data, learning rate or precision changes.",
            query='fields @timestamp, @logStream, step, nonfinite_total | filter event = "exit" '
            'and reason = "non_finite" (streams hyperpod-kit/jobs/<job-id>/<instance-id>)',
        )

    def _fsx_alarms(self, file_system_id: str) -> dict[str, cw.IMetric]:
        """Free capacity and client throughput of the file system. The capacity of an existing
        file system is unknown offline, so it gets the metrics but no percentage alarms."""
        dims = {"FileSystemId": file_system_id}

        def fsx(name: str, statistic: str, period: Duration) -> cw.Metric:
            return cw.Metric(
                namespace="AWS/FSx",
                metric_name=name,
                dimensions_map=dims,
                statistic=statistic,
                period=period,
            )

        minute, five = Duration.minutes(1), Duration.minutes(5)
        # FreeDataStorageCapacity: one datapoint per storage target per minute; Sum over one
        # minute is the file system's free bytes.
        free = fsx("FreeDataStorageCapacity", "Sum", minute)
        read, write = fsx("DataReadBytes", "Sum", five), fsx("DataWriteBytes", "Sum", five)
        out: dict[str, cw.IMetric] = {
            "free_gib": cw.MathExpression(
                expression=f"free / {2**30}",
                using_metrics={"free": free},
                label="free GiB",
                period=minute,
            ),
            "read_mbs": cw.MathExpression(
                expression="r / PERIOD(r) / 1000000", using_metrics={"r": read}, label="read MB/s"
            ),
            "write_mbs": cw.MathExpression(
                expression="w / PERIOD(w) / 1000000", using_metrics={"w": write}, label="write MB/s"
            ),
            "metadata_ops": fsx("MetadataOperations", "Sum", five),
            "clients": fsx("ClientConnections", "Maximum", five),
        }
        lustre = self.config.storage.lustre
        if lustre.existing is not None:
            return out
        limits = self.config.monitoring.alarms
        capacity = lustre.storage_capacity_gib * 2**30
        self._alarm(
            "FsxFreeCapacityAlarm",
            name="fsx-free-capacity",
            metric=cw.MathExpression(
                expression=f"100 * free / {capacity}",
                using_metrics={"free": free},
                label="free capacity %",
                period=minute,
            ),
            threshold=limits.fsx_free_capacity_percent,
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            periods=5,
            description=f"The file system {file_system_id} has less than "
            f"{limits.fsx_free_capacity_percent}% of its {lustre.storage_capacity_gib} GiB "
            "free. A full Lustre fails checkpoint writes. Delete or archive data (released "
            "files stay in S3 through the data repository association), or raise "
            "storage.lustre.storage_capacity_gib (an online update).",
        )
        # Aggregate throughput: capacity in TiB as FSx counts it (1200 GiB = 1.2 TiB) times the
        # tier in MB/s per TiB; MB = 10^6 bytes.
        baseline = lustre.storage_capacity_gib / 1000 * lustre.throughput_per_unit_storage * 1e6
        self._alarm(
            "FsxThroughputAlarm",
            name="fsx-throughput",
            metric=cw.MathExpression(
                expression=f"100 * (r + w) / PERIOD(r) / {baseline:.0f}",
                using_metrics={"r": read, "w": write},
                label="client throughput % of provisioned",
                period=five,
            ),
            threshold=limits.fsx_throughput_percent,
            periods=3,
            description=f"Client throughput on {file_system_id} stayed above "
            f"{limits.fsx_throughput_percent}% of its provisioned "
            f"{baseline / 1e6:,.0f} MB/s for 15 minutes: jobs are waiting on the file system "
            "(data loading or checkpoints). Raise storage.lustre.throughput_per_unit_storage "
            "or the capacity, or spread checkpoint writes.",
        )
        return out

    def _remediation_alarms(self, remediation: RemediationFunction) -> None:
        self._alarm(
            "RemediationErrorsAlarm",
            name="remediation-errors",
            metric=remediation.function.metric_errors(period=WINDOW, statistic="Sum"),
            threshold=1,
            description="The remediation Lambda failed; unhealthy nodes HyperPod will not "
            "repair (node_recovery: None) may be waiting. Its log group has the details.",
        )
        self._alarm(
            "RemediationDeadLettersAlarm",
            name="remediation-dead-letters",
            metric=remediation.dead_letters.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"
            ),
            threshold=1,
            description="Node health events the remediation Lambda could not handle after "
            "five tries are in its dead-letter queue: repair those nodes by hand (aws "
            "sagemaker batch-replace-cluster-nodes), then purge the queue.",
        )

    # --- dashboard ------------------------------------------------------------------------------

    def _dashboard(
        self,
        metrics: dict[str, cw.Metric],
        fsx: dict[str, cw.IMetric],
    ) -> cw.Dashboard:
        config = self.config
        dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{config.name}-hyperpod",
            default_interval=Duration.hours(6),
        )
        intro = "\n".join(
            [
                f"# HyperPod {config.cluster_name}",
                f"[Cluster console]({console_url(self.region, config.cluster_name)}) · "
                f"log group `{self.log_group_name}` · alerts: SNS topic of this stack",
                "Node checks come from the health lines each node's hyperpod-kit-ship-logs "
                "timer sends to that log group"
                + (
                    ", training graphs from the trainer's events that Slurm jobs rendered by "
                    "`hyperpod-kit jobs` leave in the node's spool (docs/health.md)."
                    if self.training_metrics
                    else ". Training metrics are not here: on EKS the trainer's output stays "
                    "with the cluster's log collection (docs/health.md)."
                ),
            ]
        )
        dashboard.add_widgets(
            cw.TextWidget(markdown=intro, width=12, height=4),
            cw.AlarmStatusWidget(alarms=list(self.alarms), title="Alarms", width=12, height=4),
        )
        matched = [
            cw.Metric(
                namespace="AWS/Events",
                metric_name="MatchedEvents",
                dimensions_map={"RuleName": rule.rule_name},
                statistic="Sum",
                period=Duration.minutes(5),
                label=name,
            )
            for name, rule in self.rules.items()
        ]
        dashboard.add_widgets(
            cw.GraphWidget(title="HyperPod events", left=matched, width=8),
            cw.GraphWidget(
                title="Node checks",
                left=[
                    metrics["NodeCheckFailures"].with_(label="failing checks"),
                    metrics["NodeRepairRequests"].with_(label="repair requests"),
                    metrics["HealthAgentDetections"].with_(label="HyperPod agent detections"),
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="Lifecycle script failures",
                left=[metrics["LifecycleScriptFailures"]],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(title="FSx free capacity (GiB)", left=[fsx["free_gib"]], width=8),
            cw.GraphWidget(
                title="FSx client throughput (MB/s)",
                left=[fsx["read_mbs"], fsx["write_mbs"]],
                stacked=True,
                width=8,
            ),
            cw.GraphWidget(
                title="FSx metadata operations and clients",
                left=[fsx["metadata_ops"]],
                right=[fsx["clients"]],
                width=8,
            ),
        )
        if self.training_metrics:
            dashboard.add_widgets(*self._training_widgets(metrics))
        dashboard.add_widgets(
            cw.LogQueryWidget(
                title="Node checks that failed, and repair requests",
                log_group_names=[self.log_group_name],
                query_lines=[
                    "fields @timestamp, node, event, check, status, action, reason, why",
                    f'filter source = "{HEALTH_SOURCE}" and (status = "fail" or '
                    '(event = "decision" and action != "none"))',
                    "sort @timestamp desc",
                    "limit 50",
                ],
                width=24,
                height=6,
            )
        )
        return dashboard

    def _training_widgets(self, metrics: dict[str, cw.Metric]) -> list[cw.IWidget]:
        def m(name: str, label: str) -> cw.Metric:
            return metrics[name].with_(label=label, period=Duration.minutes(1))

        return [
            cw.GraphWidget(
                title="Training: loss, held-out loss and step",
                left=[m("TrainingLoss", "loss"), m("EvalLoss", "held-out loss")],
                right=[m("TrainingStep", "step")],
                width=8,
            ),
            cw.GraphWidget(
                title="Training: throughput",
                left=[m("TrainingTokensPerSecond", "tokens/s")],
                right=[m("TrainingMFU", "MFU")],
                width=8,
            ),
            cw.GraphWidget(
                title="Training: step and checkpoint time (s)",
                left=[
                    m("TrainingStepSeconds", "step"),
                    m("CheckpointBlockingSeconds", "checkpoint, training blocked"),
                ],
                right=[m("CheckpointSeconds", "checkpoint, whole save")],
                width=8,
            ),
        ]


class RemediationFunction(Construct):
    """Node health events → SQS (batched, with a dead-letter queue) → a plain boto3 Lambda that
    calls BatchRebootClusterNodes / BatchReplaceClusterNodes, 25 nodes a call, at most once per
    node and action within an hour (claims in a DynamoDB table with a TTL).

    Handles: ``function``, ``queue``, ``dead_letters``, ``table``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        cluster: MonitoredCluster,
        alerts: AlertTopic,
    ) -> None:
        super().__init__(scope, id)
        key = alerts.key
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        timeout = Duration.seconds(60)
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(timeout.to_seconds() * 6),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=5, queue=self.dead_letters),
        )
        self.table = dynamodb.Table(
            self,
            "Claims",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expires_at",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,  # claims expire within an hour anyway
        )
        log_group, role = function_logs_and_role(
            self, role_id="Role", description=f"hyperpod-kit {config.name}: remediation Lambda"
        )
        # A policy of its own, so that the lint exception below covers these two actions only.
        repair = iam.Policy(
            self,
            "RepairPolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    sid="RepairClusterNodes",
                    actions=[
                        "sagemaker:BatchRebootClusterNodes",
                        "sagemaker:BatchReplaceClusterNodes",
                    ],
                    resources=[cluster.cluster_arn],
                )
            ],
        )
        lint_exception(
            repair,
            "W3037",
            "BatchRebootClusterNodes and BatchReplaceClusterNodes (SageMaker API since "
            "2025-11, botocore 1.41.1) are newer than cfn-lint's IAM action list",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ClaimNodes",
                actions=["dynamodb:PutItem", "dynamodb:DeleteItem"],
                resources=[self.table.table_arn],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="Report", actions=["sns:Publish"], resources=[alerts.topic.topic_arn]
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="EncryptedTopicAndQueue",
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=[key.key_arn],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description=f"hyperpod-kit {config.name}: reboot or replace nodes HyperPod reports "
            "unhealthy, when its own recovery is off",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="remediation_handler.handler",
            code=lambda_.Code.from_asset(
                str(REMEDIATION_CODE), exclude=["__pycache__", "*.pyc", "README*"]
            ),
            role=role,
            timeout=timeout,
            memory_size=256,
            log_group=log_group,
            environment={
                "CLUSTER_ARN": cluster.cluster_arn,
                "CLUSTER_NAME": config.cluster_name,
                "CLAIMS_TABLE": self.table.table_name,
                "TOPIC_ARN": alerts.topic.topic_arn,
                "DEDUPE_SECONDS": str(DEDUPE_SECONDS),
            },
        )
        lint_exception(
            self.function,
            "W3005",
            "CDK makes every function depend on its role (and the role's policies); the role "
            "is also referenced by GetAtt",
        )
        self.function.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=100,
                max_batching_window=Duration.seconds(30),
                report_batch_item_failures=True,
                max_concurrency=2,
            )
        )
        skip_function_checks(
            self.function,
            concurrency=runs(
                "its SQS event source caps it at 2 concurrent invocations (MaximumConcurrency), "
                "which limits it without reserving anything"
            ),
            dead_letter="fed by an SQS event source, which invokes it synchronously: a Lambda "
            "dead-letter queue would never receive anything; the queue's own redrive queue "
            "(DeadLetters, after 5 receives) holds what it could not handle, and an alarm "
            "watches it",
            vpc=outside_vpc("it calls only the SageMaker, DynamoDB and SNS APIs, with IAM"),
            variables=plain_variables(
                "its variables are the cluster's ARN and name, the claims table's name, the alert "
                "topic's ARN and a number of seconds"
            ),
        )
