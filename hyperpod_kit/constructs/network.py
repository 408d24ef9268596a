"""`ClusterNetwork`: the VPC, the cluster subnet and the security groups HyperPod needs.

Built from L1 resources on purpose: subnets are placed by availability-zone **ID**
(`AWS::EC2::Subnet.AvailabilityZoneId`), which the L2 `Vpc` cannot do without looking zones up,
and synth must stay offline.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from cdk_nag import NagSuppressions
from constructs import Construct

from hyperpod_kit.config.derived import endpoint_services
from hyperpod_kit.config.schema import ExistingVpcConfig, NetworkConfig, NewVpcConfig
from hyperpod_kit.constructs.provenance import trace, trace_values

LUSTRE_PORTS = ((988, 988), (1018, 1023))
"""TCP ports between Lustre clients and servers."""
# Which services get an interface endpoint: `config.derived.endpoint_services` (estimate reads it).


def lustre_ingress(
    scope: Construct, prefix: str, *, group_id: str, source_id: str, source: str
) -> None:
    """The Lustre ports (`LUSTRE_PORTS`) into `group_id` from `source_id`, one rule each (ids
    `<prefix><first port>`), described as from `source`."""
    for low, high in LUSTRE_PORTS:
        ports = f"{low}" if low == high else f"{low}-{high}"
        ec2.CfnSecurityGroupIngress(
            scope,
            f"{prefix}{low}",
            group_id=group_id,
            ip_protocol="tcp",
            from_port=low,
            to_port=high,
            source_security_group_id=source_id,
            description=f"Lustre TCP {ports} from {source}",
        )


def in_vpc(
    config: NetworkConfig,
    vpc: ec2.IVpc,
    subnet: ec2.ISubnet,
    *,
    route_table_ids: Sequence[str] = (),
    control_plane_subnets: Sequence[ec2.ISubnet] = (),
    database_subnets: Sequence[ec2.ISubnet] = (),
) -> NetworkConfig:
    """`config` with its VPC replaced by `vpc` and its cluster subnet by `subnet`, both of the app
    this is built in (the construct library, `hyperpod_kit.cdk`): tokens, which the schema's
    patterns would refuse, so the section is built without validation. The rest of `config`
    (interface endpoints, internet) holds as written. ``route_table_ids``: where to add an S3
    gateway endpoint (none by default: a VPC of one's own usually has it);
    ``control_plane_subnets`` (EKS: subnets in other zones for a new EKS cluster's control plane)
    and ``database_subnets`` (Slurm accounting: the database's, in other zones)."""
    existing = ExistingVpcConfig.model_construct(
        vpc_id=vpc.vpc_id,
        private_subnet_id=subnet.subnet_id,
        cidr=vpc.vpc_cidr_block,  # type: ignore[arg-type]  # a token, read as str(cidr)
        route_table_ids=list(route_table_ids),
        control_plane_subnet_ids=[s.subnet_id for s in control_plane_subnets],
        database_subnet_ids=[s.subnet_id for s in database_subnets],
    )
    return config.model_copy(update={"vpc": None, "existing_vpc": existing})


class ClusterNetwork(Construct):
    """A VPC (new or existing) with one private subnet for the cluster, and its security groups.

    Handles: ``vpc_id``, ``vpc_cidr``, ``private_subnet_id``, ``availability_zone_id``,
    ``cluster_security_group_id`` (nodes and FSx: all traffic to itself, for EFA, plus Lustre
    ports), ``studio_fsx_security_group_id`` (Lustre ports between Studio apps and FSx),
    ``control_plane_subnet_ids`` (EKS: the subnets of other zones that only the EKS control plane
    uses; empty unless the environment creates an EKS cluster), ``database_subnet_ids`` (Slurm
    accounting: the subnets of other zones that only the accounting database's subnet group
    uses; empty without accounting).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: NetworkConfig,
        availability_zone_id: str,
        eks: bool = False,
        eks_control_plane: bool | None = None,
        accounting: bool = False,
        prometheus: bool = False,
        security_group: ec2.ISecurityGroup | None = None,
    ) -> None:
        """``eks_control_plane``: create (new VPC) or expose (existing VPC) the control-plane
        subnets; None follows ``eks``. Pass False when the EKS cluster already exists.
        ``security_group``: a group of the app's, in the VPC, for the nodes and the file system in
        place of the cluster security group created here; what EFA and Lustre need is added to
        it (`_own_security_group`).
        ``accounting``: create (new VPC) or expose (existing VPC) the accounting database's
        subnets, and add the Secrets Manager endpoint when interface endpoints are on.
        ``prometheus``: add the Prometheus workspaces' endpoint when interface endpoints are on."""
        super().__init__(scope, id)
        self.availability_zone_id = availability_zone_id
        self.subnets: dict[str, ec2.CfnSubnet] = {}  # by kind (Public, Private, ...)
        self.config = config
        self._vpc_key = "vpc" if config.existing_vpc is None else "existing_vpc"  # its CIDR's
        self.control_plane_subnet_ids: list[str] = []
        self.database_subnet_ids: list[str] = []
        control_plane = eks if eks_control_plane is None else eks_control_plane
        new_vpc = config.new_vpc
        if new_vpc is not None:
            cp_zone = config.control_plane_availability_zone_id if control_plane else None
            self._create_vpc(new_vpc, cp_zone)
            db_zone = config.database_availability_zone_id
            if accounting and db_zone is not None and new_vpc.database_subnet_cidr is not None:
                self._database_subnet(str(new_vpc.database_subnet_cidr), db_zone)
                trace(self.subnets["Database"], new_vpc, {"CidrBlock": "database_subnet_cidr"})
            for kind, zone in (("ControlPlane", "control_plane"), ("Database", "database")):
                if kind in self.subnets:
                    trace(
                        self.subnets[kind],
                        config,
                        {"AvailabilityZoneId": f"{zone}_availability_zone_id"},
                    )
        else:
            existing = config.existing_vpc
            assert existing is not None  # the schema's vpc-source rule guarantees one
            trace_values(self, existing, [
                "vpc_id", "private_subnet_id", "route_table_ids", "control_plane_subnet_ids",
                "database_subnet_ids",
            ])  # fmt: skip
            self.vpc_id: str = existing.vpc_id
            self.vpc_cidr: str = str(existing.cidr)
            self.private_subnet_id: str = existing.private_subnet_id
            if control_plane:
                self.control_plane_subnet_ids = list(existing.control_plane_subnet_ids)
            if accounting:
                self.database_subnet_ids = list(existing.database_subnet_ids)
            if existing.route_table_ids:
                self._s3_gateway_endpoint(existing.route_table_ids)

        if security_group is None:
            self.cluster_security_group_id: str = self._cluster_security_group().attr_group_id
        else:
            self.cluster_security_group_id = self._own_security_group(security_group)
        self.studio_fsx_security_group = self._studio_fsx_security_group()
        self.studio_fsx_security_group_id: str = self.studio_fsx_security_group.attr_group_id
        if config.interface_endpoints:
            self._interface_endpoints(
                endpoint_services(eks=eks, accounting=accounting, prometheus=prometheus)
            )

    # --- VPC -----------------------------------------------------------------------------------

    def _create_vpc(self, cfg: NewVpcConfig, control_plane_zone: str | None) -> None:
        vpc = ec2.CfnVPC(
            self,
            "Vpc",
            cidr_block=str(cfg.cidr),
            enable_dns_hostnames=True,
            enable_dns_support=True,
        )
        trace(vpc, cfg, {"CidrBlock": "cidr"})
        _name(vpc, "vpc")
        self.vpc_id = vpc.ref
        self.vpc_cidr = str(cfg.cidr)

        public = self._subnet("Public", str(cfg.public_subnet_cidr))
        trace(public, cfg, {"CidrBlock": "public_subnet_cidr"})
        igw = ec2.CfnInternetGateway(self, "InternetGateway")
        attach = ec2.CfnVPCGatewayAttachment(
            self, "InternetGatewayAttachment", vpc_id=vpc.ref, internet_gateway_id=igw.ref
        )
        public_rt = self._route_table("Public", public)
        route = ec2.CfnRoute(
            self,
            "PublicDefaultRoute",
            route_table_id=public_rt.ref,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.ref,
        )
        route.node.add_dependency(attach)

        eip = ec2.CfnEIP(self, "NatEip", domain="vpc")
        nat = ec2.CfnNatGateway(
            self, "NatGateway", subnet_id=public.ref, allocation_id=eip.attr_allocation_id
        )
        nat.node.add_dependency(attach)

        private = self._subnet("Private", str(cfg.private_subnet_cidr))
        trace(private, cfg, {"CidrBlock": "private_subnet_cidr"})
        self.private_subnet_id = private.ref
        route_tables = [self._private_route_table("Private", private, nat)]
        if control_plane_zone is not None and cfg.control_plane_subnet_cidr is not None:
            # EKS wants subnets in two zones; HyperPod nodes stay in the environment's zone, so
            # this small one carries only the control plane's ENIs (and the kubectl handler).
            cidr = str(cfg.control_plane_subnet_cidr)
            cp = self._subnet("ControlPlane", cidr, control_plane_zone)
            trace(cp, cfg, {"CidrBlock": "control_plane_subnet_cidr"})
            self.control_plane_subnet_ids = [cp.ref]
            route_tables.append(self._private_route_table("ControlPlane", cp, nat))
        self._s3_gateway_endpoint([rt.ref for rt in route_tables])
        if cfg.flow_logs:
            self._flow_logs(vpc)

    def _database_subnet(self, cidr: str, zone: str) -> None:
        """A DB subnet group spans two zones; the nodes stay in one, so this small subnet in the
        second zone is the database's alone. Its route table has no route out: Aurora answers
        the nodes and needs nothing outside the VPC."""
        subnet = self._subnet("Database", cidr, zone)
        self._route_table("Database", subnet)
        self.database_subnet_ids = [subnet.ref]

    def _subnet(self, kind: str, cidr: str, zone: str | None = None) -> ec2.CfnSubnet:
        zone = zone or self.availability_zone_id
        subnet = ec2.CfnSubnet(
            self,
            f"{kind}Subnet",
            vpc_id=self.vpc_id,
            cidr_block=cidr,
            availability_zone_id=zone,
            map_public_ip_on_launch=False,
        )
        _name(subnet, f"{kind.lower()}-{zone}")
        self.subnets[kind] = subnet
        return subnet

    def _private_route_table(
        self, kind: str, subnet: ec2.CfnSubnet, nat: ec2.CfnNatGateway
    ) -> ec2.CfnRouteTable:
        rt = self._route_table(kind, subnet)
        ec2.CfnRoute(
            self,
            f"{kind}DefaultRoute",
            route_table_id=rt.ref,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.ref,
        )
        return rt

    def _route_table(self, kind: str, subnet: ec2.CfnSubnet) -> ec2.CfnRouteTable:
        rt = ec2.CfnRouteTable(self, f"{kind}RouteTable", vpc_id=self.vpc_id)
        ec2.CfnSubnetRouteTableAssociation(
            self, f"{kind}RouteTableAssociation", route_table_id=rt.ref, subnet_id=subnet.ref
        )
        return rt

    def _s3_gateway_endpoint(self, route_table_ids: list[str]) -> None:
        ec2.CfnVPCEndpoint(
            self,
            "S3GatewayEndpoint",
            vpc_id=self.vpc_id,
            vpc_endpoint_type="Gateway",
            service_name=f"com.amazonaws.{Aws.REGION}.s3",
            route_table_ids=route_table_ids,
        )

    def _flow_logs(self, vpc: ec2.CfnVPC) -> None:
        group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self, "FlowLogsRole", assumed_by=iam.ServicePrincipal("vpc-flow-logs.amazonaws.com")
        )
        group.grant_write(role)
        ec2.CfnFlowLog(
            self,
            "FlowLog",
            resource_id=vpc.ref,
            resource_type="VPC",
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_group_name=group.log_group_name,
            deliver_logs_permission_arn=role.role_arn,
        )
        NagSuppressions.add_resource_suppressions(
            role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "Flow logs create log streams at run time; "
                    "the wildcard is limited to streams of this one log group (grant_write).",
                }
            ],
            apply_to_children=True,
        )

    # --- security groups -----------------------------------------------------------------------

    def _cluster_security_group(self) -> ec2.CfnSecurityGroup:
        sg = ec2.CfnSecurityGroup(
            self,
            "ClusterSecurityGroup",
            vpc_id=self.vpc_id,
            group_description="HyperPod nodes and FSx: all traffic to itself (EFA), Lustre",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="-1",
                    cidr_ip="0.0.0.0/0",
                    description="Nodes reach AWS APIs and package registries through the NAT",
                )
            ],
        )
        _name(sg, "cluster")
        # EFA: every SG on a HyperPod node needs all traffic in AND out to itself, or deep health
        # checks fail with "EFA health checks did not run successfully".
        ec2.CfnSecurityGroupIngress(
            self,
            "ClusterSelfIngress",
            group_id=sg.attr_group_id,
            ip_protocol="-1",
            source_security_group_id=sg.attr_group_id,
            description="EFA: all traffic from itself",
        )
        ec2.CfnSecurityGroupEgress(
            self,
            "ClusterSelfEgress",
            group_id=sg.attr_group_id,
            ip_protocol="-1",
            destination_security_group_id=sg.attr_group_id,
            description="EFA: all traffic to itself",
        )
        # Lustre, stated on its own so that it survives any change to the EFA rule.
        self._lustre_rules(sg, "Cluster")
        return sg

    def _own_security_group(self, sg: ec2.ISecurityGroup) -> str:
        """The app's group as the cluster's: the same rules as `_cluster_security_group`, added
        the CDK way (in the group's own stack when it is a construct of the app, here when it is
        imported). Egress to itself only when the group does not allow all outbound traffic."""
        rules = [(ec2.Port.all_traffic(), "EFA: all traffic")]
        for low, high in LUSTRE_PORTS:
            port = ec2.Port.tcp(low) if low == high else ec2.Port.tcp_range(low, high)
            rules.append((port, f"Lustre TCP {low if low == high else f'{low}-{high}'}"))
        for port, what in rules:
            sg.add_ingress_rule(sg, port, f"{what} from itself")
        if not sg.allow_all_outbound:
            sg.add_egress_rule(sg, ec2.Port.all_traffic(), "EFA: all traffic to itself")
        return sg.security_group_id

    def _studio_fsx_security_group(self) -> ec2.CfnSecurityGroup:
        # Attached to the FSx ENIs from the start, even before Studio is enabled: changing an FSx
        # file system's security groups later replaces it.
        sg = ec2.CfnSecurityGroup(
            self,
            "StudioFsxSecurityGroup",
            vpc_id=self.vpc_id,
            group_description="Studio apps and FSx for Lustre: Lustre traffic between them",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="-1",
                    cidr_ip="0.0.0.0/0",
                    description="Studio apps reach AWS APIs through the NAT or endpoints",
                )
            ],
        )
        _name(sg, "studio-fsx")
        self._lustre_rules(sg, "Studio")
        return sg

    def _lustre_rules(self, sg: ec2.CfnSecurityGroup, kind: str) -> None:
        lustre_ingress(
            self, f"{kind}LustreIngress", group_id=sg.attr_group_id,
            source_id=sg.attr_group_id, source="itself",
        )  # fmt: skip

    def _interface_endpoints(self, services: tuple[str, ...]) -> None:
        sg = ec2.CfnSecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc_id=self.vpc_id,
            group_description="Interface endpoints: HTTPS from the VPC",
            security_group_ingress=[
                ec2.CfnSecurityGroup.IngressProperty(
                    ip_protocol="tcp",
                    from_port=443,
                    to_port=443,
                    cidr_ip=self.vpc_cidr,
                    description="HTTPS from the VPC",
                )
            ],
        )
        trace(sg, self.config, {"SecurityGroupIngress/0/CidrIp": f"{self._vpc_key}.cidr"})
        _name(sg, "endpoints")
        for service in services:
            logical = "".join(p.capitalize() for p in service.replace("-", ".").split("."))
            ec2.CfnVPCEndpoint(
                self,
                f"{logical}Endpoint",
                vpc_id=self.vpc_id,
                vpc_endpoint_type="Interface",
                service_name=f"com.amazonaws.{Aws.REGION}.{service}",
                subnet_ids=[self.private_subnet_id],
                security_group_ids=[sg.attr_group_id],
                private_dns_enabled=True,
            )


def _name(resource: ec2.CfnVPC | ec2.CfnSubnet | ec2.CfnSecurityGroup, suffix: str) -> None:
    """A Name tag prefixed with the stack name, so resources read well in the console."""

    Tags.of(resource).add("Name", f"{Stack.of(resource).stack_name}-{suffix}")


def describe_network_statement() -> iam.PolicyStatement:
    """What a service that places network interfaces in the VPC must read first (HyperPod for its
    nodes, Studio for its apps): Describe* actions, which IAM grants on no narrower resource."""
    return iam.PolicyStatement(
        sid="DescribeNetwork",
        actions=[
            "ec2:DescribeNetworkInterfaces",
            "ec2:DescribeVpcs",
            "ec2:DescribeDhcpOptions",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
        ],
        resources=["*"],
    )
