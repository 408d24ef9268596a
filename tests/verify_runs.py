"""Verify runs as the node command writes them (issue #28's records), built for the report's
tests: a 4-node ml.p5.48xlarge run whose fourth node is slow on the network (each of its pairs
near half the others' bus bandwidth) and whose file system meets its provisioned throughput.
`FLOORS` is the report tests' own floors table (tests/data/verify/floors.json), not the
packaged one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import REPO

FLOORS = REPO / "tests" / "data" / "verify" / "floors.json"
RUN = "verify-20261129T080000Z"
OLDER = "verify-20261128T080000Z"
NODES = [f"ip-10-1-0-{i}" for i in range(1, 5)]
SLOW = NODES[3]
GIB = 1 << 30
SIZES = [1 << e for e in range(20, 31)]  # 1 MiB .. 1 GiB, as the benchmark's default


def _rows(peak: float, ranks: int) -> list[dict[str, Any]]:
    """Rows whose bus bandwidth climbs to `peak` at 1 GiB, consistent with the formulas
    (busbw = algbw x 2(n-1)/n; algbw = bytes / time)."""
    rows = []
    for size in SIZES:
        busbw = peak * (size / GIB) ** 0.25
        algbw = busbw * ranks / (2 * (ranks - 1))
        rows.append(
            {
                "size_bytes": size,
                "count": size // 4,
                "iterations": 20,
                "time_us": size / (algbw * 1e9) * 1e6,
                "algbw_gb_s": algbw,
                "busbw_gb_s": busbw,
            }
        )
    return rows


def pairs(nodes: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]


def records(
    run: str = RUN,
    *,
    local: bool = False,
    fsx_write: float = 1150.0,
    slow_pair_peak: float = 150.0,
    end: bool = True,
) -> list[dict[str, Any]]:
    kind = None if local else "ml.p5.48xlarge"
    out: list[dict[str, Any]] = [
        {
            "run": run,
            "type": "run",
            "started": "2026-11-29T08:00:00Z",
            "environment": "prod",
            "cluster": "hp-prod",
            "groups": [{"name": "gpu", "partition": "gpu", "instance_type": kind, "count": 4}],
            "fsx": {
                "path": "/fsx",
                "provisioned_mb_s": 1200.0,
                "capacity_gib": 4800,
                "per_tib_mb_s": 250,
                "deployment_type": "PERSISTENT_2",
            },
            "local": local,
        }
    ]
    for node in NODES:
        out.append(
            {
                "run": run,
                "type": "node",
                "node": node,
                "group": "gpu",
                "instance_type": kind,
                "gpus": 8,
                "gpu_names": ["NVIDIA H100 80GB HBM3"] * 8,
                "efa_devices": 32,
                "efa_provider": "efa",
                "errors": [],
            }
        )
    common = {
        "run": run,
        "type": "allreduce",
        "group": "gpu",
        "ranks_per_node": 8,
        "backend": "nccl",
        "dtype": "float32",
        "net_provider": "efa",
    }
    out.append({**common, "scope": "all", "nodes": NODES, "ranks": 32, "rows": _rows(360.0, 32)})
    for a, b in pairs(NODES):
        peak = slow_pair_peak if SLOW in (a, b) else 380.0
        out.append(
            {**common, "scope": "pair", "nodes": [a, b], "ranks": 16, "rows": _rows(peak, 16)}
        )
    per_node = [
        {
            "node": n,
            "write_mb_s": fsx_write / 4 - (40 if n == NODES[1] else 0),
            "read_mb_s": 1250.0 / 4,
            "metadata_ops_s": 1250.0,
        }
        for n in NODES
    ]
    out.append(
        {
            "run": run,
            "type": "fsx",
            "path": f"/fsx/hyperpod-kit-verify/{run}/io",
            "nodes": NODES,
            "bytes_per_node": GIB,
            "write_mb_s": fsx_write,
            "read_mb_s": 1250.0,
            "metadata_ops_s": 5000.0,
            "per_node": per_node,
        }
    )
    out.append(
        {
            "run": run,
            "type": "scheduling",
            "group": "gpu",
            "partition": "gpu",
            "expected": 4,
            "nodes": NODES,
            "job_id": "123",
            "state": "COMPLETED",
            "seconds": 3.2,
        }
    )
    out.append(
        {
            "run": run,
            "type": "studio",
            "user": "alice",
            "path": "/fsx/alice",
            "exists": True,
            "owner_uid": 2001,
            "expected_uid": 2001,
            "mode": "0700",
            "expected_mode": "0700",
        }
    )
    if end:
        out.append(
            {"run": run, "type": "end", "finished": "2026-11-29T08:10:00Z", "seconds": 600.0}
        )
    return out


def older(run: str = OLDER) -> list[dict[str, Any]]:
    """An earlier run that passed everything: only its nodes were checked."""
    return [r for r in records(run, slow_pair_peak=380.0) if r["type"] in ("run", "node", "end")]


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(jsonl(rows), encoding="utf-8")
    return path
