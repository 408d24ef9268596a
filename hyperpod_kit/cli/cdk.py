"""`diff`, `deploy`, `destroy`: the pinned CDK CLI from node_modules, after validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hyperpod_kit.config import LoadedEnvironment

REPO = Path(__file__).resolve().parents[2]


def cdk_binary() -> Path | None:
    local = REPO / "node_modules" / ".bin" / "cdk"
    return local if local.exists() else None


def run_cdk(command: str, loaded: LoadedEnvironment, extra: list[str]) -> int:
    cdk = cdk_binary()
    if cdk is None:
        print(
            "the CDK CLI is not installed. Hint: run `make setup` (npm ci installs the pinned "
            "aws-cdk into node_modules).",
            file=sys.stderr,
        )
        return 2
    args = [str(cdk), command, "--all", "-c", f"environment={Path(loaded.file).resolve()}"]
    if command == "deploy":
        # Stacks deploy in dependency order, independent ones side by side.
        args += ["--concurrency", "4", "--require-approval", "broadening"]
    # This interpreter, not whatever python3 is first on PATH: it is the one with hyperpod_kit.
    args += ["--app", f"{sys.executable} {REPO / 'app.py'}", *extra]
    return subprocess.call(args, cwd=REPO)
