"""`plan --deployed` as the real command in a fresh process: bad input before any synth (no or
partial credentials, nothing deployed, `--deployed` with `--baseline`), and one synth against a
real moto server on loopback for what moto models: stacks partly deployed, their templates as
submitted, the live cluster's instance groups. Moto cannot create the synthesized templates
themselves (it evaluates their resources), so the deployed stacks hold small templates; the
comparison of real templates, nested stacks and stack states is in tests/unit/test_plan_deployed.py
(botocore's Stubber)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_kit.config.derived import environment_areas
from hyperpod_kit.config.environment import load_environment
from tests.conftest import NO_CREDENTIALS, REPO
from tests.moto_server import MotoServer

DEFAULT = REPO / "environments" / "default.yaml"
ENV = "hyperpod-dev"  # environments/default.yaml's name


def hpk(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = env | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", *args], cwd=cwd, env=env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr


def test_deployed_with_a_baseline_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hyperpod_kit.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["plan", str(DEFAULT), "--deployed", "--baseline", "cdk.out"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "hyperpod-kit plan: error: argument --baseline: not allowed with argument --deployed"
    )


@pytest.mark.parametrize("credentials", [{}, {"AWS_ACCESS_KEY_ID": "AKIDONLY"}],
                         ids=["none", "partial"])  # fmt: skip
def test_without_credentials_one_line_before_the_synth(
    tmp_path: Path, credentials: dict[str, str]
) -> None:
    done = hpk(NO_CREDENTIALS | credentials, "plan", "-q", str(DEFAULT), "--deployed",
               cwd=tmp_path)  # fmt: skip
    one_line(done, f"{DEFAULT}: no AWS credentials found. Hint:")
    assert list(tmp_path.iterdir()) == []


def test_nothing_deployed_is_one_line_before_the_synth(tmp_path: Path, moto: MotoServer) -> None:
    done = hpk(moto.env(), "plan", "-q", str(DEFAULT), "--deployed", cwd=tmp_path)
    areas = environment_areas(load_environment(DEFAULT).config)
    names = ", ".join(f"{ENV}-{a}" for a in areas)
    one_line(done, f"{DEFAULT}: none of the stacks {names} is deployed in us-west-2. Hint: ")


CLUSTER = {"Resources": {"HyperPodCluster": {  # moto keeps it, but creates nothing for it
    "Type": "AWS::SageMaker::Cluster", "Properties": {"ClusterName": ENV}}}}  # fmt: skip


def test_partly_deployed_and_a_group_scaled_by_hand(tmp_path: Path, moto: MotoServer) -> None:
    """network and cluster deployed (small templates), the rest not: the rest is added; compute
    was scaled from the file's 2 to 4 by hand and a group added: the deploy undoes both."""
    cfn = moto.client("cloudformation")
    topic = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    cfn.create_stack(StackName=f"{ENV}-network", TemplateBody=json.dumps(topic))
    cfn.create_stack(StackName=f"{ENV}-cluster", TemplateBody=json.dumps(CLUSTER))
    group = {"LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hyperpod-dev/lifecycle",
                                 "OnCreate": "on_create.sh"},
             "ExecutionRole": "arn:aws:iam::123456789012:role/exec",
             "ThreadsPerCore": 1}  # fmt: skip
    groups = [("controller", "ml.m5.xlarge", 1), ("login", "ml.m5.xlarge", 1),
              ("compute", "ml.g5.8xlarge", 4), ("by-hand", "ml.g5.8xlarge", 1)]  # fmt: skip
    moto.client("sagemaker").create_cluster(ClusterName=ENV, InstanceGroups=[
        {"InstanceGroupName": n, "InstanceType": t, "InstanceCount": c, **group}
        for n, t, c in groups
    ])  # fmt: skip
    done = hpk(moto.env(), "plan", "-q", str(DEFAULT), "--deployed", "--format", "json",
               cwd=tmp_path)  # fmt: skip
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"] != 0, done.stderr
    areas = environment_areas(load_environment(DEFAULT).config)
    assert report["deployed"]["stacks"] == {
        f"{ENV}-{a}": ("CREATE_COMPLETE" if a in ("network", "cluster") else None) for a in areas
    }
    by_stack = {c["stack"] for c in report["changes"] if c["action"] == "add"}
    assert {f"{ENV}-{a}" for a in areas} - {f"{ENV}-network", f"{ENV}-cluster"} <= by_stack
    removed = {(c["stack"], c["logical_id"]) for c in report["changes"] if c["action"] == "remove"}
    assert removed == {(f"{ENV}-network", "Topic")}
    (cluster,) = [c for c in report["changes"] if c["logical_id"] == "HyperPodCluster"]
    live = [e for e in cluster["effects"] if e["source"] == "sagemaker:DescribeCluster"]
    assert [(e["where"], e["kind"]) for e in live] == [
        ("InstanceGroups[compute].InstanceCount", "nodes_recreated"),
        ("InstanceGroups[by-hand].InstanceCount", "nodes_recreated"),
    ]
    assert "live TargetCount 4" in live[0]["what"] and "the file's 2" in live[0]["what"]
    assert any("(this deploy updates the cluster)" in why for why in cluster["why"])
    assert cluster["dangerous"]
    assert list(tmp_path.iterdir()) == []  # nothing written
