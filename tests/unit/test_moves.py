"""Keys renamed or removed between versions (hyperpod_kit/config/moves.py): a file that uses an old
key is told where it went (or that it is gone), at its line, exit 2, instead of "unknown key".

The table is empty today; these tests inject made-up moves, and check the real table's rows
against the schema so a future row cannot name a key that never moved."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from packaging.version import Version

from hyperpod_kit import __version__
from hyperpod_kit.cli import main as cli
from hyperpod_kit.config import moves
from hyperpod_kit.config.moves import Move
from hyperpod_kit.versions import parse_version

RENAME = Move(
    "0.2.0",
    "2027-01-15",
    "cluster.instance_groups[].threads",
    "cluster.instance_groups[].threads_per_core",
    "one name for the CPU threads of a group, as the API has it",
)
REMOVAL = Move(
    "0.2.0",
    "2027-01-15",
    "storage.lustre.legacy_mode",
    None,
    "every file system is PERSISTENT_2, which has no such mode.",
)

ENV = """\
name: hyperpod-dev
region: us-west-2
availability_zone_id: usw2-az2
storage:
  lustre:
    storage_capacity_gib: 1200
    legacy_mode: true
cluster:
  instance_groups:
    - {name: controller, role: controller, instance_type: ml.m5.xlarge, instance_count: 1}
    - name: compute
      role: compute
      instance_type: ml.g5.8xlarge
      instance_count: 2
      threads: 1
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def env(tmp_path: Path) -> Path:
    path = tmp_path / "env.yaml"
    path.write_text(ENV)
    return path


def test_a_renamed_and_a_removed_key_are_named_at_their_lines(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moves, "MOVES", (RENAME, REMOVAL))
    code, out, err = run(["validate", str(env)], capsys)
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"{env}:7 storage.lustre.legacy_mode: was removed in hyperpod-kit 0.2.0 (2027-01-15): "
        "every file system is PERSISTENT_2, which has no such mode. Hint: remove `legacy_mode:` "
        "(and what is under it).",
        f"{env}:15 cluster.instance_groups[1].threads: was renamed to "
        "`cluster.instance_groups[1].threads_per_core` in hyperpod-kit 0.2.0 (2027-01-15): one "
        "name for the CPU threads of a group, as the API has it. Hint: write `threads_per_core:` "
        "instead of `threads:` (the value stays as it is).",
    ]


def test_without_the_table_they_are_unknown_keys(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["validate", str(env)], capsys)
    assert code == 2
    assert f"{env}:15 cluster.instance_groups[1].threads: unknown key." in err
    assert f"{env}:7 storage.lustre.legacy_mode: unknown key." in err


def test_json_keeps_the_line_and_path(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setattr(moves, "MOVES", (RENAME,))
    code, out, _ = run(["validate", str(env), "--format", "json"], capsys)
    assert code == 2
    by_path = {f["path"]: f for f in json.loads(out)}
    moved = by_path["cluster.instance_groups[1].threads"]
    assert moved["line"] == 15 and moved["message"].startswith("was renamed to ")
    assert by_path["storage.lustre.legacy_mode"]["message"] == "unknown key"


def test_a_key_moved_twice_is_followed_to_where_it_is_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        moves,
        "MOVES",
        (
            Move("0.2.0", "2027-01-15", "cluster.threads", "cluster.cpu_threads"),
            Move("0.3.0", "2027-04-01", "cluster.cpu_threads", "storage.threads", "now here"),
        ),
    )
    env = tmp_path / "env.yaml"
    env.write_text(ENV.replace("cluster:\n", "cluster:\n  threads: 2\n").replace("threads: 1", ""))
    code, _, err = run(["validate", str(env)], capsys)
    assert code == 2
    assert (
        f"{env}:9 cluster.threads: was renamed to `storage.threads` in hyperpod-kit 0.2.0 "
        "(2027-01-15), then hyperpod-kit 0.3.0 (2027-04-01): now here. Hint: move the value to "
        "`storage.threads`." in err.splitlines()
    )


def test_a_top_level_key_and_a_key_inherited_from_a_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move is said where the key is written: in the base, when it came from there."""
    monkeypatch.setattr(moves, "MOVES", (Move("0.2.0", "2027-01-15", "owner", None, "use tags"),))
    base = tmp_path / "base.yaml"
    base.write_text("\n".join([*ENV.splitlines()[:6], "owner: platform-team", ""]))
    top = tmp_path / "dev.yaml"
    top.write_text("extends: base.yaml\nname: team-dev\n")
    code, _, err = run(["validate", str(top)], capsys)
    assert code == 2
    assert err.splitlines() == [
        f"{base}:7 owner: was removed in hyperpod-kit 0.2.0 (2027-01-15): use tags. Hint: remove "
        "`owner:` (and what is under it)."
    ]


# --- the real table ---------------------------------------------------------------------------


def _current_paths() -> set[str]:
    """Every key path the configuration reference lists (`cluster.instance_groups[].name`)."""
    from hyperpod_kit.config.reference import markdown_reference

    return set(re.findall(r"^\| `([^`]+)` \|", markdown_reference(), re.MULTILINE))


def table_problems(table: tuple[Move, ...]) -> list[str]:
    """What is wrong with a table of moves, as this version reads it."""
    paths = {p.removesuffix("[]") for p in _current_paths()}
    here = parse_version(__version__)
    assert here is not None
    problems = []
    previous: Version | None = None
    for move in table:
        since = parse_version(move.since)
        if since is None or since > here:
            problems.append(f"{move.old}: since {move.since} is not a version up to {here}")
        try:
            datetime.date.fromisoformat(move.date)
        except ValueError:
            problems.append(f"{move.old}: date {move.date!r} is not YYYY-MM-DD")
        if since is not None and previous is not None and since < previous:
            problems.append(f"{move.old}: rows are not in release order")
        previous = since or previous
        if move.old in paths:
            problems.append(f"{move.old}: is still a key (a move would never be said)")
        if (
            move.new is not None
            and move.new not in paths
            and move.new not in (m.old for m in table)
        ):
            problems.append(f"{move.old}: its new path {move.new} is no key")
    return problems


def test_the_table_is_consistent_with_the_schema() -> None:
    assert table_problems(moves.MOVES) == []


def test_the_table_check_finds_a_bad_row() -> None:
    bad = (
        Move("99.0.0", "2027-01-15", "cluster.foo", "cluster.bar"),
        Move("0.1.0", "15 Jan", "cluster.instance_groups[].name", None),
    )
    assert table_problems(bad) == [
        f"cluster.foo: since 99.0.0 is not a version up to {__version__}",
        "cluster.foo: its new path cluster.bar is no key",
        "cluster.instance_groups[].name: date '15 Jan' is not YYYY-MM-DD",
        "cluster.instance_groups[].name: rows are not in release order",
        "cluster.instance_groups[].name: is still a key (a move would never be said)",
    ]
