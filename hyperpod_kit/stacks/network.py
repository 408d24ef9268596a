"""The network stack: VPC, cluster subnet, security groups, endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from hyperpod_kit.config.derived import prometheus_enabled, slurm_accounting
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.network import ClusterNetwork, in_vpc
from hyperpod_kit.constructs.provenance import trace
from hyperpod_kit.stacks.discovery import publish


class ExistingNetwork(Protocol):
    """The app's network an environment is built on (`hyperpod_kit.app.ExistingResources`)."""

    @property
    def vpc(self) -> ec2.IVpc | None: ...

    @property
    def subnet(self) -> ec2.ISubnet | None: ...

    @property
    def control_plane_subnets(self) -> Sequence[ec2.ISubnet]: ...

    @property
    def database_subnets(self) -> Sequence[ec2.ISubnet]: ...

    @property
    def security_group(self) -> ec2.ISecurityGroup | None: ...

    def check(self, config: EnvironmentConfig) -> None: ...


class NetworkStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        existing: ExistingNetwork | None = None,
        **kwargs: Any,
    ) -> None:
        """``existing``: a VPC of the app (the construct library), in place of the one `config`
        creates or names, and the app's security group for the nodes (the other groups are
        created in the VPC all the same)."""
        super().__init__(scope, id, **kwargs)
        network = config.network
        if existing is not None and existing.vpc is not None and existing.subnet is not None:
            existing.check(config)
            network = in_vpc(
                network, existing.vpc, existing.subnet,
                control_plane_subnets=existing.control_plane_subnets,
                database_subnets=existing.database_subnets,
            )  # fmt: skip
        self.network = ClusterNetwork(
            self,
            "Network",
            config=network,
            availability_zone_id=config.availability_zone_id,
            eks=config.orchestrator == "eks",
            # an existing EKS cluster brings its own control-plane subnets
            eks_control_plane=config.cluster.eks.existing_cluster_name is None,
            accounting=slurm_accounting(config),
            prometheus=prometheus_enabled(config),
            security_group=existing.security_group if existing is not None else None,
        )
        for kind in ("Public", "Private"):
            if kind in self.network.subnets:  # the environment's zone: a key of the file's root
                trace(
                    self.network.subnets[kind],
                    config,
                    {"AvailabilityZoneId": "availability_zone_id"},
                )
        publish(
            self,
            environment=config.name,
            area="network",
            values={
                "vpc_id": self.network.vpc_id,
                "private_subnet_id": self.network.private_subnet_id,
                "availability_zone_id": self.network.availability_zone_id,
                "cluster_security_group_id": self.network.cluster_security_group_id,
                "studio_fsx_security_group_id": self.network.studio_fsx_security_group_id,
            },
        )
