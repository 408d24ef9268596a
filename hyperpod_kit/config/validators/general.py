"""Environment-wide rules: region, availability zone and tags, checked against dated tables."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from hyperpod_kit.config.facts import limit, limits_checked, regions, regions_checked
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.regions import az_id_prefix
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import validator

KIT_TAG = "hyperpod-kit:environment"  # on every stack and resource (app.py)
GOV_REGIONS = frozenset({"us-gov-west-1", "us-gov-east-1"})


def _closest(value: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return close[0] if close else None


@validator("region-known", area="general")
def check_region_known(config: EnvironmentConfig) -> Iterator[Finding]:
    """The region is in the dated region table (or `validation.allow_regions`); warns where the
    table does not list HyperPod."""
    table = regions()
    name = config.region
    if name in config.validation.allow_regions or name in GOV_REGIONS:
        return
    known = table.get(name)
    if known is None:
        close = _closest(name, sorted(table))
        yield Finding(
            Level.ERROR,
            "region",
            f"{name!r} is not a region in hyperpod-kit's table (checked {regions_checked()})",
            (f"did you mean {close!r}? " if close else "")
            + f"if {name} is a region newer than the table, add it to validation.allow_regions",
        )
    elif not known.hyperpod_offered:
        yield Finding(
            Level.WARNING,
            "region",
            f"SageMaker HyperPod is not listed in {name} (table checked {regions_checked()})",
            "pick a HyperPod region such as us-west-2, or suppress region-known if it is "
            "offered there now",
        )


@validator("az-id-in-region", area="general")
def check_az_in_region(config: EnvironmentConfig) -> Iterator[Finding]:
    """The availability zone IDs belong to the region: `usw2-az2` is in us-west-2, `usw2-az9`
    is nowhere."""
    ids: list[tuple[str, str]] = [("availability_zone_id", config.availability_zone_id)]
    if config.network.control_plane_availability_zone_id is not None:
        ids.append(
            (
                "network.control_plane_availability_zone_id",
                config.network.control_plane_availability_zone_id,
            )
        )
    known = regions().get(config.region)
    prefix = az_id_prefix(config.region)
    for path, az in ids:
        if az in config.validation.allow_availability_zone_ids:
            continue
        if known is not None and known.az_ids:
            if az not in known.az_ids:
                where = (
                    "a zone of another region"
                    if prefix is not None and not az.startswith(prefix + "-")
                    else "not a zone of the region"
                )
                yield Finding(
                    Level.ERROR,
                    path,
                    f"{az!r} is {where}: {config.region} has {', '.join(known.az_ids)} "
                    f"(table checked {regions_checked()})",
                    f"use one of them, e.g. {known.az_ids[0]}; a zone newer than "
                    "the table goes in validation.allow_availability_zone_ids",
                )
        elif prefix is not None and az.split("-az")[0] != prefix:
            yield Finding(
                Level.ERROR,
                path,
                f"{az!r} is not in region {config.region} (its zones are {prefix}-az1, "
                f"{prefix}-az2, ...)",
                f"use an AZ ID of {config.region}, like {prefix}-az1",
            )


@validator("tags", area="general")
def check_tags(config: EnvironmentConfig) -> Iterator[Finding]:
    """Tags AWS accepts on every resource: no `aws:` keys, none of hyperpod-kit's own, and room
    for hyperpod-kit's tags within the 50 a resource takes (limits.json). Their lengths and
    characters are `api-constraints`' (botocore's models)."""
    tags = config.tags
    most = limit("tags_per_resource") - limit("kit_tags_per_resource")
    if len(tags) > most:
        yield Finding(
            Level.ERROR,
            "tags",
            f"{len(tags)} tags; a resource takes {limit('tags_per_resource')} and hyperpod-kit "
            f"puts up to {limit('kit_tags_per_resource')} of its own on some (table checked "
            f"{limits_checked()})",
            f"keep at most {most}",
        )
    for key in tags:
        at = f"tags.{key}"
        if key.lower().startswith("aws:"):
            yield Finding(
                Level.ERROR,
                at,
                f"tag keys starting with 'aws:' are reserved for AWS ({key!r})",
                f"use another prefix, e.g. {config.name + ':' + key[4:]!r}",
            )
        elif key == KIT_TAG:
            yield Finding(
                Level.ERROR,
                at,
                f"{KIT_TAG} is hyperpod-kit's own tag (the environment's name, {config.name!r})",
                "remove it; every resource already carries it",
            )
