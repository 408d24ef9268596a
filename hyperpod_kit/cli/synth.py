"""`hyperpod-kit synth` and `check`: offline synth into a fresh folder, then the gates.

The assembly is built in a temporary sibling of the output folder and moved into place only when
every gate passes, so a failed or interrupted synth never leaves a half-written or ungated
`cdk.out` behind for a deploy to pick up. The output folder is replaced only if hyperpod-kit wrote
it (see `hyperpod_kit.outputs`).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.gates import GateReport, check_assembly
from hyperpod_kit.outputs import (
    ASSEMBLY,
    FolderOutput,
    OutputError,
    write_error,
    write_file,
    write_marker,
)
from hyperpod_kit.progress import SILENT, Progress

if TYPE_CHECKING:
    from hyperpod_kit.plan import Plan


def build_assembly(loaded: LoadedEnvironment, outdir: Path, progress: Progress = SILENT) -> None:
    """Synthesize the environment's stacks into `outdir` (offline, no gates), with the version
    lock it was resolved against (for `plan`)."""
    from hyperpod_kit.app import build_environment, built, create_app
    from hyperpod_kit.gates import warm_up

    with progress.stage("build the stacks"), built(loaded):
        app = create_app(outdir=str(outdir))
        build_environment(app, loaded.config)
    with progress.stage("synthesize, cdk-nag"):  # cdk-nag is an aspect: it runs in the synth
        warm_up(loaded.config.region)  # cfn-lint loads while Node synthesizes
        app.synth()
    if loaded.pins is not None:
        from hyperpod_kit.lock import LOCK_IN_ASSEMBLY, render_lock

        (outdir / LOCK_IN_ASSEMBLY).write_text(render_lock(loaded.config, loaded.pins))


def gated_assembly(
    loaded: LoadedEnvironment, outdir: Path, progress: Progress = SILENT
) -> GateReport:
    """Synthesize into `outdir`, mark it as ours, run both gates and print their report."""
    build_assembly(loaded, outdir, progress)
    write_marker(outdir, ASSEMBLY)
    with progress.stage("cfn-lint"):
        report = check_assembly(outdir)
    print(report.render(loaded.at), file=sys.stderr)
    return report


def synth(loaded: LoadedEnvironment, output: Path, progress: Progress = SILENT) -> int:
    started = time.perf_counter()
    try:
        out = FolderOutput.checked(output, ASSEMBLY)
        rejected_path = out.target.with_name(out.target.name + ".rejected")
        shown = str(output).rstrip("/") + ".rejected"
        rejected = FolderOutput.checked(rejected_path, ASSEMBLY, shown=shown)
        lock = None
        if loaded.pins is not None:  # checked before any work, written once the gates pass
            from hyperpod_kit.lock import lock_write

            lock = lock_write(loaded, loaded.pins)
    except OutputError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        with out.staging() as staging:
            report = gated_assembly(loaded, staging, progress)
            if not report.ok:
                rejected.commit(staging)
                print(
                    f"synth rejected by the gates: {len(report.errors)} errors; the assembly is "
                    f"in {rejected.target} for inspection, {out.target} is unchanged",
                    file=sys.stderr,
                )
                return 2 if report.traced else 1
            out.commit(staging)
        if lock is not None and lock.changes:
            write_file(lock)
            print(
                f"wrote the version lock {lock.target.name} beside {loaded.file}", file=sys.stderr
            )
    except OutputError as e:
        print(e, file=sys.stderr)
        return 2
    except OSError as e:
        print(write_error(e, output), file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    print(f"synthesized {loaded.file} -> {output} in {seconds:.1f} s", file=sys.stderr)
    return 0


def check(assembly: Path, progress: Progress = SILENT) -> int:
    from hyperpod_kit.cloud_assembly import AssemblyFileError
    from hyperpod_kit.files import fileio

    hint = "run `hyperpod-kit synth` or `npx cdk synth` first"
    fileio.input_folder(assembly, what="cloud assembly folder", hint=hint)
    manifest = assembly / "manifest.json"
    if not manifest.exists() and not manifest.is_symlink():
        print(f"{assembly}: no cloud assembly here. Hint: {hint}.", file=sys.stderr)
        return 2
    try:
        _readable_assembly(assembly)  # before the stage: one line if it is not
        with progress.stage("gates"):
            report = check_assembly(assembly)
    except AssemblyFileError as e:
        print(f"{e}. Hint: synthesize the assembly again.", file=sys.stderr)
        return 2
    except (KeyError, TypeError, AttributeError) as e:  # JSON of the wrong shape
        print(
            f"{assembly}: not a cloud assembly that can be read ({type(e).__name__}: {e}). "
            "Hint: synthesize it again.",
            file=sys.stderr,
        )
        return 2
    _print(report)
    return 0 if report.ok else (2 if report.traced else 1)


def _readable_assembly(assembly: Path) -> None:
    """Raise `AssemblyFileError` unless the manifest and each stack's entry have the shape the
    gates read (a damaged or foreign assembly is one line, before any work)."""
    from hyperpod_kit.cloud_assembly import AssemblyFileError, read_json, stack_artifacts

    manifest = assembly / "manifest.json"
    data = read_json(manifest, "the assembly's manifest")
    if not isinstance(data, dict) or not isinstance(data.get("artifacts", {}), dict):
        raise AssemblyFileError(f"{manifest}: not a cloud assembly manifest (no artifacts map)")
    for stack in stack_artifacts(assembly, data.get("artifacts", {})):
        properties = stack.artifact.get("properties")
        if not isinstance(properties, dict) or not isinstance(properties.get("templateFile"), str):
            raise AssemblyFileError(f"{manifest}: the stack {stack.label} names no template file")


def rehearse(
    loaded: LoadedEnvironment, *, as_json: bool = False, progress: Progress = SILENT
) -> int:
    """Synthesize to a temporary folder, run both gates, and play every actor in deploy order,
    checking its calls: the deepest check there is short of a deploy (the one `deploy` runs
    before it hands over to the CDK CLI, and the pipelines' rehearse job)."""
    from hyperpod_kit.rehearsal import rehearse_assembly

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hyperpod-kit-rehearse.") as tmp:
        assembly = Path(tmp) / "cdk.out"
        gates = gated_assembly(loaded, assembly, progress)
        if not gates.ok:
            print(
                f"rehearsal of {loaded.file} not run: the gates found {len(gates.errors)} errors",
                file=sys.stderr,
            )
            return 2 if gates.traced else 1
        with progress.stage("rehearsal"):
            report = rehearse_assembly(assembly, loaded.config, workdir=Path(tmp) / "actors")
    if as_json:
        from hyperpod_kit.rehearsal.check import dumps

        print(dumps(report))
    else:
        print(report.render(), file=sys.stderr)
    seconds = time.perf_counter() - started
    verdict = "passed" if report.ok else "failed"
    print(f"rehearsal of {loaded.file} {verdict} in {seconds:.1f} s", file=sys.stderr)
    return 0 if report.ok else 1


def _print(report: GateReport) -> None:
    print(report.render(), file=sys.stderr)


def plan(
    loaded: LoadedEnvironment,
    baseline: Path | None,
    *,
    allow_replacement: bool,
    output_format: str = "text",
    progress: Progress = SILENT,
) -> int:
    """Synthesize to a temporary folder and compare with `baseline`, or (None) with what is
    deployed (`hyperpod_kit.deployed`); nothing else is written. Exit codes as
    `hyperpod_kit.plan.Plan.exit_code`, 2 for a baseline it cannot read (no credentials, nothing
    deployed)."""
    from hyperpod_kit.plan import EXIT_BAD_INPUT, PlanInputError, read_assembly
    from hyperpod_kit.plan import plan as compare

    if baseline is None:
        return _plan_deployed(loaded, allow_replacement, output_format, progress)
    if not (baseline / "manifest.json").exists():
        print(
            f"{baseline}: no cloud assembly to compare with. Hint: synthesize the deployed "
            "version first (`hyperpod-kit synth -o baseline.out FILE` on main), then "
            "`hyperpod-kit plan FILE --baseline baseline.out`, or compare with what is deployed "
            "(`hyperpod-kit plan FILE --deployed`, with credentials).",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        read_assembly(baseline)  # before the synth: a damaged baseline fails fast
        with tempfile.TemporaryDirectory(prefix="hyperpod-kit-plan.") as candidate:
            build_assembly(loaded, Path(candidate), progress)
            with progress.stage("compare with the baseline"):
                result = compare(baseline, Path(candidate))
    except PlanInputError as error:
        hint = getattr(error, "hint", "synthesize the baseline again")
        print(f"{error}. Hint: {hint}.", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _report(result, allow_replacement, output_format)


def _plan_deployed(
    loaded: LoadedEnvironment, allow_replacement: bool, output_format: str, progress: Progress
) -> int:
    """`plan --deployed`: the baseline read from CloudFormation after the synth (the candidate's
    stack names say which stacks), and the live instance counts a deploy would undo."""
    from hyperpod_kit.cli.status import _facade, _unavailable
    from hyperpod_kit.config.aws import AwsUnavailableError
    from hyperpod_kit.config.derived import environment_areas
    from hyperpod_kit.deployed import require_deployed, scale_backs, write_deployed_assembly
    from hyperpod_kit.naming import stack_name
    from hyperpod_kit.plan import EXIT_BAD_INPUT, PlanInputError, load_templates
    from hyperpod_kit.plan import plan as compare

    aws = _facade(loaded)  # credentials (and the file's account) before the synth
    if aws is None:
        return EXIT_BAD_INPUT
    areas = environment_areas(loaded.config)
    try:
        require_deployed(aws, [stack_name(loaded.config.name, area) for area in areas])
        with tempfile.TemporaryDirectory(prefix="hyperpod-kit-plan.") as tmp:
            candidate, deployed = Path(tmp) / "candidate", Path(tmp) / "deployed"
            candidate.mkdir()
            deployed.mkdir()
            build_assembly(loaded, candidate, progress)
            with progress.stage(f"read the deployed stacks ({loaded.config.region})"):
                baseline = write_deployed_assembly(aws, candidate, deployed)
            with progress.stage("compare with the deployed stacks"):
                result = compare(deployed, candidate)
                result.changes = scale_backs(
                    aws, load_templates(candidate), baseline, result.changes
                )
    except AwsUnavailableError as error:
        return _unavailable(loaded, error)
    except PlanInputError as error:
        hint = getattr(error, "hint", "compare with a synthesized folder instead (--baseline)")
        print(f"{loaded.file}: {error}. Hint: {hint}.", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in baseline.warnings:
        print(f"{loaded.file}: warning: {line}", file=sys.stderr)
    return _report(result, allow_replacement, output_format, deployed=baseline.to_json())


def _report(
    result: Plan,
    allow_replacement: bool,
    output_format: str,
    *,
    deployed: dict[str, Any] | None = None,
) -> int:
    code = result.exit_code(allow_replacement=allow_replacement)
    if output_format == "json":
        report = result.to_json(allow_replacement=allow_replacement)
        if deployed is not None:  # what the account said: each stack's status, the warnings
            report["deployed"] = deployed
        print(json.dumps(report, indent=1))
    elif output_format == "markdown":
        print(result.render_markdown(allow_replacement=allow_replacement))
        for line in (deployed or {}).get("warnings", []):
            print(f"\n> ⚠️ {line}")
    else:
        print(result.render_text())
    if code == 3:
        print(
            f"plan refused: {len(result.refused)} change(s) that AWS or the nodes refuse; the "
            "deploy would fail and roll back half-way, or the nodes would not follow. Hint: undo "
            "them (no flag allows them).",
            file=sys.stderr,
        )
    elif code == 1:
        print(
            f"plan refused: {len(result.dangerous)} dangerous change(s): something stateful "
            "replaced or removed (data lost or orphaned), nodes recreated or people removed. "
            "Hint: undo the change, or pass --allow-replacement if that is intended.",
            file=sys.stderr,
        )
    return code
