"""`plan`: offline comparison of two assemblies, replacements from create-only properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.plan import PlanInputError, create_only_properties, plan


def _assembly(folder: Path, stacks: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    artifacts = {}
    for name, template in stacks.items():
        (folder / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{name}.template.json"},
        }
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder


def _bucket(name: str, **extra: Any) -> dict[str, Any]:
    return {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": name}, **extra}


def test_create_only_properties_come_from_the_registry_schema() -> None:
    assert "/properties/SubnetIds" in create_only_properties("AWS::FSx::FileSystem")
    assert "/properties/BucketName" in create_only_properties("AWS::S3::Bucket")
    assert create_only_properties("AWS::Nope::Unknown") == ()  # nothing known to replace it


def test_create_only_change_replaces_and_other_changes_update(tmp_path: Path) -> None:
    base = _assembly(tmp_path / "a", {"s": {"Resources": {
        "Data": _bucket("one"), "Logs": _bucket("logs"),
    }}})  # fmt: skip
    logs = _bucket("logs")
    logs["Properties"]["VersioningConfiguration"] = {"Status": "Enabled"}
    new = _assembly(tmp_path / "b", {"s": {"Resources": {"Data": _bucket("two"), "Logs": logs}}})
    result = plan(base, new)
    by_id = {c.logical_id: c for c in result.changes}
    assert by_id["Data"].action == "replace" and by_id["Data"].dangerous
    assert by_id["Data"].why == ("BucketName changed (one -> two)",)
    assert by_id["Logs"].action == "update" and not by_id["Logs"].dangerous
    assert by_id["Logs"].why == ("VersioningConfiguration",)
    assert result.changes[0].logical_id == "Data"  # dangerous changes first
    assert "1 to update, 1 to replace" in result.summary()


def test_identical_assemblies_plan_nothing(tmp_path: Path) -> None:
    stacks = {"s": {"Resources": {"Data": _bucket("one")}}}
    assert plan(_assembly(tmp_path / "a", stacks), _assembly(tmp_path / "b", stacks)).changes == []


def test_removal_is_dangerous_and_says_whether_data_is_retained(tmp_path: Path) -> None:
    base = _assembly(tmp_path / "a", {"s": {"Resources": {
        "Kept": _bucket("k", DeletionPolicy="Retain"), "Gone": _bucket("g"),
    }}})  # fmt: skip
    new = _assembly(tmp_path / "b", {"s": {"Resources": {"Other": _bucket("o")}}})
    by_id = {c.logical_id: c for c in plan(base, new).changes}
    assert by_id["Kept"].action == by_id["Gone"].action == "remove"
    assert by_id["Kept"].retained and not by_id["Gone"].retained
    assert "orphaned, not deleted" in by_id["Kept"].render()
    assert by_id["Other"].action == "add" and not by_id["Other"].dangerous


def test_replacement_spreads_through_refs_and_exports(tmp_path: Path) -> None:
    """A replaced subnet replaces the file system in another stack that imports it."""

    def network(cidr: str) -> dict[str, Any]:
        return {
            "Resources": {"Subnet": {"Type": "AWS::EC2::Subnet",
                                     "Properties": {"VpcId": "vpc-1", "CidrBlock": cidr}}},
            "Outputs": {"Out": {"Value": {"Ref": "Subnet"}, "Export": {"Name": "net:Subnet"}}},
        }  # fmt: skip

    storage = {"Resources": {
        "Fs": {"Type": "AWS::FSx::FileSystem", "Properties": {
            "FileSystemType": "LUSTRE", "SubnetIds": [{"Fn::ImportValue": "net:Subnet"}]}},
        "Param": {"Type": "AWS::SSM::Parameter", "Properties": {
            "Type": "String", "Value": {"Fn::ImportValue": "net:Subnet"}}},
    }}  # fmt: skip
    base = _assembly(tmp_path / "a", {"net": network("10.0.0.0/24"), "sto": storage})
    new = _assembly(tmp_path / "b", {"net": network("10.0.1.0/24"), "sto": storage})
    by_id = {c.logical_id: c for c in plan(base, new).changes}
    assert by_id["Subnet"].action == "replace"
    assert by_id["Fs"].action == "replace" and by_id["Fs"].dangerous
    assert by_id["Fs"].why == ("SubnetIds refers to replaced Subnet",)
    assert "Param" not in by_id  # Value is not create-only: CloudFormation updates it in place


def test_type_change_is_a_replacement(tmp_path: Path) -> None:
    base = _assembly(tmp_path / "a", {"s": {"Resources": {"X": _bucket("x")}}})
    new = _assembly(
        tmp_path / "b",
        {
            "s": {
                "Resources": {
                    "X": {
                        "Type": "AWS::SSM::Parameter",
                        "Properties": {"Type": "String", "Value": "v"},
                    }
                }
            }
        },
    )
    (change,) = plan(base, new).changes
    assert change.action == "replace" and change.why == ("type was AWS::S3::Bucket",)


# --- the HyperPod cluster: paths through instance groups -----------------------------------------


def _group(name: str, itype: str = "ml.p5.48xlarge", node_type: str = "Compute") -> dict[str, Any]:
    return {
        "InstanceGroupName": name,
        "InstanceType": itype,
        "InstanceCount": 2,
        "ExecutionRole": "arn:aws:iam::111122223333:role/r",
        "SlurmConfig": {"NodeType": node_type},
    }


def _cluster(*groups: dict[str, Any], orchestrator: dict[str, Any] | None = None) -> dict[str, Any]:
    props = {
        "ClusterName": "dev",
        "InstanceGroups": list(groups),
        "Orchestrator": orchestrator or {"Slurm": {"SlurmConfigStrategy": "Managed"}},
    }
    return {
        "Resources": {"HyperPodCluster": {"Type": "AWS::SageMaker::Cluster", "Properties": props}}
    }


def _plan_clusters(tmp_path: Path, before: dict[str, Any], after: dict[str, Any]) -> list[Any]:
    base = _assembly(tmp_path / "a", {"c": before})
    new = _assembly(tmp_path / "b", {"c": after})
    return plan(base, new).changes


def test_instance_type_of_a_group_recreates_its_nodes(tmp_path: Path) -> None:
    """cfn-lint 1.58's schema no longer marks instance-group fields create-only; our table says
    what HyperPod does: the group's nodes are replaced by nodes of the new type."""
    (change,) = _plan_clusters(
        tmp_path, _cluster(_group("gpu")), _cluster(_group("gpu", "ml.p5e.48xlarge"))
    )
    assert change.action == "update" and change.dangerous and change.nodes_recreated
    assert change.label == "NODES RECREATED"
    assert change.why == (
        "InstanceGroups[gpu].InstanceType changed (ml.p5.48xlarge -> ml.p5e.48xlarge): every "
        "node of the group is replaced by one of the new type",
    )


def test_reordering_or_adding_groups_is_an_update(tmp_path: Path) -> None:
    """Groups are paired by name: a moved group is the same group; a new one is an update."""
    before = _cluster(_group("a"), _group("b", "ml.g5.8xlarge"))
    after = _cluster(_group("b", "ml.g5.8xlarge"), _group("a"), _group("c", "ml.g6.8xlarge"))
    (change,) = _plan_clusters(tmp_path, before, after)
    assert change.action == "update" and not change.dangerous


def test_node_type_change_is_refused(tmp_path: Path) -> None:
    """NodeType is not create-only in the schema, but HyperPod refuses to change it: plan says
    so before CloudFormation fails half-way."""
    (change,) = _plan_clusters(
        tmp_path, _cluster(_group("x", node_type="Login")), _cluster(_group("x"))
    )
    assert change.action == "refuse" and change.dangerous
    assert "InstanceGroups[x].SlurmConfig.NodeType changed" in change.why[0]
    assert "UPDATE REFUSED" in change.render()


def test_switching_orchestrator_replaces_the_cluster(tmp_path: Path) -> None:
    eks = {"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:111122223333:cluster/x"}}
    (change,) = _plan_clusters(
        tmp_path, _cluster(_group("g")), _cluster(_group("g"), orchestrator=eks)
    )
    # Orchestrator.Eks is create-only, and the cluster keeps its name: CloudFormation cannot
    # replace a custom-named resource, so the update is refused (a new ClusterName would do).
    assert change.action == "refuse"
    assert change.why[0].startswith("ClusterName stays dev while the resource is replaced")
    assert [e.kind for e in change.effects] == ["refused", "replace"]
    assert "Orchestrator.Eks changed" in change.why[1]


# --- a baseline plan cannot read as what it says ----------------------------------------------


@pytest.mark.parametrize(
    ("groups", "where", "what"),
    [
        ("gpu", "InstanceGroups", 'is a string ("gpu"), not a list'),
        ({"gpu": 1}, "InstanceGroups", 'is an object ({"gpu": 1}), not a list'),
        (["gpu"], "InstanceGroups[0]", 'is a string ("gpu"), not an object'),
        ([{"InstanceGroupName": "gpu", "SlurmConfig": "Compute"}], "InstanceGroups[0].SlurmConfig",
         'is a string ("Compute"), not an object'),
    ],
)  # fmt: skip
def test_a_malformed_baseline_is_refused_naming_the_file_and_the_json_path(
    tmp_path: Path, groups: Any, where: str, what: str
) -> None:
    """A cluster whose InstanceGroups is a string was planned as an update (no groups on one
    side): now it is bad input, with the template and the JSON path."""
    broken = _cluster(_group("gpu"))
    broken["Resources"]["HyperPodCluster"]["Properties"]["InstanceGroups"] = groups
    base = _assembly(tmp_path / "a", {"c": broken})
    new = _assembly(tmp_path / "b", {"c": _cluster(_group("gpu"))})
    with pytest.raises(PlanInputError) as error:
        plan(base, new)
    assert str(error.value) == (
        f"{base / 'c.template.json'}: Resources.HyperPodCluster.Properties.{where} {what} (stack c)"
    )


def test_functions_and_absent_properties_are_not_malformed(tmp_path: Path) -> None:
    """The good neighbours: a CloudFormation function where a list goes, and a property left
    out, are read as before (nothing to compare inside them)."""
    before = _cluster(_group("gpu"))
    props = before["Resources"]["HyperPodCluster"]["Properties"]
    props["InstanceGroups"] = {"Fn::If": ["c", [_group("gpu")], []]}
    props.pop("Orchestrator")
    (change,) = _plan_clusters(tmp_path, before, _cluster(_group("gpu")))
    assert change.logical_id == "HyperPodCluster"


def test_plan_command_refuses_a_malformed_baseline_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 before anything is synthesized (the baseline is read first)."""
    from hyperpod_kit.cli import main as cli
    from tests.conftest import REPO

    broken = _cluster(_group("gpu"))
    broken["Resources"]["HyperPodCluster"]["Properties"]["InstanceGroups"] = "gpu"
    base = _assembly(tmp_path / "a", {"c": broken})
    code = cli.main(["plan", str(REPO / "environments" / "default.yaml"), "--baseline",
                     str(base), "-q"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        f"{base / 'c.template.json'}: Resources.HyperPodCluster.Properties.InstanceGroups is a "
        'string ("gpu"), not a list (stack c). Hint: synthesize the baseline again.\n'
    )
