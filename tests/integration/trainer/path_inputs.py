"""Good inputs of the trainer's commands, for the path matrix (test_path_matrix.py)."""

from __future__ import annotations

from pathlib import Path


def good_inputs(folder: Path) -> dict[tuple[str, ...], str]:
    return {}
