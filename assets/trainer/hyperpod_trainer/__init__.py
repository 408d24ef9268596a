"""Distributed trainer bundled with hyperpod-kit: FSDP2, DCP checkpoints, elastic resume."""

__version__ = "0.1.0"
