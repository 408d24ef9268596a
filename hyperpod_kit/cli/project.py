"""`hyperpod-kit init --project DIR`: a repository for a team's environments, ready to commit.

    environments/NAME.yaml       the environment file `init` writes (the same flags, questions
                                 and --no-input), NAME its environment name
    environments/NAME.lock.json  its version lock, as `hyperpod-kit lock` would write it
    package.json                 pins aws-cdk exactly as hyperpod-kit's own package.json does
    package-lock.json            hyperpod-kit's lock of it, renamed to this project (`npm ci`)
    cdk.json                     "app": "sh bin/cdk-app"; the environment file as context
    bin/cdk-app                  runs app.py with a Python that has hyperpod-kit: the project's
                                 .venv, the `hyperpod-kit` command's, or python3 (no path of
                                 this machine: it works in a fresh clone, from a clean shell)
    app.py                       hyperpod-kit's CDK app (`npx cdk ... -c environment=FILE`)
    README.md, .gitignore
    .github/workflows/*.yml      with --github: `pipeline github`'s workflows for NAME

Everything is rendered and checked first (the environment file loads as `validate` loads it;
the folder is checked before any question); then the files go through the output layer at once
(`outputs.write_files`): a new or empty DIR is created whole, through a temporary sibling, and
marked as ours; in a project of ours each file is replaced only if unchanged since it was
written (else --force); a folder of someone else's is refused unless --force, which writes the
project's files into it and touches nothing else. Any error: one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from hyperpod_kit import __version__
from hyperpod_kit.cli.init import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    TEMPLATES,
    ChoiceError,
    Choices,
    CombinationError,
    choose,
    render,
    say_choices,
    validated,
    written,
)
from hyperpod_kit.cli.pipeline_flags import PipelineError
from hyperpod_kit.paths import PACKAGE_JSON, PACKAGE_LOCK

PROJECT_TEMPLATES = TEMPLATES / "project"
CDK_PACKAGE = "aws-cdk"
FALLBACK_PACKAGE_NAME = "hyperpod-environments"


def package_name(project: str) -> str:
    """The npm package name of the project: its folder's name as npm takes it (lowercase
    letters, digits, . _ -; not starting with . or _), else a fixed one."""
    base = Path(os.path.abspath(project)).name.lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", base).strip("-._")[:100]
    return name or FALLBACK_PACKAGE_NAME


def npm_files(name: str) -> dict[str, str]:
    """package.json and package-lock.json: hyperpod-kit's pin of the CDK CLI and its lock,
    under the project's name (in both, so that `npm ci` finds them in sync)."""
    pin = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))["devDependencies"][CDK_PACKAGE]
    lock = json.loads(PACKAGE_LOCK.read_text(encoding="utf-8"))
    root = lock["packages"][""]
    if root.get("devDependencies") != {CDK_PACKAGE: pin}:  # the toolkit's own files disagree
        raise RuntimeError(f"{PACKAGE_LOCK} does not lock {CDK_PACKAGE} {pin}")
    lock["name"] = root["name"] = name
    package = {
        "name": name,
        "private": True,
        "description": f"Pins the AWS CDK CLI that hyperpod-kit {__version__} is tested with; "
        "`npm ci` installs it, `npx cdk` runs it.",
        "devDependencies": {CDK_PACKAGE: pin},
    }
    return {
        "package.json": json.dumps(package, indent=2) + "\n",
        "package-lock.json": json.dumps(lock, indent=2) + "\n",
    }


def cdk_json(environment_file: str) -> str:
    body = {
        "app": "sh bin/cdk-app",
        "notices": False,
        "versionReporting": False,
        "context": {"environment": environment_file, "cli-telemetry": False},
    }
    return json.dumps(body, indent=2) + "\n"


def _static(name: str) -> str:
    return (PROJECT_TEMPLATES / name).read_text(encoding="utf-8")


def _known_repository(given: str | None) -> str | None:
    """The toolkit's GitHub repository for the README: given, or named by the installed
    package; None when neither (the README then names no repository)."""
    from hyperpod_kit.cli.pipeline_flags import toolkit_repository

    try:
        return toolkit_repository(given)
    except PipelineError:
        if given is not None:
            raise
        return None


def project_files(args: argparse.Namespace, choices: Choices) -> dict[str, str]:
    """Every file of the project (relative path -> text), rendered and checked."""
    from hyperpod_kit.cli.pipeline import render_workflows
    from hyperpod_kit.cli.pipeline_flags import (
        PipelineEnvironment,
        check_ref,
        toolkit_repository,
    )
    from hyperpod_kit.lock import LockError, lock_environment, lock_path, render_lock
    from hyperpod_kit.templating import environment
    from hyperpod_kit.templating import render as render_template

    file = f"environments/{choices.name}.yaml"
    text = render(choices, file)

    def lock_of(loaded: Any) -> str:  # as `hyperpod-kit lock` writes it for a new environment
        try:
            locked, resolution = lock_environment(loaded)
        except LockError as e:  # no lock yet: only the compatibility table could refuse
            raise CombinationError(f"{file}: {e}; nothing written") from None
        return render_lock(locked.config, resolution.pins)

    lock = validated(text, lock_of)
    files = {file: text, lock_path(file).as_posix(): lock}
    files.update(npm_files(package_name(args.project)))
    files["cdk.json"] = cdk_json(file)
    files["bin/cdk-app"] = _static("cdk-app.sh")
    files["app.py"] = _static("app.py.in")
    files[".gitignore"] = _static("gitignore.in")
    ref = check_ref(args.toolkit_ref)
    if args.github:
        repository: str | None = toolkit_repository(args.toolkit_repository)
        github_env = PipelineEnvironment.from_variables(choices.name, file, choices.region)
        workflows = render_workflows([github_env], repository=str(repository), ref=ref)
        files.update({f".github/workflows/{n}": t for n, t in workflows.items()})
    else:
        repository = _known_repository(args.toolkit_repository)
    source = f"git+https://github.com/{repository}@{ref}" if repository else None
    pip_spec = f'"{source}"' if source else f"hyperpod-kit=={__version__}"
    readme = render_template(
        environment(PROJECT_TEMPLATES, trim_blocks=True),
        "README.md.j2",
        {
            "name": choices.name,
            "file": file,
            "lock": lock_path(file).as_posix(),
            "region": choices.region,
            "version": __version__,
            "cdk_version": json.loads(files["package.json"])["devDependencies"][CDK_PACKAGE],
            "toolkit_repository": repository,
            "toolkit_ref": ref,
            "install": f"pipx install {pip_spec}",
            "pip_spec": pip_spec,
            "github": args.github,
            "github_environment": choices.name,
            "variable_suffix": choices.name.upper().replace("-", "_"),
        },
        shown_as="hyperpod_kit/cli/templates/project/README.md.j2",
    )
    files["README.md"] = readme.rstrip("\n") + "\n"
    return files


def _reserved(choices: Choices) -> None:
    """With --github the environment is also a GitHub environment: not one the workflows
    reserve for their read-only jobs."""
    from hyperpod_kit.naming import RESERVED_ENVIRONMENTS

    if choices.name in RESERVED_ENVIRONMENTS:
        raise ChoiceError(
            "--name",
            choices.name,
            "is a GitHub environment the workflows reserve for their read-only jobs",
            f"another name with --github ({' and '.join(RESERVED_ENVIRONMENTS)} are reserved)",
        )


def init_project(args: argparse.Namespace) -> int:
    from hyperpod_kit.outputs import (
        PROJECT,
        OutputError,
        check_files_folder,
        write_files,
    )

    try:
        # Refuse the folder before asking anything (checked again when writing).
        check_files_folder(args.project, kind=PROJECT, force=args.force)
        choices = choose(args)
        if args.github:
            _reserved(choices)
        files = project_files(args, choices)
    except (ChoiceError, CombinationError, PipelineError, OutputError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except (EOFError, KeyboardInterrupt):
        print(f"{args.project}: nothing written (no answer)", file=sys.stderr)
        return EXIT_BAD_INPUT
    writes = written(
        lambda: write_files(args.project, files, kind=PROJECT, force=args.force), args.project
    )
    if writes is None:
        return EXIT_BAD_INPUT
    say_choices(args, choices)
    changed = [w for w in writes if w.changes]
    print(
        f"wrote the project {args.project} ({len(changed)} files written, "
        f"{len(writes) - len(changed)} unchanged)",
        file=sys.stderr,
    )
    env_file = f"environments/{choices.name}.yaml"
    print(
        f"next: cd {args.project}; git init; npm ci; hyperpod-kit validate {env_file} (README.md)",
        file=sys.stderr,
    )
    return EXIT_OK
