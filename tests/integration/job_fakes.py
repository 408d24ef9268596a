"""Recording fakes of what the rendered Slurm job calls before its step: `aws` (STS, ECR),
`enroot` and `srun`, in the manner of lifecycle_fakes.py (one wrapper per command in a folder put
first on PATH, every call appended to ``$FAKE_STATE/calls.jsonl``).

Knobs, as files in ``$FAKE_STATE``: ``account`` (what STS says, default 111122223333),
``ecr/<registry id>/<repository>/<tag>`` (the digest ECR has for a tag; none: ECR has no such
image), ``enroot_fail`` (the import writes part of its output, then fails), ``enroot_sleep``
(seconds the import takes), ``enroot_other_first`` (a path another importer finishes while this
one runs). `enroot import` refuses an output that exists, as enroot does, and
writes ``squashfs of <uri>`` plus the credentials it was given (``$ENROOT_CONFIG_PATH``). Any
call to SSM fails: the job must not look its image up at run time.

Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

FAKES = ("aws", "enroot", "srun")
STATE = Path(os.environ.get("FAKE_STATE", "/nonexistent-state"))


def install_fakes(bin_dir: Path, python: str = sys.executable) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    module = bin_dir / "job_fakes.py"
    shutil.copyfile(__file__, module)
    for name in FAKES:
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {python} -S {module} {name} "$@"\n')
        wrapper.chmod(0o755)


def fail(message: str, code: int = 99) -> int:
    print(f"fake: {message}", file=sys.stderr)
    return code


def knob(name: str) -> str | None:
    path = STATE / name
    return path.read_text().strip() if path.exists() else None


def options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            rest.append(args[i])
            i += 1
    return opts, rest


def aws(args: list[str]) -> int:
    o, rest = options(args)
    if "--region" not in o:
        return fail("aws: every call names its region")
    if rest[:1] == ["ssm"]:
        return fail("aws ssm: AccessDeniedException (the job must not read SSM)", 254)
    if rest == ["sts", "get-caller-identity"]:
        print(knob("account") or "111122223333")
        return 0
    if rest == ["ecr", "get-login-password"]:
        print(f"ecr-password-for-{o['--region']}")
        return 0
    if rest == ["ecr", "batch-get-image"]:
        tag = o["--image-ids"].removeprefix("imageTag=")
        digest = knob(f"ecr/{o['--registry-id']}/{o['--repository-name']}/{tag}")
        print(digest or "None")  # the CLI's text output of an empty images[0]
        return 0
    return fail(f"aws {rest}: not faked")


def enroot(args: list[str]) -> int:
    o, rest = options(args)
    if rest[:1] != ["import"] or "--output" not in o:
        return fail(f"enroot {args}: not faked")
    output = Path(o["--output"])
    if output.exists():
        return fail(f"[ERROR] File already exists: {output}", 1)
    credentials = Path(os.environ.get("ENROOT_CONFIG_PATH", "/nonexistent")) / ".credentials"
    seen = credentials.read_text() if credentials.exists() else ""
    mode = oct(credentials.stat().st_mode & 0o777) if credentials.exists() else ""
    with (STATE / "imports.jsonl").open("a") as f:
        f.write(json.dumps({"uri": rest[1], "credentials": seen, "mode": mode}) + "\n")
    output.write_text("partial")
    time.sleep(float(knob("enroot_sleep") or 0))
    other = knob("enroot_other_first")
    if other is not None:  # another importer renamed the same digest into place meanwhile
        Path(other).write_text(f"squashfs of {rest[1]} (the other importer)\n")
    if knob("enroot_fail") is not None:
        return fail("[ERROR] Could not parse digest information", 1)
    output.write_text(f"squashfs of {rest[1]}\n")
    return 0


def main(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"cmd": name, "args": args}) + "\n")
    if name == "aws":
        return aws(args)
    if name == "enroot":
        return enroot(args)
    return 0  # srun: recorded only


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
