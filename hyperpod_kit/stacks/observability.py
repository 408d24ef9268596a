"""The observability stack: the Prometheus workspace and the optional Grafana workspace (after
network, beside storage, before the cluster: the nodes' agents remote-write to the workspace
from their first provisioning on, and read its address from this stack's handles)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.eks_observability import GrafanaHandles
from hyperpod_kit.constructs.observability import (
    GrafanaWorkspace,
    PrometheusWorkspace,
    grafana_url,
)
from hyperpod_kit.naming import OBSERVABILITY_AREA
from hyperpod_kit.stacks.discovery import publish


class ObservabilityStack(Stack):
    """Handles: ``prometheus`` (`PrometheusWorkspace`), ``grafana`` (`GrafanaWorkspace` or
    None), ``grafana_handles`` (what HyperPod's add-on links its dashboards to, or None)."""

    def __init__(
        self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs: Any
    ) -> None:
        prometheus = config.monitoring.prometheus
        if not prometheus.enabled:
            raise ValueError("monitoring.prometheus.enabled is false: build no observability stack")
        super().__init__(scope, id, **kwargs)
        self.prometheus = PrometheusWorkspace(
            self,
            "Prometheus",
            config=prometheus,
            environment=config.name,
            kms_key_arn=config.kms_key_arn,
        )
        handles = self.prometheus.handles
        values = {
            "workspace_arn": handles.workspace_arn,
            "workspace_id": handles.workspace_id,
            "prometheus_endpoint": handles.prometheus_endpoint,
            "remote_write_url": handles.remote_write_url,
        }
        self.grafana: GrafanaWorkspace | None = None
        self.grafana_handles: GrafanaHandles | None = None
        if prometheus.grafana.enabled:
            self.grafana = GrafanaWorkspace(
                self,
                "Grafana",
                config=prometheus.grafana,
                environment=config.name,
                prometheus=handles,
            )
            workspace = self.grafana.workspace
            self.grafana_handles = GrafanaHandles(
                name=str(workspace.name),
                arn=self.format_arn(
                    service="grafana", resource="/workspaces", resource_name=workspace.attr_id
                ),
            )
            values["grafana_url"] = grafana_url(self.grafana.endpoint)
            values["grafana_workspace_id"] = self.grafana.workspace_id
        publish(self, environment=config.name, area=OBSERVABILITY_AREA, values=values)
