"""The node health checks, by name. Each is a function `Context -> Verdict`.

`AGENT_COVERED` names the checks HyperPod's health-monitoring agent also performs and acts on
(GPU count, nvidia-smi, XID/DCGM errors): the runner only logs and alerts on them. The others
cover what the agent does not (EFA devices, the FSx mount, disk space) and may ask HyperPod for
a reboot or a replacement. hyperpod_kit's schema lists the same names (a test keeps them equal).
"""

from __future__ import annotations

from .core import (
    ACTIONS,
    CANNOT_RUN,
    FAIL,
    NONE,
    OK,
    REBOOT,
    REPLACE,
    SEVERITY,
    Check,
    CommandResult,
    Context,
    InstanceFacts,
    Verdict,
    run_command,
)
from .disk import DISK_SPACE, disk_space
from .efa import EFA, efa
from .fsx import FSX_MOUNT, fsx_mount
from .gpu import GPU_COUNT, GPU_ERRORS, gpu_count, gpu_errors

CHECKS: dict[str, Check] = {
    GPU_COUNT: gpu_count,
    GPU_ERRORS: gpu_errors,
    EFA: efa,
    FSX_MOUNT: fsx_mount,
    DISK_SPACE: disk_space,
}
AGENT_COVERED = frozenset({GPU_COUNT, GPU_ERRORS})
DEFAULT_REMEDIATION = {
    GPU_COUNT: NONE,
    GPU_ERRORS: NONE,
    EFA: REPLACE,
    FSX_MOUNT: REBOOT,
    DISK_SPACE: NONE,
}

__all__ = [
    "ACTIONS",
    "AGENT_COVERED",
    "CANNOT_RUN",
    "CHECKS",
    "DEFAULT_REMEDIATION",
    "FAIL",
    "NONE",
    "OK",
    "REBOOT",
    "REPLACE",
    "SEVERITY",
    "Check",
    "CommandResult",
    "Context",
    "InstanceFacts",
    "Verdict",
    "run_command",
]
