"""`LustreFileSystem`: FSx for Lustre PERSISTENT_2 linked to S3, or an existing file system."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_kit.config.schema import ExistingLustreConfig, LustreConfig, S3Event
from hyperpod_kit.constructs.data_bucket import REMOVAL
from hyperpod_kit.constructs.network import ClusterNetwork, lustre_ingress
from hyperpod_kit.constructs.provenance import trace, trace_values

LOGICAL_ID = "LustreFileSystem"


def on_file_system(config: LustreConfig, file_system: fsx.LustreFileSystem) -> LustreConfig:
    """`config` with `file_system`, the app's own (the construct library, `hyperpod_kit.cdk`), as
    its existing file system: tokens, which the schema's patterns would refuse, so the section is
    built without validation. Refused (ValueError) when `config` lists data repository
    associations: they are made only on a file system the environment creates."""
    if "data_repository_associations" in config.model_fields_set and (
        config.data_repository_associations
    ):
        raise ValueError(
            "data repository associations are made only on a file system the environment "
            "creates: link the app's file system to S3 in its own stack, or leave "
            "storage.lustre.data_repository_associations out"
        )
    existing = ExistingLustreConfig.model_construct(
        file_system_id=file_system.file_system_id,
        dns_name=file_system.dns_name,
        mount_name=file_system.mount_name,
    )
    return config.model_copy(update={"existing": existing, "data_repository_associations": []})


class LustreFileSystem(Construct):
    """The cluster's shared file system, in the cluster subnet and security groups.

    Handles: ``file_system_id``, ``dns_name``, ``mount_name`` (for the cluster's lifecycle scripts
    and `FsxLustreConfig`, and for Studio's `CustomFileSystemConfigs`).

    ``file_system``: the app's own file system (an `aws_fsx.LustreFileSystem` in the cluster's
    VPC) in place of one created here; its security groups let the nodes in on the Lustre ports
    (the rules are made here, in this construct's stack). Studio's security group reaches its
    network interfaces as it reaches an existing file system's (`StudioFileSystemAccess`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: LustreConfig,
        network: ClusterNetwork,
        bucket: s3.IBucket,
        file_system: fsx.LustreFileSystem | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.associations: list[fsx.CfnDataRepositoryAssociation] = []
        if file_system is not None:
            config = on_file_system(config, file_system)
            self._let_the_nodes_in(file_system, network.cluster_security_group_id)
        if config.existing is not None:
            self.file_system_id: str = config.existing.file_system_id
            self.dns_name: str = config.existing.dns_name
            self.mount_name: str = config.existing.mount_name
            trace_values(self, config.existing, ["file_system_id", "dns_name", "mount_name"])
            return

        meta = fsx.CfnFileSystem.MetadataConfigurationProperty(
            mode=config.metadata.mode, iops=config.metadata.iops
        )
        fs = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=config.file_system_type_version,
            storage_type="SSD",
            storage_capacity=config.storage_capacity_gib,
            subnet_ids=[network.private_subnet_id],
            # Both groups from the start: changing them later replaces the file system.
            security_group_ids=[
                network.cluster_security_group_id,
                network.studio_fsx_security_group_id,
            ],
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type="PERSISTENT_2",
                per_unit_storage_throughput=config.throughput_per_unit_storage,
                data_compression_type=config.data_compression,
                metadata_configuration=meta,
                automatic_backup_retention_days=config.automatic_backup_retention_days,
                copy_tags_to_backups=True,
                weekly_maintenance_start_time=config.weekly_maintenance_start_time,
            ),
        )
        trace(fs, config, {
            "FileSystemTypeVersion": "file_system_type_version",
            "StorageCapacity": "storage_capacity_gib",
            "LustreConfiguration/PerUnitStorageThroughput": "throughput_per_unit_storage",
            "LustreConfiguration/DataCompressionType": "data_compression",
            "LustreConfiguration/MetadataConfiguration/Mode": "metadata.mode",
            "LustreConfiguration/MetadataConfiguration/Iops": "metadata.iops",
            "LustreConfiguration/AutomaticBackupRetentionDays": "automatic_backup_retention_days",
            "LustreConfiguration/WeeklyMaintenanceStartTime": "weekly_maintenance_start_time",
        })  # fmt: skip
        fs.override_logical_id(LOGICAL_ID)  # stable: a new logical id would replace the data
        fs.apply_removal_policy(REMOVAL[config.removal_policy])
        self.file_system = fs
        self.file_system_id = fs.ref
        self.dns_name = fs.attr_dns_name
        self.mount_name = fs.attr_lustre_mount_name

        for i, dra in enumerate(config.data_repository_associations):
            assoc = fsx.CfnDataRepositoryAssociation(
                self,
                f"Association{i}",
                file_system_id=fs.ref,
                file_system_path=dra.file_system_path,
                data_repository_path=f"s3://{bucket.bucket_name}/{dra.s3_prefix}",
                batch_import_meta_data_on_create=dra.batch_import_meta_data_on_create,
                imported_file_chunk_size=dra.imported_file_chunk_size_mib,
                s3=_s3_policies(dra.import_policy, dra.export_policy),
            )
            trace(assoc, dra, {
                "FileSystemPath": "file_system_path",
                "DataRepositoryPath": "s3_prefix",
                "BatchImportMetaDataOnCreate": "batch_import_meta_data_on_create",
                "ImportedFileChunkSize": "imported_file_chunk_size_mib",
                "S3/AutoImportPolicy/Events": "import_policy",
                "S3/AutoExportPolicy/Events": "export_policy",
            })  # fmt: skip
            # The link holds no data of its own; deleting it leaves files and objects in place.
            assoc.apply_removal_policy(RemovalPolicy.DESTROY)
            self.associations.append(assoc)

    def _let_the_nodes_in(self, file_system: fsx.LustreFileSystem, nodes: str) -> None:
        """Lustre from the nodes' group into each of the file system's groups. Made here, not
        with `connections.allow_from` (which would put the rules in the file system's stack and
        make it import from the environment's network stack, which imports the app's VPC: a
        cycle)."""
        for i, group in enumerate(file_system.connections.security_groups):
            lustre_ingress(
                self, f"NodesLustre{i}Port", group_id=group.security_group_id,
                source_id=nodes, source="the HyperPod nodes",
            )  # fmt: skip


def _s3_policies(
    imports: list[S3Event], exports: list[S3Event]
) -> fsx.CfnDataRepositoryAssociation.S3Property | None:
    """Automatic import/export events; an empty list leaves that direction manual."""
    if not imports and not exports:
        return None
    dra = fsx.CfnDataRepositoryAssociation
    return dra.S3Property(
        auto_import_policy=dra.AutoImportPolicyProperty(events=list(imports)) if imports else None,
        auto_export_policy=dra.AutoExportPolicyProperty(events=list(exports)) if exports else None,
    )
