"""Names that several parts must agree on: stacks, constructs and job templates alike."""

from __future__ import annotations


def parameter_name(environment: str, area: str) -> str:
    """The SSM parameter where an environment publishes one area's handles."""
    return f"/hyperpod-kit/{environment}/{area}"
