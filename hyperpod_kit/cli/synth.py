"""`hyperpod-kit synth` and `check`: offline synth into a fresh folder, then the gates.

The assembly is built next to the output folder and moved into place only when every gate passes,
so a failed synth never leaves a half-written or ungated `cdk.out` behind for a deploy to pick up.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from hyperpod_kit.config import LoadedEnvironment
from hyperpod_kit.gates import GateReport, check_assembly


def build_assembly(loaded: LoadedEnvironment, outdir: Path) -> None:
    """Synthesize the environment's stacks into `outdir` (offline, no gates)."""
    from hyperpod_kit.app import build_environment, create_app

    app = create_app(outdir=str(outdir))
    build_environment(app, loaded.config)
    app.synth()


def synth(loaded: LoadedEnvironment, output: Path) -> int:
    started = time.perf_counter()
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        build_assembly(loaded, staging)
        report = check_assembly(staging)
        _print(report)
        if not report.ok:
            rejected = output.with_name(output.name + ".rejected")
            shutil.rmtree(rejected, ignore_errors=True)
            staging.rename(rejected)
            print(
                f"synth rejected by the gates: {len(report.errors)} errors; the assembly is in "
                f"{rejected} for inspection, {output} is unchanged",
                file=sys.stderr,
            )
            return 1
        shutil.rmtree(output, ignore_errors=True)
        staging.rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.perf_counter() - started
    print(f"synthesized {loaded.file} -> {output} in {seconds:.1f} s", file=sys.stderr)
    return 0


def check(assembly: Path) -> int:
    if not (assembly / "manifest.json").is_file():
        print(
            f"{assembly}: no cloud assembly here. Hint: run `hyperpod-kit synth` or "
            "`npx cdk synth` first.",
            file=sys.stderr,
        )
        return 2
    report = check_assembly(assembly)
    _print(report)
    return 0 if report.ok else 1


def _print(report: GateReport) -> None:
    for finding in report.findings:
        if finding.level != "info":
            print(finding.render(), file=sys.stderr)
    print(report.summary(), file=sys.stderr)


def plan(loaded: LoadedEnvironment, baseline: Path, *, allow_replacement: bool) -> int:
    """Synthesize to a temporary folder and compare with `baseline`; nothing else is written."""
    from hyperpod_kit.plan import plan as compare

    if not (baseline / "manifest.json").is_file():
        print(
            f"{baseline}: no cloud assembly to compare with. Hint: synthesize the deployed "
            "version first (`hyperpod-kit synth -o baseline.out FILE` on main), then "
            "`hyperpod-kit plan FILE --baseline baseline.out`.",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="hyperpod-kit-plan.") as candidate:
        build_assembly(loaded, Path(candidate))
        result = compare(baseline, Path(candidate))
    for change in result.changes:
        print(change.render())
    print(result.summary())
    if result.dangerous and not allow_replacement:
        print(
            f"plan refused: {len(result.dangerous)} stateful resource(s) would be replaced or "
            "removed (data lost or orphaned). Hint: undo the change, or pass "
            "--allow-replacement if that is intended.",
            file=sys.stderr,
        )
        return 1
    return 0
