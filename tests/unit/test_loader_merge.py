"""YAML merge keys (`<<: *defaults`, `<<: [*a, *b]`): how people share settings between groups.

They used to fail with "could not determine a constructor ... check the indentation". Now they
load with YAML's rules: keys written in the mapping override merged ones (and are not "given
twice"), and in a merge list the earlier mapping wins. A key that comes from a merge reports the
line where it is written, inside the anchor: the line to edit; the path says which copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperpod_kit.config import ConfigError, Finding, Level
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.loader import parse_yaml

HEAD = "name: hyperpod-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\n"

# Two compute groups sharing their settings through an anchor on the first, and a login group
# that takes the controller's settings with its own role.
GROUPS = """\
cluster:
  instance_groups:
    - &controller
      name: controller
      role: controller
      instance_type: ml.m5.xlarge
      instance_count: 1
      ebs_volume_gib: 100
    - <<: *controller
      name: login
      role: login
    - &gpu
      name: gpu-a
      role: compute
      instance_type: ml.g5.8xlarge
      instance_count: 2
      threads_per_core: 2
    - <<: *gpu
      name: gpu-b
      instance_count: 4
trainer:
  job: {instance_group: gpu-b}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _line(text: str, needle: str, nth: int = 0) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[nth]


def _errors(tmp_path: Path, text: str) -> list[Finding]:
    with pytest.raises(ConfigError) as err:
        load_environment(_write(tmp_path, text))
    return err.value.findings


def test_instance_groups_share_settings_through_an_anchor(tmp_path: Path) -> None:
    """The realistic case: merged groups get the anchor's settings, their own keys win."""
    config = load_environment(_write(tmp_path, HEAD + GROUPS)).config
    groups = {g.name: g for g in config.cluster.instance_groups}
    assert list(groups) == ["controller", "login", "gpu-a", "gpu-b"]
    assert (groups["login"].role, groups["login"].instance_type) == ("login", "ml.m5.xlarge")
    assert groups["login"].ebs_volume_gib == 100
    assert (groups["gpu-b"].role, groups["gpu-b"].instance_type) == ("compute", "ml.g5.8xlarge")
    assert (groups["gpu-b"].instance_count, groups["gpu-b"].threads_per_core) == (4, 2)


def test_merged_keys_report_the_line_inside_the_anchor(tmp_path: Path) -> None:
    """Explicit keys keep their own line; merged ones point at where the value is written."""
    text = HEAD + GROUPS
    _, lines = parse_yaml("env.yaml", text)
    groups = ("cluster", "instance_groups")
    assert lines[(*groups, 1)] == _line(text, "<<: *controller")
    assert lines[(*groups, 1, "name")] == _line(text, "name: login")
    assert lines[(*groups, 1, "instance_type")] == _line(text, "instance_type: ml.m5.xlarge")
    assert lines[(*groups, 3, "instance_count")] == _line(text, "instance_count: 4")
    assert lines[(*groups, 3, "threads_per_core")] == _line(text, "threads_per_core: 2")


def test_an_error_in_a_merged_value_names_each_copy_at_the_anchor_line(tmp_path: Path) -> None:
    """A bad value in the anchor is wrong in every group that merges it: one finding per path,
    all on the line that holds the value."""
    text = HEAD + GROUPS.replace("instance_type: ml.g5.8xlarge", "instance_type: g5")
    got = [(f.path, f.line) for f in _errors(tmp_path, text)]
    line = _line(text, "instance_type: g5")
    assert got == [
        ("cluster.instance_groups[2].instance_type", line),
        ("cluster.instance_groups[3].instance_type", line),
    ]


def test_an_error_in_an_override_is_at_the_override(tmp_path: Path) -> None:
    """The group's own key is its own mistake, on its own line."""
    text = HEAD + GROUPS.replace("instance_count: 4", "instance_count: four")
    (f,) = _errors(tmp_path, text)
    assert (f.path, f.line) == ("cluster.instance_groups[3].instance_count", _line(text, "four"))


def test_a_key_that_overrides_a_merged_one_is_not_a_duplicate() -> None:
    """`<<` then the same key is YAML's override, not a key given twice; the explicit value wins
    wherever `<<` sits in the mapping."""
    text = "base: &b {a: 1, b: 2}\nbefore: {a: 9, <<: *b}\nafter: {<<: *b, a: 9}\n"
    data, _ = parse_yaml("env.yaml", text)
    assert data["before"] == data["after"] == {"a": 9, "b": 2}


def test_in_a_merge_list_the_earlier_mapping_wins() -> None:
    """YAML's merge rule: mappings earlier in `<<: [...]` override later ones."""
    text = "a: &a {k: from-a, x: 1}\nb: &b {k: from-b, y: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n"
    data, lines = parse_yaml("env.yaml", text)
    assert data["c"] == {"k": "from-a", "x": 1, "y": 2, "z": 3}
    assert lines[("c", "k")] == 1  # the line of the winning mapping
    assert lines[("c", "y")] == 2


def test_merges_of_merges_resolve() -> None:
    """An anchor that itself merges another passes both on."""
    text = "a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: {<<: *b, z: 3}\n"
    data, lines = parse_yaml("env.yaml", text)
    assert data["c"] == {"x": 1, "y": 2, "z": 3}
    assert (lines[("c", "x")], lines[("c", "y")], lines[("c", "z")]) == (1, 2, 3)


def test_an_inline_mapping_can_be_merged() -> None:
    data, _ = parse_yaml("env.yaml", "a:\n  <<: {x: 1, y: 2}\n  y: 3\n")
    assert data == {"a": {"x": 1, "y": 3}}


def test_a_real_duplicate_next_to_a_merge_is_still_reported(tmp_path: Path) -> None:
    """Two explicit keys are still a mistake, merge or not."""
    text = "base: &b {a: 1}\nx:\n  <<: *b\n  c: 1\n  c: 2\n"
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", text)
    (f,) = err.value.findings
    assert (f.path, f.line, f.message) == ("x.c", 5, "key given twice (first on line 4)")


def test_a_duplicate_inside_an_anchor_is_reported_once() -> None:
    """However many times the anchor is merged or aliased, its own duplicate is one finding."""
    text = "base: &b {a: 1, a: 2}\nx: {<<: *b}\ny: *b\nz: {<<: [*b]}\n"
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", text)
    assert [(f.path, f.line) for f in err.value.findings] == [("base.a", 1)]


def test_two_merge_keys_in_one_mapping_are_a_duplicate() -> None:
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", "a: &a {x: 1}\nb: &b {y: 1}\nc:\n  <<: *a\n  <<: *b\n")
    (f,) = err.value.findings
    assert (f.path, f.line) == ("c.<<", 5)
    assert f.hint == "merge several mappings with one key: `<<: [*a, *b]`"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        pytest.param("a: &a 1\nb:\n  <<: *a\n", "a single value", id="alias-of-scalar"),
        pytest.param("b:\n  <<: 5\n", "a single value", id="scalar"),
        pytest.param("b:\n  <<:\n", "an empty value", id="empty"),
        pytest.param(
            "a: &a {x: 1}\nb:\n  <<: [*a, 5]\n", "a list that holds more than mappings", id="list"
        ),
    ],
)
def test_a_merge_of_something_else_than_mappings_says_how_to_merge(text: str, what: str) -> None:
    """Not "check the indentation": say what `<<` takes, at the `<<` line."""
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", text)
    (f,) = err.value.findings
    assert (f.level, f.path, f.line) == (Level.ERROR, "b.<<", _line(text, "<<"))
    assert f.message == f"`<<` merges mappings into this one, but its value is {what}"
    assert f.hint is not None and "`<<: *name`" in f.hint


def test_a_merge_into_a_section_is_checked_by_the_schema(tmp_path: Path) -> None:
    """Merged keys reach the schema like written ones: an unknown key is named at its line."""
    text = HEAD + "tags: &t {team: ml}\nmonitoring:\n  <<: {enabled: true, emails: x}\n"
    (f,) = _errors(tmp_path, text)
    assert (f.path, f.message, f.line) == ("monitoring.emails", "unknown key", _line(text, "<<"))
