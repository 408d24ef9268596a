"""The storage stack: the data bucket and FSx for Lustre linked to it."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.data_bucket import DataBucket
from hyperpod_kit.constructs.lustre import LustreFileSystem
from hyperpod_kit.constructs.network import ClusterNetwork
from hyperpod_kit.stacks.discovery import publish


class StorageStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: ClusterNetwork,
        bucket: s3.IBucket | None = None,
        file_system: fsx.LustreFileSystem | None = None,
        **kwargs: Any,
    ) -> None:
        """``bucket``: a bucket of the app (the construct library) in place of the data bucket
        `config` creates or names; ``file_system``: the app's file system in place of the one
        `config` creates."""
        super().__init__(scope, id, **kwargs)
        self.data = DataBucket(self, "Data", config=config.storage.bucket, bucket=bucket)
        self.lustre = LustreFileSystem(
            self,
            "Lustre",
            config=config.storage.lustre,
            network=network,
            bucket=self.data.bucket,
            file_system=file_system,
        )
        publish(
            self,
            environment=config.name,
            area="storage",
            values={
                "bucket_name": self.data.bucket_name,
                "file_system_id": self.lustre.file_system_id,
                "dns_name": self.lustre.dns_name,
                "mount_name": self.lustre.mount_name,
            },
        )
