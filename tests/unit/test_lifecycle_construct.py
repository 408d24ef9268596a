"""`LifecycleScripts` in a bare stack: the unpacked upload to a content-hashed prefix of a
protected ``sagemaker-`` bucket, the pointer for the user sync, the grants, and both gates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_kit.app import create_app
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.lifecycle import LifecycleScripts, lifecycle_bucket_name
from hyperpod_kit.gates import check_assembly
from tests.conftest import default_data, merge

pytestmark = pytest.mark.synth

USERS = [{"name": "alice", "uid": 10001, "gid": 1001, "admin": True}]


@dataclass
class Built:
    stack: cdk.Stack
    lifecycle: LifecycleScripts
    template: Template
    outdir: Path

    def scripts_upload(self) -> tuple[str, dict[str, Any]]:
        """The BucketDeployment of the scripts (the other one carries the users file)."""
        return self.one(
            "Custom::CDKBucketDeployment",
            {"Properties": {"DestinationBucketKeyPrefix": self.lifecycle.prefix}},
        )

    def one(self, kind: str, where: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.template.find_resources(kind, where or {})
        assert len(found) == 1, f"expected one {kind}, found {sorted(found)}"
        return next(iter(found.items()))


def build(outdir: Path, overrides: dict[str, Any] | None = None) -> Built:
    cfg = EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))
    app = create_app(outdir=str(outdir))
    stack = cdk.Stack(app, "Bare", env=cdk.Environment(account=cfg.account, region=cfg.region))
    lifecycle = LifecycleScripts(stack, "Lifecycle", config=cfg)
    role = iam.Role(stack, "ExecRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    lifecycle.grant_read(role)
    lifecycle.grant_user_sync(role)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()
    return Built(stack, lifecycle, Template.from_stack(stack), outdir)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("cdk.out"), {"users": USERS})


def test_upload_is_unpacked_under_the_content_hash_and_kept(slurm: Built) -> None:
    lifecycle = slurm.lifecycle
    _, upload = slurm.scripts_upload()
    props = upload["Properties"]
    assert props["DestinationBucketName"] == {"Ref": "LifecycleBucket"}
    assert props["DestinationBucketKeyPrefix"] == f"lifecycle/{lifecycle.content_hash}/"
    assert props["Extract"] is True and props["Prune"] is False and props["RetainOnDelete"] is True
    assert lifecycle.prefix == f"lifecycle/{lifecycle.content_hash}/"
    assert lifecycle.on_create == "on_create.sh"
    assert slurm.stack.resolve(lifecycle.source_s3_uri) == {
        "Fn::Join": ["", ["s3://", {"Ref": "LifecycleBucket"}, f"/{lifecycle.prefix}"]]
    }


def test_the_asset_is_the_rendered_upload_and_needs_no_docker(slurm: Built) -> None:
    manifest = json.loads((slurm.outdir / "Bare.assets.json").read_text())
    assert manifest.get("dockerImages", {}) == {}
    staged = [
        slurm.outdir / a["source"]["path"]
        for a in manifest["files"].values()
        if (slurm.outdir / a["source"]["path"] / "on_create.sh").exists()
    ]
    assert len(staged) == 1
    folder = staged[0]
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file()}  # fmt: skip
    assert files == dict(slurm.lifecycle.bundle.files)
    assert "users.json" not in files
    assert json.loads(slurm.lifecycle.bundle.users or b"")["users"][0]["name"] == "alice"


def test_bucket_is_named_for_the_managed_policy_and_protected(slurm: Built) -> None:
    logged = {"Properties": {"LoggingConfiguration": Match.any_value()}}
    logical, bucket = slurm.one("AWS::S3::Bucket", logged)
    assert (
        logical == "LifecycleBucket"
    )  # pinned: a named bucket must never be replaced by a refactor
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["BucketName"] == {
        "Fn::Join": ["", ["sagemaker-", {"Ref": "AWS::AccountId"}, "-us-west-2-hyperpod-dev"]]
    }
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }  # fmt: skip
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["LoggingConfiguration"]["DestinationBucketName"] == {
        "Ref": "LifecycleAccessLogsBucket"
    }
    policies = slurm.template.find_resources(
        "AWS::S3::BucketPolicy", {"Properties": {"Bucket": {"Ref": "LifecycleBucket"}}}
    )
    (policy,) = policies.values()
    tls = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
    ]  # fmt: skip
    assert tls and tls[0]["Effect"] == "Deny"


def test_bucket_name_with_a_known_account_and_its_limit() -> None:
    assert lifecycle_bucket_name("hyperpod-prod", "us-east-1", "111122223333") == (
        "sagemaker-111122223333-us-east-1-hyperpod-prod"
    )
    longest = lifecycle_bucket_name("a" * 24, "ap-southeast-5", "111122223333")
    assert longest.startswith("sagemaker-") and len(longest) <= 63
    with pytest.raises(ValueError, match="63"):
        lifecycle_bucket_name("a" * 24, "ap-southeastern-15", "111122223333")


def test_pointer_names_the_upload_after_it_is_complete(slurm: Built) -> None:
    lifecycle = slurm.lifecycle
    upload_id, _ = slurm.scripts_upload()
    _, pointer = slurm.one("AWS::SSM::Parameter")
    assert pointer["Properties"]["Name"] == "/hyperpod-kit/hyperpod-dev/lifecycle"
    uploads = slurm.template.find_resources("Custom::CDKBucketDeployment")
    assert set(uploads) <= set(pointer["DependsOn"]) and len(uploads) == 2
    assert upload_id in uploads
    value = pointer["Properties"]["Value"]
    text = "".join(p if isinstance(p, str) else "BUCKET" for p in value["Fn::Join"][1])
    assert json.loads(text) == {
        "hash": lifecycle.content_hash,
        "source_s3_uri": f"s3://BUCKET/{lifecycle.prefix}",
        "on_create": "on_create.sh",
        "users_uri": f"s3://BUCKET/{lifecycle.bundle.users_key}",
    }
    assert lifecycle.parameter_name == "/hyperpod-kit/hyperpod-dev/lifecycle"
    assert lifecycle.status_parameter_prefix == "/hyperpod-kit/hyperpod-dev/partitions"


def test_grants_read_the_uploads_and_write_only_partition_status(slurm: Built) -> None:
    role = {"Ref": Match.string_like_regexp("ExecRole")}
    _, policy = slurm.one("AWS::IAM::Policy", {"Properties": {"Roles": [role]}})
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    by_action = {json.dumps(s["Action"]): s for s in statements}
    read = by_action[json.dumps(["s3:GetBucket*", "s3:GetObject*", "s3:List*"])]
    assert {"Fn::Join": ["", [{"Fn::GetAtt": ["LifecycleBucket", "Arn"]}, "/lifecycle/*"]]} in read[
        "Resource"
    ]
    put = by_action[json.dumps("ssm:PutParameter")]
    assert put["Resource"]["Fn::Join"][1][-1] == ":parameter/hyperpod-kit/hyperpod-dev/partitions/*"
    assert not any("s3:Put" in json.dumps(s["Action"]) for s in statements)


def test_gates_pass_with_reasons(slurm: Built) -> None:
    report = check_assembly(slurm.outdir)
    assert report.findings == [], [f.render() for f in report.findings]
    (summary,) = report.stacks
    assert summary.nag_suppressions >= 5  # each with a written reason (cdk-nag requires one)


def test_eks_pointer_has_no_users_file(tmp_path: Path) -> None:
    eks = {"orchestrator": "eks", "users": USERS, "cluster": {"instance_groups": [
        {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
         "instance_count": 2}]}}  # fmt: skip
    built = build(tmp_path, eks)
    assert built.lifecycle.users_uri is None
    assert "users.json" not in built.lifecycle.bundle.files
