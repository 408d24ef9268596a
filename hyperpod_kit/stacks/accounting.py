"""The accounting stack: the Slurm accounting database beside the cluster and its secret (after
network, beside storage, before the cluster, which hands it to HyperPod)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.accounting import AccountingDatabase
from hyperpod_kit.constructs.network import ClusterNetwork
from hyperpod_kit.stacks.discovery import publish


class AccountingStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: ClusterNetwork,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        # slurmdbd runs on the controller: its group's own security groups (an override in an
        # existing VPC) reach the database as well as the cluster's.
        clients = [network.cluster_security_group_id]
        for g in config.cluster.instance_groups:
            if g.role == "controller" and g.network is not None and g.network.subnet_ids:
                clients += [sg for sg in g.network.security_group_ids or [] if sg not in clients]
        self.database = AccountingDatabase(
            self,
            "Database",
            config=config,
            vpc_id=network.vpc_id,
            subnet_ids=[network.private_subnet_id, *network.database_subnet_ids],
            client_security_group_ids=clients,
            rotation_subnet_id=network.private_subnet_id,
        )
        publish(
            self,
            environment=config.name,
            area="accounting",
            values={
                "endpoint": self.database.endpoint,
                "port": str(self.database.port),
                "database_name": self.database.database_name,
                "secret_arn": self.database.secret_arn,
            },
        )
