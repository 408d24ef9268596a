"""The `control-characters` check walks the whole validated config: a line break in any string of
any example (every leaf, list item and mapping key) is found at its own path, and a field marked
multi-line lets line breaks and tabs through, nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.findings import Level
from hyperpod_kit.config.validators import REGISTRY, run_validators
from hyperpod_kit.config.validators.general import _control_characters
from hyperpod_kit.text import MULTI_LINE_KEY, control_characters, describe, shown
from tests.conftest import REPO

EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))
Path_ = tuple[str | int, ...]


def _strings(value: object, at: Path_ = ()) -> Iterator[Path_]:
    """The path of every string in a config (model fields, list items, mapping values)."""
    if isinstance(value, str):
        yield at
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _strings(getattr(value, name), (*at, name))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, (*at, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*at, key))


def _replaced(value: Any, at: Path_, new: str) -> Any:
    """`value` with the string at `at` replaced (model_copy: no validation, as a bypass)."""
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, BaseModel):
        return value.model_copy(update={str(head): _replaced(getattr(value, str(head)), rest, new)})
    if isinstance(value, list):
        return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _replaced(v, rest, new) if k == head else v for k, v in value.items()}
    raise AssertionError(at)


def _shown(at: Path_) -> str:
    out = ""
    for part in at:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_a_line_break_in_any_string_of_an_example_is_found_at_its_path(example: Path) -> None:
    config = load_environment(example).config
    paths = list(_strings(config))
    assert len(paths) > 20
    for at in paths:
        bad = _replaced(config, at, "x\ny")
        found = run_validators(bad, only=["control-characters"])
        assert [(f.path, f.level) for f in found] == [(_shown(at), Level.ERROR)], at


def test_the_check_runs_first_and_is_not_suppressible() -> None:
    assert next(iter(sorted(REGISTRY.values(), key=lambda v: not v.first))).name == (
        "control-characters"
    )
    config = load_environment(EXAMPLES[0]).config
    bad = config.model_copy(update={"tags": {"team\r": "x"}})
    found = run_validators(bad, suppress=["control-characters"], only=["control-characters"])
    assert [(f.path, "the key 'team\\r'" in f.message) for f in found] == [("tags", True)]


class _Notes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = ""
    body: str = Field(default="", json_schema_extra={MULTI_LINE_KEY: True})


@pytest.mark.parametrize(
    ("title", "body", "paths"),
    [
        ("one line", "line one\nline two\n\tindented", []),
        ("one line\n", "", ["title"]),
        ("", "line one\r\nline two", ["body"]),
        ("", "bell\x07", ["body"]),
        ("", "sep\u2028", ["body"]),
    ],
)
def test_a_multi_line_field_takes_line_breaks_and_tabs_only(
    title: str, body: str, paths: list[str]
) -> None:
    found = list(_control_characters(_Notes(title=title, body=body), "", multi_line=False))
    assert [f.path for f in found] == paths


@pytest.mark.parametrize(
    ("text", "shown_as", "said"),
    [
        ("a\nb", "'a\\nb'", "a line break"),
        ("a\x00", "'a\\x00'", "a NUL byte"),
        ("\x1b[0m", "'\\x1b[0m'", "an escape character"),
        ("\x85", "'\\x85'", "a next-line character (NEL, U+0085)"),
        ("\u2029", "'\\u2029'", "a paragraph separator (U+2029)"),
        ("\x7f", "'\\x7f'", "a DEL character"),
        ("\x01", "'\\x01'", "a control character (U+0001)"),
    ],
)
def test_what_a_user_is_told(text: str, shown_as: str, said: str) -> None:
    (char,) = control_characters(text)
    assert shown(text) == shown_as
    assert describe(char) == said
