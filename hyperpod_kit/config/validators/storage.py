"""Storage rules: FSx for Lustre PERSISTENT_2 sizes, throughput, metadata, data repository links."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hyperpod_kit.config.derived import lustre_throughput_mb_s, lustre_tib
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator

LUSTRE = "storage.lustre"
THROUGHPUT_TIERS = (125, 250, 500, 1000)
MAX_DRAS = 8
# The CloudFormation registry schema of AWS::FSx::FileSystem (bundled with cfn-lint) caps
# StorageCapacity at 65,536 GiB for every file system type; the largest PERSISTENT_2 size
# below it is 27 x 2400.
CFN_MAX_CAPACITY_GIB = 65_536
MAX_CAPACITY_GIB = 64_800
METADATA_IOPS_SMALL = (1500, 3000, 6000, 12000)
METADATA_IOPS_MAX = 192000
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


@validator("lustre-capacity", area="storage")
def check_lustre_capacity(config: EnvironmentConfig) -> Iterator[Finding]:
    """PERSISTENT_2 capacity is 1200 GiB or a multiple of 2400 GiB, at most 64,800 GiB through
    CloudFormation."""
    lustre = config.storage.lustre
    if lustre.existing is not None:
        return
    gib = lustre.storage_capacity_gib
    at = f"{LUSTRE}.storage_capacity_gib"
    if gib != 1200 and gib % 2400 != 0:
        up = 1200 if gib < 1200 else -(-gib // 2400) * 2400
        yield Finding(
            Level.ERROR,
            at,
            f"{gib} is not 1200 or a multiple of 2400 (PERSISTENT_2)",
            f"use {min(up, MAX_CAPACITY_GIB)}",
        )
    elif gib > CFN_MAX_CAPACITY_GIB:
        yield Finding(
            Level.ERROR,
            at,
            f"{gib:,} GiB is above {CFN_MAX_CAPACITY_GIB:,} GiB, the most CloudFormation's "
            "AWS::FSx::FileSystem schema accepts",
            f"use at most {MAX_CAPACITY_GIB:,}; for a larger file system, create it outside "
            "CloudFormation and name it in storage.lustre.existing",
        )


@validator("lustre-throughput-tier", area="storage")
def check_lustre_throughput(config: EnvironmentConfig) -> Iterator[Finding]:
    """Throughput tier is 125, 250, 500 or 1000 MB/s/TiB; reports the aggregate."""
    lustre = config.storage.lustre
    tier = lustre.throughput_per_unit_storage
    if tier not in THROUGHPUT_TIERS:
        nearest = min(THROUGHPUT_TIERS, key=lambda t: (abs(t - tier), t))
        yield Finding(
            Level.ERROR,
            f"{LUSTRE}.throughput_per_unit_storage",
            f"{tier} MB/s/TiB is not a PERSISTENT_2 tier (125, 250, 500, 1000)",
            f"use {nearest}",
        )
    elif lustre.existing is None:
        tib = lustre_tib(lustre)  # FSx counts 1200 GiB as 1.2 TiB
        yield Finding(
            Level.INFO,
            f"{LUSTRE}.throughput_per_unit_storage",
            f"aggregate throughput {lustre_throughput_mb_s(lustre):,.0f} MB/s "
            f"({tib:.2f} TiB x {tier} MB/s/TiB)",
        )


@validator("lustre-metadata", area="storage")
def check_lustre_metadata(config: EnvironmentConfig) -> Iterator[Finding]:
    """Metadata IOPS only with USER_PROVISIONED, and one of the allowed values."""
    meta = config.storage.lustre.metadata
    at = f"{LUSTRE}.metadata.iops"
    if meta.mode == "AUTOMATIC" and meta.iops is not None:
        yield Finding(
            Level.ERROR, at, "iops is set but mode is AUTOMATIC", "set mode: USER_PROVISIONED"
        )
    elif meta.mode == "USER_PROVISIONED":
        iops = meta.iops
        if iops is None:
            yield Finding(Level.ERROR, at, "mode USER_PROVISIONED needs iops", "add iops: 12000")
        elif not (
            iops in METADATA_IOPS_SMALL or (iops % 12000 == 0 and 0 < iops <= METADATA_IOPS_MAX)
        ):
            yield Finding(
                Level.ERROR,
                at,
                f"{iops} is not 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000",
                "use 12000",
            )


@validator("bucket-name", area="storage")
def check_bucket_name(config: EnvironmentConfig) -> Iterator[Finding]:
    """Bucket names follow S3 rules; a new and an existing bucket are exclusive."""
    bucket = config.storage.bucket
    if bucket.name is not None and bucket.existing_name is not None:
        yield Finding(
            Level.ERROR,
            "storage.bucket.existing_name",
            "both name (create) and existing_name (use) are set",
            "keep one",
        )
    for key in ("name", "existing_name"):
        value = getattr(bucket, key)
        if value is not None and not _valid_bucket_name(value):
            yield Finding(
                Level.ERROR,
                f"storage.bucket.{key}",
                f"{value!r} is not a valid S3 bucket name",
                "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a "
                "letter or digit",
            )


def _clean_prefix(prefix: str) -> str:
    return "/".join(p for p in prefix.split("/") if p) + "/" if prefix.strip("/") else "data/"


def _valid_bucket_name(name: str) -> bool:
    """S3's general-purpose bucket naming rules, reserved prefixes and suffixes included."""
    return (
        bool(_BUCKET_NAME.match(name))
        and ".." not in name
        and not _IP_ADDRESS.match(name)
        and not name.startswith(_RESERVED_PREFIXES)
        and not name.endswith(_RESERVED_SUFFIXES)
    )


@validator("dra-paths", area="storage")
def check_dra_paths(config: EnvironmentConfig) -> Iterator[Finding]:
    """At most 8 associations, absolute paths, bucket prefixes, none nested in another."""
    lustre = config.storage.lustre
    dras = lustre.data_repository_associations
    at = f"{LUSTRE}.data_repository_associations"
    if lustre.existing is not None:
        if "data_repository_associations" in lustre.model_fields_set and dras:
            yield Finding(
                Level.WARNING,
                at,
                "data repository associations are created only on a file system this "
                "environment creates; these are ignored",
                "link the existing file system to S3 in its own stack",
            )
        return
    if len(dras) > MAX_DRAS:
        yield Finding(
            Level.ERROR,
            at,
            f"{len(dras)} associations; a file system takes at most {MAX_DRAS}",
            "merge prefixes under a common directory",
        )
    for i, dra in enumerate(dras):
        path = dra.file_system_path
        if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
            yield Finding(
                Level.ERROR,
                f"{at}[{i}].file_system_path",
                f"{path!r} is not an absolute directory path",
                "start with / and end without /, e.g. /data",
            )
        prefix = dra.s3_prefix
        if prefix.startswith("/") or (prefix and not prefix.endswith("/")) or "//" in prefix:
            yield Finding(
                Level.ERROR,
                f"{at}[{i}].s3_prefix",
                f"{prefix!r} is not a bucket prefix",
                f"no leading /, end with /, e.g. {_clean_prefix(prefix)}",
            )
        for j in range(i):
            other = dras[j]
            if _nested(path, other.file_system_path):
                yield Finding(
                    Level.ERROR,
                    f"{at}[{i}].file_system_path",
                    f"{path!r} overlaps {other.file_system_path!r} of association {j}",
                    "associations cannot share, or nest inside, each other's directories",
                )
            if _nested(prefix, other.s3_prefix):
                yield Finding(
                    Level.ERROR,
                    f"{at}[{i}].s3_prefix",
                    f"{prefix!r} overlaps {other.s3_prefix!r} of association {j}",
                    "give each association its own prefix",
                )


def _nested(a: str, b: str) -> bool:
    """True when two directories (or prefixes) are the same or one lies inside the other."""
    a_, b_ = a.strip("/"), b.strip("/")
    if not a_ or not b_:  # the root, or the whole bucket, holds everything
        return True
    return a_ == b_ or a_.startswith(b_ + "/") or b_.startswith(a_ + "/")
