"""`make demo`: a node goes bad mid-training, the health runner asks HyperPod to replace it, the
job is requeued and resumes from its last checkpoint, with the loss it would have had anyway.

All on this machine, offline, in a few minutes (docs/demo.md):

    1. a local Slurm (munged, slurmctld, slurmd on loopback; `hyperpod_kit.local.slurm`);
    2. the environment's training job, rendered by `hyperpod-kit jobs` for this machine (the
       bundled trainer's tiny preset on CPU, two ranks, `--requeue`), run once uninterrupted;
    3. the same job again; after a checkpoint the FSx mount (a folder standing in for /fsx)
       stops answering, and the job's processes freeze as on a hung Lustre client;
    4. the health runner (lifecycle/health/runner.py, its real command line) finds the mount
       hung and fails the node with `Action:Replace`;
    5. the demo plays HyperPod: the node is replaced (every process on it killed, the node DOWN),
       Slurm requeues the job, a fresh node comes back under the same name and the job is
       released (HyperPod's auto-resume);
    6. the trainer resumes from its newest complete checkpoint and completes.

It prints the timeline (who acted, when) and writes `timeline.json`, `demo-loss.png` (the faulted
run's loss over the uninterrupted one's), the runner's log and the jobs' output into `--out`.

    python -m hyperpod_kit.local.demo [--out DIR] [--steps N]

Exit status: 0 done, 1 the demo did not go as described (the message says where), 2 bad
arguments or an output folder it may not write.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hyperpod_kit.config.derived import job_partition
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.files import fileio
from hyperpod_kit.local.command import STOPS, OneLineParser, stopped
from hyperpod_kit.local.health import HealthNode
from hyperpod_kit.local.slurm import LocalSlurm, SlurmJob
from hyperpod_kit.local.training import (
    JOB_TIMEOUT_S,
    TrainingJob,
    complete_steps,
    events,
    explain,
    job_environment,
    losses,
    of,
)
from hyperpod_kit.outputs import DEMO, FolderOutput, OutputError

DEFAULT_OUT = "demo-out"
DEFAULT_STEPS = 40
MIN_STEPS, MAX_STEPS = 12, 2000
PNG = "demo-loss.png"
TIMELINE = "timeline.json"
TIMELINE_VERSION = 1
PROG = "demo"  # how its messages start
FSX_TIMEOUT_S = 5  # the schema's minimum for monitoring.node_checks.fsx_timeout_seconds
POLL_S = 0.05

# Who acts. HyperPod's part (replacing the node, auto-resume) has no stand-in on one machine but
# the demo itself, and the timeline says so.
YOU = "you (sbatch)"
FAULT = "the fault (injected by the demo)"
RUNNER = "hyperpod-kit health runner"
HYPERPOD = "HyperPod (played by the demo)"
SLURM = "Slurm"
TRAINER = "trainer"

# The environment's monitoring section for the demo: the FSx check asks for a replacement (its
# default is a reboot, which HyperPod would do by restarting the instance) and answers in 5 s.
MONITORING: dict[str, Any] = {
    "node_checks": {
        "fsx_timeout_seconds": FSX_TIMEOUT_S,
        "remediation": {"fsx-mount": "replace"},
    }
}


class DemoError(Exception):
    """The demo did not go as described; the message says where."""


# What stops a run: one line each (`local.command.stopped`).
STOPPED: tuple[type[BaseException], ...] = (*STOPS, DemoError)


def cadence(steps: int) -> tuple[int, int]:
    """(checkpoint every, the step after which the fault comes): four checkpoints a run, the
    fault halfway between the second and the third, so some steps are lost and half the run is
    left to resume."""
    every = max(3, steps // 4)
    return every, 2 * every + every // 2


# --- the timeline ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    at: float  # Unix time
    actor: str
    event: str
    what: str
    details: dict[str, Any] = field(default_factory=dict)


def iso(at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Timeline:
    """Events in the order they happened; each is printed as it is added."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.events: list[Event] = []
        self.out = out
        self.start = time.time()

    def add(
        self, actor: str, event: str, what: str, at: float | None = None, **details: Any
    ) -> Event:
        found = Event(time.time() if at is None else at, actor, event, what, details)
        self.events.append(found)
        self.out(self.line(found))
        return found

    def line(self, e: Event) -> str:
        clock = iso(e.at)[11:-1]
        return f"{clock}  +{e.at - self.start:6.1f}s  {e.actor:<34} {e.what}"

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {"time": iso(e.at), "t": round(e.at - self.start, 3), **asdict(e)} for e in self.events
        ]


# --- the faulted job's processes -------------------------------------------------------------


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X")


def freeze(slurm: LocalSlurm, job_id: str) -> list[int]:
    """SIGSTOP every process of the job (batch script, torchrun, ranks): what a hung Lustre
    client does to processes that touch the mount. Rescans until none is left running."""
    frozen: set[int] = set()
    for _ in range(50):
        running = [p.pid for p in slurm.job_processes(job_id) if not _stopped(p.pid)]
        if not running:
            return sorted(frozen)
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                frozen.add(pid)
        time.sleep(POLL_S)
    raise DemoError(f"job {job_id}'s processes keep running after SIGSTOP")


def wait_for(
    ready: Callable[[], Any], what: str, timeout: float = JOB_TIMEOUT_S, poll: float = POLL_S
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        time.sleep(poll)
    raise DemoError(f"timed out waiting for {what}")


def read_output(job: SlurmJob) -> str:
    try:
        return job.stdout.read_text(errors="replace")
    except (KeyError, OSError):
        return ""


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Result:
    """What the demo measured; `timeline.json` holds it with the events."""

    steps: int
    checkpoint_every: int
    node: str
    job_id: str = ""
    fault_step: int = 0  # the last step the trainer logged before it froze
    checkpoint_at_fault: int = 0  # the newest complete checkpoint then
    resumed_step: int = 0  # the first step after the resume
    steps_lost: int = 0  # steps done, then lost with the node, and done again
    restarts: int = 0
    bitwise_equal: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    reference: dict[int, float] = field(default_factory=dict)
    before_fault: dict[int, float] = field(default_factory=dict)
    after_resume: dict[int, float] = field(default_factory=dict)


def run_reference(slurm: LocalSlurm, work: Path, data: dict[str, Any], tl: Timeline) -> SlurmJob:
    training = TrainingJob.prepare(work / "reference", data)
    job_id = training.submit(slurm)
    tl.add(YOU, "reference-submitted", f"uninterrupted reference run: job {job_id} submitted")
    job = slurm.wait_finished(job_id, JOB_TIMEOUT_S)
    if job.state != "COMPLETED":
        raise DemoError(f"the reference run did not complete: {job}\n{explain(job)}")
    tl.add(SLURM, "reference-completed", f"reference job {job_id} COMPLETED")
    return job


def run_faulted(  # noqa: PLR0915 (one story, told in order)
    slurm: LocalSlurm, work: Path, data: dict[str, Any], tl: Timeline, result: Result
) -> tuple[str, TrainingJob, HealthNode]:
    training = TrainingJob.prepare(work / "faulted", data)
    config = load_environment(training.environment).config
    node = HealthNode(work / "node", slurm=slurm, config=config, fsx=training.fsx)
    _, fault_after = cadence(result.steps)

    job_id = result.job_id = training.submit(slurm)
    tl.add(YOU, "submitted", f"job {job_id} submitted (sbatch --requeue, {result.steps} steps)")
    healthy = node.run()
    if healthy.returncode != 0:
        raise DemoError(f"the runner failed a healthy node: {healthy}")
    tl.add(RUNNER, "check-ok", f"fsx-mount ok: {healthy.verdicts[0]['reason']}", at=healthy.ended)

    def reached() -> bool:
        job = slurm.job(job_id)
        if job.finished:
            raise DemoError(f"job {job_id} ended before step {fault_after}\n{explain(job)}")
        return max(losses(events(read_output(job))), default=0) >= fault_after

    wait_for(reached, f"step {fault_after}", poll=0.02)
    node.hang_fsx()
    frozen = freeze(slurm, job_id)
    job = slurm.job(job_id)
    if job.state != "RUNNING" or not frozen:
        raise DemoError(f"the job ended before the fault; give more --steps ({job})")
    result.fault_step = max(losses(events(read_output(job))), default=0)
    checkpoint = max(complete_steps(training.checkpoints), default=0)
    tl.add(
        FAULT,
        "fault",
        f"/fsx stops answering after step {result.fault_step} (newest checkpoint on it: step "
        f"{checkpoint}); the job's {len(frozen)} processes hang on it (SIGSTOP)",
        step=result.fault_step,
        checkpoint=checkpoint,
    )

    verdict_run = node.run()
    (verdict,) = verdict_run.verdicts
    decision = verdict_run.decision
    if verdict["status"] != "fail" or decision["action"] != "replace" or not decision["executed"]:
        raise DemoError(f"the runner did not ask for a replacement: {verdict_run}")
    tl.add(
        RUNNER,
        "verdict",
        f"fsx-mount FAIL: {verdict['reason']} -> asks for replace",
        at=verdict_run.ended,
        reason=verdict["reason"],
    )
    reasons = slurm.sinfo("-R", "--noheader", "--format=%E|%N|%T").split()
    state = slurm.node_info()["State"]
    if [r.split("|")[:2] for r in reasons] != [["Action:Replace", slurm.node]] or (
        "FAIL" not in state
    ):
        raise DemoError(f"the node is not failing for Action:Replace: {reasons}, {state}")
    tl.add(
        RUNNER,
        "node-failed",
        f"scontrol update node={slurm.node} state=fail reason=Action:Replace "
        f"(sinfo -R: {' '.join(reasons)}; State={state})",
        command=decision["command"],
        sinfo_r=reasons,
        state=state,
    )

    slurm.lose_node("Action:Replace: HyperPod replaces the node")
    tl.add(
        HYPERPOD,
        "node-replaced",
        f"replaces {slurm.node}: every process on it is killed, Slurm sees it DOWN",
    )
    requeued = slurm.wait_job(
        job_id, lambda j: j.state == "PENDING" and j.restarts == 1, "requeued", 60
    )
    result.checkpoint_at_fault = max(complete_steps(training.checkpoints), default=0)
    first_output = read_output(requeued)
    result.before_fault = losses(events(first_output))
    tl.add(
        SLURM,
        "requeued",
        f"job {job_id} cancelled DUE TO NODE FAILURE and requeued (--requeue), "
        f"Restarts={requeued.restarts}",
    )

    node.heal_fsx()
    node.forget()  # a replacement has a fresh root volume: no runner state
    slurm.return_node()
    tl.add(HYPERPOD, "node-back", f"a fresh {slurm.node} registers; state=resume; IDLE")
    slurm.release(job_id)
    tl.add(HYPERPOD, "job-released", f"auto-resume: job {job_id} released (StartTime=now)")
    again = node.run()
    if again.returncode != 0:
        raise DemoError(f"the runner failed the new node: {again}")
    tl.add(RUNNER, "check-ok", "fsx-mount ok on the new node", at=again.ended)

    def resumed() -> dict[str, Any] | None:
        text = read_output(slurm.job(job_id)).removeprefix(first_output)
        found = of(events(text), "resume")
        if not found and slurm.job(job_id).finished:
            raise DemoError(f"job {job_id} ended without resuming\n{explain(slurm.job(job_id))}")
        return found[0] if found else None

    resume = wait_for(resumed, "the trainer to resume")
    result.resumed_step = int(resume["step"]) + 1
    result.steps_lost = result.fault_step - int(resume["step"])
    tl.add(
        TRAINER,
        "resumed",
        f"resumes from checkpoint step {resume['step']} ({Path(resume['path']).name}); "
        f"next step {result.resumed_step}",
        checkpoint=int(resume["step"]),
        step=result.resumed_step,
    )
    done = slurm.wait_finished(job_id, JOB_TIMEOUT_S)
    result.restarts = done.restarts
    if (done.state, done.exit_code) != ("COMPLETED", "0:0"):
        raise DemoError(f"the resumed job did not complete: {done}\n{explain(done)}")
    second_output = read_output(done).removeprefix(first_output)
    result.after_resume = losses(events(second_output))
    tl.add(
        SLURM,
        "completed",
        f"job {job_id} COMPLETED at step {max(result.after_resume)} (Restarts={done.restarts}); "
        f"{result.steps_lost} steps lost and redone",
    )
    return first_output + second_output, training, node


def plot(result: Result, path: Path) -> None:
    """The faulted run's loss over the uninterrupted one's, the fault and the resume marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ref = sorted(result.reference.items())
    ax.plot([s for s, _ in ref], [v for _, v in ref], color="0.6", lw=4, label="uninterrupted")
    before = sorted(result.before_fault.items())
    after = sorted(result.after_resume.items())
    ax.plot(
        [s for s, _ in before], [v for _, v in before], "o-", ms=3, color="tab:red",
        label="faulted run, before the fault",
    )  # fmt: skip
    ax.plot(
        [s for s, _ in after], [v for _, v in after], "o-", ms=3, color="tab:blue",
        label="faulted run, after the resume",
    )  # fmt: skip
    ax.axvspan(
        result.checkpoint_at_fault, result.fault_step, color="tab:red", alpha=0.08,
        label=f"steps lost and redone ({result.steps_lost})",
    )  # fmt: skip
    ax.axvline(result.fault_step, color="tab:red", ls="--", lw=1)
    ax.axvline(result.resumed_step, color="tab:blue", ls=":", lw=1)
    on_top = ax.get_xaxis_transform()  # x in steps, y in axes fractions
    ax.text(
        result.fault_step, 0.97, f" fault after step {result.fault_step}\n Action:Replace",
        transform=on_top, va="top", fontsize=8, color="tab:red",
    )  # fmt: skip
    ax.text(
        result.resumed_step, 0.80,
        f" resumed at step {result.resumed_step}\n (checkpoint {result.checkpoint_at_fault})",
        transform=on_top, va="top", fontsize=8, color="tab:blue",
    )  # fmt: skip
    same = "bitwise equal" if result.bitwise_equal else "NOT equal"
    ax.set_title(
        f"hyperpod-kit demo: node replaced mid-run; losses after the resume {same} to the "
        "uninterrupted run",
        fontsize=9,
    )
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="hyperpod-demo-"))
    work.chmod(0o755)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(out: FolderOutput, steps: int, say: Callable[[str], None] = print) -> Result:
    """The whole demo into `out` (checked by the caller before any work)."""
    started = time.monotonic()
    every, _ = cadence(steps)
    data = job_environment(steps=steps, checkpoint_every=every, monitoring=MONITORING)
    tl = Timeline(say)
    with out.staging() as staging, _workspace() as work:
        (work / "environment.yaml").write_text(json.dumps(data))
        config = load_environment(work / "environment.yaml").config
        slurm = LocalSlurm(partition=job_partition(config) or "compute", base_dir=work)
        result = Result(steps=steps, checkpoint_every=every, node=slurm.node)
        with slurm:
            tl.add(SLURM, "slurm-up", f"local Slurm up: node {slurm.node} IDLE")
            t = time.monotonic()
            reference = run_reference(slurm, work, data, tl)
            result.seconds["reference_run"] = round(time.monotonic() - t, 1)
            ref_output = read_output(reference)
            result.reference = losses(events(ref_output))
            t = time.monotonic()
            faulted_output, training, node = run_faulted(slurm, work, data, tl, result)
            result.seconds["faulted_run"] = round(time.monotonic() - t, 1)
            fault_at = next(e.at for e in tl.events if e.event == "fault")
            done_at = next(e.at for e in tl.events if e.event == "completed")
            result.seconds["fault_to_completion"] = round(done_at - fault_at, 1)
            # Every step from the resume to the end, each loss the very float of the reference.
            expected = list(range(result.resumed_step, steps + 1))
            result.bitwise_equal = sorted(result.after_resume) == expected and all(
                result.reference.get(s) == v for s, v in result.after_resume.items()
            )
            (staging / "reference.out").write_text(ref_output)
            (staging / "faulted.out").write_text(faulted_output)
            shutil.copyfile(node.log_file, staging / "health.jsonl")
            shutil.copyfile(node.settings_file, staging / "health-settings.json")
            shutil.copyfile(training.environment, staging / "environment.yaml")
            shutil.copyfile(training.script, staging / training.script.name)
        result.seconds["total"] = round(time.monotonic() - started, 1)
        plot(result, staging / PNG)
        (staging / TIMELINE).write_text(
            json.dumps(
                {"version": TIMELINE_VERSION, "events": tl.as_json(), "result": asdict(result)},
                indent=2,
            )
            + "\n"
        )
        out.commit(staging)
    return result


def summary(result: Result) -> str:
    same = "bitwise equal to" if result.bitwise_equal else "DIFFERENT from"
    return (
        f"fault after step {result.fault_step}; newest checkpoint {result.checkpoint_at_fault}; "
        f"resumed at step {result.resumed_step}; {result.steps_lost} steps lost; "
        f"Restarts={result.restarts}; losses after the resume {same} the uninterrupted run; "
        f"fault to completion {result.seconds.get('fault_to_completion', 0):.1f} s, "
        f"whole demo {result.seconds.get('total', 0):.1f} s"
    )


# --- command line ----------------------------------------------------------------------------


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not MIN_STEPS <= value <= MAX_STEPS:
        raise argparse.ArgumentTypeError(
            f"{value} is not between {MIN_STEPS} and {MAX_STEPS} (each run checkpoints four "
            "times; the fault comes between the second and the third)"
        )
    return value


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        name=PROG,
        prog="python -m hyperpod_kit.local.demo",
        description="Node fault, health runner, replacement, requeue and exact resume, on a "
        "local Slurm (docs/demo.md).",
    )
    kind = fileio.PathKind
    fileio.declare(p.add_argument(
        "-o", "--out", default=DEFAULT_OUT,
        help=f"folder for the timeline, plot and logs (default {DEFAULT_OUT}); a folder with "
        "files it did not write is refused",
    ), kind.OUTPUT_FOLDER)  # fmt: skip
    fileio.declare(p.add_argument(
        "--steps", type=_steps, default=DEFAULT_STEPS,
        help=f"training steps of each run ({MIN_STEPS}-{MAX_STEPS}, default {DEFAULT_STEPS})",
    ), kind.NOT_A_PATH)  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    prog = PROG
    try:
        out = FolderOutput.checked(args.out, DEMO, shown=args.out)
    except OutputError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    try:
        result = run(out, args.steps)
    except STOPPED as e:
        return stopped(prog, e, args.out)
    print(summary(result))
    print(f"wrote {Path(args.out) / TIMELINE} and {Path(args.out) / PNG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
