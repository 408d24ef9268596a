"""`HyperPodObservability`: HyperPod's observability add-on on an EKS cluster
(docs/observability.md).

``amazon-sagemaker-hyperpod-observability`` runs the node, DCGM, EFA and kube-state exporters
and an OpenTelemetry collector that remote-writes to the Prometheus workspace named in its
configuration (``ampWorkspace {prometheusEndpoint, arn}``, plus ``amgWorkspace {workspaceName,
arn}`` when there is a Grafana workspace) and sends logs to CloudWatch. The collector's service
account, ``hyperpod-observability-operator-otel-collector``, gets a Pod Identity role with
``aps:RemoteWrite`` on that one workspace and CloudWatch Logs on ``/aws/sagemaker/Clusters/*``
(the add-on's documented permissions; facts-hyperpod.md §1). Created after the HyperPod cluster,
like the other HyperPod add-ons, with the version the lock pins.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from hyperpod_kit.config.derived import AMP_ADDON
from hyperpod_kit.constructs.eks import EksCluster, pod_identity_role
from hyperpod_kit.constructs.observability import PrometheusHandles

COLLECTOR_SERVICE_ACCOUNT = "hyperpod-observability-operator-otel-collector"
LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters"
# The write half of the add-on's documented CloudWatch Logs grant. Its logs:DescribeLogGroups
# takes no resource (granted on a group prefix it grants nothing, and the policy lint says so),
# and the query actions (GetLogEvents, FilterLogEvents, StartQuery...) are for reading, which
# the collector does not do.
LOG_ACTIONS = (
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:DescribeLogStreams",
    "logs:PutLogEvents",
)


@dataclass(frozen=True)
class GrafanaHandles:
    """The Grafana workspace the add-on links its dashboards to."""

    name: str
    arn: str


def addon_configuration(
    scope: Construct, workspace: PrometheusHandles, grafana: GrafanaHandles | None
) -> str:
    """The add-on's configuration values as JSON (tokens resolved by CloudFormation)."""
    values: dict[str, object] = {
        "ampWorkspace": {
            "prometheusEndpoint": workspace.prometheus_endpoint,
            "arn": workspace.workspace_arn,
        },
        "logging": {"enabled": True},
    }
    if grafana is not None:
        values["amgWorkspace"] = {"workspaceName": grafana.name, "arn": grafana.arn}
    return Stack.of(scope).to_json_string(values)


class HyperPodObservability(Construct):
    """The add-on and its collector's role. Handles: ``addon``, ``role``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster,
        workspace: PrometheusHandles,
        version: str | None,
        grafana: GrafanaHandles | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.role = pod_identity_role(
            self, "CollectorRole", description="HyperPod observability add-on: its collector"
        )
        workspace.grant_remote_write(self.role)
        stack = Stack.of(self)
        groups = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{LOG_GROUP_PREFIX}/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=list(LOG_ACTIONS),
            resource_arns=[groups, f"{groups}:log-stream:*"],
        )
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="The add-on's collector writes the HyperPod clusters' log groups, "
                    "named by HyperPod (/aws/sagemaker/Clusters/<name>/<id>) and their streams "
                    "at run time: the documented scope of the add-on's role.",
                    applies_to=[
                        RegexAppliesTo(
                            regex=r"/^Resource::arn:[^:]+:logs:[^:]+:.+:log-group:"
                            r"\/aws\/sagemaker\/Clusters\/\*(:log-stream:\*)?$/"
                        )
                    ],
                )
            ],
            apply_to_children=True,
        )
        self.addon = eks_cluster.add_addon(
            AMP_ADDON,
            version,
            scope=self,
            pod_identity=[(COLLECTOR_SERVICE_ACCOUNT, self.role)],
            configuration=addon_configuration(self, workspace, grafana),
        )
        policy = self.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.addon.node.add_dependency(policy)
