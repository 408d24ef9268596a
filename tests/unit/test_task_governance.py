"""Task governance on EKS (docs/governance.md), built as app.py builds the EKS stacks: the add-on,
the cluster policy and a compute allocation per team (a raw `AWS::SageMaker::ComputeQuota` that
cfn-lint checks against the registry schema), in that order; the FSx claim in each team's
namespace after its allocation; both gates; and what `plan` says of a change.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import merge
from tests.unit.test_eks import (
    NEW,
    STAND_IN_CLUSTER_ARN,
    EksApp,
    _addons,
    _manifest_objects,
    _of_type,
    build_eks_app,
)

pytestmark = pytest.mark.synth
CLUSTER_ARN = STAND_IN_CLUSTER_ARN

TEAMS = [
    {
        "name": "pretraining",
        "members": ["alice"],
        "fairshare": 60,
        "quota": [{"instance_type": "ml.g5.8xlarge", "instances": 1}],
        "priority": "training",
    },
    {
        "name": "research",
        "members": ["bob"],
        "fairshare": 40,
        "quota": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}],
        "sharing": "lend_and_borrow",
        "borrow_limit_percent": 200,
        "preempt_own_tasks": False,
    },
]
GOVERNED = merge(
    NEW,
    {
        "users": [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002}],
        "teams": TEAMS,
        "cluster": {
            "eks": {
                "addons": {"task_governance": "v1.6.0-eksbuild.1"},
                "task_governance": {
                    "enabled": True,
                    "priority_classes": [
                        {"name": "inference", "weight": 90},
                        {"name": "training", "weight": 70},
                    ],
                    "fair_share": False,
                },
            }
        },
        # Where the gate's cfn-lint knows task governance's types (facts/task_governance.json).
        "region": "us-east-1",
        "availability_zone_id": "use1-az6",
        "network": {"control_plane_availability_zone_id": "use1-az4"},
        "tags": {"cost-center": "ml"},
        "trainer": {
            "job": {"team": "pretraining", "nodes": 1, "global_batch_size": 64, "preset": "small"}
        },
    },
)
# The same with research's quota cut, pretraining renamed, a class reweighted.
CHANGED = copy.deepcopy(GOVERNED)
CHANGED["teams"][1]["quota"] = [{"instance_type": "ml.g5.8xlarge", "instances": 0}]
CHANGED["teams"][0]["name"] = "foundation"
CHANGED["trainer"]["job"]["team"] = "foundation"
CHANGED["cluster"]["eks"]["task_governance"]["priority_classes"][1]["weight"] = 60


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache: dict[str, EksApp] = {}
    variants = {"new": NEW, "governed": GOVERNED, "changed": CHANGED}

    def get(variant: str) -> EksApp:
        if variant not in cache:
            cache[variant] = build_eks_app(variants[variant], tmp_path_factory.mktemp(variant))
        return cache[variant]

    return get


def _id(template: dict[str, Any], resource: dict[str, Any]) -> str:
    return next(k for k, r in template["Resources"].items() if r is resource)


def test_the_addon_then_the_policy_then_a_quota_per_team(built: Any) -> None:
    """The order of HyperPod's walkthrough: the add-on (pinned, no Pod Identity: it takes none),
    the cluster policy after it (one created before task governance is installed fails), each
    team's allocation after the policy."""
    addons = built("governed").raw["eks-addons"]
    addon = _addons(addons)["amazon-sagemaker-hyperpod-taskgovernance"]
    assert addon["Properties"]["AddonVersion"] == "v1.6.0-eksbuild.1"
    assert "PodIdentityAssociations" not in addon["Properties"]
    ((policy_id, policy),) = _of_type(addons, "AWS::SageMaker::ClusterSchedulerConfig").items()
    assert policy["DependsOn"] == [_id(addons, addon)]
    assert policy["Properties"] == {
        "Name": "hyperpod-dev-policy",
        "ClusterArn": CLUSTER_ARN,
        "Description": "Task governance of hyperpod-dev (hyperpod-kit)",
        "SchedulerConfig": {
            "FairShare": "Disabled",
            "PriorityClasses": [
                {"Name": "inference", "Weight": 90},
                {"Name": "training", "Weight": 70},
            ],
        },
    }
    quotas = _of_type(addons, "AWS::SageMaker::ComputeQuota")
    assert len(quotas) == 2
    for quota in quotas.values():
        assert quota["DependsOn"] == [policy_id]


def test_each_team_is_a_compute_quota_named_after_the_cluster(built: Any) -> None:
    addons = built("governed").raw["eks-addons"]
    quotas = {
        q["Properties"]["ComputeQuotaTarget"]["TeamName"]: q["Properties"]
        for q in _of_type(addons, "AWS::SageMaker::ComputeQuota").values()
    }
    tags = [
        {"Key": "cost-center", "Value": "ml"},
        {"Key": "hyperpod-kit:environment", "Value": "hyperpod-dev"},
    ]
    assert quotas["pretraining"] == {
        "Name": "hyperpod-dev-pretraining",
        "Description": "Team pretraining (hyperpod-kit): namespace hyperpod-ns-pretraining",
        "ClusterArn": CLUSTER_ARN,
        "ActivationState": "Enabled",
        "ComputeQuotaTarget": {"TeamName": "pretraining", "FairShareWeight": 60},
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.g5.8xlarge", "Count": 1}],
            "ResourceSharingConfig": {"Strategy": "LendAndBorrow"},
            "PreemptTeamTasks": "LowerPriority",
        },
        "Tags": tags,
    }
    research = quotas["research"]["ComputeQuotaConfig"]
    assert research == {
        "ComputeQuotaResources": [{"InstanceType": "ml.g5.8xlarge", "Accelerators": 1}],
        "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 200},
        "PreemptTeamTasks": "Never",
    }


def test_the_fsx_claim_in_each_team_namespace_after_its_quota(built: Any) -> None:
    """HyperPod makes hyperpod-ns-<team> with the team's allocation; the claim the job mounts
    follows it there. The namespace is applied (kubectl apply) and never deleted: HyperPod owns
    it."""
    from hyperpod_kit.naming import FSX_CLAIM

    addons = built("governed").raw["eks-addons"]
    manifests = _of_type(addons, "Custom::AWSCDK-EKS-KubernetesResource")
    quotas = {
        q["Properties"]["ComputeQuotaTarget"]["TeamName"]: k
        for k, q in _of_type(addons, "AWS::SageMaker::ComputeQuota").items()
    }
    csi = _id(addons, _addons(addons)["aws-fsx-csi-driver"])
    for team in ("pretraining", "research"):
        namespace = f"hyperpod-ns-{team}"
        ns_id, ns = next(
            (k, m)
            for k, m in manifests.items()
            if _manifest_objects(m)[0] == {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}
            }
        )  # fmt: skip
        assert ns["Properties"]["Overwrite"] is True
        assert ns["DeletionPolicy"] == "Retain"
        assert quotas[team] in ns["DependsOn"]
        vol = next(
            m
            for m in manifests.values()
            if _manifest_objects(m)[0].get("kind") == "PersistentVolume"
            and _manifest_objects(m)[0]["metadata"]["name"] == f"hyperpod-dev-fsx-{namespace}"
        )
        assert {ns_id, csi} <= set(vol["DependsOn"])
        pv, pvc = _manifest_objects(vol)
        assert pv["spec"]["claimRef"] == {"namespace": namespace, "name": FSX_CLAIM}
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        assert pvc["metadata"]["name"] == FSX_CLAIM
        assert pvc["metadata"]["namespace"] == namespace
    # The job namespace's own claim stays, for jobs outside task governance.
    assert any(
        _manifest_objects(m)[0]
        == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
        for m in manifests.values()
    )


def test_nothing_of_task_governance_without_it(built: Any) -> None:
    addons = built("new").raw["eks-addons"]
    assert "amazon-sagemaker-hyperpod-taskgovernance" not in _addons(addons)
    for kind in ("AWS::SageMaker::ComputeQuota", "AWS::SageMaker::ClusterSchedulerConfig"):
        assert not _of_type(addons, kind)
    assert "hyperpod-ns-" not in json.dumps(addons)


def test_no_new_node_or_lambda_actor(built: Any) -> None:
    """Everything task governance adds is created by CloudFormation: no role, policy or
    function comes with it (the rehearsal has nothing new to play)."""
    kinds = ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::Lambda::Function")
    for kind in kinds:
        assert len(_of_type(built("governed").raw["eks-addons"], kind)) == len(
            _of_type(built("new").raw["eks-addons"], kind)
        ), kind


def test_gates_pass_and_cfn_lint_checks_the_raw_quota(built: Any, tmp_path: Path) -> None:
    """cfn-lint and cdk-nag pass; the raw `AWS::SageMaker::ComputeQuota` is checked against
    cfn-lint's registry schema: a property or value the schema refuses fails the gate."""
    app = built("governed")
    assert app.report.ok, [f.render() for f in app.report.errors]
    assert [f.render() for f in app.report.findings] == []
    broken = copy.deepcopy(app.raw["eks-addons"])
    quota = next(iter(_of_type(broken, "AWS::SageMaker::ComputeQuota").values()))
    quota["Properties"]["ComputeQuotaConfig"]["ResourceSharingConfig"]["Strategy"] = "Borrow"
    quota["Properties"]["ComputeQuotaTarget"]["Team"] = "x"
    path = tmp_path / "broken.template.json"
    path.write_text(json.dumps(broken))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    rules = {line.split(":")[5] for line in result.stdout.splitlines() if line.count(":") >= 5}
    assert {"E3030", "E3002"} <= rules, result.stdout


def test_plan_says_what_a_quota_and_policy_change_does(built: Any) -> None:
    from hyperpod_kit.plan import plan

    changes = plan(built("governed").outdir, built("changed").outdir).changes
    by_type: dict[str, list[Any]] = {}
    for c in changes:
        by_type.setdefault(c.type, []).append(c)
    quotas = {c.logical_id: c for c in by_type["AWS::SageMaker::ComputeQuota"]}
    # A team is its allocation's construct: a renamed team is a new allocation (a new namespace)
    # beside the old one, which CloudFormation deletes once the new one exists.
    assert {(c.action, c.logical_id.split("Team")[1][:10]) for c in quotas.values()} == {
        ("add", "foundation"),
        ("remove", "pretrainin"),
        ("update", "research38"),
    }
    (cut,) = [c for c in quotas.values() if c.action == "update"]
    assert not cut.dangerous
    assert any("a smaller quota admits fewer new jobs" in why for why in cut.why)
    (policy,) = by_type["AWS::SageMaker::ClusterSchedulerConfig"]
    assert policy.action == "update" and not policy.dangerous
    assert any("by the new classes and weights" in why for why in policy.why)
