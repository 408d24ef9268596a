"""The plan matrix: every refused, replaced and recreated case of the update rules against a
baseline, nested stacks and people included, and ordinary changes passing with exit 0.

Each case builds two small cloud assemblies the way CDK writes them: a manifest, the stacks'
templates, asset manifests that name nested templates and the users file by their hash.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.plan import (
    EXIT_DANGEROUS,
    EXIT_OK,
    EXIT_REFUSED,
    Plan,
    PlanInputError,
    plan,
)

Stacks = dict[str, dict[str, Any]]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_assembly(
    folder: Path,
    stacks: Stacks,
    *,
    nested: dict[str, dict[str, dict[str, Any]]] | None = None,
    users: list[dict[str, Any]] | None = None,
) -> Path:
    """An assembly: `stacks` by name; `nested[parent][Name]` a nested stack of `parent` (a
    `NameNestedStack...` resource whose TemplateURL ends in the template's asset hash, with a
    DomainId parameter passed from the parent's Domain if it has one); `users` the users.json
    that the `cluster` stack uploads through a BucketDeployment."""
    folder.mkdir(parents=True)
    stacks = copy.deepcopy(stacks)
    artifacts: dict[str, Any] = {}
    files: dict[str, Any] = {}
    for parent, children in (nested or {}).items():
        for name, template in children.items():
            text = json.dumps(template)
            digest = _digest(text)
            path = f"{parent}{name}.nested.template.json"
            (folder / path).write_text(text)
            files[digest] = {"source": {"path": path, "packaging": "file"}}
            url = {"Fn::Join": ["", ["https://s3.example/", f"{digest}.json"]]}
            props: dict[str, Any] = {"TemplateURL": url}
            if "Domain" in stacks[parent]["Resources"]:
                props["Parameters"] = {"DomainId": {"Fn::GetAtt": ["Domain", "DomainId"]}}
            stacks[parent]["Resources"][f"{name}NestedStack{name}NestedStackResource1234"] = {
                "Type": "AWS::CloudFormation::Stack",
                "Properties": props,
            }
    if users is not None:
        text = json.dumps({"version": 1, "users": users})
        digest = _digest(text)
        (folder / f"asset.{digest}").mkdir()
        (folder / f"asset.{digest}" / "users.json").write_text(text)
        files[digest] = {"source": {"path": f"asset.{digest}", "packaging": "zip"}}
        stacks.setdefault("cluster", {"Resources": {}})["Resources"]["UsersUpload"] = {
            "Type": "Custom::CDKBucketDeployment",
            "Properties": {"SourceObjectKeys": [f"{digest}.zip"]},
        }
    for name, template in stacks.items():
        (folder / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": f"{name}.template.json"},
        }
    (folder / "all.assets.json").write_text(json.dumps({"version": "1", "files": files}))
    artifacts["all.assets"] = {
        "type": "cdk:asset-manifest",
        "properties": {"file": "all.assets.json"},
    }
    (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return folder


# --- the baseline: a Slurm cluster, FSx, EKS, a Studio domain with people in a nested stack ----


def _group(name: str, role: str = "Compute", count: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceGroupName": name,
        "InstanceType": "ml.g5.8xlarge" if role == "Compute" else "ml.m5.xlarge",
        "InstanceCount": count,
        "ExecutionRole": "arn:aws:iam::111122223333:role/r",
        "LifeCycleConfig": {"SourceS3Uri": "s3://b/lifecycle/aaa/", "OnCreate": "on_create.sh"},
        "SlurmConfig": {"NodeType": role},
        **extra,
    }


def _profile(name: str, uid: int) -> dict[str, Any]:
    return {
        "Type": "AWS::SageMaker::UserProfile",
        "DeletionPolicy": "Retain",
        "Properties": {
            "DomainId": {"Ref": "DomainId"},
            "UserProfileName": name,
            "UserSettings": {"CustomPosixUserConfig": {"Uid": uid, "Gid": 1001}},
        },
    }


def _batch(*people: tuple[str, int]) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "Partitions": {
            "Type": "Custom::StudioPartitions",
            "Properties": {
                "ServiceToken": "arn:aws:lambda:us-west-2:111122223333:function:f",
                "Users": [{"Name": n, "Uid": uid, "Gid": 1001} for n, uid in people],
            },
        }
    }
    for name, uid in people:
        resources[f"Profile{name}"] = _profile(name, uid)
    return {"Parameters": {"DomainId": {"Type": "String"}}, "Resources": resources}


def baseline() -> dict[str, Any]:
    """Everything a case may change: stacks, nested batches, the users file."""
    return {
        "stacks": {
            "cluster": {"Resources": {"HyperPodCluster": {
                "Type": "AWS::SageMaker::Cluster",
                "Properties": {
                    "ClusterName": "dev",
                    "InstanceGroups": [_group("controller", "Controller", 1),
                                       _group("login", "Login", 1), _group("gpu")],
                    "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}},
                    "Tags": [{"Key": "team", "Value": "ml"}],
                },
            }}},
            "storage": {"Resources": {"LustreFileSystem": {
                "Type": "AWS::FSx::FileSystem",
                "Properties": {
                    "FileSystemType": "LUSTRE", "StorageCapacity": 2400, "SubnetIds": ["s-1"],
                    "LustreConfiguration": {"DeploymentType": "PERSISTENT_2",
                                            "PerUnitStorageThroughput": 250,
                                            "MetadataConfiguration": {"Mode": "USER_PROVISIONED",
                                                                      "Iops": 3000}},
                },
            }}},
            "eks": {"Resources": {"EksCluster": {
                "Type": "AWS::EKS::Cluster",
                "Properties": {
                    "Name": "dev", "Version": "1.32", "RoleArn": "arn:aws:iam::1:role/eks",
                    "ResourcesVpcConfig": {"SubnetIds": ["s-1"]},
                    "AccessConfig": {"AuthenticationMode": "API"},
                },
            }}},
            "studio": {"Resources": {"Domain": {
                "Type": "AWS::SageMaker::Domain",
                "Properties": {"DomainName": "dev", "AuthMode": "IAM",
                               "AppNetworkAccessType": "VpcOnly", "VpcId": "vpc-1",
                               "SubnetIds": ["s-1"], "DefaultUserSettings": {}},
            }}},
        },
        "nested": {"studio": {"Users00": _batch(("alice", 10001)),
                              "Users07": _batch(("bob", 10002))}},
        "users": [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002},
                  {"name": "carol", "uid": 10003}],
    }  # fmt: skip


def _props(env: dict[str, Any], stack: str, logical: str) -> dict[str, Any]:
    props: dict[str, Any] = env["stacks"][stack]["Resources"][logical]["Properties"]
    return props


def _groups(env: dict[str, Any]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = _props(env, "cluster", "HyperPodCluster")["InstanceGroups"]
    return groups


def _run(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Plan:
    before = baseline()
    after = baseline()
    change(after)
    base = write_assembly(tmp_path / "base", before["stacks"], nested=before["nested"],
                          users=before["users"])  # fmt: skip
    new = write_assembly(tmp_path / "new", after["stacks"], nested=after["nested"],
                         users=after["users"])  # fmt: skip
    return plan(base, new)


def _by_id(result: Plan) -> dict[str, Any]:
    return {c.logical_id: c for c in result.changes}


# --- refused: no flag lets these pass (exit 3) ------------------------------------------------


def _fsx_shrinks(env: dict[str, Any]) -> None:
    _props(env, "storage", "LustreFileSystem")["StorageCapacity"] = 1200


def _metadata_iops_down(env: dict[str, Any]) -> None:
    meta = _props(env, "storage", "LustreFileSystem")["LustreConfiguration"]
    meta["MetadataConfiguration"]["Iops"] = 1500


def _eks_downgrade(env: dict[str, Any]) -> None:
    _props(env, "eks", "EksCluster")["Version"] = "1.31"


def _eks_skips_a_minor(env: dict[str, Any]) -> None:
    _props(env, "eks", "EksCluster")["Version"] = "1.34"


def _eks_auth_back(env: dict[str, Any]) -> None:
    _props(env, "eks", "EksCluster")["AccessConfig"]["AuthenticationMode"] = "API_AND_CONFIG_MAP"


def _node_type(env: dict[str, Any]) -> None:
    _groups(env)[1]["SlurmConfig"]["NodeType"] = "Compute"


def _controller_renamed(env: dict[str, Any]) -> None:
    _groups(env)[0]["InstanceGroupName"] = "head"


def _controller_removed(env: dict[str, Any]) -> None:
    del _groups(env)[0]


def _domain_network(env: dict[str, Any]) -> None:
    _props(env, "studio", "Domain")["AppNetworkAccessType"] = "PublicInternetOnly"


def _cluster_moves_under_its_name(env: dict[str, Any]) -> None:
    _props(env, "cluster", "HyperPodCluster")["VpcConfig"] = {"Subnets": ["s-2"]}


def _eks_logical_id_renamed(env: dict[str, Any]) -> None:
    resources = env["stacks"]["eks"]["Resources"]
    resources["EksCluster2"] = resources.pop("EksCluster")


REFUSED = {
    "fsx storage shrinks": (_fsx_shrinks, "LustreFileSystem",
                            "StorageCapacity decreased (2400 -> 1200): FSx only grows"),
    "metadata iops go down": (_metadata_iops_down, "LustreFileSystem",
                              "LustreConfiguration.MetadataConfiguration.Iops decreased"),
    "eks downgrade": (_eks_downgrade, "EksCluster", "Version downgraded (1.32 -> 1.31)"),
    "eks skips a minor version": (_eks_skips_a_minor, "EksCluster",
                                  "Version skips a minor version (1.32 -> 1.34)"),
    "eks authentication mode back": (_eks_auth_back, "EksCluster",
                                     "AccessConfig.AuthenticationMode moved back"),
    "slurm node type": (_node_type, "HyperPodCluster",
                        "InstanceGroups[login].SlurmConfig.NodeType changed (Login -> Compute)"),
    "controller renamed": (_controller_renamed, "HyperPodCluster",
                           "InstanceGroups[controller] renamed to head (a removal and an "
                           "addition): the Slurm controller group is renamed or removed"),
    "controller removed": (_controller_removed, "HyperPodCluster",
                           "InstanceGroups[controller] removed: the Slurm controller group"),
    "studio network access": (_domain_network, "Domain", "AppNetworkAccessType changed"),
    "replaced under its own name": (_cluster_moves_under_its_name, "HyperPodCluster",
                                    "ClusterName stays dev while the resource is replaced: a "
                                    "custom-named resource cannot be replaced"),
    "a new logical id, the same name": (_eks_logical_id_renamed, "EksCluster2",
                                        "name dev is still taken by eks EksCluster"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_change_the_service_refuses_exits_3_whatever_the_flags(tmp_path: Path, case: str) -> None:
    change, logical, why = REFUSED[case]
    result = _run(tmp_path, change)
    refused = _by_id(result)[logical]
    assert refused.action == "refuse" and refused.refused and refused.dangerous
    assert refused.why[0].startswith(why), refused.why
    assert "UPDATE REFUSED" in refused.render()
    assert result.exit_code() == EXIT_REFUSED
    assert result.exit_code(allow_replacement=True) == EXIT_REFUSED
    assert result.ordered()[0] is refused  # refused first


def test_the_controller_renamed_is_refused_not_an_update_of_one_group(tmp_path: Path) -> None:
    """The rename is a removal plus an addition: refused for the controller, and the group
    that takes its place is not compared with the old one as if it were the same."""
    change = _by_id(_run(tmp_path, _controller_renamed))["HyperPodCluster"]
    assert [e.kind for e in change.effects] == ["refused"]
    assert change.effects[0].where == "InstanceGroups[controller]"


# --- people -------------------------------------------------------------------------------------


def _uid_changed(env: dict[str, Any]) -> None:
    env["nested"]["studio"]["Users00"] = _batch(("alice", 10011))
    env["users"][0]["uid"] = 10011


def test_a_uid_changed_in_a_nested_stack_is_refused(tmp_path: Path) -> None:
    """The Studio profile and the partitions gate live in a nested stack; the nodes keep the old
    uid, so plan refuses (exit 3) whatever the flags."""
    result = _run(tmp_path, _uid_changed)
    (person,) = result.people
    assert (person.name, person.action, person.uid_before, person.uid_after) == (
        "alice", "uid_changed", 10001, 10011,
    )  # fmt: skip
    assert person.places == ("Studio partition", "Studio profile", "users file")
    assert "Hint: keep uid 10001" in person.render()
    nested = {(c.stack, c.logical_id): c for c in result.changes}
    profile = nested[("studio/Users00", "Profilealice")]
    assert profile.refused
    assert profile.why[0].startswith("UserSettings.CustomPosixUserConfig.Uid changed (10001 ->")
    assert nested[("studio/Users00", "Partitions")].refused
    assert result.exit_code(allow_replacement=True) == EXIT_REFUSED


def test_a_uid_that_was_someone_elses_is_refused(tmp_path: Path) -> None:
    def reuse(env: dict[str, Any]) -> None:
        env["nested"]["studio"]["Users07"] = _batch(("dave", 10002))
        env["users"][1] = {"name": "dave", "uid": 10002}

    result = _run(tmp_path, reuse)
    actions = {p.name: p.action for p in result.people}
    assert actions == {"bob": "removed", "dave": "uid_reused"}
    dave = next(p for p in result.people if p.name == "dave")
    assert "uid 10002 was bob's in the baseline" in dave.note
    assert result.exit_code(allow_replacement=True) == EXIT_REFUSED


def test_a_removed_person_is_dangerous_and_shown(tmp_path: Path) -> None:
    def remove_bob(env: dict[str, Any]) -> None:
        del env["nested"]["studio"]["Users07"]
        del env["users"][1]

    result = _run(tmp_path, remove_bob)
    (bob,) = result.people
    assert (bob.name, bob.action, bob.uid_before) == ("bob", "removed", 10002)
    removed = {(c.stack, c.logical_id): c.action for c in result.changes}
    assert removed[("studio/Users07", "Profilebob")] == "remove"  # read from the nested stack
    assert removed[("studio", "Users07NestedStackUsers07NestedStackResource1234")] == "remove"
    assert result.exit_code() == EXIT_DANGEROUS
    assert result.exit_code(allow_replacement=True) == EXIT_OK
    assert "- person bob REMOVED (uid 10002;" in result.render_text()


def test_a_person_only_in_the_users_file_counts_too(tmp_path: Path) -> None:
    def remove_carol(env: dict[str, Any]) -> None:
        del env["users"][2]

    (carol,) = _run(tmp_path, remove_carol).people
    assert (carol.name, carol.action, carol.places) == ("carol", "removed", ("users file",))


# --- replaced and recreated: exit 1, --allow-replacement makes it 0 ---------------------------


def _deployment_type(env: dict[str, Any]) -> None:
    lustre = _props(env, "storage", "LustreFileSystem")["LustreConfiguration"]
    lustre["DeploymentType"] = "PERSISTENT_1"


def _domain_renamed(env: dict[str, Any]) -> None:
    _props(env, "studio", "Domain")["DomainName"] = "other"


def _group_renamed(env: dict[str, Any]) -> None:
    _groups(env)[2]["InstanceGroupName"] = "gpu2"


def _group_removed(env: dict[str, Any]) -> None:
    del _groups(env)[2]


def _instance_type(env: dict[str, Any]) -> None:
    _groups(env)[2]["InstanceType"] = "ml.g6.8xlarge"


def _fewer_nodes(env: dict[str, Any]) -> None:
    _groups(env)[2]["InstanceCount"] = 1


def _eks_renamed(env: dict[str, Any]) -> None:
    _props(env, "eks", "EksCluster")["Name"] = "other"


DANGEROUS = {
    "fsx deployment type": (_deployment_type, "LustreFileSystem", "replace",
                            "LustreConfiguration.DeploymentType changed"),
    "eks cluster renamed": (_eks_renamed, "EksCluster", "replace", "Name changed (dev -> other)"),
    "domain renamed": (_domain_renamed, "Domain", "replace", "DomainName changed"),
    "compute group renamed": (_group_renamed, "HyperPodCluster", "update",
                              "InstanceGroups[gpu] renamed to gpu2 (a removal and an addition): "
                              "the group is renamed or removed: its nodes are deleted"),
    "compute group removed": (_group_removed, "HyperPodCluster", "update",
                              "InstanceGroups[gpu] removed: the group is renamed or removed"),
    "instance type": (_instance_type, "HyperPodCluster", "update",
                      "InstanceGroups[gpu].InstanceType changed (ml.g5.8xlarge -> ml.g6.8xlarge)"),
    "fewer nodes": (_fewer_nodes, "HyperPodCluster", "update",
                    "InstanceGroups[gpu].InstanceCount decreased (2 -> 1)"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DANGEROUS))
def test_replaced_or_recreated_exits_1_unless_allowed(tmp_path: Path, case: str) -> None:
    change, logical, action, why = DANGEROUS[case]
    result = _run(tmp_path, change)
    dangerous = _by_id(result)[logical]
    assert dangerous.action == action and dangerous.dangerous and not dangerous.refused
    assert dangerous.why[0].startswith(why), dangerous.why
    assert result.exit_code() == EXIT_DANGEROUS
    assert result.exit_code(allow_replacement=True) == EXIT_OK


def test_a_replacement_spreads_into_nested_stacks_through_their_parameters(
    tmp_path: Path,
) -> None:
    """A new domain has a new id: each profile's DomainId (create-only) comes from the parent
    as a nested-stack parameter, so every profile is replaced with it."""
    by_key = {(c.stack, c.logical_id): c for c in _run(tmp_path, _domain_renamed).changes}
    alice = by_key[("studio/Users00", "Profilealice")]
    assert alice.action == "replace"
    assert alice.why == ("DomainId refers to replaced Domain",)


# --- ordinary changes pass ----------------------------------------------------------------------


def _ordinary(env: dict[str, Any]) -> None:
    _groups(env)[2]["InstanceCount"] = 4  # more nodes
    _groups(env).append(_group("cpu", count=2))  # a new group
    _props(env, "cluster", "HyperPodCluster")["Tags"].append({"Key": "cost", "Value": "x"})
    _props(env, "storage", "LustreFileSystem")["StorageCapacity"] = 4800  # FSx grows
    _props(env, "eks", "EksCluster")["Version"] = "1.33"  # one minor version up
    env["nested"]["studio"]["Users03"] = _batch(("erin", 10005))  # a new person
    env["users"].append({"name": "erin", "uid": 10005})


def test_ordinary_changes_pass_with_exit_0(tmp_path: Path) -> None:
    result = _run(tmp_path, _ordinary)
    assert result.exit_code() == EXIT_OK, result.render_text()
    assert not result.dangerous
    cluster = _by_id(result)["HyperPodCluster"]
    assert cluster.action == "update"
    assert "InstanceGroups[gpu].InstanceCount increased (2 -> 4): more nodes" in cluster.why
    assert "Tags changed: tags" in cluster.why
    assert _by_id(result)["EksCluster"].why[0].startswith("Version upgraded (1.32 -> 1.33): one")
    (erin,) = result.people
    assert (erin.name, erin.action) == ("erin", "added")
    assert "plan cannot tell" in erin.note  # re-added or new: synth records no removed people


def test_lifecycle_scripts_apply_to_new_nodes_only(tmp_path: Path) -> None:
    def new_scripts(env: dict[str, Any]) -> None:
        for group in _groups(env):
            group["LifeCycleConfig"]["SourceS3Uri"] = "s3://b/lifecycle/bbb/"

    result = _run(tmp_path, new_scripts)
    cluster = _by_id(result)["HyperPodCluster"]
    assert {e.kind for e in cluster.effects} == {"new_nodes_only"}
    assert "nodes running now keep what they ran" in cluster.why[0]
    assert result.exit_code() == EXIT_OK


# --- output ---------------------------------------------------------------------------------


def test_json_has_stable_keys_and_markdown_a_summary_and_a_table(tmp_path: Path) -> None:
    result = _run(tmp_path, _uid_changed)
    data = json.loads(json.dumps(result.to_json()))
    assert list(data) == [
        "format", "exit_code", "summary", "changes", "people", "rules_checked", "lock",
    ]  # fmt: skip
    assert data["exit_code"] == EXIT_REFUSED
    assert list(data["changes"][0]) == [
        "stack", "logical_id", "type", "action", "label", "stateful", "retained", "refused",
        "dangerous", "why", "effects",
    ]  # fmt: skip
    assert list(data["changes"][0]["effects"][0]) == [
        "kind",
        "where",
        "what",
        "why",
        "source",
        "url",
    ]
    assert data["people"][0]["action"] == "uid_changed"
    markdown = result.render_markdown().splitlines()
    assert markdown[0].startswith("**plan: 3 change(s) AWS or the nodes refuse**")
    assert markdown[2] == "| | change | stack | resource | type | why |"
    assert any("person `alice`" in line for line in markdown)


MARKDOWN_GOLDEN = Path(__file__).resolve().parents[1] / "data" / "plan" / "replace-and-refuse.md"


def test_markdown_of_one_replacement_and_one_refused_change_equals_the_reviewed_one(
    tmp_path: Path,
) -> None:
    """What `plan --format markdown` prints (the pull-request comment) for FSx shrinking (refused)
    and a bucket renamed (replaced), compared verbatim with tests/data/plan/replace-and-refuse.md;
    regenerate with HYPERPOD_KIT_UPDATE_GOLDEN=1 and read the diff."""
    fsx = baseline()["stacks"]["storage"]["Resources"]["LustreFileSystem"]
    bucket = {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain",
              "Properties": {"BucketName": "team-data"}}  # fmt: skip
    before = {"storage": {"Resources": {"LustreFileSystem": fsx, "DataBucket": bucket}}}
    after = copy.deepcopy(before)
    after["storage"]["Resources"]["LustreFileSystem"]["Properties"]["StorageCapacity"] = 1200
    after["storage"]["Resources"]["DataBucket"]["Properties"]["BucketName"] = "team-data-2"
    result = plan(write_assembly(tmp_path / "a", before), write_assembly(tmp_path / "b", after))
    assert [c.action for c in result.ordered()] == ["refuse", "replace"]
    text = result.render_markdown() + "\n"  # as the CLI prints it
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        MARKDOWN_GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        MARKDOWN_GOLDEN.write_text(text, encoding="utf-8")
    assert text == MARKDOWN_GOLDEN.read_text(encoding="utf-8"), "review, regenerate the golden"


def test_text_puts_refused_first_then_dangerous(tmp_path: Path) -> None:
    def both(env: dict[str, Any]) -> None:
        _fsx_shrinks(env)
        _group_removed(env)
        _props(env, "cluster", "HyperPodCluster")["Tags"] = []

    lines = _run(tmp_path, both).render_text().splitlines()
    assert lines[0].startswith("! storage LustreFileSystem (AWS::FSx::FileSystem) UPDATE REFUSED")
    assert lines[1].startswith(
        "! cluster HyperPodCluster (AWS::SageMaker::Cluster) NODES RECREATED"
    )


# --- a baseline plan cannot read: one line, never a traceback ---------------------------------


def _damage_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text("{not json")


def _lose_a_template(folder: Path) -> None:
    (folder / "storage.template.json").unlink()


def _lose_a_nested_template(folder: Path) -> None:
    next(folder.glob("*.nested.template.json")).unlink()


def _forget_a_nested_asset(folder: Path) -> None:
    (folder / "all.assets.json").write_text(json.dumps({"files": {}}))


def _damage_a_template(folder: Path) -> None:
    (folder / "eks.template.json").write_text("[1, 2")


def _lose_the_users_file(folder: Path) -> None:
    users = next(folder.glob("asset.*"))
    (users / "users.json").unlink()
    users.rmdir()


def _damage_the_users_file(folder: Path) -> None:
    (next(folder.glob("asset.*")) / "users.json").write_text("{")


def _a_resource_without_type(folder: Path) -> None:
    (folder / "eks.template.json").write_text(json.dumps({"Resources": {"X": {"Properties": {}}}}))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_damage_manifest, "manifest.json: the assembly's manifest is not JSON"),
        (_lose_a_template, "storage.template.json: the template of storage is missing"),
        (_lose_a_nested_template, "the template of studio/Users0"),
        (_forget_a_nested_asset, "nested stack studio/Users0"),
        (_damage_a_template, "eks.template.json: the template of eks is not JSON"),
        (_a_resource_without_type, "eks.template.json: resource X of eks has no Type"),
        (_lose_the_users_file, ": an asset that cluster uploads is missing"),
        (_damage_the_users_file, "users.json: the users file of cluster is not JSON"),
    ],
)
def test_a_damaged_baseline_is_one_line(
    tmp_path: Path, damage: Callable[[Path], None], says: str
) -> None:
    env = baseline()
    base = write_assembly(tmp_path / "base", env["stacks"], nested=env["nested"],
                          users=env["users"])  # fmt: skip
    new = write_assembly(tmp_path / "new", env["stacks"], nested=env["nested"],
                         users=env["users"])  # fmt: skip
    damage(base)
    with pytest.raises(PlanInputError) as error:
        plan(base, new)
    assert says in str(error.value)
    assert "\n" not in str(error.value)


def test_no_baseline_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PlanInputError, match="no such folder"):
        plan(tmp_path / "none", tmp_path / "none")


def test_the_exit_codes_are_documented_where_users_look() -> None:
    from hyperpod_kit.cli import main as cli

    sub = next(a for a in cli._parser()._actions if a.dest == "command")
    help_text = sub.choices["plan"].format_help()  # type: ignore[attr-defined]
    for code, says in [
        (EXIT_OK, "nothing dangerous"),
        (EXIT_DANGEROUS, "something stateful replaced or removed, nodes recreated, or people"),
        (2, "bad input"),
        (EXIT_REFUSED, "a change AWS refuses"),
    ]:
        assert f"  {code}  {says}" in help_text
    assert "--allow-replacement turns this into 0" in help_text
    assert "--format {text,json,markdown}" in help_text
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "exit 3 when AWS or the nodes would refuse a change" in readme
