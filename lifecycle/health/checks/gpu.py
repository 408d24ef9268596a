"""gpu-count and gpu-errors: what HyperPod's health-monitoring agent also watches.

Both only log and alert (the runner never acts on them, whatever the settings say): since 2025-09
the agent runs on Slurm clusters too and reboots or replaces a node for a GPU-count mismatch,
nvidia-smi errors and XID/DCGM errors. Two actors on one node would fight. The verdicts still
carry what the failure calls for, so the alert says it and the demo can play the agent.
"""

from __future__ import annotations

import glob
import hashlib
import os

from .core import (
    NONE,
    REBOOT,
    REPLACE,
    CommandResult,
    Context,
    Verdict,
    cannot_run,
    fail,
    ok,
)
from .xid import parse_line, worst

GPU_COUNT = "gpu-count"
GPU_ERRORS = "gpu-errors"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (not NVSwitch bridges)
SEEN_LIMIT = 2000  # kernel-log lines remembered, so one XID is reported once
NOT_A_NUMBER = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}


def _smi(ctx: Context) -> tuple[str, float]:
    gpu = ctx.section("gpu")
    return str(gpu.get("nvidia_smi", "nvidia-smi")), float(gpu.get("timeout_seconds", 30))


def _pci_gpus(ctx: Context) -> list[str]:
    """NVIDIA GPUs on the PCI bus, whatever the driver thinks: a GPU that fell off the bus is
    missing here too, one whose driver failed is not."""
    found = []
    for device in sorted(glob.glob(ctx.path("/sys/bus/pci/devices/*"))):
        try:
            with open(os.path.join(device, "vendor")) as f:
                vendor = f.read().strip()
            with open(os.path.join(device, "class")) as f:
                klass = f.read().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(GPU_CLASSES):
            found.append(os.path.basename(device))
    return found


def _csv_rows(stdout: str) -> list[list[str]]:
    return [[c.strip() for c in line.split(",")] for line in stdout.splitlines() if line.strip()]


def _smi_failure(result: CommandResult) -> str:
    """What a failed nvidia-smi call calls for: a lost GPU needs new hardware, the rest a reset."""
    text = f"{result.stdout}\n{result.stderr}".lower()
    return REPLACE if "fallen off the bus" in text or "gpu is lost" in text else REBOOT


def _number(text: str) -> int | None:
    if text.strip().lower() in NOT_A_NUMBER:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def gpu_count(ctx: Context) -> Verdict:
    """nvidia-smi sees as many GPUs as the instance type has."""
    facts = ctx.facts
    if facts.gpus is None:
        return cannot_run(GPU_COUNT, "this node's instance type, so its GPU count, is not known")
    if facts.gpus == 0:
        return cannot_run(GPU_COUNT, f"{facts.instance_type} has no GPU")
    smi, timeout = _smi(ctx)
    pci = _pci_gpus(ctx)
    result = ctx.run([smi, "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader"], timeout)
    details = {"expected": facts.gpus, "pci_gpus": len(pci), "instance_type": facts.instance_type}
    if not result.succeeded:
        return fail(GPU_COUNT, result.describe(), _smi_failure(result), **details)
    rows = _csv_rows(result.stdout)
    details["nvidia_smi_gpus"] = len(rows)
    if len(rows) != facts.gpus:
        return fail(
            GPU_COUNT,
            f"nvidia-smi sees {len(rows)} GPUs; {facts.instance_type} has {facts.gpus}",
            REBOOT,
            **details,
        )
    return ok(GPU_COUNT, f"{len(rows)} GPUs, as {facts.instance_type} has", **details)


def _kernel_lines(ctx: Context, since: float | None) -> tuple[list[str], str]:
    """New-ish kernel-log lines and where they came from (the journal, dmesg or a given file)."""
    if ctx.kernel_log:
        try:
            with open(ctx.kernel_log, encoding="utf-8", errors="replace") as f:
                return f.read().splitlines(), ctx.kernel_log
        except OSError as e:
            return [], f"{ctx.kernel_log} ({e.strerror})"
    window = ["--since", f"@{int(since)}"] if since else ["-b"]
    journal = ctx.run(["journalctl", "-k", "--no-pager", "-o", "short-iso", *window], 20)
    if journal.succeeded:
        return journal.stdout.splitlines(), "journalctl -k"
    dmesg = ctx.run(["dmesg", "--time-format", "iso"], 20)
    if dmesg.succeeded:
        return dmesg.stdout.splitlines(), "dmesg"
    return [], "no kernel log (" + dmesg.describe() + ")"


def _new_xids(ctx: Context) -> tuple[list[dict[str, object]], str]:
    state = ctx.check_state(GPU_ERRORS)
    since = state.get("scanned_at")
    lines, source = _kernel_lines(ctx, float(since) if isinstance(since, (int, float)) else None)
    seen = list(state.get("seen", []))
    known = set(seen)
    events = []
    for line in lines:
        event = parse_line(line)
        if event is None:
            continue
        digest = hashlib.sha1(event.line.encode()).hexdigest()[:16]
        if digest in known:
            continue
        known.add(digest)
        seen.append(digest)
        events.append(
            {
                "xid": event.xid,
                "pci": event.pci,
                "mnemonic": event.mnemonic,
                "nvidia_bucket": event.bucket,
                "calls_for": event.action,
                "line": event.line,
            }
        )
    state["seen"] = seen[-SEEN_LIMIT:]
    state["scanned_at"] = ctx.clock()
    return events, source


def gpu_errors(ctx: Context) -> Verdict:
    """New XID errors in the kernel log, and uncorrectable ECC errors or failures in nvidia-smi."""
    facts = ctx.facts
    if facts.gpus == 0:
        return cannot_run(GPU_ERRORS, f"{facts.instance_type} has no GPU")
    xids, source = _new_xids(ctx)
    problems: list[str] = []
    calls_for = [str(x["calls_for"]) for x in xids]
    for x in xids:
        if x["calls_for"] != NONE:
            problems.append(f"XID {x['xid']} ({x['mnemonic']}) on {x['pci']}")
    details: dict[str, object] = {"kernel_log": source, "xids": xids}
    smi, timeout = _smi(ctx)
    query = "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total"
    result = ctx.run([smi, query, "--format=csv,noheader,nounits"], timeout)
    if result.missing and facts.gpus is None:
        details["nvidia_smi"] = "not installed"
    elif not result.succeeded:
        problems.append(result.describe())
        calls_for.append(_smi_failure(result))
    else:
        ecc = {}
        for row in _csv_rows(result.stdout):
            if len(row) >= 3:
                count = _number(row[2])
                ecc[row[1]] = count
                if count:
                    problems.append(f"{count} uncorrectable ECC errors on GPU {row[0]} ({row[1]})")
                    calls_for.append(REBOOT)  # row remapping / page retirement needs a reset
        details["uncorrectable_ecc"] = ecc
    if problems:
        return fail(GPU_ERRORS, "; ".join(problems), worst(calls_for), **details)
    if xids:
        listed = ", ".join(f"XID {x['xid']} ({x['mnemonic']})" for x in xids)
        return ok(GPU_ERRORS, f"{listed} seen; NVIDIA's catalog calls for no action", **details)
    return ok(GPU_ERRORS, "no new XID errors, no uncorrectable ECC errors", **details)
