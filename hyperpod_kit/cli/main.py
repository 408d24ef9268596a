"""`hyperpod-kit`: validate, schema, synth, plan, check, jobs, diff, deploy, destroy.

Exit codes: 0 success; 1 a gate or the CDK CLI failed; 2 bad input (the environment file or the
command line), reported as ``FILE:LINE path: message. Hint: ...`` with nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hyperpod_kit import __version__
from hyperpod_kit.config import ConfigError, Level, LoadedEnvironment, load_environment
from hyperpod_kit.config.findings import Finding

DEFAULT_FILE = "environments/default.yaml"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hyperpod-kit",
        description="Declarative SageMaker HyperPod environments: one environment file in, "
        "CDK stacks out.",
    )
    p.add_argument("--version", action="version", version=f"hyperpod-kit {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def env_command(name: str, help: str) -> argparse.ArgumentParser:
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
        return c

    v = env_command("validate", "check an environment file; exit 2 if it has an error")
    v.add_argument("--format", choices=["text", "json"], default="text")
    v.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    v.add_argument(
        "--aws",
        action="store_true",
        help="also ask the account (AZ IDs, HyperPod quotas); needs credentials, else a warning",
    )

    s = sub.add_parser("schema", help="print the environment file's JSON Schema (for editors)")
    s.add_argument("-o", "--output", help="write to this file instead of stdout")
    s.add_argument(
        "--markdown", action="store_true", help="the configuration reference, as Markdown"
    )

    syn = env_command("synth", "validate, synthesize offline to cdk.out, run cdk-nag and cfn-lint")
    syn.add_argument("-o", "--output", default="cdk.out", help="cloud assembly folder (cdk.out)")

    jobs = env_command("jobs", "render the job template (sbatch or HyperPodPyTorchJob) to a folder")
    jobs.add_argument("-o", "--output", default="jobs", help="folder for the job files (jobs)")
    jobs.add_argument("--image", help="trainer image URI (default: looked up at submit time)")

    pln = env_command("plan", "what a deploy of FILE would change against a baseline cdk.out")
    pln.add_argument("--baseline", default="cdk.out", help="assembly of the deployed version")
    pln.add_argument(
        "--allow-replacement",
        action="store_true",
        help="exit 0 even when a file system, bucket or cluster would be replaced or removed",
    )

    chk = sub.add_parser("check", help="run the gates (cdk-nag, cfn-lint) on an existing cdk.out")
    chk.add_argument("assembly", nargs="?", default="cdk.out")

    for name, what in (
        ("diff", "validate, then `cdk diff` against the deployed stacks"),
        ("deploy", "validate, then `cdk deploy` every stack in order"),
        ("destroy", "validate, then `cdk destroy` (retained data stays)"),
    ):
        c = env_command(name, what)
        c.add_argument(
            "cdk_args", nargs=argparse.REMAINDER, help="passed on to the CDK CLI after --"
        )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "schema":
        return _schema(args.output, markdown=args.markdown)
    if args.command == "check":
        from hyperpod_kit.cli.synth import check

        return check(Path(args.assembly))
    as_json = getattr(args, "format", "text") == "json"
    loaded = _load(
        args.file,
        args.suppress,
        quiet=getattr(args, "quiet", False),
        as_json=as_json,
        aws=getattr(args, "aws", False),
    )
    if loaded is None:
        return EXIT_BAD_INPUT
    handlers = {"validate": _validate, "synth": _synth, "jobs": _jobs, "plan": _plan}
    handler = handlers.get(args.command, _cdk)
    return handler(loaded, args)


def _validate(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    return EXIT_OK


def _synth(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.synth import synth

    return synth(loaded, Path(args.output))


def _plan(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.synth import plan

    return plan(loaded, Path(args.baseline), allow_replacement=args.allow_replacement)


def _cdk(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.cli.cdk import run_cdk

    return run_cdk(args.command, loaded, [a for a in args.cdk_args if a != "--"])


def _load(
    file: str, suppress: list[str], *, quiet: bool, as_json: bool, aws: bool = False
) -> LoadedEnvironment | None:
    """Load and print findings; None (after printing why) when the file has an error."""
    facade = None
    if aws:
        from hyperpod_kit.config.aws import AwsFacade

        facade = AwsFacade(_region_of(file))
    try:
        loaded = load_environment(file, suppress=suppress, aws=facade)
    except ConfigError as e:
        _print_findings(e.file, e.findings, as_json=as_json, stream=sys.stderr)
        return None
    shown = [f for f in loaded.findings if not quiet or f.level is Level.ERROR]
    _print_findings(loaded.file, shown, as_json=as_json, stream=sys.stderr)
    if not quiet and not as_json:
        print(f"{loaded.file}: valid ({_counts(loaded.findings)})", file=sys.stderr)
    return loaded


def _region_of(file: str) -> str:
    """The file's region, for the AWS facade; a file without one fails later with a finding."""
    import yaml

    try:
        data = yaml.safe_load(Path(file).read_text())
        region = data.get("region") if isinstance(data, dict) else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        region = None
    return region if isinstance(region, str) else "us-east-1"


def _counts(findings: list[Finding]) -> str:
    warnings = sum(1 for f in findings if f.level is Level.WARNING)
    infos = sum(1 for f in findings if f.level is Level.INFO)
    return f"{warnings} warnings, {infos} infos"


def _print_findings(file: str, findings: list[Finding], *, as_json: bool, stream: object) -> None:
    if as_json:
        rows = [
            {
                "file": file,
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
    from hyperpod_kit.jobs import render_jobs

    output = Path(args.output)
    rendered = render_jobs(loaded.config, image=args.image)
    output.mkdir(parents=True, exist_ok=True)
    for job in rendered:
        (output / job.filename).write_text(job.text)
        print(f"wrote {output / job.filename}", file=sys.stderr)
    return EXIT_OK


def _schema(output: str | None, *, markdown: bool) -> int:
    from hyperpod_kit.config.jsonschema import environment_schema
    from hyperpod_kit.config.reference import markdown_reference

    text = markdown_reference() if markdown else json.dumps(environment_schema(), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
