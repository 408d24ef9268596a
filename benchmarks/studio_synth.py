"""How long synth takes with Studio for 500 users against the same environment with 5 users.

Each run is a fresh process that validates the environment, builds every stack (network, storage,
trainer, a stand-in for the cluster stack, and Studio with its nested user stacks), synthesizes,
and runs both gates (`hyperpod_kit.gates.check_assembly`, plus cfn-lint on the nested templates,
which the manifest does not list). Runs alternate between the two sizes; medians and their ratio
are printed. Target: 500 users within 2x of 5.

    python benchmarks/studio_synth.py [--runs 3] [--env environments/studio-slurm.yaml]
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


def one(env_file: str, users: int, outdir: str) -> dict[str, float]:
    """Validate, build, synth and gate one environment with `users` Studio users (in-process);
    seconds in all and per phase."""
    started = time.perf_counter()
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam

    from hyperpod_kit.app import build_environment, create_app
    from hyperpod_kit.config import EnvironmentConfig, has_errors, load_environment
    from hyperpod_kit.config.validators import run_validators
    from hyperpod_kit.constructs.studio import StudioEks
    from hyperpod_kit.gates import _cfn_lint, check_assembly
    from hyperpod_kit.stacks.studio import StudioStack

    loaded = load_environment(Path(env_file))
    data = loaded.config.model_dump(mode="json", exclude_none=True)
    data["users"] = [{"name": f"researcher-{i:03d}", "uid": 10000 + i} for i in range(users)]
    data["studio"].pop("include", None)
    data["studio"]["exclude"] = []
    config = EnvironmentConfig.model_validate(data).at_source(Path(env_file).parent)
    if has_errors(run_validators(config)):
        raise SystemExit(f"{env_file} with {users} users does not validate")

    class ClusterStandIn(cdk.Stack):
        def __init__(self, scope: cdk.App, id: str, **kwargs: object) -> None:
            super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
            self.execution_role = iam.Role(
                self, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
            )
            self.cluster_arn = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123"
            self.cluster_name = config.cluster_name

    app = create_app(outdir=outdir)
    stacks = build_environment(app, config)
    env = cdk.Environment(account=config.account, region=config.region)
    cluster = ClusterStandIn(app, f"{config.name}-cluster", env=env)
    eks = None
    if config.orchestrator == "eks":
        eks = StudioEks(
            cluster_name="hyperpod-eks",
            cluster_arn="arn:aws:eks:us-west-2:111122223333:cluster/hyperpod-eks",
        )
    StudioStack(
        app,
        f"{config.name}-studio",
        env=env,
        config=config,
        network=stacks.network.network,
        file_system=stacks.storage.lustre,
        cluster=cluster,
        data_bucket=stacks.storage.data.bucket,
        eks=eks,
    )
    app.synth()
    synthesized = time.perf_counter()
    report = check_assembly(outdir)
    gated = time.perf_counter()
    nested = [
        f
        for p in Path(outdir).glob("*.nested.template.json")
        for f in _cfn_lint(p.name, p, config.region)
    ]
    if not report.ok or nested:
        raise SystemExit("gates failed: " + "; ".join(f.render() for f in report.errors + nested))
    done = time.perf_counter()
    return {
        "seconds": done - started,
        "build_and_synth": synthesized - started,
        "gates": gated - synthesized,
        "nested_lint": done - gated,
    }


def _run(env_file: str, users: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
        reply = subprocess.run(
            [sys.executable, __file__, "--one", str(users), "--env", env_file, "--outdir", out],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        phases: dict[str, float] = json.loads(reply.stdout.strip().splitlines()[-1])
        print(f"  {users} users: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
        return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--env", default="environments/studio-slurm.yaml")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--outdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.env, args.one, args.outdir)))
        return 0

    runs: dict[int, list[dict[str, float]]] = {5: [], 500: []}
    for _ in range(args.runs):
        for users, values in runs.items():
            values.append(_run(args.env, users))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    # check_assembly lints the stacks the manifest lists; nested templates are linted on top.
    measures = {
        "synth + check_assembly": ("build_and_synth", "gates"),
        "+ cfn-lint of nested templates": ("seconds",),
    }
    for label, keys in measures.items():
        print(f"{label} (n={args.runs}, {args.env}): median s, min-max")
        medians: dict[int, float] = {}
        for users, phases in runs.items():
            seconds = [sum(p[k] for k in keys) for p in phases]
            medians[users] = statistics.median(seconds)
            print(
                f"  {users:>4} users {medians[users]:>7.1f}  {min(seconds):.1f}-{max(seconds):.1f}"
            )
        print(f"  ratio 500 / 5 users: {medians[500] / medians[5]:.2f}x (target: within 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
