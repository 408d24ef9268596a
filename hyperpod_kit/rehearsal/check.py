"""Check recorded calls against the grants that exist when each actor runs, and report.

A call no statement allows at its moment fails the rehearsal, naming the actor, the call, the
role, and the stack that would have to grant it (the actor's own stack or an earlier one). Where
a grant does exist but only later (a stack that deploys after the actor ran), the finding says
which: that is the first-deploy failure a day-2 test never sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.iam import Statement, evaluate
from hyperpod_kit.rehearsal.model import ActorFailure, Call, ResourceRef, SkippedActor
from hyperpod_kit.rehearsal.permissions import Permissions, Requirement, UnknownOperationError
from hyperpod_kit.rehearsal.policies import RolePolicies

# Answers of the fake AWS that mean "not created yet" at the actor's moment.
NOT_THERE_YET = frozenset({"ParameterNotFound", "NoSuchKey", "NoSuchBucket"})
# What the rehearsal does not see; printed with every report.
LIMITS = (
    "conditions in policies are not evaluated (an Allow with a condition counts, and is listed)",
    "service control policies, permission boundaries and session policies are not read",
    "resource policies (bucket, key and topic policies) are not read; resources outside the app "
    "(an existing VPC, bucket, file system or EKS cluster) are assumed to allow",
    "CDK's own functions (bucket deployment, custom-resource providers) are CDK's to grant",
)


@dataclass(frozen=True)
class Problem:
    """A call the rehearsal refuses (`kind`: denied, too-early, no-role, unknown-call, not-yet,
    actor, policy-lint)."""

    kind: str
    actor: str
    moment: str
    message: str
    hint: str = ""

    def render(self) -> str:
        hint = f" Hint: {self.hint}" if self.hint else ""
        return f"rehearsal: {self.actor} ({self.moment}): {self.message}.{hint}"


@dataclass
class Report:
    calls: list[Call] = field(default_factory=list)
    checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    conditional: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        actors = len({c.actor for c in self.calls})
        return (
            f"rehearsal: {actors} actors, {len(self.calls)} calls, {self.checked} permission "
            f"checks; {len(self.problems)} problems, {len(set(self.conditional))} allowed only "
            "under conditions not evaluated"
        )

    def render(self) -> str:
        lines = [p.render() for p in self.problems]
        lines += [f"note: {n}" for n in dict.fromkeys(self.notes)]
        lines.append(self.summary())
        lines.append("not checked: " + "; ".join(LIMITS))
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "calls": len(self.calls),
            "checked": self.checked,
            "problems": [p.__dict__ for p in self.problems],
            "conditional": sorted(set(self.conditional)),
            "notes": list(dict.fromkeys(self.notes)),
            "not_checked": list(LIMITS),
        }


def check_calls(
    assembly: Assembly,
    calls: Iterable[Call],
    *,
    failures: Iterable[ActorFailure] = (),
    skipped: Iterable[SkippedActor] = (),
) -> Report:
    """Check every call; an actor that failed in its sandbox, and a read of something that
    does not exist yet at the actor's moment (the fake AWS answered ParameterNotFound,
    NoSuchKey, ...), are problems too: on AWS the node, custom resource or job meets the same."""
    calls = list(calls)
    policies = RolePolicies.read(assembly)
    permissions = Permissions(assembly, calls)
    report = Report(calls=calls)
    for failure in failures:
        tail = " | ".join(failure.output_tail.strip().splitlines()[-3:])
        report.problems.append(
            Problem(
                "actor",
                failure.actor,
                failure.moment.label,
                f"exited {failure.exit_code} in its sandbox: {tail}",
                "run `hyperpod-kit check --rehearse FILE` and read the actor's output; on "
                "AWS this node, custom resource or job fails the same way",
            )
        )
    for skip in skipped:
        report.notes.append(f"not played: {skip.name} ({skip.reason})")
    for call in calls:
        if call.error in NOT_THERE_YET:
            report.problems.append(
                Problem(
                    "not-yet",
                    call.actor,
                    call.moment.label,
                    f"{call.source or call.operation}: {call.error}: nothing of the "
                    "assembly has created it at this moment",
                    "create it in a stack that deploys before the actor's (add a stack "
                    "dependency), or read it later",
                )
            )
    for role, names in policies.unknown_managed.items():
        report.notes.append(
            f"{role}: managed policies not in config/facts/managed_policies.json, taken as "
            f"granting nothing: {', '.join(names)}"
        )
    for call in calls:
        _check(assembly, policies, permissions, call, report)
    # An actor that retries repeats its calls: one problem each.
    report.problems = list(dict.fromkeys(report.problems))
    return report


def _check(
    assembly: Assembly,
    policies: RolePolicies,
    permissions: Permissions,
    call: Call,
    report: Report,
) -> None:
    moment = call.moment
    what = f"{call.service}:{call.operation}"
    if not assembly.exists_at(call.role, moment):
        report.problems.append(
            Problem(
                "no-role",
                call.actor,
                moment.label,
                f"runs as {call.role}, which does not exist yet",
                f"create the role in {_grantor(assembly, call)} or earlier",
            )
        )
        return
    try:
        required = permissions.required(call)
    except UnknownOperationError:
        report.problems.append(
            Problem(
                "unknown-call",
                call.actor,
                moment.label,
                f"{what} ({call.source}) is not in config/facts/call_actions.json",
                "add its IAM actions and resource to the table",
            )
        )
        return
    now = policies.at(call.role, moment)
    for need in required:
        report.checked += 1
        decision = evaluate(now, need.action, need.resource)
        if decision.allowed:
            if decision.conditional and decision.allowed_by:
                report.conditional.append(
                    f"{need.action} on {need.resource} for {call.role} "
                    f"({decision.allowed_by.where()})"
                )
            continue
        report.problems.append(_denied(assembly, policies, call, need, decision.denied_by))


def _denied(
    assembly: Assembly,
    policies: RolePolicies,
    call: Call,
    need: Requirement,
    deny: Statement | None,
) -> Problem:
    why = f" ({need.why})" if need.why else ""
    message = (
        f"{need.action} on {need.resource}{why} is not allowed for role {call.role} "
        f"[{call.source or call.service + ':' + call.operation}]"
    )
    if deny is not None:
        return Problem(
            "denied",
            call.actor,
            call.moment.label,
            f"{message}: denied by {deny.where()}",
            "remove or narrow the Deny",
        )
    later = evaluate(policies.all(call.role), need.action, need.resource)
    if later.allowed and later.allowed_by is not None:
        return Problem(
            "too-early",
            call.actor,
            call.moment.label,
            f"{message} yet: the grant in {later.allowed_by.where()} is created after this "
            "actor runs",
            f"grant it in {_grantor(assembly, call)} (or a stack deployed before it), or make "
            "the actor's resource depend on the grant",
        )
    return Problem(
        "denied", call.actor, call.moment.label, message, f"grant it in {_grantor(assembly, call)}"
    )


def _grantor(assembly: Assembly, call: Call) -> str:
    """The stack that would have to grant: the actor's resource's (top-level) stack, or the
    role's own stack for an actor that runs after the deploy."""
    ref: ResourceRef = call.moment.resource or call.role
    return f"stack {assembly.top(ref.stack).id}"


def dumps(report: Report) -> str:
    return json.dumps(report.as_json(), indent=2)
