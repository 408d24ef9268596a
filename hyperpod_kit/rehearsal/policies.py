"""Which statements apply to a role, and which of them exist at a moment of the deploy.

Read from the templates: a role's inline `Policies` and `ManagedPolicyArns` (AWS managed ones from
the dated copies in `config/facts/managed_policies.json`; customer-managed ones from their
template), every `AWS::IAM::Policy` and `AWS::IAM::ManagedPolicy` that names the role. The
operator's managed policy (the cluster stack's output `OperatorPolicyArn`, attached to no role of
the app) stands for the person who holds it alone: calls made "as" it are checked against its
statements (`operator_policies`). A statement exists at a moment when the resource that carries
it does (`Assembly.exists_at`): created in an earlier stack, or earlier in the same stack by a
DependsOn/Ref chain.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from hyperpod_kit.config.facts.managed_policies import managed_policies
from hyperpod_kit.operator_policy import OUTPUT
from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.iam import Statement
from hyperpod_kit.rehearsal.model import Moment, ResourceRef

AWS_MANAGED = ":iam::aws:policy/"


@dataclass
class RolePolicies:
    """Every statement of every role of an assembly, and what could not be read."""

    assembly: Assembly
    by_role: dict[ResourceRef, list[Statement]] = field(default_factory=dict)
    unknown_managed: dict[ResourceRef, list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, assembly: Assembly) -> RolePolicies:
        found = cls(assembly)
        roles = {ref: res for ref, res in assembly.find("AWS::IAM::Role")}
        by_name = {str(assembly.physical_id(r.stack, r.logical_id)): r for r in roles}
        statements: dict[ResourceRef, list[Statement]] = defaultdict(list)
        for ref, res in roles.items():
            props = assembly.resolve(ref.stack, res.get("Properties", {}))
            for policy in props.get("Policies") or []:
                statements[ref] += _statements(policy.get("PolicyDocument"), origin=ref)
            for arn in props.get("ManagedPolicyArns") or []:
                statements[ref] += found._managed(ref, str(arn))
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for ref, res in assembly.find(kind):
                raw = res.get("Properties", {})
                document = assembly.resolve(ref.stack, raw.get("PolicyDocument"))
                for entry in raw.get("Roles") or []:
                    role = assembly.referenced(ref.stack, entry) or by_name.get(
                        str(assembly.resolve(ref.stack, entry))
                    )
                    if role is not None:
                        statements[role] += _statements(document, origin=ref)
        for ref in operator_policies(assembly):  # the person holding it: its statements alone
            raw = assembly.resource(ref).get("Properties", {})
            document = assembly.resolve(ref.stack, raw.get("PolicyDocument"))
            statements[ref] += _statements(document, origin=ref)
        found.by_role = dict(statements)
        return found

    def _managed(self, role: ResourceRef, arn: str) -> list[Statement]:
        if AWS_MANAGED in arn:
            name = arn.split(AWS_MANAGED, 1)[1]
            document = managed_policies().get(name)
            if document is None:
                self.unknown_managed.setdefault(role, []).append(name)
                return []
            return _statements(document, managed=name)
        # A customer-managed policy of this app: its statements come with the ManagedPolicy
        # resource (found through its `Roles`); one from outside the app cannot be read.
        if not any(
            str(self.assembly.resolve(r.stack, {"Ref": r.logical_id})) == arn
            for r, _ in self.assembly.find("AWS::IAM::ManagedPolicy")
        ):
            self.unknown_managed.setdefault(role, []).append(arn)
        return []

    def at(self, role: ResourceRef, moment: Moment) -> list[Statement]:
        """The statements of `role` that exist when an actor runs at `moment`."""
        return [
            s
            for s in self.by_role.get(role, [])
            if (s.origin is None or self.assembly.exists_at(s.origin, moment))
        ]

    def all(self, role: ResourceRef) -> list[Statement]:
        return list(self.by_role.get(role, []))


def operator_policies(assembly: Assembly) -> list[ResourceRef]:
    """The operator's managed policies: each stack output `OperatorPolicyArn` that is a `Ref` to
    an `AWS::IAM::ManagedPolicy` of its stack (`cluster.operator_policy: true`)."""
    found = []
    for stack in assembly.stacks.values():
        output = stack.template.get("Outputs", {}).get(OUTPUT) or {}
        ref = assembly.referenced(stack.id, output.get("Value"))
        if ref is not None and assembly.resource(ref).get("Type") == "AWS::IAM::ManagedPolicy":
            found.append(ref)
    return found


def _statements(
    document: Any, *, origin: ResourceRef | None = None, managed: str | None = None
) -> list[Statement]:
    if not isinstance(document, dict):
        return []
    raw = document.get("Statement", [])
    raw = [raw] if isinstance(raw, dict) else raw
    return [Statement.parse(s, origin=origin, managed=managed) for s in raw if isinstance(s, dict)]
