"""How long synth takes with Studio for 500 users against the same environment with 5 users.

Each run is a fresh process that validates the environment, builds every stack (network, storage,
trainer, cluster, monitoring, and Studio with its nested user stacks), synthesizes, and runs both
gates (`hyperpod_kit.gates.check_assembly`, nested templates included). Runs alternate between the
two sizes; medians and their ratio are printed. Target: 500 users within 2x of 5.

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
    from hyperpod_kit.app import build_environment, create_app
    from hyperpod_kit.config import EnvironmentConfig, has_errors
    from hyperpod_kit.config.environment import load_environment
    from hyperpod_kit.config.validators import run_validators
    from hyperpod_kit.gates import check_assembly, warm_up

    loaded = load_environment(Path(env_file))
    data = loaded.config.model_dump(mode="json", exclude_none=True)
    data["users"] = [{"name": f"researcher-{i:03d}", "uid": 10000 + i} for i in range(users)]
    data["studio"].pop("include", None)
    data["studio"]["exclude"] = []
    config = EnvironmentConfig.model_validate(data).at_source(Path(env_file).parent)
    if has_errors(run_validators(config)):
        raise SystemExit(f"{env_file} with {users} users does not validate")

    app = create_app(outdir=outdir)
    build_environment(app, config)
    warm_up(config.region)  # as `hyperpod-kit synth` does
    app.synth()
    synthesized = time.perf_counter()
    report = check_assembly(outdir)
    done = time.perf_counter()
    if not report.ok:
        raise SystemExit("gates failed: " + "; ".join(f.render() for f in report.errors))
    return {
        "seconds": done - started,
        "build_and_synth": synthesized - started,
        "gates": done - synthesized,
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
    print(f"validate, synth and both gates (n={args.runs}, {args.env}): median s, min-max")
    medians: dict[int, float] = {}
    for users, phases in runs.items():
        seconds = [p["seconds"] for p in phases]
        medians[users] = statistics.median(seconds)
        gates = statistics.median(p["gates"] for p in phases)
        print(
            f"  {users:>4} users {medians[users]:>7.1f}  {min(seconds):.1f}-{max(seconds):.1f}"
            f"  (gates {gates:.1f})"
        )
    print(f"  ratio 500 / 5 users: {medians[500] / medians[5]:.2f}x (target: within 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
