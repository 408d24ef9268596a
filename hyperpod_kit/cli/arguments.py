"""What every argument of `hyperpod-kit` names: an input, an output, or not a path.

One table, applied to the parser once it is built (`declare_kinds`). The generated path matrix
(tests/integration/test_path_matrix.py) walks the parser, fails on any argument this table does
not declare, and runs every path argument with hostile paths: a new argument is covered, or the
test says it is undeclared. Flags and arguments with fixed choices are not paths by nature
(`fileio.spec_of`).
"""

from __future__ import annotations

import argparse

from hyperpod_kit.cli.job import JOB_OPTIONS
from hyperpod_kit.config.loader import MAX_FILE_BYTES
from hyperpod_kit.files import fileio
from hyperpod_kit.verify.records import MAX_RESULTS_BYTES

K = fileio.PathKind
ENV = fileio.PathSpec(K.INPUT_FILE, limit=MAX_FILE_BYTES)  # an environment file
NAMED_ENV = fileio.PathSpec(K.INPUT_FILE, template="dev={}", limit=MAX_FILE_BYTES)  # NAME=FILE
NOT = fileio.PathSpec(K.NOT_A_PATH)
ASSEMBLY_IN = fileio.PathSpec(K.INPUT_FOLDER)  # a cloud assembly (its files have their limits)
FOLDER_OUT = fileio.PathSpec(K.OUTPUT_FOLDER)
FILE_OUT = fileio.PathSpec(K.OUTPUT_FILE)
PIPELINE_ENVS = {"envs": NAMED_ENV, "output": FOLDER_OUT}
JOB_OPTION_FIELDS = [field for _, field, _, _ in JOB_OPTIONS]

# (command words, dest) -> kind; "*" for every command that has the argument.
KINDS: dict[tuple[str, str], fileio.PathSpec] = {
    ("*", "file"): ENV,
    ("*", "suppress"): NOT,
    ("validate", "explain"): NOT,
    ("schema", "output"): FILE_OUT,
    ("synth", "output"): FOLDER_OUT,
    ("jobs", "output"): FOLDER_OUT,  # job files are added to it; nothing else is touched
    ("plan", "baseline"): ASSEMBLY_IN,
    ("check", "assembly"): ASSEMBLY_IN,
    ("check", "rehearse"): ENV,
    ("estimate", "step_time"): NOT,
    ("init", "file"): FILE_OUT,
    # a project's folder: created whole, or (--force) its files added into it
    ("init", "project"): FOLDER_OUT,
    **{("init", dest): NOT for dest in (
        "name", "orchestrator", "region", "az_id", "instance_type", "count", "users",
        "toolkit_ref", "toolkit_repository",
    )},
    **{("pipeline github", d): s for d, s in PIPELINE_ENVS.items()},
    **{("pipeline github", dest): NOT for dest in (
        "toolkit_ref", "roles", "read_roles", "region", "diff_roles", "deploy_runner",
    )},
    ("pipeline github", "toolkit_repository"): fileio.PathSpec(
        K.NOT_A_PATH, example="octo/hyperpod-kit"
    ),
    **{("pipeline bootstrap", d): s for d, s in PIPELINE_ENVS.items()},
    ("pipeline bootstrap", "repository"): fileio.PathSpec(K.NOT_A_PATH, example="octo/envs"),
    ("pipeline bootstrap", "oidc_provider_arn"): NOT,
    **{("pipeline codepipeline", d): s for d, s in PIPELINE_ENVS.items()},
    ("pipeline codepipeline", "connection_arn"): fileio.PathSpec(
        K.NOT_A_PATH,
        example="arn:aws:codeconnections:us-west-2:111122223333:connection/"
        "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    ),
    ("pipeline codepipeline", "repository"): fileio.PathSpec(K.NOT_A_PATH, example="octo/envs"),
    **{("pipeline codepipeline", dest): NOT for dest in ("branch", "toolkit_ref", "name")},
    ("pipeline codepipeline", "toolkit_repository"): fileio.PathSpec(
        K.NOT_A_PATH, example="octo/hyperpod-kit"
    ),
    ("status", "interval"): NOT,
    **{("logs", dest): NOT for dest in ("node", "group", "since", "grep")},
    ("logs", "save"): FOLDER_OUT,
    **{("nodes", dest): NOT for dest in ("action", "ids", "group", "to")},
    ("verify", "results"): fileio.PathSpec(K.INPUT_FILE, limit=MAX_RESULTS_BYTES),
    ("verify", "run"): NOT,
    ("verify", "out"): FOLDER_OUT,
    # `jobs` and `job render|submit`: the job's options (trainer.job values, paths on the
    # cluster's FSx as the nodes see them, never read here)
    **{(command, f"set_{field}"): NOT for command in ("jobs", "job render", "job submit")
       for field in JOB_OPTION_FIELDS},
    **{(command, "image"): NOT for command in ("jobs", "job render", "job submit")},
    ("job render", "output"): FOLDER_OUT,  # job files are added to it; nothing else is touched
    ("job submit", "folder"): FOLDER_OUT,  # the job file is added to it; the job runs there
    **{(f"job {action}", "job_id"): NOT for action in ("show", "logs", "cancel")},
}  # fmt: skip


def declare_kinds(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Attach each argument's declared kind from `KINDS` (entries that match no argument are
    reported by `unused_kinds`, which the path matrix test checks)."""
    _USED.clear()
    for words, _, action in fileio.walk(parser):
        command = " ".join(words)
        key = next((k for k in ((command, action.dest), ("*", action.dest)) if k in KINDS), None)
        if key is None or getattr(action, fileio.ATTRIBUTE, None) is not None:
            continue
        _USED.add(key)
        spec = KINDS[key]
        fileio.declare(
            action, spec.kind, template=spec.template, limit=spec.limit, example=spec.example
        )
    return parser


_USED: set[tuple[str, str]] = set()


def unused_kinds() -> list[tuple[str, str]]:
    """Entries of `KINDS` that the last `declare_kinds` matched to no argument (stale)."""
    return sorted(set(KINDS) - _USED)
