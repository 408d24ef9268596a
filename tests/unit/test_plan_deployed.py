"""`plan --deployed` (hyperpod_kit/deployed.py): the baseline read from CloudFormation, nested
stacks through their physical ids, stacks missing, failed or in progress, and the live instance
counts a deploy would undo; with botocore's Stubber (requests and responses checked against the
pinned API models). The real command against a moto server: tests/integration/test_status_logs.py.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
from hyperpod_kit.deployed import (
    NothingDeployedError,
    require_deployed,
    scale_backs,
    write_deployed_assembly,
)
from hyperpod_kit.plan import Change, Plan, load_templates, plan

T0 = datetime.datetime(2026, 11, 25, 1, 0, tzinfo=datetime.UTC)
HASH = "ab" * 32  # the nested template's asset hash, as CDK names it in the TemplateURL
ARN = "arn:aws:cloudformation:us-west-2:111122223333:stack/{}/1"
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef012345"


class Stubs:
    """One Stubber per service on the facade's own clients; each call answered in order."""

    def __init__(self) -> None:
        session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x",
                                region_name="us-west-2")  # fmt: skip
        self.facade = AwsFacade("us-west-2", session=session)
        self.stubbers: dict[str, Stubber] = {}

    def stub(self, service: str) -> Stubber:
        if service not in self.stubbers:
            self.stubbers[service] = Stubber(self.facade.client(service))
            self.stubbers[service].activate()
        return self.stubbers[service]

    def stack(self, name: str, status: str = "UPDATE_COMPLETE") -> Stubs:
        row = {"StackName": name, "StackId": ARN.format(name), "StackStatus": status,
               "CreationTime": T0}  # fmt: skip
        self.stub("cloudformation").add_response(
            "describe_stacks", {"Stacks": [row]}, {"StackName": name}
        )
        return self

    def missing(self, name: str) -> Stubs:
        self.stub("cloudformation").add_client_error(
            "describe_stacks", "ValidationError", f"Stack with id {name} does not exist",
            expected_params={"StackName": name},
        )  # fmt: skip
        return self

    def template(self, stack_id: str, template: dict[str, Any]) -> Stubs:
        self.stub("cloudformation").add_response(
            "get_template",
            {"TemplateBody": json.dumps(template)},
            {"StackName": stack_id, "TemplateStage": "Original"},
        )
        return self

    def resources(self, stack_id: str, rows: dict[str, tuple[str, str]]) -> Stubs:
        summaries = [
            {"LogicalResourceId": logical, "PhysicalResourceId": physical, "ResourceType": kind,
             "LastUpdatedTimestamp": T0, "ResourceStatus": "UPDATE_COMPLETE"}
            for logical, (kind, physical) in rows.items()
        ]  # fmt: skip
        self.stub("cloudformation").add_response(
            "list_stack_resources", {"StackResourceSummaries": summaries}, {"StackName": stack_id}
        )
        return self

    def done(self) -> None:
        for stub in self.stubbers.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    s = Stubs()
    yield s
    s.done()


def _bucket(versioned: bool = False) -> dict[str, Any]:
    props = {"VersioningConfiguration": {"Status": "Enabled"}} if versioned else {}
    return {"Type": "AWS::S3::Bucket", "Properties": props}


def _parent() -> dict[str, Any]:
    url = {"Fn::Join": ["", ["https://s3.us-west-2.", {"Ref": "AWS::URLSuffix"},
                             f"/cdk-assets/{HASH}.json"]]}  # fmt: skip
    return {"Resources": {
        "Data": _bucket(),
        "UsersNestedStackUsersNestedStackResource1234": {
            "Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url},
        },
    }}  # fmt: skip


def _candidate(folder: Path, stacks: dict[str, dict[str, Any]], nested: dict[str, Any]) -> Path:
    """A cloud assembly as synth writes it: stacks by name, one nested template as an asset."""
    folder.mkdir()
    artifacts: dict[str, Any] = {}
    for name, template in stacks.items():
        (folder / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {"type": "aws:cloudformation:stack",
                           "properties": {"templateFile": f"{name}.template.json"}}  # fmt: skip
    (folder / f"{HASH}.nested.template.json").write_text(json.dumps(nested))
    assets = {"version": "1", "files": {HASH: {"source": {"path": f"{HASH}.nested.template.json"},
                                              "destinations": {}}}}  # fmt: skip
    (folder / "assets.json").write_text(json.dumps(assets))
    artifacts["assets"] = {"type": "cdk:asset-manifest", "properties": {"file": "assets.json"}}
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder


def _deploy_a(stubs: Stubs, nested: dict[str, Any]) -> None:
    nested_arn = ARN.format("env-a-Users-XYZ")
    stubs.template(ARN.format("env-a"), _parent())
    stubs.resources(ARN.format("env-a"), {
        "Data": ("AWS::S3::Bucket", "env-a-data-1"),
        "UsersNestedStackUsersNestedStackResource1234": ("AWS::CloudFormation::Stack", nested_arn),
    })  # fmt: skip
    stubs.template(nested_arn, nested)
    stubs.resources(nested_arn, {"Gate": ("AWS::S3::Bucket", "gate-1")})


def test_the_deployed_stacks_become_a_baseline_nested_stacks_included(
    tmp_path: Path, stubs: Stubs
) -> None:
    """env-a deployed (its nested stack's bucket not versioned yet), env-b not: env-b's resources
    are added, the nested change is found through the parent's physical id, nothing else."""
    candidate = _candidate(
        tmp_path / "cand",
        {"env-a": _parent(), "env-b": {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}},
        {"Resources": {"Gate": _bucket(versioned=True)}},
    )
    stubs.stack("env-a")
    _deploy_a(stubs, {"Resources": {"Gate": _bucket()}})
    stubs.missing("env-b")
    (tmp_path / "dep").mkdir()
    found = write_deployed_assembly(stubs.facade, candidate, tmp_path / "dep")
    assert found.statuses == {"env-a": "UPDATE_COMPLETE", "env-b": None}
    assert found.warnings == []
    result = plan(tmp_path / "dep", candidate)
    shown = sorted((c.stack, c.logical_id, c.action) for c in result.changes)
    assert shown == [("env-a/Users", "Gate", "update"), ("env-b", "Topic", "add")]
    assert result.exit_code() == 0


def test_nothing_deployed_is_one_error(stubs: Stubs) -> None:
    stubs.missing("env-a").missing("env-b")
    with pytest.raises(NothingDeployedError, match="none of the stacks env-a, env-b is deployed"):
        require_deployed(stubs.facade, ["env-a", "env-b"])


def test_another_validation_error_or_a_denial_is_not_taken_for_absence(stubs: Stubs) -> None:
    stubs.stub("cloudformation").add_client_error("describe_stacks", "AccessDenied", "no")
    with pytest.raises(AwsUnavailableError, match="DescribeStacks: AccessDenied"):
        require_deployed(stubs.facade, ["env-a"])
    stubs.stub("cloudformation").add_client_error("describe_stacks", "ValidationError", "bad")
    with pytest.raises(AwsUnavailableError, match="ValidationError: bad"):
        require_deployed(stubs.facade, ["env-a"])


def test_a_failed_creation_is_added_and_a_stack_in_progress_is_named(
    tmp_path: Path, stubs: Stubs
) -> None:
    """ROLLBACK_COMPLETE: nothing a deploy updates (the CDK CLI re-creates it), so every
    resource is an "add"; UPDATE_IN_PROGRESS: compared as it stands, with a warning."""
    nested = {"Resources": {"Gate": _bucket()}}
    candidate = _candidate(
        tmp_path / "cand",
        {"env-b": {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}, "env-a": _parent()},
        nested,
    )
    stubs.stack("env-b", "ROLLBACK_COMPLETE")
    stubs.stack("env-a", "UPDATE_IN_PROGRESS")
    _deploy_a(stubs, nested)
    (tmp_path / "dep").mkdir()
    found = write_deployed_assembly(stubs.facade, candidate, tmp_path / "dep")
    assert [w.split(":")[0] for w in found.warnings] == [
        "stack env-b is ROLLBACK_COMPLETE", "stack env-a is UPDATE_IN_PROGRESS",
    ]  # fmt: skip
    assert "shown as added" in found.warnings[0] and "a deploy now waits" in found.warnings[1]
    result = plan(tmp_path / "dep", candidate)
    assert [(c.stack, c.logical_id, c.action) for c in result.changes] == [
        ("env-b", "Topic", "add")
    ]


def _cluster(*groups: tuple[str, int]) -> dict[str, Any]:
    return {"Resources": {"HyperPodCluster": {"Type": "AWS::SageMaker::Cluster", "Properties": {
        "ClusterName": "hyperpod-dev",
        "InstanceGroups": [{"InstanceGroupName": n, "InstanceCount": c, "InstanceType":
                            "ml.m5.xlarge"} for n, c in groups],
    }}}}  # fmt: skip


def _live(stubs: Stubs, *groups: tuple[str, int, int]) -> None:
    stubs.stub("sagemaker").add_response(
        "describe_cluster",
        {"ClusterArn": CLUSTER_ARN, "ClusterStatus": "InService", "InstanceGroups": [
            {"InstanceGroupName": n, "TargetCount": t, "CurrentCount": c,
             "InstanceType": "ml.m5.xlarge"} for n, t, c in groups
        ]},
        {"ClusterName": CLUSTER_ARN},
    )  # fmt: skip


def _deployed_cluster(
    tmp_path: Path, stubs: Stubs, deployed: dict[str, Any], candidate: dict[str, Any]
) -> tuple[Plan, dict[str, dict[str, Any]], Any]:
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "c.template.json").write_text(json.dumps(candidate))
    artifact = {"type": "aws:cloudformation:stack", "properties": {
        "templateFile": "c.template.json", "stackName": "hyperpod-dev-cluster"}}  # fmt: skip
    (cand / "manifest.json").write_text(json.dumps({"artifacts": {"c": artifact}}))
    stubs.stack("hyperpod-dev-cluster")
    stubs.template(ARN.format("hyperpod-dev-cluster"), deployed)
    stubs.resources(ARN.format("hyperpod-dev-cluster"),
                    {"HyperPodCluster": ("AWS::SageMaker::Cluster", CLUSTER_ARN)})  # fmt: skip
    (tmp_path / "dep").mkdir()
    found = write_deployed_assembly(stubs.facade, cand, tmp_path / "dep")
    return plan(tmp_path / "dep", cand), load_templates(cand), found


def test_a_group_scaled_up_or_added_by_hand_is_a_dangerous_change(
    tmp_path: Path, stubs: Stubs
) -> None:
    """The template is unchanged, but compute runs 4 nodes (the file says 2) and a group was
    added by hand: the next deploy that updates the cluster undoes both."""
    template = _cluster(("controller", 1), ("compute", 2))
    result, candidate, found = _deployed_cluster(tmp_path, stubs, template, template)
    assert result.changes == []
    _live(stubs, ("controller", 1, 1), ("compute", 4, 3), ("extra", 2, 2))
    result.changes = scale_backs(stubs.facade, candidate, found, result.changes)
    (change,) = result.changes
    assert (change.stack, change.logical_id, change.action, change.label) == (
        "hyperpod-dev-cluster", "HyperPodCluster", "update", "NODES RECREATED",
    )  # fmt: skip
    assert change.dangerous and result.exit_code() == 1
    assert result.exit_code(allow_replacement=True) == 0
    assert change.why[0] == (
        "InstanceGroups[compute].InstanceCount scaled back (live TargetCount 4, CurrentCount 3 "
        "-> the file's 2) (this deploy leaves the cluster's template alone; the next one that "
        "changes it does). Hint: put the count in the file, or pass --allow-replacement if that "
        "is intended"
    )
    assert change.why[1].startswith(
        "InstanceGroups[extra].InstanceCount added by hand (live TargetCount 2, CurrentCount 2), "
        "not in the file: the deploy removes the group"
    )
    text = result.render_text()
    assert text.startswith("! hyperpod-dev-cluster HyperPodCluster (AWS::SageMaker::Cluster) "
                           "NODES RECREATED (stateful): InstanceGroups[compute]")  # fmt: skip
    effects = result.to_json()["changes"][0]["effects"]
    assert [(e["kind"], e["where"], e["source"]) for e in effects] == [
        ("nodes_recreated", "InstanceGroups[compute].InstanceCount", "sagemaker:DescribeCluster"),
        ("nodes_recreated", "InstanceGroups[extra].InstanceCount", "sagemaker:DescribeCluster"),
    ]
    markdown = result.render_markdown()
    assert "| ⚠️ | NODES RECREATED | hyperpod-dev-cluster | `HyperPodCluster` |" in markdown
    assert "put the count in the file" in markdown


def test_a_scale_back_joins_the_clusters_own_change(tmp_path: Path, stubs: Stubs) -> None:
    """The file grows login (an update); compute at the file's count or below is no scale back."""
    result, candidate, found = _deployed_cluster(
        tmp_path, stubs, _cluster(("login", 1), ("compute", 2)),
        _cluster(("login", 2), ("compute", 2)),
    )  # fmt: skip
    (before,) = result.changes
    _live(stubs, ("login", 3, 3), ("compute", 1, 1))
    changes: list[Change] = scale_backs(stubs.facade, candidate, found, result.changes)
    (after,) = changes
    assert after.why[: len(before.why)] == before.why
    (added,) = after.why[len(before.why) :]
    assert added.startswith(
        "InstanceGroups[login].InstanceCount scaled back (live TargetCount "
        "3, CurrentCount 3 -> the file's 2) (this deploy updates the cluster)"
    )
    assert after.dangerous


def _users_stack(people: list[dict[str, Any]]) -> dict[str, Any]:
    """A cluster stack's users upload as CDK writes it (the content's hash in the prefix)."""
    digest = hashlib.sha256(json.dumps(people).encode()).hexdigest()
    return {"Resources": {
        "LifecycleBucket": {"Type": "AWS::S3::Bucket"},
        "UsersUpload": {"Type": "Custom::CDKBucketDeployment", "Properties": {
            "DestinationBucketName": {"Ref": "LifecycleBucket"},
            "DestinationBucketKeyPrefix": f"users/{digest}/",
            "SourceObjectKeys": [f"{'cd' * 32}.zip"],
        }},
    }}  # fmt: skip


def test_people_are_read_back_from_the_deployed_users_file(tmp_path: Path, stubs: Stubs) -> None:
    """The users file is an asset in an assembly; deployed, it is an object in the lifecycle
    bucket: read back, so a person removed from the file is still a dangerous change."""
    people = [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002}]
    kept = people[:1]
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / f"{'ef' * 32}").mkdir()
    (cand / f"{'ef' * 32}" / "users.json").write_text(json.dumps({"users": kept}))
    files = {"ef" * 32: {"source": {"path": "ef" * 32}, "destinations": {}}}
    (cand / "assets.json").write_text(json.dumps({"version": "1", "files": files}))
    artifact = {"type": "aws:cloudformation:stack", "properties": {
        "templateFile": "c.template.json", "stackName": "hyperpod-dev-cluster"}}  # fmt: skip
    manifest = {"c": artifact, "a": {"type": "cdk:asset-manifest",
                                     "properties": {"file": "assets.json"}}}  # fmt: skip
    (cand / "manifest.json").write_text(json.dumps({"artifacts": manifest}))
    # the candidate's deployment names its own asset; ours, deployed, another content
    candidate_template = _users_stack(kept)
    candidate_template["Resources"]["UsersUpload"]["Properties"]["SourceObjectKeys"] = [
        f"{'ef' * 32}.zip"
    ]
    (cand / "c.template.json").write_text(json.dumps(candidate_template))
    deployed = _users_stack(people)
    prefix = deployed["Resources"]["UsersUpload"]["Properties"]["DestinationBucketKeyPrefix"]
    stubs.stack("hyperpod-dev-cluster")
    stubs.template(ARN.format("hyperpod-dev-cluster"), deployed)
    stubs.resources(ARN.format("hyperpod-dev-cluster"), {
        "LifecycleBucket": ("AWS::S3::Bucket", "sagemaker-lifecycle-1"),
        "UsersUpload": ("Custom::CDKBucketDeployment", "aws.cdk.s3deployment.1"),
    })  # fmt: skip
    body = json.dumps({"users": people}).encode()
    stubs.stub("s3").add_response(
        "get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))},
        {"Bucket": "sagemaker-lifecycle-1", "Key": f"{prefix}users.json"},
    )  # fmt: skip
    (tmp_path / "dep").mkdir()
    found = write_deployed_assembly(stubs.facade, cand, tmp_path / "dep")
    assert found.warnings == []
    result = plan(tmp_path / "dep", cand)
    assert [(p.name, p.action) for p in result.people] == [("bob", "removed")]
    assert result.exit_code() == 1


def test_an_unreadable_users_file_is_a_warning(tmp_path: Path, stubs: Stubs) -> None:
    cand = _candidate(tmp_path / "cand", {"hyperpod-dev-cluster": _users_stack([])}, {})
    stubs.stack("hyperpod-dev-cluster")
    stubs.template(ARN.format("hyperpod-dev-cluster"), _users_stack([]))
    stubs.resources(ARN.format("hyperpod-dev-cluster"),
                    {"LifecycleBucket": ("AWS::S3::Bucket", "b")})  # fmt: skip
    stubs.stub("s3").add_client_error("get_object", "AccessDenied", "no")
    (tmp_path / "dep").mkdir()
    (warning,) = write_deployed_assembly(stubs.facade, cand, tmp_path / "dep").warnings
    assert warning.startswith("the users file of hyperpod-dev-cluster (s3://b/users/")
    assert "(s3:GetObject: AccessDenied): its people are shown as added" in warning


def test_with_autoscaling_the_counts_are_karpenters_but_a_group_added_by_hand_is_not(
    tmp_path: Path, stubs: Stubs
) -> None:
    template = _cluster(("compute", 0))
    template["Resources"]["HyperPodCluster"]["Properties"]["AutoScaling"] = {
        "Mode": "Enable", "AutoScalerType": "Karpenter",
    }  # fmt: skip
    result, candidate, found = _deployed_cluster(tmp_path, stubs, template, template)
    _live(stubs, ("compute", 6, 6), ("extra", 1, 1))
    (change,) = scale_backs(stubs.facade, candidate, found, result.changes)
    assert [e.where for e in change.effects] == ["InstanceGroups[extra].InstanceCount"]
