"""disk-space: the root volume and the container volumes keep free space and inodes.

A full root volume stops Slurm, the container runtime and log shipping; a full container volume
fails every job that pulls an image. HyperPod's agent does not watch it, so this check may act,
but its default remediation is none (alert): a reboot frees nothing, and a replacement loses
what is on the disk.
"""

from __future__ import annotations

import os
from typing import Any

from .core import Context, Verdict, fail, ok

DISK_SPACE = "disk-space"


def disk_space(ctx: Context) -> Verdict:
    disk = ctx.section("disk")
    minimum = float(disk.get("min_free_percent", 5))
    volumes = [str(v) for v in disk.get("volumes", ["/"])]
    report: dict[str, dict[str, float]] = {}
    absent: list[str] = []
    low: list[str] = []
    for volume in volumes:
        if not os.path.isdir(volume):
            absent.append(volume)
            continue
        st = ctx.statvfs(volume)
        if not st.f_blocks:
            absent.append(volume)
            continue
        space = 100.0 * st.f_bavail / st.f_blocks
        inodes = 100.0 * st.f_favail / st.f_files if st.f_files else 100.0
        report[volume] = {
            "free_percent": round(space, 1),
            "free_gib": round(st.f_bavail * st.f_frsize / 2**30, 1),
            "free_inodes_percent": round(inodes, 1),
        }
        if space < minimum:
            low.append(f"{volume} has {space:.1f}% free space")
        if inodes < minimum:
            low.append(f"{volume} has {inodes:.1f}% free inodes")
    details: dict[str, Any] = {
        "min_free_percent": minimum,
        "volumes": report,
        "not_present": absent,
    }
    if low:
        return fail(DISK_SPACE, "; ".join(low) + f" (minimum {minimum:g}%)", **details)
    return ok(DISK_SPACE, f"{len(report)} volumes above {minimum:g}% free", **details)
