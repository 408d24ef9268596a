"""`diff`, `deploy`, `destroy`: the pinned CDK CLI from node_modules, on the assembly that passed.

One gated path to AWS: the environment file is validated, synthesized into a temporary cloud
assembly and run through both gates (cdk-nag, cfn-lint), exactly as `hyperpod-kit synth` does;
then that very folder is handed to the CDK CLI (`cdk deploy --app DIR`), so the CLI never
re-synthesizes anything ungated. The temporary assembly is ours and removed afterwards.

The CDK CLI is the version hyperpod-kit pins, found in the environment's project
(`node_modules/.bin/cdk` from the environment file's folder upwards, if it is that version) or
fetched once into a per-user cache (hyperpod_kit/cdk_cli.py): resolved before anything is
synthesized, so a machine without Node.js learns it in a second, not after the gates.

Options that hyperpod-kit does not know go to the CDK CLI unchanged (`--profile dev`,
`--require-approval never`, `--exclusively`, `--hotswap`, stack names; `--` ends hyperpod-kit's
own options). `deploy` and `destroy` act on every stack (`--all`) unless stack names are given.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.progress import Progress

# Options of the pinned CDK CLI (package.json) that take a value: the value is not a stack name.
# Array options take every following word up to the next option. Checked against `cdk
# deploy|diff|destroy --help` by tests/unit/test_cli.py. An option missing here only makes
# hyperpod-kit leave out `--all`; the CDK CLI then asks for stack names (never more stacks).
CDK_VALUE_OPTIONS = frozenset(
    {
        "--app", "-a", "--build", "--profile", "--region", "--proxy", "--ca-bundle-path",
        "--role-arn", "-r", "--output", "-o", "--telemetry-file", "--require-approval",
        "--change-set-name", "--method", "-m", "--outputs-file", "-O", "--toolkit-stack-name",
        "--progress", "--monitoring-time-minutes", "--hotswap-ecs-minimum-healthy-percent",
        "--hotswap-ecs-maximum-healthy-percent", "--hotswap-ecs-stabilization-timeout-seconds",
        "--concurrency", "--asset-build-concurrency", "--context-lines", "--template",
        "--fail-on",
    }
)  # fmt: skip
CDK_ARRAY_OPTIONS = frozenset(
    {
        "--context", "-c", "--plugin", "-p", "--unstable", "--build-exclude", "-E",
        "--notification-arns", "--rollback-trigger-alarm-arns", "--tags", "-t", "--parameters",
    }
)  # fmt: skip
_ENVIRONMENT_SUFFIXES = (".yaml", ".yml")


def cdk_binary(environment_file: Path | str, progress: Progress) -> Path:
    """The pinned CDK CLI for this environment file: its project's, else the per-user cache's,
    fetched now if need be (`cdk_cli.resolve`); `CdkCliError` (one line) if none can be had."""
    from hyperpod_kit.cdk_cli import resolve

    return resolve(environment_file, say=progress.line)


def stack_names(args: Sequence[str]) -> list[str]:
    """The words of a CDK command line that are, or may be, stack names.

    Not: options, the value of a single-value option, nor a `KEY=VALUE` or `arn:...` word after
    an array option. Any other word after an array option counts (the CDK CLI would take it as
    one more value, but a user may have meant a stack): with a stack name, hyperpod-kit never
    adds `--all`, so the doubt costs at worst a question from the CDK CLI, never more stacks.
    """
    names: list[str] = []
    taking: str | None = None  # "one" after a value option, "many" after an array option
    for arg in args:
        if arg.startswith("-") and len(arg) > 1:
            option, has_value = arg.split("=", 1)[0], "=" in arg
            if option in CDK_VALUE_OPTIONS and not has_value:
                taking = "one"
            elif option in CDK_ARRAY_OPTIONS and not has_value:
                taking = "many"
            else:
                taking = None
        elif taking == "one":
            taking = None
        elif taking != "many" or not ("=" in arg or ":" in arg):
            names.append(arg)
    return names


def refusal(command: str, extra: Sequence[str]) -> str | None:
    """Why these CDK options cannot be passed on (one line), or None."""
    for arg in extra:
        if arg.split("=", 1)[0] in {"--app", "-a"}:
            return (
                f"{arg}: hyperpod-kit {command} hands the CDK CLI the assembly it has just "
                f"validated and gated, never another app. Hint: leave out {arg.split('=', 1)[0]} "
                "(for an assembly of your own, run `npx cdk` directly)"
            )
    for name in stack_names(extra):
        if name.endswith(_ENVIRONMENT_SUFFIXES):
            return (
                f"{name}: an environment file must come right after `{command}`; after CDK "
                f"options it would be taken for a stack name. Hint: hyperpod-kit {command} "
                f"{name} [CDK OPTIONS]"
            )
    return None


def cdk_arguments(command: str, assembly: Path, extra: Sequence[str]) -> list[str]:
    """The CDK CLI's arguments (after the binary): our defaults, unless `extra` sets them."""
    given = {arg.split("=", 1)[0] for arg in extra if arg.startswith("-")}
    args = [command, "--app", str(assembly)]
    if command in {"deploy", "destroy"} and "--all" not in given and not stack_names(extra):
        args.append("--all")
    if command == "deploy":
        # Stacks deploy in dependency order, independent ones side by side.
        if "--concurrency" not in given:
            args += ["--concurrency", "4"]
        if "--require-approval" not in given:
            args += ["--require-approval", "broadening"]
    if command == "diff":
        # `cdk diff` compares every stack unless given names, and has no --all (it warns).
        extra = [arg for arg in extra if arg != "--all"]
    return args + list(extra)


def _cannot_run(command: str, extra: Sequence[str], region: str) -> str | None:
    """Why the CDK CLI cannot be handed this command (one line), or None. All of it is known
    before anything is synthesized (and before the CDK CLI is looked for, or fetched)."""
    why = refusal(command, extra)
    if why is not None:
        return why + "."
    return missing_credentials(command, region, extra) if command in NEEDS_CREDENTIALS else None


QUIET = ("-q", "--quiet")  # the CDK CLI's (and passed on); they silence our progress lines too
# Commands the CDK CLI cannot run without credentials: checked before anything is synthesized
# (`diff` is left alone: CI runs it without credentials, and the CDK CLI says what it could not do).
NEEDS_CREDENTIALS = frozenset({"deploy", "destroy"})


def _option_value(extra: Sequence[str], option: str) -> str | None:
    """The value of `option` (`--profile NAME` or `--profile=NAME`) among the CDK options."""
    for i, arg in enumerate(extra):
        if arg == option and i + 1 < len(extra):
            return extra[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def missing_credentials(command: str, region: str, extra: Sequence[str]) -> str | None:
    """Why the CDK CLI would find no credentials (one line), or None: botocore's own chain (the
    environment, AWS_PROFILE or the `--profile` passed on, the shared files, SSO, a container or
    instance role), resolved locally as botocore does; no AWS API is called."""
    from botocore.exceptions import BotoCoreError

    from hyperpod_kit.config.aws import AwsFacade, resolve_session

    profile = _option_value(extra, "--profile")
    hint = (
        "configure credentials (aws configure, AWS_PROFILE or --profile NAME, aws sso login, "
        "or an instance role); `hyperpod-kit synth`, `plan` and `diff` need none"
    )
    try:
        session = resolve_session(region, profile=profile)
        found = AwsFacade(region, session=session).has_credentials()
    except BotoCoreError as e:  # a profile that is not configured
        return f"{command}: --profile {profile}: {e}; nothing was synthesized. Hint: {hint}."
    if found:
        return None
    where = f" for --profile {profile}" if profile else ""
    return (
        f"{command}: no AWS credentials found{where}, so the CDK CLI could not {command}; nothing "
        f"was synthesized. Hint: {hint}."
    )


def _ready(
    command: str, loaded: LoadedEnvironment, extra: Sequence[str], progress: Progress
) -> Path | str:
    """The CDK CLI to hand this command to, or why it cannot be (one line). Before the synth:
    a missing Node.js is said in a second, not after the gates."""
    from hyperpod_kit.cdk_cli import CdkCliError

    why = _cannot_run(command, extra, loaded.config.region)
    if why is not None:
        return why
    try:
        return cdk_binary(loaded.file, progress)
    except CdkCliError as e:
        return str(e)


def run_cdk(command: str, loaded: LoadedEnvironment, extra: list[str]) -> int:
    from hyperpod_kit.cli.synth import gated_assembly
    from hyperpod_kit.outputs import write_error

    progress = Progress(command, quiet=any(arg in QUIET for arg in extra))
    cdk = _ready(command, loaded, extra, progress)
    if isinstance(cdk, str):
        print(cdk, file=sys.stderr)
        return 2
    lock = None
    if command == "deploy" and loaded.pins is not None:  # what is deployed is what is locked
        from hyperpod_kit.lock import lock_write
        from hyperpod_kit.outputs import OutputError

        try:
            lock = lock_write(loaded, loaded.pins)
        except OutputError as e:
            print(e, file=sys.stderr)
            return 2
    try:
        with tempfile.TemporaryDirectory(prefix=f"hyperpod-kit-{command}.") as tmp:
            assembly = Path(tmp) / "cdk.out"
            report = gated_assembly(loaded, assembly, progress)
            if not report.ok:
                print(
                    f"{command} stopped by the gates: {len(report.errors)} errors; the CDK CLI "
                    "was not run, nothing was sent to AWS",
                    file=sys.stderr,
                )
                return 2 if report.traced else 1
            if command == "deploy":
                from hyperpod_kit.rehearsal import rehearse_assembly

                with progress.stage("rehearsal"):
                    rehearsal = rehearse_assembly(
                        assembly, loaded.config, workdir=Path(tmp) / "actors"
                    )
                print(rehearsal.render(), file=sys.stderr)
                if not rehearsal.ok:
                    print(
                        f"deploy stopped by the rehearsal: {len(rehearsal.problems)} problems; "
                        "the CDK CLI was not run, nothing was sent to AWS",
                        file=sys.stderr,
                    )
                    return 1
            if lock is not None and lock.changes:
                from hyperpod_kit.outputs import write_file

                write_file(lock)
                progress.line(f"wrote the version lock {lock.target.name}")
            progress.line(f"handing over to the CDK CLI (cdk {command})")
            return subprocess.call([str(cdk), *cdk_arguments(command, assembly, extra)])
    except OSError as e:
        print(write_error(e, tempfile.gettempdir()), file=sys.stderr)
        return 2
