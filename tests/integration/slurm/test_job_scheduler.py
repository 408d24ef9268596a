"""`hyperpod-kit job`'s Slurm side (operations.slurm_jobs.SlurmJobs) against real daemons: the
local cluster without accounting (squeue + scontrol only) and with it (LocalSlurm(accounting=True):
MariaDB + slurmdbd, sacct's history). A tiny bash job prints the trainer's JSON event lines, so
its progress shows in list and show; logs --follow copies its output until it ends.

A job forgotten by slurmctld (MinJobAge after its end: LocalSlurm keeps 600 s and offers no
option) is covered at unit level (tests/unit/test_slurm_jobs.py).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.local import LocalSlurm, SlurmUnavailableError
from hyperpod_kit.operations.job_model import JobError
from hyperpod_kit.operations.slurm_jobs import FINISHED, SlurmJobs

pytestmark = [pytest.mark.slurm]

EVENTS = (
    '{"event": "resume", "step": 2}',
    '{"event": "step", "step": 3, "loss": 2.5, "tokens_per_s": 100.0}',
    '{"event": "checkpoint", "step": 4}',
    '{"event": "step", "step": 5, "loss": 2.25, "tokens_per_s": 110.0}',
)
# Prints a line that is no event, two events, waits (logs --follow reads it running), the rest.
JOB = f"""#!/bin/bash
#SBATCH --job-name=tiny-train
#SBATCH --output=%x_%j.out
echo "torchrun: starting"
echo '{EVENTS[0]}'
echo '{EVENTS[1]}'
sleep 2
echo '{EVENTS[2]}'
echo '{EVENTS[3]}'
"""
EXPECTED = "torchrun: starting\n" + "\n".join(EVENTS) + "\n"
SLEEPER = "#!/bin/bash\n#SBATCH --job-name=sleeper\nsleep 120\n"
TIMEOUT_S = 60.0


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "accounting"])
def slurm(request: pytest.FixtureRequest) -> Iterator[LocalSlurm]:
    cluster = LocalSlurm(partition="compute", accounting=request.param)
    try:
        cluster.start()
    except SlurmUnavailableError as e:
        what = "Slurm accounting" if request.param else "Slurm"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{what} must run under CI (.ci/run installs it): {e}", pytrace=False)
        pytest.skip(f"no local {what}: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def jobs(slurm: LocalSlurm, tmp_path: Path) -> SlurmJobs:
    """SlurmJobs as on a Studio space: the nodes write under `node`, read here under `studio`, a
    link to the same folder (as ~/fsx is the FSx mount /fsx/<user> is on the nodes)."""
    node = tmp_path / "node"
    (node / "runs").mkdir(parents=True)
    (tmp_path / "studio").symlink_to(node)
    # job_env: the job's processes carry the cluster's marker, so stop() finds them by pid.
    return SlurmJobs(env=slurm.job_env(), path_map=(str(node), tmp_path / "studio"))


def _wait(jobs: SlurmJobs, job_id: str) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while (state := jobs.job(job_id).state) not in FINISHED:
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(0.3)
    return state


def test_submit_follow_list_show(slurm: LocalSlurm, jobs: SlurmJobs, tmp_path: Path) -> None:
    folder = tmp_path / "studio" / "runs"
    job_id = jobs.submit(JOB, filename="tiny.sbatch", folder=folder)
    assert job_id.isdigit()
    assert jobs.accounting is slurm.accounting  # found out from sacct itself

    followed = io.StringIO()
    jobs.logs(job_id, follow=True, out=followed, poll_s=0.2)  # returns once the job has ended
    assert followed.getvalue() == EXPECTED

    shown = jobs.job(job_id)
    assert (shown.state, shown.name, shown.exit_code, shown.where) == (
        "COMPLETED", "tiny-train", "0:0", "compute")  # fmt: skip
    # The nodes wrote /…/node/runs/tiny-train_N.out; here it is read under studio/.
    assert shown.output == str(folder / f"tiny-train_{job_id}.out")
    assert shown.details["WorkDir"] == str(tmp_path / "node" / "runs")
    progress = shown.progress
    assert progress is not None
    assert (progress.step, progress.loss, progress.tokens_per_s) == (5, 2.25, 110.0)
    assert (progress.last_checkpoint, progress.restarts) == (4, 1)

    again = io.StringIO()
    jobs.logs(job_id, follow=False, out=again)
    assert again.getvalue() == EXPECTED

    listed = {r.id: r for r in jobs.jobs()}
    assert listed[job_id].state == "COMPLETED" and listed[job_id].progress == progress
    assert jobs.jobs(everyone=True)[0].id == max(listed, key=int)  # newest first

    if slurm.accounting:  # slurmctld sends the job's end to slurmdbd after it ends
        deadline = time.monotonic() + TIMEOUT_S
        while not any(r["JobID"] == job_id and r["State"] == "COMPLETED"
                      for r in jobs.job(job_id).history):  # fmt: skip
            assert time.monotonic() < deadline, jobs.job(job_id).history
            time.sleep(0.5)
        steps = [r["JobID"] for r in jobs.job(job_id).history]
        assert f"{job_id}.batch" in steps
    else:
        assert shown.history == ()
    # Another text under the job file's name is refused, not written over.
    with pytest.raises(JobError, match="exists and is not this job"):
        jobs.submit(SLEEPER, filename="tiny.sbatch", folder=folder)


def test_cancel_and_capacity(jobs: SlurmJobs, tmp_path: Path) -> None:
    job_id = jobs.submit(SLEEPER, filename="sleep.sbatch", folder=tmp_path / "studio" / "runs")
    deadline = time.monotonic() + TIMEOUT_S
    while jobs.job(job_id).state != "RUNNING":
        assert time.monotonic() < deadline, jobs.job(job_id)
        time.sleep(0.3)
    busy = jobs.capacity("compute")
    assert busy is not None and (busy.free, busy.total) == (0, 1), busy
    jobs.cancel(job_id)
    assert _wait(jobs, job_id) == "CANCELLED"
    with pytest.raises(JobError, match=f"job {job_id} has already ended"):
        jobs.cancel(job_id)
    deadline = time.monotonic() + TIMEOUT_S
    while (free := jobs.capacity(None)) is None or free.free != 1:
        assert time.monotonic() < deadline, free
        time.sleep(0.3)
    assert free.total == 1 and "compute" in free.detail
    assert jobs.capacity("no-such-partition") is None


def test_unknown_job_is_one_line(jobs: SlurmJobs) -> None:
    for call in (jobs.job, jobs.cancel):
        with pytest.raises(JobError) as raised:
            call("999999")
        message = str(raised.value)
        assert message.startswith("no job 999999: ") and "\n" not in message, message
    with pytest.raises(JobError, match="no job 999999"):
        jobs.logs("999999", follow=True, out=io.StringIO())
