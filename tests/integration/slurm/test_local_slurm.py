"""The harness itself (`hyperpod_kit.local.slurm`): what it parses, why it refuses to start, and
that stopping a cluster kills its daemons and its jobs by pid and nothing of anyone else's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hyperpod_kit.local import LocalSlurm
from hyperpod_kit.local import slurm as local_slurm_module
from hyperpod_kit.local.slurm import parse_fields, slurm_conf, unavailable_reason

pytestmark = pytest.mark.slurm


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_scontrol_one_line_output_is_parsed_with_spaces_in_values() -> None:
    line = (
        "NodeName=vm Arch=x86_64 CoresPerSocket=2 State=DOWN ThreadsPerCore=1 "
        "Reason=node lost: replaced [root@2026-11-23T08:52:25] Comment=(null) "
        "TRES=cpu=2,mem=1M AllocNode:Sid=localhost:21531"
    )
    fields = parse_fields(line)
    assert fields["Reason"] == "node lost: replaced [root@2026-11-23T08:52:25]"
    assert fields["TRES"] == "cpu=2,mem=1M"
    assert fields["AllocNode:Sid"] == "localhost:21531"
    assert fields["State"] == "DOWN" and fields["NodeName"] == "vm"


def test_config_is_private_to_its_root_and_ports(tmp_path: Path) -> None:
    conf = slurm_conf(
        root=tmp_path,
        node="vm",
        hardware="CPUs=2",
        partition="compute",
        controller_port=40001,
        slurmd_port=40002,
        munge_socket=tmp_path / "run" / "munge.socket",
    )
    settings = dict(
        line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#")
    )
    assert settings["SlurmctldPort"] == "40001" and settings["SlurmdPort"] == "40002"
    assert settings["AuthInfo"] == f"socket={tmp_path}/run/munge.socket"
    paths = ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile",
             "SlurmctldLogFile", "SlurmdLogFile", "PlugStackConfig")  # fmt: skip
    assert all(settings[key].startswith(f"{tmp_path}/") for key in paths)
    assert settings["ProctrackType"] == "proctrack/linuxproc"
    assert settings["TaskPlugin"] == "task/none"
    assert settings["ReturnToService"] == "1"
    assert "PartitionName=compute Nodes=vm " in conf
    assert "NodeName=vm NodeAddr=127.0.0.1 CPUs=2 " in conf


def test_missing_binaries_are_the_reason_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(local_slurm_module, "SBIN", ())
    reason = unavailable_reason()
    assert reason is not None
    assert reason.startswith("Slurm is not installed: munged, slurmctld, slurmd, sbatch")
    assert "apt-get install slurmctld slurmd slurm-client munge" in reason


def test_stop_kills_its_daemons_and_jobs_by_pid_and_nothing_else(
    local_slurm: LocalSlurm, tmp_path: Path
) -> None:
    """A second cluster beside the session's: its job and daemons die with `stop`, the session's
    cluster keeps answering."""
    other = LocalSlurm(partition="scratch")
    other.start()
    try:
        assert other.root != local_slurm.root
        script = tmp_path / "sleep.sbatch"
        script.write_text("#!/bin/bash\nsrun sleep 600\n")
        job_id = other.sbatch(script, workdir=tmp_path)
        other.wait_job(job_id, lambda job: job.state == "RUNNING", "to run", 30)
        deadline = time.monotonic() + 30
        while not any(Path(p.argv[0]).name == "sleep" for p in other.job_processes(job_id)):
            assert time.monotonic() < deadline, "the job's step never started"
            time.sleep(0.1)
        job_pids = [p.pid for p in other.job_processes(job_id)]
        daemon_pids = other.daemons
        assert set(daemon_pids) == {"munged", "slurmctld", "slurmd"}
        root = other.root
    finally:
        other.stop()
    assert not [pid for pid in [*job_pids, *daemon_pids.values()] if _running(pid)]
    assert not root.exists()
    assert all(_running(pid) for pid in local_slurm.daemons.values())
    assert local_slurm.node_info()["State"] == "IDLE"
