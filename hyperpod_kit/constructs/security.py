"""The security baseline that no single construct owns (docs/security.md).

`access_log_bucket` is the one shape of every bucket that receives S3 server access logs.

`EncryptLogGroups` puts the environment's KMS key (``kms_key_arn``) on every CloudWatch log group
of a stack, nested stacks included: those of today (VPC flow logs, each function's log group) and
any a later construct adds, without each construct having to remember it. Without a key, log
groups keep CloudWatch Logs' default encryption.

`skip_checkov` puts one checkov suppression on one resource, in checkov's own metadata format,
with the reason that makes the check inapplicable to that resource; docs/security.md lists every
one (a test compares both ways).
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import CfnResource, Duration, IAspect, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.config.schema import Section
from hyperpod_kit.constructs.provenance import trace


def access_log_bucket(
    scope: Construct,
    id: str = "AccessLogs",
    *,
    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
) -> s3.Bucket:
    """A bucket for S3 server access logs: S3-managed encryption (log delivery cannot write to
    SSE-KMS), no public access, TLS only, versioned, a year of logs."""
    bucket = s3.Bucket(
        scope,
        id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        removal_policy=removal_policy,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
    )
    NagSuppressions.add_resource_suppressions(
        bucket,
        [
            {
                "id": "AwsSolutions-S1",
                "reason": "This is the access-log bucket; logging it to itself would loop.",
            }
        ],
    )
    resource = bucket.node.default_child
    assert isinstance(resource, s3.CfnBucket)
    skip_checkov(
        resource,
        "CKV_AWS_18",
        "an access-log bucket: it receives the S3 server access logs of its stack's other buckets "
        "and holds nothing else; logging it would log its own log deliveries",
    )
    return bucket


def skip_checkov(resource: CfnResource, check_id: str, reason: str) -> None:
    """Skip checkov's `check_id` on `resource` alone, with `reason` (what makes the check
    inapplicable to it): ``Metadata.checkov.skip[] = {id, comment}``, checkov's own format, beside
    the resource's other metadata (cdk_nag, cfn-lint). Adding the same skip twice (a singleton
    reached from two places) is harmless; the same check with another reason is a mistake."""
    current: Any = resource.get_metadata("checkov") or {}
    skips: list[dict[str, str]] = [dict(s) for s in current.get("skip", [])]
    for skip in skips:
        if skip["id"] == check_id:
            if skip["comment"] != reason:
                raise ValueError(
                    f"{resource.node.path}: {check_id} skipped twice with different reasons"
                )
            return
    skips.append({"id": check_id, "comment": reason})
    resource.add_metadata("checkov", {**current, "skip": skips})


@jsii.implements(IAspect)
class EncryptLogGroups:
    """Set ``KmsKeyId`` to ``key_arn`` on each `AWS::Logs::LogGroup` that names no key itself.

    The key's policy must let ``logs.<region>.amazonaws.com`` use it for this account's log groups
    (the key is the file's, so the file's owner writes that statement; docs/security.md has it).
    """

    def __init__(self, key_arn: str, *, written: Section | None = None) -> None:
        self.key_arn = key_arn
        self.written = written  # the section whose `kms_key_arn` it is (provenance.py)

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.kms_key_id is None:
            node.kms_key_id = self.key_arn
            if self.written is not None:
                trace(node, self.written, {"KmsKeyId": "kms_key_arn"})


def lint_exception(construct: Construct, rule: str, reason: str) -> None:
    """Turn off one cfn-lint rule on one resource (`construct` itself when it is a
    `CfnResource`, else its default child), with the reason kept next to it (the gate's report
    and a test read it)."""
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource")
    resource.add_metadata("cfn-lint", {"config": {"ignore_checks": [rule]}})
    resource.add_metadata("hyperpod-kit:cfn-lint", {rule: reason})
