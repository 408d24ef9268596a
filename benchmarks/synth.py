"""How long `python app.py` takes for the default environment, against a minimal CDK app.

Both are run as fresh processes (what `cdk synth` does), alternately, `--runs` times each; the
medians and their ratio are printed. The minimal app is one stack with one S3 bucket, so the ratio
says what hyperpod-kit adds (validation, two stacks, cdk-nag) on top of CDK's own start-up cost.

    python benchmarks/synth.py [--runs 5] [--env environments/default.yaml]
"""

from __future__ import annotations

import argparse
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
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App()
stack = cdk.Stack(app, "Minimal", env=cdk.Environment(region="us-west-2"))
s3.Bucket(stack, "Bucket")
app.synth()
"""


def _time(args: list[str], context: str | None = None) -> float:
    with tempfile.TemporaryDirectory() as out:
        env = os.environ | {
            "CDK_OUTDIR": out,
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }
        if context:
            env["CDK_CONTEXT_JSON"] = context
        started = time.perf_counter()
        subprocess.run(args, cwd=REPO, env=env, check=True, capture_output=True)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--env", default="environments/default.yaml")
    args = parser.parse_args()

    context = f'{{"environment": "{args.env}"}}'
    kit, minimal = [], []
    for _ in range(args.runs):
        kit.append(_time([sys.executable, "app.py"], context))
        minimal.append(_time([sys.executable, "-c", MINIMAL_APP]))
    kit_s, min_s = statistics.median(kit), statistics.median(minimal)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"{'app':<28} {'median s':>9} {'min s':>7} {'max s':>7}  (n={args.runs})")
    for label, times in (
        ("minimal CDK app (1 bucket)", minimal),
        (f"hyperpod-kit {args.env}", kit),
    ):
        median = statistics.median(times)
        print(f"{label:<28} {median:>9.2f} {min(times):>7.2f} {max(times):>7.2f}")
    print(f"ratio hyperpod-kit / minimal: {kit_s / min_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
