"""`cluster.operator_policy: true`: the operator's least-privilege policy as an IAM managed
policy of the cluster stack, for the people or roles who run `hyperpod-kit nodes` to be given.

Its statements are `hyperpod_kit.operator_policy.operator_policy`'s, the very ones `nodes
--print-policy` prints, with the stack's own account. It is attached to nothing: who operates the
nodes is the account's to say (a permission set, a group, a role), not this stack's.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.security import lint_exception
from hyperpod_kit.operator_policy import OUTPUT, moves_nodes, operator_policy


class NodeOperatorPolicy(Construct):
    """The managed policy (`policy`) and the stack output `OperatorPolicyArn` with its ARN."""

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig) -> None:
        super().__init__(scope, id)
        document = operator_policy(config, account=Aws.ACCOUNT_ID)
        self.policy = iam.ManagedPolicy(
            self,
            "Policy",
            description=f"hyperpod-kit nodes: list, replace, reboot and delete the nodes of "
            f"environment {config.name}'s cluster",
            document=iam.PolicyDocument.from_json(document),
        )
        NagSuppressions.add_resource_suppressions(
            self.policy,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The cluster's ARN ends in an id known only after it is created: the "
                    "node operations name any cluster of the account and region and are "
                    "conditioned on the environment's tag; the reads name the environment's "
                    "discovery parameters, its cluster's log streams, and DescribeStacks (which "
                    "takes no resource narrower than *). No action is a wildcard.",
                    applies_to=[
                        RegexAppliesTo(regex=r"/^Resource::\*$/"),
                        RegexAppliesTo(regex=r"/^Resource::arn:[^:]+:(sagemaker|ssm|logs):.*\*$/"),
                    ],
                )
            ],
        )
        if moves_nodes(config):
            lint_exception(
                self.policy,
                "W3037",
                "sagemaker:MoveClusterNodes is in botocore 1.44.8's model and named after the "
                "operation, as SageMaker's actions are; cfn-lint 1.58's list of IAM actions "
                "predates it",
            )
        CfnOutput(
            scope,
            OUTPUT,
            value=self.policy.managed_policy_arn,
            description="the IAM managed policy of the people who run hyperpod-kit nodes "
            "(attach it to them: cluster.operator_policy)",
        )
