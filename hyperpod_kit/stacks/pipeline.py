"""The CDK Pipelines stack (`hyperpod-kit pipeline codepipeline`): deployed once by hand with
`npx cdk deploy --app DIR`, then kept up to date by its own self-mutation step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from hyperpod_kit.constructs.delivery_pipeline import EnvironmentPipeline, PipelineSource


def pipeline_stack_name(pipeline_name: str) -> str:
    """The CloudFormation stack that holds the pipeline named `pipeline_name`."""
    return f"{pipeline_name}-pipeline"


class PipelineStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline_name: str,
        source: PipelineSource,
        install: Sequence[str],
        synth: Sequence[str],
        cli_version: str,
        cross_account_keys: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.pipeline = EnvironmentPipeline(
            self,
            "Pipeline",
            pipeline_name=pipeline_name,
            source=source,
            install=install,
            synth=synth,
            cli_version=cli_version,
            cross_account_keys=cross_account_keys,
        )
        CfnOutput(
            self,
            "PipelineName",
            value=pipeline_name,
            description="the CodePipeline that deploys the environments (console: CodePipeline)",
        )
        CfnOutput(
            self,
            "ArtifactBucketName",
            value=self.pipeline.artifact_bucket.bucket_name,
            description="the pipeline's artifact bucket (KMS, access-logged)",
        )
