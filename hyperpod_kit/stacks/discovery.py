"""A stack's handles published as one SSM parameter, for tools and scripts outside CDK."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_kit.naming import parameter_name


def publish(scope: Construct, *, environment: str, area: str, values: Mapping[str, str]) -> None:
    """Write ``values`` as JSON to ``/hyperpod-kit/<environment>/<area>``, and as stack outputs
    (which `cdk deploy` prints)."""
    for key, value in values.items():
        CfnOutput(scope, "".join(p.capitalize() for p in key.split("_")), value=value)
    ssm.StringParameter(
        scope,
        "Discovery",
        parameter_name=parameter_name(environment, area),
        description=f"hyperpod-kit {area} handles of environment {environment}",
        string_value=Stack.of(scope).to_json_string(dict(values)),
    )
