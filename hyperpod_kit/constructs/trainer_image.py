"""`TrainerImage`: the bundled trainer (assets/trainer) as a container image in ECR.

A `DockerImageAsset`: synth only hashes the folder (no Docker engine needed, so CI can synth and
diff); `cdk deploy` builds the Dockerfile and pushes the image to the bootstrap ECR repository.
The URI is published in SSM for the job templates, and `grant_pull` lets the cluster's nodes pull.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_kit.constructs.assets import ASSET_EXCLUDES
from hyperpod_kit.naming import parameter_name
from hyperpod_kit.paths import TRAINER_DIR


class TrainerImage(Construct):
    """Handles: ``image_uri``, ``image_parameter_name``; ``grant_pull(grantee)``.

    ``directory`` is the build context (the bundled trainer unless given). Caches and build
    outputs in it (`ASSET_EXCLUDES`) change neither the asset hash nor the image.
    """

    def __init__(
        self, scope: Construct, id: str, *, environment: str, directory: Path = TRAINER_DIR
    ) -> None:
        super().__init__(scope, id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(directory),
            exclude=list(ASSET_EXCLUDES),
            platform=ecr_assets.Platform.LINUX_AMD64,  # HyperPod accelerated instances are x86_64
        )
        self.image_uri: str = self.asset.image_uri
        self.image_parameter_name = parameter_name(environment, "trainer-image")
        ssm.StringParameter(
            self,
            "ImageUri",
            parameter_name=self.image_parameter_name,
            description=f"hyperpod-kit {environment}: trainer image URI for the job templates",
            string_value=self.image_uri,
        )

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let `grantee` (the cluster execution role) pull the image."""
        return self.asset.repository.grant_pull(grantee)
