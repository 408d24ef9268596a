"""The environment file as JSON Schema, for editors (yaml-language-server) and other tools."""

from __future__ import annotations

from typing import Any

from hyperpod_kit.config.schema import EnvironmentConfig

SCHEMA_ID = "urn:hyperpod-kit:environment"

# The loader's directives (hyperpod_kit/config/extends.py, config/requires.py): read and removed
# before the schema sees the file, so they are not fields of EnvironmentConfig; editors still need
# to know them.
DIRECTIVES: dict[str, dict[str, Any]] = {
    "extends": {
        "type": "string",
        "minLength": 1,
        "description": "Path of a base environment file (relative to this file's folder) that "
        "this file is written on top of: mappings merge, lists of named items merge by name, "
        "other lists and values replace, null removes a key the base sets "
        "(docs/environments.md).",
    },
    "abstract": {
        "type": "boolean",
        "default": False,
        "description": "true: a base for other files, validated only through the files that "
        "extend it; `validate` and `synth` refuse it alone. Not inherited.",
    },
    "requires": {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {
            "hyperpod_kit": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "description": "The hyperpod-kit versions this file is written for, as a PEP 440 "
                "range (`>=0.1,<0.2`); a hyperpod-kit outside it refuses the file in one line "
                "before any other finding (docs/versions.md).",
                "examples": [">=0.1,<0.2"],
            },
        },
        "description": "What this file needs to be read as written. Checked in each file of a "
        "chain (`extends`) before anything else; not inherited.",
    },
}


def environment_schema() -> dict[str, Any]:
    schema = EnvironmentConfig.model_json_schema(mode="validation")
    schema["properties"] = {**DIRECTIVES, **schema["properties"]}
    # A file that extends a base may leave the required keys to it.
    required = schema.pop("required")
    schema["if"] = {"required": ["extends"]}
    schema["else"] = {"required": required}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
