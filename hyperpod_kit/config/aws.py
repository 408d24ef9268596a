"""Checks that need an AWS account: opt-in (`validate --aws`), behind one boto3 facade.

Offline validation stays the default; these add what only the account knows: whether the AZ ID
exists for it, and whether its HyperPod instance quotas cover the instance groups. Missing
credentials or a denied call never fail validation: they become one warning that says which check
was skipped and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig

DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnrecognizedClient",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
}


class AwsUnavailableError(Exception):
    """The account could not be asked (no credentials, access denied, no network)."""


class AwsFacade:
    """The only place that calls AWS for validation; tests give it moto or a stubbed client."""

    def __init__(self, region: str, *, session: boto3.Session | None = None) -> None:
        self.region = region
        self._session = session or boto3.Session(region_name=region)

    def client(self, service: str) -> Any:
        return self._session.client(service, region_name=self.region)  # type: ignore[call-overload]

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except NoCredentialsError:
            raise AwsUnavailableError(f"{what}: no AWS credentials") from None
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in DENIED:
                raise AwsUnavailableError(f"{what}: {code}") from None
            raise AwsUnavailableError(f"{what}: {code or e}") from None
        except BotoCoreError as e:
            raise AwsUnavailableError(f"{what}: {e}") from None

    def availability_zone_ids(self) -> set[str]:
        ec2 = self.client("ec2")
        zones = self._call("ec2:DescribeAvailabilityZones", ec2.describe_availability_zones)
        return {z["ZoneId"] for z in zones["AvailabilityZones"]}

    def cluster_instance_quotas(self) -> dict[str, float]:
        """HyperPod quotas by instance type (quota names are '<type> for cluster usage')."""
        quotas = self.client("service-quotas")

        def fetch() -> dict[str, float]:
            found: dict[str, float] = {}
            for page in quotas.get_paginator("list_service_quotas").paginate(
                ServiceCode="sagemaker"
            ):
                for q in page["Quotas"]:
                    name = q.get("QuotaName", "")
                    if name.endswith(" for cluster usage"):
                        found[name.removesuffix(" for cluster usage")] = float(q["Value"])
            return found

        result: dict[str, float] = self._call("service-quotas:ListServiceQuotas", fetch)
        return result


AwsCheck = Callable[[EnvironmentConfig, AwsFacade], Iterator[Finding]]


def check_availability_zone(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    zones = aws.availability_zone_ids()
    if config.availability_zone_id not in zones:
        yield Finding(
            Level.ERROR,
            "availability_zone_id",
            f"{config.availability_zone_id} is not an availability zone of this account in "
            f"{config.region}",
            f"use one of {', '.join(sorted(zones))}",
        )


def check_instance_quotas(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    quotas = aws.cluster_instance_quotas()
    wanted = Counter[str]()
    first: dict[str, int] = {}
    for i, group in enumerate(config.cluster.instance_groups):
        wanted[group.instance_type] += group.instance_count
        first.setdefault(group.instance_type, i)
    for instance_type, count in sorted(wanted.items()):
        at = f"cluster.instance_groups[{first[instance_type]}].instance_count"
        quota = quotas.get(instance_type)
        if quota is None:
            yield Finding(
                Level.WARNING,
                at,
                f"no HyperPod quota found for {instance_type}",
                "check Service Quotas > Amazon SageMaker > '<type> for cluster usage'",
            )
        elif count > quota:
            yield Finding(
                Level.ERROR,
                at,
                f"{count} x {instance_type} exceeds this account's HyperPod quota of {quota:g}",
                "request a quota increase in Service Quotas, or lower instance_count",
            )


AWS_CHECKS: dict[str, AwsCheck] = {
    "aws-availability-zone": check_availability_zone,
    "aws-instance-quotas": check_instance_quotas,
}


def run_aws_checks(config: EnvironmentConfig, aws: AwsFacade) -> list[Finding]:
    findings: list[Finding] = []
    for name, check in AWS_CHECKS.items():
        try:
            findings += [
                Finding(f.level, f.path, f.message, f.hint, f.line, check=name)
                for f in check(config, aws)
            ]
        except AwsUnavailableError as e:
            findings.append(
                Finding(
                    Level.WARNING,
                    "(aws)",
                    f"check {name} skipped: {e}",
                    "run with credentials that may call it, or leave out --aws",
                    check=name,
                )
            )
    return findings
