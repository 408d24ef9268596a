"""How long the deploy rehearsal (every actor played and checked, synth not counted) takes for an
environment, with this checkout's code and, optionally, with another checkout's (`--before`).

Each environment is synthesized once (this checkout), then the rehearsal of that assembly runs
as a fresh process `--runs` times per checkout, alternating, so both meet the same load; each
process times the rehearsal alone (imports and synth left out). The medians are printed, and the
ratio after/before where `--before` is given.

    git archive main | tar -x -C /tmp/hpk-before     # the code before a change
    python benchmarks/rehearsal.py [--runs 5] [--env environments/default.yaml]... \
        [--before /tmp/hpk-before] [--json out.json]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENVS = ("environments/default.yaml", "environments/studio-slurm.yaml")
QUIET = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
}
# Runs in the checkout under test: argv = environment file, assembly, work folder.
REHEARSE = """
import sys, time
from pathlib import Path
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.rehearsal import rehearse_assembly
loaded = load_environment(Path(sys.argv[1]))
started = time.perf_counter()
report = rehearse_assembly(Path(sys.argv[2]), loaded.config, workdir=Path(sys.argv[3]))
seconds = time.perf_counter() - started
assert report.ok, report.render()
print(seconds)
"""


def _env_for(checkout: Path) -> dict[str, str]:
    path = f"{checkout}{os.pathsep}{checkout / 'assets' / 'trainer'}"
    return os.environ | QUIET | {"PYTHONPATH": path}


def _synth(env_file: Path, out: Path) -> None:
    out.parent.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", "synth", str(env_file), "-o", str(out)],
        cwd=REPO, env=_env_for(REPO), check=True, capture_output=True,
    )  # fmt: skip


def _time(checkout: Path, env_file: Path, assembly: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="hpk-bench-") as work:
        done = subprocess.run(
            [sys.executable, "-c", REHEARSE, str(env_file), str(assembly), work],
            cwd=checkout, env=_env_for(checkout), check=True, capture_output=True, text=True,
        )  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--env", action="append", help=f"default: {', '.join(ENVS)}")
    parser.add_argument("--before", type=Path, help="a checkout of the code before a change")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"uid {os.geteuid()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"machine: {machine}")
    checkouts = {"after": REPO} | ({"before": args.before.resolve()} if args.before else {})
    figures: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="hpk-bench-") as tmp:
        for name in args.env or ENVS:
            env_file = (REPO / name).resolve()
            assembly = Path(tmp) / env_file.stem / "cdk.out"
            _synth(env_file, assembly)
            times: dict[str, list[float]] = {k: [] for k in checkouts}
            for _ in range(args.runs):
                for label, checkout in checkouts.items():
                    times[label].append(_time(checkout, env_file, assembly))
            figures[name] = times
    print(f"{'rehearsal of':<36} {'code':<7} {'median s':>9} {'min s':>7} {'max s':>7}  "
          f"(n={args.runs})")  # fmt: skip
    for name, times in figures.items():
        for label, series in times.items():
            median = statistics.median(series)
            print(f"{name:<36} {label:<7} {median:>9.2f} {min(series):>7.2f} {max(series):>7.2f}")
        if "before" in times:
            ratio = statistics.median(times["after"]) / statistics.median(times["before"])
            print(f"{name:<36} ratio after/before: {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "seconds": figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
