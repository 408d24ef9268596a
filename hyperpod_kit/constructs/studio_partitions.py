"""Studio users and their FSx partitions: the custom resources' provider, the security group on
an existing file system, and batches of profiles. (What the nodes write for Studio, they are
granted in the cluster stack: `LifecycleScripts.grant_user_sync` and `grant_slurm_token_issuer`.)

A profile carries its partition (`CustomFileSystemConfigs`) and its owner's uid/gid
(`CustomPosixUserConfig`) from the start, and CloudFormation creates it only after its batch's
`Custom::StudioPartitions` is complete: that is, after the cluster's nodes reported the partition
with the right owner and mode (handler: assets/functions/studio_partitions/handler.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from aws_cdk import Aws, CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from cdk_nag import NagSuppressions
from constructs import Construct, IDependable

from hyperpod_kit.config.schema import EnvironmentConfig, StudioApp, UserConfig
from hyperpod_kit.constructs.functions import (
    ANSWERS_CLOUDFORMATION,
    function_logs_and_role,
    invoked_synchronously,
    outside_vpc,
    plain_variables,
    runs,
    skip_function_checks,
)
from hyperpod_kit.naming import (
    parameter_name,
    studio_space_name,
)
from hyperpod_kit.paths import FUNCTIONS_DIR

HANDLER_DIR = FUNCTIONS_DIR / "studio_partitions"
PARTITIONS_TYPE = "Custom::StudioPartitions"
ACCESS_TYPE = "Custom::StudioFileSystemAccess"
BATCHES = 16
"""Users are spread over this many nested stacks by a hash of their name, so adding or removing
someone never moves anyone else to another stack (which would delete and recreate a profile)."""
MAX_RESOURCES_PER_BATCH = 450  # CloudFormation allows 500 per template; keep headroom
POLL = Duration.seconds(30)


def batch_of(name: str) -> int:
    """The nested stack a user's profile lives in: stable for a name, whoever else is listed."""
    return zlib.crc32(name.encode()) % BATCHES


def batches(users: Sequence[UserConfig]) -> dict[int, list[UserConfig]]:
    out: dict[int, list[UserConfig]] = {}
    for user in users:
        out.setdefault(batch_of(user.name), []).append(user)
    return dict(sorted(out.items()))


def resources_per_user(config: EnvironmentConfig) -> int:
    return 1 + (len(config.studio.apps) if config.studio.spaces else 0)


class StudioPartitionsProvider(Construct):
    """The handler (plain boto3, `Code.from_asset`, no bundling) behind both custom resource types,
    behind CDK's Provider framework with an is-complete poll. Handle: ``service_token``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        domain_id: str,
        file_system_id: str,
        vpc_id: str,
        timeout_minutes: int,
    ) -> None:
        super().__init__(scope, id)
        logs_group, role = function_logs_and_role(
            self,
            role_id="HandlerRole",
            description=f"Studio partitions custom resource of {environment} (hyperpod-kit)",
        )
        arn = f"arn:{Aws.PARTITION}"
        here = f"{Aws.REGION}:{Aws.ACCOUNT_ID}"
        for statement in [
            iam.PolicyStatement(
                sid="ReadPartitionReports",
                actions=["ssm:GetParameters"],
                resources=[
                    f"{arn}:ssm:{here}:parameter{parameter_name(environment, 'partitions')}/*"
                ],
            ),
            iam.PolicyStatement(
                sid="AttachPartitionsToProfiles",
                actions=["sagemaker:DescribeUserProfile", "sagemaker:UpdateUserProfile"],
                resources=[f"{arn}:sagemaker:{here}:user-profile/{domain_id}/*"],
            ),
            # Read-only, and neither takes a resource: scoped to the file system's ARN,
            # DescribeFileSystems was denied (the rehearsal's policy lint found it).
            iam.PolicyStatement(
                sid="DescribeFileSystemAndInterfaces",
                actions=["fsx:DescribeFileSystems", "ec2:DescribeNetworkInterfaces"],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="StudioGroupOnFileSystemInterfaces",
                actions=["ec2:ModifyNetworkInterfaceAttribute"],
                resources=[
                    f"{arn}:ec2:{here}:network-interface/*",
                    f"{arn}:ec2:{here}:security-group/*",
                ],
                conditions={"ArnEquals": {"ec2:Vpc": f"{arn}:ec2:{here}:vpc/{vpc_id}"}},
            ),
        ]:
            role.add_to_principal_policy(statement)

        def function(name: str, handler: str) -> lambda_.Function:
            return lambda_.Function(
                self,
                name,
                runtime=lambda_.Runtime.PYTHON_3_14,
                handler=f"handler.{handler}",
                code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc"]),
                role=role,
                timeout=Duration.minutes(5),
                memory_size=256,
                log_group=logs_group,
                description=f"hyperpod-kit {environment}: Studio partitions ({handler})",
            )

        self.on_event = function("OnEvent", "on_event")
        self.is_complete = function("IsComplete", "is_complete")
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.on_event,
            is_complete_handler=self.is_complete,
            query_interval=POLL,
            log_group=logs_group,  # the framework's functions log beside the handler
            # The handler fails with its own reason at its deadline; this is the backstop.
            total_timeout=Duration.minutes(timeout_minutes + 10),
        )
        self.service_token: str = self.provider.service_token
        self._skip_function_checks()
        # CDK makes each function (and the waiter) depend on its role as well as the role's
        # policy, while also naming the role: cfn-lint's W3005 (redundant DependsOn). Harmless.
        for child in self.node.find_all():
            if isinstance(child, (lambda_.CfnFunction, sfn.CfnStateMachine)):
                child.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        NagSuppressions.add_resource_suppressions(
            self,
            [
                {
                    "id": "AwsSolutions-IAM4",
                    "reason": "The Provider framework's own functions use "
                    "AWSLambdaBasicExecutionRole (CloudWatch Logs only); CDK creates them.",
                    "applies_to": [
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "Scoped wildcards: partition reports of this environment, profiles "
                    "of this domain, the file system's interfaces (ids unknown until FSx makes "
                    "them; limited to the VPC by condition), fsx:DescribeFileSystems and "
                    "ec2:DescribeNetworkInterfaces (read-only, no resource-level "
                    "permission), the handler's log streams, and the "
                    "framework's invocation of its own function versions and state machine.",
                },
                {
                    "id": "AwsSolutions-SF1",
                    "reason": "The framework's waiter state machine only polls is_complete; "
                    "the handler logs every step to its own log group.",
                },
                {
                    "id": "AwsSolutions-SF2",
                    "reason": "X-Ray on the framework's waiter adds nothing to the handler's logs.",
                },
            ],
            apply_to_children=True,
        )

    def _skip_function_checks(self) -> None:
        """checkov's Lambda checks that do not apply to these functions (docs/security.md): none
        runs often, none is invoked in a way a dead-letter queue would catch, none reaches
        anything inside the VPC, and the framework's variables are ARNs."""
        skip_function_checks(
            self.on_event,
            concurrency=runs(
                "it plans what one Studio partitions resource must change, one event per batch "
                "of users per deploy"
            ),
            dead_letter=invoked_synchronously("the provider framework's onEvent function"),
            vpc=outside_vpc("it makes no AWS call at all"),
        )
        skip_function_checks(
            self.is_complete,
            concurrency=runs(
                f"it checks one batch of users every {POLL.to_seconds():.0f} s while a deploy "
                "waits for the nodes' partition reports"
            ),
            dead_letter=invoked_synchronously("the provider framework's waiter"),
            vpc=outside_vpc("it calls only the SSM, SageMaker, FSx and EC2 APIs, with IAM"),
        )
        arns = "its variables are the ARNs of the Studio partitions functions"
        framework = {
            "framework-onEvent": (
                "CDK's provider framework takes one event per Studio partitions resource change",
                ANSWERS_CLOUDFORMATION,
                "it calls only the Lambda and Step Functions APIs and CloudFormation's response "
                "URL",
                f"{arns} and of the waiter state machine",
            ),
            "framework-isComplete": (
                "the provider framework's waiter step runs one call at a time while a deploy waits",
                invoked_synchronously("the framework's waiter state machine"),
                "it calls only the Lambda API and CloudFormation's response URL",
                arns,
            ),
            "framework-onTimeout": (
                "the provider framework's timeout step runs at most once per resource change",
                invoked_synchronously("the framework's waiter state machine"),
                "it only answers CloudFormation's response URL",
                arns,
            ),
        }
        functions = [c for c in self.provider.node.find_all() if isinstance(c, lambda_.Function)]
        assert sorted(f.node.id for f in functions) == sorted(framework), "a new function"
        for fn in functions:
            concurrency, dead_letter, calls, variables = framework[fn.node.id]
            skip_function_checks(
                fn,
                concurrency=runs(concurrency),
                dead_letter=dead_letter,
                vpc=outside_vpc(calls),
                variables=plain_variables(variables),
            )


class StudioFileSystemAccess(Construct):
    """Studio's security group on an existing file system's network interfaces (a file system
    the storage stack creates carries it from the start); removed again on delete."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        service_token: str,
        file_system_id: str,
        security_group_id: str,
    ) -> None:
        super().__init__(scope, id)
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=service_token,
            resource_type=ACCESS_TYPE,
            properties={"FileSystemId": file_system_id, "SecurityGroupId": security_group_id},
        )


class StudioProfiles(Construct):
    """One batch of users: the partitions gate, then each user's profile with their uid/gid and
    partition, and (studio.spaces) a private space per app with the file system attached.

    Profiles and spaces are retained: deleting a profile needs its spaces deleted first, and a
    space's volume is the user's home. Removing a user detaches their partition (the gate's
    update) and leaves the rest for a person to delete.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        users: Sequence[UserConfig],
        domain_id: str,
        file_system_id: str,
        service_token: str,
        lifecycle_config_arns: dict[StudioApp, str],
        after: Sequence[IDependable] = (),
    ) -> None:
        super().__init__(scope, id)
        studio = config.studio
        if len(users) * resources_per_user(config) + 1 > MAX_RESOURCES_PER_BATCH:
            raise ValueError(
                f"{len(users)} Studio users in one batch exceed {MAX_RESOURCES_PER_BATCH} "
                f"resources; raise BATCHES in {__name__}"
            )
        self.gate = CustomResource(
            self,
            "Partitions",
            service_token=service_token,
            resource_type=PARTITIONS_TYPE,
            properties={
                "Environment": config.name,
                "DomainId": domain_id,
                "FileSystemId": file_system_id,
                "Mode": studio.partitions,
                "SharedPath": studio.shared_path,
                "TimeoutSeconds": studio.partition_timeout_minutes * 60,
                "Users": [
                    {
                        "Name": u.name,
                        "Uid": u.uid,
                        "Gid": u.gid,
                        "Path": studio.file_system_path(u.name),
                    }
                    for u in users
                ],
            },
        )
        for dependency in after:
            self.gate.node.add_dependency(dependency)
        self.profiles: dict[str, sagemaker.CfnUserProfile] = {}
        for user in users:
            profile = self._profile(config, user, domain_id, file_system_id)
            profile.node.add_dependency(self.gate)
            self.profiles[user.name] = profile
            if studio.spaces:
                for app in studio.apps:
                    space = self._space(
                        config=config,
                        user=user,
                        app=app,
                        domain_id=domain_id,
                        file_system_id=file_system_id,
                        lifecycle_config_arn=lifecycle_config_arns[app],
                    )
                    space.node.add_dependency(profile)

    def _profile(
        self, config: EnvironmentConfig, user: UserConfig, domain_id: str, file_system_id: str
    ) -> sagemaker.CfnUserProfile:
        p = sagemaker.CfnUserProfile
        profile = p(
            self,
            f"Profile-{user.name}",
            domain_id=domain_id,
            user_profile_name=user.name,
            user_settings=p.UserSettingsProperty(
                custom_posix_user_config=p.CustomPosixUserConfigProperty(
                    uid=user.uid, gid=user.gid
                ),
                custom_file_system_configs=[
                    p.CustomFileSystemConfigProperty(
                        f_sx_lustre_file_system_config=p.FSxLustreFileSystemConfigProperty(
                            file_system_id=file_system_id,
                            file_system_path=config.studio.file_system_path(user.name),
                        )
                    )
                ],
            ),
        )
        profile.apply_removal_policy(RemovalPolicy.RETAIN)
        return profile

    def _space(
        self,
        *,
        config: EnvironmentConfig,
        user: UserConfig,
        app: StudioApp,
        domain_id: str,
        file_system_id: str,
        lifecycle_config_arn: str,
    ) -> sagemaker.CfnSpace:
        s = sagemaker.CfnSpace
        spec = s.ResourceSpecProperty(
            instance_type=config.studio.default_instance_type,
            lifecycle_config_arn=lifecycle_config_arn,
        )
        name = studio_space_name(user.name, app)
        space = s(
            self,
            f"Space-{name}",
            domain_id=domain_id,
            space_name=name,
            space_display_name=f"{user.name} {app}",
            ownership_settings=s.OwnershipSettingsProperty(owner_user_profile_name=user.name),
            space_sharing_settings=s.SpaceSharingSettingsProperty(sharing_type="Private"),
            space_settings=s.SpaceSettingsProperty(
                app_type=app,
                custom_file_systems=[
                    s.CustomFileSystemProperty(
                        f_sx_lustre_file_system=s.FSxLustreFileSystemProperty(
                            file_system_id=file_system_id
                        )
                    )
                ],
                space_storage_settings=s.SpaceStorageSettingsProperty(
                    ebs_storage_settings=s.EbsStorageSettingsProperty(
                        ebs_volume_size_in_gb=config.studio.space_ebs_gib
                    )
                ),
                jupyter_lab_app_settings=s.SpaceJupyterLabAppSettingsProperty(
                    default_resource_spec=spec
                )
                if app == "JupyterLab"
                else None,
                code_editor_app_settings=s.SpaceCodeEditorAppSettingsProperty(
                    default_resource_spec=spec
                )
                if app == "CodeEditor"
                else None,
            ),
        )
        space.apply_removal_policy(RemovalPolicy.RETAIN)  # its volume is the user's home
        return space
