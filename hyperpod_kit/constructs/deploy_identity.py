"""The identity a GitHub Actions deploy runs as: GitHub's OIDC provider and one role that only
the named repository's main branch and GitHub environments can assume, allowed nothing but to
assume the CDK bootstrap roles (the deploy, publishing and lookup roles `cdk deploy` and
`cdk drift` use), as `cdk bootstrap --trust` expects of a deploying principal.

Optionally a second, read-only role for `cdk diff` in pull requests (`pipeline github --diff`):
only jobs of the GitHub environment `plan` may assume it, and it may assume nothing but the CDK
bootstrap's lookup role (ReadOnlyAccess, `kms:Decrypt` denied). A pull request's job can change
its own workflow, so what that environment's jobs can reach is read-only by construction."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, DefaultStackSynthesizer, Duration
from aws_cdk import aws_iam as iam
from constructs import Construct

from hyperpod_kit.naming import DEPLOY_SESSION_SECONDS, PLAN_ENVIRONMENT

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_URL = f"https://{GITHUB_OIDC_HOST}"
AUDIENCE = "sts.amazonaws.com"  # what aws-actions/configure-aws-credentials asks for
BOOTSTRAP_ROLES = ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
LOOKUP_ROLE = "lookup-role"


def subjects(repository: str, branch: str, environments: Sequence[str]) -> list[str]:
    """The OIDC `sub` claims GitHub gives a job of `repository`: on `branch` without an
    environment (the nightly drift), or naming one of `environments` (the deploy jobs)."""
    return [
        f"repo:{repository}:ref:refs/heads/{branch}",
        *(f"repo:{repository}:environment:{name}" for name in environments),
    ]


def plan_subject(repository: str) -> str:
    """The OIDC `sub` of a job of `repository` that names the GitHub environment `plan`."""
    return f"repo:{repository}:environment:{PLAN_ENVIRONMENT}"


class GitHubDeployIdentity(Construct):
    """`provider_arn`: an existing GitHub OIDC provider of the account (an account has at most
    one per URL: creating a second fails at deploy); None creates it. `plan_role`: also the
    read-only role of the `plan` environment (`plan_role` then holds it, else None)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        repository: str,
        branch: str,
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
            assumed_by=iam.WebIdentityPrincipal(
                provider_arn,
                conditions={
                    "StringEquals": {
                        f"{GITHUB_OIDC_HOST}:aud": AUDIENCE,
                        f"{GITHUB_OIDC_HOST}:sub": subjects(repository, branch, environments),
                    }
                },
            ),
            inline_policies={
                "AssumeCdkBootstrapRoles": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(actions=["sts:AssumeRole"], resources=bootstrap)
                    ]
                )
            },
        )
        self.plan_role: iam.Role | None = None
        if plan_role:
            self.plan_role = iam.Role(
                self,
                "PlanRole",
                description=f"GitHub Actions of {repository} (environment {PLAN_ENVIRONMENT}): "
                "cdk diff in pull requests; assumes the CDK bootstrap's lookup role, nothing else",
                assumed_by=iam.WebIdentityPrincipal(
                    provider_arn,
                    conditions={
                        "StringEquals": {
                            f"{GITHUB_OIDC_HOST}:aud": AUDIENCE,
                            f"{GITHUB_OIDC_HOST}:sub": plan_subject(repository),
                        }
                    },
                ),
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
