"""`LifecycleScripts`: the environment's node scripts, uploaded where HyperPod reads them.

The scripts are rendered at synth (hyperpod_kit/lifecycle.py) into a folder named by their content
hash, and `BucketDeployment` copies that folder, unpacked, to ``s3://<bucket>/lifecycle/<hash>/``:
a change to any byte moves the prefix (and so the cluster's ``SourceS3Uri``), an unchanged synth
changes nothing, and ``prune=False`` keeps older prefixes for nodes still provisioning from them.
No Docker: the deployment's Lambda carries the AWS CLI as a layer asset.

The bucket is named ``sagemaker-<account>-<region>-<environment>`` because the managed policy
``AmazonSageMakerClusterInstanceRolePolicy`` reads only ``sagemaker-*`` buckets; `grant_read` adds
an explicit grant anyway. The SSM parameter ``/hyperpod-kit/<env>/lifecycle`` names the newest
upload for the nodes' user sync, written only after the upload is complete.

Handles: ``bucket``, ``bucket_name``, ``prefix``, ``content_hash``, ``source_s3_uri``,
``on_create``, ``users_uri`` (Slurm, EKS with Studio), ``parameter_name``,
``status_parameter_prefix``, ``reads_storage_handles``,
``deployment``; ``grant_read(role)``, ``grant_user_sync(role)``,
``grant_slurm_token_issuer(role, ...)``.
"""

from __future__ import annotations

import re

from aws_cdk import Aws, CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_ssm as ssm
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.assets import ASSET_EXCLUDES
from hyperpod_kit.constructs.functions import (
    ANSWERS_CLOUDFORMATION,
    function_log_group,
    outside_vpc,
    plain_variables,
    runs,
    skip_function_checks,
)
from hyperpod_kit.constructs.security import access_log_bucket
from hyperpod_kit.lifecycle import (
    ON_CREATE,
    USERS_FILE,
    LifecycleBundle,
    build_bundle,
    lifecycle_context,
    lifecycle_parameter,
    partition_status_parameter,
    stage_bundle,
)
from hyperpod_kit.naming import (
    CLIENT_BUNDLE_PREFIX,
    slurm_client_parameter,
    slurm_token_prefix,
)

BUCKET_NAME_MAX = 63  # S3 bucket names are 3-63 characters
ACCOUNT_ID_LENGTH = 12


def lifecycle_bucket_name(environment: str, region: str, account: str | None) -> str:
    """``sagemaker-<account>-<region>-<environment>``; the account may be a token (the stack's
    account), counted as its 12 digits. Raises ValueError when it cannot fit in 63 characters."""
    account_text = account if account is not None else Aws.ACCOUNT_ID
    length = len(f"sagemaker--{region}-{environment}") + ACCOUNT_ID_LENGTH
    if length > BUCKET_NAME_MAX:
        raise ValueError(
            f"lifecycle bucket name sagemaker-<account>-{region}-{environment} would be {length} "
            f"characters; S3 allows {BUCKET_NAME_MAX}"
        )
    return f"sagemaker-{account_text}-{region}-{environment}"


class LifecycleScripts(Construct):
    """The rendered lifecycle scripts in a ``sagemaker-`` bucket, under a content-hashed prefix.

    The cluster must depend on this construct (``cluster.node.add_dependency(lifecycle)``), so no
    node provisions before its scripts are in S3.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        bundle: LifecycleBundle | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.bundle = bundle if bundle is not None else build_bundle(config)
        self.content_hash: str = self.bundle.content_hash
        self.prefix: str = self.bundle.prefix
        self.on_create: str = ON_CREATE
        self.parameter_name: str = lifecycle_parameter(config.name)
        self.status_parameter_prefix: str = partition_status_parameter(config.name)
        # Whether a node reads the storage stack's SSM parameter while it provisions.
        self.reads_storage_handles: bool = lifecycle_context(config).reads_storage_handles

        logs = access_log_bucket(self)
        bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=lifecycle_bucket_name(config.name, config.region, config.account),
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=logs,
            server_access_logs_prefix="lifecycle-bucket/",
            removal_policy=RemovalPolicy.RETAIN,
        )
        _pin_logical_id(logs, "LifecycleAccessLogsBucket")
        _pin_logical_id(bucket, "LifecycleBucket")
        self.bucket: s3.IBucket = bucket
        self.bucket_name: str = bucket.bucket_name
        self.source_s3_uri: str = f"s3://{bucket.bucket_name}/{self.prefix}"
        users_key = self.bundle.users_key
        self.users_uri: str | None = (
            f"s3://{bucket.bucket_name}/{users_key}" if users_key is not None else None
        )

        folder = stage_bundle(self.bundle)
        # One handler (a singleton per stack) serves both uploads; the first one's log group is
        # the handler's.
        upload_logs = function_log_group(self, "UploadLogs")
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Upload",
            sources=[s3deploy.Source.asset(str(folder), exclude=list(ASSET_EXCLUDES))],
            destination_bucket=bucket,
            destination_key_prefix=self.prefix,
            extract=True,  # unpacked: HyperPod reads the files, not a zip
            prune=False,  # older prefixes stay for nodes that still provision from them
            retain_on_delete=True,
            memory_limit=512,
            log_group=upload_logs,
        )
        uploads: list[s3deploy.BucketDeployment] = [self.deployment]
        if users_key is not None and self.bundle.users is not None:
            uploads.append(
                s3deploy.BucketDeployment(
                    self,
                    "UsersUpload",
                    sources=[s3deploy.Source.data(USERS_FILE, self.bundle.users.decode("utf-8"))],
                    destination_bucket=bucket,
                    destination_key_prefix=users_key.removesuffix(USERS_FILE),
                    prune=False,
                    retain_on_delete=True,
                    memory_limit=512,  # the same singleton handler as the scripts' upload
                    log_group=upload_logs,
                )
            )
        _suppress_deployment_findings(self.deployment)

        pointer: dict[str, str] = {
            "hash": self.content_hash,
            "source_s3_uri": self.source_s3_uri,
            "on_create": self.on_create,
        }
        if self.users_uri is not None:
            pointer["users_uri"] = self.users_uri
        self.pointer = ssm.StringParameter(
            self,
            "Pointer",
            parameter_name=self.parameter_name,
            description=f"hyperpod-kit {config.name}: the newest lifecycle upload (user sync)",
            string_value=Stack.of(self).to_json_string(pointer),
        )
        for upload in uploads:  # never point at a partial upload
            self.pointer.node.add_dependency(upload)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the lifecycle uploads and users files (the cluster's execution role), beyond the
        managed policy."""
        self.bucket.grant_read(grantee, "users/*")
        grant = self.bucket.grant_read(grantee, "lifecycle/*")
        _suppress_grant_wildcards(
            grantee,
            [
                "Action::s3:GetBucket*",
                "Action::s3:GetObject*",
                "Action::s3:List*",
                {"regex": r"/^Resource::.*LifecycleBucket.*\/(lifecycle|users)\/\*$/"},
            ],
            "Read-only access to this environment's lifecycle uploads and users files (bucket "
            "grant_read on lifecycle/* and users/*): nodes download content-hashed keys that are "
            "not known in advance.",
        )
        return grant

    def grant_user_sync(self, grantee: iam.IGrantable) -> iam.Grant:
        """What the nodes' user sync needs besides `grant_read`: read the pointer parameter and
        write the partition status parameters."""
        self.pointer.grant_read(grantee)
        stack = Stack.of(self)
        status_arn = stack.format_arn(
            service="ssm",
            resource="parameter",
            resource_name=f"{self.status_parameter_prefix.lstrip('/')}/*",
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ssm:PutParameter"],
            resource_arns=[status_arn],
        )
        prefix = re.escape(self.status_parameter_prefix.lstrip("/")).replace("/", "\\/")
        _suppress_grant_wildcards(
            grantee,
            [{"regex": rf"/^Resource::arn:[^:]+:ssm:[^:]+:.+:parameter\/{prefix}\/\*$/"}],
            "The controller writes one partition-status parameter per user of the environment, "
            "under this environment's own prefix; users are added after deploy.",
        )
        return grant

    def grant_slurm_token_issuer(
        self, grantee: iam.IGrantable, *, environment: str, data_bucket: s3.IBucket
    ) -> None:
        """Studio on Slurm: what the controller's token issuer (lifecycle/studio/slurm_jwt.sh,
        run by hooks.d/60-studio-jwt.sh while the controller provisions, then by its timer)
        writes: each user's token (put, and delete when the user is removed), the client
        settings, and the client bundle in the data bucket.

        Granted to the execution role's default policy, on which the cluster depends, so the
        grant exists before the first node provisions (the Studio stack deploys after it).
        SecureStrings use the AWS-managed key ``aws/ssm``, whose key policy lets the account's
        principals use it through SSM: no KMS grant. The bundle upload to an SSE-KMS data bucket
        needs ``kms:GenerateDataKey`` and, for a multipart upload (``aws s3 cp`` of more than
        8 MB), ``kms:Decrypt`` on the bucket's key."""
        stack = Stack.of(self)

        def parameter_arn(name: str) -> str:
            return stack.format_arn(
                service="ssm", resource="parameter", resource_name=name.lstrip("/")
            )

        tokens = parameter_arn(f"{slurm_token_prefix(environment)}/*")
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ssm:PutParameter", "ssm:DeleteParameter"],
            resource_arns=[tokens],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ssm:PutParameter"],
            resource_arns=[parameter_arn(slurm_client_parameter(environment))],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:PutObject"],
            resource_arns=[data_bucket.arn_for_objects(f"{CLIENT_BUNDLE_PREFIX}*")],
        )
        if data_bucket.encryption_key is not None:
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resource_arns=[data_bucket.encryption_key.key_arn],
            )
        prefix = re.escape(slurm_token_prefix(environment).lstrip("/")).replace("/", "\\/")
        bundle = re.escape(CLIENT_BUNDLE_PREFIX).replace("/", "\\/")
        _suppress_grant_wildcards(
            grantee,
            [
                {"regex": rf"/^Resource::arn:[^:]+:ssm:[^:]+:.+:parameter\/{prefix}\/\*$/"},
                {"regex": rf"/^Resource::.*\/{bundle}\*$/"},
            ],
            "The controller's Slurm token issuer writes one token parameter per Studio user "
            "under this environment's own slurm-jwt/ prefix (users are added after deploy) and "
            "the client bundle under the data bucket's hyperpod-kit/slurm-client/ prefix "
            "(content-hashed names).",
        )


def _suppress_grant_wildcards(
    grantee: iam.IGrantable, applies_to: list[str | dict[str, str]], reason: str
) -> None:
    """cdk-nag IAM5 on the grantee's policy, for exactly the wildcards this construct granted."""
    if isinstance(grantee, Construct):  # a role of this app (an imported principal has no policy)
        NagSuppressions.add_resource_suppressions(
            grantee,
            [{"id": "AwsSolutions-IAM5", "reason": reason, "appliesTo": applies_to}],
            apply_to_children=True,
        )


def _pin_logical_id(bucket: s3.Bucket, logical_id: str) -> None:
    """Pin the logical id: a refactoring must never replace a named, retained bucket."""
    cfn = bucket.node.default_child
    assert isinstance(cfn, s3.CfnBucket)
    cfn.override_logical_id(logical_id)


def _suppress_deployment_findings(deployment: s3deploy.BucketDeployment) -> None:
    """cdk-nag findings on the BucketDeployment's singleton Lambda, per resource, with reasons."""
    stack = Stack.of(deployment)
    handler = next(
        (c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment")),
        None,
    )
    targets: list[IConstruct] = [deployment.handler_role]
    if handler is not None:
        targets.append(handler)
        function = handler.node.default_child
        if isinstance(function, CfnResource):
            # CDK makes the function depend on its role and also reads the role's ARN: cfn-lint
            # W3005 calls the explicit dependency redundant. Harmless, and not ours to change.
            function.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        skip_function_checks(
            handler,
            concurrency=runs(
                "CDK's BucketDeployment handler runs once per deploy that changes the lifecycle "
                "scripts or the users file"
            ),
            dead_letter=ANSWERS_CLOUDFORMATION,
            vpc=outside_vpc(
                "it copies objects from CDK's asset bucket into the lifecycle bucket, S3 APIs only"
            ),
            variables=plain_variables("its one variable, AWS_CA_BUNDLE, is a file path"),
        )
    for target in targets:
        NagSuppressions.add_resource_suppressions(
            target,
            [
                {
                    "id": "AwsSolutions-IAM4",
                    "reason": "CDK's BucketDeployment handler uses AWSLambdaBasicExecutionRole "
                    "for its own CloudWatch logs only.",
                    "appliesTo": [
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "CDK's BucketDeployment handler copies the asset zip into the "
                    "lifecycle bucket: object wildcards on the CDK asset bucket and on this "
                    "bucket, which CDK generates (grantRead/grantReadWrite).",
                },
                {
                    "id": "AwsSolutions-L1",
                    "reason": "The BucketDeployment handler's runtime is chosen and updated by "
                    "aws-cdk-lib, not by this project.",
                },
            ],
            apply_to_children=True,
        )
