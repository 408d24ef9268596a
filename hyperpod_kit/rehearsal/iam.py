"""Identity-policy evaluation, as IAM does it for one request: an explicit Deny wins, then any
Allow; nothing else is a deny. Conditions are not evaluated: an Allow with a condition counts, and
the decision says so (the report lists it); a Deny with a condition is taken to apply.

Only what the rehearsal needs: identity policies (inline, customer-managed, AWS-managed copies).
Resource policies, SCPs and permission boundaries are outside it, and the report says so.
Tested against moto's evaluator (`moto.iam.access_control`) on the same statements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from hyperpod_kit.rehearsal.model import ResourceRef


@dataclass(frozen=True)
class Statement:
    """One statement of a policy, with where it comes from: the template resource that carries
    it (`origin`), or an AWS managed policy (`managed`, which exists with the role)."""

    effect: str
    actions: tuple[str, ...]
    not_actions: tuple[str, ...]
    resources: tuple[str, ...]
    not_resources: tuple[str, ...]
    conditional: bool
    origin: ResourceRef | None = None
    managed: str | None = None
    sid: str | None = None

    @classmethod
    def parse(
        cls, raw: dict[str, Any], *, origin: ResourceRef | None = None, managed: str | None = None
    ) -> Statement:
        def words(key: str) -> tuple[str, ...]:
            value = raw.get(key, ())
            return tuple(str(v) for v in ([value] if isinstance(value, str) else value))

        return cls(
            effect=str(raw.get("Effect", "Allow")),
            actions=words("Action"),
            not_actions=words("NotAction"),
            resources=words("Resource"),
            not_resources=words("NotResource"),
            conditional=bool(raw.get("Condition")),
            origin=origin,
            managed=managed,
            sid=str(raw["Sid"]) if raw.get("Sid") else None,
        )

    def where(self) -> str:
        if self.managed:
            return f"AWS managed policy {self.managed}"
        return str(self.origin) if self.origin else "?"

    def matches(self, action: str, resource: str) -> bool:
        if self.actions:
            acts = any(_glob(p, action, fold=True) for p in self.actions)
        else:
            acts = not any(_glob(p, action, fold=True) for p in self.not_actions)
        if not acts:
            return False
        if self.resources:
            return any(_resource(p, resource) for p in self.resources)
        return not any(_resource(p, resource) for p in self.not_resources)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    allowed_by: Statement | None = None
    denied_by: Statement | None = None

    @property
    def conditional(self) -> bool:
        """Allowed only by a statement with a condition (not evaluated here)."""
        return self.allowed_by is not None and self.allowed_by.conditional


def evaluate(statements: Iterable[Statement], action: str, resource: str) -> Decision:
    allow: Statement | None = None
    for s in statements:
        if not s.matches(action, resource):
            continue
        if s.effect == "Deny":
            return Decision(False, denied_by=s)
        if allow is None or (allow.conditional and not s.conditional):
            allow = s
    return Decision(allow is not None, allowed_by=allow)


def _resource(pattern: str, resource: str) -> bool:
    # Policy variables (${aws:username}, ...) are not resolved: they match anything.
    pattern = re.sub(r"\$\{[^}]*\}", "*", pattern)
    return _glob(pattern, resource, fold=False)


def _glob(pattern: str, value: str, *, fold: bool) -> bool:
    return _compiled(pattern, fold).fullmatch(value) is not None


@cache
def _compiled(pattern: str, fold: bool) -> re.Pattern[str]:
    regex = "".join(
        ".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern
    )  # fmt: skip
    return re.compile(regex, re.IGNORECASE | re.DOTALL if fold else re.DOTALL)
