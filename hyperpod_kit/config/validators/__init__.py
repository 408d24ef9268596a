"""Semantic validators: phase two, rules that a type alone cannot say.

Each validator is a function from the whole config to findings, registered under a stable name so
that a user can suppress its warnings (`validation.suppress` in the file, `--suppress` on the CLI)
and a test can call it by name. Errors cannot be suppressed: they mean AWS would reject the stack.

The registry lives in `registry.py`, which every area imports; this package imports the areas,
so importing it registers every check, and nothing imports the package back while it loads.
"""

from __future__ import annotations

from hyperpod_kit.config.validators import (
    accounting,
    api,
    cloudformation,
    cluster,
    general,
    governance,
    monitoring,
    network,
    node_setup,
    observability,
    platform,
    storage,
    studio,
    trainer,
)
from hyperpod_kit.config.validators.registry import (
    REGISTRY,
    Check,
    Validator,
    run_validators,
    validator,
)

__all__ = [
    "REGISTRY",
    "Check",
    "Validator",
    "accounting",
    "cloudformation",
    "api",
    "cluster",
    "general",
    "governance",
    "monitoring",
    "network",
    "node_setup",
    "observability",
    "platform",
    "run_validators",
    "storage",
    "studio",
    "trainer",
    "validator",
]
