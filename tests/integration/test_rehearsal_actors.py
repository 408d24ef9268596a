"""The rehearsal's actors on synthesized examples: each actor runs at its moment, as its role,
and its AWS calls are recorded as botocore operations (hyperpod_kit/rehearsal/actors.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.rehearsal.actors import Recording, record_calls
from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.model import Call, ResourceRef
from tests.conftest import REPO, ExampleSynthFn, SynthFn

pytestmark = [
    pytest.mark.synth,
    pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash"),
]


@dataclass
class Played:
    config: EnvironmentConfig
    folder: Path
    assembly: Assembly
    recording: Recording

    @property
    def cluster(self) -> ResourceRef:
        ((ref, _),) = self.assembly.find("AWS::SageMaker::Cluster")
        return ref

    def role_of(self, group: str) -> ResourceRef:
        res = self.assembly.resource(self.cluster)
        (g,) = [g for g in res["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == group]
        ref = self.assembly.referenced(self.cluster.stack, g["ExecutionRole"])
        assert ref is not None
        return ref

    def calls(self, actor: str, service: str, operation: str) -> list[Call]:
        return [
            c
            for c in self.recording
            if c.actor.startswith(actor) and (c.service, c.operation) == (service, operation)
        ]

    def parameter(self, name: str) -> str:
        return f"/hyperpod-kit/{self.config.name}/{name}"


def _synthesize(
    example_synth: ExampleSynthFn, example: str, folder: Path
) -> tuple[EnvironmentConfig, Path]:
    """A copy of the example's assembly as `hyperpod-kit synth` wrote it once for the whole run
    (tests/conftest.py's `example_synth`): the actors run the Lambda handlers from their asset
    folders, and Python writes bytecode there."""
    config = load_environment(REPO / "environments" / f"{example}.yaml").config
    return config, example_synth(REPO / "environments" / f"{example}.yaml").copy_to(
        folder / "cdk.out"
    )


def _play(config: EnvironmentConfig, folder: Path, work: Path) -> Played:
    assembly = Assembly.load(folder)
    return Played(config, folder, assembly, record_calls(assembly, config, workdir=work))


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory, example_synth: ExampleSynthFn) -> Played:
    config, out = _synthesize(example_synth, "default", tmp_path_factory.mktemp("default"))
    return _play(config, out, tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def studio_slurm(tmp_path_factory: pytest.TempPathFactory, example_synth: ExampleSynthFn) -> Played:
    config, out = _synthesize(
        example_synth, "studio-slurm", tmp_path_factory.mktemp("studio-slurm")
    )
    return _play(config, out, tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def eks(tmp_path_factory: pytest.TempPathFactory, example_synth: ExampleSynthFn) -> Played:
    config, out = _synthesize(example_synth, "eks", tmp_path_factory.mktemp("eks"))
    return _play(config, out, tmp_path_factory.mktemp("work"))


# --- the default example (Slurm) -------------------------------------------------------------


def test_default_every_actor_finishes(default: Played) -> None:
    assert default.recording.failures == []
    skipped = " ".join(s.name for s in default.recording.skipped)
    assert "CustomCDKBucketDeployment" in skipped  # CDK's own function: not played, but listed


def test_controller_first_provisioning_downloads_the_upload_and_reads_the_pointer(
    default: Played,
) -> None:
    role = default.role_of("controller")
    actor = "lifecycle controller (first provisioning)"
    cluster = default.assembly.resource(default.cluster)["Properties"]
    uri = default.assembly.resolve(
        default.cluster.stack, cluster["InstanceGroups"][0]["LifeCycleConfig"]["SourceS3Uri"]
    )
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    (listing,) = default.calls(actor, "s3", "ListObjectsV2")
    assert listing.params == {"Bucket": bucket, "Prefix": prefix}
    (pointer,) = default.calls(actor, "ssm", "GetParameter")
    assert pointer.params["Name"] == default.parameter("lifecycle")
    assert pointer.error is None  # the cluster depends on the pointer: it exists by then
    assert pointer.role == role and pointer.moment.resource == default.cluster
    assert pointer.source.startswith("aws --region ")
    # The users file the pointer names, from the users upload the deploy made.
    users_uri = json.loads(default.assembly.parameters(pointer.moment)[pointer.params["Name"]])[
        "users_uri"
    ]
    (users,) = [c for c in default.calls(actor, "s3", "GetObject") if "users" in c.params["Key"]]
    assert f"s3://{users.params['Bucket']}/{users.params['Key']}" == users_uri
    assert users.error is None


def test_replaced_nodes_and_timers_run_after_the_deploy(default: Played) -> None:
    for group in ("controller", "login", "compute"):
        (read,) = default.calls(f"lifecycle {group} (replaced node)", "ssm", "GetParameter")
        assert read.moment.resource is None and read.role == default.role_of(group)
    sync = default.calls("timer hyperpod-kit-user-sync on compute", "ssm", "GetParameter")
    assert [c.params["Name"] for c in sync] == [default.parameter("lifecycle")]
    puts = default.calls("timer hyperpod-kit-ship-logs on compute", "logs", "PutLogEvents")
    cluster_id = default.assembly.attribute(
        default.cluster.stack, default.cluster.logical_id, "ClusterArn"
    ).rsplit("/", 1)[-1]
    assert {c.params["logGroupName"] for c in puts} == {
        f"/aws/sagemaker/Clusters/{default.config.cluster_name}/{cluster_id}"
    }
    assert default.calls("timer hyperpod-kit-ship-logs on compute", "logs", "CreateLogStream")
    # The health runner acts through scontrol: it ran and called no AWS API.
    assert not [c for c in default.recording if c.actor.startswith("timer hyperpod-kit-health")]


def test_job_reads_its_image_as_the_compute_role(default: Played) -> None:
    calls = [c for c in default.recording if c.actor.startswith("job ")]
    assert calls, "the job made no AWS call"
    image = [c for c in calls if (c.service, c.operation) == ("ssm", "GetParameter")]
    if image:  # a job rendered without its image at hand reads it from SSM at run time
        assert image[0].params["Name"] == default.parameter("trainer-image")
    assert {c.role for c in calls} == {default.role_of("compute")}
    assert {c.moment.resource for c in calls} == {None}


def _literal(node: Any, logical: str, value: str) -> Any:
    """`node` with every ``{"Ref": logical}`` replaced by `value`."""
    if node == {"Ref": logical}:
        return value
    if isinstance(node, dict):
        return {k: _literal(v, logical, value) for k, v in node.items()}
    if isinstance(node, list):
        return [_literal(v, logical, value) for v in node]
    return node


def test_a_parameter_that_does_not_exist_yet_is_recorded_as_such(
    default: Played, tmp_path: Path
) -> None:
    """The lifecycle pointer created after the cluster (no DependsOn, no Ref on the way; the
    uploads still before it): the nodes' first read of it fails with ParameterNotFound, and a
    replaced node later finds it."""
    assembly = Assembly.load(default.folder)
    stack = assembly.stacks[default.cluster.stack]
    pointer = next(k for k in stack.resources if k.startswith("LifecyclePointer"))
    name = assembly.physical_id(stack.id, pointer)
    for logical, res in list(stack.resources.items()):
        if logical != pointer:
            stack.resources[logical] = _literal(res, pointer, name)
    cluster = stack.resources[default.cluster.logical_id]
    uploads = [k for k, r in stack.resources.items() if r["Type"] == "Custom::CDKBucketDeployment"]
    cluster["DependsOn"] = [d for d in cluster["DependsOn"] if d != pointer] + uploads
    stack.resources[pointer]["DependsOn"] = [default.cluster.logical_id]
    recording = record_calls(assembly, default.config, workdir=tmp_path)
    played = Played(default.config, default.folder, assembly, recording)
    reads = played.calls("lifecycle controller (first provisioning)", "ssm", "GetParameter")
    assert reads, "the first provisioning did not read the pointer"
    assert {c.params["Name"] for c in reads} == {default.parameter("lifecycle")}
    assert {c.error for c in reads} == {"ParameterNotFound"}  # every retry
    (later,) = played.calls("lifecycle controller (replaced node)", "ssm", "GetParameter")
    assert later.error is None  # after the deploy it exists


# --- Studio on Slurm -------------------------------------------------------------------------


def studio_users(played: Played) -> list[str]:
    """The people with a Studio profile, as the assembly has them."""
    return [
        str(played.assembly.resolve(ref.stack, res["Properties"]["UserProfileName"]))
        for ref, res in played.assembly.find("AWS::SageMaker::UserProfile")
    ]


def test_studio_slurm_every_actor_finishes(studio_slurm: Played) -> None:
    assert studio_slurm.recording.failures == []


def test_jwt_issuer_puts_each_users_token_on_first_provisioning(studio_slurm: Played) -> None:
    actor = "lifecycle controller (first provisioning)"
    puts = studio_slurm.calls(actor, "ssm", "PutParameter")
    tokens = {c.params["Name"]: c for c in puts if "/slurm-jwt/" in c.params["Name"]}
    users = studio_users(studio_slurm)
    assert users and set(tokens) == {studio_slurm.parameter(f"slurm-jwt/{u}") for u in users}
    for call in tokens.values():
        assert call.params["Type"] == "SecureString"
        assert call.moment.resource == studio_slurm.cluster
        assert call.role == studio_slurm.role_of("controller")
    client = [c for c in puts if c.params["Name"] == studio_slurm.parameter("slurm-client")]
    assert len(client) == 1
    bundle = json.loads(client[0].params["Value"])["bundle"]
    (upload,) = studio_slurm.calls(actor, "s3", "PutObject")
    assert f"s3://{upload.params['Bucket']}/{upload.params['Key']}" == bundle
    # Nobody else issues tokens: the login and compute nodes do not.
    for group in ("login", "compute"):
        assert not studio_slurm.calls(f"lifecycle {group} (first", "ssm", "PutParameter") or all(
            "/partitions/" in c.params["Name"]
            for c in studio_slurm.calls(f"lifecycle {group} (first", "ssm", "PutParameter")
        )


def test_studio_lifecycle_reads_the_client_and_the_users_own_token(studio_slurm: Played) -> None:
    ((domain, domain_res),) = studio_slurm.assembly.find("AWS::SageMaker::Domain")
    role = studio_slurm.assembly.referenced(
        domain.stack, domain_res["Properties"]["DefaultUserSettings"]["ExecutionRole"]
    )
    for user in studio_users(studio_slurm):
        for app in studio_slurm.config.studio.apps:
            actor = f"studio {app} lifecycle of {user}"
            reads = studio_slurm.calls(actor, "ssm", "GetParameter")
            assert [c.params["Name"] for c in reads] == [
                studio_slurm.parameter("studio-package"),  # the toolkit's package, first
                studio_slurm.parameter("slurm-client"),
                studio_slurm.parameter(f"slurm-jwt/{user}"),
            ]
            assert all(c.error is None and c.role == role for c in reads)
            assert reads[0].source == "boto3 ssm.get_parameter"
            assert studio_slurm.calls(actor, "s3", "GetObject")


def test_partitions_handler_runs_while_its_custom_resource_is_created(
    studio_slurm: Played,
) -> None:
    calls = [c for c in studio_slurm.recording if c.actor.startswith("Lambda studio_partitions")]
    gates = {ref for ref, _ in studio_slurm.assembly.find("Custom::StudioPartitions")}
    assert gates and {c.moment.resource for c in calls} == gates
    reads = [c for c in calls if c.operation == "GetParameters"]
    names = {n for c in reads for n in c.params["Names"]}
    assert names == {studio_slurm.parameter(f"partitions/{u}") for u in studio_users(studio_slurm)}
    for call in calls:
        function = next(
            r
            for r, res in studio_slurm.assembly.find("AWS::Lambda::Function")
            if res["Properties"].get("Handler") == "handler.is_complete"
        )
        role = studio_slurm.assembly.referenced(
            function.stack, studio_slurm.assembly.resource(function)["Properties"]["Role"]
        )
        assert call.role == role


# --- EKS -------------------------------------------------------------------------------------


def test_eks_workers_and_their_timers(eks: Played) -> None:
    assert eks.recording.failures == []
    role = eks.role_of("workers")
    (listing,) = eks.calls("lifecycle workers (first provisioning)", "s3", "ListObjectsV2")
    assert listing.role == role and listing.moment.resource == eks.cluster
    assert eks.calls("timer hyperpod-kit-ship-logs on workers", "logs", "PutLogEvents")
    assert any(s.name == "the rendered job" for s in eks.recording.skipped)
    assert not [c for c in eks.recording if c.actor.startswith("job ")]


# --- the remediation function (node_recovery: None with auto_repair) ---------------------------


@pytest.fixture(scope="module")
def remediation(synth: SynthFn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    app = synth(
        {
            "cluster": {"node_recovery": "None"},
            "monitoring": {"auto_repair": True},
            "trainer": {"job": {"auto_resume": False}},
        }
    )
    yield _play(app.config, app.outdir, tmp_path_factory.mktemp("work"))


def test_remediation_handler_replaces_a_node_after_the_deploy(remediation: Played) -> None:
    calls = [c for c in remediation.recording if c.actor == "Lambda remediation"]
    by_operation: dict[str, Any] = {f"{c.service}:{c.operation}": c for c in calls}
    assert {"dynamodb:PutItem", "sagemaker:BatchReplaceClusterNodes", "sns:Publish"} <= set(
        by_operation
    )
    replace = by_operation["sagemaker:BatchReplaceClusterNodes"]
    arn = remediation.assembly.attribute(
        remediation.cluster.stack, remediation.cluster.logical_id, "ClusterArn"
    )
    assert replace.params["ClusterName"] == arn and replace.moment.resource is None
    (function, res) = next(
        (r, x)
        for r, x in remediation.assembly.find("AWS::Lambda::Function")
        if x["Properties"].get("Handler") == "remediation_handler.handler"
    )
    role = remediation.assembly.referenced(function.stack, res["Properties"]["Role"])
    assert {c.role for c in calls} == {role}
    if list(remediation.assembly.find("AWS::Lambda::EventSourceMapping")):
        assert "sqs:ReceiveMessage" in by_operation  # Lambda polls the queue as the function
    assert remediation.recording.failures == []
