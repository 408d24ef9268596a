"""Environment-wide rules: region and availability zone."""

from __future__ import annotations

from collections.abc import Iterator

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.regions import KNOWN_REGIONS, az_id_prefix
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import validator


@validator("region-known", area="general")
def check_region_known(config: EnvironmentConfig) -> Iterator[Finding]:
    """The region is one this version knows (a warning: newer regions work)."""
    if config.region not in KNOWN_REGIONS:
        yield Finding(
            Level.WARNING,
            "region",
            f"{config.region!r} is not a region this version knows",
            "check the spelling (e.g. us-west-2); a newer region is fine",
        )


@validator("az-id-in-region", area="general")
def check_az_in_region(config: EnvironmentConfig) -> Iterator[Finding]:
    """The availability zone ID belongs to the region (usw2-az2 is in us-west-2)."""
    prefix = az_id_prefix(config.region)
    if prefix is None:
        return
    az_prefix = config.availability_zone_id.split("-az")[0]
    if az_prefix != prefix:
        yield Finding(
            Level.ERROR,
            "availability_zone_id",
            f"{config.availability_zone_id!r} is not in region {config.region} "
            f"(its zones are {prefix}-az1, {prefix}-az2, ...)",
            f"use an AZ ID of {config.region}, like {prefix}-az1",
        )
