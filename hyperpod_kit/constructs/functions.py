"""What every Lambda function of hyperpod-kit starts from: its own log group and a role that may
write to it and nothing else yet (each function then grants exactly what it calls)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct


def function_logs_and_role(
    scope: Construct, *, role_id: str, description: str
) -> tuple[logs.LogGroup, iam.Role]:
    """A log group `Logs` (kept three months, removed with the stack) and a role `role_id` for a
    function in `scope`; the construct ids keep the logical ids the functions already had."""
    log_group = logs.LogGroup(
        scope,
        "Logs",
        retention=logs.RetentionDays.THREE_MONTHS,
        removal_policy=RemovalPolicy.DESTROY,
    )
    role = iam.Role(
        scope,
        role_id,
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=description,
    )
    log_group.grant_write(role)
    return log_group, role
