"""`make verify-demo`: the Slurm path of `hyperpod-kit-verify` on this machine (docs/verify.md).

Real: Debian's Slurm daemons with two slurmd nodes on loopback (`LocalSlurm(nodes=2)`), the node
command itself (lifecycle/bin/hyperpod-kit-verify) submitting its own jobs with sbatch, one task per
node through srun, the all-reduce job rendered from the bundled template (`jobs.render_verify_jobs`,
its local variant: no container) running the trainer's `bench-allreduce` under torchrun, gloo on
CPU, between the two nodes, the FSx test's barriers, writes, reads and metadata operations on a
local folder standing for /fsx, the Studio check on folders made here, and the report with its
pictures (`hyperpod_kit.verify`).

Only a cluster shows: NCCL and EFA (the figures here are gloo over loopback), GPUs, and FSx's
throughput (a local disk and its page cache are not Lustre): the run record says `"local": true`
and the report judges none of those figures against a floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.config.derived import VERIFY_DIR
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.files import fileio
from hyperpod_kit.jobs import LocalRun, render_verify_jobs
from hyperpod_kit.local.command import STOPS, OneLineParser, stopped
from hyperpod_kit.local.slurm import LocalSlurm, free_port
from hyperpod_kit.local.training import JOB_ENV, job_environment
from hyperpod_kit.paths import LIFECYCLE_DIR
from hyperpod_kit.verify_settings import verify_settings

PROG = "verify-demo"
COMMAND = LIFECYCLE_DIR / "bin" / "hyperpod-kit-verify"
NODES = 2
# Studio users of the demo: their partitions are made here as the user sync makes them.
USERS: tuple[dict[str, Any], ...] = (
    {"name": "alice", "uid": 2001, "gid": 2001},
    {"name": "bob", "uid": 2002, "gid": 2002},
)
RESULTS = "results.jsonl"
RUN_TIMEOUT_S = 900
DEFAULT_OUT = "verify-out"


class VerifyDemoError(RuntimeError):
    """The node command failed or wrote no run."""


# What stops a run: one line each (`local.command.stopped`).
STOPPED: tuple[type[BaseException], ...] = (*STOPS, VerifyDemoError)


@dataclass(frozen=True)
class LocalRunResult:
    results: Path  # the run's records (JSON lines)
    output: str  # what the node command printed
    returncode: int


def local_settings(work: Path, slurm: LocalSlurm, fsx: Path, spool: Path) -> dict[str, Any]:
    """The settings the lifecycle upload would carry, for the local job environment, with this
    machine's folders and the local cluster's partition and node count."""
    data = job_environment()
    environment = work / "environment.yaml"
    environment.write_text(json.dumps(data))
    config = load_environment(environment).config
    settings = verify_settings(config)
    settings["local"] = True
    settings["fsx"] = {"path": str(fsx), "provisioned_mb_s": None}
    settings["out_root"] = str(fsx) + VERIFY_DIR.removeprefix("/fsx")
    settings["spool"] = str(spool)
    settings["groups"] = [
        {**g, "partition": slurm.partition, "instance_type": None} for g in settings["groups"][:1]
    ]
    # Studio per-user partitions, as on a cluster with Studio (the users file the sync keeps).
    settings["studio"] = {
        "enabled": True, "partitions": "per_user", "shared_path": None,
        "users_file": str(work / "users.json"),
    }  # fmt: skip
    (work / "users.json").write_text(
        json.dumps({"version": 1, "users": [{**u, "studio": True} for u in USERS]})
    )
    for user in USERS:  # as the user sync makes a partition: uid:gid, 0700
        home = fsx / str(user["name"])
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, int(user["uid"]), int(user["gid"]))
        home.chmod(0o700)
    for job in render_verify_jobs(config, local=LocalRun(fsx_root=fsx, python=sys.executable)):
        (work / job.filename).write_text(job.text)
    return settings


@contextmanager
def workspace(base: Path | None = None) -> Iterator[Path]:
    """A temporary folder for a local run, searchable by all (munged requires it of every
    folder above its socket), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hyperpod-verify-", dir=base) as folder:
        root = Path(folder)
        root.chmod(0o755)
        yield root


def run_local(
    work: Path,
    *,
    max_bytes: int = 2**30,
    min_bytes: int = 2**20,
    fsx_mib: int = 256,
    fsx_files: int = 500,
    extra: Sequence[str] = (),
    before: Callable[[LocalSlurm, Path], None] | None = None,
    say: Callable[[str], None] = print,
) -> LocalRunResult:
    """Start a two-node local Slurm under `work`, run the node command against it, and return
    the run's records file (under `work`). `before(slurm, fsx)` runs just before the command.
    SlurmUnavailableError when Slurm cannot run here."""
    fsx, spool = work / "fsx", work / "spool"
    fsx.mkdir()
    spool.mkdir()
    with LocalSlurm(nodes=NODES, partition="compute", base_dir=work) as slurm:
        say(f"local Slurm up: nodes {', '.join(slurm.nodes)} IDLE")
        settings = local_settings(work, slurm, fsx, spool)
        (work / "settings.json").write_text(json.dumps(settings, indent=2))
        if before is not None:  # a test's fault: a node down, a partition gone wrong
            before(slurm, fsx)
        env = slurm.client_env(
            {
                **JOB_ENV,
                "HYPERPOD_RDZV_PORT": str(free_port()),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            }
        )
        argv = [
            sys.executable, str(COMMAND), f"--settings={work / 'settings.json'}",
            f"--min-bytes={min_bytes}", f"--max-bytes={max_bytes}", f"--fsx-mib={fsx_mib}",
            f"--fsx-files={fsx_files}", "--timeout=600", *extra,
        ]  # fmt: skip
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )
        for line in proc.stdout.splitlines():
            say(line)
        found = sorted(Path(settings["out_root"]).glob(f"verify-*/{RESULTS}"))
        if not found:
            raise VerifyDemoError(
                f"the node command exited {proc.returncode} and wrote no run:\n"
                f"{proc.stdout}{proc.stderr}\n{slurm.diagnostics()}"
            )
    return LocalRunResult(found[-1], proc.stdout + proc.stderr, proc.returncode)


def _max_bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if value < 2**20 or value > 2**30 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"{value} is not a power of two from 1 MiB to 1 GiB")
    return value


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(name=PROG, prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    kind = fileio.PathKind
    fileio.declare(p.add_argument(
        "--out", default=DEFAULT_OUT,
        help=f"folder for the run's records, the report and its pictures (default {DEFAULT_OUT});"
        " a folder with files it did not write is refused",
    ), kind.OUTPUT_FOLDER)  # fmt: skip
    fileio.declare(p.add_argument(
        "--max-bytes", type=_max_bytes, default=2**30,
        help="the all-reduce's largest message, a power of two from 1 MiB to 1 GiB (1 GiB)",
    ), kind.NOT_A_PATH)  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from hyperpod_kit.outputs import VERIFY, FolderOutput, OutputError

    args = parser().parse_args(argv)
    try:
        out = FolderOutput.checked(args.out, VERIFY, shown=args.out)
    except OutputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        with out.staging() as staging, workspace() as work:
            result = run_local(work, max_bytes=args.max_bytes)
            (staging / RESULTS).write_bytes(result.results.read_bytes())
            code = report_into(staging, staging / RESULTS)
            out.commit(staging)
    except STOPPED as e:
        return stopped(PROG, e, args.out)
    print(f"wrote {Path(args.out)}: {RESULTS}, the report and its pictures")
    return code


def report_into(folder: Path, results: Path, say: Callable[[str], None] = print) -> int:
    """The report of the run in `results` into `folder` (report.json and the pictures), its
    table said; the report's exit code (0: nothing below a floor)."""
    from hyperpod_kit.verify.floors import load_floors
    from hyperpod_kit.verify.judge import judge
    from hyperpod_kit.verify.records import lines_of, parse, pick
    from hyperpod_kit.verify.render import rendered, table

    run = pick(parse(lines_of(results.read_text(encoding="utf-8"), str(results))), None)
    report = rendered(judge(run, load_floors()))
    report.write_into(folder)
    say(table(report.report).rstrip("\n"))
    if report.no_pictures:
        say(f"report.json only; {report.no_pictures}")
    return report.report.exit_code


if __name__ == "__main__":
    sys.exit(main())
