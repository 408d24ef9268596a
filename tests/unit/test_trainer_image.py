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
