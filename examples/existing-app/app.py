"""An app that already has a VPC and a bucket, with a HyperPod cluster, FSx for Lustre and Studio
added to it, and both of hyperpod-kit's gates on the result (docs/constructs.md)."""

import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3

from hyperpod_kit.cdk import ExistingResources, GateError, HyperPodEnvironment, create_app, gate


class Shared(cdk.Stack):
    """What the app had before: its VPC (flow logs on) and its bucket (TLS only, access logs)."""

    def __init__(self, scope: cdk.App, id: str, *, env: cdk.Environment) -> None:
        super().__init__(scope, id, env=env)
        flow_logs = {"all": ec2.FlowLogOptions()}
        self.vpc = ec2.Vpc(self, "Vpc", availability_zones=["us-west-2b"], flow_logs=flow_logs)
        logs = s3.Bucket(self, "Logs", enforce_ssl=True)
        self.bucket = s3.Bucket(
            self, "Data", enforce_ssl=True, server_access_logs_bucket=logs, versioned=True
        )


app = create_app()  # the toolkit's feature flags: the same templates as `hyperpod-kit synth`
shared = Shared(app, "shared", env=cdk.Environment(region="us-west-2"))
hyperpod = HyperPodEnvironment.from_file(
    app,
    Path(__file__).with_name("environment.yaml"),
    existing=ExistingResources(
        vpc=shared.vpc, subnet=shared.vpc.private_subnets[0], bucket=shared.bucket
    ),
)
try:
    # cdk-nag (an aspect on the whole app) and cfn-lint, as `hyperpod-kit synth` runs them
    gate(app.synth(), place=hyperpod.at)
except GateError as e:
    sys.exit(e.exit_code)  # the report is printed: nothing goes to AWS
