"""AWS regions and their availability-zone ID prefixes, known offline.

An AZ ID (``usw2-az2``) names the same physical zone in every account, unlike an AZ name
(``us-west-2a``), which each account maps differently; that is why the environment file takes IDs.
The prefix is derived from the region name (``ap-northeast-1`` -> ``apne1``), which covers regions
that the dated table in `facts/regions.json` does not list (GovCloud, regions added to
`validation.allow_regions`).
"""

from __future__ import annotations

import re

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


def arn_partition(region: str) -> str:
    """The ARN partition of a region: aws-cn, aws-us-gov, or aws."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"
