"""What every Lambda function of hyperpod-kit starts from: its own log group and a role that may
write to it and nothing else yet (each function then grants exactly what it calls).

Functions that CDK adds (custom-resource providers, the kubectl provider, BucketDeployment) get a
log group in the template too, through `log_to`: Lambda would otherwise create
``/aws/lambda/<name>`` on the first invocation, kept forever and outside the environment's key.
docs/security.md has every function and the reasons for its concurrency, dead-letter and VPC
settings.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

LOG_RETENTION = logs.RetentionDays.THREE_MONTHS


def function_log_group(scope: Construct, id: str = "Logs") -> logs.LogGroup:
    """A log group for functions in `scope`: kept three months, removed with the stack, and
    encrypted with the environment's key when the file names one (`EncryptLogGroups`)."""
    return logs.LogGroup(scope, id, retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)


def function_logs_and_role(
    scope: Construct, *, role_id: str, description: str
) -> tuple[logs.LogGroup, iam.Role]:
    """A log group `Logs` (kept three months, removed with the stack) and a role `role_id` for a
    function in `scope`; the construct ids keep the logical ids the functions already had."""
    log_group = function_log_group(scope)
    role = iam.Role(
        scope,
        role_id,
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=description,
    )
    log_group.grant_write(role)
    return log_group, role


def log_to(functions: Iterable[lambda_.Function], log_group: logs.ILogGroup) -> None:
    """Send the logs of functions that CDK creates (and whose props take no log group) to
    `log_group`, keeping the rest of their logging settings (CDK's provider framework logs JSON
    at FATAL only). Their roles already write logs (AWSLambdaBasicExecutionRole)."""
    for fn in functions:
        resource = fn.node.default_child
        assert isinstance(resource, lambda_.CfnFunction)
        resource.add_property_override("LoggingConfig.LogGroup", log_group.log_group_name)
