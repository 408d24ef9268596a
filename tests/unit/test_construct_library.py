"""The construct library (`hyperpod_kit.cdk`): settings validated as a file is, errors that name
the key, the gates on an app of one's own, and the constructs on a VPC and bucket of the app.

The whole example (examples/existing-app) is synthesized and gated from the installed wheel, once
(tests/integration/test_wheel.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_kit.cdk import (
    FEATURE_FLAGS,
    ClusterNetwork,
    EnvironmentConfig,
    ExistingResources,
    FileSystemHandles,
    GateError,
    HyperPodCluster,
    HyperPodEnvironment,
    InvalidEnvironmentError,
    LifecycleScripts,
    LustreFileSystem,
    add_nag,
    create_app,
    gate,
    in_vpc,
    validate_settings,
)
from hyperpod_kit.config.schema import LustreConfig, NetworkConfig
from tests.conftest import REPO, default_data, merge

pytestmark = pytest.mark.synth


def test_a_schema_error_in_settings_names_the_key_with_a_hint() -> None:
    data = merge(default_data(), {"name": "Bad_Name", "storage": {"lustr": {}}})
    with pytest.raises(InvalidEnvironmentError) as raised:
        validate_settings(data)
    text = str(raised.value)
    lines = text.splitlines()
    assert any(line.startswith("name: ") and "Hint: " in line for line in lines), text
    assert any(line.startswith("storage.lustr") for line in lines), text
    assert "(settings)" not in text and "pydantic" not in text
    assert {f.path for f in raised.value.findings} >= {"name"}


def test_typed_settings_go_through_the_semantic_validators() -> None:
    """An `EnvironmentConfig` that pydantic accepts, refused as the file would be (PERSISTENT_2
    capacity), at its key; the caller's object is not changed by a build."""
    data = merge(default_data(), {"storage": {"lustre": {"storage_capacity_gib": 2000}}})
    config = EnvironmentConfig.model_validate(data)
    with pytest.raises(InvalidEnvironmentError) as raised:
        validate_settings(config)
    first = str(raised.value).splitlines()[0]
    assert first.startswith("storage.lustre.storage_capacity_gib: "), first
    assert "Hint: " in first
    ok = EnvironmentConfig.model_validate(default_data())
    validated = validate_settings(ok)
    assert validated is not ok and validated.model_dump() == ok.model_dump()


def test_a_bad_file_is_reported_at_its_line(tmp_path: Path) -> None:
    file = tmp_path / "env.yaml"
    file.write_text("name: hyperpod-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\nx: 1\n")
    with pytest.raises(InvalidEnvironmentError) as raised:
        HyperPodEnvironment.from_file(create_app(outdir=str(tmp_path / "out")), file)
    assert str(raised.value).startswith(f"{file}:4 x: "), str(raised.value)


def test_an_environment_needs_an_app_or_a_stage() -> None:
    stack = cdk.Stack(create_app())
    with pytest.raises(TypeError, match="App or a Stage"):
        HyperPodEnvironment(stack, default_data())  # type: ignore[arg-type]


def test_the_gate_refuses_a_nag_error_in_the_users_own_stack(tmp_path: Path) -> None:
    app = create_app(outdir=str(tmp_path / "out"))
    stack = cdk.Stack(app, "mine", env=cdk.Environment(region="us-west-2"))
    s3.Bucket(stack, "Open")  # no TLS-only policy, no access logs
    add_nag(app)
    with pytest.raises(GateError) as raised:
        gate(app.synth(), quiet=True)
    rules = {f.rule for f in raised.value.report.errors}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules, rules
    assert "nothing goes to AWS" in str(raised.value)
    assert raised.value.exit_code == 1  # not at a key of settings: the app's own to fix


def _vpc_and_bucket(stack: cdk.Stack) -> tuple[ec2.Vpc, s3.Bucket]:
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2b"])
    return vpc, s3.Bucket(stack, "Data", enforce_ssl=True)


def test_the_constructs_take_the_apps_vpc_and_bucket() -> None:
    """A network (security groups only) in the app's VPC and the file system linked to the app's
    bucket, in the app's own stack."""
    stack = cdk.Stack(create_app(), "mine", env=cdk.Environment(region="us-west-2"))
    vpc, bucket = _vpc_and_bucket(stack)
    subnet = vpc.private_subnets[0]
    network = ClusterNetwork(
        stack,
        "Network",
        config=in_vpc(NetworkConfig(), vpc, subnet),
        availability_zone_id="usw2-az2",
    )
    lustre = LustreConfig.model_validate(
        {"data_repository_associations": [{"file_system_path": "/data", "s3_prefix": "data/"}]}
    )
    LustreFileSystem(stack, "Lustre", config=lustre, network=network, bucket=bucket)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 1)  # the app's, no second one
    resolve = stack.resolve
    (fs,) = template.find_resources("AWS::FSx::FileSystem").values()
    assert fs["Properties"]["SubnetIds"] == [resolve(subnet.subnet_id)]
    groups: dict[str, Any] = template.find_resources("AWS::EC2::SecurityGroup")
    assert all(g["Properties"]["VpcId"] == resolve(vpc.vpc_id) for g in groups.values())
    (dra,) = template.find_resources("AWS::FSx::DataRepositoryAssociation").values()
    assert str(resolve(bucket.bucket_name)) in str(dra["Properties"]["DataRepositoryPath"])


def test_a_whole_environment_on_the_apps_vpc_and_bucket_in_a_stage() -> None:
    """Typed settings into a `Stage`: the environment's stacks, none of them a VPC or a bucket
    of its own, the handles typed."""
    # An app whose own stacks keep other feature flags: the toolkit's set on the Stage.
    stage = cdk.Stage(cdk.App(), "dev", env=cdk.Environment(region="us-west-2"))
    for key, value in FEATURE_FLAGS.items():
        stage.node.set_context(key, value)
    settings = EnvironmentConfig.model_validate(
        merge(default_data(), {"trainer": {"build_image": False}})
    )
    # The app's resources come from a stack beside the environment's, in the same stage.
    vpc, bucket = _vpc_and_bucket(cdk.Stack(stage, "shared"))
    with pytest.raises(ValueError, match="both a VPC and its cluster subnet"):
        ExistingResources(vpc=vpc)
    eks = EnvironmentConfig.model_validate(
        {**default_data(), "orchestrator": "eks", "cluster": {"instance_groups": [
            {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
             "instance_count": 2}]}}
    )  # fmt: skip
    on_vpc = ExistingResources(vpc=vpc, subnet=vpc.private_subnets[0])
    with pytest.raises(ValueError, match="control_plane_subnets"):
        on_vpc.check(eks)
    env = HyperPodEnvironment(
        stage,
        settings,
        existing=ExistingResources(vpc=vpc, subnet=vpc.private_subnets[0], bucket=bucket),
    )
    names = [s.stack_name for s in env.stacks.all()]
    areas = ("network", "storage", "cluster", "monitoring")
    assert names == [f"hyperpod-dev-{a}" for a in areas]
    network = Template.from_stack(env.stacks.network)
    network.resource_count_is("AWS::EC2::VPC", 0)
    network.resource_count_is("AWS::EC2::Subnet", 0)
    Template.from_stack(env.stacks.storage).resource_count_is("AWS::S3::Bucket", 0)
    assert env.bucket is bucket and env.cluster is env.stacks.cluster.cluster
    assert env.studio_domain is None and env.config.name == "hyperpod-dev"
    assert env.at("storage.lustre.storage_capacity_gib") == "(settings)"  # no file, no line
    # The settings' warnings are CDK warnings, as `cdk synth` prints them (and on `findings`).
    assert any(f.check == "enroot-pyxis-source" for f in env.findings)
    warnings = [
        str(w.entry.data)
        for w in Annotations.from_stack(env.stacks.network).find_warning("*", Match.any_value())
    ]
    assert any(w.startswith("cluster.slurm.enroot_pyxis: ") and "Hint: " in w for w in warnings), (
        warnings
    )


def test_the_apps_security_group_and_file_system() -> None:
    """The nodes in the app's security group (with EFA's and Lustre's rules added to it, in the
    app's stack) and the app's FSx for Lustre mounted by the nodes and Studio: no group or file
    system of the environment's own in their place, the nodes let into the file system's group,
    Studio's group put on its interfaces, and both gates pass on the whole app."""
    app = create_app()
    shared = cdk.Stack(app, "shared", env=cdk.Environment(region="us-west-2"))
    # as the example's (examples/existing-app): what cdk-nag asks of the app's own VPC and bucket
    vpc = ec2.Vpc(
        shared, "Vpc", availability_zones=["us-west-2b"], flow_logs={"all": ec2.FlowLogOptions()}
    )
    logs = s3.Bucket(shared, "Logs", enforce_ssl=True)
    bucket = s3.Bucket(shared, "Data", enforce_ssl=True, server_access_logs_bucket=logs)
    subnet = vpc.private_subnets[0]
    nodes = ec2.SecurityGroup(shared, "Nodes", vpc=vpc, description="The team node group")
    fs = fsx.LustreFileSystem(
        shared, "Fsx", vpc=vpc, vpc_subnet=subnet, storage_capacity_gib=1200,
        lustre_configuration=fsx.LustreConfiguration(
            deployment_type=fsx.LustreDeploymentType.PERSISTENT_2,
            per_unit_storage_throughput=125,
        ),
    )  # fmt: skip
    with pytest.raises(ValueError, match="come with a VPC"):
        ExistingResources(file_system=fs)
    data = merge(default_data(), {
        "trainer": {"build_image": False},
        "storage": {"lustre": {"data_repository_associations": None}},
        "users": [{"name": "alice", "uid": 10001}],
        "studio": {"enabled": True, "partitions": "per_user"},
        "cluster": {"slurm": {"config_strategy": "Merge"}},
    })  # fmt: skip
    existing = ExistingResources(
        vpc=vpc, subnet=subnet, bucket=bucket, security_group=nodes, file_system=fs
    )
    listed = merge(data, {"storage": {"lustre": {"data_repository_associations": [
        {"file_system_path": "/data", "s3_prefix": "data/"}]}}})  # fmt: skip
    with pytest.raises(ValueError, match="data repository associations"):
        HyperPodEnvironment(create_app(), listed, existing=existing)
    env = HyperPodEnvironment(app, data, existing=existing)
    resolve = shared.resolve

    network = Template.from_stack(env.stacks.network)
    assert network.find_resources("AWS::EC2::SecurityGroup").keys() == {
        k for k in network.find_resources("AWS::EC2::SecurityGroup") if "StudioFsx" in k
    }  # Studio's group only: the nodes' is the app's
    # Rules from a group to itself are resources of their own in the group's stack (CDK).
    self_rules = Template.from_stack(shared).find_resources("AWS::EC2::SecurityGroupIngress")
    rules = {
        (r["Properties"]["IpProtocol"], r["Properties"].get("FromPort"),
         r["Properties"].get("ToPort"))
        for r in self_rules.values()
        if "Nodes" in str(r["Properties"]["GroupId"])
        and "Nodes" in str(r["Properties"]["SourceSecurityGroupId"])
    }  # fmt: skip
    assert rules == {("-1", None, None), ("tcp", 988, 988), ("tcp", 1018, 1023)}, rules

    storage = Template.from_stack(env.stacks.storage)
    storage.resource_count_is("AWS::FSx::FileSystem", 0)
    storage.resource_count_is("AWS::FSx::DataRepositoryAssociation", 0)
    into = storage.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert {(r["Properties"]["FromPort"], r["Properties"]["ToPort"]) for r in into} == {
        (988, 988),
        (1018, 1023),
    }
    assert all("Nodes" in str(r["Properties"]["SourceSecurityGroupId"]) for r in into)
    assert env.file_system.file_system_id == fs.file_system_id
    cluster = Template.from_stack(env.stacks.cluster)
    (hyperpod,) = cluster.find_resources("AWS::SageMaker::Cluster").values()
    assert "Nodes" in str(hyperpod["Properties"]["VpcConfig"]["SecurityGroupIds"])
    assert env.stacks.studio is not None
    studio = Template.from_stack(env.stacks.studio).to_json()
    assert "FileSystemAccess" in str(studio["Resources"].keys())
    assert str(resolve(fs.file_system_id)) != ""

    gate(app.synth(), quiet=True)  # raises GateError on any cdk-nag or cfn-lint error


def test_an_imported_security_group_gets_efas_rules_in_the_stack_using_it() -> None:
    """A group imported by id (made elsewhere) as the nodes' group: the rules EFA and Lustre need
    are resources of the stack that uses it, egress to itself included when the group does not
    allow all outbound traffic."""
    stack = cdk.Stack(create_app(), "mine", env=cdk.Environment(region="us-west-2"))
    vpc, _ = _vpc_and_bucket(stack)
    group = ec2.SecurityGroup.from_security_group_id(
        stack, "Imported", "sg-0123456789abcdef0", allow_all_outbound=False
    )
    network = ClusterNetwork(
        stack, "Network", config=in_vpc(NetworkConfig(), vpc, vpc.private_subnets[0]),
        availability_zone_id="usw2-az2", security_group=group,
    )  # fmt: skip
    assert network.cluster_security_group_id == "sg-0123456789abcdef0"
    template = Template.from_stack(stack)
    ingress = [
        r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == "sg-0123456789abcdef0"
    ]  # fmt: skip
    assert {(r["IpProtocol"], r.get("FromPort")) for r in ingress} == {
        ("-1", None), ("tcp", 988), ("tcp", 1018)
    }  # fmt: skip
    assert all(r["SourceSecurityGroupId"] == "sg-0123456789abcdef0" for r in ingress)
    (egress,) = template.find_resources("AWS::EC2::SecurityGroupEgress").values()
    assert egress["Properties"]["DestinationSecurityGroupId"] == "sg-0123456789abcdef0"


def test_cdk_deploy_of_an_app_with_a_gate_error_stops_before_aws(tmp_path: Path) -> None:
    """The CDK CLI (the pinned one, `npx cdk deploy` from a clean shell) runs an app that calls
    `gate` as the example does: a gate error ends the app with the gate's exit code, so the CLI
    stops at synth, before it asks AWS for anything (no credentials are reached for)."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(
        "import sys\n"
        "import aws_cdk as cdk\n"
        "from aws_cdk import aws_s3 as s3\n"
        "from hyperpod_kit.cdk import GateError, add_nag, create_app, gate\n"
        "app = create_app()\n"
        "s3.Bucket(cdk.Stack(app, 'mine', env=cdk.Environment(region='us-west-2')), 'Open')\n"
        "add_nag(app)\n"
        "try:\n"
        "    gate(app.synth())\n"
        "except GateError as e:\n"
        "    sys.exit(e.exit_code)\n"
    )
    (app / "cdk.json").write_text(json.dumps({"app": f"{sys.executable} app.py"}))
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    done = subprocess.run(
        ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
         str(REPO / "node_modules" / ".bin" / "cdk"), "deploy", "--require-approval", "never"],
        cwd=app, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "AwsSolutions-S1" in out and "nothing goes to AWS" in out, out[-3000:]
    assert "credentials" not in out.lower() and "deploying" not in out.lower(), out[-3000:]
    assert "app.py: Subprocess exited with error 1" in out, out[-3000:]  # the CLI stopped at synth


def test_the_cluster_with_its_lifecycle_scripts_in_the_apps_own_stack(tmp_path: Path) -> None:
    """`HyperPodCluster` given `LifecycleScripts` wires what the scripts do on the nodes (no node
    before the scripts' pointer, the user sync's grants) wherever it is built; network, file
    system and cluster in one stack of the app's pass both gates."""
    app = create_app(outdir=str(tmp_path / "out"))
    stack = cdk.Stack(app, "mine", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(
        stack, "Vpc", availability_zones=["us-west-2b"], flow_logs={"all": ec2.FlowLogOptions()}
    )
    logs = s3.Bucket(stack, "Logs", enforce_ssl=True)
    bucket = s3.Bucket(stack, "Data", enforce_ssl=True, server_access_logs_bucket=logs)
    config = validate_settings(merge(default_data(), {"trainer": {"build_image": False}}))
    network = ClusterNetwork(
        stack, "Network", config=in_vpc(config.network, vpc, vpc.private_subnets[0]),
        availability_zone_id=config.availability_zone_id,
    )  # fmt: skip
    fs = LustreFileSystem(
        stack, "Lustre", config=config.storage.lustre, network=network, bucket=bucket
    )
    lifecycle = LifecycleScripts(stack, "Lifecycle", config=config)
    cluster = HyperPodCluster(
        stack, "HyperPod", config=config, subnet_id=network.private_subnet_id,
        security_group_ids=[network.cluster_security_group_id],
        file_system=FileSystemHandles(dns_name=fs.dns_name, mount_name=fs.mount_name),
        lifecycle=lifecycle, data_bucket=bucket,
    )  # fmt: skip
    template = Template.from_stack(stack)
    (resource,) = template.find_resources("AWS::SageMaker::Cluster").values()
    pointer = stack.get_logical_id(lifecycle.pointer.node.default_child)  # type: ignore[arg-type]
    assert pointer in resource["DependsOn"]
    policy = json.dumps(template.find_resources("AWS::IAM::Policy"))
    assert "ssm:PutParameter" in policy  # the user sync's partition reports
    assert cluster.execution_role is not None
    gate(app.synth(), quiet=True)


def test_an_app_without_the_feature_flags_is_refused_before_anything_is_built() -> None:
    """Without the toolkit's feature flags some constructs cannot be built, and CDK would blame a
    setting that is not at fault: refused first, naming the flags and both ways out."""
    plain = cdk.App()
    with pytest.raises(ValueError, match=r"does not set \d+ of the CDK feature flags") as raised:
        HyperPodEnvironment(plain, default_data())
    assert "create_app()" in str(raised.value) and "set_context" in str(raised.value)
    assert plain.node.children == []  # nothing built
