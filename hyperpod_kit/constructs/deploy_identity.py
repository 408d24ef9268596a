"""The identity a GitHub Actions deploy runs as: GitHub's OIDC provider and one role that only
the jobs of the named GitHub environments of one repository can assume (never a bare branch, never
`plan` or `drift`), allowed nothing but to assume the CDK bootstrap roles (the deploy, publishing
and lookup roles `cdk deploy` uses), as `cdk bootstrap --trust` expects of a deploying principal.

A read-only role for the nightly drift jobs (GitHub environment `drift`) and for `status --watch`
after each deploy (the deploy environments): `ReadOnlyAccess` with `kms:Decrypt` denied, as the CDK
bootstrap's lookup role carries, but assumed through OIDC rather than chained from the deploy role,
so that its session outlives the longest watch (a chained session ends after an hour).

Optionally a third, read-only role for `cdk diff` in pull requests (`pipeline github --diff`):
only jobs of the GitHub environment `plan` may assume it, and it may assume nothing but the CDK
bootstrap's lookup role (ReadOnlyAccess, `kms:Decrypt` denied). A pull request's job can change
its own workflow, so what that environment's jobs can reach is read-only by construction."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, DefaultStackSynthesizer, Duration
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from hyperpod_kit.naming import (
    DEPLOY_SESSION_SECONDS,
    DRIFT_ENVIRONMENT,
    PLAN_ENVIRONMENT,
    READ_SESSION_SECONDS,
    RESERVED_ENVIRONMENTS,
)

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_URL = f"https://{GITHUB_OIDC_HOST}"
AUDIENCE = "sts.amazonaws.com"  # what aws-actions/configure-aws-credentials asks for
BOOTSTRAP_ROLES = ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
LOOKUP_ROLE = "lookup-role"


def environment_subject(repository: str, environment: str) -> str:
    """The OIDC `sub` claim GitHub gives a job of `repository` that names the GitHub environment
    `environment` (whatever its branch: an environment's deployment branch rules and required
    reviewers are GitHub's to enforce before the job gets a token)."""
    return f"repo:{repository}:environment:{environment}"


def subjects(repository: str, environments: Sequence[str]) -> list[str]:
    """The subjects the deploy role trusts: the deploy jobs of `environments`, nothing else."""
    reserved = sorted(set(environments) & set(RESERVED_ENVIRONMENTS))
    if reserved:
        raise ValueError(f"the GitHub environments {reserved} are reserved for read-only roles")
    return [environment_subject(repository, name) for name in environments]


def read_subjects(repository: str, environments: Sequence[str]) -> list[str]:
    """The subjects the read-only role trusts: the drift jobs, and the deploy jobs (their
    `status --watch` after the deploy)."""
    return [environment_subject(repository, DRIFT_ENVIRONMENT), *subjects(repository, environments)]


def plan_subject(repository: str) -> str:
    """The OIDC `sub` of a job of `repository` that names the GitHub environment `plan`."""
    return environment_subject(repository, PLAN_ENVIRONMENT)


def _web_identity(provider_arn: str, sub: str | list[str]) -> iam.WebIdentityPrincipal:
    return iam.WebIdentityPrincipal(
        provider_arn,
        conditions={
            "StringEquals": {f"{GITHUB_OIDC_HOST}:aud": AUDIENCE, f"{GITHUB_OIDC_HOST}:sub": sub}
        },
    )


class GitHubDeployIdentity(Construct):
    """`provider_arn`: an existing GitHub OIDC provider of the account (an account has at most
    one per URL: creating a second fails at deploy); None creates it. `plan_role`: also the
    read-only role of the `plan` environment (`plan_role` then holds it, else None).
    `environments` may not name a reserved environment (`plan`, `drift`): ValueError."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        repository: str,
        environments: Sequence[str],
        regions: Sequence[str],
        provider_arn: str | None,
        plan_role: bool = False,
    ) -> None:
        super().__init__(scope, id)
        if provider_arn is None:
            provider = iam.OidcProviderNative(
                self, "GitHubOidcProvider", url=GITHUB_OIDC_URL, client_ids=[AUDIENCE]
            )
            provider_arn = provider.oidc_provider_arn
        self.provider_arn = provider_arn
        qualifier = DefaultStackSynthesizer.DEFAULT_QUALIFIER

        def bootstrap_roles(roles: Sequence[str]) -> list[str]:
            return [
                f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/cdk-{qualifier}-{role}-"
                f"{Aws.ACCOUNT_ID}-{region}"
                for region in sorted(set(regions))
                for role in roles
            ]

        bootstrap = bootstrap_roles(BOOTSTRAP_ROLES)
        self.role = iam.Role(
            self,
            "DeployRole",
            description=f"GitHub Actions of {repository} ({', '.join(environments)}): assumes "
            "the CDK bootstrap roles, nothing else",
            max_session_duration=Duration.seconds(DEPLOY_SESSION_SECONDS),
            assumed_by=_web_identity(provider_arn, subjects(repository, environments)),
            inline_policies={
                "AssumeCdkBootstrapRoles": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(actions=["sts:AssumeRole"], resources=bootstrap)
                    ]
                )
            },
        )
        self.read_role = iam.Role(
            self,
            "ReadRole",
            description=f"GitHub Actions of {repository} (environments {DRIFT_ENVIRONMENT}, "
            f"{', '.join(environments)}): drift and status, read-only",
            max_session_duration=Duration.seconds(READ_SESSION_SECONDS),
            assumed_by=_web_identity(provider_arn, read_subjects(repository, environments)),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("ReadOnlyAccess")],
            inline_policies={
                "DenyDecrypt": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            effect=iam.Effect.DENY, actions=["kms:Decrypt"], resources=["*"]
                        )
                    ]
                )
            },
        )
        NagSuppressions.add_resource_suppressions(
            self.read_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="ReadOnlyAccess with kms:Decrypt denied, what the CDK bootstrap's "
                    "lookup role carries: what `cdk drift` and `hyperpod-kit status` read spans "
                    "CloudFormation, SageMaker, FSx, EC2, EKS, CloudWatch and SSM, and this role "
                    "can write nothing",
                    applies_to=["Policy::arn:<AWS::Partition>:iam::aws:policy/ReadOnlyAccess"],
                )
            ],
        )
        self.plan_role: iam.Role | None = None
        if plan_role:
            self.plan_role = iam.Role(
                self,
                "PlanRole",
                description=f"GitHub Actions of {repository} (environment {PLAN_ENVIRONMENT}): "
                "cdk diff in pull requests; assumes the CDK bootstrap's lookup role, nothing else",
                assumed_by=_web_identity(provider_arn, plan_subject(repository)),
                inline_policies={
                    "AssumeCdkLookupRoles": iam.PolicyDocument(
                        statements=[
                            iam.PolicyStatement(
                                actions=["sts:AssumeRole"],
                                resources=bootstrap_roles([LOOKUP_ROLE]),
                            )
                        ]
                    )
                },
            )
