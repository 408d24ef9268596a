"""What no asset (image, Lambda code, lifecycle scripts) is built from: caches and build outputs.

An asset's hash covers every file of its folder, so a cache that a linter, a test run or an editor
leaves there would change the hash: `plan` would then report an image rebuild (or a new Lambda
version) that nobody made. Every asset construct passes `exclude=ASSET_EXCLUDES`, so the hash
depends only on the files the asset is built from.

The patterns are glob patterns in the syntax of both of CDK's ignore modes (GLOB for file assets,
DOCKER for image assets, where `.dockerignore` lines are added to them): `**/` makes each one
match at any depth.
"""

from __future__ import annotations

ASSET_EXCLUDES: tuple[str, ...] = (
    # Python bytecode, tool caches, packaging and test outputs
    "**/__pycache__",
    "**/*.py[cod]",
    "**/.ruff_cache",
    "**/.mypy_cache",
    "**/.dmypy.json",
    "**/.pytest_cache",
    "**/.hypothesis",
    "**/.tox",
    "**/.nox",
    "**/.coverage",
    "**/.coverage.*",
    "**/htmlcov",
    "**/.ipynb_checkpoints",
    "**/*.egg-info",
    "**/.eggs",
    "**/build",
    "**/dist",
    # environments and synth outputs
    "**/.venv",
    "**/venv",
    "**/cdk.out",
    # version control, editors and operating systems
    "**/.git",
    "**/.idea",
    "**/.vscode",
    "**/*.swp",
    "**/*.swo",
    "**/*~",
    "**/.#*",
    "**/#*#",
    "**/.DS_Store",
    "**/Thumbs.db",
)
