"""What provenance (constructs/provenance.py, the gates' reading of it) costs the gated synth:
`hyperpod-kit synth` of the same environment by this checkout and by a checkout of the commit
before provenance, each a fresh process, alternating, `--runs` times each; the medians, their
difference and the difference as a share of the gated synth are printed. Target: under a tenth.

    git worktree add /tmp/before 2bfd0f0   # the commit before provenance
    python benchmarks/provenance.py --before /tmp/before [--runs 7] [--env FILE]

Both checkouts run with this venv's packages (the dependencies did not change between them).
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
QUIET = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
}


def _synth(checkout: Path, env: Path) -> float:
    """Seconds of one `hyperpod-kit synth` by the code of `checkout`."""
    with tempfile.TemporaryDirectory() as out:
        environ = os.environ | QUIET | {"PYTHONPATH": f"{checkout}:{checkout / 'assets/trainer'}"}
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "hyperpod_kit.cli.main", "synth", str(env), "-o",
             str(Path(out) / "cdk.out"), "--quiet"],
            cwd=out, env=environ, check=True, capture_output=True,
        )  # fmt: skip
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout without provenance")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--env", type=Path, default=REPO / "environments/default.yaml")
    args = parser.parse_args()
    env = args.env.resolve()
    before: list[float] = []
    after: list[float] = []
    for _ in range(args.runs):
        before.append(_synth(args.before.resolve(), env))
        after.append(_synth(REPO, env))
    b, a = statistics.median(before), statistics.median(after)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(f"environment: {args.env}, {args.runs} runs each, alternating")
    print(
        f"before (no provenance): median {b:.2f} s (min {min(before):.2f}, max {max(before):.2f})"
    )
    print(f"after  (provenance):    median {a:.2f} s (min {min(after):.2f}, max {max(after):.2f})")
    print(f"provenance costs {a - b:+.2f} s, {(a - b) / b:+.1%} of the gated synth (target < 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
