"""boto3 calls recorded and answered through botocore's event hooks, in the actor's own process
(hyperpod_kit/rehearsal/botofake.py, loaded by rehearsal/site/sitecustomize.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hyperpod_kit.rehearsal.actors import PACKAGE_PARENT, SITE_DIR

ACTOR = """
import boto3
ssm = boto3.client("ssm", region_name="us-west-2")
print(ssm.get_parameter(Name="/hyperpod-kit/dev/storage")["Parameter"]["Value"])
try:
    ssm.get_parameter(Name="/hyperpod-kit/dev/later")
except ssm.exceptions.ParameterNotFound:
    print("not found")
ssm.put_parameter(Name="/hyperpod-kit/dev/slurm-jwt/alice", Type="SecureString", Value="t")
s3 = boto3.client("s3", region_name="us-west-2")
print(s3.get_object(Bucket="b", Key="k/users.json")["Body"].read().decode())
boto3.client("cloudwatch", region_name="us-west-2").put_metric_data(
    Namespace="N", MetricData=[{"MetricName": "m", "Value": 1.0}])
"""


def test_calls_are_recorded_and_answered_from_the_world(tmp_path: Path) -> None:
    world, seed, state = tmp_path / "aws", tmp_path / "seed", tmp_path / "state"
    (seed / "ssm/hyperpod-kit/dev").mkdir(parents=True)
    (seed / "ssm/hyperpod-kit/dev/storage").write_text('{"bucket_name": "b"}')
    (seed / "s3/b/k").mkdir(parents=True)
    (seed / "s3/b/k/users.json").write_text('{"users": []}')
    world.mkdir()
    state.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{SITE_DIR}:{PACKAGE_PARENT}",
        "FAKE_STATE": str(state),
        "FAKE_AWS": str(world),
        "FAKE_SEED": str(seed),
    }
    result = subprocess.run(
        [sys.executable, "-c", ACTOR], env=env, capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['{"bucket_name": "b"}', "not found", '{"users": []}']
    assert (world / "ssm/hyperpod-kit/dev/slurm-jwt/alice").read_text() == "t"  # a write lands
    records = [json.loads(x) for x in (state / "boto.jsonl").read_text().splitlines()]
    assert [(r["service"], r["operation"], r["error"]) for r in records] == [
        ("ssm", "GetParameter", None),
        ("ssm", "GetParameter", "ParameterNotFound"),
        ("ssm", "PutParameter", None),
        ("s3", "GetObject", None),
        ("cloudwatch", "PutMetricData", None),
    ]
    assert records[2]["params"] == {
        "Name": "/hyperpod-kit/dev/slurm-jwt/alice", "Type": "SecureString", "Value": "t",
    }  # fmt: skip
    assert [r["faked"] for r in records] == [True, True, True, True, False]
