"""`requires:`: the hyperpod-kit versions an environment file is written for.

    requires:
      hyperpod_kit: ">=0.1,<0.2"     # a PEP 440 range, as pip reads one

A loader directive like `extends` and `abstract` (config/extends.py): read from each file of a
chain and removed before the merge, so it is never inherited and the schema never sees it. It
is checked as soon as the file is parsed, before its `extends:` is followed and before any
schema finding: a file written for a newer hyperpod-kit may use keys this one does not know,
and "unknown key" would be the wrong answer. A hyperpod-kit outside the range is refused in one
line at the range's line; a `requires` that is not a mapping of known keys, or a range that
is not one, is an error at its own line.
"""

from __future__ import annotations

import difflib
from typing import Any

from packaging.specifiers import SpecifierSet

from hyperpod_kit.config.loader import _Document, _fail
from hyperpod_kit.text import control_characters, control_hint, describe, shown
from hyperpod_kit.versions import (
    TOOLKIT,
    parse_specifier,
    parse_version,
    toolkit_satisfies,
    toolkit_version,
)

REQUIRES = "requires"
TOOLKIT_KEY = "hyperpod_kit"
KEYS = (TOOLKIT_KEY,)
# A range is a few clauses (`>=0.1,<0.2`); a longer text is not one worth printing back.
MAX_RANGE_CHARS = 200
EXAMPLE = '">=0.1,<0.2"'
_HINT_RANGE = (
    f"a PEP 440 range in quotes, as pip reads one: {TOOLKIT_KEY}: {EXAMPLE} (this is "
    f"{TOOLKIT} {{version}})"
)


def check_requires(file: str, doc: _Document) -> None:
    """Take `requires` out of `doc` (the file `file`, parsed); `ConfigError` with one finding
    when this hyperpod-kit is outside its range, or when it is not a valid `requires`."""
    if REQUIRES not in doc.data:
        return
    value = doc.data.pop(REQUIRES)
    line = doc.lines.get((REQUIRES,))
    if not isinstance(value, dict) or not value:
        _fail(
            file,
            REQUIRES,
            "is empty" if value in (None, {}) else "should be a mapping such as `hyperpod_kit:`",
            f"write `{TOOLKIT_KEY}: {EXAMPLE}` indented under '{REQUIRES}:', or remove it",
            line,
        )
    if TOOLKIT_KEY in value:
        _check_toolkit(file, value[TOOLKIT_KEY], doc.lines.get((REQUIRES, TOOLKIT_KEY), line))
    for key in value:
        if key not in KEYS:
            name = str(key)
            close = difflib.get_close_matches(name, KEYS, n=1) if len(name) < 100 else []
            _fail(
                file,
                f"{REQUIRES}.{shown(name) if control_characters(name) else name}",
                "unknown key",
                f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(KEYS)}",
                doc.lines.get((REQUIRES, key), line),
            )


def _check_toolkit(file: str, value: Any, line: int | None) -> None:
    path = f"{REQUIRES}.{TOOLKIT_KEY}"
    hint = _HINT_RANGE.format(version=toolkit_version())
    if not isinstance(value, str):
        written = "has no value" if value is None else f"YAML read {value!r} as {_kind(value)}"
        _fail(file, path, f"{written}; it should be a version range, as text", hint, line)
    if control_characters(value):
        said = f"{shown(value)} holds {describe(control_characters(value)[0])}"
        _fail(file, path, said, control_hint(value), line)
    if len(value) > MAX_RANGE_CHARS:
        _fail(file, path, f"is longer than {MAX_RANGE_CHARS} characters", hint, line)
    specifier = parse_specifier(value)
    if specifier is None:
        _fail(file, path, f"{shown(value)} is not a version range", hint, line)
    if toolkit_satisfies(specifier):
        return
    wanted = value.strip()
    install = f"pip install '{TOOLKIT}{wanted}' (in a checkout: check out a release in that range "
    install += "and run make setup)"
    if _newer_wanted(specifier):
        hint = f"upgrade hyperpod-kit into that range: {install}; until then this file may use "
        hint += "keys this version does not know"
    else:
        hint = f"install a hyperpod-kit in that range: {install}"
    message = f"this file needs {TOOLKIT} {wanted}, and this is {TOOLKIT} {toolkit_version()}"
    _fail(file, path, message, hint, line)


def _newer_wanted(specifier: SpecifierSet) -> bool:
    """Whether a lower bound of `specifier` is above this version (then it is an upgrade)."""
    here = toolkit_version()
    for clause in specifier:
        if clause.operator in (">=", ">", "~=", "==", "==="):
            bound = parse_version(clause.version.removesuffix(".*"))
            if bound is not None and here < bound:
                return True
    return False


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    return "a mapping" if isinstance(value, dict) else "a date or another value"
