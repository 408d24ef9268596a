"""AWS regions and their availability-zone ID prefixes, known offline.

An AZ ID (``usw2-az2``) names the same physical zone in every account, unlike an AZ name
(``us-west-2a``), which each account maps differently; that is why the environment file takes IDs.
The prefix is derived from the region name (``ap-northeast-1`` -> ``apne1``), so a region newer than
this table still validates; the table only tells a typo from a region.
"""

from __future__ import annotations

import re

KNOWN_REGIONS = frozenset(
    {
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "ca-west-1",
        "mx-central-1",
        "sa-east-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "il-central-1",
        "me-south-1",
        "me-central-1",
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-south-1",
        "ap-south-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-7",
        "us-gov-west-1",
        "us-gov-east-1",
    }
)

_DIRECTIONS = {
    "north": "n",
    "south": "s",
    "east": "e",
    "west": "w",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}

_REGION = re.compile(r"^(?P<geo>[a-z]{2})(?P<gov>-gov)?-(?P<dir>[a-z]+)-(?P<num>\d)$")


def az_id_prefix(region: str) -> str | None:
    """``us-west-2`` -> ``usw2``; None when the name does not have a region's shape."""
    m = _REGION.match(region)
    if not m or m["dir"] not in _DIRECTIONS:
        return None
    gov = "g" if m["gov"] else ""
    return f"{m['geo']}{gov}{_DIRECTIONS[m['dir']]}{m['num']}"
