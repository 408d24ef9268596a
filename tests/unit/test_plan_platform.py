"""`plan` on the 2026 cluster features: what each change does to running nodes.

The same small assemblies as the plan matrix (tests/unit/test_plan_matrix.py); each case changes
one property of the cluster the way synth writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.plan import EXIT_DANGEROUS, EXIT_OK, EXIT_REFUSED, Change, Plan
from tests.unit.test_plan_matrix import _by_id, _groups, _props, _run

ALARMS = [
    {"AlarmName": "dev-lifecycle-script-failures"},
    {"AlarmName": "dev-node-check-failures"},
    {"AlarmName": "dev-node-health-events"},
]


def _gpu(env: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in _groups(env) if g["InstanceGroupName"] == "gpu")


def _cluster_change(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Any:
    return _by_id(_run(tmp_path, change))["HyperPodCluster"]


def _run_both(
    tmp_path: Path,
    before: Callable[[dict[str, Any]], None],
    after: Callable[[dict[str, Any]], None],
) -> Plan:
    """A plan from a baseline changed by `before` to the same changed by `after` too."""
    from hyperpod_kit.plan import plan
    from tests.unit.test_plan_matrix import baseline, write_assembly

    old, new = baseline(), baseline()
    before(old)
    before(new)
    after(new)
    base = write_assembly(tmp_path / "b", old["stacks"], nested=old["nested"], users=old["users"])
    cand = write_assembly(tmp_path / "c", new["stacks"], nested=new["nested"], users=new["users"])
    return plan(base, cand)


def _on_eks(env: dict[str, Any]) -> None:
    """The baseline's cluster orchestrated by EKS: an AMI release and batches are EKS's alone."""
    cluster = _by_id_props(env)
    cluster["Orchestrator"] = {"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:1:cluster/dev"}}
    for group in cluster["InstanceGroups"]:
        group.pop("SlurmConfig", None)


def _by_id_props(env: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = env["stacks"]["cluster"]["Resources"]["HyperPodCluster"]["Properties"]
    return props


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        for c in changes:
            c(env)

    return change


def _pinned(
    version: str, *, batch: dict[str, Any] | None = None
) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        gpu = _gpu(env)
        gpu["ImageReleaseVersion"] = version
        if batch is not None:
            gpu["ScheduledUpdateConfig"] = {
                "ScheduleExpression": "cron(0 3 ? * SUN *)",
                "DeploymentConfig": {
                    "RollingUpdatePolicy": {"MaximumBatchSize": batch},
                    "WaitIntervalInSeconds": 300,
                    "AutoRollbackConfiguration": ALARMS,
                },
            }

    return change


def test_an_ami_release_change_is_a_rolling_update_in_the_groups_batches(tmp_path: Path) -> None:
    result = _run_both(
        tmp_path,
        _both(_on_eks, _pinned("1.2.3", batch={"Type": "INSTANCE_COUNT", "Value": 2})),
        _pinned("1.3.0", batch={"Type": "INSTANCE_COUNT", "Value": 2}),
    )
    cluster = _by_id(result)["HyperPodCluster"]
    assert cluster.label == "ROLLING AMI UPDATE" and cluster.dangerous
    (effect,) = cluster.effects
    assert effect.kind == "rolling_update"
    assert effect.render() == (
        "InstanceGroups[gpu].ImageReleaseVersion changed (1.2.3 -> 1.3.0): rolling AMI update of "
        "group gpu in batches of 2 node(s), 300 s between batches, rolled back if any of 3 "
        "alarms fires; jobs on each batch's nodes end; --requeue and auto-resume jobs restart "
        "from their last checkpoint"
    )
    assert result.exit_code() == EXIT_DANGEROUS
    assert result.exit_code(allow_replacement=True) == EXIT_OK
    assert result.counts()["rolling_updates"] == 1


def test_pinning_an_ami_for_the_first_time_rolls_it_out_in_default_batches(
    tmp_path: Path,
) -> None:
    (effect,) = _by_id(_run_both(tmp_path, _on_eks, _pinned("1.2.3")))["HyperPodCluster"].effects
    assert effect.kind == "rolling_update"
    assert (
        "rolling AMI update of group gpu in batches of HyperPod's default size, no rollback "
        "alarms" in effect.why
    )


def test_a_percentage_batch_is_said_as_one(tmp_path: Path) -> None:
    result = _run_both(
        tmp_path,
        _both(_on_eks, _pinned("1.2.3", batch={"Type": "CAPACITY_PERCENTAGE", "Value": 25})),
        _pinned("1.2.4", batch={"Type": "CAPACITY_PERCENTAGE", "Value": 25}),
    )
    (effect,) = _by_id(result)["HyperPodCluster"].effects
    assert "in batches of 25%" in effect.why


def _image(ami: str) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        _gpu(env)["ImageId"] = ami

    return change


def test_a_slurm_groups_new_ami_takes_the_whole_group_at_once(tmp_path: Path) -> None:
    """A Slurm group has no batches (AWS updates in batches on EKS clusters only): its new AMI
    (an image of its own: a Slurm group pins no release) is said as the whole group at once."""
    result = _run_both(tmp_path, _image("ami-0123456789abcdef0"), _image("ami-0fedcba987654321f"))
    cluster = _by_id(result)["HyperPodCluster"]
    assert cluster.label == "ROLLING AMI UPDATE" and cluster.dangerous
    (effect,) = cluster.effects
    assert effect.render() == (
        "InstanceGroups[gpu].ImageId changed (ami-0123456789abcdef0 -> ami-0fedcba987654321f): "
        "AMI update of group gpu, all of its nodes at once (one batch: AWS updates in batches on "
        "EKS clusters only); jobs on each batch's nodes end; --requeue and auto-resume jobs "
        "restart from their last checkpoint"
    )


def _labels(value: str) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        _gpu(env)["KubernetesConfig"] = {"Labels": {"example.com/pool": value}}

    return change


def test_a_label_change_is_reconciled_on_running_nodes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, _labels("a"), _labels("b"))
    cluster = _by_id(result)["HyperPodCluster"]
    (effect,) = cluster.effects
    assert (effect.kind, effect.where) == ("safe", "InstanceGroups[gpu].KubernetesConfig.Labels")
    assert "HyperPod reconciles the labels on the group's running nodes" in effect.why
    assert result.exit_code() == EXIT_OK


def _capacity(kind: str) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        _gpu(env)["CapacityRequirements"] = {kind: {}}

    return change


def test_a_capacity_change_applies_to_nodes_provisioned_later(tmp_path: Path) -> None:
    result = _run_both(tmp_path, _capacity("Spot"), _capacity("OnDemand"))
    (effect,) = _by_id(result)["HyperPodCluster"].effects
    assert effect.kind == "new_nodes_only"
    assert "nodes running now keep the capacity they were launched with" in effect.why
    assert result.exit_code() == EXIT_OK


def _continuous(env: dict[str, Any]) -> None:
    props = _props(env, "cluster", "HyperPodCluster")
    props["NodeProvisioningMode"] = "Continuous"
    del props["Orchestrator"]["Slurm"]["SlurmConfigStrategy"]


def test_turning_continuous_provisioning_on_is_safe_and_flags_the_strategy(
    tmp_path: Path,
) -> None:
    cluster = _cluster_change(tmp_path, _continuous)
    kinds = {e.where: e.kind for e in cluster.effects}
    assert kinds == {
        "NodeProvisioningMode": "safe",
        "Orchestrator.Slurm.SlurmConfigStrategy": "safe",
    }
    strategy = next(e for e in cluster.effects if e.where.startswith("Orchestrator"))
    assert "a switch away from Managed" in strategy.why


def test_turning_continuous_provisioning_off_is_refused(tmp_path: Path) -> None:
    def back(env: dict[str, Any]) -> None:
        del _props(env, "cluster", "HyperPodCluster")["NodeProvisioningMode"]

    result = _run_both(tmp_path, _continuous, back)
    cluster = _by_id(result)["HyperPodCluster"]
    assert cluster.action == "refuse"
    (effect,) = cluster.effects
    assert effect.render().startswith("NodeProvisioningMode removed: the API takes Continuous")
    assert result.exit_code(allow_replacement=True) == EXIT_REFUSED


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("InstanceRequirements", {"InstanceTypes": ["ml.p5.48xlarge", "ml.p5e.48xlarge"]},
         "new_nodes_only"),
        ("NetworkInterface", {"InterfaceType": "efa-only"}, "new_nodes_only"),
        ("MinInstanceCount", 1, "safe"),
        ("AutoPatchConfig", {"PatchingStrategy": "WhenIdle"}, "safe"),
    ],
)  # fmt: skip
def test_other_group_properties_say_what_they_do(
    tmp_path: Path, key: str, value: Any, kind: str
) -> None:
    def change(env: dict[str, Any]) -> None:
        _gpu(env)[key] = value

    (effect,) = _cluster_change(tmp_path, change).effects
    assert (effect.kind, effect.where) == (kind, f"InstanceGroups[gpu].{key}")


def test_a_lock_bump_is_said_first(tmp_path: Path) -> None:
    """Synth puts its lock into the assembly; plan says what moved in it before any resource
    (here an AMI read back from the deployed cluster, which also rolls the group)."""
    import json

    from hyperpod_kit.lock import LOCK_IN_ASSEMBLY
    from hyperpod_kit.plan import plan
    from tests.unit.test_plan_matrix import baseline, write_assembly

    key = "cluster.instance_groups[gpu].image_release_version"
    old, new = baseline(), baseline()
    _on_eks(old)  # an AMI release is a pin of EKS clusters only
    _both(_on_eks, _pinned("1.3.0"))(new)
    base = write_assembly(tmp_path / "b", old["stacks"], nested=old["nested"], users=old["users"])
    cand = write_assembly(tmp_path / "c", new["stacks"], nested=new["nested"], users=new["users"])
    (base / LOCK_IN_ASSEMBLY).write_text(
        json.dumps({"pins": {key: {"value": None, "source": "latest"}}})
    )
    (cand / LOCK_IN_ASSEMBLY).write_text(
        json.dumps({"pins": {key: {"value": "1.3.0", "source": "deployed"}}})
    )
    result = plan(base, cand)
    lines = result.render_text().splitlines()
    assert lines[0] == f"lock: ~ {key}: latest at deploy (latest) -> 1.3.0 (deployed)"
    assert "ROLLING AMI UPDATE" in lines[1]
    assert result.to_json()["lock"] == [lines[0]]
    markdown = result.render_markdown().splitlines()
    assert markdown[2] == f"- version lock: ~ {key}: latest at deploy (latest) -> 1.3.0 (deployed)"


# --- Slurm accounting (docs/accounting.md) ------------------------------------------------------

DATABASE = {
    "Endpoint": "db.example",
    "Port": 3306,
    "Name": "slurm_acct_db",
    "SecretArn": "arn:aws:secretsmanager:us-west-2:111122223333:secret:db-AbCdEf",
}


def _accounting(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def change(env: dict[str, Any]) -> None:
        props = _props(env, "cluster", "HyperPodCluster")
        props["NodeProvisioningMode"] = "Continuous"
        slurm = props["Orchestrator"]["Slurm"]
        slurm.pop("SlurmConfigStrategy", None)
        slurm["AccountingDatabase"] = {**DATABASE, **changes}

    return change


def _continuous(env: dict[str, Any]) -> None:
    props = _props(env, "cluster", "HyperPodCluster")
    props["NodeProvisioningMode"] = "Continuous"
    props["Orchestrator"]["Slurm"].pop("SlurmConfigStrategy", None)


def test_dropping_the_accounting_database_is_refused(tmp_path: Path) -> None:
    def without(env: dict[str, Any]) -> None:
        del _props(env, "cluster", "HyperPodCluster")["Orchestrator"]["Slurm"]["AccountingDatabase"]

    result = _run_both(tmp_path, _accounting(), without)
    cluster = _by_id(result)["HyperPodCluster"]
    assert cluster.refused and result.exit_code() == EXIT_REFUSED
    (effect,) = cluster.effects
    assert effect.render().startswith(
        "Orchestrator.Slurm.AccountingDatabase removed: a cluster cannot go back from an external "
        "accounting database"
    )


def test_attaching_an_accounting_database_is_said_and_safe(tmp_path: Path) -> None:
    result = _run_both(tmp_path, _continuous, _accounting())
    cluster = _by_id(result)["HyperPodCluster"]
    assert not cluster.dangerous and result.exit_code() == EXIT_OK
    (effect,) = cluster.effects
    assert effect.kind == "safe" and "is not moved into it" in effect.why


def test_another_schema_leaves_the_history_behind(tmp_path: Path) -> None:
    result = _run_both(tmp_path, _accounting(), _accounting(Name="slurm_acct_db_2"))
    (effect,) = _by_id(result)["HyperPodCluster"].effects
    assert effect.kind == "safe"
    assert effect.where == "Orchestrator.Slurm.AccountingDatabase"
    assert "the job history and usage of the old one stay there" in effect.why


def test_the_accounting_database_replaced_is_stateful_and_refused_by_its_name(
    tmp_path: Path,
) -> None:
    """An Aurora cluster with a fixed identifier cannot be replaced by CloudFormation (its name
    is taken): plan says so before the deploy fails."""

    def database(encrypted: bool) -> Callable[[dict[str, Any]], None]:
        def change(env: dict[str, Any]) -> None:
            env["stacks"]["accounting"] = {"Resources": {"DatabaseCluster": {
                "Type": "AWS::RDS::DBCluster", "DeletionPolicy": "Retain",
                "Properties": {"DBClusterIdentifier": "dev-slurm-accounting",
                               "Engine": "aurora-mysql", "StorageEncrypted": encrypted},
            }}}  # fmt: skip

        return change

    result = _run_both(tmp_path, database(False), database(True))
    db = _by_id(result)["DatabaseCluster"]
    assert db.stateful and db.refused and result.exit_code() == EXIT_REFUSED
    assert "DBClusterIdentifier stays dev-slurm-accounting while the resource is replaced" in (
        db.render()
    )


# --- on the slurm-platform example as synth writes it (tests/golden, kept equal to synth) ------

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-platform"
ENV = "hyperpod-slurm26"


def _golden() -> dict[str, dict[str, Any]]:
    import json

    return {
        t.name.removesuffix(".template.json"): json.loads(t.read_text())
        for t in sorted(GOLDEN.glob("*.template.json"))
    }


def _golden_plan(tmp_path: Path, change: Callable[[dict[str, dict[str, Any]]], None]) -> Plan:
    """The example's stacks as the baseline, and the same changed by `change` as the candidate."""
    from hyperpod_kit.plan import plan
    from tests.unit.test_plan_matrix import write_assembly

    after = _golden()
    change(after)
    return plan(write_assembly(tmp_path / "b", _golden()), write_assembly(tmp_path / "c", after))


def _resource(stacks: dict[str, dict[str, Any]], stack: str, type_: str) -> dict[str, Any]:
    (props,) = (r["Properties"] for r in stacks[f"{ENV}-{stack}"]["Resources"].values()
                if r["Type"] == type_)  # fmt: skip
    return props  # type: ignore[no-any-return]


def _versions(aurora: str, grafana: str) -> Callable[[dict[str, dict[str, Any]]], None]:
    def change(stacks: dict[str, dict[str, Any]]) -> None:
        _resource(stacks, "accounting", "AWS::RDS::DBCluster")["EngineVersion"] = aurora
        _resource(stacks, "observability", "AWS::Grafana::Workspace")["GrafanaVersion"] = grafana

    return change


def test_an_aurora_or_grafana_downgrade_is_refused_naming_the_source(tmp_path: Path) -> None:
    """The example runs Aurora MySQL 8.0.mysql_aurora.3.10.6 and Grafana 10.4: both only move up."""
    result = _golden_plan(tmp_path, _versions("8.0.mysql_aurora.3.04.3", "9.4"))
    assert result.exit_code() == EXIT_REFUSED
    text = result.render_text()
    assert (
        "EngineVersion downgraded (8.0.mysql_aurora.3.10.6 -> 8.0.mysql_aurora.3.04.3): Aurora "
        "engine versions only move up"
    ) in text
    assert "(source: https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/" in text
    assert "GrafanaVersion downgraded (10.4 -> 9.4): Managed Grafana versions only move up" in text
    assert "(source: https://docs.aws.amazon.com/grafana/latest/userguide/" in text
    effects = [e for c in result.to_json()["changes"] for e in c["effects"]]
    assert {e["url"].split("/")[3] for e in effects} == {"AmazonRDS", "grafana"}


def test_an_aurora_or_grafana_upgrade_is_an_update(tmp_path: Path) -> None:
    result = _golden_plan(tmp_path, _versions("8.0.mysql_aurora.3.11.1", "12.4"))
    assert result.exit_code() == EXIT_OK
    assert {c.action for c in result.changes} == {"update"}


def _database_zone(stacks: dict[str, dict[str, Any]]) -> None:
    """`network.database_availability_zone_id: usw2-az3`, as synth writes it: the database's
    subnet moves to the other zone (its id is exported by the network stack, imported by the
    accounting stack's subnet group)."""
    subnet = stacks[f"{ENV}-network"]["Resources"]["NetworkDatabaseSubnet6FD5537E"]["Properties"]
    subnet["AvailabilityZoneId"] = "usw2-az3"
    subnet["Tags"][1]["Value"] = f"{ENV}-network-database-usw2-az3"


def test_a_change_to_an_export_in_use_is_refused_with_the_two_step_way_out(
    tmp_path: Path,
) -> None:
    result = _golden_plan(tmp_path, _database_zone)
    assert result.exit_code() == EXIT_REFUSED
    (export,) = result.refused
    assert isinstance(export, Change)
    assert (export.stack, export.logical_id, export.type) == (
        f"{ENV}-network",
        "Outputs.ExportsOutputRefNetworkDatabaseSubnet6FD5537E44CAAB37",
        "export",
    )
    line = export.render()
    assert "changes its value (it refers to replaced NetworkDatabaseSubnet6FD5537E)" in line
    assert f"{ENV}-accounting import(s) it as {ENV}-network:ExportsOutputRef" in line
    assert f"two steps: first deploy {ENV}-accounting no longer importing it" in line
    assert f"then the change to {ENV}-network" in line
    assert "(source: https://docs.aws.amazon.com/AWSCloudFormation/" in line
    assert result.render_text().splitlines()[0] == line
    assert line.startswith(f"! {ENV}-network Outputs.ExportsOutputRefNetworkDatabaseSubnet")
    assert "UPDATE REFUSED: export changes its value" in line


def test_an_export_removed_or_rewritten_while_imported_is_refused(tmp_path: Path) -> None:
    def change(stacks: dict[str, dict[str, Any]]) -> None:
        outputs = stacks[f"{ENV}-network"]["Outputs"]
        del outputs["ExportsOutputRefNetworkVpcFAC8F4A562AF04DB"]
        sg = "ExportsOutputFnGetAttNetworkClusterSecurityGroup9CA14EDBGroupId98D39EB6"
        outputs[sg]["Value"] = {"Fn::GetAtt": ["NetworkClusterSecurityGroup9CA14EDB", "VpcId"]}

    refused = {c.logical_id: c for c in _golden_plan(tmp_path, change).changes if c.refused}
    vpc = refused["Outputs.ExportsOutputRefNetworkVpcFAC8F4A562AF04DB"].render()
    assert f"removed: {ENV}-accounting import(s) it" in vpc
    sg = refused["Outputs.ExportsOutputFnGetAttNetworkClusterSecurityGroup9CA14EDBGroupId98D39EB6"]
    assert f"changes its value: {ENV}-accounting and {ENV}-cluster and {ENV}-storage" in (
        sg.render()
    )


def test_an_export_nobody_imports_may_change(tmp_path: Path) -> None:
    def change(stacks: dict[str, dict[str, Any]]) -> None:
        outputs = stacks[f"{ENV}-network"]["Outputs"]
        outputs["ExportsOutputRefNetworkVpcFAC8F4A562AF04DB"]["Value"] = "vpc-0123"
        for template in stacks.values():  # nobody imports the VPC any more, in the baseline too
            _drop_import(template, f"{ENV}-network:ExportsOutputRefNetworkVpcFAC8F4A562AF04DB")

    from hyperpod_kit.plan import plan
    from tests.unit.test_plan_matrix import write_assembly

    before, after = _golden(), _golden()
    for template in before.values():
        _drop_import(template, f"{ENV}-network:ExportsOutputRefNetworkVpcFAC8F4A562AF04DB")
    change(after)
    result = plan(write_assembly(tmp_path / "b", before), write_assembly(tmp_path / "c", after))
    assert not result.refused


def _drop_import(node: Any, name: str) -> None:
    """Every `{"Fn::ImportValue": name}` in `node` written in as a plain value."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(
        node, list) else ()  # fmt: skip
    for key, value in list(items):
        if value == {"Fn::ImportValue": name}:
            node[key] = "vpc-0123"
        else:
            _drop_import(value, name)
