"""fsx-mount: the FSx for Lustre mount is there, writable, and answers within a deadline.

A hung Lustre client blocks every process that touches the mount in uninterruptible sleep, the
checker included. So the probe (stat, statvfs, a small write with fsync, read back, unlink) runs
in a child process with a deadline; if the deadline passes the child is killed and abandoned,
never waited for. HyperPod's agent does not watch the file system, so this check may act
(default: reboot, which remounts it).
"""

from __future__ import annotations

import sys
from typing import Any

from .core import Context, Verdict, cannot_run, fail, ok

FSX_MOUNT = "fsx-mount"
PROBE_DIR = ".hyperpod-kit-health"

# Runs in the child: argv[1] is the mount point, argv[2] the probe file's name.
PROBE = r"""
import os, sys
mount, name = sys.argv[1], sys.argv[2]
os.stat(mount)
os.statvfs(mount)
folder = os.path.join(mount, ".hyperpod-kit-health")
try:
    os.mkdir(folder, 0o755)
except FileExistsError:
    pass
path = os.path.join(folder, name)
data = os.urandom(4096)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
try:
    os.write(fd, data)
    os.fsync(fd)
finally:
    os.close(fd)
with open(path, "rb") as f:
    if f.read() != data:
        sys.exit("read back differs from what was written")
os.unlink(path)
"""


def _mount_entry(ctx: Context, mount: str) -> tuple[str, str, list[str]] | None:
    """(source, fstype, options) of the last mount on `mount`, from /proc/mounts."""
    try:
        with open(ctx.path("/proc/mounts")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[1] == mount.rstrip("/"):
            found = (parts[0], parts[2], parts[3].split(","))
    return found


def fsx_mount(ctx: Context) -> Verdict:  # noqa: PLR0911 (one return per way a mount fails)
    fsx = ctx.section("fsx")
    mount = fsx.get("mount_path")
    if not mount:
        return cannot_run(
            FSX_MOUNT,
            "FSx is not mounted on this node (on EKS pods mount it through the FSx CSI driver)",
        )
    mount = str(mount)
    timeout = float(fsx.get("timeout_seconds", 30))
    entry = _mount_entry(ctx, mount)
    if entry is None:
        return fail(FSX_MOUNT, f"{mount} is not mounted", mount=mount)
    source, fstype, options = entry
    details: dict[str, Any] = {"mount": mount, "source": source, "fstype": fstype}
    if fstype != str(fsx.get("fstype", "lustre")):
        return fail(FSX_MOUNT, f"{mount} is a {fstype} mount, not Lustre", **details)
    if "ro" in options:
        return fail(FSX_MOUNT, f"{mount} is mounted read-only", **details)
    name = f"{ctx.node or 'node'}.probe"
    started = ctx.clock()
    result = ctx.run([sys.executable, "-c", PROBE, mount, name], timeout)
    details["seconds"] = round(max(ctx.clock() - started, 0.0), 3)
    if result.timed_out:
        return fail(
            FSX_MOUNT,
            f"{mount} did not answer a stat and a 4 KiB write within {timeout:g} s"
            + (" (the probe is stuck in the kernel: the mount is hung)" if result.stuck else ""),
            **details,
        )
    if not result.succeeded:
        lines = (result.stderr or result.stdout).strip().splitlines()
        said = lines[-1] if lines else result.describe()
        return fail(FSX_MOUNT, f"{mount}: {said}", **details)
    return ok(FSX_MOUNT, f"{mount} answered a stat and a 4 KiB write", **details)
