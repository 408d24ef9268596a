"""The validators' registry: the `validator` decorator each area's checks register with, and
`run_validators`, which runs them.

The areas (`config/validators/<area>.py`) import this module, and the package's `__init__`
imports the areas, so that importing `hyperpod_kit.config.validators` registers every check and
nothing imports the package back while it loads (tests/unit/test_house.py). Run the checks through
the package (`from hyperpod_kit.config.validators import run_validators`): this module alone
knows only the areas imported so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig

Check = Callable[[EnvironmentConfig], Iterator[Finding]]


@dataclass(frozen=True)
class Validator:
    name: str
    area: str
    check: Check
    first: bool = False  # runs before the others: its finding leads among those of one line


REGISTRY: dict[str, Validator] = {}


def validator(name: str, *, area: str, first: bool = False) -> Callable[[Check], Check]:
    """Register `check` under `name`; the name is what users suppress and tests select. `first`:
    its findings come before the others' (a value with a control character is reported for
    that before any rule reads the rest of it)."""

    def register(check: Check) -> Check:
        if name in REGISTRY:
            raise ValueError(f"validator {name!r} registered twice")
        REGISTRY[name] = Validator(name, area, check, first)
        return check

    return register


def run_validators(
    config: EnvironmentConfig, *, suppress: Iterable[str] = (), only: Sequence[str] | None = None
) -> list[Finding]:
    """All findings of all (or `only` the named) validators, minus suppressed warnings and infos."""
    unknown = [n for n in suppress if n not in REGISTRY]
    findings = [
        Finding(
            Level.WARNING,
            "validation.suppress",
            f"no check is named {name!r}",
            f"names: {', '.join(sorted(REGISTRY))}",
            check="validation",
        )
        for name in unknown
    ]
    muted = set(suppress)
    for v in sorted(REGISTRY.values(), key=lambda v: not v.first):  # stable: else as registered
        if only is not None and v.name not in only:
            continue
        for f in v.check(config):
            if f.level is Level.ERROR or v.name not in muted:
                findings.append(replace(f, check=v.name))
    return findings
