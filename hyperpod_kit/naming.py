"""Names that several parts must agree on: stacks, constructs and job templates alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperpod_kit.config.schema import EnvironmentConfig


def parameter_name(environment: str, area: str) -> str:
    """The SSM parameter where an environment publishes one area's handles."""
    return f"/hyperpod-kit/{environment}/{area}"


def eks_cluster_name(config: EnvironmentConfig) -> str:
    """The EKS cluster's name: the existing one, or ``<cluster name>-eks`` for a new one."""
    return config.cluster.eks.existing_cluster_name or f"{config.cluster_name}-eks"


SPACE_KINDS = {"JupyterLab": "jupyterlab", "CodeEditor": "code-editor"}
LIFECYCLE_KINDS = {"JupyterLab": "jl", "CodeEditor": "ce"}


def studio_domain_name(environment: str) -> str:
    return f"{environment}-studio"


def studio_space_name(user: str, app: str) -> str:
    """A user's private space for one Studio app."""
    return f"{user}-{SPACE_KINDS[app]}"


def studio_lifecycle_config_name(environment: str, app: str, digest: str) -> str:
    """A lifecycle configuration's name: every property is create-only, so new content gets a
    new name, ending with 8 hex digits of its hash."""
    return f"{environment}-{LIFECYCLE_KINDS[app]}-{digest}"
