"""The Studio stack synthesized with the rest of the environment, as the app builds it: domain
settings, one profile per user with its path and uid/gid, the
partitions gate's dependencies and IAM policy, lifecycle configurations, both gates on every
template (nested ones included), and CloudFormation's limits at 500 users."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

import hyperpod_kit.gates
from hyperpod_kit.app import build_environment, create_app
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.validators import run_validators
from hyperpod_kit.config.validators.studio import lifecycle_config_size
from hyperpod_kit.constructs.studio import StudioEks
from hyperpod_kit.constructs.studio_partitions import batch_of
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.naming import eks_cluster_name
from hyperpod_kit.stacks.studio import StudioStack
from tests.conftest import REPO, default_data, merge

pytestmark = pytest.mark.synth

CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123def456"
EKS_ARN = "arn:aws:eks:us-west-2:111122223333:cluster/hyperpod-eks"
EKS_SG = "sg-0123456789abcdef0"
LIMITS = {"resources": 500, "bytes": 1_000_000, "outputs": 200, "parameters": 200}
PEOPLE = [
    {"name": "alice", "uid": 10001},
    {"name": "bob", "uid": 10002, "gid": 2000},
    {"name": "carol", "uid": 10003},
]
SLURM = {
    "users": PEOPLE,
    "cluster": {"slurm": {"config_strategy": "Merge"}},
    "studio": {"enabled": True},
}
EKS = {
    "orchestrator": "eks",
    "network": {
        "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
        "control_plane_availability_zone_id": "usw2-az1",
    },
    "cluster": {
        "instance_groups": [
            {"name": "workers", "role": "worker", "instance_type": "ml.g5.12xlarge",
             "instance_count": 2}
        ]
    },
    "users": PEOPLE,
    "studio": {"enabled": True, "partitions": "shared"},
}  # fmt: skip


EKS_STUDIO = EKS  # Studio on EKS: the same environment, named for what the tests check


class ClusterStandIn(cdk.Stack):
    """What the cluster stack hands Studio: an execution role (a real one, in its own stack, so
    the grant crosses stacks as it will) and the cluster's ARN and name."""

    def __init__(self, scope: cdk.App, id: str, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        self.execution_role = iam.Role(
            self, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
        )
        self.cluster_arn = CLUSTER_ARN
        self.cluster_name = "hyperpod-dev"


@dataclass
class Built:
    config: EnvironmentConfig
    outdir: Path
    stack: StudioStack

    def template(self, name: str | None = None) -> dict[str, Any]:
        file = f"{self.config.name}-studio.template.json" if name is None else name
        data: dict[str, Any] = json.loads((self.outdir / file).read_text())
        return data

    def nested(self) -> dict[str, dict[str, Any]]:
        return {
            p.name: json.loads(p.read_text()) for p in self.outdir.glob("*.nested.template.json")
        }

    def all_resources(self) -> dict[str, dict[str, Any]]:
        found = dict(self.template()["Resources"])
        for template in self.nested().values():
            found |= template["Resources"]
        return found

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.all_resources().items() if v["Type"] == kind}


def build(config: EnvironmentConfig, outdir: Path) -> Built:
    """The whole environment as the app builds it; Studio's stack is the one under test."""
    app = create_app(outdir=str(outdir))
    stacks = build_environment(app, config)
    assert stacks.studio is not None, "studio.enabled is on in every case here"
    app.synth()
    return Built(config, outdir, stacks.studio)


def config_with(overrides: dict[str, Any]) -> EnvironmentConfig:
    config = EnvironmentConfig.model_validate(merge(default_data(), overrides))
    assert not [f for f in run_validators(config) if f.level.name == "ERROR"]
    return config


_CACHE: dict[str, Built] = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    def get(overrides: dict[str, Any]) -> Built:
        key = json.dumps(overrides, sort_keys=True)
        if key not in _CACHE:
            _CACHE[key] = build(config_with(overrides), tmp_path_factory.mktemp("studio"))
        return _CACHE[key]

    return get


def limits(outdir: Path) -> list[str]:
    """Every template of the assembly (nested ones too) against CloudFormation's quotas."""
    broken = []
    for path in sorted(outdir.glob("*.template.json")):
        template = json.loads(path.read_text())
        seen = {
            "resources": len(template.get("Resources", {})),
            "bytes": path.stat().st_size,
            "outputs": len(template.get("Outputs", {})),
            "parameters": len(template.get("Parameters", {})),
        }
        broken += [f"{path.name}: {k} {v} > {LIMITS[k]}" for k, v in seen.items() if v > LIMITS[k]]
    return broken


def gates(outdir: Path) -> list[str]:
    """cdk-nag and cfn-lint on the stacks and their nested templates (the gates follow each
    nested stack's TemplateURL to its file asset)."""
    return [f.render() for f in check_assembly(outdir).findings]


# --- the domain -----------------------------------------------------------------------------------


def test_domain_is_vpc_only_iam_in_the_cluster_subnet_with_studio_groups(built: Any) -> None:
    b = built(SLURM)
    (domain,) = b.of_type("AWS::SageMaker::Domain").values()
    props = domain["Properties"]
    assert domain["DeletionPolicy"] == "Retain" and domain["UpdateReplacePolicy"] == "Retain"
    assert props["AuthMode"] == "IAM" and props["AppNetworkAccessType"] == "VpcOnly"
    (subnet,) = props["SubnetIds"]
    assert "NetworkPrivateSubnet" in json.dumps(subnet)  # the cluster's subnet
    assert props["DomainSettings"]["ExecutionRoleIdentityConfig"] == "USER_PROFILE_NAME"
    settings = props["DefaultUserSettings"]
    groups = json.dumps(settings["SecurityGroups"])
    assert "StudioFsxSecurityGroup" in groups and "StudioAppsSecurityGroup" in groups
    assert settings["JupyterLabAppSettings"]["AppLifecycleManagement"]["IdleSettings"] == {
        "LifecycleManagement": "ENABLED",
        "IdleTimeoutInMinutes": 120,
        "MinIdleTimeoutInMinutes": 60,
        "MaxIdleTimeoutInMinutes": 120,
    }
    assert settings["DefaultLandingUri"] == "studio::"
    assert "CodeEditor" not in settings["StudioWebPortalSettings"]["HiddenAppTypes"]
    assert "CustomFileSystemConfigs" not in settings  # per profile, never a domain default


def test_lifecycle_configurations_are_attached_to_both_apps(built: Any) -> None:
    b = built(SLURM)
    lccs = b.of_type("AWS::SageMaker::StudioLifecycleConfig")
    assert sorted(v["Properties"]["StudioLifecycleConfigAppType"] for v in lccs.values()) == [
        "CodeEditor",
        "JupyterLab",
    ]
    settings = json.dumps(b.of_type("AWS::SageMaker::Domain"))
    for logical in lccs:
        assert settings.count(logical) == 2  # the app's list and its default resource spec
    content = next(iter(lccs.values()))["Properties"]["StudioLifecycleConfigContent"]
    assert "Fn::Base64" in content  # the file system id is resolved at deploy


def _deployed_size(content: dict[str, Any], config: EnvironmentConfig) -> int:
    """Characters of a lifecycle configuration's content in base64 once CloudFormation has put
    in the values it imports: the file system's id (fs- and 17 hex digits) and, on EKS, the
    cluster's name."""
    parts = content["Fn::Base64"]["Fn::Join"][1]
    values = {"LustreFileSystem": "fs-" + "0" * 17, "EksCluster": eks_cluster_name(config)}
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += part
        else:
            (value,) = [v for k, v in values.items() if k in json.dumps(part)]
            text += value
    return len(base64.b64encode(text.encode()))


@pytest.mark.parametrize("kind", ["slurm", "eks"])
def test_validate_measures_the_lifecycle_configuration_the_template_holds(
    built: Any, kind: str
) -> None:
    """`studio-lifecycle-size` renders with the construct's own function: what it measures is
    what CreateStudioLifecycleConfig gets, to the character."""
    b = built(SLURM if kind == "slurm" else EKS_STUDIO)
    for lcc in b.of_type("AWS::SageMaker::StudioLifecycleConfig").values():
        content = lcc["Properties"]["StudioLifecycleConfigContent"]
        assert _deployed_size(content, b.config) == lifecycle_config_size(b.config)


def test_execution_role_is_least_privilege_and_scoped_to_the_caller(built: Any) -> None:
    b = built(SLURM)
    role = next(v for k, v in b.of_type("AWS::IAM::Role").items() if k.startswith("StudioExec"))
    assert "ManagedPolicyArns" not in role["Properties"]  # no SageMaker/S3 full access
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {a for s in trust for a in _list(s["Action"])} >= {"sts:SetSourceIdentity"}
    policy = next(
        v for k, v in b.of_type("AWS::IAM::Policy").items() if k.startswith("StudioExecution")
    )
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    token = json.dumps(statements["OwnSlurmToken"]["Resource"])
    assert "/hyperpod-kit/hyperpod-dev/slurm-jwt/${aws:SourceIdentity}" in token
    create_app_ = statements["AppsInOwnPrivateSpacesOnAllowedTypes"]["Condition"]
    assert create_app_["StringEquals"] == {"sagemaker:SpaceSharingType": "Private"}
    assert create_app_["ForAllValues:StringEquals"]["sagemaker:InstanceTypes"][0] == "ml.t3.medium"
    assert "ssm:StartSession" not in json.dumps(policy)
    everything = json.dumps(policy)
    assert '"sagemaker:*"' not in everything and '"s3:*"' not in everything
    assert "studio/${aws:SourceIdentity}/*" in everything


@pytest.mark.parametrize("overrides", [SLURM, EKS], ids=["slurm", "eks"])
def test_the_package_url_is_a_parameter_that_the_role_reads_with_that_object(
    built: Any, overrides: dict[str, Any]
) -> None:
    """The lifecycle configurations carry only the parameter's constant name (their content,
    create-only, stays when the toolkit changes); the parameter holds the package asset's URL;
    the execution role reads that parameter and that object alone."""
    b = built(overrides)
    name = f"/hyperpod-kit/{b.config.name}/studio-package"
    (parameter,) = [
        v["Properties"] for v in b.of_type("AWS::SSM::Parameter").values()
        if v["Properties"]["Name"] == name
    ]  # fmt: skip
    url = parameter["Value"]["Fn::Sub"]
    assert url.startswith(f"s3://cdk-hnb659fds-assets-${{AWS::AccountId}}-{b.config.region}/")
    key = url.rsplit("/", 1)[1]
    assert key.endswith(".zip") and len(key) == len("0" * 64 + ".zip")
    assets = json.loads((b.outdir / f"{b.config.name}-studio.assets.json").read_text())
    (package,) = [a for h, a in assets["files"].items() if f"{h}.zip" == key]
    assert package["source"]["packaging"] == "zip"
    for lcc in b.of_type("AWS::SageMaker::StudioLifecycleConfig").values():
        content = json.dumps(lcc["Properties"]["StudioLifecycleConfigContent"])
        parts = lcc["Properties"]["StudioLifecycleConfigContent"]["Fn::Base64"]["Fn::Join"][1]
        text = "".join(part for part in parts if isinstance(part, str))
        assert (
            f"HYPERPOD_KIT_PACKAGE_PARAMETER=${{HYPERPOD_KIT_PACKAGE_PARAMETER:-'{name}'}}" in text
        )
        assert "cdk-hnb659fds-assets" not in content and key not in content
    policy = next(
        v for k, v in b.of_type("AWS::IAM::Policy").items() if k.startswith("StudioExecution")
    )
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    read_url = statements["ToolkitPackageUrl"]
    assert read_url["Action"] == "ssm:GetParameter"
    assert json.dumps(read_url["Resource"]).endswith(f':parameter{name}"]]}}')
    read_object = statements["ToolkitPackage"]
    assert read_object["Action"] == "s3:GetObject"
    assert json.dumps(read_object["Resource"]).endswith(f'/{key}"]]}}')


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_studio_reaches_slurmctld_only(built: Any) -> None:
    b = built(SLURM)
    ingress = [
        v["Properties"]
        for v in b.of_type("AWS::EC2::SecurityGroupIngress").values()
        if "Cluster" in json.dumps(v["Properties"]["GroupId"])
    ]
    assert [(i["FromPort"], i["ToPort"], i["IpProtocol"]) for i in ingress] == [(6817, 6817, "tcp")]


# --- profiles and partitions ----------------------------------------------------------------------


def test_one_profile_per_user_with_its_partition_and_posix_identity(built: Any) -> None:
    b = built(SLURM)
    profiles = {
        v["Properties"]["UserProfileName"]: v
        for v in b.of_type("AWS::SageMaker::UserProfile").values()
    }
    assert sorted(profiles) == ["alice", "bob", "carol"]
    bob = profiles["bob"]
    assert bob["DeletionPolicy"] == "Retain"
    settings = bob["Properties"]["UserSettings"]
    assert settings["CustomPosixUserConfig"] == {"Uid": 10002, "Gid": 2000}
    (fsx,) = settings["CustomFileSystemConfigs"]
    assert fsx["FSxLustreFileSystemConfig"]["FileSystemPath"] == "/bob"
    assert "LustreFileSystem" in json.dumps(fsx["FSxLustreFileSystemConfig"]["FileSystemId"])


def test_each_profile_waits_for_its_batchs_partitions_gate(built: Any) -> None:
    b = built(SLURM)
    for name, template in b.nested().items():
        resources = template["Resources"]
        (gate_id,) = [k for k, v in resources.items() if v["Type"] == "Custom::StudioPartitions"]
        gate = resources[gate_id]["Properties"]
        users = {u["Name"]: u for u in gate["Users"]}
        for logical, resource in resources.items():
            if resource["Type"] == "AWS::SageMaker::UserProfile":
                assert gate_id in resource["DependsOn"], logical
                user = users[resource["Properties"]["UserProfileName"]]
                assert user["Path"] == f"/{user['Name']}"
            if resource["Type"] == "AWS::SageMaker::Space":
                assert resource["DeletionPolicy"] == "Retain"
                assert resource["Properties"]["SpaceSharingSettings"] == {"SharingType": "Private"}
        assert gate["Mode"] == "per_user" and gate["TimeoutSeconds"] == 1200, name
    # Nodes must be allowed to report before anyone waits for their reports: the cluster stack
    # grants it, and deploys first.
    assert not b.of_type("AWS::IAM::Policy").keys() & {"NodeGrantsPolicy0B15B3AA"}


def test_users_land_in_stable_batches() -> None:
    """A user's nested stack depends on their name only: adding someone moves no one."""
    names = [f"user{i}" for i in range(40)]
    before = {n: batch_of(n) for n in names}
    after = {n: batch_of(n) for n in ["newcomer", *reversed(names)]}
    assert {n: after[n] for n in names} == before
    assert len(set(before.values())) > 8  # and they spread over the nested stacks


def test_handler_policy(built: Any) -> None:
    b = built(SLURM)
    policies = b.of_type("AWS::IAM::Policy")
    handler = next(v for k, v in policies.items() if k.startswith("PartitionsHandlerRole"))
    text = json.dumps(handler)
    assert "parameter/hyperpod-kit/hyperpod-dev/partitions/*" in text
    assert "sagemaker:UpdateUserProfile" in text and "ec2:ModifyNetworkInterfaceAttribute" in text
    assert '"ec2:Vpc"' in text


def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def _allows(statements: list[dict[str, Any]], action: str, resource_part: str) -> bool:
    return any(
        action in _list(st["Action"]) and resource_part in json.dumps(st["Resource"])
        for st in statements
        if st["Effect"] == "Allow"
    )


def test_the_node_grants_for_studio_are_the_cluster_stack_s(built: Any) -> None:
    """The controller's token issuer runs while the controller provisions, before the Studio
    stack exists (a first deploy): everything it writes is granted in the execution role's
    default policy, which the cluster resource depends on. The Studio stack grants the nodes
    nothing."""
    b = built(SLURM)
    cluster = b.template("hyperpod-dev-cluster.template.json")["Resources"]
    (policy_id,) = [k for k in cluster if k.startswith("HyperPodExecutionRoleDefaultPolicy")]
    assert policy_id in cluster["HyperPodCluster"]["DependsOn"]
    statements = _statements(cluster[policy_id])
    tokens = "parameter/hyperpod-kit/hyperpod-dev/slurm-jwt/*"
    assert _allows(statements, "ssm:PutParameter", tokens)
    assert _allows(statements, "ssm:DeleteParameter", tokens)  # removed users' tokens
    assert _allows(
        statements, "ssm:PutParameter", "parameter/hyperpod-kit/hyperpod-dev/slurm-client"
    )
    assert _allows(statements, "s3:PutObject", "/hyperpod-kit/slurm-client/*")
    assert _allows(statements, "ssm:GetParameter", "parameter/hyperpod-kit/hyperpod-dev/storage")
    assert _allows(
        statements, "ssm:PutParameter", "parameter/hyperpod-kit/hyperpod-dev/partitions/*"
    )
    assert not any("kms:" in json.dumps(st["Action"]) for st in statements)  # s3-managed bucket
    # A Studio stack deployed by an earlier release still imports the role's name: the export
    # stays, or CloudFormation would refuse to update this stack (it deploys first).
    outputs = b.template("hyperpod-dev-cluster.template.json")["Outputs"]
    assert any(k.startswith("ExportsOutputRefHyperPodExecutionRole") for k in outputs)
    studio = json.dumps(b.of_type("AWS::IAM::Policy"))
    assert "ssm:PutParameter" not in studio.replace("PartitionsHandler", "")  # the handler reads
    for name, policy in b.of_type("AWS::IAM::Policy").items():
        assert "HyperPodExecutionRole" not in json.dumps(policy["Properties"].get("Roles")), name


def test_the_issuer_may_use_the_data_bucket_s_key(built: Any) -> None:
    """An SSE-KMS data bucket: the bundle upload needs GenerateDataKey, and Decrypt for a
    multipart upload; SecureStrings use aws/ssm, which needs no grant."""
    b = built(merge(SLURM, {"storage": {"bucket": {"encryption": "kms"}}}))
    cluster = b.template("hyperpod-dev-cluster.template.json")["Resources"]
    (policy_id,) = [k for k in cluster if k.startswith("HyperPodExecutionRoleDefaultPolicy")]
    statements = _statements(cluster[policy_id])
    assert _allows(statements, "kms:GenerateDataKey", "DataKey")
    assert _allows(statements, "kms:Decrypt", "DataKey")


def test_eks_studio_grants_the_nodes_no_slurm_tokens(built: Any) -> None:
    b = built(EKS)
    cluster = b.template(f"{b.config.name}-cluster.template.json")["Resources"]
    text = json.dumps(cluster)
    assert "slurm-jwt" not in text and "slurm-client" not in text


def test_existing_file_system_gets_the_studio_group_through_the_custom_resource(
    built: Any,
) -> None:
    existing = {
        "network": {
            "vpc": None,
            "existing_vpc": {
                "vpc_id": "vpc-0123456789abcdef0",
                "private_subnet_id": "subnet-0123456789abcdef0",
                "cidr": "10.0.0.0/16",
            },
        },
        "storage": {
            "lustre": {
                "existing": {
                    "file_system_id": "fs-0123456789abcdef0",
                    "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                    "mount_name": "abcdefgh",
                }
            }
        },
    }
    b = built(merge(SLURM, existing))
    (access_id, access), *_ = b.of_type("Custom::StudioFileSystemAccess").items()
    assert access["Properties"]["FileSystemId"] == "fs-0123456789abcdef0"
    nested = [r for r in b.template()["Resources"].values() if r["Type"].endswith("::Stack")]
    assert all(access_id in r["DependsOn"] for r in nested)


CONTROL_PLANE_SG = "sg-0c0ffee0c0ffee000"
EKS_EXISTING_CLUSTER = merge(
    EKS,
    {
        "network": {"vpc": {"control_plane_subnet_cidr": None}},
        "cluster": {
            "eks": {
                "existing_cluster_name": "ml-platform",
                "existing_cluster_security_group_id": CONTROL_PLANE_SG,
            }
        },
    },
)
EKS_EXISTING_CLUSTER["network"].pop("control_plane_availability_zone_id")


def test_on_an_existing_eks_cluster_the_api_port_opens_on_its_own_security_group(
    built: Any,
) -> None:
    """The environment's cluster group is on a new cluster's control plane only: on an existing
    cluster, Studio's HTTPS rule goes on the group the file names, and on no other group."""
    b = built(EKS_EXISTING_CLUSTER)
    ingress = [v["Properties"] for v in b.of_type("AWS::EC2::SecurityGroupIngress").values()]
    https = [i for i in ingress if i["FromPort"] == 443]
    assert [i["GroupId"] for i in https] == [CONTROL_PLANE_SG]
    assert https[0]["ToPort"] == 443 and https[0]["IpProtocol"] == "tcp"


def test_eks_gets_kubectl_settings_and_the_api_port(built: Any) -> None:
    b = built(EKS)
    ingress = [v["Properties"] for v in b.of_type("AWS::EC2::SecurityGroupIngress").values()]
    # HTTPS to the EKS API: the control plane carries the network's cluster security group
    cluster_sg = {"Fn::ImportValue": next(
        i["GroupId"]["Fn::ImportValue"] for i in ingress
        if "ClusterSecurityGroup" in json.dumps(i["GroupId"])
    )}  # fmt: skip
    assert {"GroupId": cluster_sg, "FromPort": 443} in [
        {"GroupId": i["GroupId"], "FromPort": i["FromPort"]} for i in ingress
    ]
    policy = json.dumps(
        [p["Properties"]["PolicyDocument"] for p in b.of_type("AWS::IAM::Policy").values()]
    )
    assert "eks:DescribeCluster" in policy and "slurm-jwt" not in policy
    profiles = b.of_type("AWS::SageMaker::UserProfile").values()
    paths = {
        p["Properties"]["UserSettings"]["CustomFileSystemConfigs"][0]["FSxLustreFileSystemConfig"][
            "FileSystemPath"
        ]
        for p in profiles
    }
    assert paths == {"/shared"}
    assert gates(b.outdir) == []


def test_gates_are_clean_on_every_template(built: Any) -> None:
    outdir = built(SLURM).outdir
    assert gates(outdir) == []
    linted = {s.template.name for s in check_assembly(outdir).stacks}
    assert {p.name for p in outdir.glob("*.nested.template.json")} <= linted


@pytest.mark.parametrize("parallel_from", [10**9, 0], ids=["one-process", "forked-workers"])
def test_the_gates_lint_a_nested_template(
    built: Any, tmp_path: Path, parallel_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken user batch fails the gate like a broken stack, named under its parent, whether
    the templates are linted in this process or in forked workers (large assemblies)."""
    monkeypatch.setattr(hyperpod_kit.gates, "PARALLEL_LINT_FROM", parallel_from)
    outdir = tmp_path / "copy"
    shutil.copytree(built(SLURM).outdir, outdir)
    nested = sorted(outdir.glob("*.nested.template.json"))[0]
    template = json.loads(nested.read_text())
    [profile, *_] = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::UserProfile"
    ]
    profile["Properties"]["NoSuchProperty"] = 1
    nested.write_text(json.dumps(template))
    report = check_assembly(outdir)
    assert not report.ok
    [finding] = [f for f in report.findings if f.gate == "cfn-lint"]
    assert finding.stack.startswith("hyperpod-dev-studio/Users")
    assert "NoSuchProperty" in finding.render()


def test_a_stack_without_cluster_handles_of_the_right_kind_is_refused(tmp_path: Path) -> None:
    config = config_with(merge(SLURM, {}))
    with pytest.raises(ValueError, match="EKS environment needs the EKS cluster handles"):
        app = create_app(outdir=str(tmp_path))
        stacks = build_environment(app, config)
        StudioStack(
            app,
            "x-studio",
            config=config,
            network=stacks.network.network,
            file_system=stacks.storage.lustre,
            cluster=ClusterStandIn(app, "x-cluster"),
            data_bucket=stacks.storage.data.bucket,
            eks=StudioEks(cluster_name="c", cluster_arn=EKS_ARN),
        )


# --- scale ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_500_users_stay_within_cloudformation_limits(tmp_path: Path) -> None:
    users = [{"name": f"researcher-{i:03d}", "uid": 10000 + i} for i in range(500)]
    b = build(config_with(merge(SLURM, {"users": users})), tmp_path)
    assert limits(tmp_path) == []
    assert len(b.of_type("AWS::SageMaker::UserProfile")) == 500
    assert len(b.of_type("AWS::SageMaker::Space")) == 1000
    parent = b.template()
    assert len(parent["Resources"]) < 60


EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_every_example_with_studio_on_stays_within_limits(example: Path, tmp_path: Path) -> None:
    """Each example, with Studio as it sets it (or on, for three users, where it is off)."""
    loaded = load_environment(example)
    config = loaded.config
    if not config.studio.enabled:
        data = config.model_dump(mode="json", exclude_none=True)
        data["users"] = data.get("users") or PEOPLE
        data["studio"] = {"enabled": True}
        if config.orchestrator == "slurm":
            data["cluster"]["slurm"]["config_strategy"] = "Merge"
        if config.storage.lustre.existing is not None and config.network.existing_vpc is None:
            pytest.skip("an existing file system needs an existing VPC for Studio")
        config = EnvironmentConfig.model_validate(data).at_source(example.parent)
    build(config, tmp_path)
    assert limits(tmp_path) == []
