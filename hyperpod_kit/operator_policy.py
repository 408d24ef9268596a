"""The least-privilege IAM policy of the person who runs `hyperpod-kit nodes` (the operator): one
source for what `nodes --print-policy` prints and for the managed policy the cluster stack
creates with `cluster.operator_policy: true` (stack output `OperatorPolicyArn`), and for the
rehearsal, which plays the operator with that policy. CDK-free: the command, the construct and
the rehearsal import it from below all three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperpod_kit.config.regions import arn_partition
from hyperpod_kit.naming import ENVIRONMENT_TAG, cluster_log_group_name, parameter_name

if TYPE_CHECKING:
    from hyperpod_kit.config.schema import EnvironmentConfig

# HyperPod's batch operation for each action of `nodes` (`list` calls none of them).
NODE_OPERATIONS = {
    "replace": "BatchReplaceClusterNodes",
    "reboot": "BatchRebootClusterNodes",
    "delete": "BatchDeleteClusterNodes",
    "move": "MoveClusterNodes",
}
# MoveClusterNodes' own conditions (botocore 1.44.8's documentation of the operation).
MOVE_NEEDS = ("both clusters InService, orchestrated by EKS, with NodeProvisioningMode "
              "Continuous")  # fmt: skip
READ_ACTIONS = ("sagemaker:DescribeCluster", "sagemaker:ListClusterNodes",
                "sagemaker:DescribeClusterNode")  # fmt: skip
# The cluster stack's output with the managed policy's ARN (read by the rehearsal too).
OUTPUT = "OperatorPolicyArn"


def moves_nodes(config: EnvironmentConfig) -> bool:
    """Whether the environment's cluster can move nodes between its groups (`MOVE_NEEDS`)."""
    return config.orchestrator == "eks" and config.cluster.node_provisioning == "continuous"


def node_operations(config: EnvironmentConfig) -> dict[str, str]:
    """`NODE_OPERATIONS` this environment's cluster takes: `move` only where it can move nodes
    (least privilege: a Slurm operator is not granted an operation HyperPod refuses there)."""
    return {a: o for a, o in NODE_OPERATIONS.items() if a != "move" or moves_nodes(config)}


def operator_policy(config: EnvironmentConfig, *, account: str | None = None) -> dict[str, Any]:
    """The least-privilege IAM policy of `hyperpod-kit nodes` for this environment: the node
    operations and reads on this cluster only (any cluster ARN of the account and region that
    carries the environment's tag: the ARN ends in an id known only after the deploy), and the
    reads `nodes` makes to find it (CloudFormation's stacks, the discovery parameters, the
    health runner's verdicts in the cluster's log group). `account`: the account to name
    (default: the file's, or any); the cluster stack gives its own (a token)."""
    arn = f"arn:{arn_partition(config.region)}"
    where = f"{config.region}:{account or config.account or '*'}"
    tagged = {"StringEquals": {f"aws:ResourceTag/{ENVIRONMENT_TAG}": config.name}}
    cluster = f"{arn}:sagemaker:{where}:cluster/*"
    log_group = cluster_log_group_name(config.cluster_name, "*")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "NodeOperations", "Effect": "Allow",
             "Action": sorted(f"sagemaker:{o}" for o in node_operations(config).values()),
             "Resource": cluster, "Condition": tagged},
            {"Sid": "ReadCluster", "Effect": "Allow", "Action": list(READ_ACTIONS),
             "Resource": cluster, "Condition": tagged},
            {"Sid": "FindStacks", "Effect": "Allow", "Action": "cloudformation:DescribeStacks",
             "Resource": "*"},
            {"Sid": "FindCluster", "Effect": "Allow", "Action": "ssm:GetParameter",
             "Resource": f"{arn}:ssm:{where}:parameter{parameter_name(config.name, '*')}"},
            {"Sid": "ReadHealthVerdicts", "Effect": "Allow", "Action": "logs:GetLogEvents",
             "Resource": f"{arn}:logs:{where}:log-group:{log_group}:log-stream:*"},
        ],
    }  # fmt: skip
