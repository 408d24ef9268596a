"""Findings: what validation says about an environment file, as data.

The CLI, the tests, `app.py` and `plan` all render the same `Finding`, so an error reads the same
wherever it is met: ``FILE:LINE path: message. Hint: hint.``
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace


class Level(enum.IntEnum):
    """How bad a finding is; ordered so that ``max()`` gives the worst."""

    INFO = 1
    WARNING = 2
    ERROR = 3


@dataclass(frozen=True)
class Finding:
    level: Level
    path: str
    message: str
    hint: str | None = None
    line: int | None = None
    check: str = "schema"
    # The file the line is in, when it is not the one being loaded: a value an environment
    # inherited from its base (`extends:`) is reported where it is written.
    file: str | None = None

    def at_line(self, line: int | None) -> Finding:
        return replace(self, line=line)

    def render(self, file: str) -> str:
        file = self.file or file
        where = f"{file}:{self.line}" if self.line else file
        level = "" if self.level is Level.ERROR else f"{self.level.name.lower()}: "
        text = f"{where} {level}{self.path}: {_sentence(self.message)}"
        if self.hint:
            text += f" Hint: {_sentence(self.hint)}"
        return text


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.level is Level.ERROR for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first, then in file order, so the first line printed is the one to fix first."""
    return sorted(findings, key=lambda f: (-f.level, f.file or "", f.line or 0, f.path))


class ConfigError(Exception):
    """Raised with the findings when an environment file cannot become a config."""

    def __init__(self, file: str, findings: list[Finding]) -> None:
        self.file = file
        self.findings = sort_findings(findings)
        super().__init__("\n".join(f.render(file) for f in self.findings))
