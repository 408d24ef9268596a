"""The node checks (lifecycle/health/checks/) against recorded inputs: kernel-log XID lines,
nvidia-smi output, a fake /sys with EFA devices, a real child process probing a temp directory that
stands in for /fsx (hung through a FIFO, read-only through /proc/mounts), and an injected statvfs.
Each test asserts the verdict and what the failure calls for."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import REPO

HEALTH = REPO / "lifecycle" / "health"
DATA = REPO / "tests" / "data" / "health"
if str(HEALTH) not in sys.path:
    sys.path.insert(0, str(HEALTH))

import checks  # noqa: E402
from checks import xid  # noqa: E402
from checks.core import CommandResult, Context, InstanceFacts, run_command  # noqa: E402

P4D = InstanceFacts("ml.p4d.24xlarge", gpus=8, efa_interfaces=4)
M5 = InstanceFacts("ml.m5.xlarge", gpus=0, efa_interfaces=0)


def data(path: str) -> str:
    return (DATA / path).read_text()


def result(argv: list[str], code: int = 0, out: str = "", err: str = "") -> CommandResult:
    return CommandResult(argv, code, out, err)


class Commands:
    """A fake `run`: answers by program name (and a piece of the arguments), records calls."""

    def __init__(self, answers: dict[str, Callable[[list[str]], CommandResult]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> CommandResult:
        self.calls.append(argv)
        name = os.path.basename(argv[0])
        for key, answer in self.answers.items():
            program, _, needle = key.partition(" ")
            if program == name and needle in " ".join(argv):
                return answer(argv)
        return CommandResult(argv, None, missing=True)


def smi(count: str = "nvidia-smi/count-8.csv", ecc: str = "nvidia-smi/ecc-clean.csv") -> Commands:
    return Commands(
        {
            "nvidia-smi --query-gpu=index,pci.bus_id,uuid": lambda a: result(a, 0, data(count)),
            "nvidia-smi ecc.errors": lambda a: result(a, 0, data(ecc)),
        }
    )


def context(**kw: Any) -> Context:
    kw.setdefault("settings", {})
    kw.setdefault("facts", P4D)
    kw.setdefault("node", "ip-10-1-77-12")
    kw.setdefault("clock", lambda: 1_790_000_000.0)
    return Context(**kw)


# --- the XID table ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "mnemonic", "bucket", "action"),
    [
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "replace"),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "replace"),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "none"),
        (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "reboot"),
        (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "reboot"),
        (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "none"),
        (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "reboot"),
        (13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "none"),
        (119, "GSP_RPC_TIMEOUT", "RESET_GPU", "reboot"),
        (61, "PMU_BREAKPOINT", "UNEXPECTED_ERR_REPORT_ISSUE", "replace"),
    ],
)
def test_xid_table_follows_nvidia_buckets(
    code: int, mnemonic: str, bucket: str, action: str
) -> None:
    rule = xid.classify(code)
    assert (rule.mnemonic, rule.bucket, rule.action) == (mnemonic, bucket, action)


def test_every_xid_row_maps_its_bucket_through_one_rule() -> None:
    for code, rule in xid.XID_TABLE.items():
        assert rule.action == xid.BUCKET_ACTION[rule.bucket], code


def test_unknown_xid_and_xid_154_name_their_action() -> None:
    assert xid.classify(999).action == "none"
    reboot = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert xid.classify(154, reboot).action == "reboot"
    back = "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"
    assert xid.classify(154, back).action == "none"


def test_xid_lines_old_and_new_forms() -> None:
    new = xid.parse_line("kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.")
    old = xid.parse_line("kernel: NVRM: Xid (0000:03:00): 13, Graphics Exception")
    assert new is not None and (new.xid, new.pci, new.action) == (79, "0000:2b:00", "replace")
    assert old is not None and (old.xid, old.pci) == (13, "0000:03:00")
    assert xid.parse_line("kernel: Lustre: Mounted abcdefgh-client") is None


# --- gpu-errors (alerts only; the runner never acts on it) --------------------------------------


@pytest.mark.parametrize(
    ("log", "status", "recommended", "codes"),
    [
        ("kernel/xid-79.log", "fail", "replace", [79]),
        ("kernel/xid-48.log", "fail", "replace", [48, 63]),
        ("kernel/xid-63.log", "ok", "none", [63]),
        ("kernel/xid-13-and-unknown.log", "ok", "none", [13, 999]),
        ("kernel/xid-154-reboot.log", "fail", "reboot", [154]),
        ("kernel/clean.log", "ok", "none", []),
    ],
)
def test_gpu_errors_from_recorded_kernel_logs(
    log: str, status: str, recommended: str, codes: list[int]
) -> None:
    ctx = context(run=smi(), kernel_log=str(DATA / log))
    verdict = checks.CHECKS["gpu-errors"](ctx)
    assert (verdict.status, verdict.recommended) == (status, recommended), verdict.reason
    assert [x["xid"] for x in verdict.details["xids"]] == codes


def test_an_xid_is_reported_once_then_remembered() -> None:
    ctx = context(run=smi(), kernel_log=str(DATA / "kernel/xid-79.log"))
    first = checks.CHECKS["gpu-errors"](ctx)
    again = checks.CHECKS["gpu-errors"](ctx)  # same state: the line was seen
    assert first.status == "fail" and "XID 79" in first.reason
    assert again.status == "ok" and again.details["xids"] == []


def test_gpu_errors_reads_the_journal_since_the_last_scan() -> None:
    seen: list[list[str]] = []

    def journal(argv: list[str]) -> CommandResult:
        seen.append(argv)
        return result(argv, 0, data("kernel/xid-48.log"))

    commands = smi()
    commands.answers["journalctl -k"] = journal
    ctx = context(run=commands, state={"gpu-errors": {"scanned_at": 1_789_999_700.0}})
    verdict = checks.CHECKS["gpu-errors"](ctx)
    assert verdict.recommended == "replace"
    assert seen[0][-2:] == ["--since", "@1789999700"]
    assert ctx.state["gpu-errors"]["scanned_at"] == 1_790_000_000.0


def test_uncorrectable_ecc_in_nvidia_smi_calls_for_a_reboot() -> None:
    ctx = context(run=smi(ecc="nvidia-smi/ecc-dbe.csv"), kernel_log=str(DATA / "kernel/clean.log"))
    verdict = checks.CHECKS["gpu-errors"](ctx)
    assert verdict.status == "fail" and verdict.recommended == "reboot"
    assert "2 uncorrectable ECC errors on GPU 3 (00000000:40:00.0)" in verdict.reason


def test_ecc_not_supported_is_not_an_error() -> None:
    ctx = context(
        run=smi(ecc="nvidia-smi/ecc-not-supported.csv"), kernel_log=str(DATA / "kernel/clean.log")
    )
    assert checks.CHECKS["gpu-errors"](ctx).status == "ok"


@pytest.mark.parametrize(
    ("stderr", "code", "recommended"),
    [
        ("nvidia-smi/lost-gpu.stderr", 15, "reboot"),
        ("nvidia-smi/gpu-is-lost.stderr", 15, "replace"),
        ("nvidia-smi/no-driver.stderr", 9, "reboot"),
    ],
)
def test_nvidia_smi_failures(stderr: str, code: int, recommended: str) -> None:
    failing = Commands({"nvidia-smi": lambda a: result(a, code, "", data(stderr))})
    for name in ("gpu-count", "gpu-errors"):
        ctx = context(run=failing, kernel_log=str(DATA / "kernel/clean.log"))
        verdict = checks.CHECKS[name](ctx)
        assert (verdict.status, verdict.recommended) == ("fail", recommended), name
        assert f"nvidia-smi exited {code}" in verdict.reason


# --- gpu-count ----------------------------------------------------------------------------------


def test_gpu_count_matches_the_instance_type() -> None:
    verdict = checks.CHECKS["gpu-count"](context(run=smi()))
    assert verdict.status == "ok" and verdict.details["nvidia_smi_gpus"] == 8


def test_gpu_count_short_by_one_calls_for_a_reboot_like_hyperpods_agent() -> None:
    verdict = checks.CHECKS["gpu-count"](context(run=smi(count="nvidia-smi/count-7.csv")))
    assert verdict.status == "fail" and verdict.recommended == "reboot"
    assert verdict.reason == "nvidia-smi sees 7 GPUs; ml.p4d.24xlarge has 8"


def test_gpu_count_reads_the_pci_bus(tmp_path: Path) -> None:
    for i, klass in enumerate(["0x030200", "0x030200", "0x068000"]):  # 2 GPUs and an NVSwitch
        device = tmp_path / f"sys/bus/pci/devices/0000:{i:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text(klass + "\n")
    verdict = checks.CHECKS["gpu-count"](context(run=smi(), root=str(tmp_path)))
    assert verdict.details["pci_gpus"] == 2


@pytest.mark.parametrize("name", ["gpu-count", "gpu-errors", "efa"])
def test_checks_that_cannot_run_on_a_cpu_group_say_so(name: str) -> None:
    commands = Commands({})
    verdict = checks.CHECKS[name](context(facts=M5, run=commands))
    assert verdict.status == "cannot-run"
    assert "ml.m5.xlarge has no" in verdict.reason
    assert commands.calls == []


def test_unknown_instance_type_cannot_count() -> None:
    verdict = checks.CHECKS["gpu-count"](context(facts=InstanceFacts(), run=smi()))
    assert verdict.status == "cannot-run"


# --- efa ----------------------------------------------------------------------------------------


def fake_efa(root: Path, states: list[str]) -> None:
    for i, state in enumerate(states):
        port = root / f"sys/class/infiniband/rdmap{16 + 16 * i}s27/ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")


def fi_info(name: str, code: int = 0) -> Commands:
    text = data(name)
    return Commands(
        {"fi_info": lambda a: result(a, code, text if code == 0 else "", text if code else "")}
    )


def test_efa_all_devices_present_and_active(tmp_path: Path) -> None:
    fake_efa(tmp_path, ["4: ACTIVE"] * 4)
    verdict = checks.CHECKS["efa"](context(root=str(tmp_path), run=fi_info("fi_info/efa-4.txt")))
    assert verdict.status == "ok" and verdict.details["fi_info_domains"] == 4


def test_a_missing_efa_device_fails(tmp_path: Path) -> None:
    fake_efa(tmp_path, ["4: ACTIVE"] * 3)
    verdict = checks.CHECKS["efa"](context(root=str(tmp_path), run=fi_info("fi_info/efa-3.txt")))
    assert verdict.status == "fail"
    assert "3 of 4 EFA devices in /sys/class/infiniband" in verdict.reason
    assert "libfabric's efa provider offers 3 of 4 devices" in verdict.reason


def test_an_efa_port_down_fails(tmp_path: Path) -> None:
    fake_efa(tmp_path, ["4: ACTIVE", "1: DOWN", "4: ACTIVE", "4: ACTIVE"])
    verdict = checks.CHECKS["efa"](context(root=str(tmp_path), run=Commands({})))
    assert verdict.status == "fail" and "port not ACTIVE on rdmap32s27" in verdict.reason
    assert verdict.details["fi_info_domains"] is None  # fi_info not installed: sysfs only


def test_no_efa_driver_at_all_fails(tmp_path: Path) -> None:
    run = fi_info("fi_info/no-device.stderr", code=1)
    verdict = checks.CHECKS["efa"](context(root=str(tmp_path), run=run))
    assert verdict.status == "fail" and verdict.details["devices"] == []


# --- fsx-mount ----------------------------------------------------------------------------------


def fsx_context(tmp_path: Path, mount: Path, options: str = "rw", **kw: Any) -> Context:
    (tmp_path / "proc").mkdir(exist_ok=True)
    line = f"10.1.0.5@tcp:/abcdefgh {mount} lustre {options},flock,lazystatfs 0 0\n"
    (tmp_path / "proc/mounts").write_text("/dev/nvme0n1p1 / ext4 rw 0 0\n" + line)
    settings = {"fsx": {"mount_path": str(mount), "timeout_seconds": kw.pop("timeout", 5)}}
    return context(root=str(tmp_path), settings=settings, run=run_command, **kw)


def test_a_responsive_mount_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    mount = tmp_path / "fsx"
    mount.mkdir()
    verdict = checks.CHECKS["fsx-mount"](fsx_context(tmp_path, mount))
    assert verdict.status == "ok", verdict.reason
    assert list((mount / ".hyperpod-kit-health").iterdir()) == []


def test_a_hung_mount_fails_within_the_deadline(tmp_path: Path) -> None:
    """The probe opens its file for writing; a FIFO there blocks it like a hung Lustre client."""
    mount = tmp_path / "fsx"
    (mount / ".hyperpod-kit-health").mkdir(parents=True)
    os.mkfifo(mount / ".hyperpod-kit-health" / "ip-10-1-77-12.probe")
    started = time.monotonic()
    verdict = checks.CHECKS["fsx-mount"](fsx_context(tmp_path, mount, timeout=1, clock=time.time))
    elapsed = time.monotonic() - started
    assert verdict.status == "fail"
    assert verdict.reason.startswith(f"{mount} did not answer a stat and a 4 KiB write within 1 s")
    assert elapsed < 4, elapsed  # 1 s deadline + kill; never the probe's own (infinite) wait


def test_a_read_only_mount_fails_without_probing(tmp_path: Path) -> None:
    mount = tmp_path / "fsx"
    mount.mkdir()
    verdict = checks.CHECKS["fsx-mount"](fsx_context(tmp_path, mount, options="ro"))
    assert (verdict.status, verdict.reason) == ("fail", f"{mount} is mounted read-only")
    assert not (mount / ".hyperpod-kit-health").exists()


def test_a_write_error_fails_with_the_error(tmp_path: Path) -> None:
    mount = tmp_path / "fsx"
    mount.mkdir()
    (mount / ".hyperpod-kit-health").write_text("a file where the probe wants a folder")
    verdict = checks.CHECKS["fsx-mount"](fsx_context(tmp_path, mount))
    assert verdict.status == "fail" and "NotADirectoryError" in verdict.reason


def test_a_missing_mount_fails(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/mounts").write_text("/dev/nvme0n1p1 / ext4 rw 0 0\n")
    ctx = context(root=str(tmp_path), settings={"fsx": {"mount_path": "/fsx"}})
    assert checks.CHECKS["fsx-mount"](ctx).reason == "/fsx is not mounted"


def test_eks_nodes_have_no_fsx_mount_to_probe() -> None:
    verdict = checks.CHECKS["fsx-mount"](context(settings={"fsx": {"mount_path": None}}))
    assert verdict.status == "cannot-run" and "CSI" in verdict.reason


# --- disk-space ---------------------------------------------------------------------------------


def statvfs(free: dict[str, tuple[float, float]]) -> Callable[[str], Any]:
    """Free space and inode shares per path, as os.statvfs would report them."""

    def fake(path: str) -> Any:
        space, inodes = free[path]
        return SimpleNamespace(
            f_blocks=1000, f_bavail=int(space * 10), f_frsize=2**20,
            f_files=10000, f_favail=int(inodes * 100),
        )  # fmt: skip

    return fake


def disk_context(tmp_path: Path, free: dict[str, tuple[float, float]]) -> Context:
    volumes = []
    for name in free:
        (tmp_path / name).mkdir()
        volumes.append(str(tmp_path / name))
    settings = {"disk": {"min_free_percent": 5, "volumes": [*volumes, "/no/such/volume"]}}
    by_path = {str(tmp_path / k): v for k, v in free.items()}
    return context(settings=settings, statvfs=statvfs(by_path))


def test_disk_space_ok(tmp_path: Path) -> None:
    verdict = checks.CHECKS["disk-space"](disk_context(tmp_path, {"root": (40, 90)}))
    assert verdict.status == "ok"
    assert verdict.details["not_present"] == ["/no/such/volume"]


def test_a_full_container_volume_fails(tmp_path: Path) -> None:
    ctx = disk_context(tmp_path, {"root": (40, 90), "containers": (2, 90)})
    verdict = checks.CHECKS["disk-space"](ctx)
    assert verdict.status == "fail" and verdict.recommended == "none"
    assert verdict.reason == f"{tmp_path / 'containers'} has 2.0% free space (minimum 5%)"


def test_running_out_of_inodes_fails(tmp_path: Path) -> None:
    verdict = checks.CHECKS["disk-space"](disk_context(tmp_path, {"root": (50, 1)}))
    assert verdict.status == "fail" and "1.0% free inodes" in verdict.reason


# --- the shared pieces --------------------------------------------------------------------------


def test_run_command_never_outlives_its_deadline() -> None:
    started = time.monotonic()
    out = run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert out.timed_out and out.returncode is None and not out.stuck
    assert time.monotonic() - started < 3


def test_run_command_reports_a_missing_program() -> None:
    out = run_command(["/no/such/program"], 1)
    assert out.missing and out.describe() == "program is not installed"


def test_the_node_checks_are_the_ones_the_schema_names() -> None:
    from hyperpod_kit.config.schema import (
        AGENT_COVERED_CHECKS,
        NODE_CHECK_DEFAULTS,
        NODE_CHECK_NAMES,
    )

    assert tuple(checks.CHECKS) == NODE_CHECK_NAMES
    assert checks.AGENT_COVERED == AGENT_COVERED_CHECKS
    assert checks.DEFAULT_REMEDIATION == NODE_CHECK_DEFAULTS


def test_the_documented_xid_table_is_the_one_in_the_code() -> None:
    text = (REPO / "docs" / "health.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            rows[int(cells[0])] = tuple(cells[1:])
    assert rows == {k: tuple(r) for k, r in xid.XID_TABLE.items()}
