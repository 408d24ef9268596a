"""A self-mutating CDK Pipelines `CodePipeline` that deploys environments in order
(`hyperpod-kit pipeline codepipeline`, docs/pipelines.md).

The source is a CodeConnections connection to the team's repository; the synth step installs the
pinned hyperpod-kit and runs the shell commands it is given (the CLI renders them: validate,
rehearse, and the pipeline's own synthesis with both gates); each environment is a CDK `Stage`
the caller built, added in order, with a manual approval before every one after the first and a
`hyperpod-kit status` step after each, which reads with the CDK bootstrap's lookup role of the
environment's account (ReadOnlyAccess, as the GitHub workflows read).

The artifact bucket is ours rather than CDK's, so that it can be access-logged and encrypted with
a rotated key of ours, whatever `cross_account_keys` says; the CodeBuild projects then take that
key (CDK sets a project's key from the pipeline's bucket). What CDK Pipelines writes that no
property reaches (its roles' wildcard grants) is suppressed per resource, with the reason, after
the pipeline is built (`finish`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from aws_cdk import (
    Duration,
    PhysicalName,
    RemovalPolicy,
    Stack,
    Stage,
    Token,
    pipelines,
)
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from hyperpod_kit.constructs.security import access_log_bucket, lint_exception

# CodeBuild's image for every step (CDK Pipelines' default, named so that it does not move under
# us): Ubuntu with Python 3 (the venv hyperpod-kit is installed into) and Node.js (jsii runs
# aws-cdk-lib on it; the self-mutation's CDK CLI too).
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
SYNTH_TIMEOUT = Duration.minutes(90)  # validate, rehearse and synthesize every environment
# `status --watch` gives up after 2 hours (cli/status.py WATCH_LIMIT_S); the install comes first.
STATUS_TIMEOUT = Duration.minutes(150)
BOOTSTRAP_QUALIFIER = "hnb659fds"  # the CDK bootstrap's default qualifier, as deploy_identity's


def lookup_role_arn(partition: str, account: str, region: str) -> str:
    """The CDK bootstrap's read-only lookup role (ReadOnlyAccess, kms:Decrypt denied), which
    `cdk bootstrap --trust PIPELINE_ACCOUNT` lets the pipeline's account assume."""
    return (
        f"arn:{partition}:iam::{account}:role/cdk-{BOOTSTRAP_QUALIFIER}-lookup-role-"
        f"{account}-{region}"
    )


@dataclass(frozen=True)
class PipelineSource:
    """Where the pipeline's environment files come from: a repository through a connection."""

    repository: str  # OWNER/NAME
    branch: str
    connection_arn: str


@dataclass(frozen=True)
class PipelineEnvironmentStage:
    """One environment of the pipeline: its name (the CodePipeline stage), file, account and
    region, and the CDK `Stage` that holds its stacks."""

    name: str
    file: str
    account: str
    region: str
    stage: Stage


class EnvironmentPipeline(Construct):
    """The pipeline. ``install``: shell commands that put the pinned toolkit's `hyperpod-kit` on
    PATH (every step that runs it repeats them); ``synth``: the synth step's commands, which must
    leave the pipeline app's cloud assembly in ``cdk.out``; ``cli_version``: the CDK CLI of the
    self-mutation step. Add environments in deploy order, then call `finish`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline_name: str,
        source: PipelineSource,
        install: Sequence[str],
        synth: Sequence[str],
        cli_version: str,
        cross_account_keys: bool,
    ) -> None:
        super().__init__(scope, id)
        self._install = list(install)
        self._connection_arn = source.connection_arn
        self._environments: list[PipelineEnvironmentStage] = []
        self.key = kms.Key(
            self,
            "ArtifactsKey",
            description=f"Encrypts the artifacts of the CodePipeline {pipeline_name}",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,  # as CDK's own: artifacts are rebuilt
        )
        logs = access_log_bucket(self)
        self.artifact_bucket = s3.Bucket(
            self,
            "Artifacts",
            bucket_name=PhysicalName.GENERATE_IF_NEEDED,  # as CDK's: roles of other accounts
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=logs,
            server_access_logs_prefix="artifacts/",
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
        )
        self.source = pipelines.CodePipelineSource.connection(
            source.repository,
            source.branch,
            connection_arn=source.connection_arn,
            trigger_on_push=True,
        )
        defaults = pipelines.CodeBuildOptions(
            build_environment=codebuild.BuildEnvironment(build_image=BUILD_IMAGE)
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=pipeline_name,
            pipeline_type=codepipeline.PipelineType.V2,
            artifact_bucket=self.artifact_bucket,
            cross_account_keys=cross_account_keys,
            cli_version=cli_version,
            self_mutation=True,
            publish_assets_in_parallel=False,
            code_build_defaults=defaults,
            synth_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    compute_type=codebuild.ComputeType.MEDIUM  # synths and rehearsals
                ),
                timeout=SYNTH_TIMEOUT,
            ),
            # The trainer image (an NVIDIA base of several GB) is built here: a large build's disk.
            asset_publishing_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    compute_type=codebuild.ComputeType.LARGE
                ),
            ),
            synth=pipelines.ShellStep(
                "Synth",
                input=self.source,
                install_commands=self._install,
                commands=list(synth),
                primary_output_directory="cdk.out",
            ),
        )

    def add_environment(self, environment: PipelineEnvironmentStage) -> None:
        """Deploy `environment.stage` after the environments added before it: approved by hand
        unless it is the first, then `hyperpod-kit status` must say healthy."""
        first = not self._environments
        self._environments.append(environment)
        approve = [] if first else [
            pipelines.ManualApprovalStep(
                "Approve",
                comment=f"Deploy {environment.name} ({environment.file}) to account "
                f"{environment.account}, {environment.region}? It gets the assembly the earlier "
                "environments got.",
            )
        ]  # fmt: skip
        role = lookup_role_arn(Stack.of(self).partition, environment.account, environment.region)
        status = pipelines.CodeBuildStep(
            "Status",
            input=self.source,
            install_commands=self._install,
            env={
                "HPK_FILE": environment.file,
                "HPK_READ_ROLE": role,
                "HPK_REGION": environment.region,
            },
            commands=[
                # boto3 assumes the lookup role with the build's own credentials.
                'mkdir -p "$HOME/.aws"',
                "printf '[profile hyperpod-kit-read]\\nrole_arn = %s\\ncredential_source = "
                'EcsContainer\\nregion = %s\\n\' "$HPK_READ_ROLE" "$HPK_REGION" >> '
                '"$HOME/.aws/config"',
                'AWS_PROFILE=hyperpod-kit-read hyperpod-kit status "$HPK_FILE" --watch',
            ],
            role_policy_statements=[
                iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[role])
            ],
            timeout=STATUS_TIMEOUT,
        )
        self.pipeline.add_stage(environment.stage, pre=approve, post=[status])

    def finish(self) -> None:
        """Build the pipeline now (CDK would at synth) and suppress, per resource, what CDK
        Pipelines wrote that no property of it reaches."""
        self.pipeline.build_pipeline()
        suppress_generated(self.pipeline, self.artifact_bucket)
        cfn = cast(codepipeline.CfnPipeline, self.pipeline.pipeline.node.default_child)
        for policy in use_connection_under_both_prefixes(self.pipeline, self._connection_arn):
            cfn.node.add_dependency(policy)  # the pipeline starts once created
        literal_role_arns(cfn)
        # CDK makes the pipeline depend on its role's policy and role, and also reads the role's
        # ARN: cfn-lint W3005 calls that dependency redundant. Harmless, and not ours to change.
        lint_exception(
            cfn, "W3005", "CDK's explicit dependency on the role it also reads by GetAtt"
        )


def literal_role_arns(cfn: codepipeline.CfnPipeline) -> None:
    """Write the CloudFormation actions' `Configuration.RoleArn` (the bootstrap's execution role
    of each environment) with the partition as a literal, as the partition is known from the
    pipeline's region. CDK Pipelines joins `arn:`, `${AWS::Partition}` and the rest, which
    cfn-lint 1.58 reports as E3703 with the text of its informational I1022 ("Prefer using
    Fn::Sub"); turning E3703 off would also lose its real check (TemplatePath names an input)."""
    stack = Stack.of(cfn)
    partition = stack.partition
    if Token.is_unresolved(partition):
        return
    for i, stage in enumerate(stack.resolve(cfn.stages) or []):
        for j, action in enumerate(stage.get("actions", [])):  # the L1 struct's keys
            role = (action.get("configuration") or {}).get("RoleArn")
            parts = role.get("Fn::Join") if isinstance(role, dict) else None
            if not (isinstance(parts, list) and parts[0] == "" and isinstance(parts[1], list)):
                continue
            pieces = parts[1]
            if pieces[1:2] != [{"Ref": "AWS::Partition"}] or not all(
                isinstance(p, str) for p in [pieces[0], *pieces[2:]]
            ):
                continue
            arn = "".join([pieces[0], partition, *pieces[2:]])
            cfn.add_property_override(f"Stages.{i}.Actions.{j}.Configuration.RoleArn", arn)


CONNECTION_PREFIXES = ("codeconnections", "codestar-connections")
_CONNECTION_SERVICE = re.compile(r"^(arn:[^:]+:)(?:codeconnections|codestar-connections):")


def connection_arn_as(prefix: str, arn: str) -> str:
    """The connection's ARN spelled with the service prefix `prefix` (the same connection)."""
    return _CONNECTION_SERVICE.sub(lambda m: f"{m[1]}{prefix}:", arn)


def use_connection_under_both_prefixes(scope: Construct, connection_arn: str) -> list[iam.Policy]:
    """CDK's source action grants its role `codestar-connections:UseConnection` on the ARN as
    given; IAM matches an action's service prefix to the resource's, so that grant covers
    nothing when the ARN is spelled `codeconnections` (cfn-lint I3510). The role gets
    `codeconnections:UseConnection` on the `codeconnections` spelling (CDK's statement, rewritten
    in place) and `codestar-connections:UseConnection` on the `codestar-connections` spelling (a
    policy of its own: a statement added to CDK's policy would be merged with CDK's, whose
    resource it shares), so the connection may be used under either prefix (AWS's rename of
    CodeStar Connections to CodeConnections). Returns the policies added."""
    stack = Stack.of(scope)
    legacy = connection_arn_as("codestar-connections", connection_arn)
    current = connection_arn_as("codeconnections", connection_arn)
    added = []
    for node in list(scope.node.find_all()):
        if not isinstance(node, iam.CfnPolicy):
            continue
        statements = stack.resolve(node.policy_document).get("Statement", [])
        for i, st in enumerate(statements):
            if (st.get("Action"), st.get("Resource")) != (
                "codestar-connections:UseConnection",
                connection_arn,
            ):
                continue
            node.add_property_override(
                f"PolicyDocument.Statement.{i}",
                {"Action": "codeconnections:UseConnection", "Effect": "Allow", "Resource": current},
            )
            parent = node.node.scope  # the role's DefaultPolicy
            role = parent.node.scope if parent is not None else None
            if not isinstance(role, iam.Role):
                raise TypeError(f"{node.node.path}: not the default policy of a role")
            policy = iam.Policy(
                role,
                "UseConnectionCodestarPrefix",
                statements=[
                    iam.PolicyStatement(
                        actions=["codestar-connections:UseConnection"], resources=[legacy]
                    )
                ],
            )
            role.attach_inline_policy(policy)
            added.append(policy)
    return added


# The wildcards CDK Pipelines writes into its own roles' policies, by what they are for. cdk-nag
# names a finding `Action::...` or `Resource::...`; `{"regex": ...}` entries match its text.
_ARTIFACT_GRANTS = [
    "Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*",
    "Action::s3:DeleteObject*", "Action::s3:Abort*", "Action::kms:GenerateDataKey*",
    "Action::kms:ReEncrypt*",
]  # fmt: skip
_CODEBUILD_LOGS = [
    {"regex": r"/^Resource::arn:[a-z-]+:logs:[a-z0-9-]+:\d{12}:log-group:\/aws\/codebuild\/"
              r"(<[A-Za-z0-9]+>:)?\*$/"},
    {"regex": r"/^Resource::arn:[a-z-]+:codebuild:[a-z0-9-]+:\d{12}:report-group\/"
              r"(<[A-Za-z0-9]+>-)?\*$/"},
]  # fmt: skip
# The roles of CodeBuild projects (by their construct path): assets, self-mutation, synth, status.
_CODEBUILD_ROLES = ("/Assets/", "/UpdatePipeline/", "/CdkBuildProject/", "/Status/")
_WHY = {
    "artifacts": "the artifact bucket's objects (`bucket/*`, `s3:GetObject*`, `s3:List*`, ...) "
    "and its key's data-key actions (`kms:GenerateDataKey*`, `kms:ReEncrypt*`), as CDK's "
    "`grantRead`/`grantReadWrite` write them",
    "codebuild": "its CodeBuild projects' own log groups and report groups "
    "(`/aws/codebuild/<project>:*`, `report-group/<project>-*`; the shared asset roles serve "
    "every asset project: `/aws/codebuild/*`, `report-group/*`)",
    "assets": "`codebuild:StartBuild`, `BatchGetBuilds` and `StopBuild` on `*` (the shared "
    "asset role starts the asset projects)",
    "mutation": "`cloudformation:DescribeStacks` and `s3:ListBucket` on `*` and `sts:AssumeRole` "
    "on `role/*` of the pipeline's account only where the role carries the tag "
    "`aws-cdk:bootstrap-role` (deploy, file-publishing, image-publishing): what `cdk deploy` "
    "of the pipeline stack needs",
}


def suppress_generated(pipeline: pipelines.CodePipeline, bucket: s3.Bucket) -> None:
    """cdk-nag IAM5 on the policies CDK Pipelines writes for its own roles, each role for
    exactly the wildcard shapes it is given (`_WHY`). CDK writes these statements itself: neither
    `pipelines.CodePipeline` nor its steps have a property that narrows them."""
    stack = Stack.of(pipeline)
    bucket_id = stack.get_logical_id(cast(s3.CfnBucket, bucket.node.default_child))
    artifacts: list[str | dict[str, str]] = [*_ARTIFACT_GRANTS, f"Resource::<{bucket_id}.Arn>/*"]
    for node in pipeline.node.find_all():
        if not isinstance(node, iam.Role):
            continue
        path = node.node.path
        kinds = ["artifacts"]
        applies: list[str | dict[str, str]] = list(artifacts)
        if any(part in path for part in _CODEBUILD_ROLES):
            kinds.append("codebuild")
            applies += _CODEBUILD_LOGS
        if "/Assets/" in path:
            kinds.append("assets")
            applies.append("Resource::*")
        if "/UpdatePipeline/" in path:
            kinds.append("mutation")
            applies += ["Resource::*", f"Resource::arn:*:iam::{stack.account}:role/*"]
        reason = (
            "Written by CDK Pipelines for its own role, which no property of the construct "
            "narrows: " + "; ".join(_WHY[k] for k in kinds) + "."
        )
        NagSuppressions.add_resource_suppressions(
            node,
            [NagPackSuppression(id="AwsSolutions-IAM5", reason=reason, applies_to=applies)],
            True,
        )
