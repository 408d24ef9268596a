"""`TaskGovernance`: HyperPod task governance on an EKS-orchestrated cluster (docs/governance.md).

Three parts, in the order HyperPod's own walkthrough creates them:

1. the EKS add-on ``amazon-sagemaker-hyperpod-taskgovernance`` (HyperPod's Kueue), at a pinned
   version. It takes no Pod Identity association (awsome-distributed-training's Terraform
   installs it with none) and runs on the cluster's nodes, so it comes after the HyperPod cluster
   (the add-on stack's place);
2. the cluster policy, `AWS::SageMaker::ClusterSchedulerConfig` (`CfnClusterSchedulerConfig`,
   in aws-cdk-lib 2.275): the priority classes and fair share. After the add-on: a policy created
   before task governance is completely installed ends `CreateFailed` (aws/sagemaker-hyperpod-cli,
   examples/end_to_end_walkthrough/00-getting-started/00-setup.md);
3. a compute allocation per team, `AWS::SageMaker::ComputeQuota`: its quota per instance type,
   lending and borrowing, fair-share weight and preemption. aws-cdk-lib 2.275 has no L1 class for
   it (`CfnComputeQuota` came with 2.276), so it is a raw `CfnResource` of that type, whose
   properties cfn-lint checks against the registry schema it ships (1.58). After the policy, as
   the walkthrough does. Creating one makes the team's namespace ``hyperpod-ns-<team>`` and its
   Kueue queues (the registry schema's TeamName; the walkthrough).

Every resource here is created by CloudFormation's role: nothing of it runs on a node or in a
Lambda of ours.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnResource, Validations
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from hyperpod_kit.config.derived import governed_teams, task_governance_addon_version
from hyperpod_kit.config.facts import task_governance_facts
from hyperpod_kit.config.schema import EnvironmentConfig, TeamConfig, TeamQuotaConfig
from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.provenance import trace
from hyperpod_kit.naming import (
    ENVIRONMENT_TAG,
    compute_quota_name,
    scheduler_config_name,
    team_namespace,
)

COMPUTE_QUOTA_TYPE = "AWS::SageMaker::ComputeQuota"
STRATEGIES = {"lend_and_borrow": "LendAndBorrow", "lend": "Lend", "dont_lend": "DontLend"}


def quota_resources(items: list[TeamQuotaConfig]) -> list[dict[str, Any]]:
    """`ComputeQuotaConfig.ComputeQuotaResources`: instances (`Count`) or accelerators."""
    out: list[dict[str, Any]] = []
    for item in items:
        row: dict[str, Any] = {"InstanceType": item.instance_type}
        if item.instances is not None:
            row["Count"] = item.instances
        if item.accelerators is not None:
            row["Accelerators"] = item.accelerators
        out.append(row)
    return out


def _quota_keys(team: TeamConfig) -> dict[str, str]:
    """The keys of the file a team's quota's properties come from (provenance.py)."""
    config = "ComputeQuotaConfig"
    keys = {
        "ComputeQuotaTarget/TeamName": "name",
        "ComputeQuotaTarget/FairShareWeight": "fairshare",
        f"{config}/ResourceSharingConfig/Strategy": "sharing",
        f"{config}/ResourceSharingConfig/BorrowLimit": "borrow_limit_percent",
        f"{config}/PreemptTeamTasks": "preempt_own_tasks",
    }
    for j, _ in enumerate(team.quota):
        keys[f"{config}/ComputeQuotaResources/{j}/InstanceType"] = f"quota[{j}].instance_type"
        keys[f"{config}/ComputeQuotaResources/{j}/Count"] = f"quota[{j}].instances"
        keys[f"{config}/ComputeQuotaResources/{j}/Accelerators"] = f"quota[{j}].accelerators"
    return keys


def compute_quota_properties(
    team: TeamConfig, *, cluster_name: str, cluster_arn: str, tags: dict[str, str]
) -> dict[str, Any]:
    """The properties of a team's `AWS::SageMaker::ComputeQuota`, as its registry schema names
    them (checked by cfn-lint, not by a CDK class). ``tags``: the environment's, written out
    (CDK's tag aspect passes a raw resource by: it has no tag manager)."""
    sharing: dict[str, Any] = {"Strategy": STRATEGIES[team.sharing]}
    if team.sharing == "lend_and_borrow" and team.borrow_limit_percent is not None:
        sharing["BorrowLimit"] = team.borrow_limit_percent
    return {
        "Name": compute_quota_name(cluster_name, team.name),
        "Description": f"Team {team.name} (hyperpod-kit): namespace {team_namespace(team.name)}",
        "ClusterArn": cluster_arn,
        "ActivationState": "Enabled",
        "ComputeQuotaTarget": {"TeamName": team.name, "FairShareWeight": team.fairshare},
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": quota_resources(team.quota),
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": "LowerPriority" if team.preempt_own_tasks else "Never",
        },
        "Tags": [{"Key": k, "Value": tags[k]} for k in sorted(tags)],
    }


class TaskGovernance(Construct):
    """The task governance add-on, the cluster policy, and a compute allocation per team.

    Handles: ``addon``, ``policy`` (`CfnClusterSchedulerConfig`), ``quotas`` (team name -> its
    `AWS::SageMaker::ComputeQuota`), ``namespaces`` (team name -> ``hyperpod-ns-<team>``, which
    exists once that team's quota does).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        eks_cluster: EksCluster,
        cluster_arn: str,
    ) -> None:
        super().__init__(scope, id)
        tg = config.cluster.eks.task_governance
        facts = task_governance_facts()
        self.addon = eks_cluster.add_addon(
            str(facts["addon"]), task_governance_addon_version(config), scope=self
        )
        classes = [
            sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(
                name=pc.name, weight=pc.weight
            )
            for pc in tg.priority_classes
        ]
        self.policy = sagemaker.CfnClusterSchedulerConfig(
            self,
            "ClusterPolicy",
            name=scheduler_config_name(config.cluster_name),
            cluster_arn=cluster_arn,
            description=f"Task governance of {config.cluster_name} (hyperpod-kit)",
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=classes or None,
                fair_share="Enabled" if tg.fair_share else "Disabled",
            ),
        )
        self.policy.node.add_dependency(self.addon)
        keys = {"SchedulerConfig/FairShare": "fair_share"}
        for i, _ in enumerate(tg.priority_classes):
            keys[f"SchedulerConfig/PriorityClasses/{i}/Name"] = f"priority_classes[{i}].name"
            keys[f"SchedulerConfig/PriorityClasses/{i}/Weight"] = f"priority_classes[{i}].weight"
        trace(self.policy, tg, keys)
        self.quotas: dict[str, CfnResource] = {}
        self.namespaces: dict[str, str] = {}
        for team in governed_teams(config):
            quota = CfnResource(
                self,
                f"Team-{team.name}",
                type=COMPUTE_QUOTA_TYPE,
                properties=compute_quota_properties(
                    team,
                    cluster_name=config.cluster_name,
                    cluster_arn=cluster_arn,
                    tags={ENVIRONMENT_TAG: config.name, **config.tags},
                ),
            )
            quota.node.add_dependency(self.policy)
            trace(quota, team, _quota_keys(team))
            # aws-cdk-lib 2.275's built-in validator knows no such type; cfn-lint 1.58 (the gate)
            # checks the resource against the registry schema it ships.
            Validations.of(quota).acknowledge(
                Acknowledgment(
                    id="CloudFormation-Validate::F3006",
                    reason="AWS::SageMaker::ComputeQuota is in CloudFormation's registry (cfn-lint "
                    "1.58 checks it); aws-cdk-lib 2.275's built-in validator predates the type",
                )
            )
            self.quotas[team.name] = quota
            self.namespaces[team.name] = team_namespace(team.name)
