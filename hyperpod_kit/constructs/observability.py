"""Amazon Managed Service for Prometheus and Amazon Managed Grafana (docs/observability.md).

    Slurm nodes: exporters ─► Prometheus (agent) ─┐  remote write, SigV4,
    EKS: HyperPod's observability add-on ─────────┴─► AMP workspace ◄── Grafana (optional)
                                                      as the writer's own role

`PrometheusWorkspace` is a new workspace (the environment's key, retained when the stack goes:
it holds the metrics) or an existing one by ARN; either way it hands out typed handles and
grants ``aps:RemoteWrite`` on itself, nothing wider. `GrafanaWorkspace` reads it through a role
of its own (customer-managed permissions: query the one workspace). No CloudFormation resource
puts a dashboard into Grafana: the dashboards are JSON files in `assets/dashboards/`, imported
as docs/observability.md says.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws, RemovalPolicy, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from constructs import Construct

from hyperpod_kit.config.derived import (
    prometheus_endpoint,
    region_of_arn,
    remote_write_url,
    workspace_id_of,
)
from hyperpod_kit.config.schema import GrafanaConfig, PrometheusConfig
from hyperpod_kit.constructs.provenance import trace_values

WORKSPACE_LOGICAL_ID = "PrometheusWorkspace"
"""Pinned: a new logical id would replace the workspace, and its metrics with it."""
GRAFANA_LOGICAL_ID = "GrafanaWorkspace"
# What Grafana's Prometheus data source calls (the AMP query APIs) on the one workspace.
QUERY_ACTIONS = (
    "aps:QueryMetrics",
    "aps:GetSeries",
    "aps:GetLabels",
    "aps:GetMetricMetadata",
    "aps:DescribeWorkspace",
)
AUTHENTICATION = {"iam_identity_center": "AWS_SSO", "saml": "SAML"}


@dataclass(frozen=True)
class PrometheusHandles:
    """A workspace as its users see it: ``workspace_arn``, ``workspace_id``,
    ``prometheus_endpoint`` (ends with a slash, as the add-on's ``ampWorkspace`` takes it),
    ``remote_write_url``, ``created`` (whether this environment made it)."""

    workspace_arn: str
    workspace_id: str
    prometheus_endpoint: str
    remote_write_url: str
    created: bool

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """``aps:RemoteWrite`` on this workspace alone."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["aps:RemoteWrite"], resource_arns=[self.workspace_arn]
        )

    def grant_query(self, grantee: iam.IGrantable) -> iam.Grant:
        """What Grafana's Prometheus data source needs on this workspace."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=list(QUERY_ACTIONS), resource_arns=[self.workspace_arn]
        )


def existing_workspace(arn: str) -> PrometheusHandles:
    """An existing workspace, by its ARN: nothing is looked up."""
    workspace_id = workspace_id_of(arn)
    endpoint = prometheus_endpoint(region_of_arn(arn), workspace_id)
    return PrometheusHandles(arn, workspace_id, endpoint, remote_write_url(endpoint), created=False)


class PrometheusWorkspace(Construct):
    """The environment's Prometheus workspace: created here, or the existing one the file
    names. Handles: ``handles`` (`PrometheusHandles`), ``workspace`` (the `CfnWorkspace`, or
    None for an existing one)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: PrometheusConfig,
        environment: str,
        kms_key_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.workspace: aps.CfnWorkspace | None = None
        if config.workspace_arn is not None:
            self.handles = existing_workspace(config.workspace_arn)
            trace_values(self, config, ["workspace_arn"])
            return
        retention = config.retention_days
        workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias=f"{environment}-metrics",
            # Create-only: adding, removing or changing the key replaces the workspace.
            kms_key_arn=kms_key_arn,
            workspace_configuration=(
                aps.CfnWorkspace.WorkspaceConfigurationProperty(retention_period_in_days=retention)
                if retention is not None
                else None
            ),
        )
        workspace.override_logical_id(WORKSPACE_LOGICAL_ID)
        # The metrics are data: `cdk destroy` leaves the workspace (docs/observability.md).
        workspace.apply_removal_policy(RemovalPolicy.RETAIN)
        self.workspace = workspace
        # The endpoint CloudFormation returns ends with a slash; the URL is built from the id
        # (a token cannot be trimmed at synth), the same way `prometheus_endpoint` builds it.
        write_url = remote_write_url(
            prometheus_endpoint(Stack.of(self).region, workspace.attr_workspace_id)
        )
        self.handles = PrometheusHandles(
            workspace.attr_arn,
            workspace.attr_workspace_id,
            workspace.attr_prometheus_endpoint,
            write_url,
            created=True,
        )


class GrafanaWorkspace(Construct):
    """An Amazon Managed Grafana workspace whose role may query the Prometheus workspace.

    Handles: ``workspace`` (the `CfnWorkspace`), ``role``, ``endpoint`` (the workspace's URL host),
    ``workspace_id``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: GrafanaConfig,
        environment: str,
        prometheus: PrometheusHandles,
    ) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("grafana.amazonaws.com").with_conditions(
                {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}
            ),
            description=f"hyperpod-kit {environment}: Grafana reads the Prometheus workspace",
        )
        prometheus.grant_query(self.role)
        saml = None
        if config.authentication == "saml":
            saml = grafana.CfnWorkspace.SamlConfigurationProperty(
                idp_metadata=grafana.CfnWorkspace.IdpMetadataProperty(url=config.saml_metadata_url),
                assertion_attributes=grafana.CfnWorkspace.AssertionAttributesProperty(
                    role=config.saml_role_attribute
                ),
                role_values=grafana.CfnWorkspace.RoleValuesProperty(
                    admin=list(config.saml_admin_values) or None
                ),
            )
        workspace = grafana.CfnWorkspace(
            self,
            "Workspace",
            name=f"{environment}-grafana",
            description=f"hyperpod-kit {environment}: dashboards over the Prometheus workspace",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=[AUTHENTICATION[config.authentication]],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.role_arn,
            grafana_version=config.version,
            saml_configuration=saml,
        )
        workspace.override_logical_id(GRAFANA_LOGICAL_ID)
        # Retained like the metrics: its dashboards and users' edits are people's work, not ours
        # (docs/observability.md says how to delete it when it is no longer wanted).
        workspace.apply_removal_policy(RemovalPolicy.RETAIN)
        policy = self.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            workspace.node.add_dependency(policy)
        self.workspace = workspace
        self.workspace_id: str = workspace.attr_id
        self.endpoint: str = workspace.attr_endpoint


def grafana_url(endpoint: str) -> str:
    return f"https://{endpoint}"
