"""`status`: what an environment has deployed and whether it is healthy, as data.

Judged against what the environment file implies (`config.derived.expected_deployment`, from
the validated config alone: no synth): every stack of the environment, the cluster, every
instance group at the file's count, the file system, Studio and its partitions, the Slurm
accounting database, monitoring. What the file names and AWS lacks is "not deployed" with its
name; never healthy.

Found from CloudFormation (every stack tagged with the environment's name) and the discovery
parameters the stacks publish (`/hyperpod-kit/<env>/<area>`), never from guesses: the cluster,
its instance groups and nodes (SageMaker), node health (the health runner's newest verdicts in
the cluster's log group, and on EKS the node-health-status label: the API has no health field),
the file system and its data repository associations (FSx; free space from CloudWatch), the
Studio domain and the partitions gate (the nodes' reports under `/hyperpod-kit/<env>/partitions/`),
the environment's alarms in ALARM. When
something failed, the diagnosis (`hyperpod_kit.operations.diagnosis`) is attached.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
from hyperpod_kit.config.derived import ExpectedDeployment, expected_deployment
from hyperpod_kit.config.facts import eks_addons
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.naming import (
    HEALTH_LABEL,
    accounting_cluster_identifier,
    eks_cluster_name,
    parameter_name,
    stack_name,
    studio_domain_name,
)
from hyperpod_kit.operations import logs
from hyperpod_kit.operations.diagnosis import Diagnosis, Evidence, diagnose
from hyperpod_kit.operations.discovery import Deployed, discover

HEALTHY, IN_PROGRESS, DEGRADED, FAILED = "healthy", "in progress", "degraded", "failed"
# Something the file names that AWS does not have (a stack, the cluster, an instance group, the
# file system, Studio, the accounting database, monitoring): the deploy is not finished.
NOT_DEPLOYED = "not deployed"
EVENTS_SHOWN = 10
CLUSTER_BUSY = {"Creating", "Updating", "SystemUpdating", "Deleting", "RollingBack"}
# ClusterInstanceStatus values of a node on its way somewhere (botocore 1.44.8 added
# DetachInProgress and AttachInProgress: a node MoveClusterNodes moves between groups)
NODE_BUSY = {
    "Pending", "SystemUpdating", "DeepHealthCheckInProgress", "ShuttingDown",
    "DetachInProgress", "AttachInProgress",
}  # fmt: skip
IMAGE_STALE = {"SecurityUpdateRequired", "EndOfLife"}
FSX_BAD = {"FAILED", "MISCONFIGURED", "MISCONFIGURED_UNAVAILABLE"}
FSX_BUSY = {"CREATING", "UPDATING", "DELETING"}
FREE_SPACE_LOW = 0.10  # a file system with less free space than this share is degraded
# Aurora's DB cluster states (RDS DescribeDBClusters `Status`): the accounting database is
# healthy only when available; these are on their way, these failed; any other (stopped) degraded.
DB_BUSY = {
    "creating", "modifying", "backing-up", "upgrading", "maintenance", "renaming", "starting",
    "rebooting", "resetting-master-credentials", "migrating", "preparing-data-migration",
    "promoting", "stopping", "deleting", "storage-optimization", "configuring-iam-database-auth",
}  # fmt: skip
DB_FAILED = {
    "failed", "inaccessible-encryption-credentials",
    "inaccessible-encryption-credentials-recoverable", "incompatible-network",
    "incompatible-parameters", "incompatible-restore", "migration-failed",
}  # fmt: skip
# HyperPod's EKS label values that ask for a repair (facts-hyperpod.md §4)
LABEL_UNHEALTHY = {"UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
OPERATIONS_SHOWN = 5  # the cluster's newest operations (ListClusterOperations), each described
PLAN_WARN_DAYS = 7  # a training plan ending within this many days is a warning
PLAN_ENDED = {"Expired", "Failed"}  # TrainingPlanStatus values of a plan that gives no capacity
# Deadline severities. None changes `status`'s state or exit code: what an ended plan takes away
# shows as a group short of its nodes (degraded), judged on its own (docs/day2.md).
WARNING, ERROR, INFO = "warning", "error", "info"


class NothingDeployedError(Exception):
    """No stack and no discovery parameter of the environment in its account and region."""


@dataclass(frozen=True)
class StackEvent:
    time: str
    resource: str
    type: str
    status: str
    reason: str


@dataclass(frozen=True)
class StackState:
    name: str
    status: str
    reason: str
    events: list[StackEvent] = field(default_factory=list)


@dataclass(frozen=True)
class GroupState:
    name: str
    instance_type: str
    target: int
    current: int
    status: str
    training_plan_arn: str | None = None  # the group's reserved capacity (DescribeTrainingPlan)


@dataclass(frozen=True)
class NodeState:
    instance_id: str
    group: str
    instance_type: str
    status: str
    message: str
    health: logs.Health
    image_version_status: str | None


@dataclass(frozen=True)
class ClusterState:
    name: str
    status: str
    failure_message: str
    groups: list[GroupState]
    nodes: list[NodeState]
    log_group: str | None
    eks_labels: str | None = None  # EKS: where the health labels were read, or why they were not
    arn: str = ""  # DescribeCluster's ClusterArn (MoveClusterNodes names clusters by ARN)


@dataclass(frozen=True)
class AssociationState:
    file_system_path: str
    data_repository_path: str
    lifecycle: str
    failure: str


@dataclass(frozen=True)
class GroupScaling:
    """One instance group of a scaling operation: its counts before and as asked, and now."""

    group: str
    status: str
    original: dict[str, int]  # CurrentCount, TargetCount, MinCount when the operation started
    desired: dict[str, int]  # TargetCount, MinCount asked for
    now: int | None  # the group's CurrentCount now (DescribeCluster), None if it is gone


@dataclass(frozen=True)
class OperationState:
    """A cluster operation (ListClusterOperations, DescribeClusterOperation): Scaling or
    DeepHealthCheck. The API does not say who started it (CloudTrail does)."""

    id: str
    type: str
    status: str  # InProgress, Superseded, Done
    started: str
    scaling: list[GroupScaling] = field(default_factory=list)
    health_checks: list[str] = field(default_factory=list)  # "group: check, check (n nodes)"
    line: str = ""  # what the text shows


@dataclass(frozen=True)
class Deadline:
    """A date the cluster depends on: a training plan's end, an add-on version EKS no longer
    offers. `severity` is warning, error or info; none of them changes the exit code."""

    severity: str
    subject: str
    line: str


@dataclass(frozen=True)
class FileSystemState:
    id: str
    lifecycle: str
    capacity_gib: int | None
    free_gib: float | None
    failure: str
    associations: list[AssociationState]


@dataclass(frozen=True)
class StudioState:
    domain_id: str
    status: str
    failure: str
    partitions_ready: list[str]
    partitions_waiting: dict[str, str]  # person (or "_shared") -> why not ready


@dataclass(frozen=True)
class AccountingState:
    identifier: str
    status: str
    endpoint: str


@dataclass(frozen=True)
class AlarmState:
    name: str
    reason: str


@dataclass
class Status:
    environment: str
    region: str
    stacks: list[StackState] = field(default_factory=list)
    cluster: ClusterState | None = None
    file_system: FileSystemState | None = None
    studio: StudioState | None = None
    accounting: AccountingState | None = None
    alarms: list[AlarmState] = field(default_factory=list)
    expected: ExpectedDeployment | None = None  # what the file implies
    missing: list[str] = field(default_factory=list)  # of that, what AWS does not have
    problems: list[str] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    operations: list[OperationState] = field(default_factory=list)  # newest first
    operations_read: str = ""  # why the operations are not shown, when they are not
    deadlines: list[Deadline] = field(default_factory=list)
    state: str = HEALTHY

    @property
    def exit_code(self) -> int:
        return 0 if self.state == HEALTHY else 1

    @property
    def stable(self) -> bool:
        return self.state != IN_PROGRESS

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["diagnoses"] = [d.as_json() for d in self.diagnoses]
        return data


def _time(value: Any) -> str:
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value or "")


def collect(config: EnvironmentConfig, aws: AwsFacade, *, read_logs: bool = True) -> Status:
    """Everything `status` shows. Raises `NothingDeployedError` when nothing is deployed and
    `AwsUnavailableError` when the account cannot be asked."""
    deployed = discover(config.name, aws)
    if deployed.nothing:
        raise NothingDeployedError(config.name)
    expected = expected_deployment(config)
    status = Status(config.name, config.region, expected=expected)
    status.stacks = [_stack(aws, s) for s in deployed.stacks]
    status.stacks += [_stack(aws, s) for s in deployed.nested if _unsettled(s["StackStatus"])]
    status.cluster = cluster_state(aws, deployed, config, read_logs=read_logs)
    if status.cluster is not None and status.cluster.status != "NotFound":
        status.operations, status.operations_read = cluster_operations(aws, status.cluster)
        status.deadlines = training_plan_deadlines(aws, status.cluster)
        if config.orchestrator == "eks":
            status.deadlines += addon_deadlines(aws, deployed, config)
    status.file_system = _file_system(aws, deployed, expected.existing_file_system_id)
    status.studio = _studio(aws, deployed, config, expected.studio_partitions or ())
    if expected.accounting:
        status.accounting = _accounting(aws, config)
    status.alarms = [
        AlarmState(a["AlarmName"], a.get("StateReason", ""))
        for a in aws.pages("cloudwatch", "describe_alarms", "MetricAlarms",
                           AlarmNamePrefix=f"{config.name}-", StateValue="ALARM")
    ]  # fmt: skip
    status.missing = _missing(status, deployed, expected)
    _judge(status)
    if status.state in (FAILED, DEGRADED, NOT_DEPLOYED):  # what is there may still be failing
        status.diagnoses = diagnose(_evidence(aws, status, read_logs=read_logs))
    return status


def cluster_operations(aws: AwsFacade, c: ClusterState) -> tuple[list[OperationState], str]:
    """The cluster's newest operations, each described (its groups' counts, or its deep health
    checks), and "" ; or none and why they could not be read (a caller without
    sagemaker:ListClusterOperations still gets the rest of `status`)."""
    sagemaker = aws.client("sagemaker")
    try:
        found = aws.call("sagemaker:ListClusterOperations", sagemaker.list_cluster_operations,
                         ClusterName=c.name, SortBy="CreationTime", SortOrder="Descending",
                         MaxResults=OPERATIONS_SHOWN,
                         missing=("ResourceNotFound", "ValidationException"))  # fmt: skip
        rows = (found or {}).get("ClusterOperationSummaries", [])[:OPERATIONS_SHOWN]
        described = [
            aws.call("sagemaker:DescribeClusterOperation", sagemaker.describe_cluster_operation,
                     ClusterName=c.name, OperationId=row["OperationId"],
                     missing=("ResourceNotFound",)) or row
            for row in rows if row.get("OperationId")
        ]  # fmt: skip
    except AwsUnavailableError as e:
        return [], f"not read ({e})"
    now = {g.name: g.current for g in c.groups}
    return [_operation(o, now) for o in described], ""


def _counts(config: dict[str, Any] | None) -> dict[str, int]:
    names = {"CurrentCount": "current", "TargetCount": "target", "MinCount": "min"}
    return {names[k]: int(v) for k, v in (config or {}).items() if k in names and v is not None}


def _operation(o: dict[str, Any], now: dict[str, int]) -> OperationState:
    scaling = [
        GroupScaling(str(s.get("InstanceGroupName", "")), str(s.get("Status", "")),
                     _counts(s.get("Original")), _counts(s.get("Desired")),
                     now.get(str(s.get("InstanceGroupName", ""))))
        for s in o.get("ScalingDetails", [])
    ]  # fmt: skip
    checks = [
        f"{d.get('InstanceGroupName', '')}: {', '.join(d.get('DeepHealthChecks', []))}"
        + (f" ({len(d['InstanceIds'])} nodes)" if d.get("InstanceIds") else " (every node)")
        for d in o.get("DeepHealthCheckDetails", [])
    ]
    op = OperationState(str(o.get("OperationId", "")), str(o.get("Type", "")),
                        str(o.get("Status", "")), _time(o.get("CreationTime")), scaling,
                        checks)  # fmt: skip
    return replace(op, line=_operation_line(op))


def _operation_line(op: OperationState) -> str:
    """`Scaling InProgress since T (id): group train 2 -> 4 nodes (min 2 -> 2), 3 now,
    InProgress` (the target counts before and as asked; the group's count now)."""
    parts = []
    for s in op.scaling:
        before, after = s.original.get("target"), s.desired.get("target")
        counts = f"{before if before is not None else '?'} -> {after if after is not None else '?'}"
        mins = ""
        if "min" in s.original or "min" in s.desired:
            mins = f" (min {s.original.get('min', '?')} -> {s.desired.get('min', '?')})"
        at = f", {s.now} now" if s.now is not None else ", group gone"
        parts.append(f"group {s.group} {counts} nodes{mins}{at}, {s.status or '?'}")
    parts += [f"deep health checks {c}" for c in op.health_checks]
    since = "since" if op.status == "InProgress" else "started"
    done = sum(1 for s in op.scaling if s.status == "Done")
    progress = f", {done} of {len(op.scaling)} groups done" if len(op.scaling) > 1 else ""
    what = "; ".join(parts) or "no details"
    return f"{op.type} {op.status} {since} {op.started} ({op.id}){progress}: {what}"


def training_plan_deadlines(
    aws: AwsFacade, c: ClusterState, now: datetime.datetime | None = None
) -> list[Deadline]:
    """Each training plan the cluster's groups run on (DescribeCluster's TrainingPlanArn), as
    DescribeTrainingPlan has it: ended (Expired, Failed, or past its EndTime) an error; ending
    within PLAN_WARN_DAYS a warning; not started yet an info. A plan that cannot be read is
    a warning saying why."""
    now = now or datetime.datetime.now(datetime.UTC)
    plans: dict[str, list[str]] = {}
    for g in c.groups:
        if g.training_plan_arn:
            plans.setdefault(g.training_plan_arn, []).append(g.name)
    sagemaker = aws.client("sagemaker")
    out = []
    for arn, groups in plans.items():
        who = f"group{'s' if len(groups) > 1 else ''} {', '.join(groups)}"
        subject = f"training plan {arn.rsplit('/', 1)[-1]}"
        try:
            plan = aws.call("sagemaker:DescribeTrainingPlan", sagemaker.describe_training_plan,
                            TrainingPlanName=arn, missing=("ResourceNotFound",))  # fmt: skip
        except AwsUnavailableError as e:
            out.append(Deadline(WARNING, subject, f"{subject} ({who}): not read ({e})"))
            continue
        if plan is None:
            out.append(Deadline(ERROR, subject, f"{subject} ({who}): no such training plan "
                                "(ResourceNotFound). Hint: the group's TrainingPlanArn names a "
                                "plan this account cannot see."))  # fmt: skip
            continue
        out.append(_plan_deadline(plan, subject, who, now))
    return out


def _plan_deadline(
    plan: dict[str, Any], subject: str, who: str, now: datetime.datetime
) -> Deadline:
    status, end, start = plan.get("Status", ""), plan.get("EndTime"), plan.get("StartTime")
    subject = f"training plan {plan.get('TrainingPlanName') or subject.split(' ', 2)[-1]}"
    left = end - now if isinstance(end, datetime.datetime) else None
    if status in PLAN_ENDED or (left is not None and left <= datetime.timedelta(0)):
        return Deadline(ERROR, subject, f"{subject} ({who}) ended{_at(end)}: {status}; its "
                        "reserved capacity is gone, so the group runs no node on it. Hint: "
                        "buy a new plan (SearchTrainingPlanOfferings) and set the group's "
                        "training_plan_arn, or remove it to run on-demand.")  # fmt: skip
    if left is not None and left <= datetime.timedelta(days=PLAN_WARN_DAYS):
        return Deadline(WARNING, subject, f"{subject} ({who}) ends in {_span(left)}{_at(end)}: "
                        "the group's nodes on it stop then. Hint: extend it "
                        "(ExtendTrainingPlan) or checkpoint before.")  # fmt: skip
    if status in ("Pending", "Scheduled"):
        return Deadline(INFO, subject, f"{subject} ({who}) is {status}: it starts{_at(start)}")
    return Deadline(INFO, subject, f"{subject} ({who}) {status}, ends in "
                    f"{_span(left) if left is not None else 'unknown'}{_at(end)}")  # fmt: skip


def addon_deadlines(
    aws: AwsFacade, deployed: Deployed, config: EnvironmentConfig
) -> list[Deadline]:
    """Each add-on installed on the EKS cluster whose version EKS no longer offers for the
    cluster's Kubernetes version (eks:DescribeAddonVersions): a warning, since EKS may refuse to
    create or update it at that version and it is no longer patched. What cannot be read is
    one warning saying why."""
    name = deployed.handle("eks", "cluster_name") or eks_cluster_name(config)
    eks = aws.client("eks")
    subject = "EKS add-ons"
    try:
        found = aws.call("eks:DescribeCluster", eks.describe_cluster, name=name,
                         missing=("ResourceNotFoundException",))  # fmt: skip
        version = str(((found or {}).get("cluster") or {}).get("version") or "")
        if not version:
            return []
        out = []
        for addon in aws.pages("eks", "list_addons", "addons", clusterName=name):
            row = aws.call("eks:DescribeAddon", eks.describe_addon, clusterName=name,
                           addonName=addon, missing=("ResourceNotFoundException",))  # fmt: skip
            installed = str(((row or {}).get("addon") or {}).get("addonVersion") or "")
            if not installed:
                continue
            offered = aws.addon_versions(addon, version)
            if installed not in offered:
                newest = f"newest {offered[0]}" if offered else "no version at all"
                key = eks_addons()["addons"].get(addon, {}).get("key")
                where = f"cluster.eks.addons.{key}" if key else "cluster.eks.addons"
                out.append(Deadline(WARNING, f"add-on {addon}", f"add-on {addon} {installed} "
                                    f"on EKS cluster {name} is no longer offered for Kubernetes "
                                    f"{version} (EKS offers {newest}). Hint: set {where} to an "
                                    "offered version (or leave it out for the default) and "
                                    "deploy; `hyperpod-kit lock` records it."))  # fmt: skip
        return out
    except AwsUnavailableError as e:
        return [Deadline(WARNING, subject, f"{subject} of {name}: versions not read ({e})")]


def _at(when: Any) -> str:
    return f" at {_time(when)}" if when else ""


def _span(delta: datetime.timedelta) -> str:
    days, hours = delta.days, delta.seconds // 3600
    return f"{days} d {hours} h" if days else f"{hours} h {delta.seconds % 3600 // 60} min"


def _unsettled(stack_status: str) -> bool:
    return (
        stack_status.endswith("_IN_PROGRESS")
        or "FAILED" in stack_status
        or ("ROLLBACK" in stack_status)
    )


def _stack(aws: AwsFacade, row: dict[str, Any]) -> StackState:
    name, stack_status = row["StackName"], row["StackStatus"]
    events: list[StackEvent] = []
    if _unsettled(stack_status):
        raw = aws.pages("cloudformation", "describe_stack_events", "StackEvents", limit=200,
                        StackName=row.get("StackId", name))  # fmt: skip
        events = _latest_operation(name, raw)
    return StackState(name, stack_status, row.get("StackStatusReason", ""), events)


def _latest_operation(stack: str, raw: list[dict[str, Any]]) -> list[StackEvent]:
    """The events of the newest operation (newest first, as CloudFormation lists them, back to
    the stack's own *_IN_PROGRESS "User Initiated" event), the failing resource first: the
    oldest failure is the cause, the later ones ("Resource creation cancelled") its echo."""
    current: list[dict[str, Any]] = []
    for e in raw:
        current.append(e)
        if (e.get("ResourceType") == "AWS::CloudFormation::Stack"
                and e.get("LogicalResourceId") == stack
                and str(e.get("ResourceStatus", "")).endswith("_IN_PROGRESS")
                and e.get("ResourceStatusReason") == "User Initiated"):  # fmt: skip
            break
    failed = [e for e in current if str(e.get("ResourceStatus", "")).endswith("_FAILED")]
    failed.reverse()  # oldest failure first
    rest = [e for e in current if e not in failed]
    return [
        StackEvent(_time(e.get("Timestamp")), e.get("LogicalResourceId", ""),
                   e.get("ResourceType", ""), e.get("ResourceStatus", ""),
                   e.get("ResourceStatusReason", ""))
        for e in (failed + rest)[:EVENTS_SHOWN]
    ]  # fmt: skip


def cluster_state(
    aws: AwsFacade, deployed: Deployed, config: EnvironmentConfig, *, read_logs: bool = True
) -> ClusterState | None:
    """The cluster, its groups and nodes, each node's health (the runner's verdicts; on EKS
    with its label); None before the cluster stack published its name."""
    cluster = _cluster(aws, deployed, read_logs=read_logs)
    if cluster is not None and config.orchestrator == "eks":
        cluster = _with_eks_labels(aws, cluster, deployed, config)
    return cluster


def is_unhealthy(node: NodeState) -> bool:
    """A node HyperPod reports in Failure, or whose health (verdict or label) is unhealthy."""
    return node.status == "Failure" or node.health.value == "unhealthy"


def _cluster(aws: AwsFacade, deployed: Deployed, *, read_logs: bool) -> ClusterState | None:
    name = deployed.handle("cluster", "cluster_name")
    if not name:
        return None
    sagemaker = aws.client("sagemaker")
    found = aws.call("sagemaker:DescribeCluster", sagemaker.describe_cluster, ClusterName=name,
                     missing=("ResourceNotFound", "ValidationException"))  # fmt: skip
    if found is None:
        return ClusterState(name, "NotFound", "", [], [], logs.log_group(deployed))
    groups = [
        GroupState(g.get("InstanceGroupName", ""), _group_types(g),
                   int(g.get("TargetCount", 0)), int(g.get("CurrentCount", 0)),
                   g.get("Status", ""), g.get("TrainingPlanArn") or None)
        for g in found.get("InstanceGroups", [])
    ]  # fmt: skip
    group = logs.log_group(deployed)
    nodes = []
    for n in aws.pages("sagemaker", "list_cluster_nodes", "ClusterNodeSummaries",
                       ClusterName=name):  # fmt: skip
        instance_status = n.get("InstanceStatus", {})
        health = logs.Health("unknown", logs.UNKNOWN, "the cluster's log group is not known yet")
        if group and read_logs:
            health = logs.health(aws, group, n["InstanceId"])
        nodes.append(
            NodeState(n["InstanceId"], n.get("InstanceGroupName", ""), n.get("InstanceType", ""),
                      instance_status.get("Status", ""), instance_status.get("Message", ""),
                      health, n.get("ImageVersionStatus"))
        )  # fmt: skip
    return ClusterState(name, found.get("ClusterStatus", ""), found.get("FailureMessage", ""),
                        groups, nodes, group, arn=str(found.get("ClusterArn", "")))  # fmt: skip


def _with_eks_labels(
    aws: AwsFacade, c: ClusterState, deployed: Deployed, config: EnvironmentConfig
) -> ClusterState:
    """The cluster with each node's health completed by its EKS label (`combine`); a label that
    cannot be read (no access entry for the caller, no route to the endpoint) leaves the
    verdicts as they are and says why."""
    eks = deployed.handle("eks", "cluster_name") or eks_cluster_name(config)
    try:
        answer = aws.kubernetes_get(eks, f"/api/v1/nodes?labelSelector={HEALTH_LABEL}")
    except AwsUnavailableError as e:
        return replace(c, eks_labels=f"not read ({e})")
    labels: dict[str, str] = {}
    for node in answer.get("items", []) if isinstance(answer, dict) else []:
        meta, spec = node.get("metadata", {}), node.get("spec", {})
        value = meta.get("labels", {}).get(HEALTH_LABEL)
        # the node's instance: an instance id in its name, provider id or labels
        where = " ".join([meta.get("name", ""), spec.get("providerID", ""),
                          *map(str, meta.get("labels", {}).values())])  # fmt: skip
        ids = logs.INSTANCE_ID.findall(where)
        if value and ids:
            labels[ids[0]] = str(value)
    nodes = [replace(n, health=combine(n.health, labels.get(n.instance_id))) for n in c.nodes]
    return replace(c, nodes=nodes, eks_labels=f"read from the EKS cluster {eks}")


def combine(verdict: logs.Health, label: str | None) -> logs.Health:
    """A node's health from the runner's verdict and its EKS label: an unhealthy verdict stands
    (it names the check); a label asking for a reboot or replacement makes the node unhealthy;
    without a verdict, the label decides (Schedulable: healthy; Unschedulable: deep health
    checks running, unknown)."""
    if label is None or verdict.value == "unhealthy":
        return verdict
    said = f"{HEALTH_LABEL}={label}"
    if label in LABEL_UNHEALTHY:
        return logs.Health("unhealthy", logs.EKS_LABEL, said, failed=(said,))
    if verdict.value == "unknown" and label == "Schedulable":
        return logs.Health("healthy", logs.EKS_LABEL, said)
    if verdict.value == "unknown":
        return logs.Health("unknown", logs.EKS_LABEL, f"{said}: deep health checks running")
    return verdict


def _file_system(
    aws: AwsFacade, deployed: Deployed, existing: str | None
) -> FileSystemState | None:
    """The storage stack's file system (its handle), else an existing one the file names."""
    fs_id = deployed.handle("storage", "file_system_id") or existing
    if not fs_id:
        return None
    fsx = aws.client("fsx")
    found = aws.call("fsx:DescribeFileSystems", fsx.describe_file_systems, FileSystemIds=[fs_id],
                     missing=("FileSystemNotFound",))  # fmt: skip
    rows = (found or {}).get("FileSystems", [])
    if not rows:
        return FileSystemState(fs_id, "NOT_FOUND", None, None, "", [])
    fs = rows[0]
    associations = [
        AssociationState(a.get("FileSystemPath", ""), a.get("DataRepositoryPath", ""),
                         a.get("Lifecycle", ""), a.get("FailureDetails", {}).get("Message", ""))
        for a in aws.pages("fsx", "describe_data_repository_associations", "Associations",
                           Filters=[{"Name": "file-system-id", "Values": [fs_id]}])
    ]  # fmt: skip
    return FileSystemState(fs_id, fs.get("Lifecycle", ""), fs.get("StorageCapacity"),
                           _free_gib(aws, fs_id), fs.get("FailureDetails", {}).get("Message", ""),
                           associations)  # fmt: skip


def _free_gib(aws: AwsFacade, fs_id: str) -> float | None:
    """FSx's FreeDataStorageCapacity (bytes, summed over the file system's servers), newest
    five-minute point of the last hour; None when CloudWatch has none yet."""
    now = datetime.datetime.now(datetime.UTC)
    cloudwatch = aws.client("cloudwatch")
    found = aws.call(
        "cloudwatch:GetMetricStatistics", cloudwatch.get_metric_statistics,
        Namespace="AWS/FSx", MetricName="FreeDataStorageCapacity",
        Dimensions=[{"Name": "FileSystemId", "Value": fs_id}],
        StartTime=now - datetime.timedelta(hours=1), EndTime=now, Period=300,
        Statistics=["Sum"],
    )  # fmt: skip
    points = sorted(found.get("Datapoints", []), key=lambda p: p["Timestamp"])
    return round(float(points[-1]["Sum"]) / 2**30, 1) if points else None


def _studio(
    aws: AwsFacade, deployed: Deployed, config: EnvironmentConfig, wanted: tuple[str, ...]
) -> StudioState | None:
    domain_id = deployed.handle("studio", "domain_id")
    if not domain_id:
        return None
    sagemaker = aws.client("sagemaker")
    found = aws.call("sagemaker:DescribeDomain", sagemaker.describe_domain, DomainId=domain_id,
                     missing=("ResourceNotFound",))  # fmt: skip
    status = (found or {}).get("Status", "NotFound")
    failure = (found or {}).get("FailureReason", "")
    prefix = parameter_name(config.name, "partitions")
    reports: dict[str, dict[str, Any]] = {}
    for p in aws.pages("ssm", "get_parameters_by_path", "Parameters", Path=prefix):
        try:
            value = json.loads(p["Value"])
        except ValueError:
            value = {}
        reports[p["Name"].rsplit("/", 1)[-1]] = value if isinstance(value, dict) else {}
    ready, waiting = [], {}
    for name in wanted:
        report = reports.get(name)
        if report is None:
            waiting[name] = f"no report at {prefix}/{name} from the nodes' user sync"
        elif report.get("ready") is True:
            ready.append(name)
        else:
            waiting[name] = f"reported not ready: {json.dumps(report, sort_keys=True)}"
    return StudioState(domain_id, status, failure, ready, waiting)


def _accounting(aws: AwsFacade, config: EnvironmentConfig) -> AccountingState | None:
    """The Slurm accounting database (its Aurora cluster, by the identifier the accounting stack
    gives it), or None when RDS has none."""
    identifier = accounting_cluster_identifier(config.name)
    rds = aws.client("rds")
    found = aws.call(
        "rds:DescribeDBClusters", rds.describe_db_clusters, DBClusterIdentifier=identifier,
        missing=("DBClusterNotFoundFault",),
    )  # fmt: skip
    rows = (found or {}).get("DBClusters", [])
    if not rows:
        return None
    return AccountingState(identifier, str(rows[0].get("Status", "")),
                           str(rows[0].get("Endpoint", "")))  # fmt: skip


def _missing(status: Status, deployed: Deployed, expected: ExpectedDeployment) -> list[str]:
    """What the file implies and AWS does not have, each with its name."""
    env = status.environment
    found = {s["StackName"] for s in deployed.stacks}
    missing = [
        f"stack {stack_name(env, area)}"
        for area in expected.areas
        if stack_name(env, area) not in found
    ]
    c = status.cluster
    if c is None:
        missing.append(f"cluster {expected.cluster_name} (no {parameter_name(env, 'cluster')})")
    elif c.name != expected.cluster_name:
        missing.append(f"cluster {expected.cluster_name} (the cluster stack has {c.name})")
    elif c.status != "NotFound":  # a cluster that is gone is failed, not short of groups
        groups = {g.name for g in c.groups}
        missing += [
            f"instance group {name} of cluster {c.name} ({count} nodes in the file)"
            for name, count in expected.groups
            if name not in groups
        ]
    if status.file_system is None:
        missing.append(f"file system (no file_system_id in {parameter_name(env, 'storage')})")
    if expected.studio_partitions is not None and status.studio is None:
        missing.append(f"Studio domain {studio_domain_name(env)} and its partitions "
                       f"(no {parameter_name(env, 'studio')})")  # fmt: skip
    if expected.accounting and status.accounting is None:
        missing.append(f"accounting database {accounting_cluster_identifier(env)}")
    if expected.monitoring and "monitoring" not in deployed.handles:
        missing.append(f"monitoring (no {parameter_name(env, 'monitoring')})")
    return missing


@dataclass
class _Verdicts:
    failed: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)


def _judge(status: Status) -> None:
    v = _Verdicts()
    for s in status.stacks:
        if s.status.endswith("_IN_PROGRESS"):
            v.busy.append(f"stack {s.name}: {s.status}")
        elif "FAILED" in s.status or "ROLLBACK" in s.status:
            v.failed.append(f"stack {s.name}: {s.status}")
    if status.cluster is not None:
        wanted = dict(status.expected.groups) if status.expected is not None else {}
        _judge_cluster(status.cluster, wanted, v)
    if status.file_system is not None:
        _judge_file_system(status.file_system, v)
    st = status.studio
    if st is not None:
        if st.status in ("Failed", "Delete_Failed", "Update_Failed", "NotFound"):
            v.failed.append(f"Studio domain {st.domain_id}: {st.status}")
        elif st.status in ("Pending", "Updating", "Deleting"):
            v.busy.append(f"Studio domain {st.domain_id}: {st.status}")
        v.degraded += [f"partition of {name}: {why}" for name, why in st.partitions_waiting.items()]
    db = status.accounting
    if db is not None:
        what = f"accounting database {db.identifier}: {db.status}"
        if db.status in DB_FAILED:
            v.failed.append(what)
        elif db.status in DB_BUSY:
            v.busy.append(what)
        elif db.status != "available":
            v.degraded.append(what)
    v.degraded += [f"alarm {a.name}" for a in status.alarms]
    missing = [f"not deployed: {m}" for m in status.missing]
    status.problems = v.failed + v.busy + missing + v.degraded
    status.state = (
        FAILED if v.failed
        else IN_PROGRESS if v.busy
        else NOT_DEPLOYED if missing
        else DEGRADED if v.degraded
        else HEALTHY
    )  # fmt: skip


def _judge_cluster(c: ClusterState, wanted: dict[str, int], v: _Verdicts) -> None:
    """The cluster's and its nodes' states; each group at the file's count (`wanted`; a group
    the file does not name, at its own target)."""
    if c.status in ("Failed", "NotFound"):
        v.failed.append(f"cluster {c.name}: {c.status}")
    elif c.status in CLUSTER_BUSY:
        v.busy.append(f"cluster {c.name}: {c.status}")
    for g in c.groups:
        if c.status in CLUSTER_BUSY:
            break  # counts move while the cluster is busy
        want = wanted.get(g.name)
        need = g.target if want is None else max(want, g.target)
        if g.current < need:
            v.degraded.append(f"group {g.name}: {g.current} of {need} nodes")
        if want is not None and g.target != want:
            v.degraded.append(f"group {g.name}: target {g.target} nodes in AWS, {want} in the "
                              "file (deploy the file)")  # fmt: skip
    for n in c.nodes:
        node = f"node {n.instance_id} ({n.group})"
        if n.status in ("Failure", "NotFound"):
            v.failed.append(f"{node}: {n.status}")
        elif n.status in NODE_BUSY:
            v.busy.append(f"{node}: {n.status}")
        if n.health.value == "unhealthy":
            v.degraded.append(f"{node}: unhealthy: {n.health.reason}")
        if n.image_version_status in IMAGE_STALE:
            v.degraded.append(f"{node}: image {n.image_version_status}")


def _judge_file_system(fs: FileSystemState, v: _Verdicts) -> None:
    if fs.lifecycle in FSX_BAD or fs.lifecycle == "NOT_FOUND":
        v.failed.append(f"file system {fs.id}: {fs.lifecycle}")
    elif fs.lifecycle in FSX_BUSY:
        v.busy.append(f"file system {fs.id}: {fs.lifecycle}")
    if (
        fs.capacity_gib
        and fs.free_gib is not None
        and (fs.free_gib < FREE_SPACE_LOW * fs.capacity_gib)
    ):
        v.degraded.append(f"file system {fs.id}: {fs.free_gib:g} GiB free of {fs.capacity_gib}")
    for a in fs.associations:
        if a.lifecycle in FSX_BAD:
            v.failed.append(f"association {a.file_system_path}: {a.lifecycle}")
        elif a.lifecycle in FSX_BUSY:
            v.busy.append(f"association {a.file_system_path}: {a.lifecycle}")


def _evidence(aws: AwsFacade, status: Status, *, read_logs: bool) -> list[Evidence]:
    """What the diagnosis reads: failure messages, failed stack events, the unhealthy nodes'
    verdicts, the failing nodes' logs."""
    c = status.cluster
    lines, failing = _node_evidence(c) if c is not None else ([], [])
    for s in status.stacks:
        for e in s.events:
            if e.status.endswith("_FAILED") and e.reason:
                lines.append(Evidence("stack_event", e.reason, f"{s.name} {e.resource}"))
    if c is not None and c.log_group and read_logs and failing:
        streams = logs.select(logs.streams(aws, c.log_group), first=failing)
        for stream in streams:
            if stream.instance_id not in failing or stream.kind in ("jobs", "health"):
                continue
            for line in logs.tail(aws, c.log_group, stream.name):
                lines.append(Evidence("node_log", line, stream.name))
    return lines


def _node_evidence(c: ClusterState) -> tuple[list[Evidence], list[str]]:
    """The cluster's and its nodes' messages, each unhealthy node's verdict (naming the node,
    its time and each failed check), and the ids of the failing nodes."""
    lines: list[Evidence] = []
    if c.failure_message:
        lines.append(Evidence("failure_message", c.failure_message, f"cluster {c.name}"))
    failing: list[str] = []
    for n in c.nodes:
        if n.message:
            lines.append(Evidence("failure_message", n.message, n.instance_id))
        if is_unhealthy(n):
            failing.append(n.instance_id)
        if n.health.failed:  # the runner's checks with their time, or the EKS label
            text = "; ".join(n.health.failed)
            if n.health.source == logs.LOG_GROUP_VERDICT:
                text = f"health runner verdict at {n.health.time}: {text}"
            lines.append(Evidence("node_health", text, f"{n.instance_id} ({n.group})"))
    failing += logs.INSTANCE_ID.findall(c.failure_message)
    return lines, failing


def failing_nodes(aws: AwsFacade, deployed: Deployed) -> list[str]:
    """Instance ids of failed nodes: named in the cluster's FailureMessage, or in Failure."""
    name = deployed.handle("cluster", "cluster_name")
    if not name:
        return []
    sagemaker = aws.client("sagemaker")
    found = aws.call("sagemaker:DescribeCluster", sagemaker.describe_cluster, ClusterName=name,
                     missing=("ResourceNotFound", "ValidationException"))  # fmt: skip
    if found is None:
        return []
    ids = logs.INSTANCE_ID.findall(found.get("FailureMessage", ""))
    for n in aws.pages("sagemaker", "list_cluster_nodes", "ClusterNodeSummaries",
                       ClusterName=name):  # fmt: skip
        if n.get("InstanceStatus", {}).get("Status") == "Failure" and n["InstanceId"] not in ids:
            ids.append(n["InstanceId"])
    return ids


def _group_types(group: dict[str, Any]) -> str:
    """A group's instance type, or a flexible group's types in priority order (a|b)."""
    flexible = (group.get("InstanceRequirements") or {}).get("InstanceTypes") or []
    return str(group.get("InstanceType") or "|".join(flexible))
