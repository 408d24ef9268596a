"""The Studio stack: the domain, the partitions provider, and the users in nested stacks.

Deploys after the cluster stack (it needs the cluster's ARN; the nodes' own grants for what they
write for Studio are the cluster stack's). Users are spread over up to 16 nested stacks by a hash of
their name, so 500 users stay within CloudFormation's 500 resources per template.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import NestedStack, Stack
from aws_cdk import aws_s3 as s3
from constructs import Construct, IDependable

from hyperpod_kit.config.schema import EnvironmentConfig, StudioApp, UserConfig
from hyperpod_kit.constructs.studio import (
    StudioClusterHandles,
    StudioDomain,
    StudioEks,
    StudioFileSystemHandles,
    StudioNetworkHandles,
)
from hyperpod_kit.constructs.studio_partitions import (
    StudioFileSystemAccess,
    StudioPartitionsProvider,
    StudioProfiles,
    batches,
)
from hyperpod_kit.stacks.discovery import publish
from hyperpod_kit.stacks.trainer import trainer_image_uri


class StudioUsersStack(NestedStack):
    """One batch of users (a nested stack of the Studio stack)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        users: list[UserConfig],
        domain_id: str,
        file_system_id: str,
        service_token: str,
        lifecycle_config_arns: dict[StudioApp, str],
        after: list[IDependable],
    ) -> None:
        super().__init__(scope, id, description=f"hyperpod-kit {config.name}: Studio users")
        self.profiles = StudioProfiles(
            self,
            "Users",
            config=config,
            users=users,
            domain_id=domain_id,
            file_system_id=file_system_id,
            service_token=service_token,
            lifecycle_config_arns=lifecycle_config_arns,
            after=after,
        )


class StudioStack(Stack):
    """Props: the network's, file system's and cluster's handles, the data bucket, and on EKS
    the EKS cluster (`StudioEks`)."""

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
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.studio = StudioDomain(
            self,
            "Studio",
            config=config,
            network=network,
            file_system=file_system,
            cluster=cluster,
            data_bucket=data_bucket,
            eks=eks,
            # For `hyperpod-kit job` in the spaces (install.json): the trainer stack's image.
            trainer_image=trainer_image_uri(config) if config.trainer.build_image else None,
        )
        provider = StudioPartitionsProvider(
            self,
            "Partitions",
            environment=config.name,
            domain_id=self.studio.domain_id,
            file_system_id=file_system.file_system_id,
            vpc_id=network.vpc_id,
            timeout_minutes=config.studio.partition_timeout_minutes,
        )
        # What the nodes write for Studio (partition reports, Slurm tokens, the client) is
        # granted in the cluster stack, which deploys before the nodes' first provisioning.
        after: list[IDependable] = []
        if config.storage.lustre.existing is not None:
            access = StudioFileSystemAccess(
                self,
                "FileSystemAccess",
                service_token=provider.service_token,
                file_system_id=file_system.file_system_id,
                security_group_id=network.studio_fsx_security_group_id,
            )
            after.append(access)
        self.users: dict[int, StudioUsersStack] = {}
        for batch, users in batches(config.studio.selected(config.users)).items():
            nested = StudioUsersStack(
                self,
                f"Users{batch:02d}",
                config=config,
                users=users,
                domain_id=self.studio.domain_id,
                file_system_id=file_system.file_system_id,
                service_token=provider.service_token,
                lifecycle_config_arns=self.studio.lifecycle_config_arns,
                after=[],
            )
            for dependency in after:
                nested.node.add_dependency(dependency)
            self.users[batch] = nested
        publish(
            self,
            environment=config.name,
            area="studio",
            values={
                "domain_id": self.studio.domain_id,
                "domain_url": self.studio.domain_url,
                "execution_role_arn": self.studio.execution_role.role_arn,
            },
        )
