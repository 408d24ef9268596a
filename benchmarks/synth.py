"""How long `hyperpod-kit synth` (validation, every stack, cdk-nag and cfn-lint) takes for an
environment, against a minimal CDK app (one VPC and one security group, synthesized by CDK alone).

Both run as fresh processes, alternately, `--runs` times each; the medians and their ratio are
printed. The ratio says what hyperpod-kit adds on top of what any CDK app pays (starting Node and
loading aws-cdk-lib through jsii), so it can be compared across machines.

    python benchmarks/synth.py [--runs 5] [--env environments/default.yaml] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MINIMAL_APP = """
import sys
import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
app = cdk.App(outdir=sys.argv[1])
stack = cdk.Stack(app, "Minimal", env=cdk.Environment(region="us-west-2"))
vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0)
ec2.SecurityGroup(stack, "Group", vpc=vpc)
app.synth()
"""
QUIET = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
}


def _time(args: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run([*args, str(Path(out) / "cdk.out")], cwd=REPO, env=os.environ | QUIET,
                       check=True, capture_output=True)  # fmt: skip
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--env", default="environments/default.yaml")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    kit_cmd = [sys.executable, "-m", "hyperpod_kit.cli.main", "synth", args.env, "-o"]
    minimal_cmd = [sys.executable, "-c", MINIMAL_APP]
    kit, minimal = [], []
    for _ in range(args.runs):
        kit.append(_time(kit_cmd))
        minimal.append(_time(minimal_cmd))
    ratio = statistics.median(kit) / statistics.median(minimal)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"machine: {machine}")
    print(f"{'app':<44} {'median s':>9} {'min s':>7} {'max s':>7}  (n={args.runs})")
    for label, times in (
        ("minimal CDK app (VPC + security group)", minimal),
        (f"hyperpod-kit synth {args.env}", kit),
    ):
        median = statistics.median(times)
        print(f"{label:<44} {median:>9.2f} {min(times):>7.2f} {max(times):>7.2f}")
    print(f"ratio hyperpod-kit synth (both gates) / minimal: {ratio:.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "env": args.env,
                    "kit_s": kit,
                    "minimal_s": minimal,
                    "ratio": ratio,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
