"""The loader bounds its work: any file answers quickly, with a finding that says where and why.

An alias bomb ("billion laughs") used to hang `validate` (eight levels of nine aliases under `tags`
took 100+ s and ~9 GB; seven took 16 s), a deep `[[[[...` raised RecursionError, and `1:1:1:...`
(base 60 in YAML 1.1) spent minutes in multiplication. Each now stops at a bound, at the line of
the node that crossed it, before anything builds or validates the expanded structure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperpod_kit.config import ConfigError, Finding, Level
from hyperpod_kit.config.environment import load_environment, peek_region
from hyperpod_kit.config.loader import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NUMBER_CHARS,
    MAX_VALUES,
)

HEAD = "name: hyperpod-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\n"
HEAD_LINES = HEAD.count("\n")
# In-process; the interpreter start of the CLI comes on top (see test_validate_properties.py).
BUDGET_S = 2.0


def bomb(levels: int, width: int = 9) -> str:
    """The issue's bomb: anchors nested `levels` deep under `tags`, each aliasing the last `width`
    times. Level L expands to width**L strings: 9**8 = 43 million for eight levels."""
    lines = [HEAD.rstrip("\n"), "tags:", "  l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _error(tmp_path: Path, text: str) -> tuple[Finding, float]:
    path = tmp_path / "env.yaml"
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    elapsed = time.perf_counter() - start
    return err.value.findings[0], elapsed


@pytest.mark.timed
@pytest.mark.parametrize("levels", [7, 8, 12])
def test_alias_bomb_stops_at_the_alias_that_crosses_the_bound(tmp_path: Path, levels: int) -> None:
    """Seven, eight (the issue's) or twelve levels: the same quick finding, at the first alias
    whose expansion passes MAX_VALUES, naming its anchor's line."""
    f, elapsed = _error(tmp_path, bomb(levels))
    assert elapsed < BUDGET_S
    # 9**4 = 6561 values fit; the alias *l3 on l4's line is the one that crosses 10,000
    crossing = HEAD_LINES + 2 + 4
    assert (f.level, f.path, f.line) == (Level.ERROR, "(yaml)", crossing)
    assert f.message == (
        f"the alias *l3 expands the file past {MAX_VALUES:,} values "
        f"(anchor &l3 on line {crossing - 1})"
    )
    assert f.hint is not None and "billion laughs" in f.hint


def test_a_small_alias_tree_is_not_a_bomb(tmp_path: Path) -> None:
    """Aliases are fine while their expansion stays under the bound: three levels is 729 values,
    and the schema (not the bound) complains that tags are lists."""
    f, _ = _error(tmp_path, bomb(3))
    assert f.path == "tags.l0"
    assert "valid string" in f.message


@pytest.mark.timed
@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "base: &b {" + ", ".join(f"k{i}: v" for i in range(50)) + "}\n"
            "tags:\n  <<: [" + ", ".join(["*b"] * 250) + "]\n",
            id="merge-list-of-one-anchor",
        ),
        pytest.param(
            "x: &x [a, b, c, d, e, f, g, h, i, j]\ntags: [" + ", ".join(["*x"] * 1200) + "]\n",
            id="wide-list-of-aliases",
        ),
    ],
)
def test_merges_and_wide_aliases_count_as_expanded(tmp_path: Path, text: str) -> None:
    """A merge copies its mappings, and a list of aliases repeats them: both are counted so."""
    f, elapsed = _error(tmp_path, HEAD + text)
    assert elapsed < BUDGET_S
    assert f.path == "(yaml)"
    assert f"expands the file past {MAX_VALUES:,} values" in f.message


@pytest.mark.timed
def test_many_plain_values_stop_at_the_bound(tmp_path: Path) -> None:
    """Without any alias, the count is of what is written: the finding names the first line over."""
    text = HEAD + "tags:\n" + "".join(f"  k{i}: v\n" for i in range(MAX_VALUES))
    f, elapsed = _error(tmp_path, text)
    assert elapsed < BUDGET_S
    assert (f.path, f.message) == ("(yaml)", f"the file holds more than {MAX_VALUES:,} values")
    # HEAD holds 7 values (the document, 3 keys, 3 values) and `tags:` 2: each tag adds 2
    assert f.line == HEAD_LINES + 1 + (MAX_VALUES - 9) // 2 + 1


def test_a_file_just_under_the_value_bound_loads(tmp_path: Path) -> None:
    """The bound is far above a real file, and a file under it reads as usual: what is left to
    say is the schema's and the checks' (here: CloudFormation takes at most 50 tags)."""
    tags = (MAX_VALUES - 20) // 2
    path = tmp_path / "env.yaml"
    path.write_text(HEAD + "tags:\n" + "".join(f"  k{i}: v\n" for i in range(tags)))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    assert [f.check for f in err.value.findings if f.level is Level.ERROR] == ["tags"]


@pytest.mark.timed
@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("tags: " + "[" * 100_000 + "\n", HEAD_LINES + 1, id="flow"),
        pytest.param(
            "tags:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 100)),
            HEAD_LINES + MAX_DEPTH,
            id="block",
        ),
        pytest.param("tags:\n" + "- " * 5000 + "x\n", HEAD_LINES + 2, id="block-sequence"),
    ],
)
def test_deep_nesting_stops_at_the_depth_bound(tmp_path: Path, text: str, line: int) -> None:
    """PyYAML composes recursively; a deep file stops at MAX_DEPTH, not at RecursionError."""
    f, elapsed = _error(tmp_path, HEAD + text)
    assert elapsed < BUDGET_S
    assert (f.path, f.line) == ("(yaml)", line)
    assert f.message == f"values are nested more than {MAX_DEPTH} levels deep"


def test_aliases_cannot_nest_past_the_depth_bound(tmp_path: Path) -> None:
    """An alias adds the height of its anchor: a chain of aliases is as deep as it expands."""
    lines = ["tags:", "  d0: &d0 [x]"]
    lines += [f"  d{i}: &d{i} [*d{i - 1}]" for i in range(1, MAX_DEPTH + 2)]
    f, _ = _error(tmp_path, HEAD + "\n".join(lines) + "\n")
    assert f.path == "(yaml)"
    assert f"nests values more than {MAX_DEPTH} levels deep" in f.message
    assert f.line is not None and f.line < HEAD_LINES + MAX_DEPTH + 2


def test_an_alias_inside_its_own_anchor_is_named(tmp_path: Path) -> None:
    """A recursive structure can never be written out; say so at the alias."""
    f, _ = _error(tmp_path, HEAD + "tags: &t\n  a: b\n  c: *t\n")
    assert (f.path, f.line) == ("(yaml)", HEAD_LINES + 3)
    assert f.message == (
        f"the alias *t is inside the collection it refers to (anchor &t on line {HEAD_LINES + 1})"
    )


@pytest.mark.timed
@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1:" * 100_000 + "1", id="sexagesimal"),
        pytest.param("9" * 5000, id="decimal-past-python-limit"),
        pytest.param("0x" + "f" * 100_000, id="hex"),
        pytest.param("!!int " + "7" * 200, id="tagged"),
        pytest.param("1." + "0" * 200, id="float"),
    ],
)
def test_long_numbers_are_refused_before_conversion(tmp_path: Path, value: str) -> None:
    """A number past MAX_NUMBER_CHARS is a mistake; converting it could take minutes."""
    f, elapsed = _error(tmp_path, HEAD + f"account: {value}\n")
    assert elapsed < BUDGET_S
    assert (f.path, f.line) == ("(yaml)", HEAD_LINES + 1)
    assert f.message.startswith("a number ")
    assert f.hint is not None and "quote it if it is text" in f.hint


def test_a_long_quoted_number_is_just_text(tmp_path: Path) -> None:
    """Quoted, it is a string and the schema judges it (here: not 12 digits)."""
    f, _ = _error(tmp_path, HEAD + f'account: "{"1" * (MAX_NUMBER_CHARS + 1)}"\n')
    assert f.path == "account"
    assert "string should match pattern" in f.message


# --- the file size --------------------------------------------------------------------------------


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    """Above MAX_FILE_BYTES the file is not parsed at all; the message gives both sizes."""
    path = tmp_path / "env.yaml"
    path.write_bytes(HEAD.encode() + b"#" * (3 << 20) + b"\n")
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (f,) = err.value.findings
    assert (f.path, f.line) == ("(file)", None)
    assert f.message == "is 3 MiB; an environment file may be at most 256 KiB"
    assert f.hint == "an environment file is a few KB: check that this is the right file"


def filler(line: str) -> Callable[[], str]:
    """A valid file padded with `line` up to exactly MAX_FILE_BYTES."""

    def make() -> str:
        room = MAX_FILE_BYTES - len(HEAD)
        text = HEAD + line * (room // len(line))
        return text + "#" * (MAX_FILE_BYTES - len(text.encode()))

    return make


@pytest.mark.timed
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(filler("\n"), id="blank-lines"),
        pytest.param(filler("...\n"), id="document-end-markers"),
        pytest.param(filler("# " + "x" * 77 + "\n"), id="comments"),
        pytest.param(filler(" " * 79 + "\n"), id="spaces"),
        pytest.param(
            lambda: HEAD + "tags: {a: '" + "x" * (MAX_FILE_BYTES - 200) + "'}\n", id="str"
        ),
    ],
)
def test_a_file_at_the_size_bound_answers_quickly(tmp_path: Path, make: Callable[[], str]) -> None:
    """The slowest inputs for PyYAML's scanner, at the largest size accepted, still load fast."""
    path = tmp_path / "env.yaml"
    text = make()
    assert len(text.encode()) <= MAX_FILE_BYTES
    path.write_text(text)
    start = time.perf_counter()
    try:
        load_environment(path)
    except ConfigError as e:  # a 260 KB tag value is read, then refused by the tags check
        assert {f.path for f in e.findings if f.level is Level.ERROR} == {"tags.a"}
    assert time.perf_counter() - start < BUDGET_S / 2


# --- peek_region: the same bounds for callers that need the region first --------------------------


def test_peek_region_reads_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(HEAD)
    assert peek_region(path) == "us-west-2"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(bomb(8), id="bomb"),
        pytest.param("region: " + "[" * 10_000 + "\n", id="deep"),
        pytest.param("region: [us-west-2]\n", id="not-text"),
        pytest.param("- a\n", id="not-a-mapping"),
    ],
)
def test_peek_region_is_none_for_a_bad_file(tmp_path: Path, text: str) -> None:
    """No region, no exception: the full load that follows reports what is wrong."""
    path = tmp_path / "env.yaml"
    path.write_text(text)
    assert peek_region(path) is None
    assert peek_region(tmp_path / "missing.yaml") is None
