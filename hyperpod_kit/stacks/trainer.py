"""The trainer stack: the bundled trainer image, built and pushed at deploy."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.trainer_image import TrainerImage


class TrainerStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.image = TrainerImage(self, "Trainer", environment=config.name)
