"""`ClusterNetwork` through the network stack: VPC by AZ ID, NAT, endpoints, security groups."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.conftest import SynthFn

pytestmark = pytest.mark.synth


def _resources(template: Any, kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = template.find_resources(kind)
    return found


def _logical_id(template: Any, kind: str, description_start: str) -> str:
    for logical, res in _resources(template, kind).items():
        if res["Properties"]["GroupDescription"].startswith(description_start):
            return logical
    raise AssertionError(f"no {kind} described {description_start!r}")


def _group_ref(logical: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical, "GroupId"]}


def _rules_of(template: Any, kind: str, group: str, peer_key: str) -> set[tuple[Any, ...]]:
    rules = set()
    for res in _resources(template, kind).values():
        props = res["Properties"]
        if props["GroupId"] == _group_ref(group):
            peer = "self" if props.get(peer_key) == _group_ref(group) else str(props.get(peer_key))
            rules.add((props["IpProtocol"], props.get("FromPort"), props.get("ToPort"), peer))
    return rules


def test_subnets_are_placed_by_availability_zone_id(synth: SynthFn) -> None:
    net = synth().templates["network"]
    subnets = _resources(net, "AWS::EC2::Subnet")
    assert len(subnets) == 2
    for subnet in subnets.values():
        assert subnet["Properties"]["AvailabilityZoneId"] == "usw2-az2"
        assert "AvailabilityZone" not in subnet["Properties"]
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False
    cidrs = sorted(s["Properties"]["CidrBlock"] for s in subnets.values())
    assert cidrs == ["10.0.0.0/24", "10.0.128.0/17"]
    net.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"})


def test_private_subnet_routes_through_nat_and_has_s3_gateway(synth: SynthFn) -> None:
    net = synth().templates["network"]
    net.resource_count_is("AWS::EC2::NatGateway", 1)
    net.has_resource_properties(
        "AWS::EC2::Route",
        {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": {"Ref": Match.any_value()}},
    )
    net.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Gateway",
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]},
        },
    )
    net.has_resource_properties("AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL"})


def test_cluster_security_group_rules_are_exactly_efa_self_and_lustre(synth: SynthFn) -> None:
    net = synth().templates["network"]
    sg = _logical_id(net, "AWS::EC2::SecurityGroup", "HyperPod nodes")
    ingress = _rules_of(net, "AWS::EC2::SecurityGroupIngress", sg, "SourceSecurityGroupId")
    egress = _rules_of(net, "AWS::EC2::SecurityGroupEgress", sg, "DestinationSecurityGroupId")
    assert ingress == {
        ("-1", None, None, "self"),
        ("tcp", 988, 988, "self"),
        ("tcp", 1018, 1023, "self"),
    }
    assert egress == {("-1", None, None, "self")}
    inline = _resources(net, "AWS::EC2::SecurityGroup")[sg]["Properties"]
    assert "SecurityGroupIngress" not in inline  # nothing from outside the group
    outward = [(e["CidrIp"], e["IpProtocol"]) for e in inline["SecurityGroupEgress"]]
    assert outward == [("0.0.0.0/0", "-1")]  # out through the NAT; nothing inward but itself


def test_studio_fsx_security_group_allows_only_lustre_from_itself(synth: SynthFn) -> None:
    net = synth().templates["network"]
    sg = _logical_id(net, "AWS::EC2::SecurityGroup", "Studio apps and FSx")
    ingress = _rules_of(net, "AWS::EC2::SecurityGroupIngress", sg, "SourceSecurityGroupId")
    assert ingress == {("tcp", 988, 988, "self"), ("tcp", 1018, 1023, "self")}


@pytest.mark.parametrize(("orchestrator", "count"), [("slurm", 9), ("eks", 12)])
def test_interface_endpoints(synth: SynthFn, orchestrator: str, count: int) -> None:
    overrides: dict[str, Any] = {
        "orchestrator": orchestrator,
        "network": {"interface_endpoints": True},
    }
    if orchestrator == "eks":
        overrides["network"] |= {
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "usw2-az1",
        }
        overrides["cluster"] = {
            "instance_groups": [
                {
                    "name": "workers",
                    "role": "worker",
                    "instance_type": "ml.g5.8xlarge",
                    "instance_count": 2,
                }
            ]
        }
    net = synth(overrides).templates["network"]
    endpoints = [
        e
        for e in _resources(net, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"]["VpcEndpointType"] == "Interface"
    ]
    assert len(endpoints) == count
    assert all(e["Properties"]["PrivateDnsEnabled"] is True for e in endpoints)
    services = {e["Properties"]["ServiceName"]["Fn::Join"][1][-1] for e in endpoints}
    assert ".sagemaker.api" in services and ".ecr.dkr" in services
    assert (".eks" in services) == (orchestrator == "eks")
    # the VPC CNI on EKS nodes assigns pod addresses through the EC2 API
    assert (".ec2" in services) == (orchestrator == "eks")


def test_no_interface_endpoints_by_default(synth: SynthFn) -> None:
    net = synth().templates["network"]
    kinds = [
        e["Properties"]["VpcEndpointType"]
        for e in _resources(net, "AWS::EC2::VPCEndpoint").values()
    ]
    assert kinds == ["Gateway"]


def test_existing_vpc_creates_no_vpc_and_uses_its_id(synth: SynthFn) -> None:
    net = synth(
        {
            "network": {
                "vpc": None,
                "existing_vpc": {
                    "vpc_id": "vpc-0123456789abcdef0",
                    "private_subnet_id": "subnet-0123456789abcdef0",
                    "cidr": "172.31.0.0/16",
                    "route_table_ids": ["rtb-0123456789abcdef0"],
                },
            },
        }
    ).templates["network"]
    net.resource_count_is("AWS::EC2::VPC", 0)
    net.resource_count_is("AWS::EC2::Subnet", 0)
    net.resource_count_is("AWS::EC2::NatGateway", 0)
    for sg in _resources(net, "AWS::EC2::SecurityGroup").values():
        assert sg["Properties"]["VpcId"] == "vpc-0123456789abcdef0"
    net.has_resource_properties(
        "AWS::EC2::VPCEndpoint", {"RouteTableIds": ["rtb-0123456789abcdef0"]}
    )


# --- EKS control-plane subnet ------------------------------------------------------------------

EKS_WORKERS = {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge"}


def _eks_overrides() -> dict[str, Any]:
    """The same EKS environment as test_interface_endpoints (one cached synth serves both)."""
    return {
        "orchestrator": "eks",
        "network": {
            "interface_endpoints": True,
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "usw2-az1",
        },
        "cluster": {"instance_groups": [EKS_WORKERS | {"instance_count": 2}]},
    }


def test_eks_control_plane_subnet_is_private_in_the_second_zone_through_the_nat(
    synth: SynthFn,
) -> None:
    built = synth(_eks_overrides())
    net = built.templates["network"]
    subnets = _resources(net, "AWS::EC2::Subnet")
    cp_id, cp = next((k, s) for k, s in subnets.items() if "ControlPlane" in k)
    assert cp["Properties"]["CidrBlock"] == "10.0.1.0/24"
    assert cp["Properties"]["AvailabilityZoneId"] == "usw2-az1"  # the nodes stay in usw2-az2
    assert cp["Properties"]["MapPublicIpOnLaunch"] is False
    zones = {
        s["Properties"]["CidrBlock"]: s["Properties"]["AvailabilityZoneId"]
        for s in subnets.values()
    }
    assert zones["10.0.128.0/17"] == "usw2-az2"
    # Its own route table, default route through the NAT (not the internet gateway), and S3 through
    # the gateway endpoint like the cluster subnet.
    assoc = next(
        a["Properties"]
        for a in _resources(net, "AWS::EC2::SubnetRouteTableAssociation").values()
        if a["Properties"]["SubnetId"] == {"Ref": cp_id}
    )
    table = assoc["RouteTableId"]
    routes = [
        r["Properties"]
        for r in _resources(net, "AWS::EC2::Route").values()
        if r["Properties"]["RouteTableId"] == table
    ]
    assert len(routes) == 1
    assert routes[0]["DestinationCidrBlock"] == "0.0.0.0/0"
    assert "NatGatewayId" in routes[0] and "GatewayId" not in routes[0]
    gateway = next(
        e["Properties"]
        for e in _resources(net, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"]["VpcEndpointType"] == "Gateway"
    )
    assert table in gateway["RouteTableIds"] and len(gateway["RouteTableIds"]) == 2
    assert len(built.stacks.network.network.control_plane_subnet_ids) == 1


def test_no_control_plane_subnet_on_slurm(synth: SynthFn) -> None:
    built = synth()
    assert not any(
        "ControlPlane" in k for k in _resources(built.templates["network"], "AWS::EC2::Subnet")
    )
    assert built.stacks.network.network.control_plane_subnet_ids == []


@pytest.mark.parametrize(
    ("eks", "eks_control_plane", "expected"),
    [
        (True, None, ["subnet-0123456789abcdef1", "subnet-0123456789abcdef2"]),
        (True, False, []),  # an existing EKS cluster: the settings are ignored
        (False, None, []),
    ],
)
def test_existing_vpc_exposes_control_plane_subnet_ids(
    eks: bool, eks_control_plane: bool | None, expected: list[str]
) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from hyperpod_kit.config.schema import NetworkConfig
    from hyperpod_kit.constructs.network import ClusterNetwork

    config = NetworkConfig.model_validate(
        {
            "existing_vpc": {
                "vpc_id": "vpc-0123456789abcdef0",
                "private_subnet_id": "subnet-0123456789abcdef0",
                "cidr": "10.1.0.0/16",
                "control_plane_subnet_ids": [
                    "subnet-0123456789abcdef1",
                    "subnet-0123456789abcdef2",
                ],
            }
        }
    )
    stack = cdk.Stack(cdk.App(), "Net")
    net = ClusterNetwork(
        stack,
        "Network",
        config=config,
        availability_zone_id="usw2-az2",
        eks=eks,
        eks_control_plane=eks_control_plane,
    )
    assert net.control_plane_subnet_ids == expected
    Template.from_stack(stack).resource_count_is("AWS::EC2::Subnet", 0)  # referred to, not made


def test_new_vpc_skips_the_control_plane_subnet_for_an_existing_cluster() -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from hyperpod_kit.config.schema import NetworkConfig
    from hyperpod_kit.constructs.network import ClusterNetwork

    config = NetworkConfig.model_validate(
        {
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "usw2-az1",
        }
    )
    stack = cdk.Stack(cdk.App(), "Net")
    net = ClusterNetwork(
        stack,
        "Network",
        config=config,
        availability_zone_id="usw2-az2",
        eks=True,
        eks_control_plane=False,
    )
    assert net.control_plane_subnet_ids == []
    Template.from_stack(stack).resource_count_is("AWS::EC2::Subnet", 2)
