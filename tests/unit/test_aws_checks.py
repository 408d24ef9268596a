"""`validate --aws`: the account-dependent checks, through moto (EC2) and botocore's Stubber
(Service Quotas, which moto does not model for SageMaker), and how they degrade without access."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from hyperpod_kit.cli.main import main
from hyperpod_kit.config import ConfigError, EnvironmentConfig, Level
from hyperpod_kit.config.aws import (
    AwsFacade,
    check_addon_versions,
    check_engine_version,
    check_grafana_version,
    check_kubernetes_version,
    run_aws_checks,
)
from hyperpod_kit.config.environment import load_environment
from tests.conftest import WriteEnv, default_data, merge


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    yield


def _quotas(facade: AwsFacade, quotas: dict[str, float] | None, error: str | None = None) -> Any:
    client = boto3.client("service-quotas", region_name="us-west-2",
                          aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    stub = Stubber(client)
    if error:
        stub.add_client_error("list_service_quotas", service_error_code=error)
    else:
        rows = [{"QuotaName": f"{t} for cluster usage", "Value": v, "ServiceCode": "sagemaker"}
                for t, v in (quotas or {}).items()]  # fmt: skip
        stub.add_response("list_service_quotas", {"Quotas": rows}, {"ServiceCode": "sagemaker"})
    stub.activate()
    real = facade.client
    facade.client = lambda service, **kw: (  # type: ignore[method-assign]
        client if service == "service-quotas" else real(service, **kw)
    )
    return stub


def _config(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))


ENOUGH = {"ml.m5.xlarge": 4, "ml.g5.8xlarge": 2}


@mock_aws
def test_existing_zone_and_enough_quota_give_no_finding(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, ENOUGH)
    assert run_aws_checks(_config(), facade) == []


@mock_aws
def test_unknown_zone_id_is_an_error_listing_the_accounts_zones(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, ENOUGH)
    (finding,) = run_aws_checks(_config({"availability_zone_id": "usw2-az9"}), facade)
    assert (finding.level, finding.path, finding.check) == (
        Level.ERROR, "availability_zone_id", "aws-availability-zone"
    )  # fmt: skip
    assert finding.hint == "use one of usw2-az1, usw2-az2, usw2-az3, usw2-az4"


@mock_aws
def test_quota_below_the_instance_count_is_an_error_at_the_group(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, {"ml.m5.xlarge": 4, "ml.g5.8xlarge": 1})
    (finding,) = run_aws_checks(_config(), facade)
    assert finding.level is Level.ERROR
    assert finding.path == "cluster.instance_groups[2].instance_count"
    assert "2 x ml.g5.8xlarge exceeds this account's HyperPod quota of 1" in finding.message


@mock_aws
def test_a_type_without_a_quota_is_a_warning(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, {"ml.m5.xlarge": 4})
    (finding,) = run_aws_checks(_config(), facade)
    assert finding.level is Level.WARNING and "ml.g5.8xlarge" in finding.message


@mock_aws
def test_access_denied_downgrades_to_a_warning(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, None, error="AccessDeniedException")
    (finding,) = run_aws_checks(_config(), facade)
    assert finding.level is Level.WARNING and finding.path == "(aws)"
    assert "aws-instance-quotas skipped: service-quotas:ListServiceQuotas: AccessDenied" in (
        finding.message
    )


def test_no_credentials_downgrade_every_check_to_a_warning(aws_env: None) -> None:
    findings = run_aws_checks(_config(), AwsFacade("us-west-2"))
    assert [f.level for f in findings] == [Level.WARNING, Level.WARNING]
    assert all("no AWS credentials" in f.message for f in findings)


@mock_aws
def test_load_environment_puts_aws_errors_on_the_yaml_line(
    aws_env: None, write_env: WriteEnv
) -> None:
    path = write_env({"availability_zone_id": "usw2-az9"})
    facade = AwsFacade("us-west-2")
    _quotas(facade, ENOUGH)
    with pytest.raises(ConfigError) as err:
        load_environment(path, aws=facade)
    (finding,) = [f for f in err.value.findings if f.level is Level.ERROR]
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.startswith("availability_zone_id:"))  # fmt: skip
    assert finding.line == line


def test_cli_validate_aws_without_credentials_still_passes_with_warnings(
    aws_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    default = Path(__file__).resolve().parents[2] / "environments" / "default.yaml"
    assert main(["validate", str(default), "--aws"]) == 0
    err = capsys.readouterr().err
    assert "warning: (aws): check aws-availability-zone skipped" in err
    assert "no AWS credentials" in err and "Traceback" not in err


# --- versions from the account's lists (Stubber, responses shaped by the pinned botocore) ------


def _stub(facade: AwsFacade, service: str) -> Stubber:
    """A stubbed client of `service` that the facade hands out (it keeps one per service)."""
    client = boto3.client(  # type: ignore[call-overload]
        service, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    facade._clients[service] = client
    stub = Stubber(client)
    stub.activate()
    return stub


EKS = {
    "orchestrator": "eks",
    "network": {
        "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
        "control_plane_availability_zone_id": "usw2-az1",
    },
    "cluster": {
        "instance_groups": [
            {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
             "instance_count": 2}
        ]
    },
}  # fmt: skip


def _cluster_versions(stub: Stubber, rows: dict[str, str]) -> None:
    versions = [{"clusterVersion": v, "versionStatus": s} for v, s in rows.items()]
    stub.add_response("describe_cluster_versions", {"clusterVersions": versions},
                      {"includeAll": True})  # fmt: skip


def _addon_versions(stub: Stubber, addon: str, kubernetes: str, versions: list[str]) -> None:
    rows = [
        {"addonVersion": v, "compatibilities": [{"clusterVersion": kubernetes}]} for v in versions
    ]
    stub.add_response(
        "describe_addon_versions",
        {"addons": [{"addonName": addon, "addonVersions": rows}]},
        {"addonName": addon, "kubernetesVersion": kubernetes},
    )


def test_a_kubernetes_and_add_on_version_eks_offers_give_no_finding(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    stub = _stub(facade, "eks")
    _cluster_versions(stub, {"1.34": "STANDARD_SUPPORT", "1.33": "EXTENDED_SUPPORT"})
    # the default config pins vpc-cni only (the other add-ons are left to EKS)
    _addon_versions(stub, "vpc-cni", "1.33", ["v1.21.0-eksbuild.1", "v1.20.1-eksbuild.3"])
    config = _config(EKS)
    assert list(check_kubernetes_version(config, facade)) == []
    assert list(check_addon_versions(config, facade)) == []
    stub.assert_no_pending_responses()


def test_an_add_on_version_eks_does_not_offer_for_the_minor_is_an_error(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    stub = _stub(facade, "eks")
    _addon_versions(stub, "vpc-cni", "1.33", ["v1.20.1-eksbuild.3"])
    _addon_versions(stub, "kube-proxy", "1.33", ["v1.33.10-eksbuild.2", "v1.33.5-eksbuild.2"])
    config = _config(
        merge(EKS, {"cluster": {"eks": {"addons": {"kube_proxy": "v1.32.13-eksbuild.5"}}}})
    )
    (finding,) = check_addon_versions(config, facade)
    assert (finding.level, finding.path) == (Level.ERROR, "cluster.eks.addons.kube_proxy")
    assert finding.message == (
        "EKS offers no kube-proxy v1.32.13-eksbuild.5 for Kubernetes 1.33 "
        "(eks:DescribeAddonVersions)"
    )
    assert finding.hint == "use one of v1.33.10-eksbuild.2, v1.33.5-eksbuild.2"


def test_a_kubernetes_version_eks_no_longer_creates_is_an_error(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    stub = _stub(facade, "eks")
    _cluster_versions(stub, {"1.33": "STANDARD_SUPPORT", "1.28": "UNSUPPORTED"})
    config = _config(merge(EKS, {"cluster": {"eks": {"kubernetes_version": "1.28"}}}))
    (finding,) = check_kubernetes_version(config, facade)
    assert (finding.level, finding.path) == (Level.ERROR, "cluster.eks.kubernetes_version")
    assert "EKS creates no cluster on Kubernetes 1.28 in us-west-2 (unsupported)" in (
        finding.message
    )
    assert finding.hint == "use one of 1.33"


def test_an_existing_cluster_or_slurm_asks_eks_nothing(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    stub = _stub(facade, "eks")  # no response queued: any call would fail the test
    existing = merge(EKS, {"cluster": {"eks": {"existing_cluster_name": "prod"}}})
    for config in (_config(existing), _config()):
        assert list(check_kubernetes_version(config, facade)) == []
        assert list(check_addon_versions(config, facade)) == []
    stub.assert_no_pending_responses()


ACCOUNTING = {
    "cluster": {
        "node_provisioning": "continuous",
        "slurm": {"accounting": {"enabled": True, "engine_version": "8.0.mysql_aurora.3.10.6"}},
    }
}


def _engines(stub: Stubber, versions: list[str]) -> None:
    rows = [{"Engine": "aurora-mysql", "EngineVersion": v} for v in versions]
    stub.add_response("describe_db_engine_versions", {"DBEngineVersions": rows},
                      {"Engine": "aurora-mysql"})  # fmt: skip


def test_an_engine_version_rds_offers_gives_no_finding(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _engines(_stub(facade, "rds"), ["8.0.mysql_aurora.3.10.6", "8.0.mysql_aurora.3.11.1"])
    assert list(check_engine_version(_config(ACCOUNTING), facade)) == []


def test_an_engine_version_rds_does_not_offer_is_an_error(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _engines(_stub(facade, "rds"), ["8.0.mysql_aurora.3.10.5", "8.0.mysql_aurora.3.11.1"])
    (finding,) = check_engine_version(_config(ACCOUNTING), facade)
    assert (finding.level, finding.path) == (
        Level.ERROR, "cluster.slurm.accounting.engine_version"
    )  # fmt: skip
    assert "RDS offers no aurora-mysql 8.0.mysql_aurora.3.10.6 in us-west-2" in finding.message
    assert finding.hint == "use one of 8.0.mysql_aurora.3.11.1, 8.0.mysql_aurora.3.10.5"


GRAFANA = {"monitoring": {"prometheus": {"enabled": True, "grafana": {"enabled": True}}}}


def test_a_grafana_version_the_service_offers_gives_no_finding(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _stub(facade, "grafana").add_response("list_versions", {"grafanaVersions": ["9.4", "10.4"]}, {})
    assert list(check_grafana_version(_config(GRAFANA), facade)) == []


def test_a_grafana_version_the_service_does_not_offer_is_an_error(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _stub(facade, "grafana").add_response(
        "list_versions", {"grafanaVersions": ["10.4", "12.4"]}, {}
    )
    config = _config(
        merge(GRAFANA, {"monitoring": {"prometheus": {"grafana": {"version": "9.4"}}}})
    )
    (finding,) = check_grafana_version(config, facade)
    assert (finding.level, finding.path) == (Level.ERROR, "monitoring.prometheus.grafana.version")
    assert finding.hint == "use one of 10.4, 12.4"


@mock_aws
def test_a_denied_version_list_downgrades_to_a_warning(aws_env: None) -> None:
    facade = AwsFacade("us-west-2")
    _quotas(facade, {"ml.g5.8xlarge": 2})
    stub = _stub(facade, "eks")
    stub.add_client_error("describe_cluster_versions", service_error_code="AccessDeniedException")
    stub.add_client_error("describe_addon_versions", service_error_code="AccessDeniedException")
    findings = run_aws_checks(_config(EKS), facade)
    assert [(f.level, f.path, f.check) for f in findings] == [
        (Level.WARNING, "(aws)", "aws-kubernetes-version"),
        (Level.WARNING, "(aws)", "aws-addon-versions"),
    ]
    assert "eks:DescribeAddonVersions: AccessDeniedException" in findings[1].message
