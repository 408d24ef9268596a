"""What provenance (constructs/provenance.py, the gates' reading of it) costs the gated synth:
`hyperpod-kit synth` of the same environment by this checkout and by a checkout of the commit
before provenance, each a fresh process, alternating, `--runs` times each; the medians, their
difference and the difference as a share of the gated synth are printed. Target: under a tenth.

    git worktree add /tmp/before 2bfd0f0   # the commit before provenance
    python benchmarks/provenance.py --before /tmp/before [--runs 7] [--env FILE]
    python benchmarks/provenance.py --in-process [--env FILE]   # the work itself, in one synth

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
from typing import Any

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


def _in_process(env: Path) -> None:
    """The provenance work itself, timed inside one gated synth: every `trace`/`trace_values`
    call while the stacks are built, and the gates' reading of it; against the whole synth."""
    from hyperpod_kit.config.environment import load_environment
    from hyperpod_kit.constructs import provenance
    from hyperpod_kit.gates import Provenance

    spent = {"record": 0.0, "read": 0.0}
    calls = {"record": 0, "read": 0}

    def timed(kind: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[kind] += time.perf_counter() - started
                calls[kind] += 1

        return wrapper

    # Before anything imports the constructs: they bind these names when they are imported.
    assert "hyperpod_kit.app" not in sys.modules
    for name in ("trace", "trace_values"):
        setattr(provenance, name, timed("record", getattr(provenance, name)))
    of = Provenance.__dict__["of"].__func__  # the classmethod's function
    setattr(Provenance, "of", classmethod(timed("read", of)))  # noqa: B010 - patched for timing
    setattr(Provenance, "traced", timed("read", Provenance.traced))  # noqa: B010
    from hyperpod_kit.cli.synth import gated_assembly

    loaded = load_environment(env)
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        gated_assembly(loaded, Path(out) / "cdk.out")
        total = time.perf_counter() - started
    share = (spent["record"] + spent["read"]) / total
    print(
        f"in one gated synth of {env.name} ({total:.2f} s): recording {calls['record']} calls "
        f"{spent['record'] * 1000:.0f} ms, reading {calls['read']} calls "
        f"{spent['read'] * 1000:.0f} ms: {share:.1%} of the synth (target < 10%)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout without provenance")
    parser.add_argument(
        "--in-process", action="store_true", help="time the provenance work inside one synth"
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--env", type=Path, default=REPO / "environments/default.yaml")
    args = parser.parse_args()
    env = args.env.resolve()
    if args.in_process:
        _in_process(env)
        return 0
    if args.before is None:
        parser.error("--before DIR (a checkout of the commit before provenance) or --in-process")
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
