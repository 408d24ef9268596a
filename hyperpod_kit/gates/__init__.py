"""The synth gates: cdk-nag findings and cfn-lint over a cloud assembly directory.

Read from the assembly on disk (manifest.json, *.template.json), so the same report comes out of
`hyperpod-kit synth`, `npx cdk synth` followed by `hyperpod-kit check`, and the tests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

GateLevel = Literal["error", "warning", "info"]
_NAG_RULE = re.compile(r"\b(AwsSolutions-[A-Za-z0-9]+)\b")
_LEVELS: dict[str, GateLevel] = {
    "aws:cdk:error": "error",
    "aws:cdk:warning": "warning",
    "aws:cdk:info": "info",
}


@dataclass(frozen=True)
class GateFinding:
    gate: Literal["cdk-nag", "cdk", "cfn-lint"]
    level: GateLevel
    stack: str
    where: str
    rule: str
    message: str

    def render(self) -> str:
        rule = "" if self.message.startswith(self.rule) else f"{self.rule} "
        return f"{self.gate} {self.level} {self.where}: {rule}{self.message}"


@dataclass(frozen=True)
class StackSummary:
    name: str
    template: Path
    resources: int
    nag_suppressions: int


@dataclass
class GateReport:
    stacks: list[StackSummary] = field(default_factory=list)
    findings: list[GateFinding] = field(default_factory=list)

    @property
    def errors(self) -> list[GateFinding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def count(self, gate: str, level: GateLevel) -> int:
        return sum(1 for f in self.findings if f.gate == gate and f.level == level)

    def summary(self) -> str:
        width = max((len(s.name) for s in self.stacks), default=5)
        lines = [f"  {'stack':<{width}}  resources  nag suppressions"]
        lines += [
            f"  {s.name:<{width}}  {s.resources:>9}  {s.nag_suppressions:>16}" for s in self.stacks
        ]
        lines.append(
            f"cdk-nag AwsSolutions: {self.count('cdk-nag', 'error')} errors, "
            f"{self.count('cdk-nag', 'warning')} warnings, "
            f"{sum(s.nag_suppressions for s in self.stacks)} suppressed with a reason"
        )
        lines.append(
            f"cfn-lint: {self.count('cfn-lint', 'error')} errors, "
            f"{self.count('cfn-lint', 'warning')} warnings"
        )
        cdk_warnings = self.count("cdk", "warning")
        if self.count("cdk", "error") or cdk_warnings:
            lines.append(f"cdk: {self.count('cdk', 'error')} errors, {cdk_warnings} warnings")
        return "\n".join(lines)

    def render(self) -> str:
        """What `hyperpod-kit synth`, `check` and `app.py` print: findings (no infos), summary."""
        shown = [f.render() for f in self.findings if f.level != "info"]
        return "\n".join([*shown, self.summary()])


def check_assembly(outdir: str | Path, *, lint: bool = True) -> GateReport:
    """Gate every stack of the assembly in `outdir`: annotations (cdk-nag, CDK) and cfn-lint."""
    outdir = Path(outdir)
    manifest = json.loads((outdir / "manifest.json").read_text())
    report = GateReport()
    for name, artifact in manifest.get("artifacts", {}).items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template_path = outdir / artifact["properties"]["templateFile"]
        template = json.loads(template_path.read_text())
        resources = template.get("Resources", {})
        report.stacks.append(
            StackSummary(name, template_path, len(resources), _suppressions(resources))
        )
        report.findings += _annotations(name, _metadata(outdir, artifact))
        if lint:
            region = artifact.get("environment", "aws://unknown/us-east-1").rsplit("/", 1)[-1]
            report.findings += _cfn_lint(name, template_path, region)
    return report


def _metadata(outdir: Path, artifact: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A stack's metadata: inline in the manifest and, in newer CDKs, `additionalMetadataFile`."""
    metadata: dict[str, list[dict[str, Any]]] = {}
    sources = [artifact.get("metadata", {})]
    if extra := artifact.get("additionalMetadataFile"):
        sources.append(json.loads((outdir / extra).read_text()))
    for source in sources:
        for path, entries in source.items():
            metadata.setdefault(path, []).extend(entries)
    return metadata


def _annotations(stack: str, metadata: dict[str, list[dict[str, Any]]]) -> list[GateFinding]:
    found = []
    for path, entries in metadata.items():
        for entry in entries:
            level = _LEVELS.get(entry.get("type", ""))
            if level is None:
                continue
            text = str(entry.get("data", ""))
            rule = _NAG_RULE.search(text)
            found.append(
                GateFinding(
                    "cdk-nag" if rule else "cdk",
                    level,
                    stack,
                    path,
                    rule.group(1) if rule else "",
                    text.strip(),
                )
            )
    return found


def _suppressions(resources: dict[str, Any]) -> int:
    return sum(
        len(r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []))
        for r in resources.values()
    )


def _cfn_lint(stack: str, template: Path, region: str) -> list[GateFinding]:
    from cfnlint.api import ManualArgs, lint_file

    if region.startswith("unknown"):
        region = "us-east-1"
    matches = lint_file(template, config=ManualArgs(regions=[region]))
    found = []
    for m in matches:
        severity = str(getattr(m.rule, "severity", "error")).lower()
        level: GateLevel = (
            "error" if severity == "error" else ("warning" if severity == "warning" else "info")
        )
        where = "/".join(str(p) for p in getattr(m, "path", []) or []) or template.name
        found.append(GateFinding("cfn-lint", level, stack, where, str(m.rule.id), str(m.message)))
    return found
