"""Prices read from the AWS Price List Query API (`pricing:GetProducts`) for `estimate --aws`.

Each kind of price is one query of `config/facts/pricing_api.json` (filters, the usage-type suffix
a product must carry, the unit), sent through the one AWS facade (credentials, retries, every
page). A price is taken from the products' OnDemand terms only when exactly one distinct price
matches; none, or several, is "no price data" with the reason, never a pick. Each price names
its SKU and the price list's own description as its source, read today.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.facts.prices import Price, Source, pricing_api_queries

PRICING_API = "AWS Pricing API"


@dataclass(frozen=True)
class Offer:
    """One OnDemand price of one product: what the price list says of it."""

    sku: str
    usd: Decimal
    unit: str
    description: str


def offers(product: dict[str, Any], unit: str) -> list[Offer]:
    """The OnDemand USD prices of `product` (a parsed PriceList item) in `unit` whose range
    begins at 0 (the first tier)."""
    sku = str(product.get("product", {}).get("sku", ""))
    found: list[Offer] = []
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if str(dim.get("unit", "")).lower() != unit.lower():
                continue
            if str(dim.get("beginRange", "0")) != "0":
                continue
            try:
                usd = Decimal(str(dim.get("pricePerUnit", {})["USD"]))
            except (KeyError, InvalidOperation):
                continue
            found.append(Offer(sku, usd, str(dim["unit"]), str(dim.get("description", ""))))
    return found


def matching(products: list[dict[str, Any]], suffix: dict[str, str]) -> list[dict[str, Any]]:
    """The products whose attributes end with each of `suffix`'s values."""
    return [
        p
        for p in products
        if all(
            str(p.get("product", {}).get("attributes", {}).get(k, "")).endswith(v)
            for k, v in suffix.items()
        )
    ]


@dataclass
class PricingApi:
    """A price book (`hyperpod_kit.config.facts.prices.PriceBook`) backed by the Pricing API;
    each answer is kept, so a type used by two groups is asked once. `missing` says, for each
    price not found, why; `why()` says it of the last lookup."""

    aws: AwsFacade
    date: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).date().isoformat()
    )
    name: str = PRICING_API
    missing: dict[str, str] = field(default_factory=dict)
    _asked: dict[tuple[str, tuple[tuple[str, str], ...]], Price | None] = field(
        default_factory=dict
    )
    _why: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}, read {self.date}"

    def instance_hour(self, instance_type: str, region: str) -> Price | None:
        return self._price("instance_hour", "hour", region=region, instance_type=instance_type)

    def lustre_gb_month(self, throughput_per_unit_storage: int, region: str) -> Price | None:
        tier = str(throughput_per_unit_storage)
        return self._price("lustre_gb_month", "GB-month", region=region, tier=tier)

    def nat_gateway_hour(self, region: str) -> Price | None:
        return self._price("nat_gateway_hour", "hour", region=region)

    def nat_gateway_gb(self, region: str) -> Price | None:
        return self._price("nat_gateway_gb", "GB", region=region)

    def why(self) -> str | None:
        return self._why

    def _price(self, kind: str, unit: str, **values: str) -> Price | None:
        key = (kind, tuple(sorted(values.items())))
        if key not in self._asked:
            self._asked[key] = self._ask(kind, unit, values)
        what = pricing_api_queries()["queries"][kind]["what"].format(**values)
        self._why = self.missing.get(what) if self._asked[key] is None else None
        return self._asked[key]

    def _ask(self, kind: str, unit: str, values: dict[str, str]) -> Price | None:
        table = pricing_api_queries()
        query = table["queries"][kind]
        what = query["what"].format(**values)

        def fill(mapping: dict[str, str]) -> dict[str, str]:
            return {k: v.format(**values) for k, v in mapping.items()}

        products = self.aws.price_list(
            query["service_code"], term_match=fill(query["filters"]),
            contains=fill(query["contains"]), endpoint_region=table["endpoint_region"],
        )  # fmt: skip
        chosen = matching(products, fill(query["suffix"]))
        found = [o for p in chosen for o in offers(p, query["unit"])]
        prices = sorted({o.usd for o in found})
        if len(prices) != 1:
            why = (
                f"no product of {query['service_code']} matched"
                if not found
                else f"{len(prices)} different prices matched ({', '.join(map(str, prices))})"
            )
            self.missing[what] = why + ("" if query["checked"] else "; query not checked")
            return None
        offer = found[0]
        source = Source(
            key=f"aws-pricing-api:{offer.sku}",
            url=PRICING_API,
            what=f"SKU {offer.sku}: {offer.description}".rstrip(": "),
            read=self.date,
        )
        return Price(usd=float(offer.usd), unit=unit, sources=(source,))
