"""AWS managed policies the stacks attach, as dated JSON copies the deploy rehearsal evaluates.

    python -m hyperpod_kit.config.facts.managed_policies

Copies, from moto's bundled snapshot of AWS managed policies (`moto/iam/aws_managed_policies.py`,
moto pinned in requirements-dev.txt), every policy named below into `managed_policies.json` with
moto's version and each policy's own version and update date. The rehearsal never imports moto:
it reads the JSON. Add a name here when a stack attaches a new managed policy (a test fails until
then), run this, and review the diff.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TABLE = HERE / "managed_policies.json"

# ARN path after `arn:aws:iam::aws:policy/`.
NAMES = (
    "AmazonSageMakerClusterInstanceRolePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEKSClusterPolicy",
    "AmazonSageMakerHyperPodTrainingOperatorAccess",
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
)


def refresh(out: Path = TABLE) -> None:
    from importlib.metadata import version

    from moto.iam.aws_managed_policies import aws_managed_policies_data

    data = json.loads(aws_managed_policies_data)
    policies = {}
    for name in NAMES:
        short = name.rsplit("/", 1)[-1]
        entry = data[short]
        policies[name] = {
            "version": entry.get("DefaultVersionId"),
            "updated": entry.get("UpdateDate"),
            "document": entry["Document"],
        }
    table = {
        "source": f"moto {version('moto')} moto/iam/aws_managed_policies.py (a dated snapshot "
        "of AWS managed policies)",
        "policies": policies,
    }
    out.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")


@cache
def managed_policies() -> dict[str, Any]:
    """ARN path (``service-role/AWSLambdaBasicExecutionRole``) -> policy document."""
    table = json.loads(TABLE.read_text())
    return {name: entry["document"] for name, entry in table["policies"].items()}


def source() -> str:
    return str(json.loads(TABLE.read_text())["source"])


if __name__ == "__main__":
    refresh()
