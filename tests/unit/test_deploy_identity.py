"""The deploy identity (`hyperpod-kit pipeline bootstrap`): a role only the repository's main
branch and named GitHub environments can assume through GitHub's OIDC provider (`aud` and `sub`
both pinned), no `*` principal, allowed only `sts:AssumeRole` on the CDK bootstrap roles of the
environments' regions; cdk-nag and cfn-lint clean without a suppression."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

from hyperpod_kit.cli import main as cli
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.stacks.deploy_identity import STACK_NAME, DeployIdentityStack

REPO = Path(__file__).resolve().parents[2]
PROVIDER = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"


def _template(provider_arn: str | None, *, plan_role: bool = False) -> dict[str, Any]:
    stack = DeployIdentityStack(
        App(),
        STACK_NAME,
        repository="example-org/team-envs",
        branch="main",
        environments=["dev", "prod"],
        regions=["us-west-2", "us-east-1", "us-west-2"],
        provider_arn=provider_arn,
        plan_role=plan_role,
    )
    return Template.from_stack(stack).to_json()


def _resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


def _arn(value: Any) -> str:
    """A `Fn::Join` ARN with its pseudo parameters written as `${...}`."""
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "${" + p["Ref"] + "}" for p in parts)


def test_trust_only_the_repository_branch_and_environments() -> None:
    template = _template(None)
    (provider,) = _resources(template, "AWS::IAM::OIDCProvider")
    assert provider["Properties"] == {
        "Url": "https://token.actions.githubusercontent.com",
        "ClientIdList": ["sts.amazonaws.com"],
    }
    (role,) = _resources(template, "AWS::IAM::Role")
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    provider_id = next(
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::OIDCProvider"
    )
    assert trust == {
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Effect": "Allow",
        "Principal": {"Federated": {"Ref": provider_id}},
        "Condition": {
            "StringEquals": {
                "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                "token.actions.githubusercontent.com:sub": [
                    "repo:example-org/team-envs:ref:refs/heads/main",
                    "repo:example-org/team-envs:environment:dev",
                    "repo:example-org/team-envs:environment:prod",
                ],
            }
        },
    }
    assert '"*"' not in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    # What the deploy workflow asks for (role-duration-seconds): a cluster's deploy outlasts 1 h.
    assert role["Properties"]["MaxSessionDuration"] == 4 * 3600


def test_allowed_only_to_assume_the_bootstrap_roles() -> None:
    template = _template(None)
    assert not _resources(template, "AWS::IAM::Policy")
    assert not _resources(template, "AWS::IAM::ManagedPolicy")
    (role,) = _resources(template, "AWS::IAM::Role")
    assert "ManagedPolicyArns" not in role["Properties"]
    (policy,) = role["Properties"]["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "sts:AssumeRole"
    assert "Condition" not in statement and "NotResource" not in statement
    arns = sorted(_arn(r) for r in statement["Resource"])
    account = "${AWS::AccountId}"
    assert arns == sorted(
        f"arn:${{AWS::Partition}}:iam::{account}:role/cdk-hnb659fds-{role}-{account}-{region}"
        for region in ("us-east-1", "us-west-2")
        for role in ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
    )


@pytest.mark.parametrize(
    ("plan_role", "name"),
    [(False, "deploy-identity.template.json"), (True, "deploy-identity-plan-role.template.json")],
)
def test_template_equals_the_reviewed_one(plan_role: bool, name: str) -> None:
    """tests/data/pipeline/deploy-identity*.template.json; regenerate with
    HYPERPOD_KIT_UPDATE_GOLDEN=1 and review the diff."""
    golden = REPO / "tests" / "data" / "pipeline" / name
    text = json.dumps(_template(None, plan_role=plan_role), indent=1, sort_keys=True) + "\n"
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"the template differs from {golden}: review, regenerate"


def test_the_plan_role_trusts_only_the_plan_environment_and_only_reads() -> None:
    """`--plan-role`: a second role for `pipeline github --diff`, trusted by the `plan`
    environment's subject alone, allowed only to assume the lookup roles (ReadOnlyAccess); the
    deploy role does not trust that subject."""
    template = _template(None, plan_role=True)
    roles = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    (plan_id,) = [k for k in roles if k.startswith("GitHubPlanRole")]
    (deploy_id,) = [k for k in roles if k != plan_id]
    (trust,) = roles[plan_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    plan = "repo:example-org/team-envs:environment:plan"
    assert trust["Condition"] == {
        "StringEquals": {
            "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
            "token.actions.githubusercontent.com:sub": plan,
        }
    }
    deploy_trust = roles[deploy_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    subjects = deploy_trust["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"]
    assert plan not in subjects
    (policy,) = roles[plan_id]["Properties"]["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRole" and "Condition" not in statement
    account = "${AWS::AccountId}"
    assert sorted(_arn(r) for r in statement["Resource"]) == [
        f"arn:${{AWS::Partition}}:iam::{account}:role/cdk-hnb659fds-lookup-role-{account}-{region}"
        for region in ("us-east-1", "us-west-2")
    ]
    assert "ManagedPolicyArns" not in roles[plan_id]["Properties"]
    assert set(template["Outputs"]) == {"DeployRoleArn", "PlanRoleArn"}


def test_an_existing_provider_is_used_not_created() -> None:
    template = _template(PROVIDER)
    assert not _resources(template, "AWS::IAM::OIDCProvider")
    (role,) = _resources(template, "AWS::IAM::Role")
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Federated": PROVIDER}


@pytest.mark.synth
def test_bootstrap_command_gated_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "environments").mkdir()
    shutil.copy(REPO / "environments" / "default.yaml", tmp_path / "environments" / "dev.yaml")
    monkeypatch.chdir(tmp_path)
    argv = ["pipeline", "bootstrap", "--repository", "example-org/team-envs",
            "--env", "dev=environments/dev.yaml", "--plan-role"]  # fmt: skip
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    report = check_assembly(tmp_path / "deploy-identity.out")
    assert report.ok and not report.findings, report.render()
    assert [s.nag_suppressions for s in report.stacks] == [0]  # cdk-nag clean without a suppression
    assert "npx cdk deploy --app deploy-identity.out" in err
    assert "PlanRoleArn in HYPERPOD_KIT_PLAN_ROLE_ARN_<ENV>" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--repository", "nope"], "--repository: 'nope' is not a GitHub repository"),
        (
            ["--repository", "o/r", "--oidc-provider-arn", "arn:aws:iam::1:oidc-provider/x"],
            "is not the ARN of a GitHub OIDC provider",
        ),
        (["--repository", "o/r", "--branch", "a..b"], "--branch: 'a..b' is not a branch name"),
    ],
)
def test_bootstrap_bad_flags(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "environments").mkdir()
    shutil.copy(REPO / "environments" / "default.yaml", tmp_path / "environments" / "dev.yaml")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["pipeline", "bootstrap", *argv, "--env", "dev=environments/dev.yaml"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and expected in err and "Hint: " in err, err
    assert not (tmp_path / "deploy-identity.out").exists()
