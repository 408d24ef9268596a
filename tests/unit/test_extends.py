"""`extends:`: merge rules, where inherited values are reported, refused chains, --explain."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from hyperpod_kit.cli.main import main
from hyperpod_kit.config import ConfigError
from hyperpod_kit.config.environment import load_environment, peek_region
from hyperpod_kit.config.extends import MAX_CHAIN
from hyperpod_kit.config.jsonschema import environment_schema
from hyperpod_kit.config.loader import MAX_VALUES
from tests.conftest import REPO

BASE = """\
abstract: true
name: team-base
region: us-west-2
availability_zone_id: usw2-az2
tags:
  team: ml
  cost-center: research
storage:
  lustre:
    storage_capacity_gib: 1200
    throughput_per_unit_storage: 250
    data_repository_associations:
      - file_system_path: /data
        s3_prefix: data/
      - file_system_path: /ckpt
        s3_prefix: ckpt/
cluster:
  instance_groups:
    - {name: controller, role: controller, instance_type: ml.m5.xlarge, instance_count: 1}
    - {name: compute, role: compute, instance_type: ml.g5.8xlarge, instance_count: 2}
monitoring:
  alarm_email: oncall@example.com
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    return caught.value


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return _write(tmp_path, "base.yaml", BASE)


def test_an_overlay_merges_maps_and_overrides_values(tmp_path: Path, base: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", """\
        extends: base.yaml
        name: team-dev
        tags: {stage: dev}
        storage:
          lustre:
            storage_capacity_gib: 2400
        """)  # fmt: skip
    config = load_environment(dev).config
    assert config.name == "team-dev"
    assert config.tags == {"team": "ml", "cost-center": "research", "stage": "dev"}
    lustre = config.storage.lustre
    assert (lustre.storage_capacity_gib, lustre.throughput_per_unit_storage) == (2400, 250)
    assert config.region == "us-west-2"  # inherited


def test_null_removes_what_the_base_sets(tmp_path: Path, base: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", """\
        extends: base.yaml
        name: team-dev
        tags: {cost-center: null}
        monitoring:
          alarm_email: null
        """)  # fmt: skip
    config = load_environment(dev).config
    assert config.tags == {"team": "ml"}
    assert config.monitoring.alarm_email is None


def test_null_where_no_base_sets_the_key_is_an_error(tmp_path: Path, base: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", "extends: base.yaml\nname: team-dev\ntags: {stge: null}\n")
    (finding,) = _error(dev).findings
    assert (finding.path, finding.line, finding.file) == ("tags.stge", 3, None)
    assert "no base sets this one" in finding.message


def test_instance_groups_merge_by_name_and_new_names_are_appended(
    tmp_path: Path, base: Path
) -> None:
    prod = _write(tmp_path, "prod.yaml", """\
        extends: base.yaml
        name: team-prod
        cluster:
          instance_groups:
            - {name: compute, instance_count: 8}
            - {name: login, role: login, instance_type: ml.m5.xlarge, instance_count: 1}
        """)  # fmt: skip
    loaded = load_environment(prod)
    groups = loaded.config.cluster.instance_groups
    assert [(g.name, g.instance_type, g.instance_count) for g in groups] == [
        ("controller", "ml.m5.xlarge", 1),
        ("compute", "ml.g5.8xlarge", 8),  # the type from the base, the count from prod
        ("login", "ml.m5.xlarge", 1),
    ]
    # each value keeps its file and line, at its merged index
    assert loaded.origin("cluster.instance_groups[1].instance_count") == (None, 5)
    assert loaded.origin("cluster.instance_groups[1].instance_type") == (str(base), 20)
    assert loaded.origin("cluster.instance_groups[0].name") == (str(base), 19)
    assert loaded.chain == (str(base), str(prod))


def test_other_lists_replace(tmp_path: Path, base: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", """\
        extends: base.yaml
        name: team-dev
        storage:
          lustre:
            data_repository_associations:
              - {file_system_path: /datasets, s3_prefix: datasets/}
        """)  # fmt: skip
    associations = load_environment(dev).config.storage.lustre.data_repository_associations
    assert [a.file_system_path for a in associations] == ["/datasets"]


def test_an_empty_list_replaces_a_named_one(tmp_path: Path, base: Path) -> None:
    users = "users:\n  - {name: alice, uid: 10001}\n  - {name: bob, uid: 10002}\n"
    _write(tmp_path, "people.yaml", "extends: base.yaml\n" + users)
    dev = _write(tmp_path, "dev.yaml", "extends: people.yaml\nname: team-dev\nusers: []\n")
    assert load_environment(dev).config.users == []
    one = _write(tmp_path, "one.yaml", "extends: people.yaml\nusers: [{name: bob, uid: 10009}]\n")
    assert [(u.name, u.uid) for u in load_environment(one).config.users] == [
        ("alice", 10001), ("bob", 10009),
    ]  # fmt: skip


def test_an_inherited_bad_value_is_reported_in_the_base(tmp_path: Path) -> None:
    base = _write(
        tmp_path, "bases/base.yaml", BASE.replace("capacity_gib: 1200", "capacity_gib: 2000")
    )
    dev = _write(tmp_path, "envs/dev.yaml", "extends: ../bases/base.yaml\nname: team-dev\n")
    err = _error(dev)
    (finding,) = [f for f in err.findings if f.path == "storage.lustre.storage_capacity_gib"]
    assert (finding.file, finding.line) == (str(tmp_path / "bases/base.yaml"), 10)
    assert finding.render(err.file).startswith(f"{base}:10 storage.lustre.storage_capacity_gib: ")


def test_validate_json_gives_each_finding_its_own_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "base.yaml", BASE.replace("capacity_gib: 1200", "capacity_gib: 2000"))
    dev = _write(tmp_path, "dev.yaml", "extends: base.yaml\nname: team-dev\n")
    assert main(["validate", str(dev), "--format", "json"]) == 2
    out, err = capsys.readouterr()
    rows = [r for r in json.loads(out) if r["level"] == "error"]
    assert [(r["file"], r["line"], r["path"]) for r in rows] == [
        (str(tmp_path / "base.yaml"), 10, "storage.lustre.storage_capacity_gib")
    ]
    assert err == ""


def test_an_inherited_schema_error_is_reported_in_the_base(tmp_path: Path) -> None:
    _write(tmp_path, "base.yaml", BASE.replace("instance_count: 2}", "instance_count: two}"))
    dev = _write(tmp_path, "dev.yaml", "extends: base.yaml\nname: team-dev\n")
    (finding,) = _error(dev).findings
    assert finding.path == "cluster.instance_groups[1].instance_count"
    assert (finding.file, finding.line) == (str(tmp_path / "base.yaml"), 20)


def test_the_overlays_own_bad_value_is_reported_in_the_overlay(tmp_path: Path, base: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", """\
        extends: base.yaml
        name: team-dev
        cluster:
          instance_groups:
            - {name: compute, instance_count: -1}
        """)  # fmt: skip
    (finding,) = _error(dev).findings
    assert (finding.path, finding.file, finding.line) == (
        "cluster.instance_groups[1].instance_count", None, 5,
    )  # fmt: skip


def test_a_chain_of_three_files_in_different_folders(tmp_path: Path) -> None:
    _write(tmp_path, "org/root.yaml", BASE)
    _write(tmp_path, "team/base.yaml", "extends: ../org/root.yaml\ntags: {team: vision}\n")
    dev = _write(tmp_path, "team/envs/dev.yaml", "extends: ../base.yaml\nname: team-dev\n")
    loaded = load_environment(dev)
    assert loaded.config.tags == {"team": "vision", "cost-center": "research"}
    assert loaded.origin("tags.team") == (str(tmp_path / "team/base.yaml"), 2)
    assert loaded.origin("region") == (str(tmp_path / "org/root.yaml"), 3)
    assert peek_region(dev) == "us-west-2"  # read through the chain


def test_a_relative_path_resolves_from_the_file_that_writes_it(tmp_path: Path) -> None:
    """A lifecycle script the base names sits beside the base; one the environment names, beside
    the environment (the `files` check looks for each where it resolves)."""
    script = "scripts/setup.sh"
    for folder in ("org", "team/envs"):
        _write(tmp_path, f"{folder}/{script}", "#!/bin/bash\n")
    groups = BASE.replace(
        "instance_count: 2}", f"instance_count: 2, lifecycle: {{scripts: [{script}]}}}}"
    )
    _write(tmp_path, "org/root.yaml", groups)
    dev = _write(tmp_path, "team/envs/dev.yaml", "extends: ../../org/root.yaml\nname: team-dev\n")
    config = load_environment(dev).config
    (compute,) = [g for g in config.cluster.instance_groups if g.name == "compute"]
    assert config.resolve_path(compute.lifecycle.scripts[0]) == tmp_path / "org" / script
    (tmp_path / "org" / script).unlink()
    (finding,) = [f for f in _error(dev).findings if f.check == "files"]  # beside the base
    assert (
        finding.file == str(tmp_path / "org/root.yaml") and str(tmp_path / "org") in finding.message
    )
    own = "extends: ../../org/root.yaml\nname: team-dev\ncluster:\n  instance_groups:\n"
    own += f"    - {{name: compute, lifecycle: {{scripts: [{script}]}}}}\n"
    dev.write_text(own)
    config = load_environment(dev).config  # the environment's own script, beside it
    (compute,) = [g for g in config.cluster.instance_groups if g.name == "compute"]
    assert config.resolve_path(compute.lifecycle.scripts[0]) == tmp_path / "team/envs" / script


@pytest.mark.parametrize(
    ("files", "file", "line", "says"),
    [
        ({"a.yaml": "extends: a.yaml\n"}, "a.yaml", 1, "a.yaml -> a.yaml"),
        (
            {"a.yaml": "name: x\nextends: b.yaml\n", "b.yaml": "extends: a.yaml\n"},
            "a.yaml", 2, "a.yaml -> b.yaml -> a.yaml",
        ),
        (
            {"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: c.yaml\n",
             "c.yaml": "\n\nextends: b.yaml\n"},
            "b.yaml", 1, "b.yaml -> c.yaml -> b.yaml",
        ),
    ],
)  # fmt: skip
def test_a_loop_is_refused_at_an_extends_inside_it(
    tmp_path: Path, files: dict[str, str], file: str, line: int, says: str
) -> None:
    for name, text in files.items():
        _write(tmp_path, name, text)
    err = _error(tmp_path / "a.yaml")
    (finding,) = err.findings
    assert (err.file, finding.path, finding.line) == (str(tmp_path / file), "extends", line)
    assert says.replace("a.yaml", str(tmp_path / "a.yaml")).split(" -> ")[-1] in finding.message
    assert "lead back to this file" in finding.message


@pytest.mark.parametrize(
    ("base_text", "says"),
    [
        (None, "no such file"),
        ("", "is empty"),
        ("- a\n- b\n", "holds a list, not a mapping"),
        ("name: [unclosed\n", None),  # a mistake inside the base: its own file and line
    ],
)
def test_a_base_that_is_missing_or_not_a_mapping(
    tmp_path: Path, base_text: str | None, says: str | None
) -> None:
    if base_text is not None:
        _write(tmp_path, "base.yaml", base_text)
    dev = _write(tmp_path, "dev.yaml", "name: team-dev\nextends: base.yaml\n")
    err = _error(dev)
    (finding,) = err.findings
    if says is None:
        assert err.file == str(tmp_path / "base.yaml") and finding.path == "(yaml)"
        return
    assert (err.file, finding.path, finding.line) == (str(dev), "extends", 2)
    assert says in finding.message and finding.hint


def test_a_chain_longer_than_the_bound_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "f0.yaml", BASE)
    for i in range(1, MAX_CHAIN + 1):
        _write(tmp_path, f"f{i}.yaml", f"extends: f{i - 1}.yaml\n")
    (finding,) = _error(tmp_path / f"f{MAX_CHAIN}.yaml").findings
    assert finding.path == "extends" and f"longer than {MAX_CHAIN} files" in finding.message
    assert load_environment(tmp_path / f"f{MAX_CHAIN - 1}.yaml").config.name == "team-base"


def test_the_merged_environment_keeps_the_bound_on_values(tmp_path: Path) -> None:
    """Each file is within MAX_VALUES; a chain of them together must be too."""
    half = MAX_VALUES // 4 + 10  # keys, each with its value: just over half the bound a file
    extra = "".join(f"  a{i}: x\n" for i in range(half))
    _write(tmp_path, "a.yaml", BASE.replace("tags:\n", "tags:\n" + extra))
    _write(
        tmp_path,
        "b.yaml",
        "extends: a.yaml\ntags:\n" + "".join(f"  b{i}: x\n" for i in range(half)),
    )
    (finding,) = _error(tmp_path / "b.yaml").findings
    assert (finding.path, finding.line) == ("extends", 1)
    assert f"more than {MAX_VALUES:,} values" in finding.message


def test_an_extends_with_a_control_character_is_one_line(tmp_path: Path) -> None:
    dev = _write(tmp_path, "dev.yaml", 'name: team-dev\nextends: "base.yaml\\nx"\n')
    (finding,) = _error(dev).findings
    assert (finding.path, finding.line) == ("extends", 2)
    assert "\n" not in finding.render(str(dev))


def test_an_abstract_base_is_refused_alone_and_names_its_overlays(
    tmp_path: Path, base: Path
) -> None:
    _write(tmp_path, "dev.yaml", "extends: base.yaml\nname: team-dev\n")
    _write(tmp_path, "prod.yaml", "# prod\nextends: './base.yaml'  # shared\nname: team-prod\n")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")  # skipped, no traceback
    (finding,) = _error(base).findings
    assert (finding.path, finding.line) == ("abstract", 1)
    assert finding.hint is not None
    assert f"{tmp_path / 'dev.yaml'}, {tmp_path / 'prod.yaml'}" in finding.hint
    assert load_environment(tmp_path / "dev.yaml").config.name == "team-dev"  # not inherited


# --- validate --explain -------------------------------------------------------------------------


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["validate", "-q", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_names_the_file_that_set_a_value_and_what_it_overrode(
    tmp_path: Path, base: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prod = _write(tmp_path, "prod.yaml", """\
        extends: base.yaml
        name: team-prod
        cluster:
          instance_groups:
            - {name: compute, instance_count: 8}
        """)  # fmt: skip
    code, out, _ = _explain(
        capsys, str(prod), "--explain", "cluster.instance_groups.compute.instance_count"
    )
    assert code == 0
    assert out.splitlines() == [
        "cluster.instance_groups.compute.instance_count: 8",
        f"  set by {prod}:5",
        f"  over   {base}:20 (2)",
        f"  files  {base} -> {prod}",
    ]
    code, out, _ = _explain(
        capsys, str(prod), "--explain", "cluster.instance_groups[0].instance_type"
    )
    assert out.splitlines()[:2] == [
        'cluster.instance_groups[0].instance_type: "ml.m5.xlarge"', f"  set by {base}:19",
    ]  # fmt: skip
    _, out, _ = _explain(capsys, str(prod), "--explain", "cluster.instance_groups.compute")
    assert out.splitlines()[1] == (
        f'  set by {prod}:5 (merged: {{"name": "compute", "instance_count": 8}})'
    )
    code, out, _ = _explain(capsys, str(prod), "--explain", "cluster.node_recovery")
    assert out.splitlines()[:2] == [
        'cluster.node_recovery: "Automatic"',
        "  no file sets it: the default",
    ]


def test_explain_as_json_and_a_removal(
    tmp_path: Path, base: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = _write(
        tmp_path, "dev.yaml", "extends: base.yaml\nname: d-dev\nmonitoring: {alarm_email: null}\n"
    )
    code, out, _ = _explain(
        capsys, str(dev), "--explain", "monitoring.alarm_email", "--format", "json"
    )
    assert code == 0
    assert json.loads(out) == {
        "key": "monitoring.alarm_email",
        "value": None,
        "set_by": [
            {"file": str(base), "line": 22, "value": "oncall@example.com"},
            {"file": str(dev), "line": 3, "value": None},
        ],
        "files": [str(base), str(dev)],
    }
    _, out, _ = _explain(capsys, str(dev), "--explain", "monitoring.alarm_email")
    assert out.splitlines()[1] == f"  removed by {dev}:3"


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (
            "storage.lustre.capacity",
            "no key 'capacity' under storage.lustre. Hint: the keys under storage.lustre: ",
        ),
        (
            "cluster.instance_groups.gpu",
            "has no item named 'gpu'. Hint: the items of cluster.instance_groups by name: "
            "controller, compute",
        ),
        ("nope", "no top-level key 'nope'"),
        ("name.first", "name is a single value"),
    ],
)  # fmt: skip
def test_explain_of_an_unknown_key_is_one_line_and_exit_2(
    tmp_path: Path, base: Path, capsys: pytest.CaptureFixture[str], key: str, says: str
) -> None:
    dev = _write(tmp_path, "dev.yaml", "extends: base.yaml\nname: team-dev\n")
    code, out, err = _explain(capsys, str(dev), "--explain", key)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"{dev} {key}: ") and says in line


# --- the team example -----------------------------------------------------------------------------

TEAM = REPO / "environments" / "team"


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_team_overlays_validate(name: str) -> None:
    loaded = load_environment(TEAM / f"{name}.yaml")
    assert loaded.config.name == f"team-{name}"
    assert loaded.chain == (str(TEAM / "base.yaml"), str(TEAM / f"{name}.yaml"))


def test_the_team_overlays_differ_where_they_say() -> None:
    dev, prod = (load_environment(TEAM / f"{n}.yaml").config for n in ("dev", "prod"))
    count = {
        c.name: {g.name: g.instance_count for g in c.cluster.instance_groups} for c in (dev, prod)
    }
    assert count == {
        "team-dev": {"controller": 1, "login": 1, "compute": 1},
        "team-prod": {"controller": 1, "login": 1, "compute": 4},
    }
    assert (dev.storage.lustre.storage_capacity_gib, prod.storage.lustre.storage_capacity_gib) == (
        1200,
        2400,
    )
    assert dev.network.vpc is not None and prod.network.vpc is not None
    assert str(dev.network.vpc.cidr) != str(prod.network.vpc.cidr)


def test_the_team_files_match_the_json_schema() -> None:
    """Editors accept the directives and an overlay without the top-level keys its base sets,
    but still ask a file that extends nothing for its required keys. (An item merged by name
    may leave its own required keys to the base: the editor flags those, `validate` does not.)"""
    validator = jsonschema.Draft202012Validator(environment_schema())
    for file in sorted(TEAM.glob("*.yaml")):
        data = yaml.safe_load(file.read_text())
        errors = list(validator.iter_errors(data))
        assert all(
            e.validator == "required"
            and list(e.absolute_path)[:2] == ["cluster", "instance_groups"]
            for e in errors
        ), (file.name, [e.message for e in errors])
    lone = {"name": "team-dev", "abstract": False}
    assert [e.message for e in validator.iter_errors(lone)] == [
        "'region' is a required property",
        "'availability_zone_id' is a required property",
    ]


def test_the_team_base_is_abstract() -> None:
    (finding,) = _error(TEAM / "base.yaml").findings
    assert finding.path == "abstract" and "dev.yaml" in (finding.hint or "")


def test_no_abstract_file_sits_where_the_examples_loops_look() -> None:
    """Tests and the Makefile loop over environments/*.yaml: bases live in a folder of their own
    (environments/team/), so those loops never meet a file that cannot validate alone."""
    for example in sorted((REPO / "environments").glob("*.yaml")):
        load_environment(example)  # an abstract file would raise ConfigError here
