"""efa: every EFA device the instance type has is present and its port is up.

HyperPod's agent does not watch EFA devices, so this check may act. A missing device makes
NCCL fall back to TCP sockets (a job runs many times slower) or fail outright; the usual causes
are a device that did not come back after a driver reload or hardware, so the default
remediation is replace.
"""

from __future__ import annotations

import os
from typing import Any

from .core import Context, Verdict, cannot_run, fail, ok

EFA = "efa"


def _devices(ctx: Context) -> dict[str, str]:
    """EFA devices under /sys/class/infiniband and their port 1 state ("4: ACTIVE")."""
    base = ctx.path("/sys/class/infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    found = {}
    for name in names:
        state_file = os.path.join(base, name, "ports", "1", "state")
        try:
            with open(state_file) as f:
                found[name] = f.read().strip()
        except OSError:
            found[name] = "unknown"
    return found


def _fi_info_domains(ctx: Context) -> int | None:
    """Devices libfabric's EFA provider offers (one RDM domain each); None without fi_info."""
    fi_info = str(ctx.section("efa").get("fi_info", "/opt/amazon/efa/bin/fi_info"))
    result = ctx.run([fi_info, "-p", "efa", "-t", "FI_EP_RDM"], 20)
    if result.missing:
        return None
    if not result.succeeded:
        return 0  # "fi_getinfo: -61 (No data available)": the provider sees no device
    return sum(1 for line in result.stdout.splitlines() if line.strip().startswith("domain:"))


def efa(ctx: Context) -> Verdict:
    expected = ctx.facts.efa_interfaces
    itype = ctx.facts.instance_type
    if expected is None:
        return cannot_run(EFA, f"the EFA interface count of {itype or 'this node'} is not known")
    if expected == 0:
        return cannot_run(EFA, f"{itype} has no EFA interface")
    devices = _devices(ctx)
    down = sorted(n for n, state in devices.items() if "ACTIVE" not in state)
    domains = _fi_info_domains(ctx)
    details: dict[str, Any] = {
        "expected": expected,
        "devices": sorted(devices),
        "ports_not_active": down,
        "fi_info_domains": domains,
        "instance_type": itype,
    }
    problems = []
    if len(devices) < expected:
        problems.append(f"{len(devices)} of {expected} EFA devices in /sys/class/infiniband")
    if down:
        problems.append("port not ACTIVE on " + ", ".join(down))
    if domains is not None and domains < expected:
        problems.append(f"libfabric's efa provider offers {domains} of {expected} devices")
    if problems:
        return fail(EFA, "; ".join(problems), **details)
    return ok(EFA, f"{len(devices)} EFA devices, ports active", **details)
