"""The deploy identity (`hyperpod-kit pipeline bootstrap`): a role only the named GitHub
environments of the repository can assume through GitHub's OIDC provider (`aud` and `sub` both
pinned; never a bare branch, never `plan` or `drift`), no `*` principal, allowed only
`sts:AssumeRole` on the CDK bootstrap roles of the environments' regions; a read-only role for
`drift` and the deploy jobs' status, with sessions longer than the longest watch; the trust
policies asserted subject by subject; cdk-nag and cfn-lint clean, one suppression with its
reason; the files' accounts, the provider's and the stack's agree."""

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
from hyperpod_kit.cli.status import WATCH_LIMIT_S
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.naming import READ_SESSION_SECONDS
from hyperpod_kit.stacks.deploy_identity import STACK_NAME, DeployIdentityStack

REPO = Path(__file__).resolve().parents[2]
PROVIDER = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"


def _template(provider_arn: str | None, *, plan_role: bool = False) -> dict[str, Any]:
    stack = DeployIdentityStack(
        App(),
        STACK_NAME,
        repository="example-org/team-envs",
        environments=["dev", "prod"],
        regions=["us-west-2", "us-east-1", "us-west-2"],
        provider_arn=provider_arn,
        plan_role=plan_role,
    )
    return dict(Template.from_stack(stack).to_json())


def _resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


def _arn(value: Any) -> str:
    """A `Fn::Join` ARN with its pseudo parameters written as `${...}`."""
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "${" + p["Ref"] + "}" for p in parts)


def _roles(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The roles by construct id: DeployRole, ReadRole, PlanRole."""
    roles = {}
    for logical, r in template["Resources"].items():
        if r["Type"] == "AWS::IAM::Role":
            (name,) = [n for n in ("DeployRole", "ReadRole", "PlanRole") if n in logical]
            roles[name] = r
    return roles


def _subjects(role: dict[str, Any]) -> list[str]:
    """The `sub` values of a role's one trust statement, after checking its shape: web identity
    from the provider, `aud` pinned, `StringEquals` (no wildcard matching), nothing else."""
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity" and trust["Effect"] == "Allow"
    assert set(trust["Condition"]) == {"StringEquals"}
    condition = trust["Condition"]["StringEquals"]
    assert set(condition) == {
        "token.actions.githubusercontent.com:aud",
        "token.actions.githubusercontent.com:sub",
    }
    assert condition["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"
    sub = condition["token.actions.githubusercontent.com:sub"]
    return [sub] if isinstance(sub, str) else sub


REPO_SUB = "repo:example-org/team-envs"


@pytest.mark.parametrize("plan_role", [False, True], ids=["without-plan-role", "plan-role"])
def test_each_role_trusts_exactly_its_subjects(plan_role: bool) -> None:
    """Subject by subject: the deploy role only the deploy environments (no bare branch, not
    `plan`, not `drift`), the read-only role `drift` and the deploy environments (their status
    after the deploy), the plan role `plan` alone. No `ref:` subject anywhere."""
    roles = _roles(_template(None, plan_role=plan_role))
    expected = {
        "DeployRole": [f"{REPO_SUB}:environment:dev", f"{REPO_SUB}:environment:prod"],
        "ReadRole": [
            f"{REPO_SUB}:environment:drift",
            f"{REPO_SUB}:environment:dev",
            f"{REPO_SUB}:environment:prod",
        ],
    }
    if plan_role:
        expected["PlanRole"] = [f"{REPO_SUB}:environment:plan"]
    assert {name: _subjects(role) for name, role in roles.items()} == expected
    for role in roles.values():
        document = json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
        assert ":ref:" not in document and '"*"' not in document and "StringLike" not in document


def test_reserved_environments_cannot_deploy() -> None:
    for name in ("plan", "drift"):
        with pytest.raises(ValueError, match="reserved for read-only roles"):
            DeployIdentityStack(
                App(), STACK_NAME, repository="o/r", environments=["dev", name],
                regions=["us-west-2"], provider_arn=None,
            )  # fmt: skip


def test_the_read_role_only_reads_for_longer_than_the_longest_watch() -> None:
    """ReadOnlyAccess with kms:Decrypt denied (the CDK lookup role's), assumed through OIDC
    (not chained: a chained session ends after an hour) for longer than `status --watch` may
    take; nothing else attached; its one cdk-nag suppression says why."""
    read = _roles(_template(None))["ReadRole"]["Properties"]
    assert read["MaxSessionDuration"] == READ_SESSION_SECONDS > WATCH_LIMIT_S
    (managed,) = read["ManagedPolicyArns"]
    assert _arn(managed) == "arn:${AWS::Partition}:iam::aws:policy/ReadOnlyAccess"
    (policy,) = read["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {"Action": "kms:Decrypt", "Effect": "Deny", "Resource": "*"}
    ]


def test_trust_only_the_repository_environments() -> None:
    template = _template(None)
    (provider,) = _resources(template, "AWS::IAM::OIDCProvider")
    assert provider["Properties"] == {
        "Url": "https://token.actions.githubusercontent.com",
        "ClientIdList": ["sts.amazonaws.com"],
    }
    role = _roles(template)["DeployRole"]
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
    role = _roles(template)["DeployRole"]
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
    (deploy_id,) = [k for k in roles if k.startswith("GitHubDeployRole")]
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
    assert set(template["Outputs"]) == {"DeployRoleArn", "ReadRoleArn", "PlanRoleArn"}


def test_an_existing_provider_is_used_not_created() -> None:
    template = _template(PROVIDER)
    assert not _resources(template, "AWS::IAM::OIDCProvider")
    for role in _roles(template).values():
        (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Federated": PROVIDER}


@pytest.mark.synth
def test_bootstrap_command_gated_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(REPO / "environments" / "team", tmp_path / "environments" / "team")
    monkeypatch.chdir(tmp_path)
    argv = ["pipeline", "bootstrap", "--repository", "example-org/team-envs",
            "--env", "dev=environments/team/dev.yaml", "--plan-role"]  # fmt: skip
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    out = tmp_path / "deploy-identity.out"
    report = check_assembly(out)
    assert report.ok and not report.findings, report.render()
    # cdk-nag clean; one suppression, the read-only role's ReadOnlyAccess, with its reason.
    assert [s.nag_suppressions for s in report.stacks] == [1]
    assert "npx cdk deploy --app deploy-identity.out" in err
    assert "ReadRoleArn in HYPERPOD_KIT_READ_ROLE_ARN_<ENV>" in err
    assert "PlanRoleArn in HYPERPOD_KIT_PLAN_ROLE_ARN_<ENV>" in err
    # The stack is for dev's account alone: the CDK CLI refuses other credentials.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["artifacts"][STACK_NAME]["environment"] == "aws://111122223333/us-west-2"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--repository", "nope"], "--repository: 'nope' is not a GitHub repository"),
        (
            ["--repository", "o/r", "--oidc-provider-arn", "arn:aws:iam::1:oidc-provider/x"],
            "is not the ARN of a GitHub OIDC provider",
        ),
        (
            ["--repository", "o/r", "--env", "prod=environments/team/prod.yaml"],
            "--env: 'prod=environments/team/prod.yaml' deploys to account 444455556666, but dev "
            "(environments/team/dev.yaml) to 111122223333: one deploy identity is for one account",
        ),
        (
            ["--repository", "o/r", "--oidc-provider-arn", PROVIDER],
            "--oidc-provider-arn: '" + PROVIDER + "' is in account 123456789012, not the files' "
            "account 111122223333",
        ),
        (
            ["--repository", "o/r", "--env", "plan=environments/default.yaml", "--plan-role"],
            "--env: 'plan=environments/default.yaml' names the environment 'plan'",
        ),
        (
            ["--repository", "o/r", "--env", "drift=environments/default.yaml"],
            "--env: 'drift=environments/default.yaml' names the environment 'drift'",
        ),
    ],
)
def test_bootstrap_bad_flags(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copytree(REPO / "environments" / "team", tmp_path / "environments" / "team")
    shutil.copy(REPO / "environments" / "default.yaml", tmp_path / "environments" / "default.yaml")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["pipeline", "bootstrap", "--env", "dev=environments/team/dev.yaml", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and expected in err and "Hint: " in err, err
    assert not (tmp_path / "deploy-identity.out").exists()
