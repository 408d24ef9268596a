"""Slurm accounting through the stacks (docs/accounting.md): the database's subnet in a second
zone, the Aurora Serverless v2 cluster and its secret (retained like other data), HyperPod's
`AccountingDatabase` and the nodes' grant on the secret; the teams in the users file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.lifecycle import build_bundle
from tests.conftest import SynthFn, default_data, merge

pytestmark = pytest.mark.synth

ACCOUNTING: dict[str, Any] = {
    "network": {
        "database_availability_zone_id": "usw2-az1",
        "vpc": {"database_subnet_cidr": "10.0.1.0/28"},
    },
    "cluster": {"node_provisioning": "continuous", "slurm": {"accounting": {"enabled": True}}},
}
TEAMS: dict[str, Any] = {
    "users": [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002}],
    "teams": [
        {"name": "pretraining", "members": ["alice"], "fairshare": 3, "gpu_limit": 16},
        {"name": "research", "members": ["bob"]},
    ],
}


def _one(template: Any, kind: str) -> dict[str, Any]:
    (found,) = template.find_resources(kind).values()
    resource: dict[str, Any] = found
    return resource


def test_no_accounting_no_stack_and_no_database_subnet(synth: SynthFn) -> None:
    built = synth()
    assert "accounting" not in built.templates
    assert len(built.templates["network"].find_resources("AWS::EC2::Subnet")) == 2
    orchestrator = _one(built.templates["cluster"], "AWS::SageMaker::Cluster")["Properties"]
    assert "AccountingDatabase" not in orchestrator["Orchestrator"]["Slurm"]


def test_database_subnet_in_the_second_zone_without_a_route_out(synth: SynthFn) -> None:
    net = synth(ACCOUNTING).templates["network"]
    subnets = net.find_resources("AWS::EC2::Subnet")
    zones = {s["Properties"]["CidrBlock"]: s["Properties"]["AvailabilityZoneId"]
             for s in subnets.values()}  # fmt: skip
    assert zones == {"10.0.0.0/24": "usw2-az2", "10.0.128.0/17": "usw2-az2",
                     "10.0.1.0/28": "usw2-az1"}  # fmt: skip
    database = next(k for k, s in subnets.items() if s["Properties"]["CidrBlock"] == "10.0.1.0/28")
    table = next(
        a["Properties"]["RouteTableId"]["Ref"]
        for a in net.find_resources("AWS::EC2::SubnetRouteTableAssociation").values()
        if a["Properties"]["SubnetId"] == {"Ref": database}
    )
    routes = net.find_resources("AWS::EC2::Route")
    assert not [r for r in routes.values() if r["Properties"]["RouteTableId"] == {"Ref": table}]


def test_secrets_manager_endpoint_joins_the_interface_endpoints(synth: SynthFn) -> None:
    with_db = synth(merge(ACCOUNTING, {"network": {"interface_endpoints": True}}))
    without = synth({"network": {"interface_endpoints": True}})

    def services(template: Any) -> set[str]:
        return {
            json.dumps(e["Properties"]["ServiceName"]).split(".")[-1].rstrip('"]}')
            for e in template.find_resources("AWS::EC2::VPCEndpoint").values()
            if e["Properties"]["VpcEndpointType"] == "Interface"
        }

    assert services(with_db.templates["network"]) - services(without.templates["network"]) == {
        "secretsmanager"
    }


def test_aurora_serverless_v2_encrypted_retained_and_closed(synth: SynthFn) -> None:
    acc = synth(ACCOUNTING).templates["accounting"]
    cluster = _one(acc, "AWS::RDS::DBCluster")
    props = cluster["Properties"]
    assert cluster["DeletionPolicy"] == "Retain" and cluster["UpdateReplacePolicy"] == "Retain"
    assert props["Engine"] == "aurora-mysql"
    assert props["EngineVersion"] == "8.0.mysql_aurora.3.10.6"
    assert props["ServerlessV2ScalingConfiguration"] == {"MinCapacity": 0.5, "MaxCapacity": 2}
    assert props["StorageEncrypted"] is True and props["DeletionProtection"] is True
    assert props["BackupRetentionPeriod"] == 7 and props["Port"] == 3306
    assert props["DBClusterIdentifier"] == "hyperpod-dev-slurm-accounting"
    assert sorted(props["EnableCloudwatchLogsExports"]) == [
        "audit",
        "error",
        "general",
        "slowquery",
    ]
    assert "{{resolve:secretsmanager:" in json.dumps(props["MasterUserPassword"])
    writer = _one(acc, "AWS::RDS::DBInstance")
    assert writer["Properties"]["DBInstanceClass"] == "db.serverless"
    assert writer["Properties"]["PubliclyAccessible"] is False
    assert writer["Properties"]["AutoMinorVersionUpgrade"] is False
    for kind in (
        "AWS::SecretsManager::Secret",
        "AWS::RDS::DBSubnetGroup",
        "AWS::EC2::SecurityGroup",
    ):
        assert _one(acc, kind)["DeletionPolicy"] == "Retain", kind
    subnets = _one(acc, "AWS::RDS::DBSubnetGroup")["Properties"]["SubnetIds"]
    assert len(subnets) == 2
    for group in acc.find_resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["LogGroupName"].startswith(
            "/aws/rds/cluster/hyperpod-dev-slurm-accounting/"
        )
        assert group["Properties"]["RetentionInDays"] == 90


def test_mysql_only_from_the_cluster_security_group(synth: SynthFn) -> None:
    acc = synth(ACCOUNTING).templates["accounting"]
    sg = _one(acc, "AWS::EC2::SecurityGroup")["Properties"]
    assert sg["SecurityGroupEgress"] == [
        {"CidrIp": "255.255.255.255/32", "Description": "Disallow all traffic", "FromPort": 252,
         "IpProtocol": "icmp", "ToPort": 86}
    ]  # fmt: skip
    (rule,) = acc.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert (rule["Properties"]["FromPort"], rule["Properties"]["ToPort"]) == (3306, 3306)
    assert "ClusterSecurityGroup" in json.dumps(rule["Properties"]["SourceSecurityGroupId"])


def test_the_secret_is_a_generated_login_without_punctuation(synth: SynthFn) -> None:
    acc = synth(ACCOUNTING).templates["accounting"]
    generate = _one(acc, "AWS::SecretsManager::Secret")["Properties"]["GenerateSecretString"]
    assert json.loads(generate["SecretStringTemplate"]) == {"username": "slurm"}
    assert generate["GenerateStringKey"] == "password" and generate["ExcludePunctuation"] is True
    acc.resource_count_is("AWS::SecretsManager::SecretTargetAttachment", 1)
    acc.resource_count_is("AWS::SecretsManager::RotationSchedule", 0)


def test_cluster_hands_the_database_to_hyperpod_and_the_nodes_read_the_secret(
    synth: SynthFn,
) -> None:
    cluster = synth(ACCOUNTING).templates["cluster"]
    props = _one(cluster, "AWS::SageMaker::Cluster")["Properties"]
    assert props["NodeProvisioningMode"] == "Continuous"
    database = props["Orchestrator"]["Slurm"]["AccountingDatabase"]
    assert database["Name"] == "slurm_acct_db" and database["Port"] == 3306
    assert "Endpoint" in json.dumps(database["Endpoint"])
    assert "Secret" in json.dumps(database["SecretArn"])
    assert "SlurmConfigStrategy" not in props["Orchestrator"]["Slurm"]
    cluster.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": [
                                    "secretsmanager:DescribeSecret",
                                    "secretsmanager:GetSecretValue",
                                ],
                                "Resource": {"Fn::ImportValue": Match.string_like_regexp("Secret")},
                            }
                        )
                    ]
                )
            }
        },
    )


@pytest.mark.parametrize(
    ("policy", "cluster_policy", "writer_policy", "protected"),
    [("snapshot", "Snapshot", "Delete", False), ("destroy", "Delete", "Delete", False)],
)
def test_removal_policy(
    synth: SynthFn, policy: str, cluster_policy: str, writer_policy: str, protected: bool
) -> None:
    acc = synth(
        merge(ACCOUNTING, {"cluster": {"slurm": {"accounting": {"removal_policy": policy}}}})
    ).templates["accounting"]
    cluster = _one(acc, "AWS::RDS::DBCluster")
    assert cluster["DeletionPolicy"] == cluster_policy
    assert cluster["Properties"]["DeletionProtection"] is protected
    assert _one(acc, "AWS::RDS::DBInstance")["DeletionPolicy"] == writer_policy
    secret = _one(acc, "AWS::SecretsManager::Secret")["DeletionPolicy"]
    assert secret == ("Delete" if policy == "destroy" else "Retain")


def test_rotation_runs_in_the_cluster_subnet_allowed_to_the_database(synth: SynthFn) -> None:
    acc = (
        synth(merge(ACCOUNTING, {"cluster": {"slurm": {"accounting": {"rotation": True}}}}))
        .templates["accounting"]
        .to_json()
    )
    assert acc["Transform"] == "AWS::SecretsManager-2020-07-23"
    (schedule,) = [r for r in acc["Resources"].values()
                   if r["Type"] == "AWS::SecretsManager::RotationSchedule"]  # fmt: skip
    hosted = schedule["Properties"]["HostedRotationLambda"]
    assert hosted["RotationType"] == "MySQLSingleUser"
    assert schedule["Properties"]["RotationRules"] == {"AutomaticallyAfterDays": 30}
    ingress = [r for r in acc["Resources"].values()
               if r["Type"] == "AWS::EC2::SecurityGroupIngress"]  # fmt: skip
    assert len(ingress) == 2  # the cluster's nodes and the rotation function


def test_teams_travel_in_the_users_file_not_in_the_upload() -> None:
    """A team added later reaches the controller through the users file (and its sync); the
    upload holds the accounts script in every Slurm environment, teams or not."""
    plain = EnvironmentConfig.model_validate(default_data())
    with_teams = EnvironmentConfig.model_validate(merge(default_data(), TEAMS))
    a, b = build_bundle(plain), build_bundle(with_teams)
    assert "bin/hyperpod-kit-slurm-accounts" in a.files
    assert (
        a.content_hash
        == build_bundle(
            EnvironmentConfig.model_validate(merge(default_data(), {"users": TEAMS["users"]}))
        ).content_hash
    )
    assert b.users is not None
    document = json.loads(b.users)
    assert document["teams"] == [
        {"name": "pretraining", "members": ["alice"], "fairshare": 3, "gpu_limit": 16},
        {"name": "research", "members": ["bob"], "fairshare": 1, "gpu_limit": None},
    ]
    assert a.users is None or "teams" not in json.loads(a.users)
    eks = EnvironmentConfig.model_validate(
        merge(default_data(), {"orchestrator": "eks", "cluster": {"instance_groups": [
            {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
             "instance_count": 1}]}})
    )  # fmt: skip
    assert "bin/hyperpod-kit-slurm-accounts" not in build_bundle(eks).files
