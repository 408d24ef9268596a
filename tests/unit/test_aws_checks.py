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
from hyperpod_kit.config.aws import AwsFacade, run_aws_checks
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
    facade.client = lambda service: client if service == "service-quotas" else real(service)  # type: ignore[method-assign]
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
