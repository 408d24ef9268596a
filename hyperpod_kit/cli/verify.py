"""`hyperpod-kit verify`: judge a run of the verify suite against its floors (issue #28).

The suite itself runs on the cluster (`hyperpod-kit-verify` on the login node, docs/verify.md);
this command reads a run's records, from the cluster's log group (`--report`, credentials and
the deployed cluster needed) or a local JSON Lines file (`--results PATH`, nothing else needed),
judges them (`hyperpod_kit.verify.judge`), prints the table (or JSON), and writes report.json and
the pictures into the report folder through the house output layer (`hyperpod_kit.outputs`).
Without either it prints the command to run on the cluster (with the trainer image) and how to
judge its run, and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import TYPE_CHECKING

from hyperpod_kit.config.derived import worker_groups
from hyperpod_kit.outputs import VERIFY, FolderOutput, write_error
from hyperpod_kit.text import printable

if TYPE_CHECKING:  # boto3 and the records are imported when verify runs, not for the parser
    from hyperpod_kit.config.environment import LoadedEnvironment
    from hyperpod_kit.verify.cloudwatch import Found
    from hyperpod_kit.verify.records import Line

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_OUT = "verify-report"
RECORD_HINT = (
    'each line of a verify run is one JSON object with "run" and "type" (the records of '
    "docs/verify.md), as hyperpod-kit-verify writes them"
)

VERIFY_HELP = (
    "judge a run of the verify suite (run on the cluster: hyperpod-kit-verify on the login "
    "node) against its floors: a table, report.json and pictures"
)

_EPILOG = """\
The suite runs on the cluster, not here: `hyperpod-kit-verify` on the login node (docs/verify.md)
writes the run's records to <fsx>/hyperpod-kit-verify/<run>/results.jsonl and, through the log
shipper, to the cluster's log group (streams hyperpod-kit/jobs/<run>/<instance-id>). This command
judges a run:

  hyperpod-kit verify FILE --report           the newest run in FILE's cluster's log group
  hyperpod-kit verify --results results.jsonl  a local copy (or make verify-demo's); no
                                               credentials, FILE is not read

Each figure is judged against its floor: the GPUs and EFA devices of the node's instance type
(instance_types.json, exact counts), the all-reduce bus bandwidth of the type and node count
(verify_floors.json, under its margin x the floor is below), the file system's provisioned
throughput (the run's own record). A figure without a floor is "no-floor", never a guess.
The report folder (--out, verify-report) gets report.json (what --format json prints) and, with
matplotlib (pip install 'hyperpod-kit[verify]'), allreduce.png and fsx.png; it is replaced only
if missing, empty or an earlier report.

exit codes:
  0  every figure passes or has no floor
  1  a figure below its floor, a failed check, or a check that could not run (or a run that
     did not finish)
  2  bad input: a damaged record (SOURCE:LINE: reason), an unknown --run, no run at all, the
     file, an EKS environment, no credentials or nothing deployed (with --report)

Without --report or --results, `verify FILE` prints the command to run on the cluster, with
the trainer image its all-reduce job runs, and exits 0."""


def add_verify_arguments(v: argparse.ArgumentParser) -> None:
    v.epilog = _EPILOG
    v.formatter_class = argparse.RawDescriptionHelpFormatter
    v.add_argument(
        "--report",
        action="store_true",
        help="judge the newest run in the cluster's log group (needs AWS credentials "
        "and the deployed cluster); with --results, that file instead",
    )
    v.add_argument(
        "--results",
        metavar="PATH",
        help="judge the run in this JSON Lines file (results.jsonl of a run, or "
        "make verify-demo's); no credentials needed, FILE is not read",
    )
    v.add_argument(
        "--run", metavar="RUN", help="this run (verify-YYYYMMDDTHHMMSSZ) instead of the newest"
    )
    v.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="the report on stdout as a table (text) or JSON",
    )
    v.add_argument(
        "--out",
        metavar="DIR",
        help=f"the report folder: report.json and the pictures ({DEFAULT_OUT}); "
        "replaced only if missing, empty or a report hyperpod-kit wrote",
    )


def _output(args: argparse.Namespace) -> FolderOutput:
    """The report folder, checked before anything is read from AWS (OutputError: exit 2)."""
    return FolderOutput.checked(args.out or DEFAULT_OUT, VERIFY)


def verify_results(args: argparse.Namespace) -> int:
    """`verify --results PATH`: a local file, no environment file and no AWS."""
    from hyperpod_kit.files import fileio
    from hyperpod_kit.verify.records import MAX_RESULTS_BYTES, lines_of

    text = fileio.read_text(
        args.results,
        limit=MAX_RESULTS_BYTES,
        what="results file",
        hint="give the results.jsonl of a verify run",
    )
    output = _output(args)
    return _report(lines_of(text, args.results), args, output, source=args.results)


def verify(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    """`verify FILE --report`: the run from the cluster's log group; `verify FILE`: how."""
    config = loaded.config
    if config.orchestrator != "slurm":
        print(
            f"{loaded.file}: the verify suite runs on Slurm clusters; this environment's "
            f"orchestrator is {config.orchestrator}. Hint: on EKS, HyperPod's deep health checks "
            'test the nodes (docs/verify.md, "Not built yet").',
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if not args.report:
        if args.out is not None:
            _output(args)  # a bad --out is named first, as with --report
        return _how_to_run(loaded)
    output = _output(args)
    found = _read_log_group(loaded, args)
    if isinstance(found, int):
        return found
    counts = {g.name: g.instance_count for g in worker_groups(config)}
    return _report(
        list(found.lines), args, output, source=found.group, runs=found.runs, counts=counts
    )


def _how_to_run(loaded: LoadedEnvironment) -> int:
    """`verify FILE`: the command to run on the cluster, with the trainer image its all-reduce
    job runs (the trainer stack's, known offline, as `jobs` renders it), and how to judge it."""
    config = loaded.config
    image = ""
    if config.trainer.build_image:
        from hyperpod_kit.stacks.trainer import trainer_image_uri

        image = trainer_image_uri(config)
    command = "hyperpod-kit-verify" + (f" --image {shlex.quote(image)}" if image else "")
    lines = [
        "On the cluster's login node (or the controller), as yourself (docs/verify.md):",
        f"  {command}",
    ]
    if not image:
        lines.append("  (trainer.build_image is off: give --image the trainer image your jobs run)")
    lines += [
        "Then, from here (the log shipper sends the run within a minute or two):",
        f"  hyperpod-kit verify {shlex.quote(loaded.file)} --report",
    ]
    print("\n".join(lines))
    return EXIT_OK


def _read_log_group(loaded: LoadedEnvironment, args: argparse.Namespace) -> Found | int:
    """The run's lines from the cluster's log group, or exit 2 after one line (no credentials,
    nothing deployed, AWS cannot be asked, no run, no such run)."""
    from hyperpod_kit.cli.status import _facade, _unavailable, cluster_log_group
    from hyperpod_kit.config.aws import AwsUnavailableError
    from hyperpod_kit.operations.discovery import discover
    from hyperpod_kit.verify.cloudwatch import NoRunError, read_run
    from hyperpod_kit.verify.records import UnknownRunError

    aws = _facade(loaded)
    if aws is None:
        return EXIT_BAD_INPUT
    try:
        group = cluster_log_group(loaded, discover(loaded.config.name, aws))
        return EXIT_BAD_INPUT if group is None else read_run(aws, group, args.run)
    except AwsUnavailableError as e:
        return _unavailable(loaded, e)
    except NoRunError as e:
        said, hint = (
            str(e),
            (
                "run the suite first: `hyperpod-kit-verify` on the login node "
                "(docs/verify.md); its streams reach the log group within a minute"
            ),
        )
    except UnknownRunError as e:
        said, hint = str(e), "leave --run out for the newest run"
    print(printable(f"{said}. Hint: {hint}."), file=sys.stderr)
    return EXIT_BAD_INPUT


def _report(
    lines: list[Line],
    args: argparse.Namespace,
    output: FolderOutput,
    *,
    source: str,
    runs: tuple[str, ...] = (),
    counts: dict[str, int] | None = None,
) -> int:
    """Parse, pick the run, judge, write the folder, print; `runs`: the runs the source holds
    besides those read (the log group's other runs' streams are not read)."""
    from hyperpod_kit.verify.floors import FloorsError, load_floors
    from hyperpod_kit.verify.judge import judge
    from hyperpod_kit.verify.records import RecordError, UnknownRunError, parse, pick
    from hyperpod_kit.verify.render import rendered, table

    try:
        results = pick(parse(lines), args.run)
        results = dataclasses.replace(results, runs=tuple(sorted({*results.runs, *runs})))
    except RecordError as e:
        print(printable(f"{e}. Hint: {RECORD_HINT}."), file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnknownRunError as e:
        hint = "leave --run out for the newest run" if args.run else RECORD_HINT
        print(printable(f"{source}: {e}. Hint: {hint}."), file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        floors = load_floors()
    except FloorsError as e:  # the packaged table: a broken install
        print(f"{e}. Hint: reinstall hyperpod-kit.", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = rendered(judge(results, floors, counts=counts))
    if report.no_pictures:
        print(f"{output.shown}: report.json only; {report.no_pictures}", file=sys.stderr)
    try:
        with output.staging() as folder:
            written = report.write_into(folder)
            output.commit(folder, run=results.run, source=source)
    except OSError as e:
        print(write_error(e, output.target), file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(report.json_text if args.format == "json" else table(report.report))
    print(f"wrote {output.shown}: {', '.join(written)}", file=sys.stderr)
    return report.report.exit_code
