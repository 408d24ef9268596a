"""The EKS stacks, built in a bare app beside network and storage: cluster, add-ons, Helm chart,
FSx claim, HyperPod access entry, stack order, and both gates (cfn-lint, cdk-nag).

`build_eks_app` wires the stacks as app.py will: network -> (storage || eks) -> cluster -> eks
add-ons. The cluster stack here is a stand-in holding only what the EKS stacks give it (the
execution role's HYPERPOD_LINUX access entry); the real one is `hyperpod_kit.stacks.cluster`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import default_data, merge

pytestmark = pytest.mark.synth

CHART = Path(__file__).resolve().parents[1] / "data" / "hyperpod-helm-chart"
WORKERS = {
    "name": "workers",
    "role": "worker",
    "instance_type": "ml.g5.8xlarge",
    "instance_count": 2,
}
STAND_IN_CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef012345"
ADMINS = ["arn:aws:iam::111122223333:role/PlatformAdmin", "arn:aws:iam::111122223333:role/Ops"]


def eks_env(**eks: Any) -> dict[str, Any]:
    """The default environment on EKS, new VPC with its control-plane subnet."""
    return {
        "orchestrator": "eks",
        "network": {
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "usw2-az1",
        },
        "cluster": {"instance_groups": [WORKERS], "eks": eks},
    }


NEW = merge(
    eks_env(
        kubernetes_version="1.32",
        admin_role_arns=ADMINS,
        hyperpod_access_entry=True,
        helm_chart=str(CHART),
        addons={
            "vpc_cni": "v1.20.1-eksbuild.3",
            "coredns": "v1.11.4-eksbuild.2",
            "kube_proxy": "v1.32.0-eksbuild.2",
            "pod_identity_agent": "v1.3.4-eksbuild.1",
            "cert_manager": "v1.18.2-eksbuild.2",
            "training_operator": "v1.1.0-eksbuild.1",
        },
    ),
    {
        "trainer": {"job": {"namespace": "ml"}},
        "storage": {"lustre": {"storage_capacity_gib": 2400}},
    },
)
PUBLIC_EXISTING_VPC = {
    "orchestrator": "eks",
    "network": {
        "vpc": None,  # deleted from the default file
        "existing_vpc": {
            "vpc_id": "vpc-0123456789abcdef0",
            "private_subnet_id": "subnet-0123456789abcdef0",
            "cidr": "10.1.0.0/16",
            "control_plane_subnet_ids": ["subnet-0123456789abcdef1"],
        },
    },
    "cluster": {
        "instance_groups": [WORKERS],
        "eks": {"public_access_cidrs": ["203.0.113.0/24", "198.51.100.7/32"]},
    },
}
EXISTING = merge(
    eks_env(existing_cluster_name="ml-platform", helm_chart=str(CHART)),
    {
        "network": {"vpc": {"control_plane_subnet_cidr": None}},
        "storage": {
            "lustre": {
                "existing": {
                    "file_system_id": "fs-0123456789abcdef0",
                    "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                    "mount_name": "abcdefgh",
                }
            }
        },
    },
)
EXISTING["network"].pop("control_plane_availability_zone_id")
RENAMED = merge(NEW, {"cluster": {"name": "renamed"}})
# No NAT (interface endpoints in an existing VPC): the device plugins' charts from local folders;
# a GPU type with EFA and one without.
PLUGINS_LOCAL = merge(
    PUBLIC_EXISTING_VPC,
    {
        "network": {"interface_endpoints": True},
        "cluster": {
            "instance_groups": [
                dict(WORKERS, instance_type="ml.p5.48xlarge"),
                dict(WORKERS, name="small", instance_type="ml.g5.xlarge"),
            ],
            "eks": {
                "device_plugins": {
                    "nvidia_chart": str(CHART / "charts" / "nvidia-device-plugin"),
                    "efa_chart": str(CHART / "charts" / "aws-efa-k8s-device-plugin"),
                }
            },
        },
        "trainer": {"job": {"instance_group": "workers", "global_batch_size": 64}},
    },
)
VARIANTS = {
    "new": NEW,
    "public-existing-vpc": PUBLIC_EXISTING_VPC,
    "existing": EXISTING,
    "renamed": RENAMED,
    "plugins-local": PLUGINS_LOCAL,
}


@dataclass
class EksApp:
    config: Any
    outdir: Path
    templates: dict[str, Any]  # area -> aws_cdk.assertions.Template
    raw: dict[str, dict[str, Any]]  # area -> template JSON
    manifest: dict[str, Any]
    report: Any  # hyperpod_kit.gates.GateReport
    hyperpod_entry: Any  # what grant_hyperpod_nodes returned
    stacks: dict[str, Any]


def build_eks_app(overrides: dict[str, Any], outdir: Path) -> EksApp:
    """Network, storage, EKS, a stand-in cluster stack and the EKS add-ons, gated like app.py."""
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_ssm as ssm
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks

    from hyperpod_kit.app import create_app
    from hyperpod_kit.config import EnvironmentConfig, has_errors
    from hyperpod_kit.config.validators import run_validators
    from hyperpod_kit.gates import check_assembly
    from hyperpod_kit.stacks.eks import EksStack
    from hyperpod_kit.stacks.eks_addons import EksAddonsStack
    from hyperpod_kit.stacks.network import NetworkStack
    from hyperpod_kit.stacks.storage import StorageStack

    config = EnvironmentConfig.model_validate(merge(default_data(), overrides))
    findings = run_validators(config)
    assert not has_errors(findings), findings
    app = create_app(outdir=str(outdir))
    env = cdk.Environment(account=config.account, region=config.region)
    name = config.name
    network = NetworkStack(app, f"{name}-network", config=config, env=env)
    storage = StorageStack(app, f"{name}-storage", config=config, network=network.network, env=env)
    eks = EksStack(app, f"{name}-eks", config=config, network=network.network, env=env)
    cluster = cdk.Stack(app, f"{name}-cluster", env=env)
    role = iam.Role(
        cluster, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
    )
    entry = eks.eks.grant_hyperpod_nodes(cluster, role)
    # Where the real cluster stack puts it: Orchestrator.Eks.ClusterArn of AWS::SageMaker::Cluster.
    ssm.StringParameter(cluster, "EksClusterArn", string_value=eks.eks.cluster_arn)
    cluster.add_stack_dependency(storage)
    addons = EksAddonsStack(
        app,
        f"{name}-eks-addons",
        config=config,
        eks=eks.eks,
        lustre=storage.lustre,
        cluster_arn=STAND_IN_CLUSTER_ARN,  # the real one is the cluster stack's (app.py)
        after=[cluster],
        env=env,
    )
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    assembly = app.synth()
    stacks = {
        "network": network,
        "storage": storage,
        "eks": eks,
        "cluster": cluster,
        "eks-addons": addons,
    }
    raw = {area: assembly.get_stack_by_name(s.stack_name).template for area, s in stacks.items()}
    return EksApp(
        config=config,
        outdir=outdir,
        templates={area: Template.from_json(t) for area, t in raw.items()},
        raw=raw,
        manifest=json.loads((outdir / "manifest.json").read_text()),
        report=check_assembly(outdir),
        hyperpod_entry=entry,
        stacks=stacks,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache: dict[str, EksApp] = {}

    def get(variant: str) -> EksApp:
        if variant not in cache:
            cache[variant] = build_eks_app(VARIANTS[variant], tmp_path_factory.mktemp(variant))
        return cache[variant]

    return get


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _one(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    found = _of_type(template, kind)
    assert len(found) == 1, f"expected one {kind}, found {sorted(found)}"
    return next(iter(found.items()))


def _imports(value: Any) -> list[str]:
    """Export names a value imports (Fn::ImportValue), anywhere inside it."""
    text = json.dumps(value)
    return [part.split('"')[0] for part in text.split('{"Fn::ImportValue": "')[1:]]


def _manifest_objects(resource: dict[str, Any]) -> list[dict[str, Any]]:
    """A KubernetesManifest's objects, with cross-stack tokens replaced by their export names."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict):  # Fn::Join of text and imports
        manifest = "".join(
            p if isinstance(p, str) else f"<{p['Fn::ImportValue']}>"
            for p in manifest["Fn::Join"][1]
        )
    objects: list[dict[str, Any]] = json.loads(manifest)
    return objects


def _addons(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["Properties"]["AddonName"]: r for r in _of_type(template, "AWS::EKS::Addon").values()}


# --- the cluster -------------------------------------------------------------------------------


def test_new_cluster_has_auto_mode_off_api_auth_pinned_version_and_every_log(built: Any) -> None:
    eks = built("new").raw["eks"]
    logical, cluster = _one(eks, "AWS::EKS::Cluster")
    assert (
        logical == "EksCluster"
    )  # pinned: plan reports a replacement, refactoring never makes one
    assert cluster["DeletionPolicy"] == "Delete" and cluster["UpdateReplacePolicy"] == "Delete"
    props = cluster["Properties"]
    assert props["Name"] == "hyperpod-dev-eks"
    assert props["Version"] == "1.32"
    # HyperPod rejects CONFIG_MAP (EKS's CloudFormation default): set, not defaulted.
    assert props["AccessConfig"] == {
        "AuthenticationMode": "API",
        "BootstrapClusterCreatorAdminPermissions": False,
    }
    # aws_eks_v2 defaults to Auto Mode; HyperPod brings the nodes.
    assert props["ComputeConfig"] == {"Enabled": False}
    assert props["StorageConfig"] == {"BlockStorage": {"Enabled": False}}
    assert props["KubernetesNetworkConfig"]["ElasticLoadBalancing"] == {"Enabled": False}
    logged = [t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]]
    assert sorted(logged) == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    assert not _of_type(eks, "AWS::EKS::Nodegroup")
    assert not _of_type(eks, "AWS::AutoScaling::AutoScalingGroup")


def test_new_cluster_is_private_in_the_cluster_and_control_plane_subnets(built: Any) -> None:
    eks = built("new").raw["eks"]
    _, cluster = _one(eks, "AWS::EKS::Cluster")
    vpc = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True and vpc["EndpointPublicAccess"] is False
    assert "PublicAccessCidrs" not in vpc
    subnets = _imports(vpc["SubnetIds"])
    assert len(subnets) == 2
    assert "NetworkPrivateSubnet" in subnets[0] and "NetworkControlPlaneSubnet" in subnets[1]
    # The control plane carries the nodes' security group: the group's all-traffic self rules
    # (EFA) let HyperPod nodes and the control plane reach each other with no other rule.
    (sg,) = _imports(vpc["SecurityGroupIds"])
    assert "NetworkClusterSecurityGroup" in sg
    net = built("new").raw["network"]
    assert not _of_type(eks, "AWS::EC2::SecurityGroup")
    assert not _of_type(eks, "AWS::EC2::SecurityGroupIngress")
    assert len(_of_type(net, "AWS::EC2::SecurityGroup")) == 2  # nothing added for EKS


def test_public_endpoint_only_from_the_listed_cidrs_and_existing_vpc_subnets(built: Any) -> None:
    eks = built("public-existing-vpc").raw["eks"]
    _, cluster = _one(eks, "AWS::EKS::Cluster")
    vpc = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPublicAccess"] is True and vpc["EndpointPrivateAccess"] is True
    assert vpc["PublicAccessCidrs"] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert vpc["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    reasons = cluster["Metadata"]["cdk_nag"]["rules_to_suppress"]
    assert [r["id"] for r in reasons] == ["AwsSolutions-EKS1"]


def test_kubectl_handler_runs_in_the_cluster_subnets_with_the_node_security_group(
    built: Any,
) -> None:
    for variant in ("new", "existing"):
        eks = built(variant).raw["eks"]
        functions = _of_type(eks, "AWS::Lambda::Function")
        assert len(functions) == 2  # the kubectl handler and the custom-resource framework
        for fn in functions.values():
            vpc = fn["Properties"]["VpcConfig"]
            assert [
                "NetworkClusterSecurityGroup" in s for s in _imports(vpc["SecurityGroupIds"])
            ] == [True]
        layers = [
            layer["Properties"].get("Description", "")
            for layer in _of_type(eks, "AWS::Lambda::LayerVersion").values()
        ]
        assert any("kubectl 1.33" in d and "helm" in d for d in layers)
        # aws_eks_v2's ECR (OCI chart) policies and their template Condition are removed: charts
        # come from S3 assets.
        assert "Conditions" not in eks
        for role in _of_type(eks, "AWS::IAM::Role").values():
            arns = json.dumps(role["Properties"].get("ManagedPolicyArns", []))
            assert "ContainerRegistry" not in arns


def test_admins_and_the_kubectl_handler_get_cluster_admin_access_entries(built: Any) -> None:
    eks = built("new").raw["eks"]
    entries = list(_of_type(eks, "AWS::EKS::AccessEntry").values())
    principals = [e["Properties"]["PrincipalArn"] for e in entries]
    assert ADMINS[0] in principals and ADMINS[1] in principals
    assert len(entries) == 3  # two admins + the kubectl handler's role
    for e in entries:
        assert e["Properties"]["ClusterName"] == {"Ref": "EksCluster"}
        (policy,) = e["Properties"]["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert json.dumps(policy["PolicyArn"]).endswith(
            'cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}'
        )
        assert "Type" not in e["Properties"]  # STANDARD


def test_core_addons_are_pinned_and_take_over_the_self_managed_ones(built: Any) -> None:
    addons = _addons(built("new").raw["eks"])
    assert {n: a["Properties"].get("AddonVersion") for n, a in addons.items()} == {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "coredns": "v1.11.4-eksbuild.2",
        "kube-proxy": "v1.32.0-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.4-eksbuild.1",
    }
    for addon in addons.values():
        assert addon["Properties"]["ClusterName"] == {"Ref": "EksCluster"}
        assert addon["Properties"]["ResolveConflicts"] == "OVERWRITE"
    # Left out, EKS picks the default for the cluster's version; vpc-cni always has a pin.
    defaults = _addons(built("public-existing-vpc").raw["eks"])
    assert {n for n, a in defaults.items() if "AddonVersion" not in a["Properties"]} == {
        "coredns",
        "kube-proxy",
        "eks-pod-identity-agent",
    }


def test_existing_cluster_creates_no_control_plane_and_builds_its_arn_offline(built: Any) -> None:
    app = built("existing")
    eks = app.raw["eks"]
    for kind in ("AWS::EKS::Cluster", "AWS::EKS::Addon", "AWS::IAM::OIDCProvider"):
        assert not _of_type(eks, kind), kind
    arn = eks["Outputs"]["ClusterArn"]["Value"]
    assert arn == {
        "Fn::Join": [
            "",
            ["arn:aws:eks:us-west-2:", {"Ref": "AWS::AccountId"}, ":cluster/ml-platform"],
        ]
    }
    assert eks["Outputs"]["ClusterName"]["Value"] == "ml-platform"
    # The kubectl handler's own way in: an access entry on the existing cluster.
    logical, entry = _one(eks, "AWS::EKS::AccessEntry")
    assert entry["Properties"]["ClusterName"] == "ml-platform"
    assert entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0].startswith(
        "EksKubectlProviderHandler"
    )
    _, release = _one(eks, "Custom::AWSCDK-EKS-HelmChart")
    assert logical in release["DependsOn"]
    assert app.stacks["eks"].eks.cluster_name == "ml-platform"
    # The network stack made no control-plane subnet for it.
    assert not [k for k in _of_type(app.raw["network"], "AWS::EC2::Subnet") if "ControlPlane" in k]


# --- HyperPod's Helm chart ---------------------------------------------------------------------


def test_helm_chart_is_installed_from_the_pinned_folder_as_an_asset(built: Any) -> None:
    app = built("new")
    eks = app.raw["eks"]
    _, release = _one(eks, "Custom::AWSCDK-EKS-HelmChart")
    props = release["Properties"]
    assert props["Release"] == "hyperpod-dependencies"
    assert props["Namespace"] == "kube-system"
    assert "Repository" not in props and "Chart" not in props and "Version" not in props
    assert json.loads(props["Values"]) == {"global": {"region": "us-west-2"}}
    url = props["ChartAssetURL"]["Fn::Sub"]
    assert url.startswith("s3://cdk-hnb659fds-assets-${AWS::AccountId}-us-west-2/")
    # The asset is the chart folder itself, zipped at deploy: nothing is fetched anywhere.
    assets = json.loads((app.outdir / "hyperpod-dev-eks.assets.json").read_text())["files"]
    key = url.rsplit("/", 1)[1].removesuffix(".zip")
    source = assets[key]["source"]
    assert source["packaging"] == "zip"
    staged = app.outdir / source["path"]
    assert (staged / "Chart.yaml").read_text() == (CHART / "Chart.yaml").read_text()
    assert (staged / "charts" / "health-monitoring-agent" / "Chart.yaml").is_file()
    # After the core add-ons (the chart's DaemonSets need the CNI) and kubectl's access.
    depends = release["DependsOn"]
    assert {a for a in _of_type(eks, "AWS::EKS::Addon")} <= set(depends)
    assert any(d.startswith("EksClusterKubectlReadyBarrier") for d in depends)


def _releases(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["Release"]: r
        for r in _of_type(template, "Custom::AWSCDK-EKS-HelmChart").values()
    }


HEALTH_TAINT = {
    "key": "sagemaker.amazonaws.com/node-health-status",
    "operator": "Equal",
    "value": "Unschedulable",
    "effect": "NoSchedule",
}


def test_no_hyperpod_chart_when_the_file_names_none_but_the_device_plugins(built: Any) -> None:
    """Without HyperPod's chart nothing would advertise nvidia.com/gpu or vpc.amazonaws.com/efa
    and every GPU job would stay Pending: the two plugins, pinned as HyperPod's chart pins them,
    from their public repositories (fetched by the kubectl handler at deploy, not at synth)."""
    eks = built("public-existing-vpc").raw["eks"]
    releases = _releases(eks)
    assert sorted(releases) == ["aws-efa-k8s-device-plugin", "nvidia-device-plugin"]
    nvidia = releases["nvidia-device-plugin"]["Properties"]
    assert (nvidia["Chart"], nvidia["Version"], nvidia["Repository"], nvidia["Namespace"]) == (
        "nvidia-device-plugin", "0.16.1", "https://nvidia.github.io/k8s-device-plugin",
        "kube-system",
    )  # fmt: skip
    values = json.loads(nvidia["Values"])
    assert HEALTH_TAINT in values["tolerations"]
    (term,) = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["ml.g5.8xlarge"]}
    ]
    efa = releases["aws-efa-k8s-device-plugin"]["Properties"]
    assert (efa["Chart"], efa["Version"], efa["Repository"]) == (
        "aws-efa-k8s-device-plugin", "0.5.20", "https://aws.github.io/eks-charts/"
    )  # fmt: skip
    efa_values = json.loads(efa["Values"])
    assert HEALTH_TAINT in efa_values["tolerations"]
    assert efa_values["supportedInstanceLabels"] == {
        "keys": ["node.kubernetes.io/instance-type"], "values": ["ml.g5.8xlarge"]
    }  # fmt: skip
    for release in releases.values():  # after the CNI, once kubectl reaches the cluster
        assert {a for a in _of_type(eks, "AWS::EKS::Addon")} <= set(release["DependsOn"])


def test_no_second_copy_of_the_plugins_beside_hyperpods_chart(built: Any) -> None:
    """HyperPod's chart ships both plugins; another release of them would conflict."""
    for variant in ("new", "existing"):
        assert sorted(_releases(built(variant).raw["eks"])) == ["hyperpod-dependencies"]


def test_device_plugins_from_local_folders_only_on_their_types(built: Any) -> None:
    """A cluster without NAT: the charts are the environment file's folders, packaged as assets
    like HyperPod's chart; the EFA plugin runs on the EFA type only (it crash-loops elsewhere),
    the NVIDIA plugin on both GPU types."""
    app = built("plugins-local")
    releases = _releases(app.raw["eks"])
    for name in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        props = releases[name]["Properties"]
        assert "Repository" not in props and "Chart" not in props
        assert props["ChartAssetURL"]["Fn::Sub"].startswith("s3://cdk-hnb659fds-assets-")
    nvidia = json.loads(releases["nvidia-device-plugin"]["Properties"]["Values"])
    (term,) = nvidia["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][0]["values"] == ["ml.g5.xlarge", "ml.p5.48xlarge"]
    efa = json.loads(releases["aws-efa-k8s-device-plugin"]["Properties"]["Values"])
    assert efa["supportedInstanceLabels"]["values"] == ["ml.p5.48xlarge"]
    assets = json.loads((app.outdir / "hyperpod-dev-eks.assets.json").read_text())["files"]
    staged = [app.outdir / a["source"]["path"] for a in assets.values()]
    charts = {
        (p / "Chart.yaml").read_text().split("name: ")[1].split()[0]
        for p in staged
        if (p / "Chart.yaml").is_file()
    }
    assert charts == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"}


def test_a_chart_missing_a_vendored_dependency_fails_the_synth_gate(tmp_path: Path) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Annotations, Match

    from hyperpod_kit.config import EnvironmentConfig
    from hyperpod_kit.constructs.eks import EksCluster
    from hyperpod_kit.constructs.eks_chart import HyperPodHelmChart
    from hyperpod_kit.constructs.network import ClusterNetwork

    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "charts" / "job-auto-restart")
    config = EnvironmentConfig.model_validate(merge(default_data(), eks_env()))
    stack = cdk.Stack(cdk.App(), "Eks", env=cdk.Environment(region="us-west-2"))
    net = ClusterNetwork(
        stack, "Net", config=config.network, availability_zone_id="usw2-az2", eks=True
    )
    eks = EksCluster(stack, "Eks", config=config.cluster.eks, name="x", network=net)
    HyperPodHelmChart(stack, "Chart", eks_cluster=eks, path=chart)
    Annotations.from_stack(stack).has_error(
        "/Eks/Chart", Match.string_like_regexp("not in its charts/ folder: job-auto-restart")
    )


# --- HyperPod access entry ---------------------------------------------------------------------


def test_hyperpod_access_entry_is_made_in_the_cluster_stack_when_asked(built: Any) -> None:
    app = built("new")
    cluster = app.raw["cluster"]
    _, entry = _one(cluster, "AWS::EKS::AccessEntry")
    props = entry["Properties"]
    assert props["Type"] == "HYPERPOD_LINUX"
    assert props["AccessPolicies"] == []
    assert props["PrincipalArn"] == {"Fn::GetAtt": ["ExecutionRole605A040B", "Arn"]}
    assert "EksCluster" in _imports(props["ClusterName"])[0]
    assert app.hyperpod_entry is not None


def test_hyperpod_access_entry_is_off_by_default(built: Any) -> None:
    app = built("public-existing-vpc")
    assert app.hyperpod_entry is None
    assert not _of_type(app.raw["cluster"], "AWS::EKS::AccessEntry")


# --- after the HyperPod cluster ----------------------------------------------------------------


def test_fsx_claim_is_a_static_volume_on_the_file_system_in_the_job_namespace(built: Any) -> None:
    from hyperpod_kit.naming import FSX_CLAIM

    addons = built("new").raw["eks-addons"]
    manifests = _of_type(addons, "Custom::AWSCDK-EKS-KubernetesResource")
    ns_id, ns = next((k, m) for k, m in manifests.items() if k.startswith("FsxNamespace"))
    assert _manifest_objects(ns) == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    ]  # no prune label: a changed namespace setting never deletes the old one
    assert ns["DeletionPolicy"] == "Retain"  # it holds users' jobs
    vol = next(m for k, m in manifests.items() if k.startswith("FsxVolume"))
    assert ns_id in vol["DependsOn"]
    pv, pvc = _manifest_objects(vol)
    assert pv["kind"] == "PersistentVolume" and pv["metadata"]["name"] == "hyperpod-dev-fsx-ml"
    spec = pv["spec"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"  # never touches the file system
    assert spec["accessModes"] == ["ReadWriteMany"] and spec["storageClassName"] == ""
    assert spec["capacity"] == {"storage": "2400Gi"}
    assert spec["claimRef"] == {"namespace": "ml", "name": FSX_CLAIM}
    csi = spec["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    # The storage stack's handles, through its exports.
    assert csi["volumeHandle"].startswith("<hyperpod-dev-storage:ExportsOutputRefLustreFileSystem")
    assert "LustreFileSystemDNSName" in csi["volumeAttributes"]["dnsname"]
    assert "LustreFileSystemLustreMountName" in csi["volumeAttributes"]["mountname"]
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == FSX_CLAIM == "fsx-claim"
    assert pvc["metadata"]["namespace"] == "ml"
    assert pvc["spec"]["volumeName"] == "hyperpod-dev-fsx-ml"
    assert pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"] == {"requests": {"storage": "2400Gi"}}


def test_fsx_claim_on_an_existing_file_system_uses_its_given_names(built: Any) -> None:
    addons = built("existing").raw["eks-addons"]
    vol = next(
        m
        for k, m in _of_type(addons, "Custom::AWSCDK-EKS-KubernetesResource").items()
        if k.startswith("FsxVolume")
    )
    pv, pvc = _manifest_objects(vol)
    assert pv["spec"]["csi"]["volumeHandle"] == "fs-0123456789abcdef0"
    assert pv["spec"]["csi"]["volumeAttributes"] == {
        "dnsname": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
        "mountname": "abcdefgh",
    }
    assert pvc["metadata"]["namespace"] == "training"  # trainer.job.namespace's default


def test_fsx_csi_driver_authenticates_through_pod_identity_with_a_read_only_role(
    built: Any,
) -> None:
    addons = built("new").raw["eks-addons"]
    csi = _addons(addons)["aws-fsx-csi-driver"]
    (assoc,) = csi["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "fsx-csi-controller-sa"
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    role = addons["Resources"][role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "ManagedPolicyArns" not in role
    (policy,) = [
        p
        for p in _of_type(addons, "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    (stmt,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert stmt["Action"] == "fsx:DescribeFileSystems"
    vol = next(
        k
        for k in _of_type(addons, "Custom::AWSCDK-EKS-KubernetesResource")
        if k.startswith("FsxVolume")
    )
    assert (
        next(k for k, a in _of_type(addons, "AWS::EKS::Addon").items() if a is csi)
        in addons["Resources"][vol]["DependsOn"]
    )


def test_training_operator_after_cert_manager_with_its_pod_identity_role(built: Any) -> None:
    addons = built("new").raw["eks-addons"]
    by_name = _addons(addons)
    operator = by_name["amazon-sagemaker-hyperpod-training-operator"]
    cert = by_name["cert-manager"]
    assert operator["Properties"]["AddonVersion"] == "v1.1.0-eksbuild.1"
    assert cert["Properties"]["AddonVersion"] == "v1.18.2-eksbuild.2"
    cert_id = next(k for k, a in addons["Resources"].items() if a is cert)
    assert operator["DependsOn"] == [cert_id]
    (assoc,) = operator["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "hp-training-operator-controller-manager"
    role = addons["Resources"][assoc["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"
    }
    assert json.dumps(role["ManagedPolicyArns"]).endswith(
        ':iam::aws:policy/AmazonSageMakerHyperPodTrainingOperatorAccess"]]}]'
    )
    # cert-manager runs while deep health checks still taint the new nodes.
    config = json.loads(cert["Properties"]["ConfigurationValues"])
    taint = {
        "key": "sagemaker.amazonaws.com/node-health-status",
        "operator": "Equal",
        "value": "Unschedulable",
        "effect": "NoSchedule",
    }
    for part in (config, config["webhook"], config["cainjector"]):
        assert part["tolerations"] == [taint]


def test_pod_identity_agent_comes_with_a_new_cluster(built: Any) -> None:
    """The operator and the CSI driver authenticate through Pod Identity: a new cluster has the
    agent (EKS stack, deployed before the add-ons); an existing one must bring it (docs/eks.md)."""
    assert "eks-pod-identity-agent" in _addons(built("new").raw["eks"])


# --- order and gates ---------------------------------------------------------------------------


def test_stacks_deploy_in_order_with_eks_beside_storage(built: Any) -> None:
    manifest = built("new").manifest["artifacts"]

    def deps(stack: str) -> set[str]:
        return {
            d
            for d in manifest[f"hyperpod-dev-{stack}"].get("dependencies", [])
            if d.startswith("hyperpod-dev-") and not d.endswith(".assets")
        }

    assert deps("eks") == {"hyperpod-dev-network"}  # not storage: they deploy in parallel
    assert deps("storage") == {"hyperpod-dev-network"}
    assert {"hyperpod-dev-eks", "hyperpod-dev-storage"} <= deps("cluster")
    assert {"hyperpod-dev-cluster", "hyperpod-dev-eks", "hyperpod-dev-storage"} <= deps(
        "eks-addons"
    )


def test_plan_reports_replacing_the_cluster_and_not_moving_its_endpoint(built: Any) -> None:
    from hyperpod_kit.plan import plan

    def eks_cluster(candidate: str) -> Any:
        changes = plan(built("new").outdir, built(candidate).outdir).changes
        return next(c for c in changes if c.logical_id == "EksCluster")

    # Subnets, security groups and endpoint access are updated in place.
    moved = eks_cluster("public-existing-vpc")
    assert moved.action == "update" and not moved.dangerous
    # The name is create-only: a new name replaces the cluster, and plan refuses it.
    renamed = eks_cluster("renamed")
    assert renamed.action == "replace" and renamed.dangerous
    assert any("Name" in why for why in renamed.why)


@pytest.mark.parametrize("variant", ["new", "public-existing-vpc", "existing", "plugins-local"])
def test_templates_pass_cfn_lint_and_cdk_nag_with_reasons(built: Any, variant: str) -> None:
    app = built(variant)
    assert app.report.ok, [f.render() for f in app.report.errors]
    assert [f.render() for f in app.report.findings] == []
    for area in ("eks", "eks-addons"):
        template = app.raw[area]
        assert "Conditions" not in template  # decided in Python at synth
        assert set(template.get("Parameters", {})) <= {"BootstrapVersion"}  # CDK's own
        for resource in template["Resources"].values():
            for rule in (
                resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
            ):
                assert len(rule["reason"]) > 40, rule
