"""The trainer stack: the bundled trainer image, built and pushed at deploy."""

from __future__ import annotations

from typing import Any

from aws_cdk import App, DefaultStackSynthesizer, Environment, Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.trainer_image import TrainerImage
from hyperpod_kit.naming import ACCOUNT_PLACEHOLDER


class TrainerStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.image = TrainerImage(self, "Trainer", environment=config.name)


def trainer_image_uri(config: EnvironmentConfig) -> str:
    """The image the trainer stack of `config` pushes, known offline: the asset's hash is its tag,
    in the default synthesizer's container-assets repository of the account and region (the
    account as `ACCOUNT_PLACEHOLDER` when the environment file names none). The same construct
    as the stack's, in a throwaway app, so the hash is the one `cdk deploy` pushes for the files
    as they are now."""
    account = config.account or ACCOUNT_PLACEHOLDER
    app = App()
    stack = Stack(
        app, "TrainerImageProbe", env=Environment(account=config.account, region=config.region)
    )
    asset_hash = TrainerImage(stack, "Trainer", environment=config.name).asset.asset_hash
    qualifier = DefaultStackSynthesizer.DEFAULT_QUALIFIER
    repository = (
        DefaultStackSynthesizer.DEFAULT_IMAGE_ASSETS_REPOSITORY_NAME.replace(
            "${Qualifier}", qualifier
        )
        .replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", config.region)
    )
    suffix = "amazonaws.com.cn" if config.region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{config.region}.{suffix}/{repository}:{asset_hash}"
