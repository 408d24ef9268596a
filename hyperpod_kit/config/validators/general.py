"""Environment-wide rules: region, availability zone and tags, checked against dated tables."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from pydantic import BaseModel

from hyperpod_kit.config.derived import slurm_accounting
from hyperpod_kit.config.facts import limit, limits_checked, regions, regions_checked
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.regions import arn_partition, az_id_prefix
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator
from hyperpod_kit.text import MULTI_LINE_KEY, control_characters, control_hint, describe, shown

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
    for key in ("control_plane_availability_zone_id", "database_availability_zone_id"):
        second = getattr(config.network, key)
        if second is not None:
            ids.append((f"network.{key}", second))
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
    """Tags AWS accepts on every resource: no `aws:` keys or values (the registry schemas of
    AWS::SageMaker::Cluster, AWS::EKS::*, AWS::FSx::DataRepositoryAssociation, AWS::APS::Workspace
    say neither "can be prefixed with aws:"), no `rds:` keys or values where the Slurm accounting
    database is created (AWS::RDS::*'s schemas), none of hyperpod-kit's own, and room for
    hyperpod-kit's tags within the 50 a resource takes (limits.json). Their lengths and
    characters are `api-constraints`' (botocore's models); prose_rules.json lists the sentences."""
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
    rds = slurm_accounting(config)  # AWS::RDS::DBCluster, DBInstance, DBSubnetGroup
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
        elif rds and key.lower().startswith("rds:"):
            yield Finding(
                Level.ERROR,
                at,
                f"tag keys starting with 'rds:' are reserved by RDS ({key!r}), and the Slurm "
                "accounting database's resources carry every tag",
                f"use another prefix, e.g. {config.name + ':' + key[4:]!r}",
            )
        value = tags[key]
        if value.lower().startswith("aws:"):
            yield Finding(
                Level.ERROR,
                at,
                f"tag values starting with 'aws:' are reserved for AWS ({value!r})",
                "drop the aws: prefix from the value",
            )
        elif rds and value.lower().startswith("rds:"):
            yield Finding(
                Level.ERROR,
                at,
                f"tag values starting with 'rds:' are reserved by RDS ({value!r}), and the Slurm "
                "accounting database's resources carry every tag",
                "drop the rds: prefix from the value",
            )


@validator("kms-key", area="general")
def check_kms_key(config: EnvironmentConfig) -> Iterator[Finding]:
    """`kms_key_arn` names a key of the environment's partition and region (EKS and CloudWatch
    Logs use only keys of their own region); a key of another account is legal but needs a key
    policy that lets this account's principals and CloudWatch Logs use it, so it warns."""
    arn = config.kms_key_arn
    if arn is None:
        return
    _, partition, _, region, account, _ = arn.split(":", 5)
    expected = arn_partition(config.region)
    if partition != expected or region != config.region:
        fixed = f"arn:{expected}:kms:{config.region}:{account}:{arn.split(':', 5)[5]}"
        yield Finding(
            Level.ERROR,
            "kms_key_arn",
            f"the key is in {region} ({partition}); EKS and CloudWatch Logs use only a key of "
            f"the environment's region, {config.region}",
            f"name a key of {config.region}, like {fixed}; a multi-Region key's replica there "
            "has its own ARN",
        )
    elif config.account is not None and account != config.account:
        yield Finding(
            Level.WARNING,
            "kms_key_arn",
            f"the key belongs to account {account}, the environment deploys to {config.account}",
            "its key policy must let this account's principals and "
            f"logs.{config.region}.amazonaws.com use it (docs/security.md); suppress kms-key if "
            "it does",
        )


@validator("control-characters", area="general", first=True)
def check_control_characters(config: EnvironmentConfig) -> Iterator[Finding]:
    """No string of the file holds a control character (line breaks, carriage returns, NUL,
    escapes, C1 controls, U+2028/U+2029): every value is one line of text. Walks the whole
    validated config, so a key added later is covered without a word here. A field documented as
    multi-line (`json_schema_extra={"x-multi-line": True}`; none is today) may hold line breaks
    and tabs."""
    yield from _control_characters(config, "", multi_line=False)


def _control_characters(value: object, path: str, *, multi_line: bool) -> Iterator[Finding]:
    if isinstance(value, str):
        found = control_characters(value, multi_line=multi_line)
        if found:
            yield _control_finding(path or "(document)", value, found[0], multi_line=multi_line)
    elif isinstance(value, BaseModel):
        for name, field in type(value).model_fields.items():
            extra = field.json_schema_extra
            lines = isinstance(extra, dict) and extra.get(MULTI_LINE_KEY) is True
            at = f"{path}.{name}" if path else name
            yield from _control_characters(getattr(value, name), at, multi_line=lines)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _control_characters(item, f"{path}[{i}]", multi_line=multi_line)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and control_characters(key):
                yield _control_finding(path, key, control_characters(key)[0], key=True)
                continue
            yield from _control_characters(item, f"{path}.{key}", multi_line=multi_line)


def _control_finding(
    path: str, text: str, char: str, *, multi_line: bool = False, key: bool = False
) -> Finding:
    what = "the key" if key else "the value"
    allowed = " (line breaks and tabs are fine here, other controls are not)" if multi_line else ""
    return Finding(
        Level.ERROR,
        path,
        f"{what} {shown(text)} holds {describe(char)}{allowed}",
        control_hint(text),
    )
