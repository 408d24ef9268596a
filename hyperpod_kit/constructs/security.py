"""The security baseline that no single construct owns (docs/security.md).

`EncryptLogGroups` puts the environment's KMS key (``kms_key_arn``) on every CloudWatch log group
of a stack, nested stacks included: those of today (VPC flow logs, each function's log group) and
any a later construct adds, without each construct having to remember it. Without a key, log
groups keep CloudWatch Logs' default encryption.
"""

from __future__ import annotations

import jsii
from aws_cdk import IAspect
from aws_cdk import aws_logs as logs
from constructs import IConstruct


@jsii.implements(IAspect)
class EncryptLogGroups:
    """Set ``KmsKeyId`` to ``key_arn`` on each `AWS::Logs::LogGroup` that names no key itself.

    The key's policy must let ``logs.<region>.amazonaws.com`` use it for this account's log groups
    (the key is the file's, so the file's owner writes that statement; docs/security.md has it).
    """

    def __init__(self, key_arn: str) -> None:
        self.key_arn = key_arn

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.kms_key_id is None:
            node.kms_key_id = self.key_arn
