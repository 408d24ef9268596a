"""Property: `hyperpod-kit validate` on any mutation of any example environment exits 0 or 2,
never with a traceback, within 2 s, and on exit 2 its first line names a key the file has or the
schema requires (or `(yaml)`, `(file)`, `(document)` for a whole-file problem).

Each example (`environments/*.yaml`) is mutated in its data (types, values, deleted and unknown
keys, deep nesting, huge numbers, shared subtrees that YAML writes as anchors and aliases, merge
keys, an alias bomb), in its text (tags such as `!!str`, `!!int` or unknown ones, duplicate lines,
truncation, stray YAML syntax, empty documents, CRLF) and in its bytes (UTF-8 with a BOM,
UTF-16/32 with and without one, Latin-1). The CLI runs as a subprocess, timed from outside, so
interpreter start and imports are inside the budget. Examples are derandomized and nothing is
stored, so a CI run is reproducible. Marked `timed`: run serially for a faithful timing.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperpod_kit.config import EnvironmentConfig
from tests.conftest import run_cli
from tests.unit.test_loader_bounds import HEAD, bomb, filler

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {p.name: p.read_text(encoding="utf-8") for p in sorted(REPO.glob("environments/*.yaml"))}
BUDGET_S = 2.0
PSEUDO_PATHS = {"(yaml)", "(file)", "(document)"}

pytestmark = pytest.mark.timed

SETTINGS = settings(
    max_examples=60,
    deadline=None,  # the budget is asserted on the subprocess itself
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _required_keys() -> set[str]:
    """Every key some model of the schema requires, read from the schema at test time (the
    schema grows; this test must not hold a copy of its key list)."""
    schema = EnvironmentConfig.model_json_schema()
    models = [schema, *schema.get("$defs", {}).values()]
    return {key for model in models for key in model.get("required", [])}


REQUIRED = _required_keys()


# --- data mutations -------------------------------------------------------------------------------

Tree = Any
Draw = Callable[..., Any]

KEY_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12)
YAMLISH = st.sampled_from(
    ["yes", "no", "on", "off", "~", "null", "0123", "7:03:00", "1e3", "2024-01-01", "0x1f", ""]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.integers(min_value=1, max_value=4000).map(lambda k: 10**k),  # past any sane length
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    YAMLISH,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(KEY_NAMES, inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Tree, loc: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in the tree (containers too), parents before children."""
    out = [loc] if loc else []
    if isinstance(node, dict):
        out += [p for k, v in node.items() for p in _paths(v, (*loc, k))]
    elif isinstance(node, list):
        out += [p for i, v in enumerate(node) for p in _paths(v, (*loc, i))]
    return out


def _get(tree: Tree, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        tree = tree[part]
    return tree


def _pick(draw: Draw, tree: Tree, want: type | None = None) -> tuple[Any, ...] | None:
    paths = [p for p in _paths(tree) if want is None or isinstance(_get(tree, p), want)]
    return draw(st.sampled_from(paths)) if paths else None


def replace_value(draw: Draw, tree: Tree) -> Tree:
    loc = _pick(draw, tree)
    if loc:
        _get(tree, loc[:-1])[loc[-1]] = draw(VALUES)
    return tree


def delete_key(draw: Draw, tree: Tree) -> Tree:
    """Any key, required ones included."""
    loc = _pick(draw, tree)
    if loc and isinstance(_get(tree, loc[:-1]), dict):
        del _get(tree, loc[:-1])[loc[-1]]
    return tree


def add_key(draw: Draw, tree: Tree) -> Tree:
    """An unknown key, a near-miss of a known one, or a key YAML reads as a number or boolean."""
    loc = _pick(draw, tree, dict)
    parent = _get(tree, loc) if loc else tree
    known = [k for k in parent if isinstance(k, str)] or ["name"]
    key = draw(
        st.one_of(
            KEY_NAMES,
            st.sampled_from(known).map(lambda k: k + "s"),
            st.sampled_from([1, 2400, True, None, 1.5]),
        )
    )
    parent[key] = draw(VALUES)
    return tree


def nest_deep(draw: Draw, tree: Tree) -> Tree:
    loc = _pick(draw, tree)
    if loc:
        value = _get(tree, loc)
        for _ in range(draw(st.integers(min_value=1, max_value=60))):
            value = [value] if draw(st.booleans()) else {"k": value}
        _get(tree, loc[:-1])[loc[-1]] = value
    return tree


def share_subtree(draw: Draw, tree: Tree) -> Tree:
    """The same object in two places: YAML writes the first as an anchor, the second as alias."""
    source = _pick(draw, tree, dict) or _pick(draw, tree, list)
    target = _pick(draw, tree)
    if source and target:
        around = {id(_get(tree, target[:end])) for end in range(len(target))}
        if not _holds(_get(tree, source), around):  # no cycles
            _get(tree, target[:-1])[target[-1]] = _get(tree, source)
    return tree


def merge_key(draw: Draw, tree: Tree) -> Tree:
    """Turn a mapping into `<<:` of another one (or of a list of them, or of part of itself),
    keeping some of its own keys as overrides."""
    loc = _pick(draw, tree, dict)
    if not loc:
        return tree
    mapping = _get(tree, loc)
    # a source that holds the mapping's parent (or the mapping) would make the tree a cycle
    around = {id(_get(tree, loc[:end])) for end in range(len(loc) + 1)}
    others = [
        _get(tree, p)
        for p in _paths(tree)
        if isinstance(_get(tree, p), dict) and not _holds(_get(tree, p), around)
    ]
    keys = list(mapping)
    kept = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
    how = draw(st.sampled_from(["self", "other", "list"]))
    if how == "other" and others:
        source: Any = draw(st.sampled_from(others))
    elif how == "list" and others:
        source = draw(st.lists(st.sampled_from(others), min_size=1, max_size=3))
    else:
        source = {k: v for k, v in mapping.items() if k not in kept}
    _get(tree, loc[:-1])[loc[-1]] = {MERGE: source, **{k: mapping[k] for k in kept}}
    return tree


def _holds(node: Any, ids: set[int]) -> bool:
    if id(node) in ids:
        return True
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return any(_holds(child, ids) for child in children)


def alias_bomb(draw: Draw, tree: Tree) -> Tree:
    levels = draw(st.integers(min_value=2, max_value=10))
    level: Any = ["lol"] * 9
    bomb = {"l0": level}
    for i in range(1, levels):
        level = [level] * 9
        bomb[f"l{i}"] = level
    tree["tags"] = bomb
    return tree


DATA_OPS = [replace_value, delete_key, add_key, nest_deep, share_subtree, merge_key, alias_bomb]
MERGE = "<<merge-key>>"  # written as `<<:` after dumping (safe_dump would quote a real `<<`)


def dump(tree: Tree) -> str:
    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=10_000)
    return text.replace(f"{MERGE}:", "<<:")


# --- text and byte mutations ----------------------------------------------------------------------

TAGS = ["!!str", "!!int", "!!float", "!!bool", "!!null", "!!binary", "!!timestamp", "!!set"]
TAGS += ["!!map", "!!seq", "!unknown", "!!python/name:os.system", "!"]
BITS = ["[", "]", "{", "}", ": ", "- ", "&a ", "*a", "*nowhere", "\t", "'", '"', "---", "%TAG"]
VALUE_LINE = re.compile(r"^(\s*(?:- )?[^\s:#][^:#]*: )(\S.*)$")


def identity(draw: Draw, text: str) -> str:
    return text


def tag_a_value(draw: Draw, text: str) -> str:
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if VALUE_LINE.match(line)]
    if hits:
        i = draw(st.sampled_from(hits))
        m = VALUE_LINE.match(lines[i])
        assert m
        lines[i] = f"{m[1]}{draw(st.sampled_from(TAGS))} {m[2]}\n"
    return "".join(lines)


def duplicate_a_line(draw: Draw, text: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines:
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        lines.insert(i, lines[i])
    return "".join(lines)


def truncate(draw: Draw, text: str) -> str:
    return text[: draw(st.integers(min_value=0, max_value=len(text)))]


def insert_syntax(draw: Draw, text: str) -> str:
    at = draw(st.integers(min_value=0, max_value=len(text)))
    return text[:at] + draw(st.sampled_from(BITS)) + text[at:]


def empty_document(draw: Draw, text: str) -> str:
    return str(draw(st.sampled_from(["", "\n", "---\n", "~\n", "# nothing here\n", "...\n"])))


def crlf(draw: Draw, text: str) -> str:
    return text.replace("\n", "\r\n")


def deep_flow(draw: Draw, text: str) -> str:
    n = draw(st.integers(min_value=10, max_value=50_000))
    return text + "tags: " + "[" * n + "]" * draw(st.integers(min_value=0, max_value=n)) + "\n"


TEXT_OPS = [identity, tag_a_value, duplicate_a_line, truncate, insert_syntax]
TEXT_OPS += [empty_document, crlf, deep_flow]


def utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "utf-8": utf8,
    "utf-8-bom": lambda t: codecs.BOM_UTF8 + utf8(t),
    "utf-16": lambda t: t.encode("utf-16", errors="replace"),
    "utf-16-le": lambda t: t.encode("utf-16-le", errors="replace"),
    "utf-16-be": lambda t: t.encode("utf-16-be", errors="replace"),
    "utf-32": lambda t: t.encode("utf-32", errors="replace"),
    "latin-1": lambda t: ("# caf\xe9\n" + t).encode("latin-1", errors="replace"),
}


# --- the property ---------------------------------------------------------------------------------

_FIRST = re.compile(r"^(?::(?P<line>\d+))? (?P<path>.+?): ")


def _check(file: Path, raw: bytes) -> None:
    file.write_bytes(raw)
    start = time.perf_counter()
    result = run_cli("validate", str(file), cwd=file.parent, timeout=60)
    elapsed = time.perf_counter() - start
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode in (0, 2), output
    assert elapsed < BUDGET_S, f"validate took {elapsed:.2f} s"
    if result.returncode == 0:
        return
    first = result.stderr.splitlines()[0]
    assert first.startswith(str(file)), first
    m = _FIRST.match(first[len(str(file)) :])
    assert m, first
    path = m["path"]
    if path in PSEUDO_PATHS:
        return
    parts = re.findall(r"[^.\[\]]+", path)
    names = [p for p in parts if not p.isdigit()] or parts
    key = names[-1]
    text = raw.decode("utf-8", errors="replace")
    assert key in text or key in REQUIRED, f"{first!r} names {key!r}: not in the file, not required"


@SETTINGS
@given(data=st.data())
def test_mutated_examples_validate_cleanly(tmp_path: Path, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(EXAMPLES)), label="example")
    text = EXAMPLES[name]
    ops = data.draw(st.lists(st.sampled_from(DATA_OPS), max_size=3), label="data mutations")
    if ops:
        tree = yaml.safe_load(text)
        for op in sorted(ops, key=lambda op: op is alias_bomb):  # a bomb last: it is not walked
            tree = op(data.draw, tree)
        text = dump(tree)
    text = data.draw(st.sampled_from(TEXT_OPS), label="text mutation")(data.draw, text)
    encoding = data.draw(st.sampled_from(["utf-8"] * 5 + list(ENCODINGS)), label="encoding")
    _check(tmp_path / name, ENCODINGS[encoding](text))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_is_valid_as_shipped(tmp_path: Path, name: str) -> None:
    """The baseline the mutations start from: each example validates, quickly."""
    _check(tmp_path / name, EXAMPLES[name].encode())


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: bomb(7), id="bomb-7-levels"),
        pytest.param(lambda: bomb(8), id="bomb-8-levels"),
        pytest.param(lambda: HEAD + "tags: " + "[" * 200_000 + "\n", id="deep-flow"),
        pytest.param(lambda: HEAD + "tags: [" + "1, " * 80_000 + "]\n", id="many-values"),
        pytest.param(filler("...\n"), id="size-bound-document-ends"),
        pytest.param(filler("\n"), id="size-bound-blank-lines"),
        pytest.param(lambda: HEAD + "#" * (10 << 20) + "\n", id="over-size-bound"),
    ],
)
def test_the_worst_files_answer_within_the_budget(tmp_path: Path, make: Callable[[], str]) -> None:
    """The issue's bombs and the slowest inputs up to the size bound, through the real CLI."""
    _check(tmp_path / "env.yaml", make().encode())
