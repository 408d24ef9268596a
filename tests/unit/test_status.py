"""`status`'s collection and judgement, the diagnosis table, and the facade's pagination, with
botocore's Stubber (responses checked against the API models) for what moto cannot produce: a
failed creation, a degraded node, image version status, the DRA's state, Studio's partitions."""

from __future__ import annotations

import base64
import datetime
import functools
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.derived import environment_areas
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.naming import ENVIRONMENT_TAG, LOG_STREAMS, parameter_name, stack_name
from hyperpod_kit.operations import logs
from hyperpod_kit.operations import status as status_module
from hyperpod_kit.operations.diagnosis import Evidence, diagnose, render_markdown, signatures
from hyperpod_kit.operations.discovery import PUBLISHED, Deployed
from hyperpod_kit.operations.status import DEGRADED, FAILED, ClusterState, NodeState, collect
from tests.conftest import REPO, run_command

T0 = datetime.datetime(2026, 11, 25, 1, 0, tzinfo=datetime.UTC)
NODE = "i-0b66516c4a8bfcea4"
OTHER = "i-0a1b2c3d4e5f60718"
GENERIC = (
    f'Instance {NODE} failed to provision with the following error: "Lifecycle scripts did not '
    "run successfully. Ensure the scripts exist in provided S3 path, are accessible, and run "
    'without errors. Please see CloudWatch logs for lifecycle script execution details." Note '
    "that multiple instances may be impacted."
)  # awslabs/awsome-distributed-ai#632, verbatim


class Stubs:
    """One Stubber per service on the facade's own clients; each call answered in order."""

    def __init__(self, facade: AwsFacade) -> None:
        session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x",
                                region_name="us-west-2")  # fmt: skip
        self.facade = AwsFacade("us-west-2", session=session)
        self.stubbers: dict[str, Stubber] = {}

    def on(self, service: str, operation: str, response: dict[str, Any] | str) -> Stubs:
        if service not in self.stubbers:
            self.stubbers[service] = Stubber(self.facade.client(service))
            self.stubbers[service].activate()
        if isinstance(response, str):
            self.stubbers[service].add_client_error(operation, service_error_code=response)
        else:
            self.stubbers[service].add_response(operation, response)
        return self

    def done(self) -> None:
        for stub in self.stubbers.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    s = Stubs(AwsFacade("us-west-2"))
    yield s
    s.done()


def stack(name: str, status: str, environment: str) -> dict[str, Any]:
    return {"StackName": name, "StackId": f"arn:aws:cloudformation:us-west-2:1:stack/{name}/x",
            "StackStatus": status, "CreationTime": T0,
            "Tags": [{"Key": ENVIRONMENT_TAG, "Value": environment}]}  # fmt: skip


def event(stack_name: str, resource: str, kind: str, status: str, minute: int, *,
          reason: str = "") -> dict[str, Any]:  # fmt: skip
    row = {"StackId": "x", "EventId": f"{resource}-{minute}", "StackName": stack_name,
           "LogicalResourceId": resource, "ResourceType": kind, "ResourceStatus": status,
           "Timestamp": T0 + datetime.timedelta(minutes=minute)}  # fmt: skip
    if reason:
        row["ResourceStatusReason"] = reason
    return row


def parameters(stubs: Stubs, environment: str, handles: dict[str, dict[str, str]]) -> None:
    for area in PUBLISHED:
        if area in handles:
            value = json.dumps(handles[area])
            name = parameter_name(environment, area)
            stubs.on("ssm", "get_parameter",
                     {"Parameter": {"Name": name, "Type": "String", "Value": value}})  # fmt: skip
        else:
            stubs.on("ssm", "get_parameter", "ParameterNotFound")


def log_events(*lines: str) -> dict[str, Any]:
    t = 1_700_000_000_000
    return {"events": [{"timestamp": t + i, "message": line, "ingestionTime": t}
                       for i, line in enumerate(lines)]}  # fmt: skip


def verdict(node: str, status: str, check: str = "efa") -> str:
    return json.dumps({"time": "2026-11-25T01:00:00Z", "event": "verdict", "instance_id": node,
                       "check": check, "status": status,
                       "reason": "3 of 4 EFA devices" if status == "fail" else "ok"})  # fmt: skip


CLUSTER = {"cluster_name": "hyperpod-dev", "cluster_id": "abc123def456",
           "cluster_arn": "arn:aws:sagemaker:us-west-2:1:cluster/abc123def456"}  # fmt: skip
MONITORING = {"topic_arn": "arn:aws:sns:us-west-2:1:alerts", "dashboard_name": "d",
              "metrics_namespace": "HyperPodKit/x"}  # fmt: skip


def cluster_handle(config: Any) -> dict[str, str]:
    return CLUSTER | {"cluster_name": config.cluster_name}


def no_operations(stubs: Stubs) -> None:
    """ListClusterOperations with none (status asks for the newest after the nodes)."""
    stubs.on("sagemaker", "list_cluster_operations", {"ClusterOperationSummaries": []})


def every_stack(stubs: Stubs, config: Any, *, leave_out: tuple[str, ...] = ()) -> None:
    """DescribeStacks with every stack the file implies, complete (but those left out)."""
    stubs.on("cloudformation", "describe_stacks", {"Stacks": [
        stack(stack_name(config.name, a), "CREATE_COMPLETE", config.name)
        for a in environment_areas(config) if a not in leave_out]})  # fmt: skip


def described_cluster(
    config: Any, *, counts: dict[str, tuple[int, int]] | None = None, status: str = "InService"
) -> dict[str, Any]:
    """DescribeCluster of the file's cluster: each group at the file's count, or at `counts`
    (group -> (target, current); a group absent from `counts` when given is left out)."""
    groups = [(g.name, g.primary_type, g.instance_count, g.instance_count)
              for g in config.cluster.instance_groups]  # fmt: skip
    if counts is not None:
        groups = [(n, t, *counts[n]) for n, t, _, _ in groups if n in counts]
    return {"ClusterArn": CLUSTER["cluster_arn"], "ClusterName": config.cluster_name,
            "ClusterStatus": status, "InstanceGroups": [
                {"InstanceGroupName": n, "InstanceType": t, "TargetCount": target,
                 "CurrentCount": current, "Status": "InService"}
                for n, t, target, current in groups]}  # fmt: skip


def test_a_failed_creation_is_diagnosed_from_the_failing_nodes_log(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "default.yaml").config
    env = config.name
    stubs.on("cloudformation", "describe_stacks", {"Stacks": [
        stack(f"{env}-network", "CREATE_COMPLETE", env),
        stack(f"{env}-cluster", "ROLLBACK_COMPLETE", env),
        stack("someone-else-network", "CREATE_FAILED", "someone-else"),
    ]})  # fmt: skip
    cluster_stack, cfn = f"{env}-cluster", "AWS::CloudFormation::Stack"
    stubs.on("cloudformation", "describe_stack_events", {"StackEvents": [  # newest first
        event(cluster_stack, cluster_stack, cfn, "ROLLBACK_COMPLETE", 9),
        event(cluster_stack, "Topic", "AWS::SNS::Topic", "CREATE_FAILED", 6,
              reason="Resource creation cancelled"),
        event(cluster_stack, "Cluster", "AWS::SageMaker::Cluster", "CREATE_FAILED", 5,
              reason=f"Resource handler returned message: \"{GENERIC}\""),
        event(cluster_stack, "Cluster", "AWS::SageMaker::Cluster", "CREATE_IN_PROGRESS", 2),
        event(cluster_stack, cluster_stack, cfn, "CREATE_IN_PROGRESS", 1, reason="User Initiated"),
        event(cluster_stack, "Old", "AWS::SNS::Topic", "DELETE_FAILED", 0, reason="earlier"),
    ]})  # fmt: skip
    parameters(stubs, env, {"cluster": CLUSTER})
    stubs.on("sagemaker", "describe_cluster", {
        "ClusterArn": CLUSTER["cluster_arn"], "ClusterName": CLUSTER["cluster_name"],
        "ClusterStatus": "Failed", "FailureMessage": GENERIC, "InstanceGroups": [
            {"InstanceGroupName": "compute", "InstanceType": "ml.g5.8xlarge", "TargetCount": 2,
             "CurrentCount": 0, "Status": "Failed"}]})  # fmt: skip
    stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": [
        {"InstanceGroupName": "compute", "InstanceId": NODE, "InstanceType": "ml.g5.8xlarge",
         "LaunchTime": T0, "InstanceStatus": {"Status": "Failure", "Message": "Lifecycle "
                                              "scripts did not run successfully."}}]})  # fmt: skip
    no_operations(stubs)  # ListClusterOperations: none yet
    group = "/aws/sagemaker/Clusters/hyperpod-dev/abc123def456"
    stubs.on("logs", "get_log_events", log_events())  # the runner never ran on it
    stubs.on("logs", "describe_log_streams", {"logStreams": [
        {"logStreamName": f"LifecycleConfig/compute/{NODE}"},
        {"logStreamName": f"hyperpod-kit/health/{NODE}"},
        {"logStreamName": f"LifecycleConfig/compute/{OTHER}"},
    ]})  # fmt: skip
    stubs.on("logs", "get_log_events", log_events(
        "2026-11-25T01:01:00Z hyperpod-kit lifecycle: step: 30-fsx",
        "mkdir: cannot create directory '/fsx/ubuntu': Read-only file system",
        "2026-11-25T01:01:02Z hyperpod-kit lifecycle: FAILED in 30-fsx (exit 1); node log: "
        "/var/log/hyperpod-kit/lifecycle.log",
    ))  # fmt: skip
    stubs.on("cloudwatch", "describe_alarms", {"MetricAlarms": []})

    status = collect(config, stubs.facade)

    assert status.state == FAILED and status.exit_code == 1
    assert [s.name for s in status.stacks] == [f"{env}-network", f"{env}-cluster"]
    events = status.stacks[1].events
    assert events[0].resource == "Cluster" and events[0].status == "CREATE_FAILED"  # cause first
    assert "Old" not in [e.resource for e in events]  # only the newest operation
    assert status.cluster is not None and status.cluster.log_group == group
    assert f"node {NODE} (compute): Failure" in status.problems
    causes = [d.signature.id for d in status.diagnoses]
    assert causes == ["fsx-not-writable", "lifecycle-step"]  # the generic message dropped
    step = status.diagnoses[1]
    assert step.detail == ("step 30-fsx, exit 1; the line it failed on: mkdir: cannot create "
                           "directory '/fsx/ubuntu': Read-only file system")  # fmt: skip
    assert step.evidence.origin == f"LifecycleConfig/compute/{NODE}"
    assert json.loads(json.dumps(status.as_json(), default=str))["state"] == "failed"


@pytest.mark.parametrize(("dra", "state"), [("AVAILABLE", DEGRADED), ("FAILED", FAILED)])
def test_degraded_node_image_versions_file_system_and_partitions(
    stubs: Stubs, dra: str, state: str
) -> None:
    config = load_environment(REPO / "environments" / "studio-slurm.yaml").config
    env = config.name
    every_stack(stubs, config)
    fs_id = "fs-0123456789abcdef0"
    parameters(stubs, env, {"storage": {"file_system_id": fs_id}, "cluster": cluster_handle(config),
                            "studio": {"domain_id": "d-abcdef123456"},
                            "monitoring": MONITORING})  # fmt: skip
    stubs.on("sagemaker", "describe_cluster", described_cluster(config))
    stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": [
        {"InstanceGroupName": "compute", "InstanceId": n, "InstanceType": "ml.g5.8xlarge",
         "LaunchTime": T0, "InstanceStatus": {"Status": "Running"}, "ImageVersionStatus": image}
        for n, image in ((OTHER, "UpToDate"), (NODE, "SecurityUpdateRequired"))]})  # fmt: skip
    no_operations(stubs)  # ListClusterOperations: none yet
    stubs.on("logs", "get_log_events", log_events(verdict(OTHER, "ok")))
    stubs.on(
        "logs", "get_log_events", log_events(verdict(NODE, "ok", "fsx"), verdict(NODE, "fail"))
    )
    stubs.on("sagemaker", "describe_domain", {"DomainId": "d-abcdef123456", "Status": "InService"})
    stubs.on("fsx", "describe_file_systems", {"FileSystems": [
        {"FileSystemId": fs_id, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE",
         "StorageCapacity": 1200}]})  # fmt: skip
    stubs.on("fsx", "describe_data_repository_associations", {"Associations": [
        {"FileSystemId": fs_id, "FileSystemPath": "/data", "DataRepositoryPath": "s3://b/data/",
         "Lifecycle": dra, **({"FailureDetails": {"Message": "Access denied to s3://b"}}
                              if dra == "FAILED" else {})}]})  # fmt: skip
    stubs.on("cloudwatch", "get_metric_statistics", {"Datapoints": [
        {"Timestamp": T0, "Sum": 60 * 2**30}, {"Timestamp": T0 - datetime.timedelta(minutes=5),
                                               "Sum": 500 * 2**30}]})  # fmt: skip
    ready = {"user": "alice", "ready": True}
    stubs.on("ssm", "get_parameters_by_path", {"Parameters": [
        {"Name": f"{parameter_name(env, 'partitions')}/alice", "Type": "String",
         "Value": json.dumps(ready)}]})  # fmt: skip
    stubs.on("cloudwatch", "describe_alarms", {"MetricAlarms": []})
    stubs.on("logs", "describe_log_streams", {"logStreams": [
        {"logStreamName": f"hyperpod-kit/health/{NODE}"}]})  # fmt: skip

    status = collect(config, stubs.facade)

    assert status.state == state and status.exit_code == 1
    assert status.cluster is not None
    nodes = {n.instance_id: n for n in status.cluster.nodes}
    assert nodes[OTHER].health.value == "healthy"
    assert nodes[OTHER].image_version_status == "UpToDate"
    sick = nodes[NODE].health
    assert (sick.value, sick.source, sick.time, sick.reason) == (
        "unhealthy",
        logs.LOG_GROUP_VERDICT,
        "2026-11-25T01:00:00Z",
        "efa: 3 of 4 EFA devices",
    )
    assert sick.stream == f"hyperpod-kit/health/{NODE}"
    (unhealthy,) = [d for d in status.diagnoses if d.signature.id == "node-unhealthy"]
    assert unhealthy.evidence.origin == f"{NODE} (compute)"  # the diagnosis names the node
    assert unhealthy.evidence.text == (
        "health runner verdict at 2026-11-25T01:00:00Z: efa: 3 of 4 EFA devices"
    )
    assert f"node {NODE} (compute): image SecurityUpdateRequired" in status.problems
    assert status.file_system is not None and status.file_system.free_gib == 60
    assert f"file system {fs_id}: 60 GiB free of 1200" in status.problems
    assert [a.lifecycle for a in status.file_system.associations] == [dra]
    assert status.studio is not None and status.studio.partitions_ready == ["alice"]
    assert list(status.studio.partitions_waiting) == ["bob"]  # carol is excluded from Studio
    if dra == "FAILED":
        assert "association /data: FAILED" in status.problems
        assert status.file_system.associations[0].failure == "Access denied to s3://b"


# --- judged against the file: what it implies and AWS lacks is never healthy ----------------------

PLATFORM = REPO / "environments" / "slurm-platform.yaml"  # accounting, observability, 4 groups
FS_ID = "fs-0123456789abcdef0"


@functools.cache
def platform() -> Any:
    return load_environment(PLATFORM).config


def deployed_platform(
    stubs: Stubs,
    *,
    leave_out: tuple[str, ...] = (),
    handles_out: tuple[str, ...] = (),
    counts: dict[str, tuple[int, int]] | None = None,
    database: str | None = "available",
    cluster_status: str = "InService",
    plan: dict[str, Any] | None = None,
) -> Any:
    """slurm-platform.yaml deployed as the stubs answer: every stack (but `leave_out`), every
    handle (but `handles_out`), the cluster's groups at the file's counts (or `counts`), the
    accounting database in state `database` (None: RDS has none). No node is listed, so no
    node's log is read. With `plan` (DescribeTrainingPlan's answer), group gpu runs on it."""
    config = platform()
    every_stack(stubs, config, leave_out=leave_out)
    handles = {"storage": {"file_system_id": FS_ID}, "cluster": cluster_handle(config),
               "accounting": {"endpoint": "db.example", "port": "3306"},
               "monitoring": MONITORING}  # fmt: skip
    parameters(stubs, config.name, {k: v for k, v in handles.items() if k not in handles_out})
    if "cluster" not in handles_out:
        cluster = described_cluster(config, counts=counts, status=cluster_status)
        for g in cluster["InstanceGroups"] if plan is not None else []:
            if g["InstanceGroupName"] == "gpu":
                g["TrainingPlanArn"] = plan["TrainingPlanArn"]
        stubs.on("sagemaker", "describe_cluster", cluster)
        stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": []})
        no_operations(stubs)  # ListClusterOperations: none yet
        if plan is not None:
            stubs.on("sagemaker", "describe_training_plan", plan)
    if "storage" not in handles_out:
        stubs.on("fsx", "describe_file_systems", {"FileSystems": [
            {"FileSystemId": FS_ID, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE",
             "StorageCapacity": 4800}]})  # fmt: skip
        stubs.on("fsx", "describe_data_repository_associations", {"Associations": []})
        stubs.on("cloudwatch", "get_metric_statistics",
                 {"Datapoints": [{"Timestamp": T0, "Sum": 4000 * 2**30}]})  # fmt: skip
    if database is None:
        stubs.on("rds", "describe_db_clusters", "DBClusterNotFoundFault")
    else:
        stubs.on("rds", "describe_db_clusters", {"DBClusters": [
            {"DBClusterIdentifier": f"{config.name}-slurm-accounting", "Status": database,
             "Endpoint": "db.example"}]})  # fmt: skip
    stubs.on("cloudwatch", "describe_alarms", {"MetricAlarms": []})
    return config


def test_everything_the_file_implies_deployed_is_healthy(stubs: Stubs) -> None:
    config = deployed_platform(stubs)
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code, status.problems) == (status_module.HEALTHY, 0, [])
    assert status.missing == [] and status.accounting is not None
    data = json.loads(json.dumps(status.as_json(), default=str))
    assert data["expected"]["areas"] == environment_areas(config)
    assert data["expected"]["groups"] == [["controller", 1], ["login", 1], ["gpu", 4], ["spot", 2]]
    assert data["accounting"]["status"] == "available"


@pytest.mark.parametrize("area", environment_areas(platform()))
def test_a_missing_stack_is_not_deployed(stubs: Stubs, area: str) -> None:
    config = deployed_platform(stubs, leave_out=(area,))
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code) == (status_module.NOT_DEPLOYED, 1)
    assert status.missing == [f"stack {config.name}-{area}"]
    assert f"not deployed: stack {config.name}-{area}" in status.problems


@pytest.mark.parametrize(
    ("handle", "missing"),
    [
        ("cluster", "cluster hyperpod-slurm26 (no /hyperpod-kit/hyperpod-slurm26/cluster)"),
        ("storage", "file system (no file_system_id in /hyperpod-kit/hyperpod-slurm26/storage)"),
        ("monitoring", "monitoring (no /hyperpod-kit/hyperpod-slurm26/monitoring)"),
    ],
)
def test_a_part_without_its_handle_is_not_deployed(stubs: Stubs, handle: str, missing: str) -> None:
    config = deployed_platform(stubs, handles_out=(handle,))
    status = collect(config, stubs.facade)
    assert (status.state, status.missing) == (status_module.NOT_DEPLOYED, [missing])
    if handle == "cluster":
        assert status.cluster is None and json.loads(
            json.dumps(status.as_json(), default=str))["state"] == "not deployed"  # fmt: skip


def test_a_cluster_short_of_a_group_is_not_deployed(stubs: Stubs) -> None:
    config = deployed_platform(stubs, counts={"controller": (1, 1), "gpu": (4, 4)})
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code) == (status_module.NOT_DEPLOYED, 1)
    assert status.missing == [
        "instance group login of cluster hyperpod-slurm26 (1 nodes in the file)",
        "instance group spot of cluster hyperpod-slurm26 (2 nodes in the file)",
    ]


@pytest.mark.parametrize(
    ("gpu", "problems"),
    [
        ((4, 3), ["group gpu: 3 of 4 nodes"]),  # a group short of nodes
        ((2, 2), ["group gpu: 2 of 4 nodes",  # a target below the file's (not deployed yet)
                  "group gpu: target 2 nodes in AWS, 4 in the file (deploy the file)"]),
        ((4, 0), ["group gpu: 0 of 4 nodes"]),
    ],
)  # fmt: skip
def test_a_group_short_of_nodes_is_degraded(
    stubs: Stubs, gpu: tuple[int, int], problems: list[str]
) -> None:
    counts = {"controller": (1, 1), "login": (1, 1), "gpu": gpu, "spot": (2, 2)}
    config = deployed_platform(stubs, counts=counts)
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code, status.problems) == (DEGRADED, 1, problems)


def test_counts_are_not_judged_while_the_cluster_is_busy(stubs: Stubs) -> None:
    counts = {"controller": (1, 1), "login": (1, 1), "gpu": (4, 1), "spot": (2, 2)}
    config = deployed_platform(stubs, counts=counts, cluster_status="Updating")
    status = collect(config, stubs.facade)
    assert (status.state, status.problems) == (
        status_module.IN_PROGRESS, ["cluster hyperpod-slurm26: Updating"])  # fmt: skip


@pytest.mark.parametrize(
    ("database", "state"),
    [
        (None, status_module.NOT_DEPLOYED),
        ("creating", status_module.IN_PROGRESS),
        ("failed", FAILED),
        ("stopped", DEGRADED),
    ],
)
def test_the_accounting_database(stubs: Stubs, database: str | None, state: str) -> None:
    config = deployed_platform(stubs, database=database)
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code) == (state, 1)
    name = "hyperpod-slurm26-slurm-accounting"
    expected = f"not deployed: accounting database {name}" if database is None else (
        f"accounting database {name}: {database}")  # fmt: skip
    assert status.problems == [expected]


def test_studio_without_its_domain_is_not_deployed(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "studio-slurm.yaml").config
    every_stack(stubs, config)
    parameters(stubs, config.name, {"storage": {"file_system_id": FS_ID},
                                    "cluster": cluster_handle(config),
                                    "monitoring": MONITORING})  # fmt: skip
    stubs.on("sagemaker", "describe_cluster", described_cluster(config))
    stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": []})
    no_operations(stubs)  # ListClusterOperations: none yet
    stubs.on(
        "fsx",
        "describe_file_systems",
        {
            "FileSystems": [
                {"FileSystemId": FS_ID, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE"}
            ]
        },
    )
    stubs.on("fsx", "describe_data_repository_associations", {"Associations": []})
    stubs.on("cloudwatch", "get_metric_statistics", {"Datapoints": []})
    stubs.on("cloudwatch", "describe_alarms", {"MetricAlarms": []})
    status = collect(config, stubs.facade)
    assert (status.state, status.studio) == (status_module.NOT_DEPLOYED, None)
    assert status.missing == [
        "Studio domain hyperpod-studio-studio and its partitions "
        "(no /hyperpod-kit/hyperpod-studio/studio)"
    ]


def test_an_existing_file_system_is_asked_for_by_its_id(stubs: Stubs) -> None:
    """The file names an existing file system: it is described even before the storage stack
    publishes its handle (the stack's absence is reported on its own)."""
    config = load_environment(REPO / "environments" / "existing-resources.yaml").config
    every_stack(stubs, config, leave_out=("storage",))
    parameters(stubs, config.name, {"cluster": cluster_handle(config),
                                    "monitoring": MONITORING})  # fmt: skip
    stubs.on("sagemaker", "describe_cluster", described_cluster(config))
    stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": []})
    no_operations(stubs)  # ListClusterOperations: none yet
    fs = "fs-0a1b2c3d4e5f67890"
    stubs.on(
        "fsx",
        "describe_file_systems",
        {
            "FileSystems": [
                {"FileSystemId": fs, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE"}
            ]
        },
    )
    stubs.on("fsx", "describe_data_repository_associations", {"Associations": []})
    stubs.on("cloudwatch", "get_metric_statistics", {"Datapoints": []})
    stubs.on("cloudwatch", "describe_alarms", {"MetricAlarms": []})
    status = collect(config, stubs.facade)
    assert status.file_system is not None and status.file_system.id == fs
    assert status.missing == ["stack hyperpod-byo-storage"]


def test_the_text_names_what_is_not_deployed(stubs: Stubs) -> None:
    from hyperpod_kit.cli.status import render

    config = deployed_platform(stubs, leave_out=("monitoring",), handles_out=("monitoring",))
    text = render(collect(config, stubs.facade))
    assert text.startswith("environment hyperpod-slurm26 (us-west-2): NOT DEPLOYED\n")
    assert f"  {'hyperpod-slurm26-monitoring':<32} not deployed\n" in text
    assert "  not deployed: monitoring (no /hyperpod-kit/hyperpod-slurm26/monitoring)" in text
    assert "accounting database hyperpod-slurm26-slurm-accounting: available" in text


def test_status_and_logs_print_no_terminal_controls(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What AWS holds reaches the terminal with its control characters written visibly: a node's
    log line, a failure message (tab and line feed kept)."""
    import argparse

    from hyperpod_kit.cli import status as cli
    from hyperpod_kit.operations import status as operations
    from hyperpod_kit.operations.status import Status

    hostile = "\x1b]0;owned\x07\x1b[2J\rgone\u202eevil\x9b31m\tkept"
    monkeypatch.setattr(logs, "events", lambda *a, **k: [logs.LogEvent("s\x1b[8m", 0, hostile)])
    cli._print(None, "g", [logs.classify("s\x1b[8m")], since=None, grep=None,  # type: ignore[arg-type]
               follow=False)  # fmt: skip
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out and "\x9b" not in out
    assert out == ("==> s\\x1b[8m <==\n1970-01-01T00:00:00Z \\x1b]0;owned\\x07\\x1b[2J\\rgone"
                   "\\u202eevil\\x9b31m\tkept\n")  # fmt: skip

    loaded = load_environment(REPO / "environments" / "default.yaml")
    monkeypatch.setattr(
        operations,
        "collect",
        lambda config, aws: Status(
            config.name, config.region, state=FAILED, problems=[f"cluster x: {hostile}"]
        ),
    )
    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: True)
    assert cli.status(loaded, argparse.Namespace(format="text", watch=False, interval=30.0)) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "  cluster x: \\x1b]0;owned" in out


@pytest.mark.synth
def test_the_app_builds_the_stacks_status_expects(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` knows the stacks from `environment_areas` alone; the app checks its own stacks
    against that list, so the two cannot drift apart (every synth of every example runs it)."""
    from hyperpod_kit import app

    config = load_environment(REPO / "environments" / "default.yaml").config
    built = app.build_environment(app.create_app(), config)
    assert [s.stack_name for s in built.all()] == [
        stack_name(config.name, a) for a in environment_areas(config)
    ]
    monkeypatch.setattr(app, "environment_areas", lambda c: ["network", "storage", "cluster"])
    with pytest.raises(RuntimeError, match="differ from environment_areas"):
        app.build_environment(app.create_app(), config)


def test_status_and_logs_stay_light(tmp_path: Path) -> None:
    """What the file implies comes from the validated config: status, logs and nodes run (here to
    their "no credentials" line) without aws-cdk-lib, jsii, constructs, cdk-nag or cfn-lint."""
    code = (
        "import sys\n"
        "from hyperpod_kit.cli.main import main\n"
        "for command in ('status', 'logs'):\n"
        f"    assert main([command, {str(PLATFORM)!r}, '-q']) == 2\n"
        f"assert main(['nodes', {str(PLATFORM)!r}, 'reboot', 'i-0123456789abcdef0', '-q']) == 2\n"
        "import hyperpod_kit.operations.status, hyperpod_kit.operations.logs\n"
        "import hyperpod_kit.operations.nodes\n"
        "from hyperpod_kit.config.derived import expected_deployment\n"
        "heavy = {'aws_cdk', 'jsii', 'constructs', 'cdk_nag', 'cfnlint'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    done = run_command([sys.executable, "-c", code], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_pages_follow_the_next_token(stubs: Stubs) -> None:
    stubs.on("logs", "describe_log_streams", {"logStreams": [{"logStreamName": "a"}],
                                              "nextToken": "t1"})  # fmt: skip
    stubs.on("logs", "describe_log_streams", {"logStreams": [{"logStreamName": "b"}]})
    found = stubs.facade.pages("logs", "describe_log_streams", "logStreams", logGroupName="g")
    assert [s["logStreamName"] for s in found] == ["a", "b"]


def test_a_missing_log_group_has_no_streams(stubs: Stubs) -> None:
    stubs.on("logs", "describe_log_streams", "ResourceNotFoundException")
    assert logs.streams(stubs.facade, "/aws/sagemaker/Clusters/x/y") == []


def test_streams_by_node_and_group_failing_node_first() -> None:
    names = [f"LifecycleConfig/compute/{OTHER}", f"hyperpod-kit/health/{NODE}",
             f"LifecycleConfig/compute/{NODE}", f"hyperpod-kit/lifecycle/{OTHER}",
             "SagemakerHealthMonitoringAgent"]  # fmt: skip
    found = [logs.classify(n) for n in names]
    ordered = [s.name for s in logs.select(found, first=[NODE])]
    assert ordered[:2] == [f"LifecycleConfig/compute/{NODE}", f"hyperpod-kit/health/{NODE}"]
    assert [s.name for s in logs.select(found, node=OTHER)] == [
        f"LifecycleConfig/compute/{OTHER}", f"hyperpod-kit/lifecycle/{OTHER}"]  # fmt: skip
    assert {s.instance_id for s in logs.select(found, group="compute")} == {NODE, OTHER}


def test_stream_names_are_the_ones_the_nodes_ship() -> None:
    unit = (REPO / "lifecycle" / "systemd" / "hyperpod-kit-ship-logs.service.j2").read_text()
    for kind in ("health", "shipped-lifecycle", "jobs"):
        assert f"={LOG_STREAMS[kind]}" in unit, kind


# --- the diagnosis table -------------------------------------------------------------------------


@pytest.mark.parametrize("signature", signatures(), ids=lambda s: s.id)
def test_each_signature_diagnoses_its_example(signature: Any) -> None:
    ((where, text),) = signature.example.items()
    found = diagnose([Evidence(where, text, "recorded")])
    assert [d.signature.id for d in found] == [signature.id]
    assert found[0].evidence.text == text
    rendered = found[0].render()
    assert rendered.startswith(f"likely cause: {signature.cause}")
    assert ("not checked against a real message" in rendered) is not signature.checked
    if signature.checked:
        assert signature.quote and signature.quote.split("<")[0].strip() in (
            text + " " + signature.quote
        )
    assert signature.source and signature.what_to_do


def test_a_checked_signature_matches_its_quote() -> None:
    for s in signatures():
        if s.checked and s.quote and "<" not in s.quote:
            where = s.where[0]
            assert [d.signature.id for d in diagnose([Evidence(where, s.quote)])] == [s.id], s.id


def test_the_lifecycle_step_matches_what_on_create_prints() -> None:
    template = (REPO / "lifecycle" / "on_create.sh.j2").read_text()
    assert 'log "FAILED in $STEP (exit $rc); node log:' in template
    line = "2026-11-25T01:02:03Z hyperpod-kit lifecycle: FAILED in 20-users (exit 3); node log: x"
    (found,) = diagnose([Evidence("node_log", "useradd: group 'x' does not exist", "s"),
                         Evidence("node_log", line, "s")])  # fmt: skip
    assert found.signature.id == "lifecycle-step"
    assert found.detail.endswith("the line it failed on: useradd: group 'x' does not exist")


def test_an_unhealthy_verdict_is_diagnosed_once_per_node() -> None:
    verdicts = [Evidence("node_health", f"health runner verdict at 2026-11-25T01:00:00Z: {c}", n)
                for n, c in ((NODE, "efa: 3 of 4 EFA devices"), (OTHER, "fsx: not mounted"),
                             (NODE, "gpu: 7 of 8 GPUs"))]  # fmt: skip
    found = diagnose(verdicts)
    assert [(d.signature.id, d.evidence.origin) for d in found] == [
        ("node-unhealthy", NODE), ("node-unhealthy", OTHER)]  # fmt: skip
    assert "efa: 3 of 4 EFA devices" in found[0].render()


def test_health_without_a_verdict_is_unknown(stubs: Stubs) -> None:
    stubs.on("logs", "get_log_events", log_events("not json", json.dumps({"event": "decision"})))
    found = logs.health(stubs.facade, "/aws/sagemaker/Clusters/x/y", NODE)
    assert (found.value, found.source, found.time) == ("unknown", logs.UNKNOWN, None)
    assert found.reason == f"no verdict of the health runner in hyperpod-kit/health/{NODE}"


def test_nothing_known_is_no_diagnosis() -> None:
    assert diagnose([Evidence("node_log", "all good"), Evidence("stack_event", "")]) == []


def test_troubleshooting_page_is_generated_from_the_table() -> None:
    committed = (REPO / "docs" / "troubleshooting.md").read_text()
    assert committed == render_markdown(), (
        "docs/troubleshooting.md is stale: run "
        "`python -m hyperpod_kit.operations.diagnosis > docs/troubleshooting.md`"
    )


def test_table_is_dated_and_every_row_has_a_source() -> None:
    data = json.loads((REPO / "hyperpod_kit/config/facts/failure_signatures.json").read_text())
    datetime.date.fromisoformat(data["date"])
    ids = [s.id for s in signatures()]
    assert len(ids) == len(set(ids))
    for s in signatures():
        assert set(s.where) <= {"failure_message", "stack_event", "node_health", "node_log"}
        assert s.checked == bool(s.quote), s.id


def test_watch_refreshes_until_nothing_is_in_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--watch: one report per refresh, until the state settles; its exit code is the last's."""
    import argparse

    from hyperpod_kit.cli import status as cli
    from hyperpod_kit.operations import status as operations
    from hyperpod_kit.operations.status import HEALTHY, IN_PROGRESS, Status

    loaded = load_environment(REPO / "environments" / "default.yaml")
    states = iter([IN_PROGRESS, IN_PROGRESS, HEALTHY])

    def fake_collect(config: Any, aws: Any) -> Status:
        return Status(config.name, config.region, state=next(states))

    monkeypatch.setattr(operations, "collect", fake_collect)
    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: True)
    args = argparse.Namespace(format="text", watch=True, interval=0.01)
    assert cli.status(loaded, args) == 0
    reports = capsys.readouterr().out.count("environment hyperpod-dev (us-west-2): ")
    assert reports == 3
    args = argparse.Namespace(format="text", watch=False, interval=30.0)
    states = iter([IN_PROGRESS])
    assert cli.status(loaded, args) == 1  # without --watch: one report, not yet healthy


def test_watch_in_json_is_one_document_a_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--watch --format json: JSON Lines, each refresh one parseable document."""
    import argparse

    from hyperpod_kit.cli import status as cli
    from hyperpod_kit.operations import status as operations
    from hyperpod_kit.operations.status import HEALTHY, IN_PROGRESS, Status

    loaded = load_environment(REPO / "environments" / "default.yaml")
    states = iter([IN_PROGRESS, HEALTHY])
    monkeypatch.setattr(
        operations,
        "collect",
        lambda config, aws: Status(config.name, config.region, state=next(states)),
    )
    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: True)
    args = argparse.Namespace(format="json", watch=True, interval=0.01)
    assert cli.status(loaded, args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["state"] for line in lines] == [IN_PROGRESS, HEALTHY]


@pytest.mark.parametrize("interval", ["nan", "inf", "-inf", "-1", "0", "7201", "1e999", "soon"])
def test_a_bad_interval_is_refused_by_the_parser(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hyperpod_kit.cli.main import _parser

    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["status", "x.yaml", "--watch", f"--interval={interval}"])
    assert exit_.value.code == 2
    assert (f"error: argument --interval: {interval!r} is not a number of seconds above 0 and "
            "at most 7200. Hint: e.g. --interval 30") in capsys.readouterr().err  # fmt: skip
    args = _parser().parse_args(["status", "x.yaml", "--watch", "--interval", "0.5"])
    assert args.interval == 0.5


def test_follow_prints_each_event_once_until_interrupted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hyperpod_kit.cli import status as cli

    batches = iter([
        [logs.LogEvent("s", 1, "first")],
        [logs.LogEvent("s", 1, "first"), logs.LogEvent("s", 2, "second")],
    ])  # fmt: skip
    asked: list[int | None] = []

    def fake_events(aws: Any, group: str, names: list[str], **kw: Any) -> list[logs.LogEvent]:
        asked.append(kw["since_ms"])
        return next(batches)

    def fake_sleep(_: float) -> None:
        if len(asked) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(logs, "events", fake_events)
    monkeypatch.setattr("hyperpod_kit.cli.status.time.sleep", fake_sleep)
    with pytest.raises(KeyboardInterrupt):  # main() turns it into exit 130
        cli._print(None, "g", [logs.classify("s")], since=None, grep=None, follow=True)  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert [line.split("] ", 1)[1] for line in out] == ["first", "second"]
    assert asked == [None, 1]  # the next poll starts at the newest event seen


# --- EKS: the node-health-status label -----------------------------------------------------------


class KubernetesApi:
    """A Kubernetes API on loopback (plain HTTP: the endpoint is what eks:DescribeCluster says)
    answering GET /api/v1/nodes with `nodes`, or with `refuse` as the HTTP status; it keeps the
    Authorization header of each request."""

    def __init__(self, nodes: list[dict[str, Any]], refuse: int | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.seen.append((self.path, self.headers.get("Authorization", "")))
                body = json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": nodes})
                self.send_response(refuse or 200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def k8s_node(instance_id: str, label: str) -> dict[str, Any]:
    return {"metadata": {"name": f"hyperpod-{instance_id}", "labels": {
        "sagemaker.amazonaws.com/node-health-status": label,
        "sagemaker.amazonaws.com/instance-group-name": "workers"}},
        "spec": {"providerID": f"aws:///usw2-az2/{instance_id}"}}  # fmt: skip


def eks_cluster_state(*healths: logs.Health) -> ClusterState:
    nodes = [NodeState(iid, "workers", "ml.g5.8xlarge", "Running", "", h, "UpToDate")
             for iid, h in zip((NODE, OTHER), healths, strict=True)]  # fmt: skip
    return ClusterState("hyperpod-eks", "InService", "", [], nodes, "/aws/sagemaker/Clusters/x/y")


def describe_eks(stubs: Stubs, endpoint: str) -> None:
    ca = base64.b64encode(b"not used over plain HTTP").decode()
    stubs.on("eks", "describe_cluster", {"cluster": {
        "name": "hyperpod-eks-eks", "endpoint": endpoint, "status": "ACTIVE",
        "certificateAuthority": {"data": ca}}})  # fmt: skip


def test_eks_labels_complete_the_runners_verdicts(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "eks.yaml").config
    api = KubernetesApi([k8s_node(NODE, "UnschedulablePendingReplacement"),
                         k8s_node(OTHER, "Schedulable")])  # fmt: skip
    try:
        describe_eks(stubs, api.endpoint)
        deployed = Deployed(config.name, handles={"eks": {"cluster_name": "hyperpod-eks-eks"}})
        unknown = logs.Health("unknown", logs.UNKNOWN, "no verdict")
        found = status_module._with_eks_labels(
            stubs.facade, eks_cluster_state(unknown, unknown), deployed, config
        )
    finally:
        api.close()
    ((path, authorization),) = api.seen
    assert path == "/api/v1/nodes?labelSelector=sagemaker.amazonaws.com/node-health-status"
    # the bearer token is `aws eks get-token`'s: a presigned GetCallerIdentity signing the cluster
    assert authorization.startswith("Bearer k8s-aws-v1.")
    token = authorization.removeprefix("Bearer k8s-aws-v1.")
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    assert "Action=GetCallerIdentity" in url and "x-k8s-aws-id" in url
    health = {n.instance_id: n.health for n in found.nodes}
    label = "sagemaker.amazonaws.com/node-health-status"
    assert (health[NODE].value, health[NODE].source, health[NODE].reason) == (
        "unhealthy", logs.EKS_LABEL, f"{label}=UnschedulablePendingReplacement")  # fmt: skip
    assert (health[OTHER].value, health[OTHER].source) == ("healthy", logs.EKS_LABEL)
    assert found.eks_labels == "read from the EKS cluster hyperpod-eks-eks"
    (diagnosis,) = diagnose(status_module._node_evidence(found)[0])
    assert diagnosis.signature.id == "node-labelled-for-repair"
    assert diagnosis.evidence.origin == f"{NODE} (workers)"


def test_eks_labels_refused_leave_the_verdicts(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "eks.yaml").config
    api = KubernetesApi([], refuse=403)
    try:
        describe_eks(stubs, api.endpoint)
        healthy = logs.Health("healthy", logs.LOG_GROUP_VERDICT, "2 checks passed", "t")
        before = eks_cluster_state(healthy, healthy)
        found = status_module._with_eks_labels(stubs.facade, before, Deployed(config.name), config)
    finally:
        api.close()
    assert found.nodes == before.nodes
    assert found.eks_labels is not None and found.eks_labels.startswith("not read (")
    assert "HTTP 403" in found.eks_labels


@pytest.mark.parametrize(
    ("verdict", "label", "expected"),
    [
        ("unhealthy", "Schedulable", ("unhealthy", "log-group verdict")),  # the check is named
        ("healthy", "UnschedulablePendingReboot", ("unhealthy", "eks-label")),
        ("healthy", "Schedulable", ("healthy", "log-group verdict")),
        ("unknown", "Schedulable", ("healthy", "eks-label")),
        ("unknown", "Unschedulable", ("unknown", "eks-label")),  # deep health checks running
        ("unknown", None, ("unknown", "unknown")),
    ],
)
def test_verdict_and_label_combined(
    verdict: str, label: str | None, expected: tuple[str, str]
) -> None:
    source = logs.UNKNOWN if verdict == "unknown" else logs.LOG_GROUP_VERDICT
    combined = status_module.combine(logs.Health(verdict, source, "r", "t"), label)
    assert (combined.value, combined.source) == expected


def test_a_flexible_group_shows_its_types_in_priority_order() -> None:
    """DescribeCluster gives a flexible group InstanceRequirements, not InstanceType."""
    from hyperpod_kit.operations.status import _group_types

    flexible = {
        "InstanceGroupName": "burst",
        "InstanceRequirements": {"InstanceTypes": ["ml.p5.48xlarge", "ml.p5e.48xlarge"]},
    }
    assert _group_types(flexible) == "ml.p5.48xlarge|ml.p5e.48xlarge"
    assert _group_types({"InstanceType": "ml.g5.8xlarge"}) == "ml.g5.8xlarge"
    assert _group_types({}) == ""


def test_every_node_and_cluster_state_of_the_pinned_model_is_judged() -> None:
    """A botocore bump that adds a ClusterInstanceStatus or ClusterStatus value fails here until
    `status` says what it means (1.44.8 added DetachInProgress and AttachInProgress)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    node_states = set(model.shape_for("ClusterInstanceStatus").enum)
    assert node_states == status_module.NODE_BUSY | {"Running", "Failure", "NotFound"}
    assert set(model.shape_for("ClusterStatus").enum) == status_module.CLUSTER_BUSY | {
        "InService", "Failed"}  # fmt: skip


@pytest.mark.parametrize("moving", ["DetachInProgress", "AttachInProgress"])
def test_a_node_being_moved_is_in_progress(moving: str) -> None:
    healthy = logs.Health("healthy", logs.LOG_GROUP_VERDICT, "ok")
    nodes = [
        NodeState(NODE, "workers", "ml.g5.8xlarge", moving, "", healthy, "UpToDate"),
        NodeState(OTHER, "workers", "ml.g5.8xlarge", "Running", "", healthy, "UpToDate"),
    ]
    status = status_module.Status("dev", "us-west-2", cluster=ClusterState(
        "hyperpod-eks", "InService", "", [], nodes, None))  # fmt: skip
    status_module._judge(status)
    assert (status.state, status.problems) == (
        status_module.IN_PROGRESS, [f"node {NODE} (workers): {moving}"])  # fmt: skip


# --- operations and deadlines (botocore 1.44.8: ListClusterOperations, DescribeClusterOperation;
# DescribeTrainingPlan) ---

OP_SCALE = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
OP_CHECK = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
PLAN_ARN = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-reserved-march"


def plan_answer(status: str, end: datetime.datetime | None) -> dict[str, Any]:
    answer = {"TrainingPlanArn": PLAN_ARN, "TrainingPlanName": "p5-reserved-march",
              "Status": status, "StartTime": T0 - datetime.timedelta(days=20)}  # fmt: skip
    if end is not None:
        answer["EndTime"] = end
    return answer


def test_the_clusters_newest_operations_are_described(stubs: Stubs) -> None:
    gpu = status_module.GroupState("gpu", "ml.p5.48xlarge", 4, 3, "InService")
    cluster = ClusterState("hyperpod-dev", "InService", "", [gpu], [], None)
    stubs.stubbers.setdefault("sagemaker", Stubber(stubs.facade.client("sagemaker"))).activate()
    sm = stubs.stubbers["sagemaker"]
    sm.add_response("list_cluster_operations", {"ClusterOperationSummaries": [
        {"OperationId": OP_SCALE, "ClusterArn": CLUSTER["cluster_arn"], "Type": "Scaling",
         "Status": "InProgress", "CreationTime": T0},
        {"OperationId": OP_CHECK, "Type": "DeepHealthCheck", "Status": "Done",
         "CreationTime": T0 - datetime.timedelta(hours=1)}]},
        {"ClusterName": "hyperpod-dev", "SortBy": "CreationTime", "SortOrder": "Descending",
         "MaxResults": status_module.OPERATIONS_SHOWN})  # fmt: skip
    sm.add_response("describe_cluster_operation", {
        "OperationId": OP_SCALE, "Type": "Scaling", "Status": "InProgress", "CreationTime": T0,
        "ScalingDetails": [{"InstanceGroupName": "gpu", "Status": "InProgress",
                            "Original": {"CurrentCount": 2, "TargetCount": 2, "MinCount": 2},
                            "Desired": {"TargetCount": 4, "MinCount": 2}}]},
        {"ClusterName": "hyperpod-dev", "OperationId": OP_SCALE})  # fmt: skip
    sm.add_response("describe_cluster_operation", {
        "OperationId": OP_CHECK, "Type": "DeepHealthCheck", "Status": "Done",
        "CreationTime": T0 - datetime.timedelta(hours=1),
        "DeepHealthCheckDetails": [{"InstanceGroupName": "gpu", "InstanceIds": [NODE],
                                    "DeepHealthChecks": ["InstanceStress"]}]},
        {"ClusterName": "hyperpod-dev", "OperationId": OP_CHECK})  # fmt: skip
    operations, why = status_module.cluster_operations(stubs.facade, cluster)
    assert why == ""
    assert [o.line for o in operations] == [
        f"Scaling InProgress since 2026-11-25T01:00:00Z ({OP_SCALE}): group gpu 2 -> 4 nodes "
        "(min 2 -> 2), 3 now, InProgress",
        f"DeepHealthCheck Done started 2026-11-25T00:00:00Z ({OP_CHECK}): deep health checks "
        "gpu: InstanceStress (1 nodes)",
    ]
    assert operations[0].scaling[0].original == {"current": 2, "target": 2, "min": 2}


def test_operations_a_caller_may_not_list_leave_the_rest_of_status(stubs: Stubs) -> None:
    cluster = ClusterState("hyperpod-dev", "InService", "", [], [], None)
    stubs.on("sagemaker", "list_cluster_operations", "AccessDeniedException")
    assert status_module.cluster_operations(stubs.facade, cluster) == (
        [], "not read (sagemaker:ListClusterOperations: AccessDeniedException)")  # fmt: skip


NOW = T0 + datetime.timedelta(days=30)


@pytest.mark.parametrize(("status", "end", "severity", "said"), [
    ("Active", NOW + datetime.timedelta(days=30), "info", "Active, ends in 30 d 0 h"),
    ("Active", NOW + datetime.timedelta(days=7), "warning", "7 d 0 h at 2027-01-01T01:00:00Z"),
    ("Active", NOW + datetime.timedelta(hours=5, minutes=30), "warning", "ends in 5 h 30 min"),
    ("Active", NOW - datetime.timedelta(minutes=1), "error", "ended at 2026-12-25T00:59:00Z"),
    ("Expired", NOW - datetime.timedelta(days=2), "error", "ended at 2026-12-23T01:00:00Z: Expi"),
    ("Failed", None, "error", "ended: Failed"),
    ("Scheduled", NOW + datetime.timedelta(days=40), "info", "is Scheduled: it starts at"),
])  # fmt: skip
def test_a_training_plans_end_is_a_deadline(
    stubs: Stubs, status: str, end: datetime.datetime | None, severity: str, said: str
) -> None:
    groups = [status_module.GroupState("gpu", "ml.p5.48xlarge", 4, 4, "InService", PLAN_ARN),
              status_module.GroupState("spot", "ml.g5.8xlarge", 2, 2, "InService")]  # fmt: skip
    stubs.stubbers.setdefault("sagemaker", Stubber(stubs.facade.client("sagemaker"))).activate()
    stubs.stubbers["sagemaker"].add_response(
        "describe_training_plan", plan_answer(status, end), {"TrainingPlanName": PLAN_ARN}
    )
    cluster = ClusterState("hyperpod-dev", "InService", "", groups, [], None)
    (deadline,) = status_module.training_plan_deadlines(stubs.facade, cluster, now=NOW)
    assert deadline.severity == severity
    assert deadline.line.startswith("training plan p5-reserved-march (group gpu)")
    assert said in deadline.line, deadline.line


def test_an_ended_plan_is_an_error_line_but_not_the_exit_code(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every group at its count: the ended plan is said, in text and JSON, and status stays
    healthy (exit 0), so a pipeline's gate does not fail on it; the group short of nodes it
    leaves would be degraded on its own count."""
    from hyperpod_kit.cli.status import render

    ended = T0 - datetime.timedelta(days=1)
    config = deployed_platform(stubs, plan=plan_answer("Expired", ended))
    status = collect(config, stubs.facade)
    assert (status.state, status.exit_code) == (status_module.HEALTHY, 0)
    text = render(status)
    assert "error: training plan p5-reserved-march (group gpu) ended at 2026-11-24" in text
    assert "  operations: none" in text
    data = json.loads(json.dumps(status.as_json(), default=str))
    assert [d["severity"] for d in data["deadlines"]] == ["error"]
    assert data["deadlines"][0]["line"].startswith("training plan p5-reserved-march")
    assert data["operations"] == [] and data["operations_read"] == ""


def test_an_addon_version_eks_no_longer_offers_is_a_warning(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "eks.yaml").config
    deployed = Deployed(config.name, handles={"eks": {"cluster_name": "hyperpod-eks-eks"}})
    name = {"clusterName": "hyperpod-eks-eks"}
    stubs.on("eks", "describe_cluster", {"cluster": {"name": "hyperpod-eks-eks",
                                                     "version": "1.31"}})  # fmt: skip
    eks = stubs.stubbers["eks"]
    eks.add_response("list_addons", {"addons": ["vpc-cni", "coredns"]}, name)
    for addon, installed, offered in (
        ("vpc-cni", "v1.18.0-eksbuild.1", "v1.20.1-eksbuild.3"),
        ("coredns", "v1.11.3-eksbuild.2", "v1.11.3-eksbuild.2"),
    ):
        eks.add_response(
            "describe_addon",
            {"addon": {"addonName": addon, "addonVersion": installed}},
            name | {"addonName": addon},
        )
        eks.add_response("describe_addon_versions", {"addons": [{"addonName": addon,
            "addonVersions": [{"addonVersion": offered,
                               "compatibilities": [{"clusterVersion": "1.31"}]}]}]},
            {"addonName": addon, "kubernetesVersion": "1.31"})  # fmt: skip
    (warning,) = status_module.addon_deadlines(stubs.facade, deployed, config)
    assert (warning.severity, warning.subject) == ("warning", "add-on vpc-cni")
    assert warning.line.startswith(
        "add-on vpc-cni v1.18.0-eksbuild.1 on EKS cluster hyperpod-eks-eks is no longer offered "
        "for Kubernetes 1.31 (EKS offers newest v1.20.1-eksbuild.3). Hint: set "
        "cluster.eks.addons.vpc_cni to an offered version"
    )


def test_addon_versions_not_read_are_one_warning(stubs: Stubs) -> None:
    config = load_environment(REPO / "environments" / "eks.yaml").config
    stubs.on("eks", "describe_cluster", "AccessDeniedException")
    (warning,) = status_module.addon_deadlines(stubs.facade, Deployed(config.name), config)
    assert warning.severity == "warning" and "versions not read (eks:DescribeCluster: " in (
        warning.line)  # fmt: skip
