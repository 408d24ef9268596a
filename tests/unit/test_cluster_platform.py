"""The 2026 cluster features in the synthesized templates (docs/platform.md): what each key of the
file becomes in `AWS::SageMaker::Cluster`, the autoscaling role, and the rollback alarms the
cluster names matching the alarms the monitoring stack creates."""

from __future__ import annotations

from typing import Any

from tests.conftest import Synthesized, SynthFn

KEY = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CONTROLLER = {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
              "instance_count": 1}  # fmt: skip
LOGIN = {"name": "login", "role": "login", "instance_type": "ml.m5.xlarge", "instance_count": 1}
SLURM = {
    "cluster": {
        "node_provisioning": "continuous",
        "instance_groups": [
            CONTROLLER,
            LOGIN,
            {
                "name": "compute",
                "role": "compute",
                "instance_type": "ml.g5.8xlarge",
                "instance_count": 2,
                "root_volume_kms_key_arn": KEY,
                "lifecycle": {"stage": "on_init_complete"},
                "ami_updates": {"schedule": "cron(0 3 ? * SUN *)"},
                "auto_patch": {"strategy": "when_all_idle"},
            },
            {
                "name": "spot",
                "role": "compute",
                "instance_types": ["ml.g5.8xlarge", "ml.g5.16xlarge"],
                "instance_count": 1,
                "min_instance_count": 0,
                "capacity": "spot",
            },
        ],
    },
    "trainer": {"job": {"instance_group": "compute"}},
}
EKS = {
    "orchestrator": "eks",
    "network": {
        "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
        "control_plane_availability_zone_id": "usw2-az1",
    },
    "availability_zone_id": "usw2-az2",
    "cluster": {
        "node_provisioning": "continuous",
        "autoscaling": {"enabled": True},
        "tiered_checkpointing": {"enabled": True, "memory_percent": 30},
        "eks": {"existing_cluster_name": "ml-platform"},
        "instance_groups": [
            {
                "name": "workers",
                "role": "worker",
                "instance_type": "ml.g5.12xlarge",
                "instance_count": 2,
                "ebs_kms_key_arn": KEY,
                "image_release_version": "1.2.3",
                "ami_updates": {
                    "schedule": "cron(0 3 ? * SUN *)",
                    "deployment": {"batch_size": 1, "wait_seconds": 300},
                },
                "kubernetes": {
                    "labels": {"example.com/pool": "a"},
                    "taints": [{"key": "example.com/gpu", "effect": "NoSchedule"}],
                },
                "network": {"interface_type": "efa"},
            }
        ],
    },
    "trainer": {"job": {"processes_per_node": 4}},
    "monitoring": {"alarms": {"node_health_events": 2}},
}


def _cluster(synthesized: Synthesized) -> dict[str, Any]:
    found = synthesized.templates["cluster"].find_resources("AWS::SageMaker::Cluster")
    ((_, cluster),) = found.items()
    return cluster  # type: ignore[no-any-return]


def _groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}


def test_slurm_continuous_leaves_the_strategy_out(synth: SynthFn) -> None:
    props = _cluster(synth(SLURM))["Properties"]
    assert props["NodeProvisioningMode"] == "Continuous"
    assert props["Orchestrator"] == {"Slurm": {}}
    default = _cluster(synth())["Properties"]
    assert "NodeProvisioningMode" not in default
    assert default["Orchestrator"] == {"Slurm": {"SlurmConfigStrategy": "Managed"}}


def test_a_slurm_group_carries_its_volumes_stage_and_whole_group_updates(synth: SynthFn) -> None:
    """On Slurm no AMI release and no batches (AWS offers both on EKS only): the schedule and
    the patch strategy alone, which update the whole group."""
    compute = _groups(_cluster(synth(SLURM)))["compute"]
    assert "ImageReleaseVersion" not in compute
    assert compute["InstanceStorageConfigs"][1] == {
        "EbsVolumeConfig": {"RootVolume": True, "VolumeKmsKeyId": KEY}
    }
    assert set(compute["LifeCycleConfig"]) == {"SourceS3Uri", "OnInitComplete"}
    assert compute["AutoPatchConfig"] == {"PatchingStrategy": "WhenAllIdle"}
    assert compute["ScheduledUpdateConfig"] == {"ScheduleExpression": "cron(0 3 ? * SUN *)"}


def test_an_eks_group_carries_its_ami_release_and_batches(synth: SynthFn) -> None:
    workers = _groups(_cluster(synth(EKS)))["workers"]
    assert workers["ImageReleaseVersion"] == "1.2.3"
    deployment = workers["ScheduledUpdateConfig"]["DeploymentConfig"]
    assert deployment["RollingUpdatePolicy"] == {
        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}
    }
    assert deployment["WaitIntervalInSeconds"] == 300


def test_rollback_alarms_are_the_monitoring_stacks_alarms(synth: SynthFn) -> None:
    """The cluster names alarms before the monitoring stack makes them: the names must agree."""
    synthesized = synth(EKS)
    workers = _groups(_cluster(synthesized))["workers"]
    named = [
        a["AlarmName"]
        for a in workers["ScheduledUpdateConfig"]["DeploymentConfig"]["AutoRollbackConfiguration"]
    ]
    alarms = synthesized.templates["monitoring"].find_resources("AWS::CloudWatch::Alarm")
    made = {a["Properties"]["AlarmName"] for a in alarms.values()}
    assert named == [
        "hyperpod-dev-lifecycle-script-failures",
        "hyperpod-dev-node-check-failures",
        "hyperpod-dev-node-health-events",
    ]
    assert set(named) <= made


def test_flexible_spot_group(synth: SynthFn) -> None:
    spot = _groups(_cluster(synth(SLURM)))["spot"]
    assert "InstanceType" not in spot
    assert spot["InstanceRequirements"] == {"InstanceTypes": ["ml.g5.8xlarge", "ml.g5.16xlarge"]}
    assert spot["CapacityRequirements"] == {"Spot": {}}
    assert spot["MinInstanceCount"] == 0


def test_eks_autoscaling_role_and_cluster_settings(synth: SynthFn) -> None:
    synthesized = synth(EKS)
    cluster = _cluster(synthesized)
    props = cluster["Properties"]
    assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert props["TieredStorageConfig"] == {
        "Mode": "Enable",
        "InstanceMemoryAllocationPercentage": 30,
    }
    role_id = props["ClusterRole"]["Fn::GetAtt"][0]
    template = synthesized.templates["cluster"]
    role = template.to_json()["Resources"][role_id]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "hyperpod.sagemaker.amazonaws.com"}
    policies = [
        p
        for p in template.find_resources("AWS::IAM::Policy").items()
        if {"Ref": role_id} in p[1]["Properties"]["Roles"]
    ]
    ((policy_id, policy),) = policies
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["AddAndDeleteNodes"]["Action"] == [
        "sagemaker:BatchAddClusterNodes",
        "sagemaker:BatchDeleteClusterNodes",
    ]
    assert statements["GrantNewNodeVolumes"]["Resource"] == KEY
    assert statements["DescribeVolumeKeys"]["Action"] == "kms:DescribeKey"
    assert policy_id in cluster["DependsOn"]  # the grant exists before the cluster scales


def test_eks_group_labels_taints_and_interface(synth: SynthFn) -> None:
    workers = _groups(_cluster(synth(EKS)))["workers"]
    assert workers["KubernetesConfig"] == {
        "Labels": {"example.com/pool": "a"},
        "Taints": [{"Effect": "NoSchedule", "Key": "example.com/gpu"}],
    }
    assert workers["NetworkInterface"] == {"InterfaceType": "efa"}
    assert workers["InstanceStorageConfigs"][0] == {
        "EbsVolumeConfig": {"VolumeSizeInGB": 500, "VolumeKmsKeyId": KEY}
    }
