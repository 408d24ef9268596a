"""`status` and `logs` as the real command in a fresh process, against a real moto server on
loopback (AWS_ENDPOINT_URL) for what moto models: nothing deployed, partial deploys (each stack
alone, a cluster without a group the file names), stack states and events, a healthy cluster
(moto's clusters are InService with Running nodes), the nodes' log streams. What moto cannot
produce (a failed creation, a degraded node, image versions, the DRA's state, a group short of
nodes, a whole environment healthy: moto's FSx has no lifecycle and no associations) is tested
in-process with botocore's Stubber: tests/unit/test_status.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyperpod_kit.config.derived import environment_areas
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.naming import ENVIRONMENT_TAG, cluster_log_group_name, parameter_name
from hyperpod_kit.outputs import LOGS, MARKER, read_marker
from tests.conftest import REPO, run_cli
from tests.moto_server import MotoServer

DEFAULT = REPO / "environments" / "default.yaml"
BAD = REPO / "tests" / "data" / "bad"
ENV = "hyperpod-dev"  # environments/default.yaml's name
TEMPLATE = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


def hpk(moto: MotoServer | None, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if moto is None:
        return run_cli(*args, cwd=cwd)
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", *args], cwd=cwd, env=moto.env(),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def deploy_stacks(moto: MotoServer, *areas: str, environment: str = ENV) -> None:
    cfn = moto.client("cloudformation")
    for area in areas:
        cfn.create_stack(StackName=f"{environment}-{area}", TemplateBody=TEMPLATE,
                         Tags=[{"Key": ENVIRONMENT_TAG, "Value": environment}])  # fmt: skip


GROUPS = (("controller", "ml.m5.xlarge", 1), ("login", "ml.m5.xlarge", 1),
          ("compute", "ml.g5.8xlarge", 2))  # environments/default.yaml's  # fmt: skip


def deploy_cluster(moto: MotoServer, *, without: str | None = None) -> tuple[str, list[str]]:
    """A cluster as the cluster stack leaves it: the cluster with the file's groups (but
    `without`), and its discovery parameter."""
    deploy_stacks(moto, "network", "cluster")
    sm = moto.client("sagemaker")
    group = {"LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hyperpod-dev/lifecycle",
                                 "OnCreate": "on_create.sh"},
             "ExecutionRole": "arn:aws:iam::123456789012:role/exec",
             "ThreadsPerCore": 1}  # fmt: skip
    arn = sm.create_cluster(ClusterName=ENV, InstanceGroups=[
        {"InstanceGroupName": name, "InstanceType": kind, "InstanceCount": count, **group}
        for name, kind, count in GROUPS if name != without
    ])["ClusterArn"]  # fmt: skip
    cluster_id = arn.rsplit("/", 1)[-1]
    moto.client("ssm").put_parameter(
        Name=parameter_name(ENV, "cluster"), Type="String",
        Value=json.dumps({"cluster_name": ENV, "cluster_arn": arn, "cluster_id": cluster_id}),
    )  # fmt: skip
    nodes = [
        n["InstanceId"] for n in sm.list_cluster_nodes(ClusterName=ENV)["ClusterNodeSummaries"]
    ]
    return cluster_log_group_name(ENV, cluster_id), nodes


def ship(moto: MotoServer, group: str, stream: str, lines: list[str], *, at_ms: int) -> None:
    logs = moto.client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": at_ms + i, "message": line} for i, line in enumerate(lines)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def verdict(
    node: str, status: str, *, check: str = "efa", time_: str = "2026-11-25T01:00:00Z"
) -> str:
    return json.dumps({"time": time_, "source": "hyperpod-kit-health", "event": "verdict",
                       "instance_id": node, "check": check, "status": status,
                       "reason": "3 of 4 EFA devices" if status == "fail" else "ok"})  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if expected in line]
    assert len(errors) == 1, done.stderr
    assert all(" warning: " in line or " info: " in line or ": valid (" in line
               for line in lines if line not in errors), done.stderr  # fmt: skip


# --- help and bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "logs"])
def test_help(command: str, tmp_path: Path) -> None:
    done = run_cli(command, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: hyperpod-kit {command}")
    flags = ["--format", "--watch", "exit codes"] if command == "status" else [
        "--node", "--group", "--since", "--follow", "--grep", "--save"]  # fmt: skip
    for flag in flags:
        assert flag in done.stdout


@pytest.mark.parametrize("command", ["status", "logs"])
@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("missing.yaml", "missing.yaml (file): no such file"),
        (str(BAD / "yaml-tab.yaml"), "yaml-tab.yaml:"),
        (str(BAD / "unknown-nested-key.yaml"), "unknown-nested-key.yaml:"),
    ],
    ids=["missing-file", "bad-yaml", "unknown-key"],
)
def test_bad_file(command: str, file: str, expected: str, tmp_path: Path) -> None:
    done = run_cli(command, file, cwd=tmp_path)
    one_line_error(done, expected)
    assert "Hint:" in done.stderr


@pytest.mark.parametrize("command", ["status", "logs"])
def test_no_credentials(command: str, tmp_path: Path) -> None:
    done = run_cli(command, str(DEFAULT), "-q", cwd=tmp_path)
    one_line_error(done, "no AWS credentials found")


@pytest.mark.parametrize("command", ["status", "logs"])
def test_nothing_deployed(moto: MotoServer, command: str, tmp_path: Path) -> None:
    deploy_stacks(moto, "network", environment="someone-else")  # not ours: another environment
    done = hpk(moto, command, str(DEFAULT), "-q", cwd=tmp_path)
    one_line_error(done, f"nothing of environment {ENV} is deployed in us-west-2")


def test_credentials_of_another_account(moto: MotoServer, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(DEFAULT.read_text() + "account: '210987654321'\n")
    done = hpk(moto, "status", str(other), "-q", cwd=tmp_path)  # moto's account: 123456789012
    one_line_error(done, "the credentials are for account 123456789012")


def test_bad_flags(moto: MotoServer, tmp_path: Path) -> None:
    one_line_error(hpk(moto, "logs", str(DEFAULT), "-q", "--since", "yesterday", cwd=tmp_path),
                   "--since: 'yesterday'")  # fmt: skip
    one_line_error(hpk(moto, "logs", str(DEFAULT), "-q", "--grep", "(", cwd=tmp_path),
                   "--grep: '('")  # fmt: skip
    # an age beyond what CloudWatch keeps was an OverflowError traceback: one line, the bound
    too_old = hpk(moto, "logs", str(DEFAULT), "-q", "--since", "99999999d", cwd=tmp_path)
    one_line_error(too_old, "--since: '99999999d' goes back further than CloudWatch Logs keeps "
                   "events (3653 days, 10 years). Hint: an age up to 3653d")  # fmt: skip


def test_a_bad_interval_is_refused_when_parsed(tmp_path: Path) -> None:
    """nan was a ValueError in the middle of a watch: refused by the parser, before the file is
    read or AWS asked (no credentials needed to see it). Every kind: tests/unit/test_status.py."""
    done = run_cli("status", str(DEFAULT), "--watch", "--interval", "nan", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "Traceback" not in done.stderr
    assert ("error: argument --interval: 'nan' is not a number of seconds above 0 and at most "
            "7200") in done.stderr  # fmt: skip


# --- status --------------------------------------------------------------------------------------


AREAS = environment_areas(load_environment(DEFAULT).config)
NOT_PUBLISHED = [  # what the stacks' handles would name, absent in these tests
    f"cluster {ENV} (no /hyperpod-kit/{ENV}/cluster)",
    f"file system (no file_system_id in /hyperpod-kit/{ENV}/storage)",
    f"monitoring (no /hyperpod-kit/{ENV}/monitoring)",
]


@pytest.mark.parametrize("area", AREAS)
def test_each_stack_alone_is_not_deployed(moto: MotoServer, area: str, tmp_path: Path) -> None:
    """One stack of the environment deployed (its state found by the environment tag): the
    others, the cluster, the file system and monitoring are named as not deployed, exit 1
    (it was HEALTHY and exit 0, which the pipelines took as the go-ahead)."""
    deploy_stacks(moto, area)
    done = hpk(moto, "status", str(DEFAULT), "-q", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert [(s["name"], s["status"]) for s in data["stacks"]] == [
        (f"{ENV}-{area}", "CREATE_COMPLETE")]  # fmt: skip
    assert data["cluster"] is None and data["state"] == "not deployed"
    assert data["missing"] == [f"stack {ENV}-{a}" for a in AREAS if a != area] + NOT_PUBLISHED
    assert data["expected"]["areas"] == AREAS
    if area == "network":  # the text says the same
        text = hpk(moto, "status", str(DEFAULT), "-q", cwd=tmp_path)
        assert text.returncode == 1
        assert text.stdout.startswith(f"environment {ENV} (us-west-2): NOT DEPLOYED\n")
        for a in AREAS[1:]:
            assert f"  {f'{ENV}-{a}':<32} not deployed\n" in text.stdout
            assert f"  not deployed: stack {ENV}-{a}\n" in text.stdout


def test_a_cluster_without_a_group_of_the_file(moto: MotoServer, tmp_path: Path) -> None:
    deploy_cluster(moto, without="login")
    done = hpk(moto, "status", str(DEFAULT), "-q", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["state"] == "not deployed"
    assert f"instance group login of cluster {ENV} (1 nodes in the file)" in data["missing"]
    assert [g["name"] for g in data["cluster"]["groups"]] == ["controller", "compute"]


def test_a_healthy_cluster_alone(moto: MotoServer, tmp_path: Path) -> None:
    """The cluster healthy, every group at the file's count; the rest of the environment is
    not there: not deployed, each part named."""
    group, nodes = deploy_cluster(moto)
    now = int(time.time() * 1000)
    for node in nodes:
        ship(moto, group, f"hyperpod-kit/health/{node}",
             [verdict(node, "ok", check="efa"), verdict(node, "ok", check="fsx")],
             at_ms=now)  # fmt: skip
    done = hpk(moto, "status", str(DEFAULT), "-q", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"environment {ENV} (us-west-2): NOT DEPLOYED")
    assert f"cluster {ENV}: InService" in done.stdout
    assert "group compute          ml.g5.8xlarge      2/2 nodes" in done.stdout
    for node in nodes:
        assert f"node {node} " in done.stdout
    seen = "health healthy (log-group verdict, 2026-11-25T01:00:00Z): 2 checks passed"
    assert done.stdout.count(seen) == len(nodes)
    assert f"logs: {group}" in done.stdout
    data = json.loads(hpk(moto, "status", str(DEFAULT), "-q", "--format", "json",
                          cwd=tmp_path).stdout)  # fmt: skip
    health = {n["instance_id"]: n["health"] for n in data["cluster"]["nodes"]}
    assert {n: (h["value"], h["source"], h["time"]) for n, h in health.items()} == dict.fromkeys(
        nodes, ("healthy", "log-group verdict", "2026-11-25T01:00:00Z"))  # fmt: skip
    assert data["diagnoses"] == []
    assert data["missing"] == [f"stack {ENV}-{a}" for a in AREAS if a not in ("network",
                               "cluster")] + NOT_PUBLISHED[1:]  # fmt: skip
    assert not [p for p in data["problems"] if not p.startswith("not deployed: ")]


def test_a_node_without_verdicts_is_unknown(moto: MotoServer, tmp_path: Path) -> None:
    """No verdict in the log group (the runner has not shipped one yet): unknown, not unhealthy."""
    deploy_cluster(moto)
    done = hpk(moto, "status", str(DEFAULT), "-q", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # the rest is not deployed
    data = json.loads(done.stdout)
    assert {(n["health"]["value"], n["health"]["source"], n["health"]["time"])
            for n in data["cluster"]["nodes"]} == {("unknown", "unknown", None)}  # fmt: skip
    assert [(g["name"], g["target"], g["current"]) for g in data["cluster"]["groups"]] == [
        ("controller", 1, 1), ("login", 1, 1), ("compute", 2, 2)]  # fmt: skip


def test_unhealthy_node_and_an_alarm_are_problems_and_diagnosed(
    moto: MotoServer, tmp_path: Path
) -> None:
    group, nodes = deploy_cluster(moto)
    now = int(time.time() * 1000)
    ship(moto, group, f"hyperpod-kit/health/{nodes[-1]}",
         [verdict(nodes[-1], "ok", time_="2026-11-25T00:00Z"),
          verdict(nodes[-1], "fail", time_="2026-11-25T01:00Z")], at_ms=now)  # fmt: skip
    moto.client("cloudwatch").put_metric_alarm(
        AlarmName=f"{ENV}-node-check-failures", MetricName="NodeCheckFailures",
        Namespace=f"HyperPodKit/{ENV}", Statistic="Sum", Period=300, EvaluationPeriods=1,
        Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold",
    )  # fmt: skip
    moto.client("cloudwatch").set_alarm_state(
        AlarmName=f"{ENV}-node-check-failures", StateValue="ALARM", StateReason="1 failure"
    )
    done = hpk(moto, "status", str(DEFAULT), "-q", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    # the rest of the environment is missing: that comes first; the node and the alarm are
    # still problems, and the node is still diagnosed
    assert "NOT DEPLOYED" in done.stdout.splitlines()[0]
    assert f"node {nodes[-1]} (compute): unhealthy: efa: 3 of 4 EFA devices" in done.stdout
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"  node {nodes[-1]} compute ")]
    assert line.endswith("health unhealthy (log-group verdict, 2026-11-25T01:00Z): efa: 3 of 4 "
                         "EFA devices")  # the newest run only, with its time  # fmt: skip
    assert f"alarms in ALARM: {ENV}-node-check-failures" in done.stdout
    # the diagnosis names the node, its check and what to do
    assert ("likely cause: A check of hyperpod-kit's health runner failed on the node"
            in done.stdout)  # fmt: skip
    assert (f"evidence [{nodes[-1]} (compute)]: health runner verdict at 2026-11-25T01:00Z: "
            "efa: 3 of 4 EFA devices") in done.stdout  # fmt: skip
    data = json.loads(hpk(moto, "status", str(DEFAULT), "-q", "--format", "json",
                          cwd=tmp_path).stdout)  # fmt: skip
    assert data["state"] == "not deployed"
    health = {n["instance_id"]: n["health"] for n in data["cluster"]["nodes"]}
    assert health[nodes[-1]] | {"stream": None} == {
        "value": "unhealthy", "source": "log-group verdict", "time": "2026-11-25T01:00Z",
        "reason": "efa: 3 of 4 EFA devices", "stream": None,
        "failed": ["efa: 3 of 4 EFA devices"]}  # fmt: skip
    assert [h["value"] for n, h in health.items() if n != nodes[-1]] == ["unknown"] * 3
    (diagnosis,) = data["diagnoses"]
    assert (diagnosis["signature"], diagnosis["origin"]) == (
        "node-unhealthy", f"{nodes[-1]} (compute)")  # fmt: skip


# --- logs ----------------------------------------------------------------------------------------


def test_logs_of_the_nodes(moto: MotoServer, tmp_path: Path) -> None:
    group, nodes = deploy_cluster(moto)
    now = int(time.time() * 1000)
    for node in nodes:
        ship(moto, group, f"LifecycleConfig/{node.rsplit('-', 1)[0]}/{node}",
             [f"step: 10-base on {node}", "lifecycle complete"], at_ms=now)  # fmt: skip
        ship(moto, group, f"hyperpod-kit/health/{node}", [verdict(node, "ok")], at_ms=now + 10)
    ship(moto, group, "hyperpod-kit/lifecycle/" + nodes[0], ["old line"], at_ms=now - 3 * 3600_000)
    # a node's output with terminal controls: a title, a clear screen, a carriage return
    hostile = "\x1b]0;owned\x07\x1b[2J\rfake prompt\tkept"
    ship(moto, group, "hyperpod-kit/lifecycle/" + nodes[1], [hostile], at_ms=now)
    done = hpk(moto, "logs", str(DEFAULT), "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout and "\x07" not in done.stdout
    assert " \\x1b]0;owned\\x07\\x1b[2J\\rfake prompt\tkept\n" in done.stdout
    for node in nodes:
        assert f"==> LifecycleConfig/{node.rsplit('-', 1)[0]}/{node} <==" in done.stdout
        assert f"step: 10-base on {node}" in done.stdout
    one = hpk(moto, "logs", str(DEFAULT), "-q", "--node", nodes[1], cwd=tmp_path).stdout
    assert f"on {nodes[1]}" in one and f"on {nodes[0]}" not in one
    recent = hpk(moto, "logs", str(DEFAULT), "-q", "--since", "1h", cwd=tmp_path).stdout
    assert "old line" in done.stdout and "old line" not in recent
    grep = hpk(moto, "logs", str(DEFAULT), "-q", "--grep", "complete$", cwd=tmp_path).stdout
    assert grep.count("lifecycle complete") == len(nodes) and "step:" not in grep
    by_group = hpk(moto, "logs", str(DEFAULT), "-q", "--group", "compute", cwd=tmp_path).stdout
    assert "hyperpod-kit/health/compute-" in by_group and "LifecycleConfig/compute/" in by_group
    assert "controller-0" not in by_group


def test_logs_save_and_never_destroy(moto: MotoServer, tmp_path: Path) -> None:
    group, nodes = deploy_cluster(moto)
    now = int(time.time() * 1000)
    for node in nodes:
        ship(
            moto,
            group,
            f"LifecycleConfig/{node.rsplit('-', 1)[0]}/{node}",
            [f"hello from {node}"],
            at_ms=now,
        )
    out = tmp_path / "exported"
    done = hpk(moto, "logs", str(DEFAULT), "-q", "--save", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    marker = read_marker(out)
    assert marker is not None and marker["kind"] == LOGS and marker["log_group"] == group
    files = sorted(p.name for p in out.iterdir() if p.name != MARKER)
    assert files == sorted(f"LifecycleConfig__{n.rsplit('-', 1)[0]}__{n}.log" for n in nodes)
    for node in nodes:
        saved = out / f"LifecycleConfig__{node.rsplit('-', 1)[0]}__{node}.log"
        assert f"hello from {node}" in saved.read_text()
    again = hpk(moto, "logs", str(DEFAULT), "-q", "--save", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # our own export is replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    refused = hpk(moto, "logs", str(DEFAULT), "-q", "--save", str(mine), cwd=tmp_path)
    one_line_error(refused, "did not write")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_nodes_list_on_moto_and_without_credentials(moto: MotoServer, tmp_path: Path) -> None:
    """`nodes list` reads the cluster moto models (its nodes InService, no verdicts yet); without
    credentials any action is one line, exit 2 (the batch operations: tests/unit/test_nodes.py,
    moto has none of them)."""
    _, nodes = deploy_cluster(moto)
    done = hpk(moto, "nodes", str(DEFAULT), "list", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for node in nodes:
        assert f"node {node} " in done.stdout
    assert "health unknown" in done.stdout
    node = "i-0123456789abcdef0"  # moto's ids (controller-0) are not EC2's
    one_line_error(hpk(None, "nodes", str(DEFAULT), "reboot", node, "-q", cwd=tmp_path),
                   "no AWS credentials found")  # fmt: skip
