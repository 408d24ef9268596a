"""`HyperPodCluster` built in a bare stack: instance groups, Slurm and EKS orchestration, the
execution role's permissions, and both gates on the synthesized template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks, NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.app import FEATURE_FLAGS
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.constructs.hyperpod_cluster import FileSystemHandles, HyperPodCluster
from hyperpod_kit.gates import check_assembly
from tests.conftest import REPO, default_data, merge

SUBNET, SG, EKS_SG = "subnet-0123456789abcdef0", "sg-0123456789abcdef0", "sg-0fedcba987654321f"
EKS_ARN = "arn:aws:eks:us-west-2:111122223333:cluster/hyperpod-eks"
PLAN = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5"


class Scripts:
    """The lifecycle scripts' S3 prefix, as `LifecycleSource` describes it (a real bucket)."""

    def __init__(self, scope: cdk.Stack) -> None:
        self.bucket = s3.Bucket(scope, "Lifecycle", enforce_ssl=True)
        NagSuppressions.add_resource_suppressions(
            self.bucket, [{"id": "AwsSolutions-S1", "reason": "test bucket"}]
        )
        self.source_s3_uri = f"s3://{self.bucket.bucket_name}/lifecycle/abc123/"
        self.on_create = "on_create.sh"

    def grant_read(self, grantee: iam.IGrantable) -> object:
        return self.bucket.grant_read(grantee, "lifecycle/abc123/*")


class Eks:
    """The EKS handles, as `EksOrchestrator` describes them."""

    def __init__(self) -> None:
        self.cluster_arn = EKS_ARN
        self.node_security_group_id = EKS_SG

    def grant_hyperpod_nodes(self, scope: Construct, role: iam.IRole) -> IConstruct | None:
        return None


def build(config: EnvironmentConfig, tmp_path: Path) -> tuple[Template, Path]:
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context=dict(FEATURE_FLAGS))
    stack = cdk.Stack(app, "Cluster", env=cdk.Environment(region=config.region))
    HyperPodCluster(
        stack,
        "HyperPod",
        config=config,
        subnet_id=SUBNET,
        security_group_ids=[SG],
        file_system=FileSystemHandles(
            dns_name="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", mount_name="abcdefgh"
        ),
        lifecycle=Scripts(stack),
        eks=Eks() if config.orchestrator == "eks" else None,
    )
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()
    return Template.from_stack(stack), tmp_path / "cdk.out"


def _config(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))


def _cluster(template: Template) -> dict[str, Any]:
    (resource,) = template.find_resources("AWS::SageMaker::Cluster").values()
    props: dict[str, Any] = resource["Properties"]
    return props


def _groups(template: Template) -> dict[str, dict[str, Any]]:
    return {g["InstanceGroupName"]: g for g in _cluster(template)["InstanceGroups"]}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    return build(_config(), tmp_path_factory.mktemp("slurm"))


def test_slurm_cluster_is_api_driven(slurm: tuple[Template, Path]) -> None:
    template, _ = slurm
    cluster = _cluster(template)
    assert cluster["ClusterName"] == "hyperpod-dev"
    assert cluster["NodeRecovery"] == "Automatic"
    assert cluster["Orchestrator"] == {"Slurm": {"SlurmConfigStrategy": "Managed"}}
    assert cluster["VpcConfig"] == {"SecurityGroupIds": [SG], "Subnets": [SUBNET]}
    groups = _groups(template)
    assert {n: g["SlurmConfig"] for n, g in groups.items()} == {
        "controller": {"NodeType": "Controller"},
        "login": {"NodeType": "Login"},
        "compute": {"NodeType": "Compute", "PartitionNames": ["compute"]},
    }


def test_groups_follow_the_file(slurm: tuple[Template, Path]) -> None:
    template, _ = slurm
    groups = _groups(template)
    compute = groups["compute"]
    assert (compute["InstanceType"], compute["InstanceCount"]) == ("ml.g5.8xlarge", 2)
    assert compute["ThreadsPerCore"] == 1
    # accelerated: both deep health checks; CPU groups: none
    assert compute["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert "OnStartDeepHealthChecks" not in groups["controller"]
    for group in groups.values():
        assert group["LifeCycleConfig"]["OnCreate"] == "on_create.sh"
        assert group["LifeCycleConfig"]["SourceS3Uri"]["Fn::Join"][1][-1] == "/lifecycle/abc123/"
        assert group["InstanceStorageConfigs"] == [
            {"EbsVolumeConfig": {"VolumeSizeInGB": 500}},
            {"FsxLustreConfig": {"DnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                                 "MountName": "abcdefgh", "MountPath": "/fsx"}},
        ]  # fmt: skip
        assert "TrainingPlanArn" not in group
    roles = {json.dumps(g["ExecutionRole"]) for g in groups.values()}
    assert len(roles) == 1


def test_cluster_logical_id_is_stable_and_not_retained(slurm: tuple[Template, Path]) -> None:
    template, _ = slurm
    resources = template.find_resources("AWS::SageMaker::Cluster")
    assert list(resources) == ["HyperPodCluster"]
    assert resources["HyperPodCluster"]["DeletionPolicy"] == "Delete"


def _statements(template: Template) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def test_execution_role_is_scoped(slurm: tuple[Template, Path]) -> None:
    template, _ = slurm
    (role,) = template.find_resources("AWS::IAM::Role").values()
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "sagemaker.amazonaws.com"
    }
    managed = json.dumps(role["Properties"]["ManagedPolicyArns"])
    assert "AmazonSageMakerClusterInstanceRolePolicy" in managed
    assert "AmazonEKS_CNI_Policy" not in managed
    statements = {s.get("Sid"): s for s in _statements(template) if s.get("Sid")}
    create = statements["CreateNodeInterfaces"]
    assert create["Action"] == "ec2:CreateNetworkInterface"
    assert any(SUBNET in json.dumps(r) for r in create["Resource"])
    assert any(SG in json.dumps(r) for r in create["Resource"])
    # The only "*" resources: EC2 Describe* (no resource-level permissions) on Slurm.
    wildcard = [s for s in _statements(template) if s.get("Resource") == "*"]
    assert [s.get("Sid") for s in wildcard] == ["DescribeNetwork"]
    assert all(a.startswith("ec2:Describe") for a in wildcard[0]["Action"])
    tag = statements["TagNodeInterfaces"]
    assert tag["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}}
    # lifecycle prefix readable
    assert any(
        "s3:GetObject*" in json.dumps(s["Action"]) and "lifecycle/abc123/*" in json.dumps(s)
        for s in _statements(template)
    )


def test_training_plan_goes_to_accelerated_compute_groups_only(tmp_path: Path) -> None:
    groups = [
        {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
         "instance_count": 1},
        {"name": "cpu", "role": "compute", "instance_type": "ml.c5.4xlarge", "instance_count": 1},
        {"name": "gpu", "role": "compute", "instance_type": "ml.p5.48xlarge", "instance_count": 2,
         "partition": "p5"},
    ]  # fmt: skip
    config = _config({"cluster": {"training_plan_arn": PLAN, "instance_groups": groups}})
    template, _ = build(config, tmp_path)
    by_name = _groups(template)
    assert by_name["gpu"]["TrainingPlanArn"] == PLAN
    assert (
        "TrainingPlanArn" not in by_name["cpu"] and "TrainingPlanArn" not in by_name["controller"]
    )
    assert by_name["gpu"]["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": ["p5"]}


def test_settings_reach_the_cluster(tmp_path: Path) -> None:
    groups = copy_groups()
    groups[2] |= {
        "threads_per_core": 2,
        "ebs_volume_gib": 1000,
        "deep_health_checks": ["InstanceStress"],
    }
    config = _config({
        "cluster": {"name": "team-a", "node_recovery": "None", "instance_groups": groups,
                    "slurm": {"config_strategy": "Merge"}},
        "trainer": {"job": {"auto_resume": False}},
    })  # fmt: skip
    template, _ = build(config, tmp_path)
    cluster = _cluster(template)
    assert (cluster["ClusterName"], cluster["NodeRecovery"]) == ("team-a", "None")
    assert cluster["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Merge"
    compute = _groups(template)["compute"]
    assert compute["ThreadsPerCore"] == 2
    assert compute["InstanceStorageConfigs"][0] == {"EbsVolumeConfig": {"VolumeSizeInGB": 1000}}
    assert compute["OnStartDeepHealthChecks"] == ["InstanceStress"]


def copy_groups() -> list[dict[str, Any]]:
    return [dict(g) for g in default_data()["cluster"]["instance_groups"]]


@pytest.fixture(scope="module")
def eks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    return build(load_environment(REPO / "environments" / "eks.yaml").config,
                 tmp_path_factory.mktemp("eks"))  # fmt: skip


def test_eks_cluster_orchestrates_through_eks(eks: tuple[Template, Path]) -> None:
    template, _ = eks
    cluster = _cluster(template)
    assert cluster["Orchestrator"] == {"Eks": {"ClusterArn": EKS_ARN}}
    assert cluster["VpcConfig"]["SecurityGroupIds"] == [SG, EKS_SG]
    (workers,) = cluster["InstanceGroups"]
    assert "SlurmConfig" not in workers
    # EKS nodes mount FSx through the CSI driver's volume claim, not InstanceStorageConfigs
    assert workers["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
    (role,) = template.find_resources("AWS::IAM::Role").values()
    assert "AmazonEKS_CNI_Policy" in json.dumps(role["Properties"]["ManagedPolicyArns"])
    actions = json.dumps([s["Action"] for s in _statements(template)])
    assert "ec2:AssignPrivateIpAddresses" in actions
    assert "eks-auth:AssumeRoleForPodIdentity" in actions


def test_eks_needs_its_handles(tmp_path: Path) -> None:
    config = load_environment(REPO / "environments" / "eks.yaml").config
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "S")
    with pytest.raises(ValueError, match="EKS cluster handles"):
        HyperPodCluster(
            stack, "H", config=config, subnet_id=SUBNET, security_group_ids=[SG],
            file_system=FileSystemHandles(dns_name="d", mount_name="m"), lifecycle=Scripts(stack),
        )  # fmt: skip


@pytest.mark.parametrize("which", ["slurm", "eks"])
def test_cluster_passes_both_gates(which: str, request: pytest.FixtureRequest) -> None:
    _, outdir = request.getfixturevalue(which)
    report = check_assembly(outdir)
    assert [f.render() for f in report.findings if f.level != "info"] == []
