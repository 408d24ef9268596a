"""`skip_checkov`: one suppression on one resource, in checkov's own metadata format, beside the
resource's cdk-nag and cfn-lint metadata (docs/security.md, "checkov")."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template
from cdk_nag import NagSuppressions

from hyperpod_kit.constructs.security import skip_checkov


def _queue() -> tuple[Stack, sqs.CfnQueue]:
    stack = Stack(App(), "Bare")
    return stack, sqs.CfnQueue(stack, "Queue")


def test_the_skip_joins_the_metadata_that_is_there() -> None:
    stack, queue = _queue()
    NagSuppressions.add_resource_suppressions(
        queue, [{"id": "AwsSolutions-SQS3", "reason": "a reason for cdk-nag"}]
    )
    queue.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
    skip_checkov(queue, "CKV_AWS_27", "first reason")
    skip_checkov(queue, "CKV_AWS_27", "first reason")  # twice, the same: one entry
    skip_checkov(queue, "CKV2_AWS_73", "second reason")
    metadata = Template.from_stack(stack).to_json()["Resources"]["Queue"]["Metadata"]
    assert metadata["checkov"] == {
        "skip": [
            {"id": "CKV_AWS_27", "comment": "first reason"},
            {"id": "CKV2_AWS_73", "comment": "second reason"},
        ]
    }
    assert metadata["cdk_nag"]["rules_to_suppress"][0]["id"] == "AwsSolutions-SQS3"
    assert metadata["cfn-lint"] == {"config": {"ignore_checks": ["W3005"]}}


def test_the_same_check_with_another_reason_is_refused() -> None:
    _, queue = _queue()
    skip_checkov(queue, "CKV_AWS_27", "one reason")
    with pytest.raises(ValueError, match="CKV_AWS_27 skipped twice with different reasons"):
        skip_checkov(queue, "CKV_AWS_27", "another reason")
