"""monitoring.prometheus, template by template: the workspace, Grafana, the nodes' grant before the
cluster, the EKS add-on and its role, the endpoint (docs/observability.md)."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match, Template

from hyperpod_kit.app import build_environment, create_app
from hyperpod_kit.config import EnvironmentConfig
from tests.conftest import default_data, merge

KEY = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ARN = "arn:aws:aps:us-west-2:111122223333:workspace/ws-0123abcd"


def _stacks(overrides: dict[str, Any]) -> dict[str, Template]:
    config = EnvironmentConfig.model_validate(merge(default_data(), overrides))
    stacks = build_environment(create_app(), config)
    return {s.node.id.removeprefix(f"{config.name}-"): Template.from_stack(s) for s in stacks.all()}


def prometheus(**kw: Any) -> dict[str, Any]:
    return {"monitoring": {"prometheus": {"enabled": True, **kw}}}


def test_created_workspace_is_retained_with_the_environment_key() -> None:
    t = _stacks({"kms_key_arn": KEY, **prometheus(retention_days=30)})["observability"]
    t.has_resource(
        "AWS::APS::Workspace",
        {
            "Properties": {
                "KmsKeyArn": KEY,
                "WorkspaceConfiguration": {"RetentionPeriodInDays": 30},
            },
            "DeletionPolicy": "Retain",
        },
    )
    t.resource_count_is("AWS::Grafana::Workspace", 0)


def test_nodes_may_remote_write_to_that_workspace_only_before_the_cluster() -> None:
    cluster = _stacks(prometheus())["cluster"]
    policies = cluster.find_resources("AWS::IAM::Policy")
    (name,) = [n for n, p in policies.items() if "aps:RemoteWrite" in json.dumps(p)]
    statement = next(
        s for s in policies[name]["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "aps:RemoteWrite"
    )  # fmt: skip
    assert "ExportsOutputFnGetAttPrometheusWorkspaceArn" in json.dumps(statement["Resource"])
    (hyperpod,) = cluster.find_resources("AWS::SageMaker::Cluster").values()
    assert name in hyperpod["DependsOn"]


def test_existing_workspace_without_grafana_needs_no_stack() -> None:
    stacks = _stacks(prometheus(workspace_arn=ARN))
    assert "observability" not in stacks
    assert ARN in json.dumps(stacks["cluster"].to_json())


def test_grafana_reads_the_one_workspace_with_saml() -> None:
    t = _stacks(
        prometheus(grafana={"enabled": True, "authentication": "saml",
                            "saml_metadata_url": "https://idp.example.com/m",
                            "saml_admin_values": ["admins"]})
    )["observability"]  # fmt: skip
    t.has_resource_properties(
        "AWS::Grafana::Workspace",
        {
            "AuthenticationProviders": ["SAML"],
            "PermissionType": "CUSTOMER_MANAGED",
            "GrafanaVersion": "10.4",
            "SamlConfiguration": {
                "IdpMetadata": {"Url": "https://idp.example.com/m"},
                "AssertionAttributes": {"Role": "role"},
                "RoleValues": {"Admin": ["admins"]},
            },
        },
    )
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {"Action": Match.array_with(["aps:QueryMetrics"]),
                     "Resource": {"Fn::GetAtt": ["PrometheusWorkspace", "Arn"]}}
                ]
            }
        },
    )  # fmt: skip


def test_eks_addon_writes_to_the_workspace_as_its_collector() -> None:
    eks = {
        "orchestrator": "eks",
        "network": {
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "usw2-az1",
            "interface_endpoints": True,
        },
        "cluster": {
            "instance_groups": [
                {"name": "w", "role": "worker", "instance_type": "ml.g5.12xlarge",
                 "instance_count": 2}
            ],
            "eks": {"addons": {"observability": "v1.0.5-eksbuild.1"}},
        },
    }  # fmt: skip
    stacks = _stacks(merge(eks, prometheus(workspace_arn=ARN)))
    addons = stacks["eks-addons"]
    addons.has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": "amazon-sagemaker-hyperpod-observability",
            "AddonVersion": "v1.0.5-eksbuild.1",
            "PodIdentityAssociations": [
                {"ServiceAccount": "hyperpod-observability-operator-otel-collector",
                 "RoleArn": Match.any_value()}
            ],
        },
    )  # fmt: skip
    (addon,) = [
        a for a in addons.find_resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-observability"
    ]  # fmt: skip
    values = json.loads(addon["Properties"]["ConfigurationValues"])
    assert values["ampWorkspace"] == {
        "prometheusEndpoint": "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123abcd/",
        "arn": ARN,
    }
    assert "aps:RemoteWrite" not in json.dumps(stacks["cluster"].to_json())
    endpoints = stacks["network"].find_resources("AWS::EC2::VPCEndpoint")
    assert any("aps-workspaces" in json.dumps(e) for e in endpoints.values())


def test_no_endpoint_without_prometheus() -> None:
    network = _stacks({"network": {"interface_endpoints": True}})["network"]
    assert "aps-workspaces" not in json.dumps(network.to_json())
