"""`hyperpod-kit pipeline codepipeline` on the team example (environments/team/{dev,prod}.yaml,
two accounts): the CDK Pipelines assembly it writes, synthesized once for the module.

- cdk-nag and cfn-lint find nothing in the pipeline stack or any stage's stacks (each
  suppression per resource, with its reason), cfn-lint's I3510 (a grant whose resource its
  action cannot match) included; the source role may use the connection under both prefixes;
- the template: a CodeConnections source, a synth step that installs the pinned toolkit as a
  package and runs validate, the rehearsal and this command with both gates, self-mutation with
  the pinned CDK CLI, the stages in order, a manual approval before prod only, `status` after
  each, the artifact bucket and every CodeBuild project under a rotated key of ours;
- a stage's stacks are the environment's stacks: equal to `hyperpod-kit synth` of the same file
  (but for the ownership tag CDK's BucketDeployment derives from the construct's path);
- the gates find an error put into a stage's template; `plan` reports a replacement in a stage;
- the assembly equals the reviewed one in tests/data/pipeline/codepipeline/ (asset hashes
  aside); regenerate with HYPERPOD_KIT_UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.codepipeline import install_commands, pinned_cdk_cli
from hyperpod_kit.gates import PROMOTED_RULES, check_assembly
from hyperpod_kit.outputs import read_marker
from hyperpod_kit.plan import plan
from tests.conftest import REPO

pytestmark = [pytest.mark.synth, pytest.mark.slow]

ARN = (
    "arn:aws:codeconnections:us-west-2:111122223333:connection/0c4e8f2a-1b2c-4d3e-9f00-123456789abc"
)
ENVS = {"dev": "environments/team/dev.yaml", "prod": "environments/team/prod.yaml"}
ACCOUNTS = {"dev": "111122223333", "prod": "444455556666"}
ARGV = [
    *(arg for name, file in ENVS.items() for arg in ("--env", f"{name}={file}")),
    "--connection-arn", ARN, "--repository", "example-org/team-envs",
    "--toolkit-repository", "example-org/hyperpod-kit", "--toolkit-ref", "v0.1.0",
]  # fmt: skip
GOLDEN = REPO / "tests" / "data" / "pipeline" / "codepipeline"
PIPELINE_STACK = "hyperpod-kit-pipeline"


class Run:
    def __init__(self, repo: Path, code: int, err: str, refused: tuple[int, str]) -> None:
        self.repo, self.code, self.err, self.refused = repo, code, err, refused
        self.out = repo / "pipeline.out"
        self.template: dict[str, Any] = json.loads(
            (self.out / f"{PIPELINE_STACK}.template.json").read_text()
        )

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.template["Resources"].items() if r["Type"] == kind}

    @property
    def stages(self) -> list[dict[str, Any]]:
        (pipeline,) = self.resources("AWS::CodePipeline::Pipeline").values()
        stages: list[dict[str, Any]] = pipeline["Properties"]["Stages"]
        return stages

    def project(self, action: dict[str, Any]) -> dict[str, Any]:
        project: dict[str, Any] = self.template["Resources"][
            action["Configuration"]["ProjectName"]["Ref"]
        ]
        return project

    def buildspec(self, action: dict[str, Any]) -> dict[str, Any]:
        spec = self.project(action)["Properties"]["Source"]["BuildSpec"]
        if spec.endswith(".yaml"):  # written into the assembly beside the template
            spec = (self.out / spec).read_text()
        found: dict[str, Any] = json.loads(spec)
        return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The team's repository as the current folder, a folder of someone else's where the output
    goes: refused with --force as without it (the user's file kept); once the user has moved it
    away, the pipeline is written (one synth for the module)."""
    repo = tmp_path_factory.mktemp("team-envs")
    shutil.copytree(REPO / "environments" / "team", repo / "environments" / "team")
    theirs = repo / "pipeline.out"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    before = Path.cwd()
    os.chdir(repo)
    try:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            refused = cli.main(["pipeline", "codepipeline", *ARGV])
            forced = cli.main(["pipeline", "codepipeline", *ARGV, "--force"])
        refused_err = err.getvalue()
        assert (theirs / "notes.txt").read_text() == "mine", "never removed, --force or not"
        shutil.rmtree(theirs)  # the user moves their folder away
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli.main(["pipeline", "codepipeline", *ARGV])
        yield Run(repo, code, err.getvalue(), (max(refused, forced), refused_err))
    finally:
        os.chdir(before)


def test_a_folder_of_someone_else_is_never_replaced(run: Run) -> None:
    code, err = run.refused
    assert (
        code == 2
        and err.count("pipeline.out: is a folder with files that hyperpod-kit did not") == 2
    )
    assert "--force" not in err, err
    assert run.code == 0, run.err
    assert (read_marker(run.out) or {}).get("kind") == "cloud-assembly"
    assert "npx cdk deploy --app pipeline.out hyperpod-kit-pipeline" in run.err
    assert not [p.name for p in run.repo.iterdir() if p.name.startswith(".pipeline.out")]


def test_gates_find_nothing_in_the_pipeline_or_its_stages(run: Run) -> None:
    assert "cdk-nag AwsSolutions: 0 errors, 0 warnings" in run.err
    assert "cfn-lint: 0 errors, 0 warnings" in run.err
    report = check_assembly(run.out)
    assert [f.render() for f in report.findings if f.level != "info"] == []
    assert "I3510" in PROMOTED_RULES  # run, and held as an error
    assert not [f.render() for f in report.findings if f.rule in PROMOTED_RULES]
    stacks = [s.name for s in report.stacks]
    areas = ["network", "storage", "trainer", "cluster", "monitoring"]
    assert stacks == [
        *(f"{env}/team-{env}-{area}" for env in ENVS for area in areas), PIPELINE_STACK,
    ]  # fmt: skip
    # Suppressed with a reason, each on its resource: CDK Pipelines' own roles, the log bucket.
    for logical, resource in run.template["Resources"].items():
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            assert rule["id"] in ("AwsSolutions-IAM5", "AwsSolutions-S1"), logical
            assert len(rule["reason"]) > 60, logical
            if rule["id"] == "AwsSolutions-IAM5":
                assert rule["applies_to"], f"{logical}: every wildcard named"


def test_source_is_the_repository_through_the_connection(run: Run) -> None:
    (source,) = run.stages[0]["Actions"]
    assert run.stages[0]["Name"] == "Source"
    assert source["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    assert source["Configuration"] == {
        "ConnectionArn": ARN, "FullRepositoryId": "example-org/team-envs", "BranchName": "main",
        "DetectChanges": True,
    }  # fmt: skip
    (pipeline,) = run.resources("AWS::CodePipeline::Pipeline").values()
    assert pipeline["Properties"]["PipelineType"] == "V2"
    assert pipeline["Properties"]["RestartExecutionOnUpdate"] is True  # self-mutation restarts it


def test_synth_installs_the_pinned_toolkit_and_runs_the_gates(run: Run) -> None:
    assert [s["Name"] for s in run.stages] == [
        "Source", "Build", "UpdatePipeline", "Assets", "dev", "prod",
    ]  # fmt: skip
    (synth,) = run.stages[1]["Actions"]
    spec = run.buildspec(synth)
    # The pinned checkout, installed from there as a package into a venv of its own with the
    # checkout's pinned requirements (tests/unit/test_codepipeline.py has the whole list).
    install = spec["phases"]["install"]["commands"]
    assert install == install_commands("example-org/hyperpod-kit", "v0.1.0")
    assert install[1] == (
        "git -C .hyperpod-kit/toolkit fetch --quiet --depth 1 "
        "https://github.com/example-org/hyperpod-kit.git v0.1.0"
    )
    assert not any("make " in c or ".hyperpod-kit/toolkit/.venv" in c for c in install)
    build = spec["phases"]["build"]["commands"]
    assert build[:4] == [
        "hyperpod-kit validate environments/team/dev.yaml",
        "hyperpod-kit check --rehearse environments/team/dev.yaml",
        "hyperpod-kit validate environments/team/prod.yaml",
        "hyperpod-kit check --rehearse environments/team/prod.yaml",
    ]
    # The pipeline's own synthesis, with both gates on every stage: this very command.
    assert build[4] == (
        "hyperpod-kit pipeline codepipeline --env dev=environments/team/dev.yaml "
        f"--env prod=environments/team/prod.yaml --connection-arn {ARN} "
        "--repository example-org/team-envs --branch main "
        "--toolkit-repository example-org/hyperpod-kit --toolkit-ref v0.1.0 --name hyperpod-kit "
        "-o cdk.out"
    )
    assert spec["artifacts"]["base-directory"] == "cdk.out"
    (mutate,) = run.stages[2]["Actions"]
    assert run.buildspec(mutate)["phases"]["install"]["commands"] == [
        f"npm install -g aws-cdk@{pinned_cdk_cli()}"
    ]


def test_one_stage_per_environment_approval_before_prod_status_after_each(run: Run) -> None:
    areas = ["network", "trainer", "storage", "cluster", "monitoring"]
    for env, stage in zip(ENVS, run.stages[4:], strict=True):
        actions = sorted(stage["Actions"], key=lambda a: a["RunOrder"])
        kinds = [a["ActionTypeId"]["Provider"] for a in actions]
        deploys = [a for a in actions if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert {a["Configuration"]["StackName"] for a in deploys} == {
            f"team-{env}-{area}" for area in areas
        }
        account = ACCOUNTS[env]
        for action in deploys:
            assert f"iam::{account}:role/cdk-hnb659fds-" in json.dumps(action["RoleArn"])
        if env == "prod":
            assert kinds[0] == "Manual" and actions[0]["RunOrder"] == 1
            assert all(a["RunOrder"] > 1 for a in actions[1:])
        else:
            assert "Manual" not in kinds
        status = actions[-1]
        assert (status["Name"], kinds[-1]) == ("Status", "CodeBuild")
        assert all(a["RunOrder"] < status["RunOrder"] for a in actions[:-1])
        spec = run.buildspec(status)
        assert spec["phases"]["install"]["commands"] == install_commands(
            "example-org/hyperpod-kit", "v0.1.0"
        )
        assert spec["phases"]["build"]["commands"][-1] == (
            'AWS_PROFILE=hyperpod-kit-read hyperpod-kit status "$HPK_FILE" --watch'
        )
        variables = {
            v["Name"]: v["Value"]
            for v in run.project(status)["Properties"]["Environment"]["EnvironmentVariables"]
        }
        lookup = f"arn:aws:iam::{account}:role/cdk-hnb659fds-lookup-role-{account}-us-west-2"
        assert variables["HPK_FILE"] == ENVS[env]
        assert variables["HPK_READ_ROLE"] == lookup
        # status reads with the bootstrap's read-only lookup role, and may assume nothing else.
        role = run.project(status)["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
        (policy,) = [
            p for p in run.resources("AWS::IAM::Policy").values()
            if {"Ref": role} in p["Properties"]["Roles"]
        ]  # fmt: skip
        assumed = [
            s for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s["Action"] == "sts:AssumeRole"
        ]  # fmt: skip
        assert [s["Resource"] for s in assumed] == [lookup]


def test_artifacts_encrypted_with_a_rotated_key_and_access_logged(run: Run) -> None:
    (key_id,) = run.resources("AWS::KMS::Key")
    assert run.template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    buckets = run.resources("AWS::S3::Bucket")
    (artifacts_id,) = [k for k, b in buckets.items() if "LoggingConfiguration" in b["Properties"]]
    bucket = buckets[artifacts_id]["Properties"]
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]},
    }  # fmt: skip
    (pipeline,) = run.resources("AWS::CodePipeline::Pipeline").values()
    store = pipeline["Properties"]["ArtifactStore"]
    assert store["Location"] == {"Ref": artifacts_id}
    assert store["EncryptionKey"]["Id"] == {"Fn::GetAtt": [key_id, "Arn"]}
    for logical, project in run.resources("AWS::CodeBuild::Project").items():
        assert project["Properties"]["EncryptionKey"] == {"Fn::GetAtt": [key_id, "Arn"]}, logical


def test_a_stage_holds_the_environments_stacks(run: Run, tmp_path: Path) -> None:
    """Each stage's templates equal `hyperpod-kit synth` of its file. One difference is CDK's:
    BucketDeployment tags its destination bucket `aws-cdk:cr-owned:<prefix>:<8 hex of the
    construct's address>`, and the address is the construct's path, which a stage lengthens."""
    owned = re.compile(r'("aws-cdk:cr-owned:[^"]*):[0-9a-f]{8}"')
    for env, file in ENVS.items():
        out = tmp_path / env
        assert cli.main(["synth", str(run.repo / file), "-o", str(out), "-q"]) == 0
        manifest = json.loads((run.out / f"assembly-{env}" / "manifest.json").read_text())
        folder = run.out / f"assembly-{env}"
        staged = {
            a["properties"]["stackName"]: folder / a["properties"]["templateFile"]
            for a in manifest["artifacts"].values()
            if a["type"] == "aws:cloudformation:stack"
        }
        alone = {p.name.removesuffix(".template.json"): p for p in out.glob("*.template.json")}
        assert set(staged) == set(alone)
        for name, path in staged.items():
            ours, theirs = (owned.sub(r'\1"', p.read_text()) for p in (path, alone[name]))
            assert json.loads(ours) == json.loads(theirs), f"{env}: {name}"


CODESTAR_ARN = ARN.replace(":codeconnections:", ":codestar-connections:")


def _use_connection(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        st
        for r in template["Resources"].values()
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::Role")
        for st in r["Properties"].get("PolicyDocument", {}).get("Statement", [])
        if "UseConnection" in json.dumps(st["Action"])
    ]


def test_the_source_role_may_use_the_connection_under_both_prefixes(run: Run) -> None:
    """IAM matches an action's service prefix to the resource's: `codeconnections:` on the ARN
    as given, `codestar-connections:` on the same connection spelled so (CDK grants the latter
    on the ARN as given, which covers nothing)."""
    assert sorted(_use_connection(run.template), key=lambda st: st["Action"]) == [
        {"Action": "codeconnections:UseConnection", "Effect": "Allow", "Resource": ARN},
        {"Action": "codestar-connections:UseConnection", "Effect": "Allow",
         "Resource": CODESTAR_ARN},
    ]  # fmt: skip
    (pipeline,) = run.resources("AWS::CodePipeline::Pipeline").values()
    (legacy,) = [k for k in run.resources("AWS::IAM::Policy") if "CodestarPrefix" in k]
    assert legacy in pipeline["DependsOn"]  # both grants exist before its first run


def test_the_gate_holds_a_grant_that_covers_nothing(run: Run, tmp_path: Path) -> None:
    """What CDK wrote before: `codestar-connections:UseConnection` on the `codeconnections` ARN,
    found by cfn-lint's informational I3510, which the gate runs as an error."""
    copy = tmp_path / "pipeline.out"
    shutil.copytree(run.out, copy, symlinks=True)
    path = copy / f"{PIPELINE_STACK}.template.json"
    path.write_text(
        path.read_text().replace(
            '"codeconnections:UseConnection"', '"codestar-connections:UseConnection"'
        )
    )
    report = check_assembly(copy)
    errors = [(f.gate, f.stack, f.rule) for f in report.errors]
    assert errors == [("cfn-lint", PIPELINE_STACK, "I3510")], report.render()
    assert "codestar-connections:UseConnection" in report.errors[0].message


def test_gates_find_an_error_put_into_a_stages_template(run: Run, tmp_path: Path) -> None:
    copy = tmp_path / "pipeline.out"
    shutil.copytree(run.out, copy, symlinks=True)
    (template,) = (copy / "assembly-prod").glob("prodteamprodstorage*.template.json")
    data = json.loads(template.read_text())
    fsx = data["Resources"]["LustreFileSystem"]["Properties"]
    fsx["StorageCapacty"] = fsx.pop("StorageCapacity")  # a typo
    template.write_text(json.dumps(data))
    report = check_assembly(copy)
    errors = [(f.gate, f.stack, f.rule) for f in report.errors]
    assert ("cfn-lint", "prod/team-prod-storage", "E3002") in errors
    assert all(stack == "prod/team-prod-storage" for _, stack, _ in errors)


def test_plan_reports_a_replacement_inside_a_stage(run: Run, tmp_path: Path) -> None:
    after = tmp_path / "after"
    shutil.copytree(run.out, after, symlinks=True)
    (template,) = (after / "assembly-prod").glob("prodteamprodstorage*.template.json")
    data = json.loads(template.read_text())
    data["Resources"]["DataBucket"]["Properties"]["BucketName"] = "team-prod-data-2"
    template.write_text(json.dumps(data))
    result = plan(run.out, after)
    bucket = next(c for c in result.changes if c.logical_id == "DataBucket")
    assert (bucket.stack, bucket.action, bucket.dangerous) == ("team-prod-storage", "replace", True)
    assert {c.stack for c in result.changes} <= {"team-prod-storage"}
    assert result.exit_code() == 1


_HASH = re.compile(r"[0-9a-f]{64}")
_DESTINATION = re.compile(r"(\d{12}-[a-z0-9-]+?)-[0-9a-f]{8}\b")


def _normalized(path: Path) -> str:
    text = _DESTINATION.sub(r"\1-<destination>", _HASH.sub("<asset-hash>", path.read_text()))
    if path.suffix in {".json", ".yaml"}:  # buildspecs are JSON too
        return json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
    return text


def _layout(out: Path) -> dict[str, Any]:
    """What the assembly holds, stage by stage: each stack's name, account and region."""

    def stacks(folder: Path) -> list[dict[str, Any]]:
        manifest = json.loads((folder / "manifest.json").read_text())
        found: list[dict[str, Any]] = []
        for name, artifact in manifest["artifacts"].items():
            if artifact["type"] == "aws:cloudformation:stack":
                found.append({
                    "stack": artifact["properties"].get("stackName", name),
                    "environment": artifact["environment"],
                })  # fmt: skip
            elif artifact["type"] == "cdk:cloud-assembly":
                directory = artifact["properties"]["directoryName"]
                stage = artifact["properties"]["displayName"]
                inner = stacks(folder / directory)
                found.append({"stage": stage, "folder": directory, "stacks": inner})
        return found

    return {"artifacts": stacks(out)}


def test_the_assembly_equals_the_reviewed_one(run: Run) -> None:
    """tests/data/pipeline/codepipeline/: the pipeline stack's template, the asset publishers'
    buildspecs CDK writes beside it, and the layout of the stages. The stages' templates are the
    environments' own (test above), so they are not kept twice."""
    produced = {
        f"{PIPELINE_STACK}.template.json": _normalized(run.out / f"{PIPELINE_STACK}.template.json"),
        "layout.json": json.dumps(_layout(run.out), indent=1, sort_keys=True) + "\n",
    }
    for spec in sorted(run.out.glob("buildspec-*.yaml")):
        kind = spec.name.rsplit("-", 1)[1]  # DockerAsset.yaml, FileAsset.yaml
        produced[f"buildspec-{kind}"] = _normalized(spec)
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        shutil.rmtree(GOLDEN, ignore_errors=True)
        GOLDEN.mkdir(parents=True)
        for name, text in produced.items():
            (GOLDEN / name).write_text(text)
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(produced), "regenerate the golden"
    for name, text in produced.items():
        assert text == (GOLDEN / name).read_text(), (
            f"{name} differs from {GOLDEN}: review, regenerate"
        )
