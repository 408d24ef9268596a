"""`DataBucket` and `LustreFileSystem` through the storage stack: the data-safety properties."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.conftest import SynthFn

pytestmark = pytest.mark.synth


def _one(template: Any, kind: str) -> tuple[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = template.find_resources(kind)
    assert len(found) == 1, f"expected one {kind}, found {sorted(found)}"
    return next(iter(found.items()))


def test_lustre_is_persistent2_with_config_values_and_retained(synth: SynthFn) -> None:
    storage = synth().templates["storage"]
    logical, fs = _one(storage, "AWS::FSx::FileSystem")
    assert logical == "LustreFileSystem"  # stable: a new logical id would replace the data
    assert fs["DeletionPolicy"] == "Retain" and fs["UpdateReplacePolicy"] == "Retain"
    props = fs["Properties"]
    assert props["FileSystemType"] == "LUSTRE"
    assert props["FileSystemTypeVersion"] == "2.15"
    assert props["StorageCapacity"] == 1200
    assert props["StorageType"] == "SSD"
    lustre = props["LustreConfiguration"]
    assert lustre["DeploymentType"] == "PERSISTENT_2"
    assert lustre["PerUnitStorageThroughput"] == 250
    assert lustre["DataCompressionType"] == "LZ4"
    assert lustre["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}
    assert len(props["SubnetIds"]) == 1
    assert len(props["SecurityGroupIds"]) == 2  # cluster + Studio from the start


def test_lustre_follows_config(synth: SynthFn) -> None:
    storage = synth(
        {
            "storage": {
                "lustre": {
                    "storage_capacity_gib": 4800,
                    "throughput_per_unit_storage": 1000,
                    "data_compression": "NONE",
                    "metadata": {"mode": "USER_PROVISIONED", "iops": 12000},
                    "removal_policy": "destroy",
                    "automatic_backup_retention_days": 7,
                    "weekly_maintenance_start_time": "7:03:00",
                }
            }
        }
    ).templates["storage"]
    _, fs = _one(storage, "AWS::FSx::FileSystem")
    assert fs["DeletionPolicy"] == "Delete"
    lustre = fs["Properties"]["LustreConfiguration"]
    assert fs["Properties"]["StorageCapacity"] == 4800
    assert lustre["PerUnitStorageThroughput"] == 1000
    assert lustre["DataCompressionType"] == "NONE"
    assert lustre["MetadataConfiguration"] == {"Mode": "USER_PROVISIONED", "Iops": 12000}
    assert lustre["AutomaticBackupRetentionDays"] == 7
    assert lustre["WeeklyMaintenanceStartTime"] == "7:03:00"


def test_data_repository_association_links_bucket_prefix_with_policies(synth: SynthFn) -> None:
    storage = synth().templates["storage"]
    _, dra = _one(storage, "AWS::FSx::DataRepositoryAssociation")
    props = dra["Properties"]
    assert props["FileSystemId"] == {"Ref": "LustreFileSystem"}
    assert props["FileSystemPath"] == "/data"
    assert props["DataRepositoryPath"] == {
        "Fn::Join": ["", ["s3://", {"Ref": "DataBucket"}, "/data/"]]
    }
    assert props["BatchImportMetaDataOnCreate"] is True
    assert props["ImportedFileChunkSize"] == 1024
    events = ["NEW", "CHANGED", "DELETED"]
    assert props["S3"] == {
        "AutoImportPolicy": {"Events": events},
        "AutoExportPolicy": {"Events": events},
    }


def test_several_associations_and_manual_directions(synth: SynthFn) -> None:
    storage = synth(
        {
            "storage": {
                "lustre": {
                    "data_repository_associations": [
                        {"file_system_path": "/data", "s3_prefix": "data/", "export_policy": []},
                        {
                            "file_system_path": "/checkpoints",
                            "s3_prefix": "checkpoints/",
                            "import_policy": [],
                            "export_policy": [],
                        },
                    ]
                }
            }
        }
    ).templates["storage"]
    dras = storage.find_resources("AWS::FSx::DataRepositoryAssociation")
    by_path = {d["Properties"]["FileSystemPath"]: d["Properties"] for d in dras.values()}
    assert set(by_path) == {"/data", "/checkpoints"}
    assert by_path["/data"]["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    assert "S3" not in by_path["/checkpoints"]  # neither direction automatic


def test_bucket_is_private_encrypted_versioned_logged_tls_only_and_retained(synth: SynthFn) -> None:
    storage = synth().templates["storage"]
    buckets = storage.find_resources("AWS::S3::Bucket")
    assert set(buckets) == {"DataBucket", "AccessLogsBucket"}
    assert buckets["AccessLogsBucket"]["DeletionPolicy"] == "Retain"
    data = buckets["DataBucket"]
    assert data["DeletionPolicy"] == "Retain" and data["UpdateReplacePolicy"] == "Retain"
    props = data["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": "AccessLogsBucket"}
    storage.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": "DataBucket"},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_kms_encryption_uses_a_rotated_key_fsx_can_use(synth: SynthFn) -> None:
    storage = synth({"storage": {"bucket": {"encryption": "kms"}}}).templates["storage"]
    key_id, key = _one(storage, "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    sse = storage.find_resources("AWS::S3::Bucket")["DataBucket"]["Properties"]["BucketEncryption"]
    by_default = sse["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert by_default["SSEAlgorithm"] == "aws:kms"
    assert by_default["KMSMasterKeyID"] == {"Fn::GetAtt": [key_id, "Arn"]}
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    fsx = [s for s in statements if s.get("Sid") == "FsxDataRepositoryAccess"]
    assert fsx and "AWSServiceRoleForFSxS3Access_" in str(fsx[0]["Condition"])


def test_existing_file_system_and_bucket_create_nothing_stateful(synth: SynthFn) -> None:
    run = synth(
        {
            "storage": {
                "bucket": {"existing_name": "my-training-data"},
                "lustre": {
                    "existing": {
                        "file_system_id": "fs-0123456789abcdef0",
                        "mount_name": "abcdefgh",
                        "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                    }
                },
            }
        }
    )
    storage = run.templates["storage"]
    for kind in ("AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::S3::Bucket"):
        storage.resource_count_is(kind, 0)
    _, param = _one(storage, "AWS::SSM::Parameter")
    value = param["Properties"]["Value"]
    assert "fs-0123456789abcdef0" in str(value) and "abcdefgh" in str(value)
    assert run.stacks.storage.lustre.mount_name == "abcdefgh"


def test_storage_uses_network_handles_across_stacks(synth: SynthFn) -> None:
    storage = synth().templates["storage"]
    _, fs = _one(storage, "AWS::FSx::FileSystem")
    for ref in (fs["Properties"]["SubnetIds"][0], *fs["Properties"]["SecurityGroupIds"]):
        assert "Fn::ImportValue" in ref  # a typed handle, exported by the network stack


def test_storage_handles_are_stack_outputs_and_a_discovery_parameter(synth: SynthFn) -> None:
    storage = synth().templates["storage"]
    storage.has_output("FileSystemId", {"Value": {"Ref": "LustreFileSystem"}})
    storage.has_output(
        "MountName", {"Value": {"Fn::GetAtt": ["LustreFileSystem", "LustreMountName"]}}
    )
    storage.has_output("DnsName", {"Value": {"Fn::GetAtt": ["LustreFileSystem", "DNSName"]}})
    storage.has_output("BucketName", {"Value": {"Ref": "DataBucket"}})
    storage.has_resource_properties(
        "AWS::SSM::Parameter", {"Name": "/hyperpod-kit/hyperpod-dev/storage"}
    )
