"""Network rules: CIDR sizes, containment and overlap, one VPC source, room for every node's
addresses, the EKS control plane's second subnet."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network

from hyperpod_kit.config.facts import instance_type
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig, NewVpcConfig
from hyperpod_kit.config.validators.registry import validator


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
    """VPC and subnet prefixes are /16 to /28, and subnets lie inside the VPC and apart. (Whether
    the private subnet is large enough for the nodes is `subnet-capacity`'s question.)"""
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
            "set interface_endpoints: true (and internet: false) if the subnet has no NAT route",
        )


# Addresses outside the nodes: FSx file-server interfaces, interface endpoints, Studio apps.
RESERVED_ADDRESSES = 64
_SUBNET_RESERVED = 5  # AWS keeps the first four and the last address of every subnet


def required_addresses(config: EnvironmentConfig) -> int:
    """Private addresses the cluster subnet must hold: every node's primary interface and EFA
    interfaces, on EKS one warm interface of pod addresses per node (VPC CNI), plus headroom."""
    total = RESERVED_ADDRESSES
    for group in config.cluster.instance_groups:
        # a flexible group may get any of its types: count the one that needs the most
        known = [f for t in group.types if (f := instance_type(t)) is not None]
        if not known:
            continue
        facts = max(known, key=lambda f: f.addresses_per_node + (f.ipv4_per_eni or 0))
        per_node = facts.addresses_per_node
        if config.orchestrator == "eks":
            per_node += facts.ipv4_per_eni or 0
        total += group.instance_count * per_node
    return total


@validator("subnet-capacity", area="network")
def check_subnet_capacity(config: EnvironmentConfig) -> Iterator[Finding]:
    """The new private subnet holds every node's addresses (one per EFA interface: 32 on a
    p5.48xlarge), with room to replace nodes."""
    vpc = config.network.new_vpc
    if vpc is None:
        return
    usable = vpc.private_subnet_cidr.num_addresses - _SUBNET_RESERVED
    needed = required_addresses(config)
    at = "network.vpc.private_subnet_cidr"
    if needed > usable:
        prefix = max(16, 32 - (needed + _SUBNET_RESERVED - 1).bit_length())
        yield Finding(
            Level.ERROR,
            at,
            f"{vpc.private_subnet_cidr} has {usable} usable addresses; the instance groups "
            f"need about {needed} (a primary and one per EFA interface per node"
            + (", plus pod addresses on EKS" if config.orchestrator == "eks" else "")
            + ")",
            f"use a /{prefix} or larger",
        )
    elif needed > usable * 0.8:
        yield Finding(
            Level.WARNING,
            at,
            f"the instance groups need about {needed} of {usable} usable addresses; replacing "
            "or adding nodes may run out",
            "use a larger private subnet",
        )


@validator("eks-control-plane-subnets", area="network")
def check_control_plane_subnets(config: EnvironmentConfig) -> Iterator[Finding]:
    """A new EKS cluster needs a second private subnet in another zone for its control plane."""
    net = config.network
    needs = config.orchestrator == "eks" and config.cluster.eks.existing_cluster_name is None
    vpc = net.new_vpc
    if not needs:
        given = (vpc is not None and vpc.control_plane_subnet_cidr is not None) or (
            net.existing_vpc is not None and net.existing_vpc.control_plane_subnet_ids
        )
        if given or net.control_plane_availability_zone_id is not None:
            yield Finding(
                Level.WARNING,
                "network",
                "control-plane subnet settings are used only when hyperpod-kit creates an EKS "
                "cluster; they are ignored",
                "remove them",
            )
        return
    if vpc is not None:
        az = net.control_plane_availability_zone_id
        if az is None:
            yield Finding(
                Level.ERROR,
                "network.control_plane_availability_zone_id",
                "a new EKS cluster needs a second availability zone for its control plane",
                "add control_plane_availability_zone_id: another AZ ID of the region",
            )
        elif az == config.availability_zone_id:
            yield Finding(
                Level.ERROR,
                "network.control_plane_availability_zone_id",
                f"{az} is the environment's own zone; EKS needs subnets in two zones",
                "use another AZ ID of the region",
            )
        cidr = vpc.control_plane_subnet_cidr
        if cidr is None:
            yield Finding(
                Level.ERROR,
                "network.vpc.control_plane_subnet_cidr",
                "a new EKS cluster needs a second private subnet for its control plane",
                f"add control_plane_subnet_cidr: {_free_block(vpc)}",
            )
            return
        at = "network.vpc.control_plane_subnet_cidr"
        if not cidr.subnet_of(vpc.cidr):
            yield Finding(
                Level.ERROR, at, f"{cidr} is not inside the VPC CIDR {vpc.cidr}", _free_block(vpc)
            )
        elif not 16 <= cidr.prefixlen <= 28:
            yield Finding(
                Level.ERROR, at, f"{cidr} has a /{cidr.prefixlen} prefix", "use a /24 to /28"
            )
        for key, other in (
            ("public_subnet_cidr", vpc.public_subnet_cidr),
            ("private_subnet_cidr", vpc.private_subnet_cidr),
        ):
            if cidr.overlaps(other):
                yield Finding(
                    Level.ERROR,
                    at,
                    f"{cidr} overlaps {key} {other}",
                    f"use a free block such as {_free_block(vpc)}",
                )
    elif net.existing_vpc is not None and not net.existing_vpc.control_plane_subnet_ids:
        yield Finding(
            Level.ERROR,
            "network.existing_vpc.control_plane_subnet_ids",
            "a new EKS cluster needs private subnets in a second zone for its control plane",
            "add control_plane_subnet_ids: [subnet-...] in another availability zone",
        )


def _free_block(vpc: NewVpcConfig) -> str:
    """A /24 of the VPC that overlaps neither existing subnet (for hints)."""
    for block in vpc.cidr.subnets(new_prefix=max(24, vpc.cidr.prefixlen)):
        if not block.overlaps(vpc.public_subnet_cidr) and not block.overlaps(
            vpc.private_subnet_cidr
        ):
            return str(block)
    return "a free /24 of the VPC"
