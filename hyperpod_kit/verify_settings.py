"""What `hyperpod-kit-verify` (lifecycle/bin, docs/verify.md) needs to know of the environment, as
the JSON the lifecycle upload carries beside it (`verify/settings.json`), plus one all-reduce job
per compute group (`verify/hyperpod-kit-verify-allreduce-<group>.sbatch`, from
`jobs.render_verify_jobs`).

Only what the cluster is made of goes in: its groups, the file system and how Studio partitions
it. Not a group's node count (the command asks Slurm which nodes the partition has: scaling a
group must not change the upload, and `--report` compares with the file's count), nothing of
`trainer.job` (a job change must not change the cluster's upload) and no person (the users file
travels on its own; the command reads the copy the user sync keeps on every node).
"""

from __future__ import annotations

import json
from typing import Any

from hyperpod_kit.config.derived import (
    FSX_MOUNT,
    JOB_EVENTS_DIR,
    VERIFY_DIR,
    group_facts,
    lustre_throughput_mb_s,
    worker_groups,
)
from hyperpod_kit.config.schema import EnvironmentConfig

VERSION = 1
# Where the user sync keeps the users file it applied (lifecycle/bin/hyperpod-kit-user-sync).
USERS_COPY = "/var/lib/hyperpod-kit/users.json"


def verify_settings(config: EnvironmentConfig) -> dict[str, Any]:
    """The settings document as a mapping (see the module docstring)."""
    lustre = config.storage.lustre
    fsx: dict[str, Any] = {"path": FSX_MOUNT}
    if lustre.existing is None:
        # What the file system was provisioned for (FSx: capacity in TiB x MB/s per TiB).
        fsx |= {
            "provisioned_mb_s": lustre_throughput_mb_s(lustre),
            "capacity_gib": lustre.storage_capacity_gib,
            "per_tib_mb_s": lustre.throughput_per_unit_storage,
            "deployment_type": "PERSISTENT_2",
        }
    else:  # an existing file system: its size is not in the file, so there is no floor
        fsx |= {"provisioned_mb_s": None, "file_system_id": lustre.existing.file_system_id}
    groups = []
    for group in worker_groups(config):
        facts = group_facts(group)
        groups.append(
            {
                "name": group.name,
                "partition": group.slurm_partition,
                "instance_type": group.types[0] if group.types else None,
                "accelerators": facts.accelerators if facts is not None else None,
            }
        )
    studio = config.studio
    return {
        "version": VERSION,
        "environment": config.name,
        "cluster": config.cluster_name,
        "region": config.region,
        "fsx": fsx,
        "groups": groups,
        "studio": {
            "enabled": studio.enabled,
            "partitions": studio.partitions,
            "shared_path": studio.shared_path if studio.partitions == "shared" else None,
            "users_file": USERS_COPY,
        },
        "out_root": VERIFY_DIR,
        "spool": JOB_EVENTS_DIR,
    }


def verify_settings_document(config: EnvironmentConfig) -> str:
    """`verify_settings` as deterministic JSON."""
    return json.dumps(verify_settings(config), indent=2, sort_keys=True) + "\n"
