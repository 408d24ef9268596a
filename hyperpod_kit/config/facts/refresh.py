"""Regenerate the dated fact tables from the team's fact sheet, botocore and cfn-lint.

    python -m hyperpod_kit.config.facts.refresh PATH/TO/facts-instance-types.md
    python -m hyperpod_kit.config.facts.refresh --api
    python -m hyperpod_kit.config.facts.refresh --prose

Reads the Markdown fact sheet (instance types with GPUs, EFA, RDMA and ENIs; AZ IDs per region,
each row with its sources) and botocore's `ClusterInstanceType` enum (the types HyperPod
accepts), checks that they agree, and writes `instance_types.json` and `regions.json` beside this
file. Both forms also write `api_constraints.json`: for every request field the environment file
feeds (`API_FIELDS` below), the constraints the installed botocore's service model carries
(pattern, length, range, enum, list length), and whether CloudFormation's registry schema (as
cfn-lint ships it) wants the list's items unique; and, in `task_governance.json`, the regions
where that cfn-lint knows task governance's CloudFormation types. The JSON is committed:
validation never reads the sheet, botocore's models or cfn-lint's schemas, and never calls AWS.
`--prose` (and both forms) also regenerate `prose_rules.json`: every sentence
of those registry schemas and service models that states a rule in prose only (`prose_sentences`),
each with the verdict a person wrote (the check that enforces it, or why none is needed); a new
sentence gets no verdict, and tests/unit/test_prose_rules.py fails until it has one.
Run it when the sheet is
refreshed or botocore is bumped (new instance types and AZs appear in botocore and the AZ guide
first), then review the diff.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_CHECKED = re.compile(r"^Checked: (\d{4}-\d{2}-\d{2})", re.MULTILINE)
_NOTE = re.compile(r"\s*[¹²³⁴⁵⁶⁷⁸⁹]+\s*")

# Trainium ranks map to NeuronCores, not chips (fact sheet, note 6; logical cores at LNC=2).
NEURON_CORES = {
    "ml.trn1.32xlarge": 32,
    "ml.trn1n.32xlarge": 32,
    "ml.trn2.3xlarge": 4,
    "ml.trn2.48xlarge": 64,
}


def _rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _number(cell: str) -> float | None:
    """A numeric cell; None for "?" (unknown, never 0)."""
    cell = _NOTE.sub("", cell).strip()
    return None if cell in {"?", ""} else float(cell)


def _int(cell: str) -> int | None:
    value = _number(cell)
    return None if value is None else int(value)


def _rdma(cell: str) -> tuple[bool, bool]:
    """`Yes / No` -> (read, write); no EFA -> (False, False)."""
    if "/" not in cell:
        return False, False
    read, write = (part.strip().startswith("Yes") for part in cell.split("/", 1))
    return read, write


def _accelerated(text: str) -> dict[str, dict[str, Any]]:
    types = {}
    for row in _rows(text, "| ClusterInstanceType | Accelerator |"):
        name, accel, count, acc_mem, vcpu, mem, efa, rdma, gdr, nics, enis, ipv4 = row
        accel = _NOTE.sub(" ", accel).strip()
        kind = "trainium" if "Trainium" in accel else "gpu"
        read, write = _rdma(rdma)
        accelerators = _int(count) or 0
        types[name] = {
            "accelerator": accel,
            "accelerator_kind": kind,
            "accelerators": accelerators,
            "accelerator_memory_gib": _number(acc_mem),
            "vcpus": _int(vcpu),
            "memory_gib": _number(mem),
            "efa_interfaces": _int(efa),
            "rdma_read": read,
            "rdma_write": write,
            "gdr_required": _NOTE.sub("", gdr).strip() == "true",
            "network_cards": _int(nics),
            "max_enis": _int(enis),
            "ipv4_per_eni": _int(ipv4),
            "processes_per_node": NEURON_CORES.get(name, accelerators),
        }
    return types


def _general(text: str) -> dict[str, dict[str, Any]]:
    types = {}
    for row in _rows(text, "| ClusterInstanceType | vCPU |"):
        name, vcpu, mem, efa, rdma, nics, enis, ipv4 = row
        read, write = _rdma(rdma)
        types[name] = {
            "accelerator": None,
            "accelerator_kind": None,
            "accelerators": 0,
            "accelerator_memory_gib": None,
            "vcpus": _int(vcpu),
            "memory_gib": _number(mem),
            "efa_interfaces": _int(efa),
            "rdma_read": read,
            "rdma_write": write,
            "gdr_required": False,
            "network_cards": _int(nics),
            "max_enis": _int(enis),
            "ipv4_per_eni": _int(ipv4),
            "processes_per_node": 0,
        }
    return types


def _regions(text: str) -> dict[str, dict[str, Any]]:
    regions = {}
    for row in _rows(text, "| Region | AZ IDs |"):
        region, az_ids, _count, hyperpod = row
        region = region.split(" ", 1)[0]
        ids = [] if az_ids == "?" else [a.strip() for a in az_ids.split(",")]
        regions[region] = {"az_ids": ids, "hyperpod": "" if hyperpod == "—" else hyperpod}
    return regions


def botocore_instance_types() -> set[str]:
    """`ClusterInstanceType` of the installed botocore: the types HyperPod's API accepts."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape: Any = model.shape_for("ClusterInstanceType")
    return set(shape.enum)


# --- the API's own constraints ------------------------------------------------------------------

_NAME_HINT = "letters, digits and single hyphens, starting and ending with a letter or digit"
_TAG_HINT = "use letters, digits, spaces and _ . : / = + - @"

# Which request field each value of the environment file becomes. `key` is the file's path ([]:
# every item of a list; .keys() and .values(): a mapping's keys and values); `value`, where given,
# names the derivation in validators/api.py that computes what is sent (a stack's or a space's
# name from the file's names); `when` says in which environments the request is made; `api` is
# service:Operation:Member.Path of botocore's model ([]: a list's items; .key/.value: a map's);
# `cfn` is the CloudFormation property whose registry schema may want unique items;
# `owner` names the validator that checks this field with more context (its findings say more,
# e.g. an allow-list), so the table's own check leaves it alone; `unique`, where given, is why a
# list's items must differ when CloudFormation's schema does not say so; `hint` is shown when a
# value breaks the pattern (or is not one of an enum's), `long_hint` and `short_hint` when it is
# longer than the field's maximum or shorter than its minimum.
API_FIELDS: tuple[dict[str, str], ...] = (
    # sagemaker CreateCluster (the cluster stack)
    {"key": "cluster.name", "value": "cluster_name", "api": "sagemaker:CreateCluster:ClusterName",
     "hint": _NAME_HINT},
    {"key": "cluster.instance_groups", "api": "sagemaker:CreateCluster:InstanceGroups",
     "cfn": "AWS::SageMaker::Cluster:InstanceGroups"},
    {"key": "cluster.instance_groups[].name",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceGroupName", "hint": _NAME_HINT},
    {"key": "cluster.instance_groups[].instance_type",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceType", "owner": "instance-type"},
    {"key": "cluster.instance_groups[].instance_count",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceCount"},
    {"key": "cluster.instance_groups[].threads_per_core",
     "api": "sagemaker:CreateCluster:InstanceGroups[].ThreadsPerCore"},
    {"key": "cluster.instance_groups[].ebs_volume_gib",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig"
     ".VolumeSizeInGB"},
    {"key": "cluster.instance_groups[].deep_health_checks", "value": "deep_health_checks",
     "api": "sagemaker:CreateCluster:InstanceGroups[].OnStartDeepHealthChecks",
     "cfn": "AWS::SageMaker::Cluster:InstanceGroups[].OnStartDeepHealthChecks",
     "owner": "deep-health-checks"},
    {"key": "cluster.instance_groups[].deep_health_checks[]",
     "api": "sagemaker:CreateCluster:InstanceGroups[].OnStartDeepHealthChecks[]"},
    {"key": "cluster.instance_groups[].partition", "value": "slurm_partitions", "when": "slurm",
     "api": "sagemaker:CreateCluster:InstanceGroups[].SlurmConfig.PartitionNames[]",
     "hint": _NAME_HINT},
    {"key": "cluster.training_plan_arn",
     "api": "sagemaker:CreateCluster:InstanceGroups[].TrainingPlanArn",
     "hint": "like arn:aws:sagemaker:us-west-2:111122223333:training-plan/my-plan"},
    {"key": "cluster.instance_groups[].training_plan_arn",
     "api": "sagemaker:CreateCluster:InstanceGroups[].TrainingPlanArn",
     "hint": "like arn:aws:sagemaker:us-west-2:111122223333:training-plan/my-plan"},
    {"key": "cluster.instance_groups[].instance_types",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceRequirements.InstanceTypes",
     "cfn": "AWS::SageMaker::Cluster:InstanceGroups[].InstanceRequirements.InstanceTypes",
     "unique": "a type listed twice gives HyperPod nothing to fall back to"},
    {"key": "cluster.instance_groups[].instance_types[]",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceRequirements.InstanceTypes[]",
     "owner": "instance-type"},
    {"key": "cluster.instance_groups[].min_instance_count",
     "api": "sagemaker:CreateCluster:InstanceGroups[].MinInstanceCount"},
    {"key": "cluster.instance_groups[].image_release_version",
     "api": "sagemaker:CreateCluster:InstanceGroups[].ImageReleaseVersion",
     "hint": "MAJOR.MINOR.PATCH, like 1.2.3"},
    {"key": "cluster.instance_groups[].image_id",
     "api": "sagemaker:CreateCluster:InstanceGroups[].ImageId",
     "hint": "an AMI id like ami-0123456789abcdef0, or default"},
    {"key": "cluster.instance_groups[].kubernetes.labels", "when": "eks",
     "api": "sagemaker:CreateCluster:InstanceGroups[].KubernetesConfig.Labels"},
    {"key": "cluster.instance_groups[].kubernetes.labels.keys()", "when": "eks",
     "api": "sagemaker:CreateCluster:InstanceGroups[].KubernetesConfig.Labels.key",
     "hint": "a Kubernetes label key, like example.com/team or team"},
    {"key": "cluster.instance_groups[].kubernetes.labels.values()", "when": "eks",
     "api": "sagemaker:CreateCluster:InstanceGroups[].KubernetesConfig.Labels.value",
     "hint": "a Kubernetes label value: letters, digits, '-', '_', '.', at most 63"},
    {"key": "cluster.instance_groups[].kubernetes.taints", "when": "eks",
     "api": "sagemaker:CreateCluster:InstanceGroups[].KubernetesConfig.Taints"},
    {"key": "cluster.instance_groups[].ebs_kms_key_arn",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig"
     ".VolumeKmsKeyId"},
    {"key": "cluster.instance_groups[].root_volume_kms_key_arn",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig"
     ".VolumeKmsKeyId"},
    {"key": "cluster.instance_groups[].network.subnet_ids",
     "api": "sagemaker:CreateCluster:InstanceGroups[].OverrideVpcConfig.Subnets",
     "cfn": "AWS::SageMaker::Cluster:InstanceGroups[].OverrideVpcConfig.Subnets"},
    {"key": "cluster.instance_groups[].network.security_group_ids",
     "api": "sagemaker:CreateCluster:InstanceGroups[].OverrideVpcConfig.SecurityGroupIds",
     "cfn": "AWS::SageMaker::Cluster:InstanceGroups[].OverrideVpcConfig.SecurityGroupIds"},
    {"key": "cluster.instance_groups[].ami_updates.schedule",
     "api": "sagemaker:CreateCluster:InstanceGroups[].ScheduledUpdateConfig.ScheduleExpression",
     "hint": "a cron expression, like cron(0 3 ? * SUN *)"},
    {"key": "cluster.instance_groups[].ami_updates.deployment.wait_seconds",
     "api": "sagemaker:CreateCluster:InstanceGroups[].ScheduledUpdateConfig.DeploymentConfig"
     ".WaitIntervalInSeconds"},
    {"key": "cluster.instance_groups[].auto_patch.deployment.wait_seconds",
     "api": "sagemaker:CreateCluster:InstanceGroups[].AutoPatchConfig.DeploymentConfig"
     ".WaitIntervalInSeconds"},
    {"key": "cluster.tiered_checkpointing.memory_percent",
     "api": "sagemaker:CreateCluster:TieredStorageConfig.InstanceMemoryAllocationPercentage"},
    {"key": "cluster.node_recovery", "api": "sagemaker:CreateCluster:NodeRecovery"},
    {"key": "cluster.slurm.config_strategy", "when": "slurm",
     "api": "sagemaker:CreateCluster:Orchestrator.Slurm.SlurmConfigStrategy"},
    {"key": "cluster.slurm.accounting.database_name", "when": "slurm-accounting",
     "api": "sagemaker:CreateCluster:Orchestrator.Slurm.AccountingDatabase.Name",
     "hint": "letters, digits, $ and _, like slurm_acct_db"},
    {"key": "storage.lustre.existing.dns_name", "when": "slurm",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceStorageConfigs[].FsxLustreConfig"
     ".DnsName"},
    {"key": "storage.lustre.existing.mount_name", "when": "slurm",
     "api": "sagemaker:CreateCluster:InstanceGroups[].InstanceStorageConfigs[].FsxLustreConfig"
     ".MountName"},
    {"key": "network.existing_vpc.private_subnet_id",
     "api": "sagemaker:CreateCluster:VpcConfig.Subnets[]"},
    # Tags: on every stack and every resource that takes them; their number is `tags`' check
    # (hyperpod-kit adds tags of its own, see limits.json).
    {"key": "tags", "api": "cloudformation:CreateStack:Tags", "owner": "tags"},
    {"key": "tags", "api": "sagemaker:CreateCluster:Tags", "owner": "tags"},
    {"key": "tags", "api": "fsx:CreateFileSystem:Tags", "owner": "tags"},
    {"key": "tags", "api": "iam:CreateRole:Tags", "owner": "tags"},
    {"key": "tags.keys()", "api": "cloudformation:CreateStack:Tags[].Key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "sagemaker:CreateCluster:Tags[].Key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "fsx:CreateFileSystem:Tags[].Key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "iam:CreateRole:Tags[].Key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "logs:CreateLogGroup:tags.key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "ssm:PutParameter:Tags[].Key", "hint": _TAG_HINT},
    {"key": "tags.keys()", "api": "eks:CreateCluster:tags.key", "when": "eks-new",
     "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "cloudformation:CreateStack:Tags[].Value",
     "short_hint": "give the tag a value (CloudFormation refuses an empty one), or remove it"},
    {"key": "tags.values()", "api": "sagemaker:CreateCluster:Tags[].Value", "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "fsx:CreateFileSystem:Tags[].Value", "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "iam:CreateRole:Tags[].Value", "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "logs:CreateLogGroup:tags.value", "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "ssm:PutParameter:Tags[].Value", "hint": _TAG_HINT},
    {"key": "tags.values()", "api": "eks:CreateCluster:tags.value", "when": "eks-new",
     "hint": _TAG_HINT},
    # fsx CreateFileSystem and CreateDataRepositoryAssociation (the storage stack)
    {"key": "storage.lustre.storage_capacity_gib", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:StorageCapacity", "owner": "lustre-capacity"},
    {"key": "storage.lustre.throughput_per_unit_storage", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.PerUnitStorageThroughput",
     "owner": "lustre-throughput-tier"},
    {"key": "storage.lustre.data_compression", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.DataCompressionType"},
    {"key": "storage.lustre.file_system_type_version", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:FileSystemTypeVersion"},
    {"key": "storage.lustre.metadata.mode", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.MetadataConfiguration.Mode"},
    {"key": "storage.lustre.metadata.iops", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.MetadataConfiguration.Iops",
     "owner": "lustre-metadata"},
    {"key": "storage.lustre.automatic_backup_retention_days", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.AutomaticBackupRetentionDays"},
    {"key": "storage.lustre.weekly_maintenance_start_time", "when": "file-system-new",
     "api": "fsx:CreateFileSystem:LustreConfiguration.WeeklyMaintenanceStartTime",
     "hint": "d:HH:MM in UTC, like 7:03:00"},
    {"key": "storage.lustre.data_repository_associations[].file_system_path",
     "when": "file-system-new", "api": "fsx:CreateDataRepositoryAssociation:FileSystemPath",
     "hint": "an absolute path on one line, such as /data"},
    {"key": "storage.lustre.data_repository_associations[].s3_prefix",
     "value": "data_repository_paths", "when": "file-system-new",
     "api": "fsx:CreateDataRepositoryAssociation:DataRepositoryPath",
     "hint": "a prefix on one line, such as data/"},
    {"key": "storage.lustre.data_repository_associations[].imported_file_chunk_size_mib",
     "when": "file-system-new", "api": "fsx:CreateDataRepositoryAssociation:ImportedFileChunkSize"},
    {"key": "storage.lustre.data_repository_associations[].import_policy",
     "when": "file-system-new",
     "api": "fsx:CreateDataRepositoryAssociation:S3.AutoImportPolicy.Events",
     "cfn": "AWS::FSx::DataRepositoryAssociation:S3.AutoImportPolicy.Events"},
    {"key": "storage.lustre.data_repository_associations[].import_policy[]",
     "when": "file-system-new",
     "api": "fsx:CreateDataRepositoryAssociation:S3.AutoImportPolicy.Events[]"},
    {"key": "storage.lustre.data_repository_associations[].export_policy",
     "when": "file-system-new",
     "api": "fsx:CreateDataRepositoryAssociation:S3.AutoExportPolicy.Events",
     "cfn": "AWS::FSx::DataRepositoryAssociation:S3.AutoExportPolicy.Events"},
    {"key": "storage.lustre.data_repository_associations[].export_policy[]",
     "when": "file-system-new",
     "api": "fsx:CreateDataRepositoryAssociation:S3.AutoExportPolicy.Events[]"},
    # sagemaker CreateDomain, CreateUserProfile, CreateSpace, CreateStudioLifecycleConfig,
    # CreateApp (the Studio stack, and the apps users start)
    {"key": "name", "value": "studio_domain_name", "when": "studio",
     "api": "sagemaker:CreateDomain:DomainName", "long_hint": "use a shorter environment name"},
    {"key": "name", "value": "studio_lifecycle_config_names", "when": "studio",
     "api": "sagemaker:CreateStudioLifecycleConfig:StudioLifecycleConfigName",
     "long_hint": "use a shorter environment name"},
    {"key": "studio.apps", "when": "studio",
     "api": "sagemaker:CreateDomain:DefaultUserSettings.StudioWebPortalSettings.HiddenAppTypes",
     "unique": "one lifecycle configuration and one space per app: a repeated app is a "
     "construct id clash in synth"},
    {"key": "studio.apps[]", "value": "studio_lifecycle_configs", "when": "studio",
     "api": "sagemaker:CreateStudioLifecycleConfig:StudioLifecycleConfigContent",
     "owner": "studio-lifecycle-size"},
    {"key": "studio.default_instance_type", "when": "studio",
     "api": "sagemaker:CreateDomain:DefaultUserSettings.JupyterLabAppSettings"
     ".DefaultResourceSpec.InstanceType"},
    {"key": "studio.instance_types[]", "when": "studio",
     "api": "sagemaker:CreateApp:ResourceSpec.InstanceType"},
    {"key": "studio.space_ebs_gib", "when": "studio",
     "api": "sagemaker:CreateDomain:DefaultUserSettings.SpaceStorageSettings"
     ".DefaultEbsStorageSettings.DefaultEbsVolumeSizeInGb"},
    {"key": "studio.space_ebs_gib", "when": "studio",
     "api": "sagemaker:CreateSpace:SpaceSettings.SpaceStorageSettings.EbsStorageSettings"
     ".EbsVolumeSizeInGb"},
    {"key": "studio.idle_shutdown_minutes", "when": "studio",
     "api": "sagemaker:CreateDomain:DefaultUserSettings.JupyterLabAppSettings"
     ".AppLifecycleManagement.IdleSettings.IdleTimeoutInMinutes"},
    {"key": "users[].name", "value": "studio_profile_names", "when": "studio",
     "api": "sagemaker:CreateUserProfile:UserProfileName", "owner": "studio-profile-names"},
    {"key": "users[].name", "value": "studio_space_names", "when": "studio",
     "api": "sagemaker:CreateSpace:SpaceName", "hint": _NAME_HINT},
    {"key": "users[].uid", "value": "studio_uids", "when": "studio",
     "api": "sagemaker:CreateUserProfile:UserSettings.CustomPosixUserConfig.Uid"},
    {"key": "users[].gid", "value": "studio_gids", "when": "studio",
     "api": "sagemaker:CreateUserProfile:UserSettings.CustomPosixUserConfig.Gid"},
    {"key": "studio.shared_path", "value": "studio_file_system_paths", "when": "studio",
     "api": "sagemaker:CreateUserProfile:UserSettings.CustomFileSystemConfigs[]"
     ".FSxLustreFileSystemConfig.FileSystemPath", "owner": "studio-partition-paths"},
    {"key": "storage.lustre.existing.file_system_id", "when": "studio",
     "api": "sagemaker:CreateUserProfile:UserSettings.CustomFileSystemConfigs[]"
     ".FSxLustreFileSystemConfig.FileSystemId"},
    # eks CreateCluster, CreateAccessEntry, CreateAddon (the EKS stacks)
    {"key": "cluster.name", "value": "eks_cluster_name", "when": "eks-new",
     "api": "eks:CreateCluster:name", "long_hint": "use a shorter cluster.name (the EKS "
     "cluster is named <cluster name>-eks)"},
    {"key": "cluster.eks.existing_cluster_name", "when": "eks",
     "api": "eks:CreateCluster:name",
     "hint": "the name `aws eks list-clusters` shows"},
    {"key": "cluster.eks.kubernetes_version", "when": "eks-new", "api": "eks:CreateCluster:version",
     "owner": "eks-version-calendar"},
    {"key": "cluster.eks.public_access_cidrs", "when": "eks-new",
     "api": "eks:CreateCluster:resourcesVpcConfig.publicAccessCidrs",
     "cfn": "AWS::EKS::Cluster:ResourcesVpcConfig.PublicAccessCidrs",
     "owner": "eks-public-access-cidrs"},
    {"key": "network.existing_vpc.control_plane_subnet_ids", "when": "eks-new",
     "api": "eks:CreateCluster:resourcesVpcConfig.subnetIds",
     "cfn": "AWS::EKS::Cluster:ResourcesVpcConfig.SubnetIds",
     "unique": "EKS places one control-plane interface per subnet: a repeated subnet is a "
     "mistake"},
    {"key": "cluster.eks.admin_role_arns", "when": "eks-new",
     "api": "eks:CreateAccessEntry:principalArn",
     "cfn": "AWS::EKS::AccessEntry:AccessPolicies",
     "unique": "CDK merges the grants of one role into one access entry, whose AccessPolicies "
     "CloudFormation wants unique (cfn-lint E3037)"},
    # sagemaker CreateClusterSchedulerConfig and CreateComputeQuota (task governance, the EKS
    # add-ons stack): names are `task-governance`'s (a team is a namespace), quotas `team-quotas`'
    {"key": "cluster.eks.task_governance.priority_classes", "when": "eks-governance",
     "api": "sagemaker:CreateClusterSchedulerConfig:SchedulerConfig.PriorityClasses"},
    {"key": "cluster.eks.task_governance.priority_classes[].name", "when": "eks-governance",
     "api": "sagemaker:CreateClusterSchedulerConfig:SchedulerConfig.PriorityClasses[].Name",
     "owner": "task-governance"},
    {"key": "cluster.eks.task_governance.priority_classes[].weight", "when": "eks-governance",
     "api": "sagemaker:CreateClusterSchedulerConfig:SchedulerConfig.PriorityClasses[].Weight"},
    {"key": "teams[].name", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaTarget.TeamName",
     "owner": "task-governance"},
    {"key": "teams[].fairshare", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaTarget.FairShareWeight"},
    {"key": "teams[].quota", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaConfig.ComputeQuotaResources"},
    {"key": "teams[].quota[].instance_type", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaConfig.ComputeQuotaResources[]"
     ".InstanceType", "owner": "team-quotas"},
    {"key": "teams[].quota[].instances", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaConfig.ComputeQuotaResources[].Count"},
    {"key": "teams[].quota[].accelerators", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaConfig.ComputeQuotaResources[]"
     ".Accelerators"},
    {"key": "teams[].borrow_limit_percent", "when": "eks-governance",
     "api": "sagemaker:CreateComputeQuota:ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit"},
    {"key": "network.existing_vpc.route_table_ids", "api": "ec2:CreateVpcEndpoint:RouteTableIds",
     "cfn": "AWS::EC2::VPCEndpoint:RouteTableIds"},
)  # fmt: skip


def _botocore_shape(api: str) -> tuple[Any, str]:
    """The shape at `service:Operation:Member.Path` of the installed botocore, and its name."""
    import botocore.session

    service, operation, path = api.split(":")
    model = botocore.session.get_session().get_service_model(service)
    shape: Any = model.operation_model(operation).input_shape
    for part in re.findall(r"[^.\[\]]+|\[\]", path):
        if part == "[]":
            shape = shape.member
        elif shape.type_name == "map" and part in ("key", "value"):
            shape = shape.key if part == "key" else shape.value
        else:
            shape = shape.members[part]
    return shape, shape.name


def _constraints(shape: Any) -> dict[str, Any]:
    """What botocore's model says a value of `shape` may be."""
    meta = shape.metadata
    out: dict[str, Any] = {"type": shape.type_name}
    if shape.type_name == "string":
        for name, key in (("min_length", "min"), ("max_length", "max"), ("pattern", "pattern")):
            if key in meta:
                out[name] = meta[key]
        if getattr(shape, "enum", None):
            out["enum"] = list(shape.enum)
    elif shape.type_name in ("integer", "long", "float", "double"):
        for key in ("min", "max"):
            if key in meta:
                out[key] = meta[key]
    elif shape.type_name in ("list", "map"):
        for name, key in (("min_items", "min"), ("max_items", "max")):
            if key in meta:
                out[name] = meta[key]
    return out


def _cfn_unique(pointer: str) -> bool:
    """Whether the registry schema cfn-lint ships wants the items at `Type:Prop.Path` unique."""
    import cfnlint

    root = Path(cfnlint.__file__).parent / "data" / "schemas"
    type_name, path = pointer.rsplit(":", 1)
    providers = json.loads((root / "providers" / "us-east-1.json").read_text())
    schema = json.loads((root / "resources" / f"{providers[type_name]}.json").read_text())

    def deref(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    node: dict[str, Any] = {"properties": schema["properties"]}
    for part in re.findall(r"[^.\[\]]+|\[\]", path):
        node = deref(node)
        node = node["items"] if part == "[]" else node["properties"][part]
    return bool(deref(node).get("uniqueItems", False))


def api_constraints(today: str | None = None) -> dict[str, Any]:
    """The table `validators/api.py` checks values against, from the installed botocore."""
    import botocore
    import cfnlint.version

    fields = []
    for field in API_FIELDS:
        shape, name = _botocore_shape(field["api"])
        row: dict[str, Any] = {
            "key": field["key"],
            "api": field["api"],
            "shape": name,
            **_constraints(shape),
        }
        for extra in ("value", "when", "owner", "hint", "long_hint", "short_hint"):
            if extra in field:
                row[extra] = field[extra]
        cfn_unique = "cfn" in field and _cfn_unique(field["cfn"])
        if "unique" in field:
            row["unique"] = field["unique"]
        elif cfn_unique:
            row["unique"] = f"CloudFormation's {field['cfn']} wants unique items (cfn-lint E3037)"
        fields.append(row)
    return {
        "generated": today or datetime.date.today().isoformat(),
        "botocore": botocore.__version__,
        "cfn_lint": cfnlint.version.__version__,
        "sources": {
            "constraints": f"botocore {botocore.__version__} service models (the request shapes "
            "of each field's operation)",
            "unique": f"CloudFormation registry schemas as cfn-lint {cfnlint.version.__version__} "
            "ships them (uniqueItems), or hyperpod-kit's own reason",
        },
        "fields": fields,
    }


# --- the rules AWS states only in prose ----------------------------------------------------------

# What makes a sentence a rule that a schema's or a model's constraints (pattern, length, range,
# enum) do not carry: "Supported only for EKS-orchestrated clusters", "must be less than or equal
# to InstanceCount", "cannot be specified together with ...". The wording varies between services,
# so the phrases are a little wider than the list (#24): "only supported", "(X only)",
# "mutually exclusive", "not supported" and "must be unique/equal" state rules too.
PROSE_RULE = re.compile(
    r"\bonly (?:for|with|when|if|on|in)\b"
    r"|\b(?:supported|available|applicable|valid|allowed|required|used|present|passed) only\b"
    r"|\bonly (?:be )?(?:supported|available|applicable|valid|allowed|required|used|passed"
    r"|specify|set)\b"
    r"|\(\s*[^()]*\bonly\s*\)"
    r"|\bmust be (?:less|greater|between|unique|equal)\b"
    r"|\bmust not\b|\bcannot be\b|\bcan.t be\b|\bmutually exclusive\b|\bnot supported\b",
    re.IGNORECASE,
)
# The templates whose resource types' schemas are read: every example's synthesized stacks.
GOLDEN = HERE.parents[2] / "tests" / "golden"
SCHEMA_REGION = "us-east-1"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def _plain(text: str) -> str:
    """A model's documentation (HTML) or a schema's description as one line of plain text."""
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text))).strip()


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(_plain(text)) if s]


def _sentence_id(prefix: str, sentence: str) -> str:
    """`prefix#hash`: the hash of the sentence without case and spacing, so a rewording is a new
    row and a reflowed description is not."""
    import hashlib

    norm = re.sub(r"\s+", " ", sentence).strip().lower()
    return f"{prefix}#{hashlib.sha1(norm.encode()).hexdigest()[:8]}"


def golden_resource_types(golden: Path = GOLDEN) -> list[str]:
    """The Type of every resource in tests/golden/*/*.template.json."""
    types = set()
    for path in golden.glob("*/*.template.json"):
        for resource in json.loads(path.read_text(encoding="utf-8")).get("Resources", {}).values():
            types.add(resource["Type"])
    return sorted(types)


def api_requests() -> list[tuple[str, str]]:
    """(service, operation) of every request `API_FIELDS` (api_constraints.json) names."""
    return sorted({tuple(f["api"].split(":")[:2]) for f in API_FIELDS})  # type: ignore[misc]


def _schema_sentences(types: tuple[str, ...]) -> list[dict[str, str]]:
    import cfnlint

    root = Path(cfnlint.__file__).parent / "data" / "schemas"
    providers = json.loads((root / "providers" / f"{SCHEMA_REGION}.json").read_text())
    out: list[dict[str, str]] = []

    def walk(node: Any, pointer: str, type_name: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "description" and isinstance(value, str):
                    for sentence in _sentences(value):
                        if PROSE_RULE.search(sentence):
                            out.append(
                                {
                                    "id": _sentence_id(f"cfn:{type_name}{pointer}", sentence),
                                    "source": f"registry schema {type_name}",
                                    "where": pointer or "/",
                                    "sentence": sentence,
                                }
                            )
                else:
                    escaped = str(key).replace("~", "~0").replace("/", "~1")
                    walk(value, f"{pointer}/{escaped}", type_name)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{pointer}/{i}", type_name)

    for type_name in types:
        if type_name not in providers:  # Custom::...: a custom resource has no registry schema
            continue
        schema = json.loads((root / "resources" / f"{providers[type_name]}.json").read_text())
        for part in ("properties", "definitions"):
            walk(schema.get(part, {}), f"/{part}", type_name)
    return out


def _model_sentences(requests: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    import botocore.session

    session = botocore.session.get_session()
    out: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(service: str, api_version: str, where: str, request: str, doc: str) -> None:
        for sentence in _sentences(doc):
            if PROSE_RULE.search(sentence):
                out.append(
                    {
                        "id": _sentence_id(f"api:{service}:{where}", sentence),
                        "source": f"botocore {service} {api_version} model (via {request})",
                        "where": where,
                        "sentence": sentence,
                    }
                )

    for service, operation in requests:
        data = session.get_service_data(service)
        shapes, api_version = data["shapes"], data["metadata"]["apiVersion"]
        request = f"{service}:{operation}"
        stack = [data["operations"][operation]["input"]["shape"]]
        while stack:  # the input shape and every shape reachable from it, each once per service
            name = stack.pop()
            if (service, name) in seen:
                continue
            seen.add((service, name))
            shape = shapes[name]
            add(service, api_version, name, request, shape.get("documentation", ""))
            for member, ref in shape.get("members", {}).items():
                add(service, api_version, f"{name}.{member}", request, ref.get("documentation", ""))
                stack.append(ref["shape"])
            stack.extend(shape[k]["shape"] for k in ("member", "key", "value") if k in shape)
    return out


@functools.lru_cache(maxsize=4)
def _prose_sentences(
    types: tuple[str, ...], requests: tuple[tuple[str, str], ...]
) -> tuple[dict[str, str], ...]:
    rows: dict[str, dict[str, str]] = {}
    for row in _schema_sentences(types) + _model_sentences(requests):
        rows.setdefault(row["id"], row)  # one sentence said twice in one description: one row
    return tuple(rows.values())


def prose_sentences(
    types: list[str] | None = None, requests: list[tuple[str, str]] | None = None
) -> list[dict[str, str]]:
    """Every sentence that states a rule in prose (`PROSE_RULE`): in the registry schemas, as the
    installed cfn-lint ships them, of `types` (default: those of tests/golden), their properties'
    and definitions' descriptions; in the installed botocore's models, the documentation of the
    input shape of each of `requests` (default: those of api_constraints.json) and of every shape
    and member reachable from it. Each with a stable `id` (source, JSON pointer or
    Shape.Member, and a hash of the sentence), its `source` and `where`. Cached: the schemas and
    models are read once per process."""
    key_types = tuple(sorted(golden_resource_types() if types is None else types))
    key_requests = tuple(sorted(api_requests() if requests is None else requests))
    return [dict(r) for r in _prose_sentences(key_types, key_requests)]


def uncovered(table: dict[str, Any], sentences: list[dict[str, str]]) -> list[dict[str, str]]:
    """The listed sentences that have no row with a verdict (`enforced_by` or `reason`)."""
    done = {r["id"] for r in table["rows"] if r.get("enforced_by") or r.get("reason")}
    return [s for s in sentences if s["id"] not in done]


def stale(table: dict[str, Any], sentences: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The rows whose sentence is no longer listed (reworded, or gone from the schema or model)."""
    listed = {s["id"] for s in sentences}
    return [r for r in table["rows"] if r["id"] not in listed]


def prose_rules(previous: dict[str, Any] | None, today: str | None = None) -> dict[str, Any]:
    """The table of prose rules: today's sentences, each with the verdict `previous` gave its id;
    a new sentence comes without one (the coverage test lists it until a person writes it)."""
    import botocore
    import cfnlint.version

    verdicts = {r["id"]: r for r in (previous or {"rows": []})["rows"]}
    rows = []
    for sentence in prose_sentences():
        row: dict[str, Any] = dict(sentence)
        for key in ("enforced_by", "reason"):
            if key in verdicts.get(sentence["id"], {}):
                row[key] = verdicts[sentence["id"]][key]
        rows.append(row)
    return {
        "checked": today or datetime.date.today().isoformat(),
        "about": "Every sentence of the registry schemas (the resource types of tests/golden) "
        "and of the service models (the input shapes of the requests in api_constraints.json, "
        "and every shape they reach) that states a rule only in prose, with its verdict: "
        "`enforced_by` names the validator (config/validators) or synth gate that enforces it; "
        "`reason` says why no check is needed. Regenerated by `python -m "
        "hyperpod_kit.config.facts.refresh --prose`, which keeps the verdicts by id; "
        "tests/unit/test_prose_rules.py fails on a sentence without a row.",
        "sources": {
            "schemas": f"CloudFormation registry schemas ({SCHEMA_REGION}) as cfn-lint "
            f"{cfnlint.version.__version__} ships them",
            "models": f"botocore {botocore.__version__} service models",
            "phrases": PROSE_RULE.pattern,
        },
        "rows": rows,
    }


def refresh_prose(out: Path = HERE) -> None:
    path = out / "prose_rules.json"
    kept = path if path.exists() else HERE / path.name
    previous = json.loads(kept.read_text(encoding="utf-8")) if kept.exists() else None
    table = prose_rules(previous)
    gone = stale(previous, prose_sentences()) if previous else []
    path.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    todo = uncovered(table, prose_sentences())
    print(f"{len(table['rows'])} prose rules, {len(todo)} without a verdict, {len(gone)} rows gone")


def refresh_api(out: Path = HERE) -> None:
    table = api_constraints()
    (out / "api_constraints.json").write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table['fields'])} request fields, botocore {table['botocore']}")
    refresh_prose(out)


def refresh(sheet: Path, out: Path = HERE) -> None:
    import botocore

    text = sheet.read_text(encoding="utf-8")
    m = _CHECKED.search(text)
    checked = m.group(1) if m else "unknown"
    types = {**_accelerated(text), **_general(text)}
    accepted = botocore_instance_types()
    if set(types) != accepted:
        missing, extra = sorted(accepted - set(types)), sorted(set(types) - accepted)
        sys.exit(f"fact sheet and botocore disagree: missing {missing}, not in botocore {extra}")
    sources = {
        "types": f"botocore {botocore.__version__} ClusterInstanceType ({len(accepted)} values)",
        "hardware": "EC2 DescribeInstanceTypes via karpenter and VPC CNI tables, EC2 EFA guide, "
        "aws-ofi-nccl platform map; see the fact sheet's sources S1-S12",
    }
    (out / "instance_types.json").write_text(
        json.dumps(
            {"checked": checked, "sources": sources, "types": dict(sorted(types.items()))},
            indent=1,
        )
        + "\n"
    )
    regions = _regions(text)
    (out / "regions.json").write_text(
        json.dumps(
            {
                "checked": checked,
                "sources": {
                    "az_ids": "AWS Global Infrastructure guide, 'AWS Availability Zones'",
                    "hyperpod": "D developer guide, C cfn-lint registry schema, "
                    "H HyperPod CLI agent region map, G HyperPod CLI GPU-operator values",
                },
                "regions": regions,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{len(types)} instance types, {len(regions)} regions, checked {checked}")
    refresh_api(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--api":
        refresh_api()
    elif sys.argv[1] == "--prose":
        refresh_prose()
    else:
        refresh(Path(sys.argv[1]))
