"""The construct library (`hyperpod_kit.cdk`): settings validated as a file is, errors that name
the key, the gates on an app of one's own, and the constructs on a VPC and bucket of the app.

The whole example (examples/existing-app) is synthesized and gated from the installed wheel, once
(tests/integration/test_wheel.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from hyperpod_kit.cdk import (
    ClusterNetwork,
    EnvironmentConfig,
    ExistingResources,
    GateError,
    HyperPodEnvironment,
    InvalidEnvironmentError,
    LustreFileSystem,
    add_nag,
    create_app,
    gate,
    in_vpc,
    validate_settings,
)
from hyperpod_kit.config.schema import LustreConfig, NetworkConfig
from tests.conftest import default_data, merge

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
    stage = cdk.Stage(create_app(), "dev", env=cdk.Environment(region="us-west-2"))
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
