"""`AccountingDatabase`: the MySQL-compatible database slurmdbd keeps Slurm's accounting in, for
HyperPod's `Orchestrator.Slurm.AccountingDatabase` (docs/accounting.md).

Aurora Serverless v2 (aurora-mysql): the smallest capacity is half an ACU, it grows for the odd
large `sacct`/`sreport` query, its storage keeps six copies in three zones with continuous
backups, and there is no instance size to choose. Built from L1 resources, as the network is: the
VPC is not a CDK `Vpc` here (subnets placed by zone ID, synth offline), and the L2 cluster wants
one.

The credentials are a Secrets Manager secret of our own (not RDS's managed master password, which
RDS rotates on its own schedule): JSON ``{"username", "password"}`` as HyperPod's API asks,
plus the host and port the target attachment adds. The password has letters and digits only:
slurmdbd.conf, where HyperPod writes it, ends a line's value at `#`. Rotation is off unless the
file asks: whether HyperPod's slurmdbd reads a rotated password is not verified.

Handles: ``endpoint``, ``port``, ``secret_arn``, ``database_name``, ``security_group_id``;
``grant_secret_read(role)``.
"""

from __future__ import annotations

import string

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from cdk_nag import NagSuppressions
from constructs import Construct

from hyperpod_kit.config.derived import accounting_engine_version
from hyperpod_kit.config.facts import accounting_facts
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.security import skip_checkov
from hyperpod_kit.naming import accounting_cluster_identifier

MASTER_USER = "slurm"
# What RDS keeps for an Aurora MySQL cluster (cdk-nag AwsSolutions-RDS16 wants all four); only
# error and slowquery have content unless the engine's parameters turn the others on.
LOG_EXPORTS = ("audit", "error", "general", "slowquery")
LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
SECRETS_TRANSFORM = "AWS::SecretsManager-2020-07-23"
_REMOVAL = {
    "retain": RemovalPolicy.RETAIN,
    "snapshot": RemovalPolicy.SNAPSHOT,
    "destroy": RemovalPolicy.DESTROY,
}


class AccountingDatabase(Construct):
    """The accounting database, its subnet group, security group, secret and log groups."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        vpc_id: str,
        subnet_ids: list[str],
        client_security_group_ids: list[str],
        rotation_subnet_id: str,
    ) -> None:
        """``subnet_ids``: the subnet group (the cluster's subnet and one in a second zone);
        ``client_security_group_ids``: the groups of the nodes that reach it (the controller
        runs slurmdbd); ``rotation_subnet_id``: where the rotation function runs (a subnet with a
        route to Secrets Manager), used only with rotation on."""
        super().__init__(scope, id)
        acc = config.cluster.slurm.accounting
        facts = accounting_facts()
        self.port: int = int(facts["port"])
        self.database_name: str = acc.database_name
        identifier = accounting_cluster_identifier(config.name)
        removal = _REMOVAL[acc.removal_policy]
        # A retained (or snapshotted) database keeps what it needs to be used or restored: its
        # credentials, its subnet group and security group (CloudFormation could not delete
        # them while the database uses them), its logs.
        keep = RemovalPolicy.DESTROY if acc.removal_policy == "destroy" else RemovalPolicy.RETAIN

        subnets = rds.CfnDBSubnetGroup(
            self,
            "SubnetGroup",
            db_subnet_group_description=f"hyperpod-kit {config.name}: Slurm accounting database",
            subnet_ids=subnet_ids,
        )
        subnets.apply_removal_policy(keep)

        self.security_group = ec2.CfnSecurityGroup(
            self,
            "SecurityGroup",
            vpc_id=vpc_id,
            group_description="Slurm accounting database: MySQL from the cluster nodes only",
            # No egress: the database starts no connection (CDK's way of saying none).
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="icmp",
                    from_port=252,
                    to_port=86,
                    cidr_ip="255.255.255.255/32",
                    description="Disallow all traffic",
                )
            ],
        )
        self.security_group.apply_removal_policy(keep)
        self.security_group_id: str = self.security_group.attr_group_id
        for i, client in enumerate(client_security_group_ids):
            self._allow(f"ClientIngress{i}", client, "slurmdbd on the cluster's controller")

        self.secret = secretsmanager.CfnSecret(
            self,
            "Secret",
            description=f"hyperpod-kit {config.name}: the Slurm accounting database's user "
            "(HyperPod's slurmdbd reads it)",
            generate_secret_string=secretsmanager.CfnSecret.GenerateSecretStringProperty(
                secret_string_template=Stack.of(self).to_json_string({"username": MASTER_USER}),
                generate_string_key="password",
                password_length=32,
                exclude_punctuation=True,
            ),
        )
        self.secret.apply_removal_policy(keep)
        self.secret_arn: str = self.secret.ref

        log_groups = [
            logs.LogGroup(
                self,
                f"{kind.capitalize()}Log",
                log_group_name=f"/aws/rds/cluster/{identifier}/{kind}",
                retention=LOG_RETENTION,
                removal_policy=keep,
            )
            for kind in LOG_EXPORTS
        ]

        resolve = f"{{{{resolve:secretsmanager:{self.secret.ref}:SecretString:"
        self.cluster = rds.CfnDBCluster(
            self,
            "Cluster",
            db_cluster_identifier=identifier,
            engine=str(facts["engine"]),
            engine_version=accounting_engine_version(config),
            master_username=f"{resolve}username}}}}",
            master_user_password=f"{resolve}password}}}}",
            port=self.port,
            db_subnet_group_name=subnets.ref,
            vpc_security_group_ids=[self.security_group_id],
            serverless_v2_scaling_configuration=rds.CfnDBCluster.ServerlessV2ScalingConfigurationProperty(
                min_capacity=acc.min_capacity, max_capacity=acc.max_capacity
            ),
            storage_encrypted=True,
            deletion_protection=acc.removal_policy == "retain",
            backup_retention_period=acc.backup_retention_days,
            copy_tags_to_snapshot=True,
            enable_cloudwatch_logs_exports=list(LOG_EXPORTS),
        )
        self.cluster.apply_removal_policy(removal)
        Validations.of(self.cluster).acknowledge(
            Acknowledgment(
                id="CloudFormation-Validate::E9006",
                reason="the engine version is one cfn-lint 1.58 (the gate) takes; aws-cdk-lib "
                "2.275's built-in validator carries an older list of Aurora versions",
            )
        )
        for group in log_groups:  # RDS would create them itself, without retention
            self.cluster.node.add_dependency(group)
        self._writer = writer = rds.CfnDBInstance(
            self,
            "Writer",
            db_cluster_identifier=self.cluster.ref,
            db_instance_class="db.serverless",
            engine=str(facts["engine"]),
            publicly_accessible=False,
            # The version is pinned (the lock): minor upgrades come with a new version in the
            # file, not in a maintenance window.
            auto_minor_version_upgrade=False,
        )
        # With the cluster retained, so is its writer; a cluster snapshotted or destroyed is
        # deleted after its writer (an instance left behind would block the cluster's deletion).
        writer.apply_removal_policy(
            RemovalPolicy.RETAIN if acc.removal_policy == "retain" else RemovalPolicy.DESTROY
        )
        self.endpoint: str = self.cluster.attr_endpoint_address
        # host, port, engine and cluster id join the secret (rotation functions read them).
        attachment = secretsmanager.CfnSecretTargetAttachment(
            self,
            "SecretAttachment",
            secret_id=self.secret.ref,
            target_id=self.cluster.ref,
            target_type="AWS::RDS::DBCluster",
        )
        attachment.node.add_dependency(writer)
        if acc.rotation:
            self._rotation(vpc_id, rotation_subnet_id, acc.rotation_days, after=attachment)
        self._nag(rotation=acc.rotation)

    def _allow(self, id: str, source: str, why: str) -> None:
        ec2.CfnSecurityGroupIngress(
            self,
            id,
            group_id=self.security_group_id,
            ip_protocol="tcp",
            from_port=self.port,
            to_port=self.port,
            source_security_group_id=source,
            description=f"MySQL from {why}",
        )

    def _rotation(self, vpc_id: str, subnet_id: str, days: int, *, after: Construct) -> None:
        """Secrets Manager's hosted single-user MySQL rotation, in the cluster's subnet (a route
        to Secrets Manager: NAT or its endpoint), allowed to the database."""
        group = ec2.CfnSecurityGroup(
            self,
            "RotationSecurityGroup",
            vpc_id=vpc_id,
            group_description="Slurm accounting secret rotation: to the database and Secrets "
            "Manager",
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="tcp",
                    from_port=443,
                    to_port=443,
                    cidr_ip="0.0.0.0/0",
                    description="Secrets Manager (NAT or its endpoint)",
                ),
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="tcp",
                    from_port=self.port,
                    to_port=self.port,
                    destination_security_group_id=self.security_group_id,
                    description="MySQL to the accounting database",
                ),
            ],
        )
        self._allow("RotationIngress", group.attr_group_id, "the secret's rotation function")
        Stack.of(self).add_transform(SECRETS_TRANSFORM)
        schedule = secretsmanager.CfnRotationSchedule(
            self,
            "Rotation",
            secret_id=self.secret.ref,
            hosted_rotation_lambda=secretsmanager.CfnRotationSchedule.HostedRotationLambdaProperty(
                rotation_type="MySQLSingleUser",
                vpc_subnet_ids=subnet_id,
                vpc_security_group_ids=group.attr_group_id,
                exclude_characters=string.punctuation,
            ),
            rotation_rules=secretsmanager.CfnRotationSchedule.RotationRulesProperty(
                automatically_after_days=days
            ),
        )
        schedule.node.add_dependency(after)

    def grant_secret_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the secret: HyperPod configures slurmdbd on the controller from it (the node's
        role, as far as the guide lets one tell; docs/accounting.md)."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            resource_arns=[self.secret_arn],
        )

    def _nag(self, *, rotation: bool) -> None:
        reasons = [
            {
                "id": "AwsSolutions-RDS6",
                "reason": "slurmdbd logs in with a user name and password (slurmdbd.conf "
                "StorageUser/StoragePass, which HyperPod writes from the secret); it has no IAM "
                "database authentication",
            },
            {
                "id": "AwsSolutions-RDS11",
                "reason": "the port is handed to HyperPod explicitly (AccountingDatabase.Port); "
                "only the cluster's security groups reach it",
            },
            {
                "id": "AwsSolutions-RDS14",
                "reason": "recovery is point-in-time restore from the automated backups "
                "(backup_retention_days); Aurora Serverless v2 takes no backtrack window here",
            },
        ]
        NagSuppressions.add_resource_suppressions(self.cluster, reasons)
        skip_checkov(
            self.cluster,
            "CKV_AWS_162",
            "slurmdbd logs in with a user name and password (slurmdbd.conf StorageUser/"
            "StoragePass, which HyperPod writes from the secret); it has no IAM database "
            "authentication to use",
        )
        skip_checkov(
            self.secret,
            "CKV_AWS_149",
            "HyperPod reads this secret for slurmdbd with a role whose KMS grants it does not "
            "document: a customer key in its way could break accounting, so the secret keeps "
            "Secrets Manager's AWS managed key",
        )
        skip_checkov(
            self._writer,
            "CKV_AWS_118",
            "Enhanced Monitoring writes to RDSOSMetrics, an account-wide log group RDS creates "
            "itself, kept forever and outside the environment's key, where every log group here "
            "is in a template; the writer's CloudWatch metrics and the four log exports watch it",
        )
        if not rotation:
            NagSuppressions.add_resource_suppressions(
                self.secret,
                [
                    {
                        "id": "AwsSolutions-SMG4",
                        "reason": "rotation is off by default: whether HyperPod's slurmdbd "
                        "reads a rotated password is not verified (cluster.slurm.accounting"
                        ".rotation turns it on)",
                    }
                ],
            )
