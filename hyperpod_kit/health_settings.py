"""The node health runner's settings (`lifecycle/health/settings.json` on every node), rendered
from the environment file. Read by the lifecycle renderer, the local health node of `make demo`
and the tests; it knows no CDK, so node-side code can use it without loading aws-cdk-lib."""

from __future__ import annotations

from typing import Any

from hyperpod_kit.config.derived import FSX_MOUNT, worker_groups
from hyperpod_kit.config.facts import instance_type
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.monitoring import effective_remediation

SETTINGS_VERSION = 1
BOOT_GRACE_SECONDS = 600
ESCALATE_WITHIN_SECONDS = 6 * 3600


def node_health_settings(config: EnvironmentConfig) -> dict[str, Any]:
    """The node-side runner's settings (`lifecycle/health/settings.json` on every node): the checks
    to run and what each may ask for, the expected hardware per instance group from the dated
    instance-type table, deadlines and paths. Plain JSON data, so the runner needs nothing but
    the standard library."""
    mon = config.monitoring
    node = mon.node_checks
    # A flexible group's node may be any of its types: null here, and the runner reads the
    # node's own type (lifecycle/health/runner.py: resolve_node).
    groups = {g.name: g.instance_type for g in config.cluster.instance_groups}
    types: dict[str, dict[str, Any]] = {}
    for name in sorted({t for g in config.cluster.instance_groups for t in g.types}):
        facts = instance_type(name)
        types[name] = {
            "gpus": facts.gpus if facts is not None else None,
            "efa_interfaces": facts.efa_interfaces if facts is not None else None,
            "accelerator": facts.accelerator if facts is not None else None,
        }
    remediation = effective_remediation(config)
    return {
        "version": SETTINGS_VERSION,
        "enabled": mon.enabled,
        "environment": config.name,
        "cluster_name": config.cluster_name,
        "orchestrator": config.orchestrator,
        "auto_repair": mon.auto_repair,
        "interval_seconds": node.interval_seconds,
        "cooldown_seconds": node.cooldown_minutes * 60,
        "boot_grace_seconds": BOOT_GRACE_SECONDS,
        "escalate_within_seconds": ESCALATE_WITHIN_SECONDS,
        "checks": {name: {"remediation": action} for name, action in remediation.items()},
        "fsx": {
            # Slurm nodes mount FSx themselves (HyperPod's FsxLustreConfig); EKS pods use the CSI
            # driver, so there is no node mount to probe.
            "mount_path": FSX_MOUNT if config.orchestrator == "slurm" else None,
            "timeout_seconds": node.fsx_timeout_seconds,
        },
        "disk": {"min_free_percent": node.min_free_disk_percent, "volumes": list(node.volumes)},
        "gpu": {"nvidia_smi": "nvidia-smi", "timeout_seconds": 30},
        "efa": {"fi_info": "/opt/amazon/efa/bin/fi_info"},
        "eks": {"kubeconfig": "/var/lib/kubelet/kubeconfig"},
        "groups": groups,
        # Slurm acts on Action: reasons of compute nodes; the controller and login nodes are not
        # slurmd nodes, so their checks only alert.
        "repairable_groups": [g.name for g in worker_groups(config)],
        "instance_types": types,
    }
