"""The dated price table `hyperpod-kit estimate` reads (`prices.json`).

It holds only prices a public source quotes, each naming its sources (address, the words quoted,
the day it was read). A lookup that finds nothing returns None, and the estimate says "no price
data for X": a missing price is never filled in from a neighbouring region or type. The table is
edited by hand when a source is found; `checked` is the day it was last looked over.

`PriceBook` is what the estimate asks: `BundledPrices` (this table) offline, or the Pricing API
with `estimate --aws` (`hyperpod_kit.operations.pricing`, its queries in `pricing_api.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Source:
    key: str
    url: str
    what: str  # the words quoted
    read: str  # the day the source was read (YYYY-MM-DD)


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str  # "hour", "GB-month", "GB"
    sources: tuple[Source, ...]


@cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "prices.json").read_text(encoding="utf-8"))
    return data


def prices_checked() -> str:
    return str(_table()["checked"])


def hours_per_month() -> int:
    """Hours in a billing month as AWS's pricing examples count them (730)."""
    return int(_table()["hours_per_month"])


def currency() -> str:
    return str(_table()["currency"])


def _price(kind: str, keys: tuple[str, ...], unit: str) -> Price | None:
    row: Any = _table()[kind]
    for key in keys:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    sources = _table()["sources"]
    return Price(
        usd=float(row["usd"]),
        unit=unit,
        sources=tuple(Source(key=k, **sources[k]) for k in row["sources"]),
    )


def instance_hour(instance_type: str, region: str) -> Price | None:
    """On-demand price of one HyperPod node of `instance_type` for an hour in `region`."""
    return _price("instance_hour", (instance_type, region), "hour")


def lustre_gb_month(throughput_per_unit_storage: int, region: str) -> Price | None:
    """FSx for Lustre PERSISTENT_2 SSD storage at this throughput tier, per GB-month."""
    return _price(
        "lustre_persistent_2_gb_month", (str(throughput_per_unit_storage), region), "GB-month"
    )


def nat_gateway_hour(region: str) -> Price | None:
    return _price("nat_gateway_hour", (region,), "hour")


def nat_gateway_gb(region: str) -> Price | None:
    """Data processed by a NAT gateway, per GB (usage: not part of the hourly figure)."""
    return _price("nat_gateway_gb_processed", (region,), "GB")


def all_sources() -> list[Source]:
    return [Source(key=k, **v) for k, v in sorted(_table()["sources"].items())]


class PriceBook(Protocol):
    """Where the estimate's prices come from: this bundled table, or the AWS Pricing API
    (`hyperpod_kit.operations.pricing`); `None` is "no price data", never a guess."""

    @property
    def name(self) -> str:
        """ "prices" | "AWS Pricing API": the key of the estimate's `tables`."""

    @property
    def date(self) -> str:
        """The day the table was checked, or the API read."""

    @property
    def label(self) -> str:
        """ "prices, checked 2026-11-25" | "AWS Pricing API, read 2026-11-25"."""

    def instance_hour(self, instance_type: str, region: str) -> Price | None: ...
    def lustre_gb_month(self, throughput_per_unit_storage: int, region: str) -> Price | None: ...
    def nat_gateway_hour(self, region: str) -> Price | None: ...
    def nat_gateway_gb(self, region: str) -> Price | None: ...
    def why(self) -> str | None:
        """Why the last lookup found no price, when there is more to say than "no row"."""


class BundledPrices:
    """The bundled table as a price book (the offline default)."""

    name = "prices"

    @property
    def date(self) -> str:
        return prices_checked()

    @property
    def label(self) -> str:
        return f"{self.name}, checked {self.date}"

    def instance_hour(self, instance_type: str, region: str) -> Price | None:
        return instance_hour(instance_type, region)

    def lustre_gb_month(self, throughput_per_unit_storage: int, region: str) -> Price | None:
        return lustre_gb_month(throughput_per_unit_storage, region)

    def nat_gateway_hour(self, region: str) -> Price | None:
        return nat_gateway_hour(region)

    def nat_gateway_gb(self, region: str) -> Price | None:
        return nat_gateway_gb(region)

    def why(self) -> str | None:
        return None  # a price is in the table or not


@cache
def pricing_api_queries() -> dict[str, Any]:
    """`pricing_api.json`: how `estimate --aws` asks the Pricing API for each kind of price."""
    data: dict[str, Any] = json.loads((HERE / "pricing_api.json").read_text(encoding="utf-8"))
    return data
