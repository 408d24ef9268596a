"""Build a CDK app from an environment file: stacks in deploy order, with the synth gates attached.

`app.py` at the repository root calls `main()`; the CLI and the tests call `build_environment()` on
an app they made with `create_app()`, so every path synthesizes the same templates.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from hyperpod_kit.config import ConfigError, EnvironmentConfig, Finding, Level
from hyperpod_kit.config.derived import (
    environment_areas,
    observability_stack,
    prometheus_enabled,
    slurm_accounting,
    task_governance,
)
from hyperpod_kit.config.environment import LoadedEnvironment, load_environment
from hyperpod_kit.config.keys import annotate
from hyperpod_kit.constructs.lustre import on_file_system
from hyperpod_kit.constructs.provenance import building, trace
from hyperpod_kit.constructs.security import EncryptLogGroups
from hyperpod_kit.naming import ENVIRONMENT_TAG, stack_name
from hyperpod_kit.outputs import ASSEMBLY, write_marker
from hyperpod_kit.stacks.cluster import ClusterStack
from hyperpod_kit.stacks.monitoring import MonitoringStack
from hyperpod_kit.stacks.network import NetworkStack
from hyperpod_kit.stacks.storage import StorageStack
from hyperpod_kit.stacks.trainer import TrainerStack

if TYPE_CHECKING:
    # Imported where an environment uses them: loading their aws-cdk-lib modules through jsii
    # costs about half a second that a Slurm environment without Studio need not pay.
    from hyperpod_kit.constructs.delivery_pipeline import PipelineSource
    from hyperpod_kit.constructs.observability import PrometheusHandles
    from hyperpod_kit.stacks.accounting import AccountingStack
    from hyperpod_kit.stacks.eks import EksStack
    from hyperpod_kit.stacks.eks_addons import EksAddonsStack
    from hyperpod_kit.stacks.observability import ObservabilityStack
    from hyperpod_kit.stacks.pipeline import PipelineStack
    from hyperpod_kit.stacks.studio import StudioStack

DEFAULT_ENVIRONMENT = "environments/default.yaml"
# Types CDK would tag but CloudFormation's schema gives no Tags property (cfn-lint E3002).
UNTAGGABLE = ["AWS::CloudWatch::Dashboard"]

# Feature flags are fixed here, not in cdk.json, so that `npx cdk synth`, `hyperpod-kit synth` and
# the tests (which build apps in-process) produce identical templates.
FEATURE_FLAGS: dict[str, object] = {
    "@aws-cdk/aws-iam:minimizePolicies": True,
    "@aws-cdk/core:validateSnapshotRemovalPolicy": True,
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/aws-s3:createDefaultLoggingPolicy": True,
    "@aws-cdk/aws-iam:standardizedServicePrincipals": True,
    "@aws-cdk/core:enablePartitionLiterals": True,
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
}


@dataclass(frozen=True)
class EnvironmentStacks:
    """The stacks of one environment, in deploy order."""

    network: NetworkStack
    storage: StorageStack
    trainer: TrainerStack | None
    cluster: ClusterStack
    accounting: AccountingStack | None = None
    eks: EksStack | None = None
    eks_addons: EksAddonsStack | None = None
    studio: StudioStack | None = None
    monitoring: MonitoringStack | None = None
    observability: ObservabilityStack | None = None

    def all(self) -> list[cdk.Stack]:
        stacks = [
            self.network, self.storage, self.observability, self.accounting, self.eks,
            self.trainer, self.cluster,
            self.eks_addons, self.studio, self.monitoring,
        ]  # fmt: skip
        return [s for s in stacks if s is not None]


@dataclass(frozen=True)
class ExistingResources:
    """Resources of the app an environment is built into (the construct library,
    `hyperpod_kit.cdk`), used in place of those the environment would create or name: a VPC with
    the cluster's subnet (in the environment's `availability_zone_id`: it is not looked up), the
    data bucket the file system links to, the nodes' security group, and the file system. None:
    as the environment's settings say."""

    vpc: ec2.IVpc | None = None
    subnet: ec2.ISubnet | None = None
    bucket: s3.IBucket | None = None
    # EKS (a new EKS cluster): subnets of the VPC in other zones for its control plane; Slurm
    # accounting: the database's subnets in other zones.
    control_plane_subnets: Sequence[ec2.ISubnet] = ()
    database_subnets: Sequence[ec2.ISubnet] = ()
    # In the VPC: the nodes' and the file system's group (EFA's and Lustre's rules are added to
    # it), and an FSx for Lustre file system the nodes and Studio mount (no associations made).
    security_group: ec2.ISecurityGroup | None = None
    file_system: fsx.LustreFileSystem | None = None

    def __post_init__(self) -> None:
        if (self.vpc is None) != (self.subnet is None):
            raise ValueError("give both a VPC and its cluster subnet, or neither")
        in_vpc = {
            "control-plane and database subnets": self.control_plane_subnets
            or self.database_subnets,
            "a security group": self.security_group,
            "a file system": self.file_system,
        }
        for what, given in in_vpc.items():
            if self.vpc is None and given:
                raise ValueError(f"{what} come with a VPC and its subnet (they are in it)")

    def check(self, config: EnvironmentConfig) -> None:
        """ValueError when `config` needs subnets of the app's VPC that are not given."""
        if self.vpc is None:
            return
        if (
            config.orchestrator == "eks"
            and config.cluster.eks.existing_cluster_name is None
            and not self.control_plane_subnets
        ):
            raise ValueError(
                "a new EKS cluster in the app's VPC needs control_plane_subnets (subnets of the "
                "VPC in another zone than the cluster subnet's)"
            )
        if slurm_accounting(config) and not self.database_subnets:
            raise ValueError(
                "Slurm accounting in the app's VPC needs database_subnets (subnets of the VPC "
                "in another zone than the cluster subnet's)"
            )

    def applied(self, config: EnvironmentConfig) -> EnvironmentConfig:
        """`config` as the stacks build it: with the app's file system as its existing one (so
        Studio, monitoring and the cluster treat it as such)."""
        if self.file_system is None:
            return config
        lustre = on_file_system(config.storage.lustre, self.file_system)
        storage = config.storage.model_copy(update={"lustre": lustre})
        return config.model_copy(update={"storage": storage})


NOTHING_EXISTING = ExistingResources()


@contextmanager
def built(loaded: LoadedEnvironment) -> Iterator[None]:
    """A value that CDK refused while the stacks were built from `loaded` is the file's: a
    `ConfigError` at the key's line (`constructs/provenance.building`), not a traceback."""
    from hyperpod_kit.constructs.provenance import BuildError

    try:
        yield
    except BuildError as e:
        finding = Finding(
            Level.ERROR,
            e.key,
            f"CDK refused it: {e.message}",
            "change the value; `hyperpod-kit validate` checks what it can before a synth",
            check="cdk",
        )
        raise ConfigError(loaded.file, [loaded.place(finding)]) from None


def create_app(*, outdir: str | None = None) -> cdk.App:
    """An app with the project's feature flags; `outdir` None lets the CDK CLI choose."""
    return cdk.App(outdir=outdir, context=dict(FEATURE_FLAGS))


def build_environment(
    scope: cdk.Stage, config: EnvironmentConfig, *, existing: ExistingResources = NOTHING_EXISTING
) -> EnvironmentStacks:
    """Add one environment's stacks to `scope` and the cdk-nag gate over all of them. `scope` is the
    App, or a `Stage` of a CDK pipeline (`build_pipeline`): the same stacks either way, with the
    same names and templates; cdk-nag is added to the scope given, as aspects of an App do not
    reach into its stages. `existing`: resources of the app to use instead of creating them."""
    config = existing.applied(config)
    annotate(config)  # every section knows its key: the constructs' provenance (provenance.py)
    prefix = config.name

    def stack_args(area: str, what: str) -> dict[str, Any]:
        return {
            "stack_name": stack_name(prefix, area),
            "env": cdk.Environment(account=config.account, region=config.region),
            "description": f"hyperpod-kit {prefix}: {what}",
        }

    # A value CDK refuses while a stack is built is reported at its key (provenance.building).
    with building(config.network):
        network = NetworkStack(
            scope,
            f"{prefix}-network",
            config=config,
            existing=existing,
            **stack_args("network", "VPC, subnet, security groups"),
        )
    with building(config.storage):
        storage = StorageStack(
            scope,
            f"{prefix}-storage",
            config=config,
            network=network.network,
            bucket=existing.bucket,
            file_system=existing.file_system,
            **stack_args("storage", "S3 data bucket and FSx for Lustre"),
        )
    accounting = None
    if slurm_accounting(config):
        from hyperpod_kit.stacks.accounting import AccountingStack

        # Beside storage: the database the cluster hands to HyperPod for slurmdbd.
        with building(config.cluster.slurm.accounting):
            accounting = AccountingStack(
                scope, f"{prefix}-accounting", config=config, network=network.network,
                **stack_args("accounting", "the Slurm accounting database and its secret"),
            )  # fmt: skip
    # Beside storage, before the cluster: the nodes remote-write from their first boot.
    with building(config.monitoring):
        observability, prometheus = _observability(
            scope, config, stack_args("observability", "Prometheus workspace and Grafana")
        )
    trainer = None
    if config.trainer.build_image:
        # Independent of the others: deploys in parallel with network and storage.
        with building(config.trainer):
            trainer = TrainerStack(
                scope, f"{prefix}-trainer", config=config,
                **stack_args("trainer", "the bundled trainer image in ECR"),
            )  # fmt: skip
    eks = None
    if config.orchestrator == "eks":
        from hyperpod_kit.stacks.eks import EksStack

        # In parallel with storage: what HyperPod needs before its cluster exists.
        with building(config.cluster.eks):
            eks = EksStack(
                scope, f"{prefix}-eks", config=config, network=network.network,
                **stack_args("eks", "the EKS cluster, its core add-ons and HyperPod's Helm chart"),
            )  # fmt: skip
    with building(config.cluster):
        cluster = ClusterStack(
            scope, f"{prefix}-cluster", config=config, network=network.network,
            lustre=storage.lustre, data_bucket=storage.data.bucket,
            trainer_image=trainer.image if trainer else None,
            eks=eks.eks if eks else None,
            accounting=accounting.database if accounting else None, prometheus=prometheus,
            **stack_args("cluster", "the SageMaker HyperPod cluster and its lifecycle scripts"),
        )  # fmt: skip
    if observability is not None:
        # The nodes read the workspace's address from its handles while they provision.
        cluster.add_stack_dependency(observability, "the nodes read the workspace's handles")
    if cluster.lifecycle.reads_storage_handles:
        # The nodes' hooks read the storage stack's handles parameter on first provisioning (on
        # EKS nothing else of storage reaches the cluster's template, so say it; the rehearsal
        # found the read failing with ParameterNotFound on a first deploy of studio-eks).
        cluster.add_stack_dependency(storage, "the nodes read the storage stack's handles")
    eks_addons = None
    if eks is not None:
        from hyperpod_kit.stacks.eks_addons import EksAddonsStack

        # After the HyperPod cluster: these run on its nodes.
        with building(config.cluster.eks):
            eks_addons = EksAddonsStack(
                scope, f"{prefix}-eks-addons", config=config, eks=eks.eks, lustre=storage.lustre,
                cluster_arn=cluster.cluster.cluster_arn, after=[cluster], prometheus=prometheus,
                grafana=observability.grafana_handles if observability else None,
                **stack_args("eks-addons", "training operator, cert-manager, the FSx volume claim"
                             + (", task governance" if task_governance(config) else "")),
            )  # fmt: skip
    studio = None
    if config.studio.enabled:
        from hyperpod_kit.constructs.studio import StudioEks
        from hyperpod_kit.stacks.studio import StudioStack

        # After the cluster: partitions exist once its nodes report them.
        with building(config.studio):
            studio = StudioStack(
                scope, f"{prefix}-studio", config=config, network=network.network,
                file_system=storage.lustre, cluster=cluster.cluster,
                data_bucket=storage.data.bucket,
                eks=StudioEks(
                    cluster_name=eks.eks.cluster_name, cluster_arn=eks.eks.cluster_arn,
                    security_group_id=eks.eks.control_plane_security_group_id,
                ) if eks else None,
                **stack_args("studio", "SageMaker Studio domain, profiles and FSx partitions"),
            )  # fmt: skip
    monitoring = None
    if config.monitoring.enabled:
        # After the cluster, beside Studio: events, alarms, dashboard, remediation.
        with building(config.monitoring):
            monitoring = MonitoringStack(
                scope, f"{prefix}-monitoring", config=config, cluster=cluster.cluster,
                file_system_id=storage.lustre.file_system_id,
                **stack_args("monitoring", "HyperPod events, alarms, dashboard and auto-repair"),
            )  # fmt: skip
    stacks = EnvironmentStacks(
        network=network, storage=storage, trainer=trainer, cluster=cluster, accounting=accounting,
        eks=eks, observability=observability,
        eks_addons=eks_addons, studio=studio, monitoring=monitoring,
    )  # fmt: skip
    _tag(stacks, config)
    _same_areas(stacks, config)
    cdk.Aspects.of(scope).add(AwsSolutionsChecks(verbose=True))
    return stacks


def _same_areas(stacks: EnvironmentStacks, config: EnvironmentConfig) -> None:
    """`status` knows the stacks from the file alone: keep the two one list."""
    built = [s.stack_name for s in stacks.all()]
    implied = [stack_name(config.name, area) for area in environment_areas(config)]
    if built != implied:
        raise RuntimeError(f"stacks {built} differ from environment_areas' {implied}")


def _tag(stacks: EnvironmentStacks, config: EnvironmentConfig) -> None:
    """The environment's tags on every resource, and its key on every log group."""
    for stack in stacks.all():
        for key, value in {ENVIRONMENT_TAG: config.name, **config.tags}.items():
            cdk.Tags.of(stack).add(key, value, exclude_resource_types=UNTAGGABLE)
        trace(stack, config, {"Tags": "tags"})  # a finding on a resource's tags: the file's
        if config.kms_key_arn is not None:  # docs/security.md
            cdk.Aspects.of(stack).add(
                EncryptLogGroups(config.kms_key_arn, written=config),
                priority=cdk.AspectPriority.MUTATING,
            )


def _observability(
    scope: cdk.Stage, config: EnvironmentConfig, stack_args: dict[str, Any]
) -> tuple[ObservabilityStack | None, PrometheusHandles | None]:
    """The observability stack (a workspace or Grafana to create) and the Prometheus workspace
    the nodes or HyperPod's add-on write to (created there, or an existing one by ARN)."""
    if observability_stack(config):
        from hyperpod_kit.stacks.observability import ObservabilityStack

        stack = ObservabilityStack(scope, stack_args["stack_name"], config=config, **stack_args)
        return stack, stack.prometheus.handles
    if prometheus_enabled(config):
        from hyperpod_kit.constructs.observability import existing_workspace

        arn = config.monitoring.prometheus.workspace_arn
        assert arn is not None  # no stack without a workspace to create
        return None, existing_workspace(arn)
    return None, None


@dataclass(frozen=True)
class StagedEnvironment:
    """An environment the pipeline deploys: its name (the CodePipeline stage and the CDK
    `Stage`), its file as the repository names it, and its validated configuration, which must
    name an account (a stage deploys to an explicit account)."""

    name: str
    file: str
    config: EnvironmentConfig


def build_pipeline(
    app: cdk.App,
    *,
    pipeline_name: str,
    account: str,
    region: str,
    source: PipelineSource,
    install: Sequence[str],
    synth: Sequence[str],
    cli_version: str,
    environments: Sequence[StagedEnvironment],
) -> PipelineStack:
    """Add the CDK pipeline (in `account` and `region`) and one `Stage` per environment, in
    order, each built by `build_environment` exactly as `hyperpod-kit synth` builds it; cdk-nag
    over the pipeline stack (each stage has its own). The pipeline's artifacts are encrypted for
    other accounts (`cross_account_keys`) when an environment is in another account."""
    from hyperpod_kit.constructs.delivery_pipeline import PipelineEnvironmentStage
    from hyperpod_kit.stacks.pipeline import PipelineStack, pipeline_stack_name

    name = pipeline_stack_name(pipeline_name)
    stack = PipelineStack(
        app,
        name,
        stack_name=name,
        env=cdk.Environment(account=account, region=region),
        description=f"hyperpod-kit: the CodePipeline {pipeline_name} that deploys "
        + " then ".join(e.name for e in environments),
        pipeline_name=pipeline_name,
        source=source,
        install=install,
        synth=synth,
        cli_version=cli_version,
        cross_account_keys=any(e.config.account != account for e in environments),
    )
    for environment in environments:
        config = environment.config
        if config.account is None:
            raise ValueError(f"{environment.file}: a pipeline stage needs the file's account")
        stage = cdk.Stage(
            app, environment.name, env=cdk.Environment(account=config.account, region=config.region)
        )
        build_environment(stage, config)
        stack.pipeline.add_environment(
            PipelineEnvironmentStage(
                environment.name, environment.file, config.account, config.region, stage
            )
        )
    stack.pipeline.finish()
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack


def main() -> int:
    """Entry point of `app.py` under the CDK CLI: ``-c environment=FILE`` picks the file.

    The same gates as `hyperpod-kit synth`, on the assembly just written (the CDK CLI's outdir):
    a bad file exits 2 before anything is synthesized, a gate error exits 1, so `npx cdk
    synth|diff|deploy` stop where `hyperpod-kit` does. The outdir gets our marker, so that
    `hyperpod-kit synth` may replace it later.
    """
    from hyperpod_kit.gates import check_assembly, warm_up
    from hyperpod_kit.lock import LOCK_IN_ASSEMBLY, LockError, lock_environment, lock_write
    from hyperpod_kit.lock import render_lock as lock_text
    from hyperpod_kit.outputs import OutputError, write_file

    app = create_app()
    file = str(app.node.try_get_context("environment") or DEFAULT_ENVIRONMENT)
    update_lock = str(app.node.try_get_context("update-lock") or "").lower() == "true"
    try:
        loaded = load_environment(Path(file))
        # The version lock, as `hyperpod-kit synth` applies and writes it (`-c update-lock=true`
        # for its --update-lock).
        loaded, resolution = lock_environment(loaded, update=update_lock)
        lock = lock_write(loaded, resolution.pins)
    except (ConfigError, LockError, OutputError) as e:
        print(e, file=sys.stderr)
        return 2
    for finding in loaded.findings:
        print(finding.render(loaded.file), file=sys.stderr)
    try:
        with built(loaded):
            build_environment(app, loaded.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    warm_up(loaded.config.region)  # cfn-lint loads while Node synthesizes
    outdir = app.synth().directory
    (Path(outdir) / LOCK_IN_ASSEMBLY).write_text(lock_text(loaded.config, resolution.pins))
    write_marker(outdir, ASSEMBLY)  # last: it lists everything the assembly holds
    report = check_assembly(outdir)
    print(report.render(loaded.at), file=sys.stderr)
    if not report.ok:
        print(
            f"{file}: rejected by the gates ({len(report.errors)} errors); nothing goes to AWS",
            file=sys.stderr,
        )
        return 2 if report.traced else 1
    write_file(lock)  # once the gates pass, as `hyperpod-kit synth` writes it
    return 0
