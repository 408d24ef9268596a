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
The toolkit is checked out from `--toolkit-repository` at `--toolkit-ref` and installed from that
checkout as a package, into a venv of its own, with the checkout's pinned requirements; the CDK
CLI comes from its package-lock.json (`npm ci`). The jobs then run `hyperpod-kit` from that venv,
so the team's repository needs only its environment files. A workflow file carries a digest of
its own text: hyperpod-kit replaces a file it wrote that nobody changed, and anything else only
with --force (`outputs.check_file`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hyperpod_kit import __version__
from hyperpod_kit.cli.codepipeline import add_codepipeline_parser, codepipeline
from hyperpod_kit.cli.pipeline_flags import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    PipelineEnvironment,
    PipelineError,
    add_toolkit_arguments,
    arn_account,
    check_ref,
    check_repository,
    environments,
    gated_commit,
    toolkit_repository,
)
from hyperpod_kit.config.facts import action_pins
from hyperpod_kit.naming import (
    DEPLOY_SESSION_SECONDS,
    DRIFT_ENVIRONMENT,
    PLAN_ENVIRONMENT,
    READ_SESSION_SECONDS,
    RESERVED_ENVIRONMENTS,
)

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
OIDC_PROVIDER_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$"
)
RUNNER_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DEFAULT_RUNNER = "ubuntu-latest"


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
    add_codepipeline_parser(kinds)


# --- checking the flags (those codepipeline shares: cli/pipeline_flags.py) --------------------


def check_runner(value: str) -> str:
    if not RUNNER_LABEL.match(value):
        raise PipelineError(
            "--deploy-runner",
            value,
            "is not a runner label",
            "letters, digits, . _ and -, e.g. ubuntu-latest or a larger runner's name",
        )
    return value


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
