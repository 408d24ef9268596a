"""Where the project's own files are: assets the stacks upload and the trainer `validate` reads."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "assets"
TRAINER_DIR = ASSETS / "trainer"
LIFECYCLE_DIR = REPO / "lifecycle"
