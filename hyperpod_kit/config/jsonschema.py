"""The environment file as JSON Schema, for editors (yaml-language-server) and other tools."""

from __future__ import annotations

from typing import Any

from hyperpod_kit.config.schema import EnvironmentConfig

SCHEMA_ID = "urn:hyperpod-kit:environment"


def environment_schema() -> dict[str, Any]:
    schema = EnvironmentConfig.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
