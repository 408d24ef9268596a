"""One job per checkpoint folder (lease.py, torch-free): refused while another live job holds it,
taken over once the holder is gone, immediately by a restart of the same job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.lease import (
    Lease,
    LeaseHeldError,
    _create_exclusive,
    job_identity,
)

TIMEOUT = 60.0


class Clocks:
    """Wall and monotonic time that move only when somebody sleeps."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.slept = 0.0
        self.on_sleep: list[object] = []

    def wall(self) -> float:
        return self.now

    def mono(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        for hook in self.on_sleep:
            hook()  # type: ignore[operator]


def _lease(root: Path, job: str, clocks: Clocks) -> Lease:
    return Lease(
        root,
        job_id=job,
        timeout_s=TIMEOUT,
        clock=clocks.wall,
        monotonic=clocks.mono,
        sleep=clocks.sleep,
    )


def test_a_live_holder_refuses_a_second_job(tmp_path: Path) -> None:
    clocks = Clocks()
    first = _lease(tmp_path, "SLURM_JOB_ID=100", clocks)
    assert first.acquire().generation == 1
    second = _lease(tmp_path, "SLURM_JOB_ID=200", clocks)
    clocks.on_sleep.append(first.renew)  # the holder's heartbeat keeps beating meanwhile
    with pytest.raises(LeaseHeldError, match=r"job SLURM_JOB_ID=100 \(host .*generation 1"):
        second.acquire()
    assert clocks.slept < TIMEOUT  # refused as soon as a renewal was seen
    assert first.check()
    assert [p.name for p in (tmp_path / ".lease").iterdir()] == ["gen-000001.json"]


def test_a_silent_holder_is_taken_over_and_learns_it(tmp_path: Path) -> None:
    clocks = Clocks()
    first = _lease(tmp_path, "job-a", clocks)
    first.acquire()
    second = _lease(tmp_path, "job-b", clocks)
    record = second.acquire()  # watched for the whole timeout: no renewal, so it is gone
    assert record.generation == 2
    assert clocks.slept >= TIMEOUT
    assert not first.check()
    assert first.lost is not None and "taken over by job job-b" in first.lost
    first.renew()  # a holder that lost the lease writes nothing any more
    holder = json.loads((tmp_path / ".lease" / "gen-000002.json").read_text())
    assert holder["job_id"] == "job-b"
    assert not (tmp_path / ".lease" / "gen-000001.json").exists()


@pytest.mark.parametrize("how", ["same job", "released", "expired by the wall clock"])
def test_takeover_without_waiting(tmp_path: Path, how: str) -> None:
    clocks = Clocks()
    first = _lease(tmp_path, "job-a", clocks)
    first.acquire()
    if how == "released":
        first.release()
    if how == "expired by the wall clock":
        clocks.now += TIMEOUT + 1
    second = _lease(tmp_path, "job-a" if how == "same job" else "job-b", clocks)
    clocks.slept = 0.0
    assert second.acquire().generation == 2
    assert clocks.slept == 0.0


def test_a_generation_is_created_only_once(tmp_path: Path) -> None:
    clocks = Clocks()
    lease = _lease(tmp_path, "job-a", clocks)
    record = lease.acquire()
    target = tmp_path / ".lease" / "gen-000002.json"
    assert _create_exclusive(target, record)
    assert not _create_exclusive(target, record)  # the loser of a race must look again
    assert sorted(p.name for p in target.parent.iterdir()) == [
        "gen-000001.json",
        "gen-000002.json",
    ]


def test_heartbeat_renews_from_a_thread_and_release_frees(tmp_path: Path) -> None:
    lease = Lease(tmp_path, job_id="job-a", timeout_s=0.2)
    lease.acquire()
    lease.start_heartbeat()
    path = tmp_path / ".lease" / "gen-000001.json"
    deadline = time.monotonic() + 30
    while json.loads(path.read_text())["beats"] < 2:
        assert time.monotonic() < deadline, "no heartbeat"
        time.sleep(0.05)
    lease.release()
    assert json.loads(path.read_text())["released"] is True


def test_job_identity_prefers_the_most_specific_source() -> None:
    assert job_identity({"HYPERPOD_TRAINER_JOB_ID": "ns/llama", "SLURM_JOB_ID": "7"}) == (
        "HYPERPOD_TRAINER_JOB_ID=ns/llama"
    )
    assert job_identity({"SLURM_JOB_ID": "7", "TORCHELASTIC_RUN_ID": "x"}) == "SLURM_JOB_ID=7"
    assert job_identity({"TORCHELASTIC_RUN_ID": "none"}).startswith("host=")
