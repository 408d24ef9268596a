"""NVIDIA XID errors: parse kernel-log lines and say what each calls for on a HyperPod node.

Source of the resolution buckets: NVIDIA's Xid catalog for Ampere and newer GPUs, column
"Resolution Bucket (Immediate Action)", https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
(read through its machine-readable copy in NVIDIA/NVSentinel,
distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv @ 6f8b0fcf);
for 48/63/64 also NVIDIA's dynamic page retirement guide,
https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html. Checked 2026-11-23.

From bucket to HyperPod action (ours): a tenant cannot reset one GPU of a running HyperPod node
or restart the bare-metal host, so
  IGNORE, RESTART_APP, WORKFLOW_XID_45                -> none    (the job restarts; node is fine)
  RESET_GPU, RESTART_VM, WORKFLOW_NVLINK*_ERR          -> reboot  (a reboot resets every GPU)
  RESTART_BM, WORKFLOW_XID_48, UNEXPECTED_ERR_REPORT_ISSUE, CONTACT_SUPPORT -> replace (hardware)
An XID not in the table calls for none (logged and alerted, nothing more).

Nothing here acts: HyperPod's health-monitoring agent watches XID errors itself and reboots or
replaces the node. The recommendation goes into the verdict and the alert, and lets the offline
demo play the agent's part.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .core import NONE, REBOOT, REPLACE, SEVERITY


class XidRule(NamedTuple):
    mnemonic: str
    bucket: str  # NVIDIA's resolution bucket (immediate action)
    action: str  # what it calls for on HyperPod: none | reboot | replace


BUCKET_ACTION = {
    "IGNORE": NONE,
    "RESTART_APP": NONE,
    "WORKFLOW_XID_45": NONE,
    "RESET_GPU": REBOOT,
    "RESTART_VM": REBOOT,
    "WORKFLOW_NVLINK_ERR": REBOOT,
    "WORKFLOW_NVLINK5_ERR": REBOOT,
    "RESTART_BM": REPLACE,
    "WORKFLOW_XID_48": REPLACE,
    "UNEXPECTED_ERR_REPORT_ISSUE": REPLACE,
    "CONTACT_SUPPORT": REPLACE,
}

_TABLE = {
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
    61: ("PMU_BREAKPOINT", "UNEXPECTED_ERR_REPORT_ISSUE"),
    62: ("PMU_HALT_ERROR", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU"),
    120: ("GSP_ERROR", "RESET_GPU"),
    121: ("C2C_ERROR", "IGNORE"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),
    143: ("GPU_INIT_ERROR", "RESET_GPU"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR"),
}

XID_TABLE: dict[int, XidRule] = {
    xid: XidRule(mnemonic, bucket, BUCKET_ACTION[bucket])
    for xid, (mnemonic, bucket) in _TABLE.items()
}

# Xid 154 (GPU_RECOVERY_ACTION_CHANGED) names the action itself, e.g.
# "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)".
_RECOVERY_154 = (
    ("drain and reset", REBOOT),
    ("node reboot required", REBOOT),
    ("gpu reset required", REBOOT),
    ("drain p2p", REBOOT),
)

# "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus." and the older
# "NVRM: Xid (0000:03:00): 13, Graphics Exception ..." both match.
_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)(?:, (?P<text>.*))?"
)


class XidEvent(NamedTuple):
    xid: int
    pci: str
    text: str
    line: str
    mnemonic: str
    bucket: str
    action: str


def classify(xid: int, text: str = "") -> XidRule:
    """The rule for `xid`; an unknown XID calls for nothing beyond an alert."""
    if xid == 154:
        new = text.lower().rsplit(" to ", 1)[-1]
        for words, action in _RECOVERY_154:
            if words in new:
                return XidRule("GPU_RECOVERY_ACTION_CHANGED", "XID_154", action)
        return XidRule("GPU_RECOVERY_ACTION_CHANGED", "XID_154", NONE)
    return XID_TABLE.get(xid, XidRule("UNKNOWN", "NOT_IN_TABLE", NONE))


def parse_line(line: str) -> XidEvent | None:
    m = _XID_LINE.search(line)
    if m is None:
        return None
    xid = int(m["xid"])
    text = (m["text"] or "").strip()
    rule = classify(xid, text)
    return XidEvent(xid, m["pci"], text, line.strip(), rule.mnemonic, rule.bucket, rule.action)


def worst(actions: list[str]) -> str:
    return max(actions, key=lambda a: SEVERITY[a], default=NONE)
