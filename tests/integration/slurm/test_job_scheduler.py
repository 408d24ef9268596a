"""`hyperpod-kit job`'s Slurm side (operations.slurm_jobs.SlurmJobs) against real daemons: the
local cluster without accounting (squeue + scontrol only) and with it (LocalSlurm(accounting=True):
MariaDB + slurmdbd, sacct's history). A tiny bash job prints the trainer's JSON event lines, so
its progress shows in list and show; logs --follow copies its output until it ends.

A job forgotten by slurmctld (MinJobAge after its end: LocalSlurm keeps 600 s and offers no
option) is covered at unit level (tests/unit/test_slurm_jobs.py).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.local import LocalSlurm, SlurmUnavailableError
from hyperpod_kit.local.training import job_environment, write_token_shards
from hyperpod_kit.operations.job_model import JobError, JobRecord
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


# --- `hyperpod-kit job` end to end: the command line, the real trainer ----------------------------

TEMPLATE = Path(__file__).resolve().parents[2] / "data" / "jobs" / "no-container.sbatch.j2"
STEPS, EVERY = 1000, 5  # the first job is cancelled, the second stops itself


def _cli(
    slurm: LocalSlurm, *words: str, cwd: Path, stop_at: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`hyperpod-kit WORDS` as a user on the login node: a clean environment with this cluster's
    client configuration and the toolkit's Python first on PATH (which sbatch passes on to the
    job, whose template runs the trainer from it)."""
    env = slurm.job_env({
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "GLOO_SOCKET_IFNAME": "lo",
        "FSX_ROOT": str(cwd / "fsx"),  # the template's /fsx
        **({"STOP_AT_STEP": str(stop_at)} if stop_at else {}),
    })  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", "job", *words],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _shown(slurm: LocalSlurm, env_file: Path, job_id: str, cwd: Path) -> dict[str, Any]:
    done = _cli(slurm, "show", str(env_file), job_id, "--format", "json", "-q", cwd=cwd)
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


def _until(jobs: SlurmJobs, job_id: str, done: Callable[[JobRecord], bool]) -> JobRecord:
    """Wait (in this process: a command line per poll would be slow) for `done`."""
    deadline = time.monotonic() + 4 * TIMEOUT_S
    while not done(record := jobs.job(job_id)):
        assert time.monotonic() < deadline, record
        time.sleep(0.3)
    return record


def test_the_job_commands_submit_follow_cancel_and_resume(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    """The command line over the scheduler tested above, with the real trainer (gloo on CPU), on
    the cluster without accounting: with accounting the same SlurmJobs adds sacct's history
    (test_submit_follow_list_show[accounting]), and the trainer runs once (the suite's time)."""
    if slurm.accounting:
        pytest.skip("the trainer end to end runs on the cluster without accounting")
    data = job_environment(steps=STEPS, checkpoint_every=EVERY)
    data["trainer"]["job"]["template"] = str(TEMPLATE)
    env_file = tmp_path / "environment.yaml"
    env_file.write_text(yaml.safe_dump(data, sort_keys=False))
    fsx = tmp_path / "fsx"
    write_token_shards(fsx / "data" / "tokens")
    submit = [
        "submit", str(env_file), "--name", "tiny-run", "--data", "/fsx/data/tokens",
        "--checkpoint-dir", "/fsx/checkpoints/tiny-run", "--folder", str(tmp_path / "runs"), "-q",
        # the template runs no container: any image, and no trainer stack to work its URI out
        "--image", "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1",
    ]  # fmt: skip

    # Without a terminal and without --yes nothing is submitted, and it says why.
    declined = _cli(slurm, *submit, cwd=tmp_path)
    assert declined.returncode == 1, declined.stderr
    assert "no --yes: nothing submitted" in declined.stderr
    assert "nodes       1 of 1 free" in declined.stderr
    assert not (tmp_path / "runs").exists()

    first = _cli(slurm, *submit, "--yes", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.strip()
    assert (tmp_path / "runs" / "tiny-run.sbatch").is_file()
    jobs = SlurmJobs(env=slurm.job_env())
    _until(
        jobs, job_id, lambda j: j.progress is not None and j.progress.last_checkpoint is not None
    )
    running = _shown(slurm, env_file, job_id, tmp_path)
    assert running["name"] == "tiny-run" and running["state"] == "RUNNING", running
    assert running["progress"]["step"] >= EVERY and running["progress"]["loss"] > 0
    listed = _cli(slurm, "list", str(env_file), "-q", cwd=tmp_path)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(job_id))
    assert "tiny-run" in row and "RUNNING" in row, listed.stdout

    cancelled = _cli(slurm, "cancel", str(env_file), job_id, "-q", cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    stopped = _until(jobs, job_id, lambda j: j.state in FINISHED)
    assert stopped.state == "CANCELLED" and stopped.progress is not None, stopped
    saved = stopped.progress.last_checkpoint  # the trainer saves on the signal
    assert saved is not None

    # The same submit again: a new job that resumes from the newest complete checkpoint (and,
    # here, stops itself 10 steps later).
    second = _cli(slurm, *submit, "--yes", cwd=tmp_path, stop_at=saved + 10)
    assert second.returncode == 0, second.stderr
    again = second.stdout.strip()
    followed = _cli(slurm, "logs", str(env_file), again, "--follow", "-q", cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr
    resumed = [json.loads(line) for line in followed.stdout.splitlines()
               if line.startswith('{"event": "resume"')]  # fmt: skip
    assert resumed and resumed[0]["step"] >= saved, followed.stdout[-2000:]
    done = _shown(slurm, env_file, again, tmp_path)
    assert done["state"] == "COMPLETED", done
    assert done["progress"]["step"] == saved + 10 and done["progress"]["restarts"] == 1

    # Bad input: one line, exit 2.
    for words in (("show", str(env_file), "999999"), ("cancel", str(env_file), "999999")):
        bad = _cli(slurm, *words, "-q", cwd=tmp_path)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "999999" in bad.stderr and "Traceback" not in bad.stderr
