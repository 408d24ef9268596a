"""The monitoring stack: alerts, alarms, a dashboard and the optional remediation Lambda for one
cluster. Deploys after the cluster stack (its log group exists once the cluster does), in
parallel with Studio."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.monitoring import ClusterMonitoring, MonitoredCluster
from hyperpod_kit.stacks.discovery import publish


class MonitoringStack(Stack):
    """Props: the environment, the cluster's handles (``cluster_arn``, ``cluster_name``,
    ``cluster_id``: `HyperPodCluster` has them) and the FSx file system id (new or existing)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        cluster: MonitoredCluster,
        file_system_id: str,
        **kwargs: Any,
    ) -> None:
        if not config.monitoring.enabled:
            raise ValueError("monitoring.enabled is false: build no monitoring stack")
        super().__init__(scope, id, **kwargs)
        self.monitoring = ClusterMonitoring(
            self, "Monitoring", config=config, cluster=cluster, file_system_id=file_system_id
        )
        # Only this stack's own values: an output that re-exports the cluster stack's (the log
        # group name holds the cluster id) is refused by cfn-lint (W6001).
        handles = {
            "topic_arn": self.monitoring.alerts.topic.topic_arn,
            "dashboard_name": self.monitoring.dashboard.dashboard_name,
            "metrics_namespace": self.monitoring.namespace,
        }
        if self.monitoring.remediation is not None:
            handles["remediation_function"] = self.monitoring.remediation.function.function_name
        publish(self, environment=config.name, area="monitoring", values=handles)
