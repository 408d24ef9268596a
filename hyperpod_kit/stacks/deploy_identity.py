"""The deploy identity stack (`hyperpod-kit pipeline bootstrap`): deployed once per account, by
hand, before the generated workflows can deploy there. Given the account (`env`), the CDK CLI
refuses to deploy it with credentials of another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from hyperpod_kit.constructs.deploy_identity import GitHubDeployIdentity

STACK_NAME = "hyperpod-kit-github-deploy-identity"


class DeployIdentityStack(Stack):
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
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.identity = GitHubDeployIdentity(
            self,
            "GitHub",
            repository=repository,
            environments=environments,
            regions=regions,
            provider_arn=provider_arn,
            plan_role=plan_role,
        )
        CfnOutput(
            self,
            "DeployRoleArn",
            value=self.identity.role.role_arn,
            description="the role ARN for HYPERPOD_KIT_ROLE_ARN_<ENV> (or --aws-role-arn)",
        )
        CfnOutput(
            self,
            "ReadRoleArn",
            value=self.identity.read_role.role_arn,
            description="the read-only role for HYPERPOD_KIT_READ_ROLE_ARN_<ENV> (or "
            "--read-role-arn): drift, and status after each deploy",
        )
        if self.identity.plan_role is not None:
            CfnOutput(
                self,
                "PlanRoleArn",
                value=self.identity.plan_role.role_arn,
                description="the read-only role for HYPERPOD_KIT_PLAN_ROLE_ARN_<ENV> (or "
                "--diff-role-arn): `cdk diff` in pull requests",
            )
