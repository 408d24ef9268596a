"""The environment file: schema, loader with line numbers, and semantic validators.

The package re-exports only what every layer shares and imports nothing back: the findings
(`ConfigError`, `Finding`, `Level`) and the schema (`EnvironmentConfig`). Loading is
`hyperpod_kit.config.environment.load_environment` (and its `LoadedEnvironment`): importing it
here would make every import of a `hyperpod_kit.config` module (the facts, the schema) import the
loader and the validators, which import modules that import those facts back, a circle
(tests/unit/test_house.py).
"""

from hyperpod_kit.config.findings import ConfigError, Finding, Level, has_errors, sort_findings
from hyperpod_kit.config.schema import EnvironmentConfig

__all__ = [
    "ConfigError",
    "EnvironmentConfig",
    "Finding",
    "Level",
    "has_errors",
    "sort_findings",
]
