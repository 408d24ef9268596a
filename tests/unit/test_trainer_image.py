"""`TrainerImage`: the trainer Dockerfile as an image asset, its URI in SSM, pull access."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from hyperpod_kit.constructs.trainer_image import TRAINER_DIR, TrainerImage
from tests.conftest import SynthFn

pytestmark = pytest.mark.synth


def test_image_asset_is_the_trainer_dockerfile_for_x86(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Bare", env=cdk.Environment(region="us-west-2"))
    image = TrainerImage(stack, "Trainer", environment="dev")
    role = iam.Role(
        stack, "ClusterRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
    )
    image.grant_pull(role)
    template = Template.from_stack(stack)
    assembly = app.synth()

    template.has_resource_properties(
        "AWS::SSM::Parameter",
        {"Name": "/hyperpod-kit/dev/trainer-image", "Value": {"Fn::Sub": Match.string_like_regexp(
            r"dkr\.ecr\.us-west-2\..*container-assets.*:[0-9a-f]{64}$")}},
    )  # fmt: skip
    policy = json.dumps(template.find_resources("AWS::IAM::Policy"))
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:GetAuthorizationToken"):
        assert action in policy

    manifest = json.loads((tmp_path / "Bare.assets.json").read_text())
    (docker,) = manifest["dockerImages"].values()
    assert docker["source"]["platform"] == "linux/amd64"
    staged = tmp_path / docker["source"]["directory"]
    assert (staged / "Dockerfile").read_text() == (TRAINER_DIR / "Dockerfile").read_text()
    assert not list(staged.rglob("*.egg-info")) and not list(staged.rglob("__pycache__"))
    assert assembly.get_stack_by_name("Bare").template


def test_trainer_stack_follows_build_image(synth: SynthFn) -> None:
    assert "trainer" in synth().templates
    assert "trainer" not in synth({"trainer": {"build_image": False}}).templates


def test_the_uri_jobs_render_offline_is_the_one_the_stack_publishes(synth: SynthFn) -> None:
    """`hyperpod-kit jobs` renders the trainer stack's image without synthesizing or asking AWS:
    the same asset hash, repository and account as the deployed stack's (here with an account;
    without one the node fills it in). The execution role may pull it and log in to ECR, which
    is all the job's import needs (no SSM)."""
    from hyperpod_kit.stacks.trainer import trainer_image_uri

    built = synth({"account": "111122223333"})
    template = built.templates["trainer"]
    (parameter,) = template.find_resources("AWS::SSM::Parameter").values()
    published = parameter["Properties"]["Value"]["Fn::Sub"].replace(
        "${AWS::URLSuffix}", "amazonaws.com"
    )
    assert trainer_image_uri(built.config) == published
    unknown = trainer_image_uri(built.config.model_copy(update={"account": None}))
    assert unknown == published.replace("111122223333", "@ACCOUNT@")
    cluster = json.dumps(built.templates["cluster"].find_resources("AWS::IAM::Policy"))
    for action in ("ecr:BatchGetImage", "ecr:GetAuthorizationToken", "ecr:GetDownloadUrlForLayer"):
        assert action in cluster
    assert "ssm:GetParameter" not in cluster or "trainer-image" not in cluster
