"""The aws CLI's words as botocore operations (hyperpod_kit/rehearsal/cli_words.py)."""

from __future__ import annotations

import pytest

from hyperpod_kit.rehearsal.cli_words import CliOperation, CliWordsError, parse


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            "--region us-west-2 ssm get-parameter --name /a/b --query Parameter.Value "
            "--output text --with-decryption",
            [CliOperation("ssm", "GetParameter", {"Name": "/a/b", "WithDecryption": True})],
        ),
        (  # global options anywhere; --no-<flag>; --opt=value
            "ssm put-parameter --name=/x --type SecureString --no-overwrite --value v "
            "--region us-west-2",
            [CliOperation("ssm", "PutParameter", {"Name": "/x", "Type": "SecureString",
                                                  "Overwrite": False, "Value": "v"})],
        ),
        (
            "logs put-log-events --log-group-name g --log-stream-name s --log-events file:///e",
            [CliOperation("logs", "PutLogEvents", {"logGroupName": "g", "logStreamName": "s",
                                                   "logEvents": "file:///e"})],
        ),
        (
            "sagemaker batch-replace-cluster-nodes --cluster-name c --node-ids "
            '["i-0123456789abcdef0"]',
            [CliOperation("sagemaker", "BatchReplaceClusterNodes",
                          {"ClusterName": "c", "NodeIds": ["i-0123456789abcdef0"]})],
        ),
        (
            "s3 cp --only-show-errors /tmp/b.tgz s3://bucket/k/b.tgz",
            [CliOperation("s3", "PutObject", {"Bucket": "bucket", "Key": "k/b.tgz"})],
        ),
        (  # into a prefix: the file's own name
            "s3 cp /tmp/b.tgz s3://bucket/k/",
            [CliOperation("s3", "PutObject", {"Bucket": "bucket", "Key": "k/b.tgz"})],
        ),
        (
            "s3 cp s3://bucket/users/users.json /tmp/u.json",
            [CliOperation("s3", "GetObject", {"Bucket": "bucket", "Key": "users/users.json"})],
        ),
        (
            "s3 sync /data s3://bucket/p/",
            [CliOperation("s3", "ListObjectsV2", {"Bucket": "bucket", "Prefix": "p/"}),
             CliOperation("s3", "PutObject", {"Bucket": "bucket", "Key": "p/*"})],
        ),
        (
            "s3 ls s3://bucket/p/",
            [CliOperation("s3", "ListObjectsV2", {"Bucket": "bucket", "Prefix": "p/"})],
        ),
        (
            "--region us-west-2 ecr get-login-password",
            [CliOperation("ecr", "GetAuthorizationToken", {})],
        ),
        (
            "s3api get-object --bucket b --key k out",
            [CliOperation("s3", "GetObject", {"Bucket": "b", "Key": "k"})],
        ),
    ],
)  # fmt: skip
def test_words_become_operations(words: str, expected: list[CliOperation]) -> None:
    assert parse(words.split(" ")) == expected


@pytest.mark.parametrize(
    "words",
    ["ssm no-such-operation --name x", "nosuchservice get-thing", "s3 frobnicate s3://b/k", "ssm"],
)
def test_words_botocore_does_not_know_are_refused(words: str) -> None:
    with pytest.raises(CliWordsError):
        parse(words.split(" "))
