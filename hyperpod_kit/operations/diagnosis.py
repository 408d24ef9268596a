"""The diagnosis of a failed deployment: the failure messages, the failed stack events and the
failing node's log matched against the table of known signatures
(`hyperpod_kit/config/facts/failure_signatures.json`: each with its source, and whether a public
source quotes the message or only its error code was found). `docs/troubleshooting.md` is
rendered from the same table (`render_markdown`; a test fails when it is stale)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from hyperpod_kit.config.facts import HERE

Where = Literal["failure_message", "stack_event", "node_health", "node_log"]
WHERE: tuple[Where, ...] = ("failure_message", "stack_event", "node_health", "node_log")
# a signature found on several nodes' health verdicts is shown once per node, not once in all
PER_ORIGIN: tuple[Where, ...] = ("node_health",)
TABLE = HERE / "failure_signatures.json"
UNCHECKED = "not checked against a real message"


@dataclass(frozen=True)
class Signature:
    id: str
    cause: str
    where: tuple[Where, ...]
    patterns: tuple[re.Pattern[str], ...]
    codes: tuple[str, ...]
    checked: bool
    quote: str | None
    source: str
    what_to_do: str
    example: dict[str, str]


@dataclass(frozen=True)
class Evidence:
    """One line of input: where it was read (and from what: a stack, a node's stream)."""

    where: Where
    text: str
    origin: str = ""


@dataclass(frozen=True)
class Diagnosis:
    signature: Signature
    evidence: Evidence
    detail: str = ""  # e.g. "step 30-fsx, exit 32; the line before: ..."

    def as_json(self) -> dict[str, Any]:
        return {
            "cause": self.signature.cause,
            "signature": self.signature.id,
            "checked": self.signature.checked,
            "evidence": self.evidence.text,
            "where": self.evidence.where,
            "origin": self.evidence.origin,
            "detail": self.detail,
            "what_to_do": self.signature.what_to_do,
            "source": self.signature.source,
        }

    def render(self) -> str:
        mark = "" if self.signature.checked else f" ({UNCHECKED})"
        origin = f" [{self.evidence.origin}]" if self.evidence.origin else ""
        lines = [
            f"likely cause: {self.signature.cause}{mark}",
            f"  evidence{origin}: {self.evidence.text.strip()[:400]}",
        ]
        if self.detail:
            lines.append(f"  {self.detail}")
        lines.append(f"  what to do: {self.signature.what_to_do}")
        return "\n".join(lines)


@cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


@cache
def signatures() -> tuple[Signature, ...]:
    return tuple(
        Signature(
            id=row["id"],
            cause=row["cause"],
            where=tuple(row["where"]),
            patterns=tuple(re.compile(p, re.IGNORECASE) for p in row["patterns"]),
            codes=tuple(row["codes"]),
            checked=bool(row["checked"]),
            quote=row["quote"],
            source=row["source"],
            what_to_do=row["what_to_do"],
            example=dict(row["example"]),
        )
        for row in table()["signatures"]
    )


def _matches(signature: Signature, line: Evidence) -> re.Match[str] | None:
    if line.where not in signature.where:
        return None
    for pattern in signature.patterns:
        found = pattern.search(line.text)
        if found:
            return found
    for code in signature.codes:  # an error code as a word: "(ErrorCode: X)", "X:"
        found = re.search(rf"\b{re.escape(code)}\b", line.text)
        if found:
            return found
    return None


def diagnose(lines: Iterable[Evidence]) -> list[Diagnosis]:
    """Each signature that matches, once (once per node for a health verdict), with its first
    evidence: messages and stack events before health verdicts and log lines; for a failed
    lifecycle step, the line it failed on (the last line before hyperpod-kit's FAILED line) as
    detail. The generic lifecycle message only when nothing more
    specific matched."""
    lines = list(lines)
    found: dict[str, Diagnosis] = {}
    ordered = sorted(range(len(lines)), key=lambda i: (WHERE.index(lines[i].where), i))
    for i in ordered:
        line = lines[i]
        for signature in signatures():
            key = f"{signature.id}@{line.origin}" if line.where in PER_ORIGIN else signature.id
            if key in found:
                continue
            match = _matches(signature, line)
            if match is None:
                continue
            detail = ""
            if "step" in match.groupdict():
                before = _line_before(lines, i)
                detail = f"step {match['step']}, exit {match['exit']}" + (
                    f"; the line it failed on: {before}" if before else ""
                )
            found[key] = Diagnosis(signature, line, detail)
            break  # one cause per line: the first signature of the table
    if len(found) > 1:
        found.pop("lifecycle-generic", None)
    return list(found.values())


def _line_before(lines: list[Evidence], index: int) -> str:
    """The last log line of the same stream before `index` that is not hyperpod-kit's own."""
    here = lines[index]
    for line in reversed(lines[:index]):
        if line.where == "node_log" and line.origin == here.origin:
            text = line.text.strip()
            if text and "hyperpod-kit lifecycle:" not in text:
                return text[:300]
    return ""


def render_markdown() -> str:
    """docs/troubleshooting.md: the table, as `status` uses it."""
    data = table()
    out = [
        "# Troubleshooting a deployment",
        "",
        "<!-- Generated from hyperpod_kit/config/facts/failure_signatures.json by",
        "     `python -m hyperpod_kit.operations.diagnosis > docs/troubleshooting.md`;",
        "     tests/unit/test_status.py fails when this file is stale. -->",
        "",
        '`hyperpod-kit status FILE` answers "is it up, and if not, why": when a stack, the '
        "cluster or a node failed, it matches the cluster's `FailureMessage` and each node's "
        "status message, the reasons of the failed stack events, and the failing node's log "
        "(`hyperpod-kit logs FILE`, the failing node first) against the signatures below, and "
        "prints the likely cause, the evidence (the line that matched) and what to do.",
        "",
        "What `status` reads, all through the one AWS facade (`hyperpod_kit/config/aws.py`: "
        "boto3's credential chain, the file's region, retries with backoff, every page):",
        "",
        "- the stacks tagged `hyperpod-kit:environment=<name>` (CloudFormation), and the handles "
        "each stack publishes at `/hyperpod-kit/<name>/<area>` (SSM): nothing is guessed;",
        "- the cluster (`DescribeCluster`, `ListClusterNodes`: status, `FailureMessage`, counts, "
        "`ImageVersionStatus`); a node's **health** is the health runner's newest verdicts in "
        "the stream `hyperpod-kit/health/<instance-id>` of the cluster's log group "
        "`/aws/sagemaker/Clusters/<cluster-name>/<cluster-id>` (source `log-group verdict`, "
        "with the verdict's time) and, on EKS, the node's label "
        "`sagemaker.amazonaws.com/node-health-status` (source `eks-label`: read from the "
        "cluster's Kubernetes API, `GET /api/v1/nodes`, with a token as `aws eks get-token` "
        "makes it, so the caller needs an access entry; when refused, `status` says so and keeps "
        "the verdicts); `unknown` when there is neither. An unhealthy verdict stands (it names "
        "the check); a label asking for a reboot or replacement makes the node unhealthy. The "
        "API has no health field, and HyperPod's node health events go to the alert topic and "
        "are not stored. An unhealthy node makes `status` exit 1, and it is diagnosed once per "
        "node (`node-unhealthy`, `node-labelled-for-repair`);",
        "- the file system and its data repository associations (FSx), its free space "
        "(CloudWatch `FreeDataStorageCapacity`; below 10% is *degraded*);",
        "- the Studio domain and each Studio person's partition report under "
        "`/hyperpod-kit/<name>/partitions/` (the partitions gate waits for these);",
        "- the Slurm accounting database (RDS `DescribeDBClusters` of "
        "`<name>-slurm-accounting`), when the file has one;",
        "- the alarms named `<name>-…` in ALARM.",
        "",
        "It judges what it found against what the environment file implies, from the validated "
        "file alone (no synth): every stack of the environment, the cluster, every instance "
        "group at the file's `instance_count`, the file system, Studio and its partitions, the "
        "accounting database, monitoring. Whatever the file names and AWS does not have is "
        "*not deployed*, each by name (`not deployed: stack <name>-storage`, `not deployed: "
        "instance group login of cluster …`), and `status` exits 1; a group short of the file's "
        "count (or whose target differs from it) is *degraded*. The state shown is the most "
        "urgent: failed, then in progress, then not deployed, then degraded; healthy (exit 0) "
        "only when nothing is missing and nothing is wrong. Nothing of the environment at all "
        "is exit 2 (one line).",
        "",
        "`hyperpod-kit logs FILE` prints the nodes' streams of that log group (HyperPod's "
        "`LifecycleConfig/<group>/<instance-id>`, the shipped `hyperpod-kit/lifecycle/…` and "
        "`hyperpod-kit/health/…`), the failing node first; `--node`, `--group`, `--since 2h`, "
        "`--grep REGEX`, `--follow`; `--save DIR` exports one file per stream. What `logs` and "
        "`status` print passes through one filter: a node's control characters and terminal "
        "escape sequences (and bidirectional controls) are written visibly, `\\x1b`, `\\r`, "
        "`\\u202e`, never executed by the terminal; tab and line feed are kept. `--save` keeps "
        "the events as they are.",
        "",
        f"Table dated {data['date']}. A signature marked *{UNCHECKED}* matches on the error "
        "code or on a paraphrase: no public source quoting the message was found. Each has an "
        "example input (below: a public quote where one exists, else written from the error "
        "code) that the tests diagnose.",
        "",
        "Stack events come from CloudFormation's `DescribeStackEvents` (the failing resource "
        "first), read through the one AWS facade. The pinned CDK CLI (2.1148.1) has "
        "`cdk diagnose [STACKS..]`, which finds the root cause of a stack's failure; it is "
        "not reused: it needs the app or a cloud assembly (a synth, with Node, tens of "
        "seconds), while `status` works from the environment file alone (a CI job, a laptop "
        "without the assembly), and it prints text for people, while the diagnosis needs the "
        "events as data to match against this table. Run `npx cdk diagnose` yourself for its "
        "view of a stack.",
        "",
        "| cause | matched in | message checked | what to do |",
        "|---|---|---|---|",
    ]
    for s in signatures():
        where = ", ".join(s.where).replace("_", " ")
        checked = "quoted verbatim" if s.checked else UNCHECKED
        out.append(f"| {_cell(s.cause)} (`{s.id}`) | {where} | {checked} | {_cell(s.what_to_do)} |")
    out.append("")
    for s in signatures():
        out += [f"## {s.id}: {s.cause}", ""]
        patterns = ", ".join(f"`{p.pattern}`" for p in s.patterns)
        codes = ", ".join(f"`{c}`" for c in s.codes)
        out.append(f"- Matched in: {', '.join(s.where).replace('_', ' ')}; patterns {patterns}"
                   + (f"; error codes {codes}" if codes else ""))  # fmt: skip
        if s.checked and s.quote:
            out.append(f"- Message as a public source quotes it: `{s.quote}`")
        else:
            out.append(f"- {UNCHECKED.capitalize()}.")
        out.append(f"- Source: {s.source}")
        (where, text), = s.example.items()  # fmt: skip
        out.append(f"- Example input ({where.replace('_', ' ')}): `{text}`")
        out += [f"- What to do: {s.what_to_do}", ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(render_markdown(), end="")
