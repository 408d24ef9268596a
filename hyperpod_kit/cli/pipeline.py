"""`hyperpod-kit pipeline github`: GitHub Actions that plan, deploy and watch environments.

Four workflows, rendered from `templates/github/*.yml.j2` with validated values only (every value
through the `json` or `comment` filter; GitHub's own `${{ }}` expressions are constant text):

    hyperpod-kit-plan.yml          pull_request: validate, synth (both gates), rehearsal, plan of
                                   each environment against the base commit's assembly; uploaded
    hyperpod-kit-plan-comment.yml  workflow_run: one comment per environment from that upload
    hyperpod-kit-deploy.yml        push to main: synth once, deploy in order with GitHub OIDC,
                                   `status` healthy before the next; each job names its environment
    hyperpod-kit-drift.yml         schedule: `cdk drift` and `status` as the GitHub environment
                                   `drift` with the read-only role, one issue per environment

Every `uses:` is pinned to the commit of a release tag from `config/facts/github_actions.json`.
The toolkit is checked out from `--toolkit-repository` at `--toolkit-ref` and installed with its
own `make setup` (pinned requirements, the pinned CDK CLI), so the team's repository needs only
its environment files. A workflow file carries a digest of its own text: hyperpod-kit replaces a
file it wrote that nobody changed, and anything else only with --force (`outputs.check_file`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from hyperpod_kit import __version__
from hyperpod_kit.config.facts import action_pins, regions
from hyperpod_kit.naming import (
    DEPLOY_SESSION_SECONDS,
    DRIFT_ENVIRONMENT,
    PLAN_ENVIRONMENT,
    READ_SESSION_SECONDS,
    RESERVED_ENVIRONMENTS,
)
from hyperpod_kit.paths import REPO

if TYPE_CHECKING:
    from hyperpod_kit.config.environment import LoadedEnvironment
    from hyperpod_kit.outputs import FolderOutput

EXIT_OK, EXIT_BAD_INPUT = 0, 2
TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_OUTPUT = ".github/workflows"
BOOTSTRAP_OUTPUT = "deploy-identity.out"
WORKFLOWS = {  # file name -> (template, what it is for)
    "hyperpod-kit-plan.yml": ("plan.yml.j2", "plan every pull request"),
    "hyperpod-kit-plan-comment.yml": ("plan-comment.yml.j2", "post the plan on the pull request"),
    "hyperpod-kit-deploy.yml": ("deploy.yml.j2", "deploy main, environment after environment"),
    "hyperpod-kit-drift.yml": ("drift.yml.j2", "nightly drift and health"),
}
PYTHON_VERSION = "3.11"  # what requirements.txt is pinned and tested for
NODE_VERSION = "22"  # an active LTS for the pinned CDK CLI and jsii
DRIFT_CRON = "23 4 * * *"
DIGEST_LINE = re.compile(r"^# hyperpod-kit-digest: sha256:([0-9a-f]{64})\n", re.MULTILINE)

# GitHub environment names: hyperpod-kit keeps to what is also a job id and a variable suffix.
ENV_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}$")
ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
GIT_REF = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}(?<![./])$")
OIDC_PROVIDER_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$"
)
SAFE_PATH = re.compile(r"^[A-Za-z0-9._/-]+$")
RUNNER_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DEFAULT_RUNNER = "ubuntu-latest"


class PipelineError(ValueError):
    """A flag's value the generator refuses: one line, `--flag: 'value' message. Hint: ...`."""

    def __init__(self, flag: str, value: object, message: str, hint: str) -> None:
        super().__init__(f"{flag}: {str(value)!r} {message}. Hint: {hint}.")


@dataclass(frozen=True)
class PipelineEnvironment:
    """One environment of the pipeline: its GitHub environment name, file, region, role."""

    name: str
    file: str  # relative to the repository root, forward slashes
    region: str
    role: str  # an IAM role ARN, or the `${{ vars.NAME }}` expression that holds one
    diff_role: str = ""  # the same for the read-only role of `--diff`
    read_role: str = ""  # the same for the read-only role of drift and status (bootstrap's)
    account: str | None = None  # the file's `account`, if it names one

    @property
    def variable(self) -> str:
        return "HYPERPOD_KIT_ROLE_ARN_" + self.name.upper().replace("-", "_")

    @property
    def diff_variable(self) -> str:
        return "HYPERPOD_KIT_PLAN_ROLE_ARN_" + self.name.upper().replace("-", "_")

    @property
    def read_variable(self) -> str:
        return "HYPERPOD_KIT_READ_ROLE_ARN_" + self.name.upper().replace("-", "_")


def add_toolkit_arguments(p: argparse.ArgumentParser, installs: str, fetched: str) -> None:
    """--toolkit-ref and --toolkit-repository: where a generated pipeline gets hyperpod-kit."""
    p.add_argument(
        "--toolkit-ref",
        default=f"v{__version__}",
        metavar="REF",
        help=f"the hyperpod-kit tag, branch or commit {installs} (v{__version__})",
    )
    p.add_argument(
        "--toolkit-repository",
        metavar="OWNER/NAME",
        help=f"the GitHub repository hyperpod-kit is {fetched} from (default: the GitHub "
        "remote `origin` of this hyperpod-kit's own checkout)",
    )


def add_pipeline_parser(sub: Any) -> None:
    what = "generate CI workflows that plan, deploy and watch environments"
    p = sub.add_parser("pipeline", help=what, description=f"{what} (docs/pipelines.md)")
    kinds = p.add_subparsers(
        dest="pipeline_kind",
        required=True,
        metavar="KIND",
        help="github (GitHub Actions), bootstrap (their AWS deploy role), codepipeline (CDK "
        "Pipelines on AWS CodePipeline)",
    )
    what = "write GitHub Actions workflows into .github/workflows"
    g = kinds.add_parser(
        "github",
        help=what,
        description=f"{what}: plan on pull requests, deploy on main (in the order of --env, "
        "GitHub OIDC), nightly drift. A workflow file is replaced only if hyperpod-kit wrote it "
        "and nobody changed it since, else only with --force.",
    )
    g.add_argument(
        "--env",
        dest="envs",
        action="append",
        default=[],
        metavar="NAME=FILE",
        required=True,
        help="a GitHub environment and its environment file, in deploy order (repeatable), "
        "e.g. --env dev=environments/dev.yaml --env prod=environments/prod.yaml",
    )
    add_toolkit_arguments(g, "the workflows install", "checked out")
    g.add_argument(
        "--aws-role-arn",
        dest="roles",
        action="append",
        default=[],
        metavar="NAME=ARN",
        help="the IAM role environment NAME deploys with (repeatable); default: the repository "
        "variable HYPERPOD_KIT_ROLE_ARN_<NAME>",
    )
    g.add_argument(
        "--read-role-arn",
        dest="read_roles",
        action="append",
        default=[],
        metavar="NAME=ARN",
        help="the read-only role of environment NAME's drift job and of its `status --watch` "
        "after each deploy (repeatable); default: the repository variable "
        "HYPERPOD_KIT_READ_ROLE_ARN_<NAME>",
    )
    g.add_argument(
        "--region",
        help="the region of the AWS credentials; must be every environment file's region "
        "(default: each file's region)",
    )
    g.add_argument(
        "--diff",
        action="store_true",
        help="also `cdk diff` each environment against its deployed stacks in pull requests "
        f"from this repository (never forks), as the GitHub environment `{PLAN_ENVIRONMENT}` "
        "with a read-only role (`pipeline bootstrap --plan-role`); the environment names "
        f"{' and '.join(RESERVED_ENVIRONMENTS)} are reserved",
    )
    g.add_argument(
        "--diff-role-arn",
        dest="diff_roles",
        action="append",
        default=[],
        metavar="NAME=ARN",
        help="the read-only role environment NAME's diff uses (repeatable; implies --diff); "
        "default: the repository variable HYPERPOD_KIT_PLAN_ROLE_ARN_<NAME>",
    )
    g.add_argument(
        "--deploy-runner",
        default=DEFAULT_RUNNER,
        metavar="LABEL",
        help="the runner label of the deploy jobs, which build the trainer image (a multi-GB "
        f"NVIDIA base: a larger runner, see docs/pipelines.md) ({DEFAULT_RUNNER})",
    )
    g.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="DIR",
        help=f"the workflows folder ({DEFAULT_OUTPUT})",
    )
    g.add_argument(
        "--force", action="store_true", help="overwrite workflow files that were changed by hand"
    )
    what = "synthesize the deploy identity: GitHub's OIDC provider and the deploy role"
    b = kinds.add_parser(
        "bootstrap",
        help=what,
        description=f"{what}, trusted only by the jobs of the named GitHub environments, "
        "allowed only to assume the CDK bootstrap roles of the environments' regions; and a "
        f"read-only role for the GitHub environment `{DRIFT_ENVIRONMENT}` and the deploy jobs' "
        "status. Gated like `synth` (cdk-nag, cfn-lint). One per account: the files must name "
        "one account (or none). Deploy it with the pinned CDK CLI: `npx cdk deploy --app DIR` "
        "(docs/pipelines.md).",
    )
    b.add_argument(
        "--repository",
        required=True,
        metavar="OWNER/NAME",
        help="the GitHub repository whose workflows deploy (the team's repository)",
    )
    b.add_argument(
        "--env",
        dest="envs",
        action="append",
        default=[],
        metavar="NAME=FILE",
        required=True,
        help="a GitHub environment that deploys into this account, and its environment file "
        "(repeatable; its region names the bootstrap roles; "
        f"{' and '.join(RESERVED_ENVIRONMENTS)} are reserved)",
    )
    b.add_argument(
        "--plan-role",
        action="store_true",
        help="also a read-only role for `pipeline github --diff`: trusted only by jobs of the "
        f"GitHub environment `{PLAN_ENVIRONMENT}`, allowed only to assume the CDK bootstrap's "
        "lookup roles",
    )
    b.add_argument(
        "--oidc-provider-arn",
        metavar="ARN",
        help="the account's existing GitHub OIDC provider, in the files' account (default: "
        "create one; an account has at most one for the URL)",
    )
    b.add_argument(
        "-o",
        "--output",
        default=BOOTSTRAP_OUTPUT,
        metavar="DIR",
        help=f"cloud assembly folder ({BOOTSTRAP_OUTPUT}); replaced only if hyperpod-kit wrote it",
    )
    from hyperpod_kit.cli.codepipeline import add_codepipeline_parser

    add_codepipeline_parser(kinds)


# --- checking the flags ----------------------------------------------------------------------


def _pair(flag: str, value: str, what: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not rest:
        raise PipelineError(flag, value, f"is not NAME={what}", f"e.g. {flag} dev={_EXAMPLE[flag]}")
    if not ENV_NAME.match(name):
        raise PipelineError(
            flag,
            value,
            f"names the environment {name!r}, which is not a GitHub environment name "
            "hyperpod-kit writes",
            "1-39 lowercase letters, digits and hyphens, starting with a letter (dev, prod)",
        )
    return name, rest


_EXAMPLE = {
    "--env": "environments/dev.yaml",
    "--aws-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-deploy",
    "--diff-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-plan",
    "--read-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-read",
}


def check_env_file(value: str, file: str) -> str:
    """The file as the workflow names it: relative to the repository root (the current folder),
    inside it, a .yaml or .yml file that exists (a regular file: the one input layer)."""
    from hyperpod_kit.config.loader import MAX_FILE_BYTES
    from hyperpod_kit.files import fileio

    if os.path.lexists(file):  # a FIFO, device, socket or loop of links: one line, unread
        fileio.input_file(
            file, limit=MAX_FILE_BYTES, what="environment file", hint="give its .yaml file"
        )
    path = Path(file)
    if path.is_absolute():
        try:
            path = Path(os.path.realpath(path)).relative_to(os.path.realpath(Path.cwd()))
        except ValueError:
            raise PipelineError(
                "--env", value, "is outside the current folder", "run it from the repository root"
            ) from None
    posix = PurePosixPath(path.as_posix())
    if ".." in posix.parts or not SAFE_PATH.match(str(posix)):
        raise PipelineError(
            "--env",
            value,
            "is not a plain path inside the repository",
            "a relative path of letters, digits, . _ - and /, from the repository root",
        )
    if posix.suffix not in (".yaml", ".yml"):
        raise PipelineError("--env", value, "is not an environment file", "give its .yaml file")
    if not path.is_file():
        raise PipelineError(
            "--env",
            value,
            "names a file that does not exist",
            "run it from the repository root, with the path of an environment file",
        )
    return str(posix)


def check_ref(value: str) -> str:
    if not GIT_REF.match(value):
        raise PipelineError(
            "--toolkit-ref",
            value,
            "is not a git tag, branch or commit",
            f"e.g. v{__version__}, main or a 40-hex commit",
        )
    return value


def check_repository(value: str, flag: str = "--toolkit-repository") -> str:
    if not REPOSITORY.match(value):
        raise PipelineError(flag, value, "is not a GitHub repository", "OWNER/NAME")
    return value


def toolkit_repository(given: str | None) -> str:
    """The repository the workflows check hyperpod-kit out from: given, or this checkout's
    GitHub remote `origin`."""
    if given is not None:
        return check_repository(given)
    try:
        url = subprocess.run(
            ["git", "-C", str(REPO), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        url = ""
    found = re.match(r"^(?:https://github\.com/|git@github\.com:)([^/]+/[^/]+?)(?:\.git)?/?$", url)
    if found is None or not REPOSITORY.match(found[1]):
        raise PipelineError(
            "--toolkit-repository",
            "",
            "is needed: this hyperpod-kit is not a checkout of a GitHub repository",
            "name where the workflows get hyperpod-kit, e.g. --toolkit-repository OWNER/NAME",
        )
    return found[1]


def check_runner(value: str) -> str:
    if not RUNNER_LABEL.match(value):
        raise PipelineError(
            "--deploy-runner",
            value,
            "is not a runner label",
            "letters, digits, . _ and -, e.g. ubuntu-latest or a larger runner's name",
        )
    return value


def check_region(value: str) -> str:
    if value not in regions():
        raise PipelineError(
            "--region", value, "is not a region in hyperpod-kit's table", "e.g. us-west-2"
        )
    return value


def check_role(value: str, flag: str = "--aws-role-arn") -> tuple[str, str]:
    name, arn = _pair(flag, value, "ARN")
    if not ROLE_ARN.match(arn):
        raise PipelineError(
            flag,
            value,
            "does not end in an IAM role ARN",
            "NAME=arn:aws:iam::ACCOUNT:role/ROLE",
        )
    return name, arn


def environments(
    envs: Sequence[str],
    roles_given: Sequence[str] = (),
    region_given: str | None = None,
    diff_roles_given: Sequence[str] = (),
    read_roles_given: Sequence[str] = (),
) -> list[PipelineEnvironment]:
    """The environments the flags name, each file loaded like `validate` (exit 2 on an error)."""
    found = loaded_environments(envs, roles_given, region_given, diff_roles_given, read_roles_given)
    return [env for env, _ in found]


def arn_account(arn: str) -> str:
    """The account of an ARN (its fifth field)."""
    return arn.split(":")[4]


def check_reserved(value: str, name: str) -> None:
    """An environment that deploys may not take a name the bootstrap's read-only roles trust."""
    if name in RESERVED_ENVIRONMENTS:
        what = {
            PLAN_ENVIRONMENT: "the pull requests' read-only `cdk diff` jobs (--diff)",
            DRIFT_ENVIRONMENT: "the nightly drift jobs",
        }[name]
        raise PipelineError(
            "--env",
            value,
            f"names the environment {name!r}, the GitHub environment of {what}, whose "
            "subject only a read-only role trusts",
            f"another name for this environment ({' and '.join(RESERVED_ENVIRONMENTS)} are "
            "reserved)",
        )


def _locked(loaded: LoadedEnvironment) -> LoadedEnvironment:
    """The environment with its version lock applied, as synth deploys it; a lock that refuses
    is a `ConfigError` like the file's (hyperpod_kit/lock.py)."""
    from hyperpod_kit.config import ConfigError
    from hyperpod_kit.lock import LockError, lock_environment

    try:
        return lock_environment(loaded)[0]
    except LockError as e:
        raise ConfigError(loaded.file, e.findings) from None


def loaded_environments(
    envs: Sequence[str],
    roles_given: Sequence[str] = (),
    region_given: str | None = None,
    diff_roles_given: Sequence[str] = (),
    read_roles_given: Sequence[str] = (),
) -> list[tuple[PipelineEnvironment, LoadedEnvironment]]:
    """`environments`, each with its loaded file. An environment may not take a reserved name
    (`plan`, `drift`); `--region` must be each file's region, and a role's account the file's
    `account` (where it names one) and the other roles' of that environment."""
    from hyperpod_kit.config import ConfigError, Level
    from hyperpod_kit.config.environment import load_environment

    files: dict[str, str] = {}
    for value in envs:
        name, file = _pair("--env", value, "FILE")
        check_reserved(value, name)
        if name in files:
            raise PipelineError("--env", value, f"names {name!r} twice", "give each once")
        files[name] = check_env_file(value, file)
    roles = _roles(roles_given, "--aws-role-arn", files)
    diff_roles = _roles(diff_roles_given, "--diff-role-arn", files)
    read_roles = _roles(read_roles_given, "--read-role-arn", files)
    region = check_region(region_given) if region_given is not None else None
    result = []
    for name, file in files.items():
        try:
            loaded = _locked(load_environment(file))
        except ConfigError as e:
            first = next(f for f in e.findings if f.level is Level.ERROR)
            where = f"{e.file}:{first.line}" if first.line else e.file
            raise PipelineError(
                "--env",
                f"{name}={file}",
                f"does not validate ({where} {first.path}: {first.message.rstrip('.')})",
                f"{first.hint.rstrip('.') + '; ' if first.hint else ''}"
                f"`hyperpod-kit validate {file}` shows every finding",
            ) from None
        config = loaded.config
        if region is not None and region != config.region:
            raise PipelineError(
                "--region",
                region,
                f"is not the region of {name} ({file}: {config.region}), where its stacks "
                "deploy; the workflow's credentials, status and drift would look elsewhere",
                "leave --region out (each file's region is used), or change the file's region",
            )
        account: str | None = config.account
        given = [
            (flag, f"{name}={chosen[name]}", chosen[name])
            for flag, chosen in (
                ("--aws-role-arn", roles), ("--diff-role-arn", diff_roles),
                ("--read-role-arn", read_roles),
            )
            if name in chosen
        ]  # fmt: skip
        for flag, value, arn in given:
            where = f"{file}: account {account}" if config.account else f"{given[0][0]}: {account}"
            if account is not None and arn_account(arn) != account:
                raise PipelineError(
                    flag,
                    value,
                    f"is a role of account {arn_account(arn)}, but {name} deploys to another "
                    f"({where})",
                    f"the role of `pipeline bootstrap` deployed in {name}'s account",
                )
            account = arn_account(arn)
        names = PipelineEnvironment(name, "", "", "")
        role = roles.get(name, "${{ vars." + names.variable + " }}")
        diff_role = diff_roles.get(name, "${{ vars." + names.diff_variable + " }}")
        read_role = read_roles.get(name, "${{ vars." + names.read_variable + " }}")
        env = PipelineEnvironment(
            name, file, config.region, role, diff_role, read_role, config.account
        )
        result.append((env, loaded))
    return result


def _roles(given: Sequence[str], flag: str, files: dict[str, str]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for value in given:
        name, arn = check_role(value, flag)
        if name not in files:
            raise PipelineError(
                flag, value, f"names {name!r}, which no --env names", f"one of {', '.join(files)}"
            )
        roles[name] = arn
    return roles


# --- rendering ---------------------------------------------------------------------------------


def _context(
    envs: list[PipelineEnvironment], repository: str, ref: str, runner: str, diff: bool
) -> dict[str, Any]:
    order = [e.name for e in envs]
    rows = []
    for i, e in enumerate(envs):
        rows.append(
            {
                "name": e.name,
                "file": e.file,
                "region": e.region,
                "role": e.role,
                "out": f".hyperpod-kit/out/{e.name}",
                "plan_job": f"plan-{e.name}",
                "deploy_job": f"deploy-{e.name}",
                "drift_job": f"drift-{e.name}",
                "needs": "synth" if i == 0 else f"deploy-{order[i - 1]}",
                "plan_group": "hyperpod-kit-plan-${{ github.event.pull_request.number }}-" + e.name,
                "deploy_group": f"hyperpod-kit-{e.name}",
                # Its own group: a drift run queued behind a running one would otherwise cancel
                # the deploy pending in the deploy's group (GitHub keeps one pending per group).
                "drift_group": f"hyperpod-kit-drift-{e.name}",
                "read_role": e.read_role,
                "plan_artifact": f"hyperpod-kit-plan-{e.name}",
                "assembly_artifact": f"hyperpod-kit-assembly-{e.name}",
                "drift_artifact": f"hyperpod-kit-drift-{e.name}",
                "diff_job": f"diff-{e.name}",
                "diff_role": e.diff_role,
                "diff_group": "hyperpod-kit-diff-${{ github.event.pull_request.number }}-" + e.name,
                "diff_artifact": f"hyperpod-kit-diff-{e.name}",
            }
        )
    return {
        "version": __version__,
        "pins": action_pins(),
        "toolkit_repository": repository,
        "toolkit_ref": ref,
        "python_version": PYTHON_VERSION,
        "node_version": NODE_VERSION,
        "envs": rows,
        "order": " → ".join(order),
        "environments_json": json.dumps(order),
        "drift_jobs": [r["drift_job"] for r in rows],
        "cron": DRIFT_CRON,
        "deploy_runner": runner,
        "session_seconds": DEPLOY_SESSION_SECONDS,
        "read_session_seconds": READ_SESSION_SECONDS,
        "drift_environment": DRIFT_ENVIRONMENT,
        "plan_environment": PLAN_ENVIRONMENT,
        "diff": diff,
        "command": " ".join(
            [*(f"--env {e.name}={e.file}" for e in envs), f"--toolkit-ref {ref}"]
            + (["--diff"] if diff else [])
        ),
    }


def with_digest(text: str) -> str:
    """`text` with a line that records the SHA-256 of the rest, after the header."""
    line = f"# hyperpod-kit-digest: sha256:{hashlib.sha256(text.encode()).hexdigest()}\n"
    head, sep, rest = text.partition("\n#\n")
    return f"{head}\n{line}#\n{rest}" if sep else line + text


def ours_digest(current: bytes) -> str | None:
    """What `check_file` takes as `ours` for a workflow file: None if hyperpod-kit did not write
    it (no digest line); the SHA-256 of `current` if it wrote it and nobody changed it since;
    else the digest it recorded (which no longer matches: the file was edited)."""
    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = DIGEST_LINE.search(text)
    if found is None:
        return None
    rest = text[: found.start()] + text[found.end() :]
    if hashlib.sha256(rest.encode()).hexdigest() != found[1]:
        return found[1]
    return hashlib.sha256(current).hexdigest()


def render_workflows(
    envs: list[PipelineEnvironment],
    *,
    repository: str,
    ref: str,
    runner: str = DEFAULT_RUNNER,
    diff: bool = False,
) -> dict[str, str]:
    """File name -> text of every workflow; with `diff`, the plan workflow has a `cdk diff` job
    per environment for pull requests from the repository itself."""
    from hyperpod_kit.templating import environment, render

    env = environment(TEMPLATES, trim_blocks=True)
    context = _context(envs, repository, ref, runner, diff)
    files = {}
    for name, (template, purpose) in WORKFLOWS.items():
        text = render(
            env,
            f"github/{template}",
            {**context, "purpose": purpose},
            shown_as=f"hyperpod_kit/cli/templates/github/{template}",
        )
        files[name] = with_digest(text.rstrip("\n") + "\n")
    return files


# --- the command -------------------------------------------------------------------------------


def _github_workflows(
    args: argparse.Namespace,
) -> tuple[list[PipelineEnvironment], bool, dict[str, str]]:
    """The environments, whether to `cdk diff`, and the workflows' texts, from checked flags."""
    ref = check_ref(args.toolkit_ref)
    runner = check_runner(args.deploy_runner)
    repository = toolkit_repository(args.toolkit_repository)
    envs = environments(args.envs, args.roles, args.region, args.diff_roles, args.read_roles)
    diff = bool(args.diff or args.diff_roles)
    files = render_workflows(envs, repository=repository, ref=ref, runner=runner, diff=diff)
    return envs, diff, files


def pipeline(args: argparse.Namespace) -> int:
    if args.pipeline_kind == "bootstrap":
        return bootstrap(args)
    if args.pipeline_kind == "codepipeline":
        from hyperpod_kit.cli.codepipeline import codepipeline

        return codepipeline(args)
    from hyperpod_kit.files import fileio
    from hyperpod_kit.outputs import OutputError, check_file, write_error, write_file

    try:
        envs, diff, files = _github_workflows(args)
    except PipelineError as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    folder = Path(args.output)
    try:
        fileio.output_into_folder(
            folder, shown=args.output, hint="give the workflows folder, -o DIR",
            create_parents=True,
        )  # fmt: skip
        writes = []
        for name, text in files.items():
            target = folder / name
            ours = None
            if target.is_file() and not target.is_symlink():
                ours = ours_digest(fileio.existing_bytes(target, limit=1 << 20))
            if folder.is_dir():
                writes.append(check_file(target, text, force=args.force, ours=ours))
        folder.mkdir(parents=True, exist_ok=True)
        if not writes:  # a new folder: every file is new
            writes = [check_file(folder / n, t, force=False) for n, t in files.items()]
        for write in writes:
            write_file(write)
    except OutputError as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(write_error(e, args.output), file=sys.stderr)
        return EXIT_BAD_INPUT
    for write in writes:
        shown = folder / write.target.name
        print(f"{'wrote' if write.changes else 'unchanged'} {shown}", file=sys.stderr)
    names = ", ".join(e.name for e in envs)
    plan = f", and the GitHub environment {PLAN_ENVIRONMENT} its read-only role" if diff else ""
    print(
        f"next: commit {args.output}; give each GitHub environment ({names}) its deploy role "
        f"and read-only role and the later ones required reviewers; create the GitHub "
        f"environment {DRIFT_ENVIRONMENT} (deployment branch: main){plan} (docs/pipelines.md)",
        file=sys.stderr,
    )
    return EXIT_OK


# --- the deploy identity -----------------------------------------------------------------------


def check_provider_arn(value: str | None) -> str | None:
    if value is not None and not OIDC_PROVIDER_ARN.match(value):
        raise PipelineError(
            "--oidc-provider-arn",
            value,
            "is not the ARN of a GitHub OIDC provider",
            "arn:aws:iam::ACCOUNT:oidc-provider/token.actions.githubusercontent.com "
            "(`aws iam list-open-id-connect-providers` lists them)",
        )
    return value


def one_account(envs: Sequence[PipelineEnvironment], provider_arn: str | None) -> str | None:
    """The one account the deploy identity is for: the files' `account` (all the same where
    given) and the OIDC provider's; None when none names one."""
    named = [(e, e.account) for e in envs if e.account is not None]
    account = named[0][1] if named else None
    for env, other in named[1:]:
        if other != account:
            first = named[0][0]
            raise PipelineError(
                "--env",
                f"{env.name}={env.file}",
                f"deploys to account {other}, but {first.name} ({first.file}) to {account}: "
                "one deploy identity is for one account",
                "run `pipeline bootstrap` once per account, each with that account's --env "
                "flags and its own -o",
            )
    if provider_arn is not None:
        if account is not None and arn_account(provider_arn) != account:
            raise PipelineError(
                "--oidc-provider-arn",
                provider_arn,
                f"is in account {arn_account(provider_arn)}, not the files' account {account}",
                f"the GitHub OIDC provider of account {account}, or leave the flag out to "
                "create one",
            )
        account = account or arn_account(provider_arn)
    return account


def check_branch(value: str) -> str:
    if not GIT_REF.match(value):
        raise PipelineError("--branch", value, "is not a branch name", "e.g. main")
    return value


def build_identity(
    outdir: Path,
    *,
    repository: str,
    envs: Sequence[PipelineEnvironment],
    provider_arn: str | None,
    plan_role: bool = False,
    account: str | None = None,
) -> None:
    """Synthesize the deploy identity stack into `outdir` (offline, cdk-nag as an aspect); with
    `account`, the stack is for that account alone (the CDK CLI refuses other credentials)."""
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from hyperpod_kit.app import create_app
    from hyperpod_kit.stacks.deploy_identity import STACK_NAME, DeployIdentityStack

    app = create_app(outdir=str(outdir))
    env = None if account is None else cdk.Environment(account=account, region=envs[0].region)
    DeployIdentityStack(
        app,
        STACK_NAME,
        description="hyperpod-kit: the GitHub Actions deploy role (pipeline bootstrap)",
        env=env,
        repository=repository,
        environments=[e.name for e in envs],
        regions=[e.region for e in envs],
        provider_arn=provider_arn,
        plan_role=plan_role,
    )
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()


def gated_commit(out: FolderOutput, output: str, what: str, build: Callable[[Path], object]) -> int:
    """Build an assembly into `out`'s staging folder, run both gates on it, and put it in place
    only when they pass: 0; a gate error: 1, nothing written; a write refused: 2."""
    from hyperpod_kit.gates import check_assembly
    from hyperpod_kit.outputs import OutputError, write_error

    try:
        with out.staging() as staging:
            build(staging)
            report = check_assembly(staging)
            print(report.render(), file=sys.stderr)
            if not report.ok:
                print(f"{what} stopped by the gates: {len(report.errors)} errors; nothing "
                      "written", file=sys.stderr)  # fmt: skip
                return 1
            out.commit(staging)
    except OutputError as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(write_error(e, output), file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def bootstrap(args: argparse.Namespace) -> int:
    from hyperpod_kit.outputs import ASSEMBLY, FolderOutput, OutputError

    try:
        repository = check_repository(args.repository, "--repository")
        provider_arn = check_provider_arn(args.oidc_provider_arn)
        envs = environments(args.envs)
        account = one_account(envs, provider_arn)
        out = FolderOutput.checked(args.output, ASSEMBLY)
    except (PipelineError, OutputError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT

    def build(staging: Path) -> None:
        build_identity(
            staging, repository=repository, envs=envs, provider_arn=provider_arn,
            plan_role=args.plan_role, account=account,
        )  # fmt: skip

    code = gated_commit(out, args.output, "bootstrap", build)
    if code != EXIT_OK:
        return code
    print(
        f"synthesized the deploy identity -> {args.output}; next, with administrator "
        f"credentials of the account: npx cdk deploy --app {args.output} (from hyperpod-kit's "
        "folder, or its node_modules/.bin/cdk), then put the output DeployRoleArn in "
        "HYPERPOD_KIT_ROLE_ARN_<ENV>, ReadRoleArn in HYPERPOD_KIT_READ_ROLE_ARN_<ENV>"
        + (" and PlanRoleArn in HYPERPOD_KIT_PLAN_ROLE_ARN_<ENV>" if args.plan_role else "")
        + " (docs/pipelines.md)",
        file=sys.stderr,
    )
    return EXIT_OK
