"""The node health runner (lifecycle/health/runner.py) against the real local Slurm: its own
command line, settings rendered from an environment file, `scontrol` talking to the local
slurmctld. What it asks HyperPod for is read back from Slurm itself (`sinfo -R`, `scontrol show
node`), where HyperPod reads it: the reason text exactly, case-sensitive.

The faults are ones the runner acts on (the GPU checks only log, by design): the FSx mount stops
answering (its probe file is a FIFO, so the write blocks until the runner's deadline) or shows
read-only. The node is resumed after every test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.local import LocalSlurm
from hyperpod_kit.local.health import HealthNode
from tests.integration.slurm.conftest import job_environment

pytestmark = pytest.mark.slurm

FSX_TIMEOUT_S = 5  # the schema's minimum: a hung mount costs a run this long
COOLDOWN_S = 30 * 60  # the default cooldown_minutes


def _node(
    tmp_path: Path, slurm: LocalSlurm, remediation: dict[str, str] | None = None
) -> HealthNode:
    monitoring: dict[str, Any] = {"node_checks": {"fsx_timeout_seconds": FSX_TIMEOUT_S}}
    if remediation is not None:
        monitoring["node_checks"]["remediation"] = remediation
    environment = tmp_path / "environment.yaml"
    environment.write_text(yaml.safe_dump(job_environment(monitoring=monitoring)))
    config = load_environment(environment).config
    fsx = tmp_path / "fsx"
    fsx.mkdir()
    return HealthNode(tmp_path / "node", slurm=slurm, config=config, fsx=fsx)


@pytest.fixture
def slurm(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster, its node idle and without a reason before and after the test."""
    local_slurm.return_node()
    try:
        yield local_slurm
    finally:
        local_slurm.return_node()


def _reasons(slurm: LocalSlurm) -> list[str]:
    """`sinfo -R`: why each node is down, drained or failing, as HyperPod reads it."""
    out = slurm.sinfo("-R", "--noheader", "--format=%E|%N|%T")
    return [line for line in out.splitlines() if line.strip()]


def _assert_idle(slurm: LocalSlurm) -> None:
    node = slurm.node_info()
    assert node["State"] == "IDLE", node
    assert node.get("Reason") is None, node
    assert _reasons(slurm) == []


def test_a_passing_run_leaves_the_node_idle(slurm: LocalSlurm, tmp_path: Path) -> None:
    node = _node(tmp_path, slurm, {"fsx-mount": "replace"})
    result = node.run()
    assert result.returncode == 0, result
    (verdict,) = result.verdicts
    assert (verdict["check"], verdict["status"], verdict["acts"]) == ("fsx-mount", "ok", False)
    assert verdict["node"] == slurm.node and verdict["instance_group"] == node.instance_group
    decision = result.decision
    assert (decision["action"], decision["executed"], decision["command"]) == ("none", False, None)
    _assert_idle(slurm)
    # The same lines went to the log file that is shipped to CloudWatch.
    assert node.log_file.read_text().count('"event": "verdict"') == 1


def test_a_hung_fsx_mount_fails_the_node_with_action_replace(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    node = _node(tmp_path, slurm, {"fsx-mount": "replace"})
    node.hang_fsx()
    result = node.run()
    assert result.returncode == 1, result
    (verdict,) = result.verdicts
    assert verdict["status"] == "fail" and verdict["acts"] is True
    assert f"did not answer a stat and a 4 KiB write within {FSX_TIMEOUT_S} s" in verdict["reason"]
    assert verdict["details"]["seconds"] >= FSX_TIMEOUT_S
    assert result.ended - result.started < FSX_TIMEOUT_S + 20  # the deadline held
    decision = result.decision
    assert (decision["action"], decision["executed"], decision["error"]) == ("replace", True, None)
    assert decision["command"][1:] == [
        "update", f"node={slurm.node}", "state=fail", "reason=Action:Replace"
    ]  # fmt: skip

    assert _reasons(slurm) == [f"Action:Replace|{slurm.node}|fail"]  # exact, case-sensitive
    shown = slurm.node_info()
    assert shown["State"] == "IDLE+FAIL", shown
    assert shown["Reason"].split(" [")[0] == "Action:Replace", shown
    assert shown["Reason"].startswith("Action:Replace [root@"), shown


def test_a_read_only_mount_whose_remediation_is_reboot_sets_action_reboot(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    node = _node(tmp_path, slurm)  # fsx-mount's default remediation: reboot
    assert node.settings["checks"]["fsx-mount"] == {"remediation": "reboot"}
    node.read_only_fsx()
    result = node.run()
    assert result.returncode == 1, result
    (verdict,) = result.verdicts
    assert verdict["reason"] == f"{node.fsx} is mounted read-only"
    assert (result.decision["action"], result.decision["executed"]) == ("reboot", True)
    assert _reasons(slurm) == [f"Action:Reboot|{slurm.node}|fail"]
    assert slurm.node_info()["Reason"].split(" [")[0] == "Action:Reboot"


def test_a_flapping_check_acts_once_per_cooldown(slurm: LocalSlurm, tmp_path: Path) -> None:
    node = _node(tmp_path, slurm, {"fsx-mount": "replace"})
    t0 = time.time()

    node.read_only_fsx()
    first = node.run(now=t0)
    assert (first.decision["action"], first.decision["executed"]) == ("replace", True)
    assert _reasons(slurm) == [f"Action:Replace|{slurm.node}|fail"]
    slurm.scontrol("update", f"nodename={slurm.node}", "state=resume")  # repaired; it remembers
    _assert_idle(slurm)

    node.heal_fsx()
    assert node.run(now=t0 + 300).returncode == 0
    node.read_only_fsx()  # fails again, 10 minutes after the request
    again = node.run(now=t0 + 600)
    assert again.returncode == 1  # still a failing verdict: alerted, not acted on
    decision = again.decision
    assert (decision["action"], decision["executed"], decision["command"]) == ("none", False, None)
    assert "cooldown 1800 s" in decision["why"] and "asked for replace" in decision["why"]
    _assert_idle(slurm)  # the node was not failed a second time

    later = node.run(now=t0 + COOLDOWN_S + 1)  # the cooldown is over: it acts again
    assert (later.decision["action"], later.decision["executed"]) == ("replace", True)
    assert _reasons(slurm) == [f"Action:Replace|{slurm.node}|fail"]


def test_a_node_already_failed_for_an_action_is_not_asked_again(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    """The runner reads Slurm 22.05's own state strings (`IDLE+FAIL`, `Reason=Action:Replace
    [root@...]`) to see that a request is already pending, past the cooldown."""
    node = _node(tmp_path, slurm, {"fsx-mount": "replace"})
    t0 = time.time()
    node.read_only_fsx()
    assert node.run(now=t0).decision["executed"] is True
    marked = slurm.node_info()["Reason"]

    again = node.run(now=t0 + COOLDOWN_S + 60)
    decision = again.decision
    assert (decision["action"], decision["executed"]) == ("none", False)
    assert decision["why"] == "the node is already marked Action:Replace"
    assert slurm.node_info()["Reason"] == marked  # untouched: same request, same timestamp
