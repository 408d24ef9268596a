"""The EKS add-on stack: what runs on the cluster once HyperPod's nodes have joined it.

cert-manager and the HyperPod training operator (HyperPodPyTorchJob), the FSx CSI driver, and
the job namespace with its FSx claim; with task governance, its add-on, the cluster policy and a
compute allocation per team (``cluster_arn``: the HyperPod cluster's), and the FSx claim in each
team's namespace; with monitoring.prometheus, HyperPod's observability add-on. Deploys after the
cluster stack (``after``), which also puts it after the EKS and storage stacks it takes handles
from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.derived import task_governance
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.eks import EksCluster
from hyperpod_kit.constructs.eks_fsx import LustreClaim
from hyperpod_kit.constructs.eks_observability import GrafanaHandles, HyperPodObservability
from hyperpod_kit.constructs.eks_operator import HyperPodTrainingOperator
from hyperpod_kit.constructs.lustre import LustreFileSystem
from hyperpod_kit.constructs.observability import PrometheusHandles
from hyperpod_kit.constructs.task_governance import TaskGovernance


class EksAddonsStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        eks: EksCluster,
        lustre: LustreFileSystem,
        cluster_arn: str | None = None,
        after: Sequence[Stack] = (),
        prometheus: PrometheusHandles | None = None,
        grafana: GrafanaHandles | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        for stack in after:
            self.add_stack_dependency(stack, "the HyperPod cluster and its nodes come first")
        self.operator = HyperPodTrainingOperator(
            self, "TrainingOperator", eks_cluster=eks, versions=config.cluster.eks.addons
        )
        self.fsx = LustreClaim(
            self,
            "Fsx",
            eks_cluster=eks,
            lustre=lustre,
            namespace=config.trainer.job.namespace,
            capacity_gib=config.storage.lustre.storage_capacity_gib,
            environment=config.name,
        )
        self.governance: TaskGovernance | None = None
        if task_governance(config):
            if cluster_arn is None:
                raise ValueError("task governance needs the HyperPod cluster's ARN (cluster_arn)")
            self.governance = TaskGovernance(
                self, "TaskGovernance", config=config, eks_cluster=eks, cluster_arn=cluster_arn
            )
            # Each team's jobs mount /fsx in the team's namespace, which its quota makes.
            for team, namespace in self.governance.namespaces.items():
                self.fsx.claim_in(namespace, after=self.governance.quotas[team])
        # monitoring.prometheus: HyperPod's observability add-on writes to the workspace.
        self.observability = None
        if prometheus is not None:
            self.observability = HyperPodObservability(
                self, "Observability", eks_cluster=eks, workspace=prometheus,
                version=config.cluster.eks.addons.observability, grafana=grafana,
            )  # fmt: skip
