"""The training job `hyperpod-kit jobs` renders, under real Slurm daemons: it runs to completion,
and when its node is lost mid-run Slurm requeues it and the trainer resumes exactly.

The node loss is HyperPod's replacement of a faulty node: the instance goes away with every
process on it (SIGKILL: no signal handler runs, no final checkpoint), and Slurm sees the node
DOWN. A `--requeue` job is then cancelled "DUE TO NODE FAILURE", requeued with `Restarts=1` and
held on its begin time; the node comes back (a fresh slurmd under the same name, `state=resume`)
and `scontrol update jobid=J StartTime=now` releases the job at once, as HyperPod's auto-resume
restarts it without the wait.

Losses are compared bitwise with the uninterrupted run: same world size, same data by sample id,
one OpenMP thread per rank, gloo sums of two ranks (see docs/trainer.md).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from hyperpod_kit.local import JobProcess, LocalSlurm
from tests.integration.slurm.conftest import (
    CHECKPOINT_EVERY,
    GLOBAL_BATCH,
    JOB_TIMEOUT_S,
    STEPS,
    CompletedRun,
    TrainingJob,
    complete_steps,
    events,
    explain,
    losses,
    of,
)

pytestmark = [pytest.mark.slurm, pytest.mark.trainer]

LOSE_AFTER = 2 * CHECKPOINT_EVERY  # take the node once a checkpoint at this step or later exists


def _ranks(processes: list[JobProcess]) -> list[JobProcess]:
    """The trainer's ranks: `python -m hyperpod_trainer` started by torchrun (which has the
    same module in its argv, but no RANK)."""
    return [p for p in processes if "hyperpod_trainer" in p.argv and "RANK" in p.environ]


def test_the_rendered_job_runs_to_completion_under_slurm(
    local_slurm: LocalSlurm, uninterrupted: CompletedRun
) -> None:
    script = uninterrupted.training.script.read_text()
    assert "#SBATCH --requeue" in script and "srun --auto-resume" not in script
    assert f"#SBATCH --partition={local_slurm.partition}" in script
    assert "--container-image" not in script

    partition = local_slurm.sinfo("--noheader", "--format=%P %a %D %t %N").split()
    assert partition == [f"{local_slurm.partition}*", "up", "1", "idle", local_slurm.node]

    job = uninterrupted.job
    assert (job.state, job.exit_code, job.restarts) == ("COMPLETED", "0:0", 0)
    assert job.node_list == local_slurm.node
    # The template's `--output=%x_%j.out`, in the folder it was submitted from.
    assert job.stdout == uninterrupted.training.folder / f"pretrain_{job.id}.out"

    found = uninterrupted.events
    assert not of(found, "resume")  # a fresh checkpoint folder: nothing to resume
    assert of(found, "exit") == [
        {"event": "exit", "reason": "completed", "step": STEPS, "nonfinite_total": 0}
    ]
    steps = losses(found)
    assert sorted(steps) == list(range(1, STEPS + 1)), explain(job)
    assert {e["world_size"] for e in of(found, "step")} == {2}
    assert steps[STEPS] < steps[1] - 0.2  # it learns: equal losses later prove something
    assert complete_steps(uninterrupted.training.checkpoints)[-1] == STEPS


@pytest.mark.slow
def test_node_loss_requeues_the_job_and_it_resumes_exactly(
    local_slurm: LocalSlurm, uninterrupted: CompletedRun, slot: list[str], tmp_path: Path
) -> None:
    reference = losses(uninterrupted.events)
    training = TrainingJob.prepare(tmp_path / "interrupted")
    slot.append(job_id := training.submit(local_slurm))
    training.wait_for_checkpoint(local_slurm, job_id, LOSE_AFTER)

    before = local_slurm.job_processes(job_id)
    ranks = _ranks(before)
    assert len(ranks) == 2, f"job ended before its node was lost? {local_slurm.job(job_id)}"
    assert all(p.environ.get("SLURM_RESTART_COUNT", "0") == "0" for p in ranks)

    lost_at = time.monotonic()
    killed = local_slurm.lose_node()
    assert {p.pid for p in before} <= set(killed)
    assert local_slurm.node_info()["State"].startswith("DOWN")

    requeued = local_slurm.wait_job(
        job_id, lambda j: j.state == "PENDING" and j.restarts == 1, "requeued", 30
    )
    # Held on its begin time, as after a real node failure, until released.
    assert datetime.fromisoformat(requeued.fields["EligibleTime"]) > datetime.now(), requeued
    # What the trainer left behind when its node vanished: the newest complete checkpoint, and
    # the steps it had logged (the output file is truncated when the job starts again).
    at_failure = complete_steps(training.checkpoints)[-1]
    first_output = requeued.stdout.read_text(errors="replace")
    first = events(first_output)
    # slurmstepd died with the node, so only the controller can say why the job went back.
    why = f"requeue job JobId={job_id} due to failure of node {local_slurm.node}"
    assert why in local_slurm.log("slurmctld")
    assert not of(first, "exit")  # killed, not stopped: no final save
    last_before = max(losses(first))
    assert at_failure >= LOSE_AFTER and last_before > at_failure  # steps were lost and redone
    assert losses(first) == {s: reference[s] for s in range(1, last_before + 1)}

    local_slurm.return_node()
    local_slurm.release(job_id)
    running = local_slurm.wait_job(job_id, lambda j: j.state != "PENDING", "to restart", 30)
    assert running.state in ("RUNNING", "COMPLETED"), running

    # The restarted job's own environment, read from its ranks while they run.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    restarted_ranks: list[JobProcess] = []
    while not restarted_ranks and time.monotonic() < deadline:
        restarted_ranks = _ranks(local_slurm.job_processes(job_id))
        if not restarted_ranks:
            assert not local_slurm.job(job_id).finished, "the restarted job ended unseen"
            time.sleep(0.1)
    assert {p.environ["SLURM_RESTART_COUNT"] for p in restarted_ranks} == {"1"}

    done = local_slurm.wait_finished(job_id, JOB_TIMEOUT_S)
    recovered_s = time.monotonic() - lost_at
    assert (done.state, done.exit_code, done.restarts) == ("COMPLETED", "0:0", 1), explain(done)
    second_output = done.stdout.read_text(errors="replace")
    second_output = second_output.removeprefix(first_output)  # if Slurm appended instead
    second = events(second_output)

    (resume,) = of(second, "resume")
    assert resume["step"] == at_failure, resume
    assert resume["samples_consumed"] == at_failure * GLOBAL_BATCH
    assert resume["path"] == str(training.checkpoints / f"step_{at_failure:06d}")
    assert resume["rng_restored"] is True and resume["world_size"] == 2
    after = losses(second)
    assert sorted(after) == list(range(at_failure + 1, STEPS + 1)), explain(done)
    assert after == {s: reference[s] for s in after}  # bitwise, every step after the resume
    assert after[STEPS] == reference[STEPS]
    assert of(second, "exit") == [
        {"event": "exit", "reason": "completed", "step": STEPS, "nonfinite_total": 0}
    ]
    print(
        f"\nnode lost after step {last_before}; newest complete checkpoint {at_failure}; "
        f"Restarts={done.restarts}; resumed at {resume['step']}; final loss "
        f"{after[STEPS]!r} vs uninterrupted {reference[STEPS]!r}; "
        f"loss to completion {recovered_s:.1f} s"
    )
