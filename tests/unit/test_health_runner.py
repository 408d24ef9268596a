"""The node health runner (lifecycle/health/runner.py) end to end on a fake node: settings rendered
from a real environment file, a fake /proc and /sys under --root, a temp directory for /fsx, and
recording fakes of scontrol and kubectl first on PATH. What it asks HyperPod for is read back from
the fakes' own record of their arguments."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.health_settings import node_health_settings
from tests.conftest import REPO, assert_node_python, default_data, merge

HEALTH = REPO / "lifecycle" / "health"
DATA = REPO / "tests" / "data" / "health"
if str(HEALTH) not in sys.path:
    sys.path.insert(0, str(HEALTH))

import runner  # noqa: E402
from checks import Verdict  # noqa: E402

NODE = "ip-10-1-77-12"
T0 = 1_790_000_000.0
GPU_GROUP = {
    "name": "gpu",
    "role": "compute",
    "instance_type": "ml.p4d.24xlarge",
    "instance_count": 2,
}
CONTROLLER = {
    "name": "controller",
    "role": "controller",
    "instance_type": "ml.m5.xlarge",
    "instance_count": 1,
}

FAKE_SCONTROL = """#!/bin/bash
# Records its arguments; `show` prints the node as $FAKE_SCONTROL_SHOW describes it.
printf 'scontrol %s\\n' "$*" >> "$FAKE_CALLS"
if [ "$1" = show ] && [ -f "${FAKE_SCONTROL_SHOW:-}" ]; then cat "$FAKE_SCONTROL_SHOW"; fi
exit "${FAKE_SCONTROL_RC:-0}"
"""
FAKE_KUBECTL = """#!/bin/bash
# Records its arguments; `get` prints the node-health-status label from $FAKE_KUBECTL_LABEL.
printf 'kubectl %s\\n' "$*" >> "$FAKE_CALLS"
for arg in "$@"; do
  if [ "$arg" = get ]; then printf '%s' "${FAKE_KUBECTL_LABEL:-Schedulable}"; fi
done
exit 0
"""
FAKE_NVIDIA_SMI = """#!/bin/bash
# Prints the recorded file that answers the query it is asked.
case "$*" in
  *uuid*) cat "$FAKE_SMI_COUNT" ;;
  *ecc*) cat "$FAKE_SMI_ECC" ;;
esac
"""


class Node:
    """A fake HyperPod node in a temp directory, and a way to run the real runner on it."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> None:
        self.tmp = tmp
        self.root = tmp / "root"
        self.fsx = tmp / "fsx"
        self.fsx.mkdir()
        (self.root / "proc").mkdir(parents=True)
        (self.root / "proc/uptime").write_text("86400.00 170000.00\n")
        (self.root / "proc/mounts").write_text(
            f"/dev/nvme0n1p1 / ext4 rw 0 0\n10.1.0.5@tcp:/abcdefgh {self.fsx} lustre rw 0 0\n"
        )
        for i in range(4):  # ml.p4d.24xlarge: 4 EFA devices
            port = self.root / f"sys/class/infiniband/rdmap{16 + 16 * i}s27/ports/1"
            port.mkdir(parents=True)
            (port / "state").write_text("4: ACTIVE\n")
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for name, text in [
            ("scontrol", FAKE_SCONTROL),
            ("kubectl", FAKE_KUBECTL),
            ("nvidia-smi", FAKE_NVIDIA_SMI),
        ]:
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.calls = tmp / "calls.txt"
        self.calls.touch()
        monkeypatch.setenv("PATH", f"{self.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_CALLS", str(self.calls))
        monkeypatch.setenv("FAKE_SMI_COUNT", str(DATA / "nvidia-smi/count-8.csv"))
        monkeypatch.setenv("FAKE_SMI_ECC", str(DATA / "nvidia-smi/ecc-clean.csv"))
        self.monkeypatch = monkeypatch
        config = EnvironmentConfig.model_validate(
            merge(
                default_data(),
                merge({"cluster": {"instance_groups": [CONTROLLER, GPU_GROUP]}}, overrides),
            )
        )
        self.settings = node_health_settings(config)
        self.settings["fsx"] = {"mount_path": str(self.fsx), "timeout_seconds": 1}
        self.settings["disk"] = {"min_free_percent": 5, "volumes": [str(tmp)]}
        self.settings["efa"] = {"fi_info": str(tmp / "no-fi_info")}
        self.write_settings()
        self.state = tmp / "state.json"
        self.log = tmp / "health.jsonl"

    def write_settings(self) -> None:
        (self.tmp / "settings.json").write_text(json.dumps(self.settings))

    def env(self, **values: str) -> None:
        for key, value in values.items():
            self.monkeypatch.setenv(key, value)

    def break_efa(self) -> None:
        shutil.rmtree(self.root / "sys/class/infiniband/rdmap64s27")

    def fix_efa(self) -> None:
        port = self.root / "sys/class/infiniband/rdmap64s27/ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")

    def hang_fsx(self) -> None:
        (self.fsx / ".hyperpod-kit-health").mkdir(exist_ok=True)
        os.mkfifo(self.fsx / ".hyperpod-kit-health" / f"{NODE}.probe")

    def args(self, now: float, *extra: str) -> list[str]:
        return [
            "run",
            "--settings", str(self.tmp / "settings.json"),
            "--node-name", NODE,
            "--instance-group", "gpu",
            "--root", str(self.root),
            "--state-file", str(self.state),
            "--log-file", str(self.log),
            "--kernel-log", str(DATA / "kernel/clean.log"),
            "--now", str(now),
            *extra,
        ]  # fmt: skip

    def run(self, now: float = T0, *extra: str) -> tuple[int, list[dict[str, Any]]]:
        before = self.log.read_text().count("\n") if self.log.exists() else 0
        code = runner.main(self.args(now, *extra))
        lines = [json.loads(x) for x in self.log.read_text().splitlines()[before:]]
        return code, lines

    def requests(self) -> list[str]:
        return [
            c for c in self.calls.read_text().splitlines() if " show " not in c and " get " not in c
        ]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def decision(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [x for x in lines if x["event"] == "decision"]
    return found


def verdicts(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {x["check"]: x for x in lines if x["event"] == "verdict"}


# --- Slurm --------------------------------------------------------------------------------------


def test_a_healthy_node_asks_for_nothing(node: Node) -> None:
    code, lines = node.run()
    assert code == 0
    assert {v["status"] for v in verdicts(lines).values()} == {"ok"}
    assert set(verdicts(lines)) == {"gpu-count", "gpu-errors", "efa", "fsx-mount", "disk-space"}
    assert decision(lines)["action"] == "none"
    assert node.calls.read_text() == ""  # not even asked for the node's state


def test_a_missing_efa_device_fails_the_node_for_replacement(node: Node) -> None:
    node.break_efa()
    code, lines = node.run()
    assert code == 1
    assert node.requests() == [f"scontrol update node={NODE} state=fail reason=Action:Replace"]
    d = decision(lines)
    assert (d["action"], d["check"], d["executed"]) == ("replace", "efa", True)
    efa = verdicts(lines)["efa"]
    assert (efa["status"], efa["remediation"], efa["acts"]) == ("fail", "replace", True)
    assert all(v["source"] == "hyperpod-kit-health" and v["node"] == NODE for v in lines)


def test_a_hung_fsx_mount_asks_for_a_reboot(node: Node) -> None:
    node.hang_fsx()
    code, lines = node.run()
    assert code == 1
    assert node.requests() == [f"scontrol update node={NODE} state=fail reason=Action:Reboot"]
    assert "did not answer" in verdicts(lines)["fsx-mount"]["reason"]


def test_gpu_and_xid_failures_only_alert(node: Node) -> None:
    node.env(FAKE_SMI_COUNT=str(DATA / "nvidia-smi/count-7.csv"))
    # Even a hand-edited settings file cannot make the GPU checks act.
    node.settings["checks"]["gpu-count"] = {"remediation": "replace"}
    node.settings["checks"]["gpu-errors"] = {"remediation": "replace"}
    node.write_settings()
    code, lines = node.run(T0, "--kernel-log", str(DATA / "kernel/xid-79.log"))
    assert code == 1
    found = verdicts(lines)
    assert found["gpu-count"]["status"] == found["gpu-errors"]["status"] == "fail"
    assert found["gpu-errors"]["recommended"] == "replace"  # the XID table's answer, for the alert
    assert found["gpu-count"]["remediation"] == found["gpu-errors"]["remediation"] == "none"
    d = decision(lines)
    assert d["action"] == "none" and "HyperPod's health-monitoring agent" in d["why"]
    assert node.calls.read_text() == ""


def test_a_flapping_check_does_not_repair_the_node_twice(node: Node) -> None:
    node.break_efa()
    node.run(T0)
    node.fix_efa()
    assert decision(node.run(T0 + 300)[1])["action"] == "none"
    node.break_efa()
    _, lines = node.run(T0 + 600)  # within the cooldown
    assert decision(lines)["action"] == "none" and "cooldown" in decision(lines)["why"]
    # After the cooldown, the node is still failing for the first request: nothing new either.
    node.env(FAKE_SCONTROL_SHOW=str(DATA / "scontrol/failing-replace.txt"))
    _, lines = node.run(T0 + 3600)
    assert decision(lines)["why"] == "the node is already marked Action:Replace"
    assert len(node.requests()) == 1


def test_a_drain_for_another_reason_does_not_stop_a_repair(node: Node) -> None:
    node.env(FAKE_SCONTROL_SHOW=str(DATA / "scontrol/drained-kill-task.txt"))
    node.hang_fsx()  # Slurm drains nodes whose hung mount keeps tasks from dying
    node.run()
    assert node.requests() == [f"scontrol update node={NODE} state=fail reason=Action:Reboot"]


def test_auto_repair_off_never_acts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(tmp_path, monkeypatch, monitoring={"auto_repair": False})
    node.break_efa()
    node.hang_fsx()
    code, lines = node.run()
    assert code == 1
    assert decision(lines)["why"].startswith("auto_repair is off: efa would ask for replace")
    assert node.calls.read_text() == ""


def test_controller_and_login_nodes_only_alert(node: Node) -> None:
    node.break_efa()
    args = node.args(T0)
    args[args.index("gpu")] = "controller"
    args += ["--instance-type", "ml.p4d.24xlarge"]  # an EFA type, so efa runs and fails
    assert runner.main(args) == 1
    d = decision([json.loads(x) for x in node.log.read_text().splitlines()])
    assert d["action"] == "none" and d["why"].startswith("group controller is not a compute")
    assert node.calls.read_text() == ""


def test_no_repair_in_the_first_minutes_after_boot(node: Node) -> None:
    (node.root / "proc/uptime").write_text("120.5 200.0\n")
    node.break_efa()
    _, lines = node.run()
    assert decision(lines)["why"] == "booted 120 s ago; no replace in the first 600 s"
    assert node.requests() == []


def test_a_check_failing_again_after_its_reboot_asks_for_replacement(node: Node) -> None:
    node.hang_fsx()
    node.run(T0)
    cooldown = node.settings["cooldown_seconds"]
    _, lines = node.run(T0 + cooldown + 60)
    d = decision(lines)
    assert (d["action"], d["check"]) == ("replace", "fsx-mount")
    assert node.requests() == [
        f"scontrol update node={NODE} state=fail reason=Action:Reboot",
        f"scontrol update node={NODE} state=fail reason=Action:Replace",
    ]


def test_a_request_slurm_refused_is_tried_again_next_run(node: Node) -> None:
    node.break_efa()
    node.env(FAKE_SCONTROL_RC="1")
    _, lines = node.run(T0)
    d = decision(lines)
    assert d["executed"] is False and d["error"] == "scontrol exited 1"
    node.env(FAKE_SCONTROL_RC="0")
    _, lines = node.run(T0 + 300)
    assert decision(lines)["executed"] is True
    assert len(node.requests()) == 2


def test_dry_run_decides_but_asks_for_nothing(node: Node) -> None:
    node.break_efa()
    _, lines = node.run(T0, "--dry-run")
    d = decision(lines)
    assert (d["action"], d["dry_run"], d["executed"]) == ("replace", True, False)
    assert node.requests() == []


def test_a_crashing_check_does_not_silence_the_others(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(ctx: Any) -> Verdict:
        raise RuntimeError("unexpected sysfs layout")

    monkeypatch.setitem(runner.CHECKS, "efa", boom)
    node.hang_fsx()
    _, lines = node.run()
    assert verdicts(lines)["efa"]["status"] == "cannot-run"
    assert "RuntimeError: unexpected sysfs layout" in verdicts(lines)["efa"]["reason"]
    assert decision(lines)["action"] == "reboot"


def test_monitoring_off_runs_nothing(node: Node) -> None:
    node.settings["enabled"] = False
    node.write_settings()
    node.break_efa()
    code, lines = node.run()
    assert code == 0 and [x["event"] for x in lines] == ["skipped"]
    assert node.calls.read_text() == ""


def test_a_second_run_while_one_is_going_skips(node: Node) -> None:
    node.state.parent.mkdir(parents=True, exist_ok=True)
    with open(str(node.state) + ".lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        code, lines = node.run()
    assert code == 0 and [x["event"] for x in lines] == ["skipped"]


# --- EKS ----------------------------------------------------------------------------------------


def test_eks_labels_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(tmp_path, monkeypatch)
    node.settings["orchestrator"] = "eks"
    node.settings["eks"] = {"kubeconfig": "/var/lib/kubelet/kubeconfig"}
    node.write_settings()
    node.break_efa()
    node.run()
    label = "sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement"
    assert node.requests() == [
        f"kubectl --kubeconfig /var/lib/kubelet/kubeconfig label node {NODE} {label} --overwrite"
    ]


@pytest.mark.parametrize("label", ["UnschedulablePendingReboot", "Unschedulable"])
def test_eks_leaves_a_node_hyperpod_is_already_handling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str
) -> None:
    node = Node(tmp_path, monkeypatch)
    node.settings["orchestrator"] = "eks"
    node.write_settings()
    node.env(FAKE_KUBECTL_LABEL=label)
    node.break_efa()
    _, lines = node.run()
    assert decision(lines)["why"] == f"the node is already marked {label}"
    assert node.requests() == []


# --- who the node is ----------------------------------------------------------------------------


def test_the_node_finds_its_group_in_hyperpods_resource_config(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "opt/ml/config").mkdir(parents=True)
    shutil.copy(DATA / "resource_config.json", root / "opt/ml/config/resource_config.json")
    (root / "sys/devices/virtual/dmi/id").mkdir(parents=True)
    (root / "sys/devices/virtual/dmi/id/board_asset_tag").write_text("i-0b1c2d3e4f5a6b7c8\n")
    config = EnvironmentConfig.model_validate(
        merge(default_data(), {"cluster": {"instance_groups": [CONTROLLER, GPU_GROUP]}})
    )
    settings = node_health_settings(config)
    found = runner.resolve_node(settings, "eks", root=str(root))
    assert found.instance_group == "gpu" and found.instance_id == "i-0b1c2d3e4f5a6b7c8"
    assert found.name == "hyperpod-i-0b1c2d3e4f5a6b7c8"
    assert (found.facts.instance_type, found.facts.gpus, found.facts.efa_interfaces) == (
        "ml.p4d.24xlarge", 8, 4,
    )  # fmt: skip


# --- the command line ---------------------------------------------------------------------------


def test_the_command_line_runs_as_a_script(node: Node) -> None:
    node.break_efa()
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, str(HEALTH / "runner.py"), *node.args(T0)[1:]],  # "run" is the default
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    stdout = [json.loads(x) for x in done.stdout.splitlines()]
    assert decision(stdout)["action"] == "replace"
    assert node.requests() == [f"scontrol update node={NODE} state=fail reason=Action:Replace"]


def test_bad_settings_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "settings.json").write_text('{"version": 99}')
    assert runner.main(["run", "--settings", str(tmp_path / "settings.json")]) == 2
    assert "expected settings version 1" in capsys.readouterr().err


def test_units_run_the_checks_at_the_configured_interval(tmp_path: Path) -> None:
    config = EnvironmentConfig.model_validate(
        merge(default_data(), {"monitoring": {"node_checks": {"interval_seconds": 120}}})
    )
    (tmp_path / "settings.json").write_text(json.dumps(node_health_settings(config)))
    out = tmp_path / "units"
    args = ["units", "--settings", str(tmp_path / "settings.json"), "--out", str(out)]
    assert runner.main([*args, "--instance-group", "compute"]) == 0
    timer = (out / "hyperpod-kit-health.timer").read_text()
    service = (out / "hyperpod-kit-health.service").read_text()
    assert "OnUnitActiveSec=120\n" in timer and "WantedBy=timers.target" in timer
    assert f"ExecStart=/usr/bin/python3 {HEALTH / 'runner.py'} run --settings" in service
    assert "/settings.json --instance-group compute\n" in service
    assert "TimeoutStartSec=120" in service and "slurm.conf" not in service


def test_units_name_node_paths_below_root(tmp_path: Path) -> None:
    """The lifecycle hook renders the units in a sandbox root in tests: they name the paths the
    node sees, never the sandbox's."""
    installed = tmp_path / "root" / "opt/hyperpod-kit/health"
    shutil.copytree(HEALTH, installed, ignore=shutil.ignore_patterns("__pycache__"))
    (installed / "settings.json").write_text(json.dumps(node_health_settings(
        EnvironmentConfig.model_validate(default_data())
    )))  # fmt: skip
    out = tmp_path / "units"
    result = subprocess.run(
        [sys.executable, str(installed / "runner.py"), "units", "--root", str(tmp_path / "root"),
         "--settings", str(installed / "settings.json"), "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    service = (out / "hyperpod-kit-health.service").read_text()
    assert (
        "ExecStart=/usr/bin/python3 /opt/hyperpod-kit/health/runner.py run "
        "--settings /opt/hyperpod-kit/health/settings.json\n"
    ) in service
    outside = subprocess.run(
        [sys.executable, str(installed / "runner.py"), "units", "--root", str(tmp_path / "x"),
         "--settings", str(installed / "settings.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert outside.returncode == 2 and "is not under --root" in outside.stderr


# --- settings and portability -------------------------------------------------------------------


def test_settings_follow_the_environment_file() -> None:
    config = EnvironmentConfig.model_validate(
        merge(
            default_data(),
            {
                "cluster": {"instance_groups": [CONTROLLER, GPU_GROUP]},
                "monitoring": {
                    "auto_repair": False,
                    "node_checks": {
                        "checks": ["efa", "gpu-errors", "disk-space"],
                        "remediation": {"disk-space": "replace", "gpu-errors": "none"},
                        "cooldown_minutes": 45,
                    },
                },
            },
        )
    )
    settings = node_health_settings(config)
    assert settings["checks"] == {
        "efa": {"remediation": "replace"},
        "gpu-errors": {"remediation": "none"},
        "disk-space": {"remediation": "replace"},
    }
    assert (settings["auto_repair"], settings["cooldown_seconds"]) == (False, 2700)
    assert settings["groups"] == {"controller": "ml.m5.xlarge", "gpu": "ml.p4d.24xlarge"}
    assert settings["repairable_groups"] == ["gpu"]
    assert settings["instance_types"]["ml.p4d.24xlarge"] == {
        "gpus": 8, "efa_interfaces": 4, "accelerator": "NVIDIA A100",
    }  # fmt: skip
    assert settings["fsx"]["mount_path"] == "/fsx"


def node_files() -> list[Path]:
    return sorted([*HEALTH.glob("runner*.py"), *(HEALTH / "checks").rglob("*.py")])


@pytest.mark.parametrize("path", node_files(), ids=lambda p: str(p.relative_to(HEALTH)))
def test_node_code_parses_as_python_3_8(path: Path) -> None:
    """Nodes run the AMI's python3 (3.8 on Ubuntu 20.04 images): no newer syntax, no newer APIs."""
    assert_node_python(path, local=frozenset({"checks"}))


def test_the_fake_commands_pass_shellcheck(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    for name, text in [
        ("scontrol", FAKE_SCONTROL),
        ("kubectl", FAKE_KUBECTL),
        ("smi", FAKE_NVIDIA_SMI),
    ]:
        (tmp_path / name).write_text(text)
        done = subprocess.run(
            ["shellcheck", str(tmp_path / name)], check=False, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout
