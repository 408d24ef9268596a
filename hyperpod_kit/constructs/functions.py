"""What every Lambda function of hyperpod-kit starts from: its own log group and a role that may
write to it and nothing else yet (each function then grants exactly what it calls).

Functions that CDK adds (custom-resource providers, the kubectl provider, BucketDeployment) get a
log group in the template too, through `log_to`: Lambda would otherwise create
``/aws/lambda/<name>`` on the first invocation, kept forever and outside the environment's key.
docs/security.md has every function and the reasons for its concurrency, dead-letter and VPC
settings; `skip_function_checks` puts those reasons on the function for checkov.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from hyperpod_kit.constructs.security import skip_checkov

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


# The reasons docs/security.md gives for every function, in the words checkov's skips carry.
_POOL = (
    "a reservation would take from the account's unreserved pool, which Lambda keeps at 100 at "
    "least (all of it on a new account), and could fail the deploy"
)
ANSWERS_CLOUDFORMATION = (
    "invoked by CloudFormation as a custom resource's service token and answers CloudFormation's "
    "response URL itself, failures included: an event parked in a dead-letter queue would be one "
    "CloudFormation had already failed on"
)


def runs(what: str) -> str:
    """CKV_AWS_115 (reserved concurrency): how rarely the function runs, then why not reserve."""
    return f"{what}; {_POOL}"


def invoked_synchronously(by: str) -> str:
    """CKV_AWS_116 (dead-letter queue) for a function invoked synchronously `by` something."""
    return (
        f"invoked synchronously by {by}: Lambda sends only failed asynchronous invocations to a "
        "dead-letter queue, which would never receive anything"
    )


def outside_vpc(calls: str) -> str:
    """CKV_AWS_117 (in a VPC) for a function that reaches nothing inside the VPC."""
    return (
        f"{calls}: nothing to reach inside the VPC, where it would need the NAT or interface "
        "endpoints and hold network interfaces that slow stack deletion"
    )


def plain_variables(which: str) -> str:
    """CKV_AWS_173 (variables under a customer key) for variables that hold no secret."""
    return (
        f"{which}, no secret: Lambda encrypts variables at rest with its AWS managed key, and a "
        "customer key would protect nothing more"
    )


def skip_function_checks(
    fn: IConstruct,
    *,
    concurrency: str,
    dead_letter: str,
    vpc: str | None = None,
    variables: str | None = None,
) -> None:
    """Skip checkov's Lambda checks that do not apply to `fn`, each with its reason: reserved
    concurrency (CKV_AWS_115), dead-letter queue (CKV_AWS_116), and, where given, the VPC
    (CKV_AWS_117: functions outside it) and a customer key on its variables (CKV_AWS_173)."""
    resource = fn.node.default_child
    assert isinstance(resource, lambda_.CfnFunction)
    skip_checkov(resource, "CKV_AWS_115", concurrency)
    skip_checkov(resource, "CKV_AWS_116", dead_letter)
    if vpc is not None:
        skip_checkov(resource, "CKV_AWS_117", vpc)
    if variables is not None:
        skip_checkov(resource, "CKV_AWS_173", variables)
