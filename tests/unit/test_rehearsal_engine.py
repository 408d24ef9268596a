"""The rehearsal's engine on small hand-built assemblies: deploy order at resource level, values,
the IAM evaluator (against moto's), the call table, and the report's verdicts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config.facts.managed_policies import NAMES, managed_policies
from hyperpod_kit.rehearsal.assembly import Assembly, AssemblyError
from hyperpod_kit.rehearsal.check import check_calls
from hyperpod_kit.rehearsal.iam import Statement, evaluate
from hyperpod_kit.rehearsal.model import Call, Moment, ResourceRef
from hyperpod_kit.rehearsal.permissions import Permissions, operations

REPO = Path(__file__).resolve().parents[2]
ACCOUNT, REGION = "111122223333", "us-west-2"


def write_assembly(
    folder: Path, stacks: dict[str, dict[str, Any]], deps: dict[str, list[str]]
) -> Path:
    """A cloud assembly folder as CDK writes it: manifest.json and one template per stack."""
    folder.mkdir(parents=True, exist_ok=True)
    artifacts: dict[str, Any] = {}
    for name, template in stacks.items():
        (folder / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "environment": f"aws://{ACCOUNT}/{REGION}",
            "properties": {"templateFile": f"{name}.template.json", "stackName": name},
            "dependencies": deps.get(name, []),
        }
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder


def role(name: str = "NodeRole") -> dict[str, Any]:
    return {name: {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}}}


def policy(role_id: str, actions: list[str], resource: Any, **extra: Any) -> dict[str, Any]:
    return {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyName": "p",
            "Roles": [{"Ref": role_id}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": resource}],
            },
        },
        **extra,
    }


def ssm_arn(name: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:", {"Ref": "AWS::Region"},
                              ":", {"Ref": "AWS::AccountId"}, f":parameter{name}"]]}  # fmt: skip


def put(role_ref: ResourceRef, moment: Moment, name: str) -> Call:
    return Call("hook", role_ref, moment, "ssm", "PutParameter", {"Name": name}, "aws ssm put")


# --- order ---------------------------------------------------------------------------------------


def cluster_app(tmp_path: Path, *, depends_on_policy: bool, studio_grant: bool) -> Assembly:
    cluster_res: dict[str, Any] = {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {"ClusterName": "c", "InstanceGroups": [
            {"ExecutionRole": {"Fn::GetAtt": ["NodeRole", "Arn"]}}]},
    }  # fmt: skip
    if depends_on_policy:
        cluster_res["DependsOn"] = ["NodePolicy"]
    cluster = {"Resources": {
        **role(), "NodePolicy": policy("NodeRole", ["ssm:PutParameter"], ssm_arn("/env/own/*")),
        "Cluster": cluster_res,
        # Same stack, not in the cluster's chain: created in parallel, too late to count.
        "LatePolicy": policy("NodeRole", ["ssm:PutParameter"], ssm_arn("/env/late/*")),
    }}  # fmt: skip
    studio: dict[str, Any] = {"Resources": {}}
    if studio_grant:
        studio["Resources"]["StudioGrant"] = {
            **policy("x", ["ssm:PutParameter"], ssm_arn("/env/slurm-jwt/*")),
            "Properties": {
                **policy("x", ["ssm:PutParameter"], ssm_arn("/env/slurm-jwt/*"))["Properties"],
                "Roles": [{"Fn::ImportValue": "NodeRoleName"}],
            },
        }
    cluster["Outputs"] = {"R": {"Value": {"Ref": "NodeRole"}, "Export": {"Name": "NodeRoleName"}}}
    folder = write_assembly(
        tmp_path / "cdk.out", {"net": {"Resources": {}}, "cluster": cluster, "studio": studio},
        {"cluster": ["net"], "studio": ["cluster"]},
    )  # fmt: skip
    return Assembly.load(folder)


FIRST = Moment("first provisioning", ResourceRef("cluster", "Cluster"))
NODE = ResourceRef("cluster", "NodeRole")


def test_a_grant_the_cluster_depends_on_counts_at_first_provisioning(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    report = check_calls(app, [put(NODE, FIRST, "/env/own/x")])
    assert report.ok, report.render()


def test_without_the_depends_on_the_grant_may_come_too_late(tmp_path: Path) -> None:
    """Today the cluster depends on its role's default policy; a regression of that must fail."""
    app = cluster_app(tmp_path, depends_on_policy=False, studio_grant=False)
    (problem,) = check_calls(app, [put(NODE, FIRST, "/env/own/x")]).problems
    assert problem.kind == "too-early"
    assert "cluster/NodePolicy is created after this actor runs" in problem.message
    assert "grant it in stack cluster" in problem.hint


def test_a_policy_beside_the_cluster_but_outside_its_chain_is_too_late(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    (problem,) = check_calls(app, [put(NODE, FIRST, "/env/late/x")]).problems
    assert problem.kind == "too-early" and "cluster/LatePolicy" in problem.message


def test_a_grant_in_a_later_stack_counts_only_after_the_deploy(tmp_path: Path) -> None:
    """Seen 1 of the issue: the Studio stack grants what the controller's hook writes."""
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=True)
    (problem,) = check_calls(app, [put(NODE, FIRST, "/env/slurm-jwt/alice")]).problems
    assert problem.kind == "too-early" and "studio/StudioGrant" in problem.message
    later = check_calls(app, [put(NODE, Moment.after_deploy(), "/env/slurm-jwt/alice")])
    assert later.ok, later.render()


def test_no_grant_at_all_names_the_action_the_arn_and_the_stack(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    (problem,) = check_calls(app, [put(NODE, FIRST, "/other/x")]).problems
    assert problem.kind == "denied"
    assert f"ssm:PutParameter on arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/other/x" in (
        problem.message
    )
    assert problem.hint == "grant it in stack cluster"


def test_a_call_the_table_does_not_know_is_a_problem(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    call = Call("hook", NODE, FIRST, "ssm", "LabelParameterVersion", {}, "aws ssm label")
    (problem,) = check_calls(app, [call]).problems
    assert problem.kind == "unknown-call" and "call_actions.json" in problem.message


def test_a_role_from_a_later_stack_does_not_exist_yet(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    call = put(ResourceRef("studio", "Nothing"), FIRST, "/env/own/x")
    (problem,) = check_calls(app, [call]).problems
    assert problem.kind == "no-role"


def test_values_resolve_through_imports_and_made_up_ids_are_stable(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=True)
    grant = app.resource(ResourceRef("studio", "StudioGrant"))["Properties"]["Roles"][0]
    assert app.referenced("studio", grant) == NODE
    name = app.physical_id("cluster", "NodeRole")
    assert name == app.physical_id("cluster", "NodeRole") and name.startswith("cluster-NodeRole-")
    assert app.attribute("cluster", "NodeRole", "Arn") == f"arn:aws:iam::{ACCOUNT}:role/{name}"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "manifest.json: the assembly's manifest is missing"),
        ({"manifest.json": "{not json"}, "manifest.json: the assembly's manifest is not JSON"),
        ({"manifest.json": json.dumps({"artifacts": {"s": {
            "type": "aws:cloudformation:stack", "properties": {"templateFile": "s.json"}}}})},
         "s.json: the template of s is missing"),
    ],
)  # fmt: skip
def test_an_unreadable_assembly_is_one_error(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(AssemblyError, match=re.escape(message)):
        Assembly.load(tmp_path)


# --- the evaluator -------------------------------------------------------------------------------


def _probe_pairs() -> list[tuple[dict[str, Any], str, str]]:
    """(statement, action, resource) from every managed policy the stacks attach: each action
    the statement names, spelled out, against its own resources and a foreign one."""
    cases = []
    for document in managed_policies().values():
        for raw in document["Statement"]:
            if raw.get("Condition") or "NotAction" in raw or "NotResource" in raw:
                continue
            actions = [raw["Action"]] if isinstance(raw["Action"], str) else raw["Action"]
            resources = [raw["Resource"]] if isinstance(raw["Resource"], str) else raw["Resource"]
            for action in [*actions, "iam:PassRole"]:  # and one action no statement names
                concrete = action.replace("*", "Describe")
                for resource in [*resources, "arn:aws:s3:::not-theirs/key"]:
                    cases.append((raw, concrete, resource.replace("*", "x")))
                    cases.append((raw, concrete, resource.replace("*", "x") + "/../other"))
    return cases


@pytest.mark.parametrize(("statement", "action", "resource"), _probe_pairs())
def test_evaluator_agrees_with_moto(statement: dict[str, Any], action: str, resource: str) -> None:
    from moto.iam.access_control import IAMPolicy, PermissionResult

    theirs = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
    expected = theirs.is_action_permitted(action, resource) == PermissionResult.PERMITTED
    assert evaluate([Statement.parse(statement)], action, resource).allowed == expected


@pytest.mark.parametrize(
    ("statements", "action", "resource", "allowed"),
    [
        ([{"Effect": "Allow", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/*"}],
         "s3:GetObject", "arn:aws:s3:::b/k", True),
        ([{"Effect": "Allow", "Action": "S3:getobject", "Resource": "*"}],
         "s3:GetObject", "arn:aws:s3:::b/k", True),  # actions are case-insensitive
        ([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::B/*"}],
         "s3:GetObject", "arn:aws:s3:::b/k", False),  # resources are not
        ([{"Effect": "Allow", "Action": "*", "Resource": "*"},
          {"Effect": "Deny", "Action": "ssm:*", "Resource": "*"}],
         "ssm:GetParameter", "arn:aws:ssm:r:a:parameter/x", False),
        ([{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}],
         "ssm:GetParameter", "x", True),
        ([{"Effect": "Allow", "Action": "ssm:GetParameter", "NotResource": "arn:*:secret*"}],
         "ssm:GetParameter", "arn:aws:ssm:r:a:secret/x", False),
        ([{"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:p/a?c"}],
         "ssm:GetParameter", "arn:p/abc", True),
        ([{"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "arn:ecr/x"}],
         "ecr:GetAuthorizationToken", "*", False),  # an action without resource-level grants
    ],
)  # fmt: skip
def test_evaluator_cases(
    statements: list[dict[str, Any]], action: str, resource: str, allowed: bool
) -> None:
    parsed = [Statement.parse(s) for s in statements]
    assert evaluate(parsed, action, resource).allowed is allowed


def test_a_conditional_allow_counts_and_says_so() -> None:
    raw = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*",
           "Condition": {"StringEquals": {"aws:ResourceAccount": "1"}}}  # fmt: skip
    decision = evaluate([Statement.parse(raw)], "s3:GetObject", "arn:aws:s3:::b/k")
    assert decision.allowed and decision.conditional


# --- the tables ----------------------------------------------------------------------------------


def test_every_managed_policy_the_stacks_attach_has_a_dated_copy() -> None:
    attached = set()
    for template in (REPO / "tests" / "golden").rglob("*.json"):
        for match in json.dumps(json.loads(template.read_text())).split(":iam::aws:policy/")[1:]:
            attached.add(match.split('"')[0])
    assert attached, "no managed policy found in the goldens"
    missing = attached - set(NAMES)
    assert not missing, f"add to managed_policies.NAMES and refresh: {sorted(missing)}"


def test_calls_map_to_actions_and_arns(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    perms = Permissions(app)
    cases = {
        ("s3", "ListObjectsV2", (("Bucket", "b"),)): [("s3:ListBucket", "arn:aws:s3:::b")],
        ("s3", "HeadObject", (("Bucket", "b"), ("Key", "k/x"))): [
            ("s3:GetObject", "arn:aws:s3:::b/k/x")
        ],
        ("logs", "PutLogEvents", (("logGroupName", "/g"), ("logStreamName", "s"))): [
            ("logs:PutLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/g:log-stream:s")
        ],
        ("ecr", "GetAuthorizationToken", ()): [("ecr:GetAuthorizationToken", "*")],
        ("sagemaker", "DescribeCluster", (("ClusterName", "c"),)): [
            ("sagemaker:DescribeCluster", app.attribute("cluster", "Cluster", "ClusterArn"))
        ],
    }
    for (service, op, params), expected in cases.items():
        call = Call("a", NODE, FIRST, service, op, dict(params))
        assert [(r.action, r.resource) for r in perms.required(call)] == expected


def test_a_secure_string_under_a_customer_key_needs_kms(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, depends_on_policy=True, studio_grant=False)
    write = Call("a", NODE, FIRST, "ssm", "PutParameter",
                 {"Name": "/p", "Type": "SecureString", "KeyId": "alias/mine"})  # fmt: skip
    read = Call("b", NODE, FIRST, "ssm", "GetParameter", {"Name": "/p", "WithDecryption": True})
    perms = Permissions(app, [write, read])
    key = f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/mine"
    assert ("kms:Encrypt", key) in [(r.action, r.resource) for r in perms.required(write)]
    assert ("kms:Decrypt", key) in [(r.action, r.resource) for r in perms.required(read)]


def test_the_table_rows_are_well_formed() -> None:
    table = json.loads((REPO / "hyperpod_kit/config/facts/call_actions.json").read_text())
    assert table["checked"] and table["source"]
    for name in operations():
        row = table["operations"][name]
        assert row["resource"] in table["resource_kinds"], name
        assert all(":" in a for a in row["actions"]), name
