"""`cluster.operator_policy: true`: the operator's policy as a managed policy of the cluster stack
(the statements `nodes --print-policy` prints, from one function), with its ARN as an output,
through both gates; and the rehearsal plays the operator with it, and fails when it loses a
grant."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_kit.app import FEATURE_FLAGS
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.constructs.operator_policy import NodeOperatorPolicy
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.naming import parameter_name
from hyperpod_kit.operator_policy import OUTPUT, operator_policy
from hyperpod_kit.rehearsal.actors import operator_calls
from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.check import check_calls
from hyperpod_kit.rehearsal.model import Moment
from tests.conftest import default_data, merge
from tests.unit.test_rehearsal_engine import ACCOUNT, REGION, write_assembly

AFTER = Moment.after_deploy()


def _config(**cluster: Any) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), {"cluster": cluster}))


def test_the_setting_is_off_unless_asked() -> None:
    assert _config().cluster.operator_policy is False
    assert _config(operator_policy=True).cluster.operator_policy is True
    with pytest.raises(ValueError, match="operator_policy"):
        _config(operator_policy="sometimes")


def _joined(value: Any) -> Any:
    """A template's `Fn::Join` of literals and `Ref AWS::AccountId`, as the deploy makes it."""
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(ACCOUNT if p == {"Ref": "AWS::AccountId"} else p for p in parts)
    return value


def _by_sid(statements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    def actions(a: str | list[str]) -> list[str]:
        return sorted([a] if isinstance(a, str) else a)

    return {s["Sid"]: {**s, "Action": actions(s["Action"]), "Resource": _joined(s["Resource"])}
            for s in statements}  # fmt: skip


def test_the_managed_policy_holds_what_print_policy_prints_and_passes_both_gates(
    tmp_path: Path,
) -> None:
    config = _config(operator_policy=True)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context=dict(FEATURE_FLAGS))
    stack = cdk.Stack(app, "Cluster", env=cdk.Environment(account=ACCOUNT, region=config.region))
    NodeOperatorPolicy(stack, "OperatorPolicy", config=config)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()
    template = Template.from_stack(stack)
    ((logical, policy),) = template.find_resources("AWS::IAM::ManagedPolicy").items()
    assert policy["Properties"].get("Roles") is None  # attached to no one
    printed = operator_policy(config.model_copy(update={"account": ACCOUNT}))
    assert _by_sid(policy["Properties"]["PolicyDocument"]["Statement"]) == _by_sid(
        printed["Statement"]
    )
    assert template.to_json()["Outputs"][OUTPUT]["Value"] == {"Ref": logical}
    report = check_assembly(tmp_path / "cdk.out")
    assert not report.findings, [f.render() for f in report.findings]


# --- the rehearsal -----------------------------------------------------------------------------


def _app(tmp_path: Path, document: dict[str, Any], *, output: bool = True) -> Assembly:
    """A cluster stack with the cluster and the operator's managed policy (and its output)."""
    config = _config()
    cluster: dict[str, Any] = {"Resources": {
        "Cluster": {"Type": "AWS::SageMaker::Cluster",
                    "Properties": {"ClusterName": config.cluster_name, "InstanceGroups": []}},
        "OperatorPolicy": {"Type": "AWS::IAM::ManagedPolicy",
                           "Properties": {"PolicyDocument": document}},
    }}  # fmt: skip
    if output:
        cluster["Outputs"] = {OUTPUT: {"Value": {"Ref": "OperatorPolicy"}}}
    folder = write_assembly(tmp_path / "cdk.out", {"net": {"Resources": {}}, "cluster": cluster},
                            {"cluster": ["net"]})  # fmt: skip
    return Assembly.load(folder)


def _policy() -> dict[str, Any]:
    config = _config()
    assert config.region == REGION
    return operator_policy(config.model_copy(update={"account": ACCOUNT}))


def test_the_operator_lists_replaces_reboots_and_deletes_with_the_policy(tmp_path: Path) -> None:
    app = _app(tmp_path, _policy())
    calls = operator_calls(app, _config(), AFTER)
    assert {f"{c.service}:{c.operation}" for c in calls} == {
        "ssm:GetParameter", "sagemaker:DescribeCluster", "sagemaker:ListClusterNodes",
        "sagemaker:BatchReplaceClusterNodes", "sagemaker:BatchRebootClusterNodes",
        "sagemaker:BatchDeleteClusterNodes",
    }  # fmt: skip
    assert {c.actor for c in calls} == {
        "the operator (OperatorPolicy: hyperpod-kit nodes on cluster hyperpod-dev)"
    }
    report = check_calls(app, calls)
    assert report.ok, report.render()
    assert report.checked == 6


@pytest.mark.parametrize(("sid", "lost", "call"), [
    ("NodeOperations", "sagemaker:BatchDeleteClusterNodes", "hyperpod-kit nodes delete"),
    ("ReadCluster", "sagemaker:ListClusterNodes", "hyperpod-kit nodes list"),
])  # fmt: skip
def test_the_rehearsal_fails_when_the_policy_loses_a_grant(
    tmp_path: Path, sid: str, lost: str, call: str
) -> None:
    document = copy.deepcopy(_policy())
    (statement,) = [s for s in document["Statement"] if s["Sid"] == sid]
    statement["Action"] = [a for a in statement["Action"] if a != lost]
    app = _app(tmp_path, document)
    (problem,) = check_calls(app, operator_calls(app, _config(), AFTER)).problems
    assert problem.kind == "denied"
    assert problem.actor.startswith("the operator (OperatorPolicy")
    assert problem.message.startswith(f"{lost} on arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/")
    assert f"[{call}]" in problem.message


def test_the_discovery_parameter_outside_the_policy_is_named(tmp_path: Path) -> None:
    document = copy.deepcopy(_policy())
    (find,) = [s for s in document["Statement"] if s["Sid"] == "FindCluster"]
    find["Resource"] = find["Resource"].replace("/hyperpod-dev/", "/another-env/")
    app = _app(tmp_path, document)
    (problem,) = check_calls(app, operator_calls(app, _config(), AFTER)).problems
    name = parameter_name("hyperpod-dev", "cluster")
    assert f"ssm:GetParameter on arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}" in (
        problem.message
    )


def test_without_the_output_there_is_no_operator(tmp_path: Path) -> None:
    assert operator_calls(_app(tmp_path, _policy(), output=False), _config(), AFTER) == []
