"""Regenerate the dated fact tables from the team's fact sheet and botocore.

    python -m hyperpod_kit.config.facts.refresh PATH/TO/facts-instance-types.md

Reads the Markdown fact sheet (instance types with GPUs, EFA, RDMA and ENIs; AZ IDs per region,
each row with its sources) and botocore's `ClusterInstanceType` enum (the types HyperPod
accepts), checks that they agree, and writes `instance_types.json` and `regions.json` beside this
file. The JSON is committed: validation never reads the sheet or calls AWS. Run it when the sheet
is refreshed (new instance types and AZs appear in botocore and the AZ guide first), then review
the diff.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_CHECKED = re.compile(r"^Checked: (\d{4}-\d{2}-\d{2})", re.MULTILINE)
_NOTE = re.compile(r"\s*[¹²³⁴⁵⁶⁷⁸⁹]+\s*")

# Trainium ranks map to NeuronCores, not chips (fact sheet, note 6; logical cores at LNC=2).
NEURON_CORES = {
    "ml.trn1.32xlarge": 32,
    "ml.trn1n.32xlarge": 32,
    "ml.trn2.3xlarge": 4,
    "ml.trn2.48xlarge": 64,
}


def _rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _number(cell: str) -> float | None:
    """A numeric cell; None for "?" (unknown, never 0)."""
    cell = _NOTE.sub("", cell).strip()
    return None if cell in {"?", ""} else float(cell)


def _int(cell: str) -> int | None:
    value = _number(cell)
    return None if value is None else int(value)


def _rdma(cell: str) -> tuple[bool, bool]:
    """`Yes / No` -> (read, write); no EFA -> (False, False)."""
    if "/" not in cell:
        return False, False
    read, write = (part.strip().startswith("Yes") for part in cell.split("/", 1))
    return read, write


def _accelerated(text: str) -> dict[str, dict[str, Any]]:
    types = {}
    for row in _rows(text, "| ClusterInstanceType | Accelerator |"):
        name, accel, count, acc_mem, vcpu, mem, efa, rdma, gdr, nics, enis, ipv4 = row
        accel = _NOTE.sub(" ", accel).strip()
        kind = "trainium" if "Trainium" in accel else "gpu"
        read, write = _rdma(rdma)
        accelerators = _int(count) or 0
        types[name] = {
            "accelerator": accel,
            "accelerator_kind": kind,
            "accelerators": accelerators,
            "accelerator_memory_gib": _number(acc_mem),
            "vcpus": _int(vcpu),
            "memory_gib": _number(mem),
            "efa_interfaces": _int(efa),
            "rdma_read": read,
            "rdma_write": write,
            "gdr_required": _NOTE.sub("", gdr).strip() == "true",
            "network_cards": _int(nics),
            "max_enis": _int(enis),
            "ipv4_per_eni": _int(ipv4),
            "processes_per_node": NEURON_CORES.get(name, accelerators),
        }
    return types


def _general(text: str) -> dict[str, dict[str, Any]]:
    types = {}
    for row in _rows(text, "| ClusterInstanceType | vCPU |"):
        name, vcpu, mem, efa, rdma, nics, enis, ipv4 = row
        read, write = _rdma(rdma)
        types[name] = {
            "accelerator": None,
            "accelerator_kind": None,
            "accelerators": 0,
            "accelerator_memory_gib": None,
            "vcpus": _int(vcpu),
            "memory_gib": _number(mem),
            "efa_interfaces": _int(efa),
            "rdma_read": read,
            "rdma_write": write,
            "gdr_required": False,
            "network_cards": _int(nics),
            "max_enis": _int(enis),
            "ipv4_per_eni": _int(ipv4),
            "processes_per_node": 0,
        }
    return types


def _regions(text: str) -> dict[str, dict[str, Any]]:
    regions = {}
    for row in _rows(text, "| Region | AZ IDs |"):
        region, az_ids, _count, hyperpod = row
        region = region.split(" ", 1)[0]
        ids = [] if az_ids == "?" else [a.strip() for a in az_ids.split(",")]
        regions[region] = {"az_ids": ids, "hyperpod": "" if hyperpod == "—" else hyperpod}
    return regions


def botocore_instance_types() -> set[str]:
    """`ClusterInstanceType` of the installed botocore: the types HyperPod's API accepts."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape: Any = model.shape_for("ClusterInstanceType")
    return set(shape.enum)


def refresh(sheet: Path, out: Path = HERE) -> None:
    import botocore

    text = sheet.read_text(encoding="utf-8")
    m = _CHECKED.search(text)
    checked = m.group(1) if m else "unknown"
    types = {**_accelerated(text), **_general(text)}
    accepted = botocore_instance_types()
    if set(types) != accepted:
        missing, extra = sorted(accepted - set(types)), sorted(set(types) - accepted)
        sys.exit(f"fact sheet and botocore disagree: missing {missing}, not in botocore {extra}")
    sources = {
        "types": f"botocore {botocore.__version__} ClusterInstanceType ({len(accepted)} values)",
        "hardware": "EC2 DescribeInstanceTypes via karpenter and VPC CNI tables, EC2 EFA guide, "
        "aws-ofi-nccl platform map; see the fact sheet's sources S1-S12",
    }
    (out / "instance_types.json").write_text(
        json.dumps(
            {"checked": checked, "sources": sources, "types": dict(sorted(types.items()))},
            indent=1,
        )
        + "\n"
    )
    regions = _regions(text)
    (out / "regions.json").write_text(
        json.dumps(
            {
                "checked": checked,
                "sources": {
                    "az_ids": "AWS Global Infrastructure guide, 'AWS Availability Zones'",
                    "hyperpod": "D developer guide, C cfn-lint registry schema, "
                    "H HyperPod CLI agent region map, G HyperPod CLI GPU-operator values",
                },
                "regions": regions,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{len(types)} instance types, {len(regions)} regions, checked {checked}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    refresh(Path(sys.argv[1]))
