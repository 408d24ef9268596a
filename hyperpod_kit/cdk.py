"""hyperpod-kit as a CDK construct library: a HyperPod environment in the app you already have.

The public API is this module's ``__all__`` (docs/constructs.md; its snapshot is
docs/api-snapshot.json, and changing it needs a line in CHANGELOG.md's [Unreleased]). Everything
else in `hyperpod_kit` is internal and may change in any release.

Two ways in, with the same validation and the same two gates as `hyperpod-kit synth`:

* a whole environment, from an environment file (`HyperPodEnvironment.from_file`) or from typed
  settings (`HyperPodEnvironment(scope, settings)`, the `EnvironmentConfig` of the file), built
  into your `App` or `Stage`, optionally on your own VPC, subnet and bucket
  (`ExistingResources`); a bad setting raises `InvalidEnvironmentError` naming it;
* the L3 constructs one by one (`ClusterNetwork`, `LustreFileSystem`, `HyperPodCluster`,
  `StudioDomain`, ...), in stacks of your own.

Either way, `add_nag(app)` (done for you by `HyperPodEnvironment`) puts cdk-nag's AwsSolutions
checks on the app, and `gate(app.synth())` runs both gates on the assembly, as the toolkit's own
synth does, and raises `GateError` on an error::

    app = create_app()
    network = MyNetworkStack(app, "shared")  # your VPC and bucket
    HyperPodEnvironment.from_file(
        app, "environments/default.yaml",
        existing=ExistingResources(vpc=network.vpc, subnet=network.subnet, bucket=network.bucket),
    )
    gate(app.synth())
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import Annotations, cx_api
from cdk_nag import AwsSolutionsChecks
from pydantic import ValidationError

from hyperpod_kit.app import (
    FEATURE_FLAGS,
    EnvironmentStacks,
    ExistingResources,
    build_environment,
    built,
    create_app,
)
from hyperpod_kit.config.environment import LoadedEnvironment, load_environment
from hyperpod_kit.config.findings import ConfigError, Finding, Level, has_errors
from hyperpod_kit.config.loader import schema_findings
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import run_validators
from hyperpod_kit.constructs.data_bucket import DataBucket
from hyperpod_kit.constructs.hyperpod_cluster import FileSystemHandles, HyperPodCluster
from hyperpod_kit.constructs.lifecycle import LifecycleScripts
from hyperpod_kit.constructs.lustre import LustreFileSystem
from hyperpod_kit.constructs.monitoring import ClusterMonitoring
from hyperpod_kit.constructs.network import ClusterNetwork, in_vpc
from hyperpod_kit.constructs.studio import StudioDomain
from hyperpod_kit.constructs.studio_partitions import StudioProfiles
from hyperpod_kit.gates import GateFinding, GateReport, Place, check_assembly

__all__ = [
    "FEATURE_FLAGS",
    "ClusterMonitoring",
    "ClusterNetwork",
    "DataBucket",
    "EnvironmentConfig",
    "EnvironmentStacks",
    "ExistingResources",
    "FileSystemHandles",
    "Finding",
    "GateError",
    "GateFinding",
    "GateReport",
    "HyperPodCluster",
    "HyperPodEnvironment",
    "InvalidEnvironmentError",
    "LifecycleScripts",
    "LustreFileSystem",
    "StudioDomain",
    "StudioProfiles",
    "add_nag",
    "create_app",
    "gate",
    "in_vpc",
    "validate_settings",
]

SETTINGS = "(settings)"
"""What a finding about typed settings names in place of a file."""


class InvalidEnvironmentError(ConfigError):
    """Settings or an environment file that do not make an environment: one line per finding,
    ``[FILE:LINE] key: message. Hint: ...``, errors first. ``findings`` holds them as data."""

    def __init__(self, file: str, findings: list[Finding]) -> None:
        super().__init__(file, findings)
        if file == SETTINGS:  # no file and no line: the key leads
            self.args = ("\n".join(f.render(SETTINGS).removeprefix(f"{SETTINGS} ")
                                   for f in self.findings),)  # fmt: skip


class GateError(Exception):
    """The gates (cdk-nag, cfn-lint) found errors in an assembly: nothing should go to AWS.
    ``report`` holds every finding; the message lists them with the summary."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        # As `hyperpod-kit synth` exits: 2 when every error is at a key of the settings (the
        # settings are what to change), else 1.
        self.exit_code = 2 if report.traced else 1
        super().__init__(
            f"{report.render()}\nrejected by the gates ({len(report.errors)} errors); "
            "nothing goes to AWS"
        )


def validate_settings(
    settings: EnvironmentConfig | Mapping[str, Any], *, suppress: Sequence[str] = ()
) -> EnvironmentConfig:
    """The settings as a validated `EnvironmentConfig`, through the same schema and semantic
    validators as an environment file (suppressions by validator name, as the file's
    ``validation.suppress``); `InvalidEnvironmentError` naming each bad key. Warnings are not
    raised: `HyperPodEnvironment` keeps them on ``findings`` and shows them as CDK warnings.
    Relative paths resolve from the working directory."""
    return _validated(settings, suppress).config


def _validated(
    settings: EnvironmentConfig | Mapping[str, Any], suppress: Sequence[str]
) -> LoadedEnvironment:
    if isinstance(settings, EnvironmentConfig):
        # A copy: the build annotates sections with their keys; the caller's object stays as is.
        config = settings.model_copy(deep=True)
    else:
        try:
            config = EnvironmentConfig.model_validate(dict(settings))
        except ValidationError as e:
            raise InvalidEnvironmentError(
                SETTINGS, schema_findings(EnvironmentConfig, e.errors())
            ) from None
    if config._source_dir is None:
        config.at_source(Path.cwd())
    findings = run_validators(config, suppress=[*suppress, *config.validation.suppress])
    if has_errors(findings):
        raise InvalidEnvironmentError(SETTINGS, findings)
    return LoadedEnvironment(file=SETTINGS, config=config, findings=findings, lines={})


class HyperPodEnvironment:
    """One whole environment (network, storage, cluster, and Studio, monitoring, EKS as its
    settings say) added as stacks to `scope`, your `App` or a `Stage` of it, with cdk-nag's
    checks on `scope` (`add_nag`). The stacks are named ``<name>-<area>`` and deploy in their
    dependency order; `existing` puts them on your own VPC, subnet and bucket.

    Handles: ``config`` (the validated settings), ``findings`` (warnings and infos),
    ``stacks`` (`EnvironmentStacks`), ``cluster`` (`HyperPodCluster`), ``file_system``
    (`LustreFileSystem`), ``bucket``, ``network`` (`ClusterNetwork`), ``studio_domain``
    (`StudioDomain` or None).
    """

    def __init__(
        self,
        scope: cdk.Stage,
        settings: EnvironmentConfig | Mapping[str, Any],
        *,
        existing: ExistingResources | None = None,
        suppress: Sequence[str] = (),
    ) -> None:
        self._build(scope, _validated(settings, suppress), existing)

    @classmethod
    def from_file(
        cls,
        scope: cdk.Stage,
        path: str | os.PathLike[str],
        *,
        existing: ExistingResources | None = None,
        suppress: Sequence[str] = (),
    ) -> HyperPodEnvironment:
        """The environment an environment file describes, read and validated as
        `hyperpod-kit validate` does (its bases, its lines in the errors), with its version
        lock applied when there is one (read only: `hyperpod-kit synth` writes it)."""
        from hyperpod_kit.lock import LockError, lock_environment

        file = os.fspath(path)
        try:
            loaded = load_environment(Path(file), suppress=suppress)
            loaded, _ = lock_environment(loaded)
        except ConfigError as e:
            raise InvalidEnvironmentError(e.file, e.findings) from None
        except LockError as e:
            raise InvalidEnvironmentError(file, e.findings) from None
        environment = cls.__new__(cls)
        environment._build(scope, loaded, existing)
        return environment

    def _build(
        self, scope: cdk.Stage, loaded: LoadedEnvironment, existing: ExistingResources | None
    ) -> None:
        if not isinstance(scope, cdk.Stage):
            raise TypeError(
                "an environment is stacks: give it an App or a Stage, not a Stack or a construct "
                "(for a part of one in your own stack, use the constructs: docs/constructs.md)"
            )
        _check_feature_flags(scope)
        self.config = loaded.config
        self.findings = loaded.findings
        self._loaded = loaded
        try:
            with built(loaded):
                self.stacks = build_environment(
                    scope, loaded.config, existing=existing or ExistingResources()
                )
        except ConfigError as e:
            raise InvalidEnvironmentError(e.file, e.findings) from None
        self._announce(scope, loaded)
        self.network = self.stacks.network.network
        self.file_system = self.stacks.storage.lustre
        self.bucket = self.stacks.storage.data.bucket
        self.cluster = self.stacks.cluster.cluster
        self.studio_domain = self.stacks.studio.studio if self.stacks.studio else None

    def _announce(self, scope: cdk.Stage, loaded: LoadedEnvironment) -> None:
        """The settings' warnings, where a person sees them: as CDK warnings on the environment's
        first stack, which `cdk synth` prints and the gate's report counts (none fails it)."""
        first = self.stacks.all()[0]
        for finding in loaded.findings:
            if finding.level is Level.WARNING:
                # CDK says it is a warning; typed settings have no file or line: the key leads
                text = finding.render(loaded.file).removeprefix(f"{SETTINGS} warning: ")
                Annotations.of(first).add_warning_v2(f"hyperpod-kit:{finding.check}", text)

    def at(self, key: str) -> str:
        """``FILE:LINE`` where the environment file writes `key` (the file alone without a line;
        ``(settings)`` for typed settings): give it to `gate` as `place`, and a gate's finding
        on a value of the settings reads as `hyperpod-kit synth` prints it."""
        return self._loaded.at(key)


def _check_feature_flags(scope: cdk.Stage) -> None:
    """ValueError naming the feature flags `scope` does not set as `FEATURE_FLAGS` does: the
    toolkit's templates are built and tested with them, and some constructs cannot be built
    without them (CDK then blames a setting that is not at fault)."""
    unset = sorted(k for k, v in FEATURE_FLAGS.items() if scope.node.try_get_context(k) != v)
    if unset:
        raise ValueError(
            f"the app does not set {len(unset)} of the CDK feature flags hyperpod-kit's "
            f"templates are built and tested with ({', '.join(unset)}): create it with "
            "create_app() or cdk.App(context=FEATURE_FLAGS); if your own stacks need other "
            "values, build the environment in a Stage of your app that sets them "
            "(stage.node.set_context(key, value) for each of FEATURE_FLAGS, before the "
            "environment; docs/constructs.md)"
        )


def add_nag(scope: cdk.Stage | cdk.Stack) -> None:
    """cdk-nag's AwsSolutions checks on every stack below `scope`, verbose, as the toolkit's app
    adds them (an App's aspects do not reach into its Stages: add them to each Stage). For apps
    built from the constructs alone; `HyperPodEnvironment` adds them itself."""
    cdk.Aspects.of(scope).add(AwsSolutionsChecks(verbose=True))


def gate(
    assembly: cx_api.CloudAssembly | cdk.Stage | str | os.PathLike[str],
    *,
    quiet: bool = False,
    place: Place | None = None,
) -> GateReport:
    """Both gates on a synthesized assembly, exactly as `hyperpod-kit synth` runs them: the
    cdk-nag findings the aspect left in it (suppressions with reasons honoured) and cfn-lint on
    every template, nested stacks and stages included. `assembly`: what `app.synth()` returned,
    the App or Stage itself (synthesized here if it was not), or the assembly's folder. Prints
    the report on stderr (unless `quiet`), and the verdict when it rejects, and returns it;
    raises `GateError` on any error.
    `place`: where a key of the settings is written (`HyperPodEnvironment.at`), for findings
    traced to one."""
    if isinstance(assembly, cdk.Stage):
        assembly = assembly.synth()
    directory = assembly.directory if isinstance(assembly, cx_api.CloudAssembly) else assembly
    report = check_assembly(Path(directory))
    if not quiet:
        print(report.render(place), file=sys.stderr)
    if not report.ok:
        error = GateError(report)
        if not quiet:  # the verdict, as `hyperpod-kit synth` ends: an app that exits says why
            print(str(error).rsplit("\n", 1)[-1], file=sys.stderr)
        raise error
    return report
