"""Lint every identity policy of an assembly with parliament (unknown actions and prefixes,
resources an action does not take, conditions it does not support).

parliament's action list predates HyperPod's newest APIs, so an action it calls unknown is
checked against botocore's operation names first (botocore is pinned and newer); what remains is
a finding unless `config/facts/policy_lint_reasons.json` gives it a written reason.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from hyperpod_kit.config.facts import HERE
from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.model import ResourceRef

REASONS = HERE / "policy_lint_reasons.json"
# IAM prefix -> botocore service name, where they differ.
_BOTOCORE_NAME = {"sagemaker": "sagemaker", "eks-auth": "eks-auth", "logs": "logs"}


@dataclass(frozen=True)
class PolicyFinding:
    where: ResourceRef
    issue: str
    detail: str

    def render(self) -> str:
        return f"policy lint: {self.where}: {self.issue}: {self.detail}"


def lint_assembly(assembly: Assembly) -> list[PolicyFinding]:
    return [
        PolicyFinding(where, issue, detail)
        for where, document in _documents(assembly)
        for issue, detail in lint_document(document)
    ]


def lint_document(document: dict[str, Any]) -> list[tuple[str, str]]:
    """One policy document's findings (issue, detail), those botocore or a written reason
    answers left out: for policies hyperpod-kit prints rather than synthesizes (`nodes
    --print-policy`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # parliament imports pkg_resources (deprecated)
        from parliament import analyze_policy_string

        policy = analyze_policy_string(json.dumps(document))
    found = []
    for f in policy.findings:
        detail = str(f.detail)
        if f.issue == "UNKNOWN_ACTION" and _botocore_knows(detail.rsplit(" ", 1)[-1]):
            continue
        if _reason(f.issue, detail) is None:
            found.append((str(f.issue), detail))
    return found


def _documents(assembly: Assembly) -> Iterator[tuple[ResourceRef, dict[str, Any]]]:
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for ref, res in assembly.find(kind):
            yield ref, assembly.resolve(ref.stack, res.get("Properties", {}).get("PolicyDocument"))
    for ref, res in assembly.find("AWS::IAM::Role"):
        for policy in res.get("Properties", {}).get("Policies") or []:
            yield ref, assembly.resolve(ref.stack, policy.get("PolicyDocument"))


def _botocore_knows(action: str) -> bool:
    """`prefix:Operation` names an operation of botocore's model for that service."""
    prefix, _, operation = action.partition(":")
    return operation in _operations(_BOTOCORE_NAME.get(prefix, prefix))


@cache
def _operations(service: str) -> frozenset[str]:
    import botocore.session
    from botocore.exceptions import UnknownServiceError

    try:
        model = botocore.session.get_session().get_service_model(service)
    except UnknownServiceError:
        return frozenset()
    return frozenset(model.operation_names)


@cache
def _reasons() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = json.loads(REASONS.read_text())["reasons"]
    return rows


def _reason(issue: str, detail: str) -> str | None:
    for row in _reasons():
        if row["issue"] == issue and row["match"] in detail:
            return row["reason"]
    return None
