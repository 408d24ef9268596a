"""The deploy rehearsal on every example environment, and that it fails for each class of defect
it exists to catch, on a real synthesized assembly with a grant or an ordering taken away. (Each
example's own rehearsal runs on the assembly tests/integration/test_synth_examples.py synthesizes
through the CLI: one synth serves both.)"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.rehearsal import rehearse_assembly
from tests.conftest import REPO, ExampleSynthFn, run_cli

pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def studio_slurm(example_synth: ExampleSynthFn) -> Path:
    """studio-slurm's assembly as `hyperpod-kit synth` wrote it (shared by the whole run: the
    tests here edit copies)."""
    return example_synth(REPO / "environments/studio-slurm.yaml").assembly


def _copy(source: Path, folder: Path) -> Path:
    """A copy of a shared assembly to rehearse: the rehearsal runs the Lambda handlers from
    their asset folders, and Python writes their bytecode there."""
    copy = folder / "cdk.out"
    shutil.copytree(source, copy)
    return copy


def _edited(source: Path, tmp_path: Path, stack: str | list[str], edit: Any) -> Path:
    """A copy of an assembly with one stack's template (or each of a list's) changed by
    `edit(template)`."""
    copy = tmp_path / "cdk.out"
    shutil.copytree(source, copy)
    for name in [stack] if isinstance(stack, str) else stack:
        path = copy / f"{name}.template.json"
        template = json.loads(path.read_text())
        edit(template)
        path.write_text(json.dumps(template))
    return copy


def _dropping(grant: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], None]:
    """An edit of a template that takes every policy statement `grant` picks away."""

    def edit(template: dict[str, Any]) -> None:
        for res in template["Resources"].values():
            if res["Type"] == "AWS::IAM::Policy":
                document = res["Properties"]["PolicyDocument"]
                document["Statement"] = [s for s in document["Statement"] if not grant(s)]

    return edit


_without_jwt_grants = _dropping(lambda s: "slurm-jwt" in json.dumps(s.get("Resource")))


def test_grants_the_jwt_issuer_and_the_spaces_need_taken_away_are_named(
    studio_slurm: Path, tmp_path: Path
) -> None:
    """One rehearsal (each costs a minute) with two grants taken away, whose actors differ: the
    JWT issuer's (the controller) and the spaces' read of the toolkit's package. Each space's
    lifecycle configuration reads the package's URL from its parameter, then the package asset
    (CDK's bootstrap bucket, published before the deploy) as the execution role."""
    config = load_environment(REPO / "environments/studio-slurm.yaml").config
    stacks = [p.name.removesuffix(".template.json") for p in studio_slurm.glob("*.template.json")]
    no_package = _dropping(lambda s: s.get("Sid") == "ToolkitPackage")

    def without(template: dict[str, Any]) -> None:
        _without_jwt_grants(template)
        no_package(template)

    copy = _edited(studio_slurm, tmp_path, stacks, without)  # wherever they live
    report = rehearse_assembly(copy, config, workdir=tmp_path / "actors")
    named = [p for p in report.problems if "slurm-jwt" in p.message]
    assert named, report.render()
    assert all(p.kind == "denied" and "ssm:" in p.message for p in named)
    assert any("controller" in p.actor for p in named), [p.actor for p in named]

    spaces = {c.actor for c in report.calls if c.actor.startswith("studio ")}
    assert spaces, report.render()
    reads = [c for c in report.calls if c.actor in spaces and c.service == "ssm"
             and c.params.get("Name") == f"/hyperpod-kit/{config.name}/studio-package"]  # fmt: skip
    assert {c.actor for c in reads} == spaces
    package = [
        p for p in report.problems if p.actor in spaces and "cdk-hnb659fds-assets" in p.message
    ]
    assert {p.actor for p in package} == spaces, report.render()
    assert all(p.kind == "denied" and "s3:GetObject" in p.message for p in package)


def test_the_cluster_no_longer_waiting_for_its_role_policy_fails(
    studio_slurm: Path, tmp_path: Path
) -> None:
    """The cluster depends on its role's default policy; a regression of that must fail."""
    config = load_environment(REPO / "environments/studio-slurm.yaml").config

    def no_depends_on(template: dict[str, Any]) -> None:
        for res in template["Resources"].values():
            if res["Type"] == "AWS::SageMaker::Cluster":
                res["DependsOn"] = [d for d in res.get("DependsOn", []) if "Policy" not in d]

    copy = _edited(studio_slurm, tmp_path, f"{config.name}-cluster", no_depends_on)
    report = rehearse_assembly(copy, config, workdir=tmp_path / "actors")
    early = [p for p in report.problems if p.kind == "too-early"]
    assert early and all("(first provisioning)" in p.actor for p in early), report.render()


def test_check_rehearse_from_the_command_line(tmp_path: Path) -> None:
    result = run_cli("check", "--rehearse", str(REPO / "environments/default.yaml"),
                     "--format", "json", cwd=tmp_path, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["checked"] > 0 and report["not_checked"]
    assert "rehearsal of" in result.stderr and "Traceback" not in result.stderr
    # the deepest check: the gates ran on the rehearsed assembly first
    assert "cfn-lint: 0 errors" in result.stderr and "cdk-nag AwsSolutions: 0" in result.stderr


def test_check_rehearse_bad_file_is_exit_2_and_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nregion: us-west-2\nclustre: {}\n")
    result = run_cli("check", "--rehearse", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "bad.yaml:" in result.stderr
    assert not list(tmp_path.glob("cdk.out*"))


def test_the_autoscaler_without_its_node_grant_is_denied(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """HyperPod's Karpenter autoscaling adds and deletes nodes as the cluster's ClusterRole
    (eks-platform): with the role's grant taken away, the rehearsal names both calls."""
    loaded = load_environment(REPO / "environments/eks-platform.yaml")
    out = _copy(example_synth(REPO / "environments/eks-platform.yaml").assembly, tmp_path)
    report = rehearse_assembly(out, loaded.config, workdir=tmp_path / "played")
    autoscaler = [c for c in report.calls if c.actor.startswith("HyperPod autoscaling")]
    assert {(c.service, c.operation) for c in autoscaler} == {
        ("sagemaker", "BatchAddClusterNodes"),
        ("sagemaker", "BatchDeleteClusterNodes"),
        ("kms", "CreateGrant"),
        ("kms", "DescribeKey"),
    }
    assert all(c.role.logical_id.startswith("HyperPodAutoscalingRole") for c in autoscaler)

    without_node_grant = _dropping(lambda s: s.get("Sid") == "AddAndDeleteNodes")
    copy = _edited(out, tmp_path / "edited", f"{loaded.config.name}-cluster", without_node_grant)
    report = rehearse_assembly(copy, loaded.config, workdir=tmp_path / "played-again")
    denied = [p for p in report.problems if p.actor.startswith("HyperPod autoscaling")]
    assert len(denied) == 2 and all(p.kind == "denied" for p in denied), report.render()
    assert {m for p in denied for m in ("BatchAddClusterNodes", "BatchDeleteClusterNodes")
            if m in p.message} == {"BatchAddClusterNodes", "BatchDeleteClusterNodes"}  # fmt: skip


@pytest.fixture(scope="module")
def slurm_platform(
    tmp_path_factory: pytest.TempPathFactory, example_synth: ExampleSynthFn
) -> tuple[Any, Path, Any]:
    """slurm-platform synthesized and rehearsed once: (its config, assembly, report)."""
    loaded = load_environment(REPO / "environments/slurm-platform.yaml")
    folder = tmp_path_factory.mktemp("slurm-platform")
    out = _copy(example_synth(REPO / "environments/slurm-platform.yaml").assembly, folder)
    return loaded.config, out, rehearse_assembly(out, loaded.config, workdir=folder / "played")


def test_slurmdbd_without_the_secret_grant_is_denied(
    slurm_platform: tuple[Any, Path, Any], tmp_path: Path
) -> None:
    """HyperPod configures slurmdbd on the controller from the accounting database's secret
    (slurm-platform): the read is the controller's role's, while the cluster is created; with
    the grant taken away, the rehearsal names it. The teams' accounts script calls no AWS."""
    config, out, report = slurm_platform
    assert report.ok, report.render()
    slurmdbd = [c for c in report.calls if c.actor.startswith("HyperPod slurmdbd set-up")]
    assert [(c.service, c.operation) for c in slurmdbd] == [("secretsmanager", "GetSecretValue")]
    (call,) = slurmdbd
    assert call.moment.label.startswith("first provisioning")
    assert call.role.logical_id.startswith("HyperPodExecutionRole")
    assert str(call.params["SecretId"]).startswith("arn:aws:secretsmanager:us-west-2:")

    without_secret_grant = _dropping(lambda s: "secretsmanager" in json.dumps(s))
    copy = _edited(out, tmp_path / "edited", f"{config.name}-cluster", without_secret_grant)
    report = rehearse_assembly(copy, config, workdir=tmp_path / "played-again")
    denied = [p for p in report.problems if p.actor.startswith("HyperPod slurmdbd set-up")]
    assert len(denied) == 1 and denied[0].kind == "denied", report.render()
    assert "secretsmanager:GetSecretValue" in denied[0].message


def test_the_metrics_agent_without_its_write_grant_is_denied(
    slurm_platform: tuple[Any, Path, Any], tmp_path: Path
) -> None:
    """Each Slurm node's Prometheus agent remote-writes to the workspace as its group's role
    (slurm-platform): with the grant taken away, the rehearsal names the agent's call."""
    config, out, report = slurm_platform
    assert report.ok, report.render()
    agents = [c for c in report.calls if c.actor.startswith("Prometheus agent")]
    assert agents and {(c.service, c.operation) for c in agents} == {("aps", "RemoteWrite")}

    without_remote_write = _dropping(lambda s: "aps:RemoteWrite" in json.dumps(s))
    copy = _edited(out, tmp_path / "edited", f"{config.name}-cluster", without_remote_write)
    report = rehearse_assembly(copy, config, workdir=tmp_path / "played-again")
    denied = [p for p in report.problems if p.actor.startswith("Prometheus agent")]
    assert denied and all(p.kind == "denied" for p in denied), report.render()
    assert all("aps:RemoteWrite" in p.message for p in denied)
