"""The environment file: schema, loader with line numbers, and semantic validators."""

from hyperpod_kit.config.findings import ConfigError, Finding, Level, has_errors, sort_findings
from hyperpod_kit.config.loader import LoadedEnvironment, load_environment
from hyperpod_kit.config.schema import EnvironmentConfig

__all__ = [
    "ConfigError",
    "EnvironmentConfig",
    "Finding",
    "Level",
    "LoadedEnvironment",
    "has_errors",
    "load_environment",
    "sort_findings",
]
