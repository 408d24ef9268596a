"""The gates and `plan` read the stacks of stages: the nested cloud assemblies (`assembly-*/`)
that a CDK `Stage` writes and CDK Pipelines deploys, listed in the manifest as
`cdk:cloud-assembly` artifacts. Assemblies here are written by hand, the way CDK writes them (a
stage's asset paths relative to its own folder); tests/integration/test_codepipeline.py does the
same on the synthesized pipeline of the team example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.gates import check_assembly
from hyperpod_kit.plan import PlanInputError, plan, read_assembly

Stacks = dict[str, dict[str, Any]]


def _bucket(name: str, **properties: Any) -> dict[str, Any]:
    return {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": name, **properties}}


def _write_stacks(
    folder: Path, stacks: Stacks, *, stage: str = "", nag: dict[str, str] | None = None
) -> dict[str, Any]:
    """Templates and their manifest entries, as CDK names them: artifact ids made unique with
    the stage's name, `displayName` the construct path, `stackName` the stack's own name."""
    artifacts: dict[str, Any] = {}
    for name, template in stacks.items():
        artifact = f"{stage}{name.replace('-', '')}1234ABCD" if stage else name
        (folder / f"{artifact}.template.json").write_text(json.dumps(template))
        entry: dict[str, Any] = {
            "type": "aws:cloudformation:stack",
            "environment": "aws://111122223333/us-west-2",
            "properties": {"templateFile": f"{artifact}.template.json", "stackName": name},
            "displayName": f"{stage}/{name}" if stage else name,
        }
        if nag and name in nag:
            entry["metadata"] = {
                f"/{stage}/{name}/Data/Resource": [
                    {"type": "aws:cdk:error", "data": f"AwsSolutions-S1: {nag[name]}"}
                ]
            }
        artifacts[artifact] = entry
    return artifacts


def pipeline_assembly(
    folder: Path,
    stages: dict[str, Stacks],
    *,
    top: Stacks | None = None,
    nag: dict[str, str] | None = None,
) -> Path:
    """An app with `top` stacks (the pipeline's) and one nested assembly per stage."""
    folder.mkdir(parents=True)
    artifacts = _write_stacks(folder, top or {"hyperpod-kit-pipeline": {"Resources": {}}})
    for stage, stacks in stages.items():
        nested = folder / f"assembly-{stage}"
        nested.mkdir()
        inner = _write_stacks(nested, stacks, stage=stage, nag=nag)
        (nested / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": inner}))
        artifacts[f"assembly-{stage}"] = {
            "type": "cdk:cloud-assembly",
            "properties": {"directoryName": f"assembly-{stage}", "displayName": stage},
        }
    (folder / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": artifacts}))
    return folder


def _stages(prod_bucket: str = "team-prod-data") -> dict[str, Stacks]:
    return {
        "dev": {"team-dev-storage": {"Resources": {"Data": _bucket("team-dev-data")}}},
        "prod": {"team-prod-storage": {"Resources": {"Data": _bucket(prod_bucket)}}},
    }


# --- the gates ----------------------------------------------------------------------------------


def test_gates_lint_every_stage_template_and_name_its_stage(tmp_path: Path) -> None:
    stages = _stages()
    stages["prod"]["team-prod-storage"]["Resources"]["Data"]["Properties"]["VersioningConfig"] = {
        "Status": "Enabled"
    }  # a typo cfn-lint rejects (E3002)
    out = pipeline_assembly(tmp_path / "pipeline.out", stages)
    report = check_assembly(out)
    assert [s.name for s in report.stacks] == [
        "hyperpod-kit-pipeline", "dev/team-dev-storage", "prod/team-prod-storage",
    ]  # fmt: skip
    (error,) = report.errors
    assert (error.gate, error.stack, error.rule) == ("cfn-lint", "prod/team-prod-storage", "E3002")
    assert "VersioningConfig" in error.message
    assert not report.ok


def test_gates_read_a_stages_cdk_nag_annotations(tmp_path: Path) -> None:
    out = pipeline_assembly(tmp_path / "p", _stages(), nag={"team-dev-storage": "no access logs"})
    report = check_assembly(out, lint=False)
    (error,) = report.errors
    assert (error.gate, error.rule, error.stack) == (
        "cdk-nag",
        "AwsSolutions-S1",
        "dev/team-dev-storage",
    )
    assert error.where == "/dev/team-dev-storage/Data/Resource"


# --- plan -----------------------------------------------------------------------------------------


def test_plan_reports_a_replacement_inside_a_stage(tmp_path: Path) -> None:
    before = pipeline_assembly(tmp_path / "before", _stages())
    after = pipeline_assembly(tmp_path / "after", _stages(prod_bucket="team-prod-data-2"))
    result = plan(before, after)
    (change,) = result.changes
    assert (change.stack, change.logical_id, change.action) == (
        "team-prod-storage",
        "Data",
        "replace",
    )
    assert change.dangerous and result.exit_code() == 1
    assert change.why == ("BucketName changed (team-prod-data -> team-prod-data-2)",)


def test_stacks_are_labelled_by_stack_name_with_their_stage(tmp_path: Path) -> None:
    assembly = read_assembly(pipeline_assembly(tmp_path / "p", _stages()))
    assert assembly.stages == {
        "hyperpod-kit-pipeline": "", "team-dev-storage": "dev", "team-prod-storage": "prod",
    }  # fmt: skip


def test_one_environment_planned_against_its_stage_of_a_pipeline(tmp_path: Path) -> None:
    """`plan FILE --baseline pipeline.out`: the environment's synth (no stages) is compared with
    the stage that deploys its stacks, not with the other stages or the pipeline's own stack."""
    baseline = pipeline_assembly(tmp_path / "pipeline.out", _stages())
    alone = tmp_path / "cdk.out"
    alone.mkdir()
    artifacts = _write_stacks(
        alone, {"team-prod-storage": {"Resources": {"Data": _bucket("team-prod-data-2")}}}
    )
    (alone / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    (change,) = plan(baseline, alone).changes
    assert (change.stack, change.action) == ("team-prod-storage", "replace")


def test_no_stage_deploys_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pipeline's assembly none of whose stages deploys the file's stacks is not a baseline:
    one line, exit 2, naming the stages there are (not every stack of it "removed")."""
    from hyperpod_kit.cli import main as cli
    from hyperpod_kit.cli import synth

    baseline = pipeline_assembly(tmp_path / "pipeline.out", _stages())

    def build(_: Any, out: Path, *__: Any) -> None:
        stacks = {"team-qa-storage": {"Resources": {"Data": _bucket("team-qa-data")}}}
        (out / "manifest.json").write_text(json.dumps({"artifacts": _write_stacks(out, stacks)}))

    monkeypatch.setattr(synth, "build_assembly", build)
    code = cli.main(["plan", "environments/default.yaml", "--baseline", str(baseline)])
    err = capsys.readouterr().err  # validate's findings and the progress line come first
    assert code == 2 and err.count(str(baseline)) == 1, err
    assert err.splitlines()[-1].startswith(
        f"{baseline}: no stage of this pipeline's assembly deploys the environment's stacks "
        "(team-qa-storage); its stages are dev, prod. Hint: plan against the assembly of a "
        "pipeline that deploys this file"
    )
    assert "dangerous" not in err


def test_two_stacks_of_one_name_in_two_stages_stay_apart(tmp_path: Path) -> None:
    """Two accounts may each have a stack of one name: the second keeps its stage's path."""
    stages = {
        "dev": {"team-storage": {"Resources": {"Data": _bucket("a")}}},
        "prod": {"team-storage": {"Resources": {"Data": _bucket("b")}}},
    }
    assembly = read_assembly(pipeline_assembly(tmp_path / "p", stages))
    assert sorted(assembly.templates) == [
        "hyperpod-kit-pipeline",
        "prod/team-storage",
        "team-storage",
    ]
    assert assembly.only_stage("prod").templates == {
        "prod/team-storage": {"Resources": {"Data": _bucket("b")}}
    }


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("missing", "assembly-prod/manifest.json: the manifest of stage prod is missing"),
        ("outside", "nested assembly assembly-prod names no folder of its own ('../prod')"),
    ],
)
def test_a_damaged_stage_is_named(tmp_path: Path, damage: str, says: str) -> None:
    out = pipeline_assembly(tmp_path / "p", _stages())
    if damage == "missing":
        (out / "assembly-prod" / "manifest.json").unlink()
    else:
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["artifacts"]["assembly-prod"]["properties"]["directoryName"] = "../prod"
        (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PlanInputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        read_assembly(out)


def test_a_nested_stack_inside_a_stage_is_found_through_the_stages_assets(tmp_path: Path) -> None:
    """A stage's nested stack (Studio's user batches) is a file asset of the stage's own
    assembly: its asset manifest's paths are relative to the stage's folder."""
    users = {"Resources": {"Data": _bucket("team-dev-users")}}
    stages = _stages()
    out = pipeline_assembly(tmp_path / "p", stages)
    stage = out / "assembly-dev"
    digest = "ab" * 32
    (stage / "Users01.nested.template.json").write_text(json.dumps(users))
    (stage / "dev.assets.json").write_text(json.dumps({"version": "55.0.0", "files": {
        digest: {"source": {"path": "Users01.nested.template.json", "packaging": "file"}},
    }}))  # fmt: skip
    manifest = json.loads((stage / "manifest.json").read_text())
    manifest["artifacts"]["dev.assets"] = {
        "type": "cdk:asset-manifest", "properties": {"file": "dev.assets.json"},
    }  # fmt: skip
    (stack,) = [a for a in manifest["artifacts"].values() if a.get("displayName")]
    template_path = stage / stack["properties"]["templateFile"]
    template = json.loads(template_path.read_text())
    template["Resources"]["Users01NestedStackUsers01NestedStackResource1234"] = {
        "Type": "AWS::CloudFormation::Stack",
        "Properties": {"TemplateURL": f"https://s3.example/{digest}.json"},
    }
    template_path.write_text(json.dumps(template))
    (stage / "manifest.json").write_text(json.dumps(manifest))
    report = check_assembly(out, lint=False)
    assert "dev/team-dev-storage/Users01" in [s.name for s in report.stacks]
    assert "team-dev-storage/Users01" in read_assembly(out).templates
