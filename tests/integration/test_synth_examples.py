"""Every example environment synthesizes offline, passes both gates (cfn-lint, cdk-nag), keeps
its provenance, and rehearses its deploy without a problem."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.environment import LoadedEnvironment, load_environment
from hyperpod_kit.gates import check_assembly
from hyperpod_kit.outputs import ASSEMBLY, write_marker
from hyperpod_kit.rehearsal import rehearse_assembly
from tests.conftest import REPO, ExampleSynthFn, run_cli, run_command
from tests.integration.provenance import keyed_properties, misplaced, untraced

pytestmark = pytest.mark.synth
EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))
_cli = run_cli


def _cdk(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command([str(REPO / "node_modules/.bin/cdk"), *args], cwd=REPO)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_synthesizes_and_passes_gates(
    example: Path, tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """`hyperpod-kit synth EXAMPLE -o cdk.out` in a fresh process, run once for the whole test
    run (tests/conftest.py's `example_synth`: the plan, rehearsal-defect, reproducibility and
    output-safety tests start from the same assembly)."""
    result = example_synth(example)
    out = result.out
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = check_assembly(out)
    assert report.ok, [f.render() for f in report.errors]
    assert [f.render() for f in report.findings if f.gate == "cfn-lint"] == []
    assert [f.render() for f in report.findings if f.gate == "cdk-nag"] == []
    loaded = load_environment(example)
    config = loaded.config
    stacks = {s.name for s in report.stacks if "/" not in s.name}
    assert stacks == {f"{config.name}-{area}" for area in expected_areas(config)}
    # Provenance (constructs/provenance.py): every value of the file a property holds has its
    # key, and every key holds its value
    assert untraced(out, loaded) == []
    assert misplaced(out, loaded) == []
    _compare_keys(example.stem, out, loaded)
    # The deploy rehearsal on the very assembly the CLI wrote (one synth serves both), copied:
    # the rehearsal runs the Lambda handlers from their asset folders (Python writes bytecode)
    played = result.copy_to(tmp_path / "cdk.out")
    rehearsal = rehearse_assembly(played, config, workdir=tmp_path / "actors")
    assert rehearsal.ok, rehearsal.render()
    assert rehearsal.checked > 0 and {c.actor for c in rehearsal.calls}
    nested = {s.template.name for s in report.stacks if "/" in s.name}  # linted like the others
    assert nested == {p.name for p in out.glob("*.nested.template.json")}
    assert bool(nested) == config.studio.enabled  # Studio's user batches
    _compare_with_golden(example.stem, out)
    if example.stem == "slurm-platform":  # its synth is the baseline of a plan (one more synth)
        _plan_refuses_a_new_database_zone(example, out, tmp_path)
    assert (
        "cfn-lint: 0 errors" in result.stderr and "cdk-nag AwsSolutions: 0 errors" in result.stderr
    )
    # stderr is a pipe here, not a terminal: plain stage lines with their timings, none on stdout
    stages = re.findall(r"^hyperpod-kit: synth: (.+) \.\.\. \d+\.\d s$", result.stderr, re.M)
    assert stages == ["build the stacks", "synthesize, cdk-nag", "cfn-lint"], result.stderr
    assert "hyperpod-kit:" not in result.stdout


def _plan_refuses_a_new_database_zone(example: Path, baseline: Path, tmp_path: Path) -> None:
    """The accounting database's second zone moved: the network stack replaces the database
    subnet, whose id it exports to the accounting stack. CloudFormation refuses to change an
    export in use, so plan refuses (exit 3), naming both stacks and the two-step way out."""
    moved = tmp_path / "moved.yaml"
    text = example.read_text()
    assert "database_availability_zone_id: usw2-az1" in text
    moved.write_text(text.replace("database_availability_zone_id: usw2-az1",
                                  "database_availability_zone_id: usw2-az3"))  # fmt: skip
    result = _cli("plan", str(moved), "--baseline", str(baseline), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    (export,) = [line for line in result.stdout.splitlines() if " (export) " in line]
    assert export.startswith(
        "! hyperpod-slurm26-network Outputs.ExportsOutputRefNetworkDatabaseSubnet"
    ), export
    assert "hyperpod-slurm26-accounting import(s) it" in export
    assert "first deploy hyperpod-slurm26-accounting no longer importing it" in export


def test_team_dev_synthesizes_through_its_base(tmp_path: Path) -> None:
    """environments/team/dev.yaml, written on top of base.yaml (abstract), synthesizes and passes
    both gates; the cluster is the merged one (the base's compute group, dev's count). Not a
    golden example: one synth of the merged file proves the chain reaches the stacks."""
    example = REPO / "environments" / "team" / "dev.yaml"
    out = tmp_path / "cdk.out"
    result = _cli("synth", str(example), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = check_assembly(out)
    assert report.ok, [f.render() for f in report.errors]
    assert [f.render() for f in report.findings if f.gate in ("cfn-lint", "cdk-nag")] == []
    config = load_environment(example).config
    stacks = {s.name for s in report.stacks if "/" not in s.name}
    assert stacks == {f"team-dev-{area}" for area in expected_areas(config)}
    template = json.loads((out / "team-dev-cluster.template.json").read_text())
    (cluster,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"
    ]
    groups = {
        g["InstanceGroupName"]: (g["InstanceType"], g["InstanceCount"])
        for g in cluster["Properties"]["InstanceGroups"]
    }
    assert groups == {
        "controller": ("ml.m5.xlarge", 1), "login": ("ml.m5.xlarge", 1),
        "compute": ("ml.g5.8xlarge", 1),
    }  # fmt: skip


def test_unsuppressed_nag_finding_fails_synth_and_keeps_cdk_out(tmp_path: Path) -> None:
    """Flow logs off is an AwsSolutions-VPC7 error: the gate rejects it, cdk.out stays as it was."""
    env = tmp_path / "no-flow-logs.yaml"
    text = (REPO / "environments" / "default.yaml").read_text()
    env.write_text(
        text.replace("    cidr: 10.0.0.0/16\n", "    cidr: 10.0.0.0/16\n    flow_logs: false\n")
    )
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / "previous.txt").write_text("earlier good synth")
    write_marker(out, ASSEMBLY)  # an earlier synth of ours, which wrote previous.txt
    result = _cli("synth", str(env), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "AwsSolutions-VPC7" in result.stderr
    assert "cdk-nag AwsSolutions: 1 errors" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [".hyperpod-kit", "previous.txt"]
    rejected = tmp_path / "cdk.out.rejected"
    assert (rejected / "manifest.json").is_file()
    assert not check_assembly(rejected, lint=False).ok


def test_cfn_lint_gate_catches_a_broken_template(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """The cfn-lint gate is real: an invalid property in a synthesized template is an error."""
    out = example_synth(REPO / "environments/default.yaml").copy_to(tmp_path / "cdk.out")
    template_path = next(out.glob("*-storage.template.json"))
    template = json.loads(template_path.read_text())
    template["Resources"]["LustreFileSystem"]["Properties"]["StorageCapacty"] = 1200  # a typo
    template_path.write_text(json.dumps(template))
    result = _cli("check", str(out), cwd=tmp_path)
    # Not a value of the file: placed at the resource's section, but not the file's fault
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if "StorageCapacty" in line]
    assert line.startswith("storage.lustre: ") and "(cfn-lint E3002 at " in line, line
    assert "cfn-lint: 1 errors" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "node_modules/.bin/cdk").exists(), reason="run `make setup` first")
def test_pinned_cdk_cli_synthesizes_offline(tmp_path: Path) -> None:
    """`npx cdk synth` (the pinned CLI, through cdk.json) works with no AWS credentials."""
    out = tmp_path / "cdk.out"
    result = _cdk(
        "synth",
        "--quiet",
        "--output",
        str(out),
        "-c",
        f"environment={REPO / 'environments/eks.yaml'}",
    )
    assert result.returncode == 0, result.stderr
    assert check_assembly(out).ok
    config = load_environment(REPO / "environments/eks.yaml").config
    assert {p.name for p in out.glob("*.template.json")} == {
        f"hyperpod-eks-{area}.template.json" for area in expected_areas(config)
    }


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "node_modules/.bin/cdk").exists(), reason="run `make setup` first")
def test_pinned_cdk_cli_reports_a_bad_file_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    result = _cdk(
        "synth",
        "--quiet",
        "--output",
        str(tmp_path / "o"),
        "-c",
        f"environment={bad}",
    )
    assert result.returncode != 0
    assert f"{bad}:1 name: 'x': string should match pattern" in result.stderr
    assert "Traceback" not in result.stderr
    shutil.rmtree(tmp_path / "o", ignore_errors=True)


def test_plan_catches_a_file_system_replacement_before_deploy(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """Moving the private subnet replaces the subnet, and with it the FSx file system and the
    HyperPod cluster. The cluster keeps its name, and CloudFormation cannot replace a
    custom-named resource: refused (exit 3, even with --allow-replacement; without it the exit
    code is the same, `Plan.exit_code`'s unit tests), then the stateful replacement."""
    default = REPO / "environments/default.yaml"
    example_synth(default).copy_to(tmp_path / "base")  # `hyperpod-kit synth`'s, as deployed
    same = _cli("plan", str(default), "--baseline", str(tmp_path / "base"), cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert "0 to add, 0 to update, 0 to replace, 0 to remove" in same.stdout

    moved = tmp_path / "moved.yaml"
    moved.write_text(default.read_text().replace("10.0.128.0/17", "10.0.64.0/18"))
    result = _cli(
        "plan", str(moved), "--baseline", str(tmp_path / "base"), "--allow-replacement",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr  # no flag lets a refused change through
    flagged = [line for line in result.stdout.splitlines() if line.startswith("! ")]
    assert flagged[0].startswith(
        "! hyperpod-dev-cluster HyperPodCluster (AWS::SageMaker::Cluster) UPDATE REFUSED "
        "(stateful): ClusterName stays hyperpod-dev while the resource is replaced"
    )
    assert "VpcConfig refers to replaced NetworkPrivateSubnet" in flagged[0]
    # the new subnet's id and the new file system's are exports the stacks after them import
    exports = [line for line in flagged if " (export) UPDATE REFUSED: " in line]
    assert any(
        line.startswith("! hyperpod-dev-network Outputs.ExportsOutputRefNetworkPrivateSubnet")
        and "hyperpod-dev-cluster" in line
        and "hyperpod-dev-storage" in line
        for line in exports
    ), exports
    assert any(line.startswith("! hyperpod-dev-storage Outputs.") for line in exports), exports
    assert any(
        line.startswith(
            "! hyperpod-dev-storage LustreFileSystem (AWS::FSx::FileSystem) REPLACE (stateful): "
            "SubnetIds refers to replaced NetworkPrivateSubnet"
        )
        for line in flagged
    ), flagged
    assert "plan refused" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "moved.yaml"]  # wrote nothing


def test_plan_without_a_baseline_says_how_to_make_one(tmp_path: Path) -> None:
    result = _cli("plan", str(REPO / "environments/default.yaml"), "--baseline",
                  str(tmp_path / "none"), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert "no cloud assembly to compare with. Hint:" in result.stderr


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("manifest", "manifest.json: the assembly's manifest is not JSON (Expecting value"),
        ("template", "the template of hyperpod-dev-storage is missing"),
    ],
)
def test_plan_with_a_damaged_baseline_says_so_in_one_line(
    tmp_path: Path, damage: str, says: str
) -> None:
    """Checked before the synth: exit 2, one line naming the file, no traceback."""
    base = tmp_path / "base"
    shutil.copytree(GOLDEN / "default", base)
    artifacts = {
        t.name.removesuffix(".template.json"): {
            "type": "aws:cloudformation:stack", "properties": {"templateFile": t.name},
        }
        for t in base.glob("*.template.json")
    }  # fmt: skip
    (base / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    if damage == "manifest":
        (base / "manifest.json").write_text("<html>not an assembly</html>")
    else:
        (base / "hyperpod-dev-storage.template.json").unlink()
    result = _cli("plan", "-q", str(REPO / "environments/default.yaml"), "--baseline", str(base),
                  cwd=tmp_path)  # fmt: skip
    assert says in _one_line_error(result)


def test_plan_reads_people_and_groups_in_nested_stacks_and_refuses_with_exit_3(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """Studio profiles and partition gates live in nested stacks; the users file in an asset.
    A uid changed and the controller group renamed are refused (exit 3, whatever the flags);
    a person removed, with more compute nodes and a new person, is dangerous (exit 1)."""
    example = REPO / "environments/studio-slurm.yaml"
    example_synth(example).copy_to(tmp_path / "base")
    text = example.read_text()

    refused = tmp_path / "refused.yaml"
    refused.write_text(
        text.replace("{name: alice, uid: 10001}", "{name: alice, uid: 10011}").replace(
            "{name: controller, role: controller", "{name: head, role: controller"
        )
    )
    result = _cli("plan", str(refused), "--baseline", str(tmp_path / "base"), "--format",
                  "json", "--allow-replacement", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["exit_code"] == 3
    (alice,) = report["people"]
    assert (alice["name"], alice["action"], alice["uid_before"], alice["uid_after"]) == (
        "alice", "uid_changed", 10001, 10011,
    )  # fmt: skip
    assert alice["places"] == ["Studio partition", "Studio profile", "users file"]
    refusals = {(c["stack"].split("/")[-1], c["type"]) for c in report["changes"] if c["refused"]}
    assert ("hyperpod-studio-cluster", "AWS::SageMaker::Cluster") in refusals
    assert ("Users07", "AWS::SageMaker::UserProfile") in refusals  # alice's batch, nested
    cluster = next(c for c in report["changes"] if c["logical_id"] == "HyperPodCluster")
    assert cluster["why"][0].startswith("InstanceGroups[controller] renamed to head")
    assert "AWS or the nodes refuse" in result.stderr

    removed = tmp_path / "removed.yaml"
    removed.write_text(
        text.replace("  - {name: bob, uid: 10002, gid: 2000}\n", "")
        .replace("instance_type: ml.g5.8xlarge, instance_count: 2",
                 "instance_type: ml.g5.8xlarge, instance_count: 4")
        .replace("  - {name: carol", "  - {name: dave, uid: 10004}\n  - {name: carol")
    )  # fmt: skip
    result = _cli("plan", str(removed), "--baseline", str(tmp_path / "base"), "--format",
                  "markdown", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("**plan: ")
    assert "dangerous change(s)**" in lines[0]
    people = [line for line in lines if "| person `" in line]
    assert people[0].startswith("| ⚠️ | removed |  | person `bob` |")
    assert "plan cannot tell" in people[1] and "person `dave`" in people[1]
    assert any("InstanceCount increased (2 -> 4)" in line for line in lines)


GOLDEN = REPO / "tests" / "golden"
_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def expected_areas(config: EnvironmentConfig) -> list[str]:
    """The stacks an environment has: network, storage and cluster always; the rest by choice."""
    areas = ["network", "storage", "cluster"]
    areas += ["trainer"] if config.trainer.build_image else []
    accounting = config.orchestrator == "slurm" and config.cluster.slurm.accounting.enabled
    areas += ["accounting"] if accounting else []
    areas += ["eks", "eks-addons"] if config.orchestrator == "eks" else []
    areas += ["studio"] if config.studio.enabled else []
    areas += ["monitoring"] if config.monitoring.enabled else []
    prometheus = config.monitoring.prometheus
    observability = prometheus.enabled and (
        prometheus.workspace_arn is None or prometheus.grafana.enabled
    )
    areas += ["observability"] if observability else []
    return areas


def _compare_keys(example: str, out: Path, loaded: LoadedEnvironment) -> None:
    """The keys the constructs recorded for the example's properties equal the reviewed ones in
    tests/golden/<example>/keys.json, from which `registry_rules.json` is made (regenerate both
    with HYPERPOD_KIT_UPDATE_GOLDEN=1, then `python -m hyperpod_kit.config.facts.cfn_registry`)."""
    golden = GOLDEN / example / "keys.json"
    rows = [json.dumps(row) for row in keyed_properties(out, loaded)]
    produced = "[\n" + ",\n".join(rows) + "\n]\n"  # a row a line: reviewable diffs
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        golden.write_text(produced)
    assert golden.is_file() and golden.read_text() == produced, (
        f"{golden} differs from the keys the constructs recorded; regenerate it"
    )


def _compare_with_golden(example: str, out: Path) -> None:
    """Templates equal the reviewed ones in tests/golden/<example>/, asset hashes aside.

    A change to a template shows up in review as a diff of these files; regenerate them with
    HYPERPOD_KIT_UPDATE_GOLDEN=1 and read that diff (`hyperpod-kit plan` says which changes
    replace what).
    """
    folder = GOLDEN / example
    produced = {t.name for t in out.glob("*.template.json")}
    stale = sorted(g.name for g in folder.glob("*.template.json") if g.name not in produced)
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        for name in stale:
            (folder / name).unlink()
    else:
        assert not stale, f"golden files no stack produces any more: {stale}; regenerate them"
    for template in sorted(out.glob("*.template.json")):
        text = _ASSET_HASH.sub("<asset-hash>", template.read_text())
        normalized = json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
        golden = folder / template.name
        if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
            folder.mkdir(parents=True, exist_ok=True)
            golden.write_text(normalized)
        assert golden.is_file(), f"no golden file {golden}: run with HYPERPOD_KIT_UPDATE_GOLDEN=1"
        assert normalized == golden.read_text(), (
            f"{template.name} differs from {golden}: review the change, then regenerate with "
            "HYPERPOD_KIT_UPDATE_GOLDEN=1"
        )
