"""The deploy rehearsal: play a deploy in CloudFormation's order, offline, and check every AWS call
each actor makes (node hooks, timers, the rendered job, Studio scripts, Lambda handlers) against
the IAM policies that exist at that moment for the role it runs as.

`assembly` reads a synthesized cloud assembly (order, values); `actors` runs the actors in
sandboxes and records their calls; `policies` and `iam` say whether a call is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperpod_kit.config.schema import EnvironmentConfig
    from hyperpod_kit.rehearsal.check import Report


def rehearse_assembly(assembly: Path, config: EnvironmentConfig, *, workdir: Path) -> Report:
    """Record every actor's calls on a synthesized assembly and check them."""
    from hyperpod_kit.rehearsal.actors import record_calls
    from hyperpod_kit.rehearsal.assembly import Assembly
    from hyperpod_kit.rehearsal.check import Problem, check_calls
    from hyperpod_kit.rehearsal.policy_lint import lint_assembly

    loaded = Assembly.load(assembly)
    recording = record_calls(loaded, config, workdir=workdir)
    report = check_calls(loaded, recording, failures=recording.failures, skipped=recording.skipped)
    report.problems += [
        Problem(
            "policy-lint",
            str(f.where),
            "synth",
            f"{f.issue}: {f.detail}",
            "fix the statement, or give the finding a reason in "
            "config/facts/policy_lint_reasons.json",
        )
        for f in lint_assembly(loaded)
    ]
    return report
