"""The synth gates: cdk-nag findings and cfn-lint over a cloud assembly directory.

Read from the assembly on disk (manifest.json, *.template.json), so the same report comes out of
`hyperpod-kit synth`, `npx cdk synth` followed by `hyperpod-kit check`, and the tests.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from hyperpod_kit.cloud_assembly import asset_of, file_assets, read_json, stack_artifacts
from hyperpod_kit.naming import PROVENANCE_METADATA

GateLevel = Literal["error", "warning", "info"]
_NAG_RULE = re.compile(r"\b(AwsSolutions-[A-Za-z0-9]+)\b")
# cfn-lint's informational rules the gate runs and holds as errors: a statement whose resources
# none of its action's ARN forms match (I3510) grants nothing, and the actor fails at run time
# (the CodePipeline source role's `codestar-connections:UseConnection` on a `codeconnections`
# ARN did).
PROMOTED_RULES = ("I3510",)
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
    # The key of the environment file the finding's property (or, failing that, its resource)
    # was built from, as `constructs/provenance.py` recorded it; None when nothing was recorded.
    key: str | None = None
    # The key is the property's own (or the literal's it holds), not only its resource's section.
    exact: bool = False

    def render(self, place: Place | None = None) -> str:
        """``FILE:LINE key: message (gate rule at where)`` for a finding traced to a key (`place`
        gives a key's ``FILE:LINE``; without it the key leads), else the gate, the level, the
        stack and the template path."""
        message = self.message.strip()
        if message.startswith(self.rule):
            message = message[len(self.rule) :].lstrip(" :")
        origin = f"({self.gate} {self.rule} at {self.stack} {self.where})".replace("  ", " ")
        level = "" if self.level == "error" else f"{self.level}: "
        if self.key is not None:
            at = f"{place(self.key)} " if place is not None else ""
            return f"{at}{level}{self.key}: {_sentence(message)} {origin}"
        rule = f"{self.rule} " if self.rule else ""
        return f"{self.gate} {self.level} {self.stack} {self.where}: {rule}{message}"


# Where a key of the environment file is written, as ``FILE:LINE`` (`LoadedEnvironment.at`).
Place = Callable[[str], str]


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


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

    @property
    def traced(self) -> bool:
        """Every error traces to a property's own key of the file: the file is what to change
        (exit 2). An error only placed at its resource's section (a hand-edited template) is
        not the file's alone (exit 1)."""
        return bool(self.errors) and all(f.exact for f in self.errors)

    def render(self, place: Place | None = None) -> str:
        """What `hyperpod-kit synth`, `check` and `app.py` print: findings (no infos), summary."""
        shown = [f.render(place) for f in self.findings if f.level != "info"]
        return "\n".join([*shown, self.summary()])


def check_assembly(outdir: str | Path, *, lint: bool = True) -> GateReport:
    """Gate every stack of the assembly in `outdir`, its nested stacks and the stacks of its
    stages (nested assemblies, `assembly-*/`, as CDK Pipelines deploys them) included:
    annotations (cdk-nag, CDK) and cfn-lint. Findings come stack by stack, in the manifest's
    order (a stage's stacks where the stage is listed)."""
    outdir = Path(outdir)
    manifest = read_json(outdir / "manifest.json", "the assembly's manifest")
    report = GateReport()
    templates: dict[Path, dict[str, Path]] = {}  # per assembly folder
    per_stack: list[tuple[list[GateFinding], list[LintJob], Provenance]] = []
    held: dict[str, dict[str, Any]] = {}  # each template's resources, by its stack's label
    values: dict[str, str] = {}  # the file's literal ids, from every stack (`trace_values`)
    for stack in stack_artifacts(outdir, manifest.get("artifacts", {})):
        artifact = stack.artifact
        if stack.folder not in templates:
            templates[stack.folder] = _file_assets(stack.folder, stack.artifacts)
        region = artifact.get("environment", "aws://unknown/us-east-1").rsplit("/", 1)[-1]
        template_path = stack.folder / artifact["properties"]["templateFile"]
        jobs = []
        nested = _nested(stack.label, template_path, templates[stack.folder])
        for label, path in [(stack.label, template_path), *nested]:
            resources = read_json(path, "a template").get("Resources", {})
            held[label] = resources
            report.stacks.append(
                StackSummary(label, path, len(resources), _suppressions(resources))
            )
            jobs.append((label, path, region))
        metadata = _metadata(stack.folder, artifact)
        keys = Provenance.of(metadata, values)
        noted = [keys.traced(f) for f in _annotations(stack.label, metadata)]
        per_stack.append((noted, jobs if lint else [], keys))
    many = sum(s.resources for s in report.stacks) >= PARALLEL_LINT_FROM
    linted = iter(_lint_all([job for _, jobs, _ in per_stack for job in jobs], parallel=many))
    for noted, jobs, keys in per_stack:
        report.findings += noted
        for _ in jobs:
            report.findings += [keys.traced(f, held.get(f.stack, {})) for f in next(linted)]
    return report


@dataclass
class _Record:
    section: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class Provenance:
    """The keys of the environment file a stack's resources were built from, as their
    constructs recorded them (`constructs/provenance.py`), by construct path and logical id."""

    by_path: dict[str, _Record] = field(default_factory=dict)
    by_logical_id: dict[str, _Record] = field(default_factory=dict)
    stack: _Record = field(default_factory=_Record)  # what holds for every resource (tags)
    # Literal values the file names (existing resources' ids) and their keys, wherever passed.
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, metadata: dict[str, list[dict[str, Any]]], values: dict[str, str] | None = None
    ) -> Provenance:
        """`values`: one map shared by the stacks of an assembly (an id one stack reads from
        the file reaches the others through handles)."""
        found = cls() if values is None else cls(values=values)
        for path, entries in metadata.items():
            records = [e.get("data") for e in entries if e.get("type") == PROVENANCE_METADATA]
            if not records:
                continue
            is_stack = path.count("/") == 1  # the stack's own path: `/<stack>`
            record = found.stack if is_stack else found.by_path.setdefault(path, _Record())
            for data in records:
                if isinstance(data, dict):
                    found.values.update(data.get("values") or {})
                    record.section = record.section or data.get("section")
                    record.properties.update(data.get("properties") or {})
            for entry in entries:
                if entry.get("type") == "aws:cdk:logicalId":
                    found.by_logical_id[str(entry.get("data"))] = record
        return found

    def key(
        self, finding: GateFinding, resources: dict[str, Any] | None = None
    ) -> tuple[str | None, bool]:
        """The key a finding is about, and whether it is the property's own: its property's,
        else the key of the file's literal the property holds (`resources`: the template's),
        else its resource's section."""
        if finding.gate == "cfn-lint":
            parts = finding.where.split("/")
            if len(parts) < 2 or parts[0] != "Resources":
                return None, False
            below = "/".join(parts[3:]) if len(parts) > 3 and parts[2] == "Properties" else ""
            record = self.by_logical_id.get(parts[1])
            found = self.property_key(parts[1], below) if below else None
            if found is None and below and resources:
                held = at_path(resources.get(parts[1], {}).get("Properties", {}), parts[3:])
                found = self.values.get(held) if isinstance(held, str) else None
        else:
            record = self.by_path.get(finding.where)
            found = None
        if found is not None:
            return found, True
        return (record.section if record is not None else None), False

    def property_key(self, logical_id: str, path: str) -> str | None:
        """The key recorded for the property at `path` (`/` between levels) of a resource, or
        for the nearest property above it; the stack's own record (tags) after the resource's."""
        record = self.by_logical_id.get(logical_id)
        parts = path.split("/")
        for end in range(len(parts), 0, -1):
            prefix = "/".join(parts[:end])
            for holder in (record, self.stack):
                key = holder.properties.get(prefix) if holder is not None else None
                if key is not None:
                    return key
        return None

    def traced(self, finding: GateFinding, resources: dict[str, Any] | None = None) -> GateFinding:
        key, exact = self.key(finding, resources)
        return finding if key is None else replace(finding, key=key, exact=exact)


def at_path(value: Any, parts: list[str]) -> Any:
    """The value at a template path below `value` (None where there is none)."""
    for part in parts:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


LintJob = tuple[str, Path, str]  # the label of a stack, its template, its region
# Resources in the assembly from which linting in parallel pays for starting the workers. Linting
# is pure Python, about 14 ms a resource; forked workers inherit the rule set, so on two idle cores
# the default environment (73 resources) lints in 0.55 s instead of 1.1, and Studio with 500 users
# (about 1,600) in 11 s instead of 20. On a busy machine the workers only compete with the rest.
PARALLEL_LINT_FROM = 50


def _lint_all(jobs: list[LintJob], *, parallel: bool) -> list[list[GateFinding]]:
    """cfn-lint on each template, results in the order given; with `parallel`, more than one core
    and template, in forked worker processes, which inherit the rule set built here (linting is
    pure Python: one core a process). The largest templates are handed out first, so that no
    worker starts a large one while the others run out of work (the default environment on two
    cores: 0.59 s in stack order, 0.55 s this way, which is half the serial 1.09 s)."""
    for region in sorted({region for _, _, region in jobs}):
        _rules(_lint_region(region))
    workers = min(len(jobs), _cores()) if parallel else 1
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [_cfn_lint(*job) for job in jobs]
    largest_first = sorted(range(len(jobs)), key=lambda i: -jobs[i][1].stat().st_size)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {i: pool.submit(_lint_job, jobs[i]) for i in largest_first}
        return [futures[i].result() for i in range(len(jobs))]


def _cores() -> int:
    """The cores this process may run on (a container's share, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _lint_job(job: LintJob) -> list[GateFinding]:
    return _cfn_lint(*job)


def _file_assets(folder: Path, artifacts: dict[str, Any]) -> dict[str, Path]:
    """Every file asset of an assembly that is a template, by its hash (asset manifests)."""
    assets = file_assets(folder, artifacts)
    return {d: p for d, p in assets.items() if p.name.endswith(".template.json")}


def _nested(stack: str, template: Path, templates: dict[str, Path]) -> list[tuple[str, Path]]:
    """The nested stacks' templates of a stack, nested ones of those included. CDK writes each
    beside the stack as a file asset; the parent's `TemplateURL` ends in that asset's hash."""
    found = []
    for logical, resource in read_json(template, "a template").get("Resources", {}).items():
        if resource.get("Type") != "AWS::CloudFormation::Stack":
            continue
        path = asset_of(resource.get("Properties", {}).get("TemplateURL"), templates)
        if path is not None:
            label = f"{stack}/{logical.split('NestedStack')[0] or logical}"
            found.append((label, path))
            found += _nested(label, path, templates)
    return found


def _metadata(outdir: Path, artifact: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A stack's metadata: inline in the manifest and, in newer CDKs, `additionalMetadataFile`."""
    metadata: dict[str, list[dict[str, Any]]] = {}
    sources = [artifact.get("metadata", {})]
    if extra := artifact.get("additionalMetadataFile"):
        sources.append(read_json(outdir / extra, "a stack's metadata"))
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


def warm_up(region: str) -> None:
    """Load cfn-lint and its rules for `region` in a background thread: the next `check_assembly`
    then only lints. Call it just before `app.synth()`: Node does that work while this thread has
    the interpreter to itself (during the construct calls before it, the two would take turns at
    the GIL); harmless to call twice."""
    threading.Thread(target=_rules, args=(_lint_region(region),), daemon=True).start()


def _lint_region(region: str) -> str:
    return "us-east-1" if region.startswith("unknown") else region


_RULES_LOCK = threading.Lock()


@cache
def _rules_cached(region: str) -> tuple[Any, Any]:
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    config = ConfigMixIn(regions=[region], include_checks=list(PROMOTED_RULES))
    return config, Runner(config).rules


def _rules(region: str) -> tuple[Any, Any]:
    """cfn-lint's configuration and rule set for `region`, built once per process (building
    them costs ten times what linting a template does)."""
    with _RULES_LOCK:
        return _rules_cached(region)


def _cfn_lint(stack: str, template: Path, region: str) -> list[GateFinding]:
    from cfnlint.decode.decode import decode
    from cfnlint.runner.template.runner import run_template_by_data

    config, rules = _rules(_lint_region(region))
    data, errors = decode(str(template))
    matches = errors or ([] if data is None else list(run_template_by_data(data, config, rules)))
    found = []
    for m in matches:
        severity = str(getattr(m.rule, "severity", "error")).lower()
        if str(m.rule.id) in PROMOTED_RULES:
            severity = "error"
        level: GateLevel = (
            "error" if severity == "error" else ("warning" if severity == "warning" else "info")
        )
        where = "/".join(str(p) for p in getattr(m, "path", []) or []) or template.name
        found.append(GateFinding("cfn-lint", level, stack, where, str(m.rule.id), str(m.message)))
    return found
