"""`hyperpod-kit`: init, validate, estimate, schema, synth, plan, check (--rehearse), jobs, diff,
deploy, destroy, status, logs, nodes, verify, pipeline.

Exit codes: 0 success; 1 a gate or the CDK CLI failed; 2 bad input (the environment file or the
command line), reported as ``FILE:LINE path: message. Hint: ...`` (or ``PATH: message. Hint:
...`` for an output path) with nothing written; `plan` also exits 1 for a dangerous change and
3 for one AWS or the nodes refuse (see its --help); `status` exits 1 for an environment that is
not healthy, and 2 without credentials or with nothing deployed (cli/status.py); `nodes`
exits 1 when HyperPod refuses a node and 2 on a guard (cli/nodes.py); `verify` exits 1 for a
figure below its floor or a check that failed or could not run (cli/verify.py). Every write
goes through `hyperpod_kit.outputs`: an output replaces only what hyperpod-kit wrote.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hyperpod_kit.config import ConfigError, Level
from hyperpod_kit.config.environment import LoadedEnvironment, load_environment
from hyperpod_kit.config.findings import Finding
from hyperpod_kit.files import fileio
from hyperpod_kit.process import quick_exit, silence_jsii
from hyperpod_kit.progress import Progress

DEFAULT_FILE = "environments/default.yaml"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
CDK_COMMANDS = ("diff", "deploy", "destroy")
_CDK_EPILOG = (
    "Options that hyperpod-kit does not know go to the CDK CLI unchanged, e.g. --profile NAME, "
    "--require-approval never, --exclusively, --hotswap, --all, or stack names (then only those "
    "stacks; without any, every stack). Give FILE first; `--` ends hyperpod-kit's own options."
)
_PLAN_EPILOG = """\
Nested stacks (Studio profiles, spaces, partition gates) are compared too. Each changed property
is classed by the update rules (hyperpod_kit/config/facts/update_rules.json, merged with
cfn-lint's create-only properties): replace, refused by the service, nodes recreated, new nodes
only, safe. People (users file, Studio profiles) are compared by name; plan cannot tell a
re-added person from a new one.

--deployed reads the baseline from CloudFormation (GetTemplate, the template as submitted, of
each stack the file synthesizes and of its nested stacks; the users file from its bucket): a
stack not deployed is added; one in progress, failed or rolled back is named in a warning. It
also asks the live cluster (DescribeCluster): a group an operator scaled up or added by hand,
which the deploy would scale back or remove, is a dangerous change (counts of an autoscaled
cluster are Karpenter's and not compared).

exit codes:
  0  nothing dangerous
  1  something stateful replaced or removed, nodes recreated, or people removed
     (--allow-replacement turns this into 0)
  2  bad input: the environment file, or a baseline that cannot be read; with --deployed,
     no credentials or nothing of the file deployed (one line says what)
  3  a change AWS refuses (the deploy would fail half-way) or the nodes would not follow
     (a uid changed or reused); no flag turns this into 0"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hyperpod-kit",
        description="Declarative SageMaker HyperPod environments: one environment file in, "
        "CDK stacks out.",
    )
    p.add_argument(
        "--version",
        action=_VersionAction,
        help="print hyperpod-kit's version and those of aws-cdk-lib, the pinned CDK CLI, "
        "cfn-lint and botocore, one a line, and exit",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def env_command(name: str, help: str, *, quiet: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument(
            "file", nargs="?", default=DEFAULT_FILE, help=f"environment file ({DEFAULT_FILE})"
        )
        c.add_argument(
            "--suppress",
            action="append",
            default=[],
            metavar="CHECK",
            help="hide warnings and infos of this check (repeatable)",
        )
        if quiet:  # diff, deploy, destroy: -q/--quiet is the CDK CLI's
            c.add_argument(
                "-q",
                "--quiet",
                action="store_true",
                help="errors only: no warnings or infos of the file, no progress lines",
            )
        return c

    v = env_command("validate", "check an environment file; exit 2 if it has an error")
    v.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: one line per finding on stderr; json: a list of findings on stdout (text)",
    )
    v.add_argument(
        "--aws",
        action="store_true",
        help="also ask the account (AZ IDs, HyperPod quotas); needs credentials, else a warning",
    )
    v.add_argument(
        "--explain",
        metavar="KEY",
        help="print KEY's final value and the file and line that set it, through the files it "
        "extends (a dotted path; list items by name or [index]: "
        "cluster.instance_groups.compute.instance_count); on stdout",
    )

    _add_schema(sub)

    what = "validate, synthesize offline to cdk.out, run cdk-nag and cfn-lint"
    _add_synth(env_command("synth", what))

    from hyperpod_kit.cli.lock import add_lock_parser

    add_lock_parser(env_command("lock", "write the environment's version lock (<name>.lock.json)"))

    from hyperpod_kit.cli.job import add_job_parser, add_render_arguments

    add_render_arguments(
        env_command("jobs", "render the job template (sbatch or HyperPodPyTorchJob) to a folder "
                    "(the same as `job render`)"),
        output_help="folder for the job files (jobs): new, empty, or one that hyperpod-kit wrote",
    )  # fmt: skip
    add_job_parser(sub, DEFAULT_FILE)

    _add_plan(
        env_command(
            "plan",
            "what a deploy of FILE would change against a baseline cdk.out or what is deployed",
        )
    )

    what = "run the gates (cdk-nag, cfn-lint) on an existing cloud assembly"
    chk = sub.add_parser(
        "check",
        help=what,
        description=f"{what}, e.g. after `npx cdk synth`; exit 1 if a gate finds an error",
    )
    chk.add_argument(
        "assembly", nargs="?", default=None, help="cloud assembly folder (default: cdk.out)"
    )
    chk.add_argument(
        "--rehearse",
        metavar="FILE",
        help="instead: synthesize environment FILE to a temporary folder and rehearse its deploy "
        "offline (every actor's AWS calls against the grants that exist when it runs); exit 1 "
        "on a call that would be denied, 2 on a bad file",
    )
    chk.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="with --rehearse: the report as text (stderr) or JSON (stdout)",
    )
    chk.add_argument(
        "-q", "--quiet", action="store_true",
        help="errors only: no warnings or infos of the file, no progress lines",
    )  # fmt: skip
    chk.add_argument(
        "--suppress", action="append", default=[], metavar="CHECK",
        help="with --rehearse: hide warnings and infos of this check (repeatable)",
    )  # fmt: skip

    from hyperpod_kit.cli import estimate

    estimate.add_estimate_arguments(env_command("estimate", estimate.ESTIMATE_HELP, quiet=False))

    from hyperpod_kit.cli.init import add_init_parser

    add_init_parser(sub)

    from hyperpod_kit.cli.pipeline import add_pipeline_parser

    add_pipeline_parser(sub)

    from hyperpod_kit.cli import status

    status.add_status_arguments(env_command("status", status.STATUS_HELP))
    status.add_logs_arguments(env_command("logs", status.LOGS_HELP))

    from hyperpod_kit.cli import nodes

    nodes.add_nodes_arguments(env_command("nodes", nodes.NODES_HELP))

    from hyperpod_kit.cli import verify

    verify.add_verify_arguments(env_command("verify", verify.VERIFY_HELP))

    gated = "validate, synthesize and gate, then the pinned CDK CLI's"
    for name, what in (
        ("diff", f"{gated} `cdk diff` of that assembly against the deployed stacks"),
        ("deploy", f"{gated} `cdk deploy` of that very assembly, every stack in order"),
        ("destroy", f"{gated} `cdk destroy` of its stacks (retained data stays)"),
    ):
        c = env_command(name, what, quiet=False)
        c.epilog = _CDK_EPILOG
        c.usage = "%(prog)s [-h] [--suppress CHECK] [file] [CDK OPTIONS ...] [-- CDK ARGS ...]"
    from hyperpod_kit.cli.arguments import declare_kinds

    return declare_kinds(p)


class _VersionAction(argparse.Action):
    """`--version`: several lines, as written (argparse's own would refill them into one), read
    only when asked for (docs/versions.md)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from hyperpod_kit.versions import version_report

        sys.stdout.write(version_report())
        parser.exit()


def run() -> int:
    """The `hyperpod-kit` console script: `main()`, then a quick way out (see `quick_exit`)."""
    code = main()
    quick_exit()
    return code


def _add_schema(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    what = "print the environment file's JSON Schema (for editors), or the Markdown reference"
    s = sub.add_parser(
        "schema",
        help=what,
        description=f"{what}. An existing file is overwritten only with --force.",
    )
    s.add_argument("-o", "--output", metavar="FILE", help="write to this file instead of stdout")
    s.add_argument(
        "--markdown", action="store_true", help="the configuration reference, as Markdown"
    )
    s.add_argument(
        "--force", action="store_true", help="overwrite FILE if it exists with other content"
    )


def _add_plan(pln: argparse.ArgumentParser) -> None:
    pln.formatter_class = argparse.RawDescriptionHelpFormatter
    pln.epilog = _PLAN_EPILOG
    against = pln.add_mutually_exclusive_group()
    against.add_argument(
        "--baseline", default="cdk.out", help="assembly of the deployed version (cdk.out)"
    )
    against.add_argument(
        "--deployed",
        action="store_true",
        help="compare with what CloudFormation holds now (needs credentials; the file's region), "
        "and with the instance counts of the live cluster (a group scaled up or added by hand "
        "that the deploy would undo is dangerous)",
    )
    pln.add_argument(
        "--allow-replacement",
        action="store_true",
        help="exit 0 even when something stateful is replaced or removed, nodes are recreated "
        "or people removed (never for a change AWS refuses: exit 3 stays)",
    )
    pln.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="text (default), json (stable keys, see docs/architecture.md) or markdown (a "
        "summary line and a table, for a pull-request comment); on stdout",
    )


def _add_synth(syn: argparse.ArgumentParser) -> None:
    syn.add_argument(
        "-o",
        "--output",
        default="cdk.out",
        metavar="DIR",
        help="cloud assembly folder (cdk.out); replaced only if missing, empty or written by "
        "hyperpod-kit; a rejected assembly goes to DIR.rejected",
    )
    syn.add_argument(
        "--update-lock",
        action="store_true",
        help="take this hyperpod-kit's defaults where they differ from the environment's lock "
        "(FILE's <name>.lock.json, written beside it); without it such a difference is refused",
    )


def main(argv: Sequence[str] | None = None) -> int:
    silence_jsii()
    argv = list(sys.argv[1:] if argv is None else argv)
    cdk_args: list[str] = []
    if argv and argv[0] in CDK_COMMANDS:
        ours, cdk_args = split_cdk_argv(argv[1:])
        argv = [argv[0], *ours]
    args = _parser().parse_args(argv)
    args.cdk_args = cdk_args
    fileio.reset_inputs()  # the inputs of this command, which no output may touch
    try:
        return _dispatch(args)
    except fileio.PathError as e:  # an input or an output refused: one line
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except ConfigError as e:  # a value CDK refused while the stacks were built (`built`)
        for finding in e.findings:
            print(finding.render(e.file), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def split_cdk_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split what follows `diff|deploy|destroy` into hyperpod-kit's arguments and the CDK CLI's.

    Ours: the environment file (the first word, if it comes before any other option), --suppress
    and --help. Everything else goes to the CDK CLI in order; after `--`, everything.
    """
    ours: list[str] = []
    theirs: list[str] = []
    words = iter(argv)
    file_allowed = True
    for word in words:
        if word == "--":
            theirs += list(words)
        elif word in ("-h", "--help") or word.startswith("--suppress="):
            ours.append(word)
        elif word == "--suppress":
            ours += [word, *itertools.islice(words, 1)]  # argparse reports a missing value
        elif word.startswith("-") and word != "-":
            theirs.append(word)
            file_allowed = False
        elif file_allowed:
            ours.append(word)
            file_allowed = False
        else:
            theirs.append(word)
    return ours, theirs


def _writer(args: argparse.Namespace) -> int:
    """`init FILE`, `init --project DIR` (cli/project.py builds on cli/init.py), `pipeline`."""
    from hyperpod_kit.cli.init import init
    from hyperpod_kit.cli.pipeline import pipeline
    from hyperpod_kit.cli.project import init_project

    if args.command == "pipeline":
        return pipeline(args)
    return (init if args.project is None else init_project)(args)


def _check_alone(args: argparse.Namespace) -> int | None:
    """`check [ASSEMBLY]`: the gates of an assembly, no environment file. None for
    `check --rehearse FILE`, which loads the file like the other commands; an ASSEMBLY with it
    is refused (the rehearsal synthesizes FILE itself and would ignore it)."""
    if args.rehearse is None:
        from hyperpod_kit.cli.synth import check

        return check(Path(args.assembly or "cdk.out"), _progress(args))
    if args.assembly is None:
        return None
    print(
        f"{args.assembly}: check --rehearse synthesizes {args.rehearse} itself and does not "
        "read an assembly (one synthesized earlier may be of another version of the file). "
        f"Hint: `hyperpod-kit check --rehearse {args.rehearse}`; the gates of an existing "
        f"assembly alone are `hyperpod-kit check {args.assembly}`.",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def _without_file(args: argparse.Namespace) -> int | None:
    """The commands that read no environment file: `check [ASSEMBLY]`, and `verify --results
    PATH` (a local file: no FILE, no AWS). None for the others."""
    if args.command == "check":
        return _check_alone(args)
    if args.command == "verify" and args.results is not None:
        from hyperpod_kit.cli.verify import verify_results

        return verify_results(args)
    return None


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "schema":
        return _schema(args.output, markdown=args.markdown, force=args.force)
    if args.command in ("init", "pipeline"):  # commands that write files, not environments
        return _writer(args)
    if args.command == "estimate":
        from hyperpod_kit.cli.estimate import estimate

        loaded = _load(args.file, args.suppress, quiet=True, as_json=False)
        return EXIT_BAD_INPUT if loaded is None else estimate(loaded, args)
    if (answered := _without_file(args)) is not None:
        return answered
    if args.command == "check":
        args.file = args.rehearse
    if args.command == "nodes":  # `nodes ACTION ...` with the default file
        from hyperpod_kit.cli.nodes import file_first

        file_first(args, DEFAULT_FILE)
    # validate's findings are its output; for plan and check --rehearse, --format is for their
    # report (the file's findings go to stderr as text)
    as_json = args.command == "validate" and getattr(args, "format", "text") == "json"
    as_json = as_json and getattr(args, "explain", None) is None  # then stdout is the answer
    loaded = _load(
        args.file,
        args.suppress,
        quiet=getattr(args, "quiet", False),
        as_json=as_json,
        aws=getattr(args, "aws", False),
        lock=args.command in LOCKED_COMMANDS,
        update_lock=getattr(args, "update_lock", False),
        warn_drift=args.command in DRIFT_WARNS,
    )
    if loaded is None:
        return EXIT_BAD_INPUT
    handlers = {
        "validate": _validate, "synth": _synth, "jobs": _jobs, "job": _job, "plan": _plan,
        "check": _rehearse,
        "status": _status, "logs": _logs, "lock": _lock, "nodes": _nodes, "verify": _verify,
    }  # fmt: skip
    handler = handlers.get(args.command, _cdk)
    return handler(loaded, args)


# Commands whose result depends on the version lock: it is read (a drift refused) before them.
LOCKED_COMMANDS = frozenset({"validate", "synth", "plan", "check", "diff", "deploy", "destroy"})
# ...except these, which deploy nothing: a drifted lock is a warning (the locked values are used).
DRIFT_WARNS = frozenset({"destroy"})


def _lock(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.lock import lock

    return lock(loaded, args)


def _validate(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    if args.explain is not None:
        from hyperpod_kit.cli.explain import explain_key

        return explain_key(loaded, args.explain, as_json=args.format == "json")
    return EXIT_OK


def _synth(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.synth import synth

    return synth(loaded, Path(args.output), _progress(args))


def _plan(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.synth import plan

    return plan(
        loaded,
        None if args.deployed else Path(args.baseline),
        allow_replacement=args.allow_replacement,
        output_format=args.format,
        progress=_progress(args),
    )


def _rehearse(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.synth import rehearse

    return rehearse(loaded, as_json=args.format == "json", progress=_progress(args))


def _progress(args: argparse.Namespace) -> Progress:
    """The command's stage lines on stderr (hyperpod_kit/progress.py); none with --quiet."""
    return Progress(args.command, quiet=args.quiet)


def _status(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.status import status

    return status(loaded, args)


def _logs(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.status import logs

    return logs(loaded, args)


def _nodes(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.nodes import nodes

    return nodes(loaded, args)


def _verify(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.verify import verify

    return verify(loaded, args)


def _cdk(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.cdk import run_cdk

    return run_cdk(args.command, loaded, list(args.cdk_args))


def _load(
    file: str,
    suppress: list[str],
    *,
    quiet: bool,
    as_json: bool,
    aws: bool = False,
    lock: bool = False,
    update_lock: bool = False,
    warn_drift: bool = False,
) -> LoadedEnvironment | None:
    """Load and print findings; None (after printing why) when the file has an error. With
    `lock`, the environment's version lock is applied too (hyperpod_kit/lock.py), and a lock that
    refuses is an error like the file's (a drift only a warning with `warn_drift`)."""
    facade = None
    if aws:
        from hyperpod_kit.config.aws import AwsFacade

        facade = AwsFacade(_region_of(file))
    try:
        loaded = load_environment(file, suppress=suppress, aws=facade)
        if lock:
            from hyperpod_kit.lock import LockError, lock_environment

            try:
                loaded, _ = lock_environment(loaded, update=update_lock, warn_drift=warn_drift)
            except LockError as e:
                raise ConfigError(file, [*loaded.findings, *e.findings]) from None
    except ConfigError as e:
        # --quiet is errors only, also when the file has one: its warnings and infos stay hidden
        _print_findings(e.file, _shown(e.findings, quiet), as_json=as_json, stream=sys.stderr)
        return None
    _print_findings(loaded.file, _shown(loaded.findings, quiet), as_json=as_json, stream=sys.stderr)
    if not quiet and not as_json:
        print(f"{loaded.file}: valid ({_counts(loaded.findings)})", file=sys.stderr)
    return loaded


def _shown(findings: list[Finding], quiet: bool) -> list[Finding]:
    """What is printed: every finding, or with --quiet the errors only."""
    return [f for f in findings if not quiet or f.level is Level.ERROR]


def _region_of(file: str) -> str:
    """The file's region, for the AWS facade, read within the loader's bounds (a hostile file
    cannot hang or crash this); a file without one fails later with a finding."""
    from hyperpod_kit.config.environment import peek_region

    return peek_region(file) or "us-east-1"


def _counts(findings: list[Finding]) -> str:
    warnings = sum(1 for f in findings if f.level is Level.WARNING)
    infos = sum(1 for f in findings if f.level is Level.INFO)
    return f"{warnings} warnings, {infos} infos"


def _print_findings(file: str, findings: list[Finding], *, as_json: bool, stream: object) -> None:
    if as_json:
        rows = [
            {
                "file": f.file or file,
                "line": f.line,
                "level": f.level.name.lower(),
                "path": f.path,
                "message": f.message,
                "hint": f.hint,
                "check": f.check,
            }
            for f in findings
        ]
        print(json.dumps(rows, indent=2), file=sys.stdout)
        return
    for f in findings:
        print(f.render(file), file=stream)  # type: ignore[call-overload]


def _jobs(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.job import render_command

    return render_command(loaded, args)


def _job(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.job import job

    return job(loaded, args)


def _schema(output: str | None, *, markdown: bool, force: bool) -> int:
    from hyperpod_kit.config.jsonschema import environment_schema
    from hyperpod_kit.config.reference import markdown_reference
    from hyperpod_kit.outputs import check_file, write_error, write_file

    text = markdown_reference() if markdown else json.dumps(environment_schema(), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            write_file(check_file(output, text, force=force))
        except OSError as e:
            print(write_error(e, output), file=sys.stderr)
            return EXIT_BAD_INPUT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run())
