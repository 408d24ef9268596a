"""`hyperpod-kit nodes`: every AWS call through botocore's Stubber (responses and parameters
checked against the pinned model; moto models none of the batch node operations): the list, one
node replaced, a dry run of several, the guards (controller, last node), the unhealthy selection
from recorded verdicts, the delete's edit to the file, the Slurm note, bad input as one line and
exit 2, and the operator's policy through the repository's policy lint."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from hyperpod_kit.cli.main import main
from hyperpod_kit.cli.nodes import file_first
from hyperpod_kit.config import aws as aws_module
from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.operations.nodes import SOURCES
from hyperpod_kit.operator_policy import operator_policy
from tests.conftest import REPO
from tests.unit.test_status import (
    NODE,
    OTHER,
    T0,
    Stubs,
    cluster_handle,
    described_cluster,
    log_events,
    parameters,
    stack,
    verdict,
)

FILE = "environments/default.yaml"  # Slurm: controller 1, login 1, compute 2
CONTROLLER = "i-0c0c0c0c0c0c0c0c0"
LOGIN = "i-0d0d0d0d0d0d0d0d0"
THIRD = "i-0e0e0e0e0e0e0e0e0"  # a third compute node (a group scaled up by hand)
NODES = [(CONTROLLER, "controller"), (LOGIN, "login"), (NODE, "compute"), (OTHER, "compute"),
         (THIRD, "compute")]  # fmt: skip


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubs]:
    """The command's facade is the stubbed one (its credentials are fakes: `has_credentials`)."""
    s = Stubs(AwsFacade("us-west-2"))
    monkeypatch.setattr(aws_module, "AwsFacade", lambda region, **_: s.facade)
    monkeypatch.chdir(REPO)
    yield s
    s.done()


@functools.cache
def _config() -> EnvironmentConfig:
    return load_environment(REPO / FILE).config


def deployed(
    stubs: Stubs, *, health: dict[str, str] | None = None, compute: int | None = None
) -> None:
    """The environment found (its cluster stack and handle), the cluster and its nodes; with
    `health`, each node's newest verdict read in order ("" for none)."""
    config = _config()
    cluster_stack = stack(f"{config.name}-cluster", "CREATE_COMPLETE", config.name)
    stubs.on("cloudformation", "describe_stacks", {"Stacks": [cluster_stack]})
    parameters(stubs, config.name, {"cluster": cluster_handle(config)})
    counts = None if compute is None else {g.name: (g.instance_count,) * 2
                                           for g in config.cluster.instance_groups}  # fmt: skip
    if counts is not None:  # compute's target and current in AWS (scaled by hand)
        counts["compute"] = (compute, compute)
    stubs.on("sagemaker", "describe_cluster", described_cluster(config, counts=counts))
    stubs.on("sagemaker", "list_cluster_nodes", {"ClusterNodeSummaries": [
        {"InstanceGroupName": group, "InstanceId": node, "InstanceType": "ml.m5.xlarge",
         "LaunchTime": T0, "InstanceStatus": {"Status": "Running"}}
        for node, group in NODES]})  # fmt: skip
    for node, _ in NODES if health is not None else []:
        said = (health or {}).get(node, "")
        stubs.on("logs", "get_log_events", log_events(*([verdict(node, said)] if said else [])))


def batch(
    stubs: Stubs, operation: str, ids: list[str], failed: tuple[dict[str, str], ...] = ()
) -> None:
    """The batch operation's answer for `ids` (each a success unless `failed` names it), its
    parameters checked."""
    refused = {f["NodeId"] for f in failed}
    response: dict[str, Any] = {}
    if [i for i in ids if i not in refused]:  # the model wants at least one, or none at all
        response["Successful"] = [i for i in ids if i not in refused]
    if failed:
        response["Failed"] = list(failed)
    stubs.stubbers["sagemaker"].add_response(
        operation, response, {"ClusterName": "hyperpod-dev", "NodeIds": ids}
    )


def test_list_shows_every_node_with_its_health(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs, health={NODE: "fail", OTHER: "ok"})
    assert main(["nodes", FILE, "list", "-q"]) == 0
    out = capsys.readouterr().out
    for node, group in NODES:
        assert f"node {node} {group}" in out
    assert "health unhealthy" in out and "efa: 3 of 4 EFA devices" in out


def test_list_json_of_the_unhealthy_nodes(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(stubs, health={NODE: "fail", OTHER: "ok"})
    assert main(["nodes", FILE, "list", "--unhealthy", "--format", "json", "-q"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [n["instance_id"] for n in shown["nodes"]] == [NODE]


def test_replace_one_node_calls_the_api_and_says_what_happens_to_slurm_jobs(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs)
    batch(stubs, "batch_replace_cluster_nodes", [NODE])
    assert main(["nodes", FILE, "replace", NODE, "-q"]) == 0
    out = capsys.readouterr().out
    assert f"replace: {NODE} started" in out
    assert "Slurm: " in out and "does not drain the node" in out and "--requeue" in out
    assert SOURCES["replace"] in out and "volume" in out


def test_several_nodes_are_a_dry_run_until_yes(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs)  # the dry run calls no batch operation (the Stubber would refuse it)
    assert main(["nodes", FILE, "reboot", NODE, OTHER, "-q"]) == 0
    captured = capsys.readouterr()
    assert "would reboot 2 node(s)" in captured.out
    assert "dry run: nothing done" in captured.err and "--yes" in captured.err
    deployed(stubs)
    batch(stubs, "batch_reboot_cluster_nodes", [NODE, OTHER])
    assert main(["nodes", FILE, "reboot", NODE, OTHER, "--yes", "-q"]) == 0
    assert f"reboot: {OTHER} started" in capsys.readouterr().out


def test_the_controller_is_refused_without_force(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs)
    assert main(["nodes", FILE, "replace", CONTROLLER, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "controller" in err[0] and "--force" in err[0], err
    # with --force the call is made; HyperPod's own refusal is exit 1, named per node
    deployed(stubs)
    failed = {"NodeId": CONTROLLER, "ErrorCode": "InvalidInstanceStatus", "Message": "controller"}
    batch(stubs, "batch_replace_cluster_nodes", [CONTROLLER], (failed,))
    assert main(["nodes", FILE, "replace", CONTROLLER, "--force", "-q"]) == 1
    assert f"{CONTROLLER} not done: InvalidInstanceStatus" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "group"), [
    (["delete", LOGIN], "login"),
    (["reboot", "--group", "compute", "--yes"], "compute"),
])  # fmt: skip
def test_the_last_nodes_of_a_group_are_refused_without_force(
    stubs: Stubs, capsys: pytest.CaptureFixture[str], argv: list[str], group: str
) -> None:
    deployed(stubs)
    assert main(["nodes", FILE, *argv, "-q"]) == 2
    err = capsys.readouterr().err
    assert f"last nodes of group {group}" in err and "--force" in err


def test_unhealthy_selects_from_the_recorded_verdicts(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs, health={NODE: "fail", OTHER: "ok", THIRD: "ok"})
    batch(stubs, "batch_replace_cluster_nodes", [NODE])
    assert main(["nodes", FILE, "replace", "--unhealthy", "-q"]) == 0
    assert f"replace: {NODE} started" in capsys.readouterr().out


def test_delete_prints_the_edit_to_the_file_at_its_line(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs)
    batch(stubs, "batch_delete_cluster_nodes", [NODE])
    assert main(["nodes", FILE, "delete", NODE, "-q"]) == 0
    out = capsys.readouterr().out
    loaded = load_environment(FILE)
    line = loaded.at("cluster.instance_groups[2].instance_count")
    assert line == f"{FILE}:36"  # the compute group's line
    assert f"{line} cluster.instance_groups[compute].instance_count: 2 -> 1" in out
    assert "CloudFormation restores it at the first deploy" in out
    assert SOURCES["delete"] in out


def test_delete_from_a_group_scaled_up_by_hand_needs_no_edit(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed(stubs, compute=3)  # 3 in AWS, 2 in the file: after the delete, the file's count
    batch(stubs, "batch_delete_cluster_nodes", [NODE])
    assert main(["nodes", FILE, "delete", NODE, "-q"]) == 0
    out = capsys.readouterr().out
    assert "no edit needed" in out and "instance_count:" not in out


@pytest.mark.parametrize(("argv", "said"), [
    (["replace", "i-nothex"], "'i-nothex' is not an instance id"),
    (["replace"], "no node named"),
    (["move", NODE], "no target group"),  # move needs --to
    (["move", NODE, "--to", "compute"], "MoveClusterNodes needs both clusters InService, "
     "orchestrated by EKS"),  # default.yaml is Slurm
    (["reboot", NODE, "--to", "compute"], "--to is for move only"),
    (["shove", NODE], "'shove' is not an action"),
])  # fmt: skip
def test_bad_words_are_one_line_before_aws(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str],
    said: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: pytest.fail("asked AWS"))
    assert main(["nodes", FILE, *argv, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Hint: " in err[0], err


@pytest.mark.parametrize(("argv", "said"), [
    (["replace", "i-0123456789abcdef0"], "i-0123456789abcdef0 is not a node of cluster"),
    (["reboot", "--group", "gpu"], "--group gpu: no such instance group"),
])  # fmt: skip
def test_an_unknown_node_or_group_is_one_line(
    stubs: Stubs, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    deployed(stubs)
    assert main(["nodes", FILE, *argv, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Hint: " in err[0], err


def test_no_credentials_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: False)
    assert main(["nodes", FILE, "reboot", NODE, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no AWS credentials" in err[0], err


def test_the_action_may_come_first_with_the_default_file() -> None:
    args = argparse.Namespace(file="replace", action=NODE, ids=[OTHER])
    file_first(args, FILE)
    assert (args.file, args.action, args.ids) == (FILE, "replace", [NODE, OTHER])
    args = argparse.Namespace(file=FILE, action=None, ids=[])
    file_first(args, FILE)
    assert args.action == "list"


def test_the_operator_policy_passes_the_policy_lint_and_names_this_cluster_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperpod_kit.rehearsal.policy_lint import lint_document

    monkeypatch.chdir(REPO)
    assert main(["nodes", FILE, "--print-policy", "-q"]) == 0
    printed = json.loads(capsys.readouterr().out)
    config = load_environment(FILE).config.model_copy(update={"account": "111122223333"})
    policy = operator_policy(config)
    assert printed["Statement"][0]["Resource"].startswith("arn:aws:sagemaker:us-west-2:*:")
    assert lint_document(policy) == []
    sagemaker = [s for s in policy["Statement"] if str(s["Action"]).count("sagemaker:")]
    assert {a for s in sagemaker for a in s["Action"]} == {
        "sagemaker:BatchDeleteClusterNodes", "sagemaker:BatchRebootClusterNodes",
        "sagemaker:BatchReplaceClusterNodes", "sagemaker:DescribeCluster",
        "sagemaker:DescribeClusterNode", "sagemaker:ListClusterNodes",
    }  # fmt: skip
    # MoveClusterNodes only where the cluster can move nodes (EKS, continuous provisioning)
    eks = load_environment(REPO / "environments" / "eks-platform.yaml").config
    assert eks.cluster.node_provisioning == "continuous"
    moves = [a for s in operator_policy(eks)["Statement"] for a in s["Action"]]
    assert "sagemaker:MoveClusterNodes" in moves
    assert lint_document(operator_policy(eks)) == []
    for s in sagemaker:  # this environment's cluster only: its account, region and tag
        assert s["Resource"] == "arn:aws:sagemaker:us-west-2:111122223333:cluster/*"
        assert s["Condition"] == {
            "StringEquals": {"aws:ResourceTag/hyperpod-kit:environment": "hyperpod-dev"}
        }
    assert all("*" not in str(s["Action"]) for s in policy["Statement"])


def test_the_operator_policy_grants_every_call_the_command_makes(stubs: Stubs) -> None:
    """Each AWS call of a list, an unhealthy replace, a reboot and a delete is one of the
    policy's actions: a call added to the command without its grant fails here."""
    called: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        called.add(f"{model.service_model.signing_name}:{model.name}")

    runs = [
        (["list"], {"health": {}}, None),
        (["replace", "--unhealthy"], {"health": {NODE: "fail"}}, "batch_replace_cluster_nodes"),
        (["reboot", NODE], {}, "batch_reboot_cluster_nodes"),
        (["delete", NODE], {}, "batch_delete_cluster_nodes"),
    ]
    for argv, kwargs, operation in runs:
        deployed(stubs, **kwargs)
        if operation is not None:
            batch(stubs, operation, [NODE])
        for stubber in stubs.stubbers.values():
            stubber.client.meta.events.register(
                "before-parameter-build", record, unique_id="nodes-policy"
            )
        assert main(["nodes", FILE, *argv, "-q"]) == 0
    granted = {
        a
        for s in operator_policy(_config())["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert "sagemaker:BatchReplaceClusterNodes" in called and "logs:GetLogEvents" in called
    assert called <= granted, called - granted


def test_the_calls_take_25_nodes_each_and_a_failed_call_leaves_the_rest_named(
    stubs: Stubs,
) -> None:
    from hyperpod_kit.operations import logs
    from hyperpod_kit.operations.nodes import Plan, act
    from hyperpod_kit.operations.status import NodeState

    ids = [f"i-{n:017x}" for n in range(27)]
    health = logs.Health("unknown", logs.UNKNOWN, "")
    nodes = [NodeState(i, "compute", "ml.g5.8xlarge", "Running", "", health, None) for i in ids]
    stubs.on("sagemaker", "batch_reboot_cluster_nodes", {"Successful": ids[:25]})
    stubs.on("sagemaker", "batch_reboot_cluster_nodes", "AccessDeniedException")
    out = act(stubs.facade, Plan("reboot", "hyperpod-dev", nodes))
    assert out.done == ids[:25]
    assert [i for i, _ in out.failed] == ids[25:]
    assert "not asked: sagemaker:BatchRebootClusterNodes: AccessDeniedException" in out.failed[0][1]


# --- move (MoveClusterNodes, botocore 1.44.8): EKS with continuous provisioning only ---

PLATFORM = "environments/eks-platform.yaml"  # EKS, continuous: train 4 (min 2), burst 0, p5
TRAIN = [f"i-0{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}{n}" for n in range(1, 5)]
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123def456"


def deployed_platform(
    stubs: Stubs, *, burst_type: str = "ml.p5.48xlarge", burst: tuple[str, ...] = ()
) -> None:
    """eks-platform.yaml's cluster as DescribeCluster and ListClusterNodes answer: train's four
    nodes, burst with `burst`; the EKS labels refused (the command goes on without them)."""
    config = load_environment(REPO / PLATFORM).config
    who = {
        "Account": config.account,
        "Arn": f"arn:aws:iam::{config.account}:user/op",
        "UserId": "op",
    }
    stubs.on("sts", "get_caller_identity", who)
    cluster_stack = stack(f"{config.name}-cluster", "CREATE_COMPLETE", config.name)
    stubs.on("cloudformation", "describe_stacks", {"Stacks": [cluster_stack]})
    parameters(stubs, config.name, {"cluster": cluster_handle(config)})
    groups = [("train", "ml.p5.48xlarge", len(TRAIN)), ("burst", burst_type, len(burst))]
    stubs.on(
        "sagemaker",
        "describe_cluster",
        {
            "ClusterArn": ARN,
            "ClusterName": config.cluster_name,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                {
                    "InstanceGroupName": n,
                    "InstanceType": t,
                    "TargetCount": k,
                    "CurrentCount": k,
                    "Status": "InService",
                }
                for n, t, k in groups
            ],
        },
    )
    stubs.on(
        "sagemaker",
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                {
                    "InstanceGroupName": group,
                    "InstanceId": node,
                    "InstanceType": kind,
                    "LaunchTime": T0,
                    "InstanceStatus": {"Status": "Running"},
                }
                for nodes, group, kind in (
                    (TRAIN, "train", "ml.p5.48xlarge"),
                    (burst, "burst", burst_type),
                )
                for node in nodes
            ]
        },
    )
    stubs.on("eks", "describe_cluster", "AccessDeniedException")  # fmt: skip


def moved(stubs: Stubs, ids: list[str], failed: tuple[dict[str, str], ...] = ()) -> None:
    """MoveClusterNodes' answer for `ids` from train to burst, its parameters checked."""
    refused = {f["NodeId"] for f in failed}
    response: dict[str, Any] = {}
    if [i for i in ids if i not in refused]:
        response["Successful"] = [i for i in ids if i not in refused]
    if failed:
        response["Failed"] = list(failed)
    stubs.stubbers["sagemaker"].add_response("move_cluster_nodes", response, {
        "SourceClusterArn": ARN, "SourceInstanceGroupName": "train", "TargetClusterArn": ARN,
        "TargetInstanceGroupName": "burst", "NodeIds": ids})  # fmt: skip


def test_move_calls_the_api_by_arn_and_prints_both_groups_edits(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed_platform(stubs)
    moved(stubs, [TRAIN[0]])
    assert main(["nodes", PLATFORM, "move", TRAIN[0], "--to", "burst", "-q"]) == 0
    out = capsys.readouterr().out
    assert f"move: {TRAIN[0]} started (to group burst" in out
    loaded = load_environment(PLATFORM)
    train = loaded.at("cluster.instance_groups[0].instance_count")
    burst = loaded.at("cluster.instance_groups[1].instance_count")
    assert f"{train} cluster.instance_groups[train].instance_count: 4 -> 3" in out
    assert f"{burst} cluster.instance_groups[burst].instance_count: 0 -> 1" in out
    assert "EBS volumes are replaced" in out and SOURCES["move"] in out
    assert "Slurm" not in out


def test_a_move_of_several_nodes_is_a_dry_run_until_yes_then_one_call(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed_platform(stubs)  # the dry run calls no MoveClusterNodes (the Stubber would refuse)
    assert main(["nodes", PLATFORM, "move", *TRAIN[:2], "--to", "burst", "-q"]) == 0
    captured = capsys.readouterr()
    assert "would move 2 node(s) to group burst" in captured.out
    assert "dry run: nothing done" in captured.err
    deployed_platform(stubs)
    failed = {"NodeId": TRAIN[1], "Code": "InvalidNodeStatus", "Message": "not Running"}
    moved(stubs, TRAIN[:2], (failed,))
    assert main(["nodes", PLATFORM, "move", *TRAIN[:2], "--to", "burst", "--yes", "-q"]) == 1
    captured = capsys.readouterr()
    assert f"move: {TRAIN[0]} started" in captured.out
    assert f"move: {TRAIN[1]} not done: InvalidNodeStatus: not Running" in captured.err


def test_moving_every_node_of_a_group_is_refused_without_force(
    stubs: Stubs, capsys: pytest.CaptureFixture[str]
) -> None:
    deployed_platform(stubs, burst=(NODE, OTHER))  # burst has no min_instance_count
    assert main(["nodes", PLATFORM, "move", "--group", "burst", "--to", "train", "--yes",
                 "-q"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "last nodes of group burst" in err and "--force" in err


@pytest.mark.parametrize(("argv", "setup", "said"), [
    (["move", TRAIN[0], "--to", "gpu"], {}, "--to gpu: no such instance group in cluster"),
    (["move", TRAIN[0], "--to", "train"], {}, f"{TRAIN[0]} is in group train already"),
    (["move", TRAIN[0], "--to", "burst"], {"burst_type": "ml.g5.8xlarge"},
     "group burst runs ml.g5.8xlarge (HyperPod refuses: NodeInstanceTypeMismatch)"),
    (["move", *TRAIN[:3], "--to", "burst", "--yes"], {},
     "leave group train 1 node(s), below its min_instance_count 2"),
])  # fmt: skip
def test_a_move_hyperpod_would_refuse_is_one_line(
    stubs: Stubs, capsys: pytest.CaptureFixture[str], argv: list[str], setup: dict[str, str],
    said: str,
) -> None:  # fmt: skip
    deployed_platform(stubs, **setup)  # type: ignore[arg-type]
    assert main(["nodes", PLATFORM, *argv, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Hint: " in err[0], err


def test_moves_go_50_nodes_a_call_one_source_group_each() -> None:
    from hyperpod_kit.operations import logs
    from hyperpod_kit.operations.nodes import Plan, _calls
    from hyperpod_kit.operations.status import NodeState

    health = logs.Health("unknown", logs.UNKNOWN, "")
    a = [
        NodeState(f"i-{n:017x}", "a", "ml.p5.48xlarge", "Running", "", health, None)
        for n in range(52)
    ]
    b = [NodeState(f"i-{n:017x}", "b", "ml.p5.48xlarge", "Running", "", health, None)
         for n in range(100, 103)]  # fmt: skip
    calls = _calls(Plan("move", "c", [*a[:26], *b, *a[26:]], target="t", cluster_arn=ARN))
    assert [(len(ids), p["SourceInstanceGroupName"]) for ids, p in calls] == [
        (50, "a"), (2, "a"), (3, "b")]  # fmt: skip
    assert all(p["TargetInstanceGroupName"] == "t" and p["TargetClusterArn"] == ARN
               for _, p in calls)  # fmt: skip
