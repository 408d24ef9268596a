"""`hyperpod-kit pipeline codepipeline`: the same promotion as the GitHub workflows, as a
self-mutating CDK Pipelines `CodePipeline`, synthesized offline and gated like `synth`.

The command writes a cloud assembly (the pipeline stack, and each environment as a `Stage` in its
own nested assembly, built by the `build_environment` every other path uses) and runs both gates
on all of it, the stages' templates included. A person deploys the pipeline stack once (`npx cdk
deploy --app DIR NAME-pipeline`); after that the pipeline's synth step runs this very command,
with the same flags, on each push, and its self-mutation step deploys whatever changed in the
pipeline. The synth step
installs hyperpod-kit at `--toolkit-ref` (as the GitHub workflows do), validates and rehearses
each environment, and synthesizes the pipeline app into `cdk.out` through the gates.

Each environment file must name its `account` (a stage deploys to an explicit account; nothing
is looked up). The pipeline lives in the account and region of its CodeConnections connection
(CodePipeline runs a source action in its own region, and the connection is the pipeline's), and
every environment must be in that region: a stage elsewhere needs CDK's cross-region support
stack, which is not generated yet.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperpod_kit.cli.pipeline_flags import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    MissingFlagError,
    PipelineError,
    add_toolkit_arguments,
    check_branch,
    check_ref,
    check_repository,
    gated_commit,
    loaded_environments,
    toolkit_repository,
)
from hyperpod_kit.config.facts import regions

if TYPE_CHECKING:
    from hyperpod_kit.app import StagedEnvironment
    from hyperpod_kit.config.environment import LoadedEnvironment
    from hyperpod_kit.constructs.delivery_pipeline import PipelineSource

CODEPIPELINE_OUTPUT = "pipeline.out"
DEFAULT_NAME = "hyperpod-kit"
TOOLKIT_DIR = ".hyperpod-kit/toolkit"  # where each step checks hyperpod-kit out, as on GitHub
VENV_DIR = ".hyperpod-kit/venv"  # where each step installs it, as on GitHub
CONNECTION_ARN = re.compile(
    r"^arn:(aws(?:-[a-z]+)*):(?:codeconnections|codestar-connections):([a-z0-9-]+):(\d{12}):"
    r"connection/[A-Za-z0-9-]{1,64}$"
)
PIPELINE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


class MissingAccountError(ValueError):
    """An environment file without `account`: `FILE:LINE account: ... Hint: ...`."""


@dataclass(frozen=True)
class Connection:
    arn: str
    partition: str
    region: str
    account: str


def add_codepipeline_parser(kinds: Any) -> None:
    what = "synthesize a self-mutating CDK Pipelines CodePipeline that deploys environments"
    c = kinds.add_parser(
        "codepipeline",
        help=what,
        description=f"{what} in the order of --env, a manual approval before each after the "
        "first and `hyperpod-kit status` after each; gated like `synth` (cdk-nag, cfn-lint on "
        "the pipeline and every stage's templates). Each file must name its account. Deploy it "
        "once with `npx cdk deploy --app DIR NAME-pipeline`; it updates itself afterwards "
        "(docs/pipelines.md).",
    )
    c.add_argument(
        "--env",
        dest="envs",
        action="append",
        default=[],
        metavar="NAME=FILE",
        required=True,
        help="an environment (the pipeline stage's name) and its environment file, relative to "
        "the repository root, in deploy order (repeatable)",
    )
    c.add_argument(
        "--connection-arn",
        metavar="ARN",
        help="the CodeConnections connection to the repository "
        "(arn:aws:codeconnections:REGION:ACCOUNT:connection/ID); the pipeline is deployed into "
        "its account and region",
    )
    c.add_argument(
        "--repository",
        metavar="OWNER/NAME",
        help="the repository of the environment files, as the connection names it",
    )
    c.add_argument("--branch", default="main", help="the branch that deploys (main)")
    add_toolkit_arguments(c, "the pipeline installs", "fetched")
    c.add_argument(
        "--name",
        default=DEFAULT_NAME,
        help=f"the pipeline's name; its stack is NAME-pipeline ({DEFAULT_NAME})",
    )
    c.add_argument(
        "-o",
        "--output",
        default=CODEPIPELINE_OUTPUT,
        metavar="DIR",
        help=f"cloud assembly folder ({CODEPIPELINE_OUTPUT}); replaced if hyperpod-kit wrote "
        "it, never a folder of someone else's",
    )
    c.add_argument(
        "--force",
        action="store_true",
        help="kept so that scripts still run; it changes nothing (a folder hyperpod-kit did not "
        "write is never replaced)",
    )


# --- checking the flags ----------------------------------------------------------------------


def check_connection(value: str | None) -> Connection:
    if value is None:
        raise MissingFlagError(
            "--connection-arn",
            "the CodeConnections connection through which the pipeline reads the repository",
            "create one (CodePipeline console, Settings, Connections; GitHub, GitLab or "
            "Bitbucket), finish its handshake, and pass its ARN",
        )
    found = CONNECTION_ARN.match(value)
    if found is None:
        raise PipelineError(
            "--connection-arn",
            value,
            "is not the ARN of a CodeConnections connection",
            "arn:aws:codeconnections:REGION:ACCOUNT:connection/ID (`aws codeconnections "
            "list-connections` lists them)",
        )
    partition, region, account = found[1], found[2], found[3]
    if region not in regions():
        raise PipelineError(
            "--connection-arn", value, f"names the region {region!r}, which is not in "
            "hyperpod-kit's table", "a connection in a region HyperPod is offered in",
        )  # fmt: skip
    return Connection(value, partition, region, account)


def check_name(value: str) -> str:
    if not PIPELINE_NAME.match(value):
        raise PipelineError(
            "--name",
            value,
            "is not a pipeline name hyperpod-kit writes",
            "1-63 lowercase letters, digits and hyphens, starting with a letter",
        )
    return value


def check_account(loaded: LoadedEnvironment, file: str) -> str:
    """The file's account, or MissingAccountError: a pipeline stage deploys to an explicit one."""
    account: str | None = loaded.config.account
    if account is None:
        raise MissingAccountError(
            f"{file}:1 account: not set, and a CodePipeline stage deploys to an explicit "
            'account (nothing is looked up). Hint: add `account: "123456789012"` (the '
            "environment's AWS account id) to the file, or to the base it extends."
        )
    return account


def check_same_region(name: str, file: str, region: str, connection: Connection) -> None:
    """Every stage in the pipeline's region: a stage elsewhere needs CDK's cross-region support
    stack (a replication bucket and key of CDK's), which hyperpod-kit does not generate yet."""
    if region != connection.region:
        raise PipelineError(
            "--env",
            f"{name}={file}",
            f"deploys to {region}, not to the pipeline's region {connection.region} (its "
            "connection's); stages in another region are not generated yet",
            f"a connection and pipeline in {region} for it, or the GitHub workflows "
            "(`hyperpod-kit pipeline github`), which deploy to any region",
        )


def pinned_cdk_cli() -> str:
    """The CDK CLI version package.json pins: the self-mutation step installs the same one."""
    from hyperpod_kit.versions import cdk_cli_pin

    pin = cdk_cli_pin()
    if pin is None:
        raise RuntimeError("hyperpod-kit's package.json pins no aws-cdk: reinstall hyperpod-kit")
    return pin


# --- the steps' commands -----------------------------------------------------------------------


def install_commands(repository: str, ref: str) -> list[str]:
    """Check hyperpod-kit out at `ref` (a tag, a branch or a commit: `git fetch` takes each),
    install it from that checkout as a package into a venv of its own (`--clear`: nothing the
    source holds at that path survives), with the checkout's pinned requirements, as the GitHub
    workflows do; then put the venv's `hyperpod-kit` on PATH for every later phase of the build.

    No CDK CLI: no step that runs these commands runs one (synth is in-process, `status` reads
    with boto3). The one CLI of the pipeline is the self-mutation's, which CDK Pipelines installs
    at `pinned_cdk_cli()`: package.json's exact version, which is package-lock.json's whole tree
    (aws-cdk has no dependencies; a unit test holds the lock to that)."""
    q = shlex.quote
    url = f"https://github.com/{repository}.git"
    return [
        f"git init --quiet {TOOLKIT_DIR}",
        f"git -C {TOOLKIT_DIR} fetch --quiet --depth 1 {q(url)} {q(ref)}",
        f"git -C {TOOLKIT_DIR} checkout --quiet FETCH_HEAD",
        f"python3 -m venv --clear {VENV_DIR}",
        f"{VENV_DIR}/bin/python -m pip install --quiet --disable-pip-version-check "
        f"-r {TOOLKIT_DIR}/requirements.txt ./{TOOLKIT_DIR}",
        f'ln -sf "$CODEBUILD_SRC_DIR/{VENV_DIR}/bin/hyperpod-kit" /usr/local/bin/hyperpod-kit',
    ]


def synth_commands(
    envs: Sequence[tuple[str, str]],
    *,
    connection: Connection,
    repository: str,
    branch: str,
    toolkit_repository: str,
    ref: str,
    name: str,
) -> list[str]:
    """Validate and rehearse each environment, then this very command with the same flags into
    `cdk.out` (both gates on the pipeline and every stage's templates): the assembly the pipeline
    deploys, itself included."""
    q = shlex.quote
    commands = []
    for _, file in envs:
        commands += [f"hyperpod-kit validate {q(file)}", f"hyperpod-kit check --rehearse {q(file)}"]
    flags = [arg for env, file in envs for arg in ("--env", f"{env}={file}")]
    flags += [
        "--connection-arn", connection.arn, "--repository", repository, "--branch", branch,
        "--toolkit-repository", toolkit_repository, "--toolkit-ref", ref, "--name", name,
        "-o", "cdk.out",
    ]  # fmt: skip
    commands.append(" ".join(["hyperpod-kit pipeline codepipeline", *(q(f) for f in flags)]))
    return commands


# --- the command -------------------------------------------------------------------------------


def codepipeline(args: argparse.Namespace) -> int:
    from hyperpod_kit.app import StagedEnvironment
    from hyperpod_kit.constructs.delivery_pipeline import PipelineSource
    from hyperpod_kit.outputs import ASSEMBLY, FolderOutput, OutputError
    from hyperpod_kit.stacks.pipeline import pipeline_stack_name

    try:
        connection = check_connection(args.connection_arn)
        if args.repository is None:
            raise MissingFlagError(
                "--repository", "the repository of the environment files",
                "OWNER/NAME, as the connection reaches it",
            )  # fmt: skip
        repository = check_repository(args.repository, "--repository")
        branch = check_branch(args.branch)
        ref = check_ref(args.toolkit_ref)
        toolkit = toolkit_repository(args.toolkit_repository)
        name = check_name(args.name)
        loaded = loaded_environments(args.envs)
        for env, found in loaded:
            check_account(found, env.file)
            check_same_region(env.name, env.file, found.config.region, connection)
        staged = [StagedEnvironment(env.name, env.file, found.config) for env, found in loaded]
        out = FolderOutput.checked(args.output, ASSEMBLY)
    except (PipelineError, MissingAccountError, OutputError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    source = PipelineSource(repository, branch, connection.arn)
    synth = synth_commands(
        [(e.name, e.file) for e in staged], connection=connection, repository=repository,
        branch=branch, toolkit_repository=toolkit, ref=ref, name=name,
    )  # fmt: skip

    def build(staging: Path) -> None:
        build_pipeline_app(
            staging, name=name, connection=connection, source=source,
            install=install_commands(toolkit, ref), synth=synth, environments=staged,
        )  # fmt: skip

    code = gated_commit(out, args.output, "codepipeline", build)
    if code != EXIT_OK:
        return code
    order = " -> ".join(e.name for e in staged)
    print(
        f"synthesized the pipeline {name} ({order}) -> {args.output}; next, once, with "
        f"credentials of account {connection.account} in {connection.region}: npx cdk deploy "
        f"--app {args.output} {pipeline_stack_name(name)} (from hyperpod-kit's folder, or its "
        "node_modules/.bin/cdk), after bootstrapping every environment's account with --trust "
        f"{connection.account} (docs/pipelines.md)",
        file=sys.stderr,
    )
    return EXIT_OK


def build_pipeline_app(
    outdir: Path,
    *,
    name: str,
    connection: Connection,
    source: PipelineSource,
    install: Sequence[str],
    synth: Sequence[str],
    environments: Sequence[StagedEnvironment],
) -> None:
    """Synthesize the pipeline app into `outdir` (offline; cdk-nag on every stack as an aspect)."""
    from hyperpod_kit.app import build_pipeline, create_app
    from hyperpod_kit.gates import warm_up

    app = create_app(outdir=str(outdir))
    build_pipeline(
        app,
        pipeline_name=name,
        account=connection.account,
        region=connection.region,
        source=source,
        install=install,
        synth=synth,
        cli_version=pinned_cdk_cli(),
        environments=environments,
    )
    warm_up(connection.region)
    app.synth()
