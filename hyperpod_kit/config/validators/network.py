"""Network rules: CIDR sizes, containment and overlap, one VPC source."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import validator

# A HyperPod accelerated instance takes one address per EFA interface (32 on a p5.48xlarge) plus
# the primary; a /20 leaves room for about 120 such nodes, FSx and Studio.
RECOMMENDED_PRIVATE_PREFIX = 20


@validator("vpc-source", area="network")
def check_vpc_source(config: EnvironmentConfig) -> Iterator[Finding]:
    """Either a new VPC or an existing one, not both."""
    net = config.network
    if net.vpc is not None and net.existing_vpc is not None:
        yield Finding(
            Level.ERROR,
            "network.existing_vpc",
            "both network.vpc and network.existing_vpc are set",
            "keep vpc to create a VPC, or existing_vpc to use one",
        )


@validator("vpc-cidr", area="network")
def check_vpc_cidr(config: EnvironmentConfig) -> Iterator[Finding]:
    """VPC and subnet prefixes are /16 to /28, subnets lie inside the VPC and apart; warns below
    a /20 private subnet.
    """
    vpc = config.network.new_vpc
    if vpc is None:
        return
    if not 16 <= vpc.cidr.prefixlen <= 28:
        yield Finding(
            Level.ERROR,
            "network.vpc.cidr",
            f"{vpc.cidr} has a /{vpc.cidr.prefixlen} prefix; a VPC CIDR is /16 to /28",
            "use a /16 such as 10.0.0.0/16",
        )
    subnets: list[tuple[str, IPv4Network]] = [
        ("public_subnet_cidr", vpc.public_subnet_cidr),
        ("private_subnet_cidr", vpc.private_subnet_cidr),
    ]
    for key, subnet in subnets:
        if not subnet.subnet_of(vpc.cidr):
            yield Finding(
                Level.ERROR,
                f"network.vpc.{key}",
                f"{subnet} is not inside the VPC CIDR {vpc.cidr}",
                f"pick a block inside {vpc.cidr}",
            )
        elif not 16 <= subnet.prefixlen <= 28:
            yield Finding(
                Level.ERROR,
                f"network.vpc.{key}",
                f"{subnet} has a /{subnet.prefixlen} prefix; a subnet is /16 to /28",
                "use a /24 for the public subnet and a /17 to /20 for the private one",
            )
    if vpc.public_subnet_cidr.overlaps(vpc.private_subnet_cidr):
        yield Finding(
            Level.ERROR,
            "network.vpc.private_subnet_cidr",
            f"{vpc.private_subnet_cidr} overlaps the public subnet {vpc.public_subnet_cidr}",
            "give the subnets disjoint blocks, e.g. 10.0.0.0/24 and 10.0.128.0/17",
        )
    if vpc.private_subnet_cidr.prefixlen > RECOMMENDED_PRIVATE_PREFIX:
        yield Finding(
            Level.WARNING,
            "network.vpc.private_subnet_cidr",
            f"{vpc.private_subnet_cidr} has {vpc.private_subnet_cidr.num_addresses - 5} usable "
            "addresses; each accelerated node takes one per EFA interface (32 on p5.48xlarge)",
            f"use a /{RECOMMENDED_PRIVATE_PREFIX} or larger",
        )


@validator("endpoints-without-nat", area="network")
def check_endpoints(config: EnvironmentConfig) -> Iterator[Finding]:
    """An existing VPC without interface endpoints needs a NAT route (an info)."""
    existing = config.network.existing_vpc
    if existing is not None and not config.network.interface_endpoints:
        yield Finding(
            Level.INFO,
            "network.interface_endpoints",
            "an existing VPC's private subnet needs a route to the internet (NAT) or interface "
            "endpoints for the AWS APIs the nodes call",
            "set interface_endpoints: true if the subnet has no NAT route",
        )
