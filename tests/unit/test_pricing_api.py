"""`estimate --aws`: prices from the AWS Pricing API (pricing:GetProducts) through the one AWS
facade, with botocore's Stubber (requests and responses validated against the pricing model).

The PriceList items are JSON strings shaped as the API returns them. The shape is the one of the
real GetProducts output quoted in aws/aws-cli, awscli/examples/pricing/get-products.rst (commit
3096efebc92a9c67a6b44c05ac7438df1958c9b3): `product {productFamily, attributes, sku}`,
`serviceCode`, `terms.OnDemand.<sku>.<offer> {priceDimensions.<rate> {unit, endRange, description,
appliesTo, rateCode, beginRange, pricePerUnit {USD}}, sku, effectiveDate, offerTermCode,
termAttributes}`, `version`, `publicationDate`; that item itself is `AWS_CLI_EXAMPLE` below,
verbatim. The usage types follow the sources in config/facts/pricing_api.json; the prices in the
stubbed answers are the test's own inputs, not prices of record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config import aws as aws_module
from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.facts.prices import pricing_api_queries
from hyperpod_kit.estimate import estimate, render_text
from hyperpod_kit.operations.pricing import PRICING_API, PricingApi, matching, offers
from tests.conftest import REPO, run_cli

DEFAULT = REPO / "environments" / "default.yaml"  # us-west-2, 1 controller, 1 login, 2 x g5
READ = "2026-11-25"

# aws/aws-cli awscli/examples/pricing/get-products.rst: one PriceList item of the real output
AWS_CLI_EXAMPLE = (
    '{"product":{"productFamily":"Storage","attributes":{"storageMedia":"SSD-backed",'
    '"maxThroughputvolume":"320 MB/sec","volumeType":"Provisioned IOPS","maxIopsvolume":"20000",'
    '"servicecode":"AmazonEC2","usagetype":"APS1-EBS:VolumeUsage.piops","locationType":"AWS '
    'Region","location":"Asia Pacific (Singapore)","servicename":"Amazon Elastic Compute Cloud",'
    '"maxVolumeSize":"16 TiB","operation":""},"sku":"3MKHN58N7RDDVGKJ"},"serviceCode":"AmazonEC2",'
    '"terms":{"OnDemand":{"3MKHN58N7RDDVGKJ.JRTCKXETXF":{"priceDimensions":{"3MKHN58N7RDDVGKJ.'
    'JRTCKXETXF.6YS6EN2CT7":{"unit":"GB-Mo","endRange":"Inf","description":"$0.138 per GB-month '
    'of Provisioned IOPS SSD (io1)  provisioned storage - Asia Pacific (Singapore)","appliesTo":[],'
    '"rateCode":"3MKHN58N7RDDVGKJ.JRTCKXETXF.6YS6EN2CT7","beginRange":"0","pricePerUnit":{"USD":'
    '"0.1380000000"}}},"sku":"3MKHN58N7RDDVGKJ","effectiveDate":"2018-08-01T00:00:00Z",'
    '"offerTermCode":"JRTCKXETXF","termAttributes":{}}}},"version":"20180808005701",'
    '"publicationDate":"2018-08-08T00:57:01Z"}'
)


def item(
    sku: str, service: str, family: str, attributes: dict[str, str], *, unit: str, usd: str,
    description: str, reserved_usd: str | None = None,
) -> str:  # fmt: skip
    """One PriceList item in the API's shape (a JSON string), with an OnDemand term and, when
    given, a Reserved term that the estimate must not take."""
    offer, rate = f"{sku}.JRTCKXETXF", f"{sku}.JRTCKXETXF.6YS6EN2CT7"
    terms: dict[str, Any] = {"OnDemand": {offer: {
        "priceDimensions": {rate: {
            "unit": unit, "endRange": "Inf", "description": description, "appliesTo": [],
            "rateCode": rate, "beginRange": "0", "pricePerUnit": {"USD": usd}}},
        "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
        "termAttributes": {}}}}  # fmt: skip
    if reserved_usd is not None:
        terms["Reserved"] = {f"{sku}.4NA7Y494T4": {"priceDimensions": {f"{sku}.4NA7Y494T4.x": {
            "unit": unit, "endRange": "Inf", "description": "reserved", "appliesTo": [],
            "rateCode": f"{sku}.4NA7Y494T4.x", "beginRange": "0",
            "pricePerUnit": {"USD": reserved_usd}}}, "sku": sku,
            "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "4NA7Y494T4",
            "termAttributes": {"LeaseContractLength": "1yr",
                               "PurchaseOption": "No Upfront"}}}  # fmt: skip
    return json.dumps({
        "product": {"productFamily": family, "attributes": {
            "servicecode": service, "regionCode": "us-west-2", "location": "US West (Oregon)",
            "locationType": "AWS Region", **attributes}, "sku": sku},
        "serviceCode": service, "terms": terms, "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z"}, separators=(",", ":"))  # fmt: skip


def sagemaker(instance_type: str, usd: str, sku: str, *, usage: str = "Cluster") -> str:
    return item(sku, "AmazonSageMaker", "ML Instance",
                {"usagetype": f"USW2-{usage}:{instance_type}", "instanceName": instance_type,
                 "operation": "RunInstance"}, unit="Hrs", usd=usd,
                description=f"${usd} per {usage} {instance_type} hour in US West (Oregon)",
                reserved_usd="0.0001")  # fmt: skip


def nat(usage: str, unit: str, usd: str, sku: str) -> str:
    return item(sku, "AmazonEC2", "NAT Gateway", {"usagetype": f"USW2-{usage}",
                "group": "NGW:NatGateway", "operation": "NatGateway"}, unit=unit, usd=usd,
                description=f"${usd} per {usage} in US West (Oregon)")  # fmt: skip


def filters(query: str, **values: str) -> list[dict[str, str]]:
    """The Filters the facade must send for one query of pricing_api.json."""
    q = pricing_api_queries()["queries"][query]
    sent = [{"Type": "TERM_MATCH", "Field": k, "Value": v.format(**values)}
            for k, v in q["filters"].items()]  # fmt: skip
    sent += [{"Type": "CONTAINS", "Field": k, "Value": v.format(**values)}
             for k, v in q["contains"].items()]  # fmt: skip
    return sent


class PricingStub:
    def __init__(self) -> None:
        session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x",
                                region_name="us-west-2")  # fmt: skip
        self.facade = AwsFacade("us-west-2", session=session)
        client = self.facade.client("pricing", region="us-east-1")
        assert client.meta.region_name == "us-east-1"  # the API's endpoint, not the file's region
        self.stubber = Stubber(client)
        self.stubber.activate()

    def answer(
        self, service: str, sent: list[dict[str, str]], items: list[str], token: str | None = None,
        after: str | None = None,
    ) -> None:  # fmt: skip
        params: dict[str, Any] = {"ServiceCode": service, "Filters": sent,
                                  "FormatVersion": "aws_v1"}  # fmt: skip
        if after:
            params["NextToken"] = after
        response: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": items}
        if token:
            response["NextToken"] = token
        self.stubber.add_response("get_products", response, params)

    def error(self, code: str) -> None:
        self.stubber.add_client_error("get_products", service_error_code=code)


@pytest.fixture
def stub() -> Iterator[PricingStub]:
    s = PricingStub()
    yield s
    s.stubber.assert_no_pending_responses()


def answer_default(stub: PricingStub) -> None:
    """The queries of default.yaml in the order the estimate asks them: ml.m5.xlarge (asked once
    for the controller and the login group), ml.g5.8xlarge (two pages), Lustre at 250, NAT."""
    stub.answer("AmazonSageMaker", filters("instance_hour", region="us-west-2",
                                           instance_type="ml.m5.xlarge"),
                [sagemaker("ml.m5.xlarge", "0.2300000000", "M5SKU0000000001"),
                 sagemaker("ml.m5.xlarge", "0.2700000000", "M5SKU0000000002",
                           usage="Notebk")])  # fmt: skip
    g5 = filters("instance_hour", region="us-west-2", instance_type="ml.g5.8xlarge")
    stub.answer("AmazonSageMaker", g5, [sagemaker("ml.g5.8xlarge", "2.9000000000",
                                                  "G5SKU0000000001", usage="Train")],
                token="page-2")  # fmt: skip
    stub.answer("AmazonSageMaker", g5, [sagemaker("ml.g5.8xlarge", "3.1000000000",
                                                  "G5SKU0000000002")], after="page-2")  # fmt: skip
    stub.answer("AmazonFSx", filters("lustre_gb_month", region="us-west-2", tier="250"), [])
    sent = filters("nat_gateway_hour", region="us-west-2")
    both = [
        nat("NatGateway-Hours", "Hrs", "0.0450000000", "NATSKU000000001"),
        nat("NatGateway-Bytes", "GB", "0.0450000000", "NATSKU000000002"),
        AWS_CLI_EXAMPLE,
    ]
    stub.answer("AmazonEC2", sent, both)
    stub.answer("AmazonEC2", filters("nat_gateway_gb", region="us-west-2"), both)


def test_prices_come_from_the_pricing_api(stub: PricingStub) -> None:
    answer_default(stub)
    config = load_environment(DEFAULT).config
    result = estimate(config, prices=PricingApi(stub.facade, date=READ))

    lines = {c.item: c for c in result.costs}
    controller = lines["controller: 1 x ml.m5.xlarge"]
    assert controller.hourly_usd == pytest.approx(0.23)  # the Cluster: usage, not the notebook's
    assert controller.sources == [{"url": PRICING_API, "read": READ, "quote":
                                   "SKU M5SKU0000000001: $0.2300000000 per Cluster ml.m5.xlarge "
                                   "hour in US West (Oregon)"}]  # fmt: skip
    compute = lines["compute: 2 x ml.g5.8xlarge"]
    assert compute.hourly_usd == pytest.approx(2 * 3.1)  # from the second page; OnDemand only
    assert compute.monthly_usd == pytest.approx(2 * 3.1 * 730)
    (nat_line,) = [c for c in result.costs if c.kind == "nat"]
    assert nat_line.hourly_usd == pytest.approx(0.045)
    assert "data processed costs $0.045/GB more" in nat_line.how
    (lustre,) = [c for c in result.costs if c.kind == "lustre"]
    assert lustre.missing == (
        "no price data for FSx for Lustre PERSISTENT_2 at 250 MB/s/TiB in us-west-2 "
        f"(AWS Pricing API, read {READ}: no product of AmazonFSx matched; query not checked)"
    )
    assert result.tables["AWS Pricing API"] == READ and "prices" not in result.tables
    assert result.hourly_usd == pytest.approx(0.23 * 2 + 6.2 + 0.045)

    text = render_text(result)
    assert f"cost, USD [AWS Pricing API, read {READ}; a month is 730 hours]:" in text
    assert (f"source: AWS Pricing API, read {READ} (SKU G5SKU0000000002: $3.1000000000 per "
            "Cluster ml.g5.8xlarge hour in US West (Oregon))") in text  # fmt: skip
    data = json.loads(json.dumps(result.as_json()))
    assert data["cost"]["prices"] == f"AWS Pricing API, read {READ}"
    assert data["cost"]["missing"] == [lustre.missing]


def test_several_prices_are_no_price_data_never_a_pick(stub: PricingStub) -> None:
    sent = filters("instance_hour", region="us-west-2", instance_type="ml.p5.48xlarge")
    stub.answer(
        "AmazonSageMaker",
        sent,
        [
            sagemaker("ml.p5.48xlarge", "1.0", "P5SKU0000000001"),
            sagemaker("ml.p5.48xlarge", "2.0", "P5SKU0000000002"),
        ],
    )
    book = PricingApi(stub.facade, date=READ)
    assert book.instance_hour("ml.p5.48xlarge", "us-west-2") is None
    assert book.instance_hour("ml.p5.48xlarge", "us-west-2") is None  # asked once, kept
    assert book.missing == {
        "ml.p5.48xlarge HyperPod cluster node hour in us-west-2": "2 different prices matched "
        "(1.0, 2.0)"}  # fmt: skip


def test_a_price_list_item_is_read_as_the_api_returns_it() -> None:
    product = json.loads(AWS_CLI_EXAMPLE)
    (offer,) = offers(product, "GB-Mo")
    assert (offer.sku, str(offer.usd), offer.unit) == ("3MKHN58N7RDDVGKJ", "0.1380000000", "GB-Mo")
    assert offers(product, "Hrs") == []
    assert matching([product], {"usagetype": "NatGateway-Hours"}) == []
    assert matching([product], {"usagetype": "VolumeUsage.piops"}) == [product]


def test_a_denied_call_is_one_line(
    stub: PricingStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.error("AccessDeniedException")
    monkeypatch.setattr(aws_module, "AwsFacade", lambda region: stub.facade)
    code = cli.main(["estimate", str(DEFAULT), "--aws"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = [x for x in err.splitlines() if x.strip() and ": valid (" not in x]
    assert line.startswith(f"{DEFAULT}: cannot read the AWS Pricing API (pricing:GetProducts: "
                           "AccessDeniedException)")  # fmt: skip
    assert "Hint:" in line


def test_aws_without_credentials_is_one_line(tmp_path: Path) -> None:
    done = run_cli("estimate", str(DEFAULT), "--aws", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert lines == [f"{DEFAULT}: no AWS credentials found for --aws. Hint: configure them (aws "
                     "configure, AWS_PROFILE, or SSO) with pricing:GetProducts, or leave out "
                     "--aws for the bundled price table."]  # fmt: skip


def test_every_query_names_its_source() -> None:
    table = pricing_api_queries()
    assert table["endpoint_region"] == "us-east-1"
    for name, q in table["queries"].items():
        assert q["source"] and q["unit"] and q["service_code"], name
        assert isinstance(q["checked"], bool), name
