"""The harness with several nodes on this one host (`LocalSlurm(nodes=2)`): one slurmd per node
(Slurm's multiple-slurmd layout), a job across both with one task on each, and one node lost on
its own while the other keeps running, then returned.

Its cluster is this module's own (two nodes), not the session's one-node cluster; the fixture has
the session fixture's name so that a failed test shows its queue, nodes and logs (conftest).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.local import LocalSlurm, SlurmUnavailableError
from hyperpod_kit.local.slurm import node_names, slurm_conf

pytestmark = pytest.mark.slurm

STEP_TIMEOUT_S = 30.0


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def local_slurm() -> Iterator[LocalSlurm]:
    """Two nodes for this module; skipped (failed under CI) as the session's cluster is."""
    slurm = LocalSlurm(partition="compute", nodes=2)
    try:
        slurm.start()
    except SlurmUnavailableError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm must run under CI (.ci/run installs it): {e}", pytrace=False)
        pytest.skip(f"no local Slurm: {e}")
    try:
        yield slurm
    finally:
        slurm.stop()


@pytest.fixture
def submitted(local_slurm: LocalSlurm) -> Iterator[list[str]]:
    """Afterwards, whatever happened: the jobs added are cancelled and every node is back."""
    jobs: list[str] = []
    try:
        yield jobs
    finally:
        for job_id in jobs:
            if not local_slurm.job(job_id).finished:
                local_slurm.cancel(job_id)
                local_slurm.wait_finished(job_id, 60)
        for node in local_slurm.nodes:
            local_slurm.return_node(node=node)


def _conf(root: Path, nodes: dict[str, int]) -> str:
    return slurm_conf(
        root=root,
        node="vm",
        hardware="CPUs=2",
        partition="compute",
        controller_port=40001,
        slurmd_port=40002,
        munge_socket=root / "run" / "munge.socket",
        nodes=nodes,
    )


def test_node_names_and_their_config(tmp_path: Path) -> None:
    assert node_names(3, "vm") == ["vm", "vm-2", "vm-3"]
    assert node_names(1, "vm") == ["vm"]
    with pytest.raises(ValueError, match="at least one node"):
        node_names(0, "vm")
    conf = _conf(tmp_path, {"vm": 40002, "vm-2": 40003})
    settings = dict(
        line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#")
    )
    assert settings["SlurmdSpoolDir"] == f"{tmp_path}/spool/%n"
    assert settings["SlurmdPidFile"] == f"{tmp_path}/run/slurmd.%n.pid"
    assert settings["SlurmdLogFile"] == f"{tmp_path}/log/slurmd.%n.log"
    node_lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert node_lines == [
        "NodeName=vm NodeHostname=vm NodeAddr=127.0.0.1 Port=40002 CPUs=2 State=UNKNOWN",
        "NodeName=vm-2 NodeHostname=vm NodeAddr=127.0.0.1 Port=40003 CPUs=2 State=UNKNOWN",
    ]
    assert "PartitionName=compute Nodes=vm,vm-2 " in conf
    # One node keeps the one-node layout: no %n, no Port= of its own.
    single = _conf(tmp_path, {"vm": 40002})
    assert "%n" not in single and "Port=40002 " not in single
    assert "NodeName=vm NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN" in single
    with pytest.raises(ValueError, match="not among the nodes"):
        slurm_conf(
            root=tmp_path,
            node="vm",
            hardware="CPUs=2",
            partition="compute",
            controller_port=40001,
            slurmd_port=40002,
            munge_socket=tmp_path / "run" / "munge.socket",
            nodes={"vm-2": 40003, "vm-3": 40004},
        )


def test_rendezvous_host_and_unknown_node_names() -> None:
    one, two = LocalSlurm(), LocalSlurm(nodes=2)
    assert one.nodes == [one.node] and one.rendezvous_host == one.node
    assert two.nodes == [two.node, f"{two.node}-2"] and two.rendezvous_host == "127.0.0.1"
    with pytest.raises(ValueError, match="at least one node"):
        LocalSlurm(nodes=0)
    with pytest.raises(ValueError, match="is not a node of this cluster"):
        two.node_info("elsewhere")  # refused before any Slurm command


def test_both_nodes_idle_with_a_slurmd_each(local_slurm: LocalSlurm) -> None:
    first, second = local_slurm.nodes
    daemons = local_slurm.daemons
    assert set(daemons) == {"munged", "slurmctld", f"slurmd.{first}", f"slurmd.{second}"}
    for node in local_slurm.nodes:
        info = local_slurm.node_info(node)
        assert info["State"] == "IDLE" and info["NodeAddr"] == "127.0.0.1"
        assert info["Partitions"] == "compute"
        assert "slurmd started on" in local_slurm.log(f"slurmd.{node}")
        assert (local_slurm.root / "run" / f"slurmd.{node}.pid").read_text().strip() == str(
            daemons[f"slurmd.{node}"]
        )


def test_a_job_across_both_nodes_runs_one_task_on_each(
    local_slurm: LocalSlurm, submitted: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "where.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2 --ntasks-per-node=1 --output=%x_%j.out\n"
        "srun bash -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME\"'\n"
    )
    submitted.append(job_id := local_slurm.sbatch(script, workdir=tmp_path))
    job = local_slurm.wait_finished(job_id, STEP_TIMEOUT_S)
    assert job.state == "COMPLETED", job
    assert job.node_list == ",".join(local_slurm.nodes)
    lines = sorted(job.stdout.read_text().split("\n"))
    first, second = local_slurm.nodes
    assert [line for line in lines if line] == [f"task 0 on {first}", f"task 1 on {second}"]


def test_one_node_is_lost_alone_and_returns(
    local_slurm: LocalSlurm, submitted: list[str], tmp_path: Path
) -> None:
    """A step on each node; losing the second kills its slurmd and its step's processes, none of
    the first's: the first stays up and goes back to IDLE, the second is DOWN until returned."""
    first, second = local_slurm.nodes
    script = tmp_path / "sleep.sbatch"
    # --no-requeue: the job ends NODE_FAIL with its node instead of waiting to run again.
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --no-requeue\nsrun sleep 600\n"
    )
    submitted.append(job_id := local_slurm.sbatch(script, workdir=tmp_path))
    local_slurm.wait_job(job_id, lambda job: job.state == "RUNNING", "to run", STEP_TIMEOUT_S)

    def sleeping(node: str) -> list[int]:
        return [
            p.pid
            for p in local_slurm.job_processes(job_id, node)
            if Path(p.argv[0]).name == "sleep"
        ]

    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not (sleeping(first) and sleeping(second)):
        assert time.monotonic() < deadline, "the job's step did not start on both nodes"
        time.sleep(0.1)
    on_first = {p.pid for p in local_slurm.job_processes(job_id, first)}
    on_second = local_slurm.job_processes(job_id, second)
    assert on_second and all(p.environ["SLURMD_NODENAME"] == second for p in on_second)
    assert not on_first & {p.pid for p in on_second}
    assert {p.pid for p in local_slurm.job_processes(job_id)} == on_first | {
        p.pid for p in on_second
    }
    first_slurmd = local_slurm.daemons[f"slurmd.{first}"]
    second_slurmd = local_slurm.daemons[f"slurmd.{second}"]

    killed = set(local_slurm.lose_node("lost in a test", node=second))

    assert {second_slurmd, *(p.pid for p in on_second)} <= killed
    assert first_slurmd not in killed and not on_first & killed
    assert _running(first_slurmd) and not _running(second_slurmd)
    assert set(local_slurm.daemons) == {"munged", "slurmctld", f"slurmd.{first}"}
    job = local_slurm.wait_finished(job_id, STEP_TIMEOUT_S)
    assert job.state == "NODE_FAIL", job
    assert local_slurm.node_info(second)["State"].startswith("DOWN")
    local_slurm.wait_node(lambda n: n["State"] == "IDLE", "idle", STEP_TIMEOUT_S, first)
    assert local_slurm.node_info(second)["State"].startswith("DOWN")

    local_slurm.return_node(node=second)
    assert local_slurm.node_info(second)["State"] == "IDLE"
    assert local_slurm.node_info(first)["State"] == "IDLE"
    assert _running(first_slurmd) and local_slurm.daemons[f"slurmd.{first}"] == first_slurmd
