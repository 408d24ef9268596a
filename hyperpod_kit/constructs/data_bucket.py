"""`DataBucket`: the S3 bucket behind the file system or an existing one."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_kit.config.schema import BucketConfig
from hyperpod_kit.constructs.security import access_log_bucket, skip_checkov

REMOVAL = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}

# FSx links a file system to S3 through this service-linked role; with SSE-KMS it must be able to
# use the key (https://docs.aws.amazon.com/fsx/latest/LustreGuide/create-dra-linked-data-repo.html).
FSX_S3_ROLE_PATTERN = (
    "arn:aws:iam::*:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
    "AWSServiceRoleForFSxS3Access_*"
)


class DataBucket(Construct):
    """Encrypted, TLS-only, versioned, private, access-logged; retained on delete by default.

    Handles: ``bucket`` (an `s3.IBucket`), ``bucket_name``, ``key`` (the KMS key or None).
    """

    def __init__(
        self, scope: Construct, id: str, *, config: BucketConfig, bucket: s3.IBucket | None = None
    ) -> None:
        """``bucket``: a bucket of the app this is built in (the construct library,
        `hyperpod_kit.cdk`), used as is; ``config`` is then not read."""
        super().__init__(scope, id)
        self.key: kms.IKey | None = None
        if bucket is not None:
            self.bucket: s3.IBucket = bucket
            self.bucket_name: str = bucket.bucket_name
            self.key = bucket.encryption_key
            return
        if config.existing_name is not None:
            self.bucket = s3.Bucket.from_bucket_name(self, "Bucket", config.existing_name)
            self.bucket_name = config.existing_name
            return

        removal = REMOVAL[config.removal_policy]
        logs = access_log_bucket(self, removal_policy=removal)
        _stable_logical_id(logs, "AccessLogsBucket")

        encryption = s3.BucketEncryption.S3_MANAGED
        if config.encryption == "kms":
            self.key = kms.Key(
                self,
                "Key",
                enable_key_rotation=True,
                removal_policy=removal,
                description="Encrypts the HyperPod data bucket",
            )
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="FsxDataRepositoryAccess",
                    principals=[iam.AnyPrincipal()],
                    actions=[
                        "kms:Decrypt",
                        "kms:Encrypt",
                        "kms:GenerateDataKey*",
                        "kms:ReEncrypt*",
                        "kms:DescribeKey",
                    ],
                    resources=["*"],
                    conditions={
                        "StringEquals": {
                            "kms:CallerAccount": self.key.stack.account,
                            "kms:ViaService": f"s3.{self.key.stack.region}.amazonaws.com",
                        },
                        "ArnLike": {"aws:PrincipalArn": FSX_S3_ROLE_PATTERN},
                    },
                )
            )
            key_resource = self.key.node.default_child
            assert isinstance(key_resource, kms.CfnKey)
            skip_checkov(
                key_resource,
                "CKV_AWS_33",
                "the one statement with principal * is narrowed by its conditions to FSx's "
                "data-repository role (AWSServiceRoleForFSxS3Access_ and the file system's id) "
                "of this account, through S3 of this region: FSx makes that role per file system, "
                "after the key exists, so no principal ARN can name it",
            )
            encryption = s3.BucketEncryption.KMS
        bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=encryption,
            encryption_key=self.key,
            bucket_key_enabled=self.key is not None,
            bucket_name=config.name,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=logs,
            server_access_logs_prefix="data-bucket/",
            removal_policy=removal,
        )
        _stable_logical_id(bucket, "DataBucket")
        self.bucket = bucket
        self.bucket_name = bucket.bucket_name


def _stable_logical_id(bucket: s3.Bucket, logical_id: str) -> None:
    """Pin the logical id, so that reorganising constructs never replaces a bucket of data."""
    cfn = bucket.node.default_child
    assert isinstance(cfn, s3.CfnBucket)
    cfn.override_logical_id(logical_id)
