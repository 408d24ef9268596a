"""`StudioDomain`: a VPC-only, IAM-authenticated SageMaker Studio domain in the cluster's subnet,
its execution role, security group and lifecycle configurations.

What it needs comes in as typed props (network, file system, cluster, data bucket, and on EKS the
EKS cluster); what it hands back: ``domain_id``, ``domain_arn``, ``execution_role``,
``apps_security_group_id``. Profiles and partitions are `StudioProfiles`
(`studio_partitions.py`), in batches, because a domain of hundreds of users outgrows one template.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol

from aws_cdk import Aws, Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_ssm as ssm
from cdk_nag import NagSuppressions
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig, StudioApp
from hyperpod_kit.constructs.network import describe_network_statement
from hyperpod_kit.constructs.provenance import trace
from hyperpod_kit.naming import (
    CLIENT_BUNDLE_PREFIX,
    slurm_client_parameter,
    slurm_token_prefix,
    studio_domain_name,
    studio_lifecycle_config_name,
    studio_package_parameter,
)

# The script and its settings render without CDK (validate measures the same text); these names
# stay importable from here.
from hyperpod_kit.studio_lifecycle import (
    CLIENT_SCRIPT,
    LCC_MAX,
    STUDIO_MOUNT,
    STUDIO_SCRIPTS,
    LifecycleSettings,
    StudioEks,
    lifecycle_config_length,
    lifecycle_settings,
    render_lifecycle_script,
)
from hyperpod_kit.studio_package import stage_studio_package

__all__ = [
    "CLIENT_SCRIPT",
    "LCC_MAX",
    "STUDIO_MOUNT",
    "STUDIO_SCRIPTS",
    "LifecycleSettings",
    "StudioDomain",
    "StudioEks",
    "StudioPermissions",
    "lifecycle_config_length",
    "lifecycle_settings",
    "render_lifecycle_script",
]

SLURMCTLD_PORT = 6817
# Studio app types a domain can show; everything not in studio.apps is hidden.
APP_TYPES = ("JupyterLab", "CodeEditor")
HIDDEN_ALWAYS = ("JupyterServer", "TensorBoard", "RStudioServerPro", "Canvas", "DetailedProfiler")
IDENTITY = "${aws:SourceIdentity}"  # the profile name, with ExecutionRoleIdentityConfig


class StudioNetworkHandles(Protocol):
    """What Studio needs of `ClusterNetwork`."""

    @property
    def vpc_id(self) -> str: ...

    @property
    def private_subnet_id(self) -> str: ...

    @property
    def cluster_security_group_id(self) -> str: ...

    @property
    def studio_fsx_security_group_id(self) -> str: ...


class StudioFileSystemHandles(Protocol):
    """What Studio needs of `LustreFileSystem`."""

    @property
    def file_system_id(self) -> str: ...


class StudioClusterHandles(Protocol):
    """What Studio needs of `HyperPodCluster`."""

    @property
    def cluster_arn(self) -> str: ...

    @property
    def cluster_name(self) -> str: ...

    @property
    def execution_role(self) -> iam.IRole: ...


class StudioDomain(Construct):
    """The domain, its execution role and app security group, and the lifecycle configurations
    that make JupyterLab and Code Editor clients of the cluster.

    Handles: ``domain_id``, ``domain_arn``, ``domain_url``, ``execution_role``,
    ``apps_security_group_id``, ``lifecycle_config_arns`` (per app type).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: StudioNetworkHandles,
        file_system: StudioFileSystemHandles,
        cluster: StudioClusterHandles,
        data_bucket: s3.IBucket,
        eks: StudioEks | None = None,
        trainer_image: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if (config.orchestrator == "eks") != (eks is not None):
            raise ValueError("an EKS environment needs the EKS cluster handles, Slurm none")
        studio = config.studio
        self.apps_security_group = self._apps_security_group(network)
        self.apps_security_group_id: str = self.apps_security_group.attr_group_id
        self._cluster_access(config, network, eks)

        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            ).with_session_tags(),
            description=f"SageMaker Studio apps of {config.name} (hyperpod-kit)",
        )
        # With ExecutionRoleIdentityConfig=USER_PROFILE_NAME, SageMaker sets the profile name as
        # the session's source identity, which needs sts:SetSourceIdentity in the trust policy.
        trust = self.execution_role.assume_role_policy
        assert trust is not None
        trust.add_statements(
            iam.PolicyStatement(
                actions=["sts:SetSourceIdentity"],
                principals=[iam.ServicePrincipal("sagemaker.amazonaws.com")],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )

        # The toolkit and the environment file for the spaces (`hyperpod_kit.studio_package`):
        # an asset, read by the lifecycle configuration with the execution role. Its URL is in a
        # parameter of a constant name, which the lifecycle configuration carries: the
        # configuration (create-only, named after its content) stays when the toolkit changes.
        staged = stage_studio_package(config, trainer_image=trainer_image)
        self.package = s3_assets.Asset(self, "Package", path=str(staged))
        self.package_parameter = ssm.StringParameter(
            self,
            "PackageUrl",
            parameter_name=studio_package_parameter(config.name),
            description=f"hyperpod-kit {config.name}: the Studio package (toolkit, environment)",
            string_value=self.package.s3_object_url,
        )
        self.lifecycle_configs = {
            app: self._lifecycle_config(config, app, file_system, eks) for app in studio.apps
        }
        self.lifecycle_config_arns = {
            app: lcc.attr_studio_lifecycle_config_arn for app, lcc in self.lifecycle_configs.items()
        }
        self.domain = self._domain(config, network)
        self.domain_id: str = self.domain.attr_domain_id
        self.domain_arn: str = self.domain.attr_domain_arn
        self.domain_url: str = self.domain.attr_url
        StudioPermissions(
            self,
            "Permissions",
            role=self.execution_role,
            config=config,
            domain_id=self.domain_id,
            subnet_id=network.private_subnet_id,
            security_group_ids=[network.studio_fsx_security_group_id, self.apps_security_group_id],
            cluster=cluster,
            data_bucket=data_bucket,
            eks=eks,
            package=self.package,
        )

    # --- network -------------------------------------------------------------------------------

    def _apps_security_group(self, network: StudioNetworkHandles) -> ec2.CfnSecurityGroup:
        sg = ec2.CfnSecurityGroup(
            self,
            "AppsSecurityGroup",
            vpc_id=network.vpc_id,
            group_description="Studio apps: out to AWS APIs and the cluster; apps to each other",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="-1",
                    cidr_ip="0.0.0.0/0",
                    description="AWS APIs and package registries (NAT or endpoints), the cluster",
                )
            ],
        )
        # Studio's documented VPC requirement: TCP 8192-65535 between the domain's apps.
        ec2.CfnSecurityGroupIngress(
            self,
            "AppsSelfIngress",
            group_id=sg.attr_group_id,
            ip_protocol="tcp",
            from_port=8192,
            to_port=65535,
            source_security_group_id=sg.attr_group_id,
            description="Studio apps to each other (TCP 8192-65535)",
        )
        return sg

    def _cluster_access(
        self, config: EnvironmentConfig, network: StudioNetworkHandles, eks: StudioEks | None
    ) -> None:
        if eks is None:
            # sinfo/sbatch/squeue talk to slurmctld only (auth/jwt supports no other direction,
            # so srun and salloc from Studio are not offered and slurmd stays closed).
            ec2.CfnSecurityGroupIngress(
                self,
                "SlurmctldFromStudio",
                group_id=network.cluster_security_group_id,
                ip_protocol="tcp",
                from_port=SLURMCTLD_PORT,
                to_port=SLURMCTLD_PORT,
                source_security_group_id=self.apps_security_group.attr_group_id,
                description="slurmctld from Studio apps (Slurm commands with a per-user JWT)",
            )
        elif eks.security_group_id is not None:
            ec2.CfnSecurityGroupIngress(
                self,
                "EksApiFromStudio",
                group_id=eks.security_group_id,
                ip_protocol="tcp",
                from_port=443,
                to_port=443,
                source_security_group_id=self.apps_security_group.attr_group_id,
                description="EKS API (private endpoint) from Studio apps (kubectl)",
            )

    # --- lifecycle configurations ----------------------------------------------------------------

    def _lifecycle_config(
        self,
        config: EnvironmentConfig,
        app: StudioApp,
        file_system: StudioFileSystemHandles,
        eks: StudioEks | None,
    ) -> sagemaker.CfnStudioLifecycleConfig:
        settings = lifecycle_settings(config, file_system_id=file_system.file_system_id, eks=eks)
        content = render_lifecycle_script(settings)
        # Tokens (the file system id, the EKS cluster name) are about as long as their values.
        encoded = lifecycle_config_length(content)
        if encoded > LCC_MAX:
            raise ValueError(f"{CLIENT_SCRIPT.name} is {encoded} characters in base64; "
                             f"Studio takes at most {LCC_MAX}")  # fmt: skip
        # Every property is create-only and the name is ours: new content needs a new name, so
        # the name ends with a hash of the content as CloudFormation will see it.
        resolved = json.dumps(Stack.of(self).resolve(content), sort_keys=True)
        digest = hashlib.sha256((resolved + app).encode()).hexdigest()[:8]
        lifecycle = sagemaker.CfnStudioLifecycleConfig(
            self,
            f"{app}Lifecycle",
            studio_lifecycle_config_name=studio_lifecycle_config_name(config.name, app, digest),
            studio_lifecycle_config_app_type=app,
            studio_lifecycle_config_content=Fn.base64(content),
        )
        trace(lifecycle, config.studio, {
            "StudioLifecycleConfigAppType": f"apps[{config.studio.apps.index(app)}]",
        })  # fmt: skip
        return lifecycle

    # --- the domain ----------------------------------------------------------------------------

    def _domain(
        self, config: EnvironmentConfig, network: StudioNetworkHandles
    ) -> sagemaker.CfnDomain:
        studio = config.studio
        d = sagemaker.CfnDomain
        idle = (
            d.AppLifecycleManagementProperty(
                idle_settings=d.IdleSettingsProperty(
                    lifecycle_management="ENABLED",
                    idle_timeout_in_minutes=studio.idle_shutdown_minutes,
                    min_idle_timeout_in_minutes=60,
                    max_idle_timeout_in_minutes=studio.idle_shutdown_minutes,
                )
            )
            if studio.idle_shutdown_minutes is not None
            else d.AppLifecycleManagementProperty(
                idle_settings=d.IdleSettingsProperty(lifecycle_management="DISABLED")
            )
        )

        def spec(app: StudioApp) -> sagemaker.CfnDomain.ResourceSpecProperty:
            return d.ResourceSpecProperty(
                instance_type=studio.default_instance_type,
                lifecycle_config_arn=self.lifecycle_config_arns[app],
            )

        jupyter = code_editor = None
        if "JupyterLab" in studio.apps:
            jupyter = d.JupyterLabAppSettingsProperty(
                default_resource_spec=spec("JupyterLab"),
                lifecycle_config_arns=[self.lifecycle_config_arns["JupyterLab"]],
                app_lifecycle_management=idle,
            )
        if "CodeEditor" in studio.apps:
            code_editor = d.CodeEditorAppSettingsProperty(
                default_resource_spec=spec("CodeEditor"),
                lifecycle_config_arns=[self.lifecycle_config_arns["CodeEditor"]],
                app_lifecycle_management=idle,
            )
        hidden = [*HIDDEN_ALWAYS, *(a for a in APP_TYPES if a not in studio.apps)]
        groups = [network.studio_fsx_security_group_id, self.apps_security_group_id]
        domain = sagemaker.CfnDomain(
            self,
            "Domain",
            domain_name=studio_domain_name(config.name),
            auth_mode="IAM",
            app_network_access_type="VpcOnly",
            vpc_id=network.vpc_id,
            subnet_ids=[network.private_subnet_id],
            default_user_settings=d.UserSettingsProperty(
                execution_role=self.execution_role.role_arn,
                security_groups=groups,
                studio_web_portal="ENABLED",
                default_landing_uri="studio::",
                jupyter_lab_app_settings=jupyter,
                code_editor_app_settings=code_editor,
                studio_web_portal_settings=d.StudioWebPortalSettingsProperty(
                    hidden_app_types=hidden
                ),
                space_storage_settings=d.DefaultSpaceStorageSettingsProperty(
                    default_ebs_storage_settings=d.DefaultEbsStorageSettingsProperty(
                        default_ebs_volume_size_in_gb=studio.space_ebs_gib,
                        maximum_ebs_volume_size_in_gb=max(studio.space_ebs_gib, 100),
                    )
                ),
            ),
            domain_settings=d.DomainSettingsProperty(
                security_group_ids=[self.apps_security_group_id],
                execution_role_identity_config="USER_PROFILE_NAME",
            ),
        )
        # Retained: the domain holds users' home volume (EFS) and its profiles hold their
        # spaces; deleting it means deleting those first, which only a person should decide.
        domain.apply_removal_policy(RemovalPolicy.RETAIN)
        keys = {
            "DefaultUserSettings/SpaceStorageSettings/DefaultEbsStorageSettings/"
            "DefaultEbsVolumeSizeInGb": "space_ebs_gib",
        }
        for app in ("JupyterLab", "CodeEditor"):
            settings = f"DefaultUserSettings/{app}AppSettings"
            keys[f"{settings}/DefaultResourceSpec/InstanceType"] = "default_instance_type"
            for limit in ("IdleTimeoutInMinutes", "MaxIdleTimeoutInMinutes"):
                setting = f"{settings}/AppLifecycleManagement/IdleSettings/{limit}"
                keys[setting] = "idle_shutdown_minutes"
        trace(domain, studio, keys)
        return domain


class StudioPermissions(Construct):
    """The execution role's policy: what Studio's UI, the lifecycle configuration and users'
    notebooks need, each statement scoped and justified. No AmazonSageMakerFullAccess, no
    AmazonS3FullAccess; no ssm:StartSession (a shell on a node would bypass the per-user token).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        role: iam.Role,
        config: EnvironmentConfig,
        domain_id: str,
        subnet_id: str,
        security_group_ids: list[str],
        cluster: StudioClusterHandles,
        data_bucket: s3.IBucket,
        eks: StudioEks | None,
        package: s3_assets.Asset | None = None,
    ) -> None:
        super().__init__(scope, id)
        arn = f"arn:{Aws.PARTITION}:sagemaker:{Aws.REGION}:{Aws.ACCOUNT_ID}"
        ec2_arn = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}"
        ssm_arn = f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}:{Aws.ACCOUNT_ID}:parameter"
        own_profile = f"{arn}:user-profile/{domain_id}/${{sagemaker:UserProfileName}}"
        private = {
            "ArnLike": {"sagemaker:OwnerUserProfileArn": own_profile},
            "StringEquals": {"sagemaker:SpaceSharingType": "Private"},
        }
        studio = config.studio
        statements = [
            # Studio's UI calls these with the execution role. Private spaces of the caller's own
            # profile only (AWS's "Give your users access to spaces" policy, shared spaces
            # left out: they would mount nothing of FSx and belong to no one).
            iam.PolicyStatement(
                sid="OwnPrivateSpaces",
                actions=["sagemaker:CreateSpace", "sagemaker:UpdateSpace", "sagemaker:DeleteSpace"],
                resources=[f"{arn}:space/{domain_id}/*"],
                conditions=private,
            ),
            iam.PolicyStatement(
                sid="AppsInOwnPrivateSpacesOnAllowedTypes",
                actions=["sagemaker:CreateApp"],
                resources=[f"{arn}:app/{domain_id}/*"],
                conditions={
                    **private,
                    "ForAllValues:StringEquals": {"sagemaker:InstanceTypes": studio.instance_types},
                },
            ),
            iam.PolicyStatement(
                sid="StopAppsInOwnPrivateSpaces",
                actions=["sagemaker:DeleteApp"],
                resources=[f"{arn}:app/{domain_id}/*"],
                conditions=private,
            ),
            iam.PolicyStatement(
                sid="TagWhatStudioCreates",
                actions=["sagemaker:AddTags"],
                resources=[f"{arn}:space/{domain_id}/*", f"{arn}:app/{domain_id}/*"],
                conditions={"Null": {"sagemaker:TaggingAction": "false"}},
            ),
            iam.PolicyStatement(
                sid="StudioUiReads",
                actions=[
                    "sagemaker:DescribeDomain",
                    "sagemaker:DescribeUserProfile",
                    "sagemaker:DescribeSpace",
                    "sagemaker:DescribeApp",
                    "sagemaker:ListTags",
                ],
                resources=[
                    f"{arn}:domain/{domain_id}",
                    f"{arn}:user-profile/{domain_id}/*",
                    f"{arn}:space/{domain_id}/*",
                    f"{arn}:app/{domain_id}/*",
                ],
            ),
            iam.PolicyStatement(
                sid="StudioUiLists",
                # List* take no resource (the Service Authorization Reference; parliament's
                # lint of the synthesized policy flags them on an ARN).
                actions=[
                    "sagemaker:ListDomains",
                    "sagemaker:ListUserProfiles",
                    "sagemaker:ListSpaces",
                    "sagemaker:ListApps",
                ],
                resources=["*"],
            ),
            # VPC-only: SageMaker creates each app's network interface with the execution role,
            # in the cluster subnet and the domain's security groups.
            iam.PolicyStatement(
                sid="AppInterfaces",
                actions=["ec2:CreateNetworkInterface"],
                resources=[
                    f"{ec2_arn}:network-interface/*",
                    f"{ec2_arn}:subnet/{subnet_id}",
                    *(f"{ec2_arn}:security-group/{sg}" for sg in security_group_ids),
                ],
            ),
            iam.PolicyStatement(
                sid="ManageAppInterfaces",
                actions=[
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                ],
                resources=[f"{ec2_arn}:network-interface/*"],
            ),
            describe_network_statement(),
            # Lifecycle-configuration and app logs (Studio writes them with the execution role).
            iam.PolicyStatement(
                sid="StudioLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[
                    f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:"
                    "log-group:/aws/sagemaker/studio:*"
                ],
            ),
            # The cluster's state for users' notebooks (`hyperpod` CLI, node list); read only.
            iam.PolicyStatement(
                sid="ReadCluster",
                actions=["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"],
                resources=[cluster.cluster_arn],
            ),
        ]
        if eks is None:
            statements += [
                # Each user reads only their own Slurm token: the session's source identity is
                # their profile name. No source identity: the statement matches nothing.
                iam.PolicyStatement(
                    sid="OwnSlurmToken",
                    actions=["ssm:GetParameter"],
                    resources=[f"{ssm_arn}{slurm_token_prefix(config.name)}/{IDENTITY}"],
                ),
                iam.PolicyStatement(
                    sid="SlurmClientSettings",
                    actions=["ssm:GetParameter"],
                    resources=[f"{ssm_arn}{slurm_client_parameter(config.name)}"],
                ),
            ]
            data_bucket.grant_read(role, f"{CLIENT_BUNDLE_PREFIX}*")
        else:
            statements.append(
                # `aws eks update-kubeconfig` needs the endpoint and CA; tokens are STS presigned
                # URLs and need no permission.
                iam.PolicyStatement(
                    sid="ReadEksCluster",
                    actions=["eks:DescribeCluster"],
                    resources=[eks.cluster_arn],
                )
            )
        if package is not None:
            # The lifecycle configuration's download of the toolkit: the parameter with its URL,
            # and that one object only (the asset's grant_read would add the bucket's List and
            # every object's Get*).
            statements += [
                iam.PolicyStatement(
                    sid="ToolkitPackageUrl",
                    actions=["ssm:GetParameter"],
                    resources=[f"{ssm_arn}{studio_package_parameter(config.name)}"],
                ),
                iam.PolicyStatement(
                    sid="ToolkitPackage",
                    actions=["s3:GetObject"],
                    resources=[
                        f"arn:{Aws.PARTITION}:s3:::{package.s3_bucket_name}/{package.s3_object_key}"
                    ],
                ),
            ]
        for statement in statements:
            role.add_to_principal_policy(statement)
        # Data: the shared data prefix (linked to /fsx/data) read-only, and a prefix of the user's
        # own for uploads.
        data_bucket.grant_read(role, "data/*")
        data_bucket.grant_read_write(role, f"studio/{IDENTITY}/*")
        NagSuppressions.add_resource_suppressions(
            role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "Scoped wildcards only: spaces and apps of this domain (and the "
                    "caller's own private ones by condition), app network interfaces that "
                    "SageMaker creates at run time (ids unknown), EC2 Describe* and "
                    "ListDomains/ListUserProfiles/ListSpaces/ListApps (no resource-level "
                    "permissions), the "
                    "/aws/sagemaker/studio log group's streams, objects under data/, the Slurm "
                    "client bundle prefix and the user's own studio/<profile>/ prefix.",
                }
            ],
            apply_to_children=True,
        )
