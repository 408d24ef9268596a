"""The loader: YAML with line numbers, and every way a file can be wrong ending as a `ConfigError`.

A bad environment file must never produce a traceback: the CLI prints findings and exits 2. These
tests pin the line, path and hint of each kind of mistake, and fuzz the loader for anything other
than `ConfigError` escaping.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperpod_kit.config import ConfigError, Finding, Level
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.loader import Loc, format_loc, line_of, parse_yaml
from tests.conftest import WriteEnv, default_data, merge


def _only(err: pytest.ExceptionInfo[ConfigError]) -> Finding:
    assert len(err.value.findings) == 1, str(err.value)
    return err.value.findings[0]


def _parse_error(text: str) -> Finding:
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", text)
    return _only(err)


def _load_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    return err.value


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _line(path: Path, key: str, nth: int = 0) -> int:
    """1-based line of the `nth` occurrence of `key:` in the file."""
    pattern = re.compile(rf"^\s*(- )?{re.escape(key)}:")
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if pattern.match(text)]
    return hits[nth]


def _item_line(path: Path, list_key: str, index: int) -> int:
    """1-based line of item `index` of the block list under `list_key`."""
    lines = path.read_text().splitlines()
    start = _line(path, list_key)
    items = [i for i, text in enumerate(lines[start:], start + 1) if text.lstrip().startswith("- ")]
    return items[index]


# --- parse_yaml: lines ---------------------------------------------------------------------------

NESTED = """\
# a comment first
name: dev
network:
  vpc:
    cidr: 10.0.0.0/16

cluster:
  instance_groups:
    - name: a
      role: controller
    - {name: b, role: compute}
tags: {team: ml}
"""


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        pytest.param((), 2, id="document-starts-at-first-key"),
        pytest.param(("name",), 2, id="top-key"),
        pytest.param(("network",), 3, id="section"),
        pytest.param(("network", "vpc"), 4, id="nested"),
        pytest.param(("network", "vpc", "cidr"), 5, id="leaf"),
        pytest.param(("cluster", "instance_groups"), 8, id="list-key"),
        pytest.param(("cluster", "instance_groups", 0), 9, id="list-item-0"),
        pytest.param(("cluster", "instance_groups", 0, "name"), 9, id="item-0-first-key"),
        pytest.param(("cluster", "instance_groups", 0, "role"), 10, id="item-0-second-key"),
        pytest.param(("cluster", "instance_groups", 1), 11, id="flow-item-1"),
        pytest.param(("cluster", "instance_groups", 1, "role"), 11, id="flow-item-key"),
        pytest.param(("tags", "team"), 12, id="flow-mapping-key"),
    ],
)
def test_parse_yaml_maps_paths_to_lines(loc: Loc, line: int) -> None:
    """Every key and list item knows its 1-based line, so any finding can point into the file."""
    data, lines = parse_yaml("env.yaml", NESTED)
    assert data["cluster"]["instance_groups"][1] == {"name": "b", "role": "compute"}
    assert lines[loc] == line


def test_parse_yaml_maps_every_key_of_the_default_file() -> None:
    """Each path in the parsed default has a line whose text holds that key."""
    text = (Path(__file__).resolve().parents[2] / "environments" / "default.yaml").read_text()
    _, lines = parse_yaml("default.yaml", text)
    source = text.splitlines()
    for loc, line in lines.items():
        if loc and isinstance(loc[-1], str):
            assert f"{loc[-1]}:" in source[line - 1], (loc, line)


def test_int_key_is_mapped_under_the_int_pydantic_reports() -> None:
    """`2400: x` reaches pydantic as the int 2400, so its line is found under that int too."""
    data, lines = parse_yaml("env.yaml", "name: dev\n2400: x\n")
    assert data == {"name": "dev", 2400: "x"}
    assert lines[(2400,)] == lines[("2400",)] == 2


def test_duplicate_key_is_an_error_naming_the_first_line() -> None:
    """YAML would keep the last of two equal keys silently; the loader refuses instead."""
    f = _parse_error("name: dev\nregion: us-west-2\nname: prod\n")
    assert (f.level, f.path, f.line) == (Level.ERROR, "name", 3)
    assert f.message == "key given twice (first on line 1)"
    assert f.hint == "keep one; YAML would silently use the last"


def test_every_duplicate_is_reported_with_its_path() -> None:
    """Nested and repeated duplicates all show, each at its own path and line."""
    text = "a:\n  b: 1\n  c: 2\n  b: 3\nd: [{e: 1, e: 2}]\na: 4\n"
    with pytest.raises(ConfigError) as err:
        parse_yaml("env.yaml", text)
    got = [(f.path, f.line, f.message) for f in err.value.findings]
    assert got == [
        ("a.b", 4, "key given twice (first on line 2)"),
        ("d[0].e", 5, "key given twice (first on line 5)"),
        ("a", 6, "key given twice (first on line 1)"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        pytest.param("name: dev\nregion: a: b\n", 2, "mapping values are not allowed", id="colon"),
        pytest.param("name: dev\nnetwork:\n  vpc: [a\n", 4, "expected ',' or ']'", id="unclosed"),
        pytest.param("a:\n\t- b\n", 2, "'\\t' that cannot start any token", id="tab"),
        pytest.param("a: 1\n  b: 2\n", 2, "mapping values are not allowed", id="indent"),
        pytest.param("a: 'x\n", 2, "unexpected end of stream", id="open-quote"),
    ],
)
def test_invalid_yaml_points_at_the_line(text: str, line: int, problem: str) -> None:
    """Syntax errors become `(yaml)` findings at the line YAML stopped on, with a quoting hint."""
    f = _parse_error(text)
    assert (f.level, f.path, f.line) == (Level.ERROR, "(yaml)", line)
    assert f.message.startswith("not valid YAML: ")
    assert problem in f.message
    assert f.hint is not None and "indentation and quoting" in f.hint


@pytest.mark.parametrize(
    ("text", "line", "problem", "hint"),
    [
        pytest.param(
            "a: 1\n---\nb: 2\n", 2, "another document", "remove the `---`", id="two-documents"
        ),
        pytest.param(
            "a: *nowhere\n", 1, "undefined alias", "define the anchor (`&name`)", id="undefined"
        ),
        pytest.param(
            "a: &x 1\nb: &x 2\n", 2, "duplicate anchor", "its own name", id="duplicate-anchor"
        ),
        pytest.param(
            "a: !!python/name:os.system x\n",
            1,
            "could not determine a constructor",
            "remove the tag",
            id="unsafe-tag",
        ),
        pytest.param("a: !vault x\n", 1, "for the tag '!vault'", "remove the tag", id="local-tag"),
        pytest.param("? [a]\n: 1\n", 1, "unhashable key", "a key is a name", id="list-as-key"),
    ],
)
def test_yaml_errors_that_are_not_syntax_say_what_to_do(
    text: str, line: int, problem: str, hint: str
) -> None:
    """Well-formed YAML that cannot be read gets its own fix, not the indentation advice."""
    f = _parse_error(text)
    assert (f.level, f.path, f.line) == (Level.ERROR, "(yaml)", line)
    assert problem in f.message
    assert f.hint is not None and hint in f.hint
    assert "indentation" not in f.hint


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("\n\n", id="blank-lines"),
        pytest.param("# just a comment\n# and another\n", id="comments"),
        pytest.param("---\n", id="document-marker"),
        pytest.param("~\n", id="null"),
    ],
)
def test_empty_file_is_a_document_error(text: str) -> None:
    """An empty file says so at line 1, and points at the default as a starting point."""
    f = _parse_error(text)
    assert (f.level, f.path, f.line, f.message) == (
        Level.ERROR,
        "(document)",
        1,
        "the file is empty",
    )
    assert f.hint is not None and "environments/default.yaml" in f.hint


@pytest.mark.parametrize(
    ("text", "kind", "line"),
    [
        pytest.param("- name: dev\n- region: us-west-2\n", "list", 1, id="list"),
        pytest.param("hello\n", "string", 1, id="string"),
        pytest.param("# comment\n\n42\n", "number", 3, id="number"),
        pytest.param("true\n", "boolean", 1, id="boolean"),
    ],
)
def test_top_level_not_a_mapping_is_a_document_error(text: str, kind: str, line: int) -> None:
    """A file that is not a mapping is named for what it holds, at the line where it starts."""
    f = _parse_error(text)
    assert (f.level, f.path, f.line) == (Level.ERROR, "(document)", line)
    assert f.message == f"the file holds a {kind}, not a mapping of keys"


def test_control_character_points_at_its_line() -> None:
    """A stray control character (yaml.ReaderError) is reported at the line that holds it."""
    f = _parse_error("name: dev\nregion: us-\x07west-2\n")
    assert (f.level, f.path, f.line) == (Level.ERROR, "(yaml)", 2)
    assert f.message == "not valid YAML: character 7 is not allowed"


# --- line_of and format_loc ----------------------------------------------------------------------

LINES: dict[Loc, int] = {(): 1, ("a",): 2, ("a", "b"): 3, ("a", "l"): 5, ("a", "l", 0): 6}


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        pytest.param(("a", "b"), 3, id="present"),
        pytest.param(("a", "l", 0), 6, id="list-item"),
        pytest.param(("a", "missing"), 2, id="missing-key-uses-parent"),
        pytest.param(("a", "b", "c", "d"), 3, id="missing-deep-uses-nearest"),
        pytest.param(("a", "l", 3, "x"), 5, id="missing-item-uses-list"),
        pytest.param(("zzz",), 1, id="unknown-top-uses-document"),
        pytest.param((), 1, id="document"),
    ],
)
def test_line_of_falls_back_to_the_nearest_parent(loc: Loc, line: int) -> None:
    """A key the file leaves out (a default) is reported on the nearest line the file has."""
    assert line_of(LINES, loc) == line


def test_line_of_without_lines_is_none() -> None:
    """No map, no line: the finding renders as `FILE path:` instead of a wrong line."""
    assert line_of({}, ("a", "b")) is None


@pytest.mark.parametrize(
    ("loc", "text"),
    [
        pytest.param(("a", "b", 0, "c"), "a.b[0].c", id="mixed"),
        pytest.param(("a",), "a", id="one-key"),
        pytest.param(("a", 0, 1), "a[0][1]", id="nested-lists"),
        pytest.param((0, "a"), "[0].a", id="leading-index"),
        pytest.param((), "(document)", id="empty"),
        pytest.param(
            ("storage", "lustre", "data_repository_associations", 1, "file_system_path"),
            "storage.lustre.data_repository_associations[1].file_system_path",
            id="dra",
        ),
    ],
)
def test_format_loc(loc: Loc, text: str) -> None:
    """Paths read the way users write them: dots for keys, brackets for list indexes."""
    assert format_loc(loc) == text


# --- schema errors through load_environment ------------------------------------------------------


def test_default_file_loads(write_env: WriteEnv) -> None:
    """The baseline every other case changes: the default loads with no error, and its one
    warning is where enroot and pyxis come from (only the user can answer that)."""
    loaded = load_environment(write_env())
    assert loaded.config.name == "hyperpod-dev"
    assert [f.check for f in loaded.findings if f.level is not Level.INFO] == [
        "enroot-pyxis-source"
    ]
    assert loaded.lines[("name",)] == 1


@pytest.mark.parametrize(
    ("overrides", "path", "key", "hint"),
    [
        pytest.param({"nmae": "x"}, "nmae", "nmae", "did you mean 'name'?", id="top"),
        pytest.param(
            {"storage": {"lustre": {"storage_capacty_gib": 2400}}},
            "storage.lustre.storage_capacty_gib",
            "storage_capacty_gib",
            "did you mean 'storage_capacity_gib'?",
            id="nested",
        ),
        pytest.param(
            {"network": {"vpc": {"private_subnet": "10.0.128.0/17"}}},
            "network.vpc.private_subnet",
            "private_subnet",
            "did you mean 'private_subnet_cidr'?",
            id="missing-suffix",
        ),
        pytest.param(
            {"trainer": {"job": {"elastc": {"min_replicas": 1}}}},
            "trainer.job.elastc",
            "elastc",
            "did you mean 'elastic'?",
            id="under-trainer",
        ),
    ],
)
def test_unknown_key_near_a_known_one_suggests_it(
    write_env: WriteEnv, overrides: dict[str, Any], path: str, key: str, hint: str
) -> None:
    """A typo is an error (extra="forbid") at the typo's own line, with the key it meant."""
    file = write_env(overrides)
    found = [f for f in _load_error(file).findings if f.path == path]
    assert len(found) == 1
    (f,) = found
    assert (f.level, f.message, f.hint) == (Level.ERROR, "unknown key", hint)
    assert f.line == _line(file, key)


def test_unknown_key_far_from_any_lists_the_allowed_keys(write_env: WriteEnv) -> None:
    """With nothing close, the hint lists what the section does take."""
    file = write_env({"storage": {"bucket": {"zzzzzz": 1}}})
    f = _only_error(file)
    assert (f.path, f.message, f.line) == (
        "storage.bucket.zzzzzz",
        "unknown key",
        _line(file, "zzzzzz"),
    )
    assert f.hint == "allowed keys: name, existing_name, encryption, removal_policy"


def test_unknown_key_in_a_list_item_names_the_item(write_env: WriteEnv) -> None:
    """Unknown keys inside list items carry the index and the line of the key."""
    groups = default_data()["cluster"]["instance_groups"]
    groups[1]["instance_cnt"] = 1
    file = write_env({"cluster": {"instance_groups": groups}})
    f = _only_error(file)
    assert f.path == "cluster.instance_groups[1].instance_cnt"
    assert f.hint == "did you mean 'instance_count'?"
    assert f.line == _line(file, "instance_cnt")


def _only_error(file: Path) -> Finding:
    err = _load_error(file)
    assert len(err.findings) == 1, str(err)
    return err.findings[0]


@pytest.mark.parametrize(
    ("remove", "path", "parent", "hint"),
    [
        pytest.param(
            ("name",),
            "name",
            None,
            "3-24 lowercase letters, digits and hyphens, starting with a letter",
            id="top-with-x-hint",
        ),
        pytest.param(
            ("cluster", "instance_groups", 1, "name"),
            "cluster.instance_groups[1].name",
            ("instance_groups", 1),
            "letters, digits and single hyphens, like gpu-a",
            id="list-item-with-x-hint",
        ),
        pytest.param(
            ("cluster", "instance_groups", 2, "instance_count"),
            "cluster.instance_groups[2].instance_count",
            ("instance_groups", 2),
            "add 'instance_count:' here",
            id="list-item-without-x-hint",
        ),
    ],
)
def test_missing_required_key_points_at_its_parent(
    tmp_path: Path, remove: tuple[Any, ...], path: str, parent: Any, hint: str
) -> None:
    """A missing key has no line of its own; the finding sits on the line of its parent."""
    data = default_data()
    target: Any = data
    for part in remove[:-1]:
        target = target[part]
    del target[remove[-1]]
    file = _write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    f = _only_error(file)
    assert (f.path, f.message, f.hint) == (path, "required key is missing", hint)
    expected = 1 if parent is None else _item_line(file, parent[0], parent[1])
    assert f.line == expected


def test_missing_key_of_a_new_section_points_at_the_section(write_env: WriteEnv) -> None:
    """Adding `elastic:` without its required bounds points at the `elastic:` line."""
    file = write_env({"trainer": {"job": {"elastic": {"min_replicas": 1}}}})
    f = _only_error(file)
    assert (f.path, f.message) == ("trainer.job.elastic.max_replicas", "required key is missing")
    assert f.hint == "add 'max_replicas:' here"
    assert f.line == _line(file, "elastic")


def _one_group(**kw: Any) -> dict[str, Any]:
    item = {"name": "c", "role": "controller", "instance_type": "ml.m5.xlarge", "instance_count": 1}
    return {"cluster": {"instance_groups": [{**item, **kw}]}}


@pytest.mark.parametrize(
    ("overrides", "path", "message", "hint"),
    [
        pytest.param(
            {"storage": {"lustre": {"storage_capacity_gib": "lots"}}},
            "storage.lustre.storage_capacity_gib",
            "'lots': input should be a valid integer",
            None,
            id="string-for-int",
        ),
        pytest.param(
            {"storage": {"lustre": {"storage_capacity_gib": 0}}},
            "storage.lustre.storage_capacity_gib",
            "0: input should be greater than 0",
            None,
            id="int-out-of-range",
        ),
        pytest.param(
            {"region": ["us-west-2"]},
            "region",
            "a list: input should be a valid string",
            "like us-west-2",
            id="list-for-string",
        ),
        pytest.param(
            {"network": {"vpc": 5}},
            "network.vpc",
            "5: input should be a valid dictionary (a mapping of keys)",
            "write keys indented under 'vpc:', such as cidr, public_subnet_cidr, "
            "private_subnet_cidr, flow_logs",
            id="int-for-section",
        ),
        pytest.param(
            {"monitoring": {"enabled": {"x": 1}}},
            "monitoring.enabled",
            "a mapping: input should be a valid boolean",
            None,
            id="mapping-for-bool",
        ),
        pytest.param(
            {"availability_zone_id": "us-west-2a"},
            "availability_zone_id",
            "'us-west-2a': string should match pattern",
            "an AZ ID like usw2-az2; `aws ec2 describe-availability-zones` lists them",
            id="x-hint-az-name-not-id",
        ),
        pytest.param(
            {"name": "Bad_Name"},
            "name",
            "'Bad_Name': string should match pattern",
            "3-24 lowercase letters, digits and hyphens, starting with a letter",
            id="x-hint-name",
        ),
        pytest.param(
            {"network": {"vpc": {"cidr": "10.0.0.1/16"}}},
            "network.vpc.cidr",
            "'10.0.0.1/16': input is not a valid IPv4 network",
            "a network address such as 10.0.0.0/16",
            id="x-hint-cidr-host-bits",
        ),
        pytest.param(
            {"network": {"vpc": {"private_subnet_cidr": "10.0.128.0/33"}}},
            "network.vpc.private_subnet_cidr",
            "'10.0.128.0/33'",
            "a network address inside the VPC CIDR, such as 10.0.128.0/17",
            id="x-hint-subnet",
        ),
        pytest.param(
            {"account": "12345"},
            "account",
            "'12345': string should match pattern",
            "12 digits",
            id="x-hint-account",
        ),
        pytest.param(
            {"orchestrator": "k8s"},
            "orchestrator",
            "'k8s': input should be 'slurm' or 'eks'",
            "use one of 'slurm' or 'eks'",
            id="literal-orchestrator",
        ),
        pytest.param(
            {"storage": {"lustre": {"data_compression": "ZSTD"}}},
            "storage.lustre.data_compression",
            "'ZSTD': input should be 'LZ4' or 'NONE'",
            "use one of 'LZ4' or 'NONE'",
            id="literal-compression",
        ),
        pytest.param(
            _one_group(role="boss"),
            "cluster.instance_groups[0].role",
            "'boss': input should be 'controller', 'login', 'compute' or 'worker'",
            "use one of 'controller', 'login', 'compute' or 'worker'",
            id="literal-in-list-item",
        ),
        pytest.param(
            _one_group(instance_type="p5"),
            "cluster.instance_groups[0].instance_type",
            "'p5': string should match pattern",
            "like ml.p5.48xlarge",
            id="x-hint-in-list-item",
        ),
        pytest.param(
            {"storage": {"lustre": {"storage_capacity_gib": "1200"}}},
            "storage.lustre.storage_capacity_gib",
            "'1200': input should be a valid integer",
            "the quotes make it text; write it without them: 1200",
            id="strict-quoted-number",
        ),
        pytest.param(
            _one_group(instance_count=True),
            "cluster.instance_groups[0].instance_count",
            "true: input should be a valid integer",
            None,
            id="strict-bool-for-int",
        ),
        pytest.param(
            {"network": {"vpc": {"cidr": True}}},
            "network.vpc.cidr",
            "true: a CIDR block is written as text",
            "a network address such as 10.0.0.0/16",
            id="bool-for-cidr",
        ),
    ],
)
def test_wrong_value_shows_value_message_and_hint(
    write_env: WriteEnv,
    overrides: dict[str, Any],
    path: str,
    message: str,
    hint: str | None,
) -> None:
    """A wrong value is quoted back with pydantic's reason and the field's `x-hint`, at its line."""
    file = write_env(overrides)
    f = _only_error(file)
    assert (f.level, f.path, f.check) == (Level.ERROR, path, "schema")
    assert f.message.startswith(message), f.message
    assert f.hint == hint
    assert f.line == _line(file, path.rsplit(".", 1)[-1])


def test_list_item_error_has_the_index_in_path_and_line(write_env: WriteEnv) -> None:
    """An error inside a flow list names the item index and the line that holds it."""
    file = write_env(
        {
            "storage": {
                "lustre": {
                    "data_repository_associations": [
                        {"file_system_path": "/data", "s3_prefix": "data/"},
                        {
                            "file_system_path": "/b",
                            "s3_prefix": "b/",
                            "import_policy": ["NEW", "BOGUS"],
                        },
                    ]
                }
            }
        }
    )
    f = _only_error(file)
    assert f.path == "storage.lustre.data_repository_associations[1].import_policy[1]"
    assert f.hint == "use one of 'NEW', 'CHANGED' or 'DELETED'"
    assert f.line == _line(file, "import_policy") + 2  # block list: `- NEW` then `- BOGUS`


def test_long_value_is_shortened_in_the_message(write_env: WriteEnv) -> None:
    """A pasted blob is cut to 60 characters so the error stays on one screen line."""
    file = write_env({"region": "x" * 500})
    f = _only_error(file)
    shown = f.message.split(": ", 1)[0]
    assert len(shown) == 60
    assert shown.endswith("...")


SEVERAL = """\
orchestrator: k8s
region: us-west-2
name: Bad_Name
availability_zone_id: usw2-az2
storage:
  lustre:
    storage_capacity_gib: lots
    nope: 1
"""


def test_several_schema_errors_are_all_reported_in_line_order(tmp_path: Path) -> None:
    """Every schema error in a file shows at once, in file order (not pydantic's field order)."""
    err = _load_error(_write(tmp_path, SEVERAL))
    got = [(f.line, f.path) for f in err.findings]
    assert got == [
        (1, "orchestrator"),
        (3, "name"),
        (7, "storage.lustre.storage_capacity_gib"),
        (8, "storage.lustre.nope"),
    ]
    assert all(f.level is Level.ERROR for f in err.findings)


def test_config_error_str_is_its_rendered_findings(tmp_path: Path) -> None:
    """`str(ConfigError)` is what the CLI prints: its findings, rendered against the file."""
    path = _write(tmp_path, SEVERAL)
    err = _load_error(path)
    assert err.file == str(path)
    assert str(err) == "\n".join(f.render(str(path)) for f in err.findings)
    assert str(err).splitlines()[0] == (
        f"{path}:1 orchestrator: 'k8s': input should be 'slurm' or 'eks'. "
        "Hint: use one of 'slurm' or 'eks'."
    )


def test_schema_errors_stop_before_the_validators(tmp_path: Path) -> None:
    """Semantic checks run only on a config that passed the schema: no `check` other than schema."""
    data = merge(
        default_data(),
        {"orchestrator": "k8s", "storage": {"lustre": {"storage_capacity_gib": 2000}}},
    )
    err = _load_error(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    assert {f.check for f in err.findings} == {"schema"}


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        pytest.param("missing", "no such file", id="missing"),
        pytest.param("directory", "is a folder, not a file", id="directory"),
        pytest.param("pipe", "is a named pipe (FIFO), not a file", id="named-pipe"),
        pytest.param(
            "link-to-pipe", "is a named pipe (FIFO), not a file", id="link-to-a-named-pipe"
        ),
        pytest.param("socket", "is a socket, not a file", id="socket"),
        pytest.param("device", "is a character device, not a file", id="device"),
    ],
)
def test_unreadable_file_is_a_file_error(tmp_path: Path, kind: str, message: str) -> None:
    """Paths that are not a readable text file are findings at `(file)`, not OSError tracebacks,
    and nothing but a regular file is opened: a pipe without a writer would block the read."""
    path = tmp_path / "env.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "pipe":
        os.mkfifo(path)
    elif kind == "link-to-pipe":
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    elif kind == "device":
        path = Path("/dev/null")
    done: list[ConfigError] = []
    reader = threading.Thread(target=lambda: done.append(_load_error(path)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert done, f"loading a {kind} did not return within 10 s"
    err = done[0]
    (f,) = err.findings
    assert (f.level, f.path, f.message) == (Level.ERROR, "(file)", message)
    assert f.hint is not None and "environments/default.yaml" in f.hint


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1: x\nname: dev\n", id="int-key"),
        pytest.param("true: x\nname: dev\n", id="bool-key"),
        pytest.param("~: x\nname: dev\n", id="null-key"),
        pytest.param("tags: {1: x}\n", id="int-key-in-dict-field"),
        pytest.param("name: 2024-01-01\n", id="date-for-string"),
        pytest.param("name: !!binary aGVsbG8=\n", id="bytes-for-string"),
        pytest.param("a: &a {b: 1}\nname: *a\n", id="alias-for-string"),
        pytest.param("<<: {name: dev}\nregion: us-west-2\n", id="merge-key"),
        pytest.param("network: {vpc: {cidr: 167772160}}\n", id="int-for-cidr"),
        pytest.param("name: .inf\n", id="inf"),
        pytest.param('name: "\\U0001F600"\n', id="emoji"),
        pytest.param("a: !!int foo\n", id="bad-int-tag"),
        pytest.param("a: !!int\n", id="empty-int-tag"),
        pytest.param("a: !!float foo\n", id="bad-float-tag"),
        pytest.param("a: !!bool foo\n", id="bad-bool-tag"),
        pytest.param("a: !!timestamp foo\n", id="bad-timestamp-tag"),
        pytest.param("name: dev\ntags: !!int x\n", id="bad-tag-nested"),
        pytest.param("0x1f: x\nname: dev\n", id="hex-key"),
        pytest.param("0b11: x\nname: dev\n", id="binary-key"),
        pytest.param("1:30: x\nname: dev\n", id="sexagesimal-key"),
        pytest.param("a: &x [*x]\n", id="recursive-list"),
        pytest.param("a: &x {b: *x}\n", id="recursive-mapping"),
    ],
)
def test_odd_yaml_is_a_config_error_not_a_traceback(tmp_path: Path, text: str) -> None:
    """Corner cases of YAML either load or give findings; any other exception is a bug."""
    try:
        load_environment(_write(tmp_path, text))
    except ConfigError as e:
        assert e.findings
        assert all(isinstance(f.path, str) and f.path for f in e.findings)


# --- property tests: nothing but ConfigError escapes ----------------------------------------------


def _loads_or_config_error(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        load_environment(path)
    except ConfigError as e:
        assert e.findings
        assert str(e)


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Pieces of YAML syntax, so random text reaches the parser's interesting corners: explicit
# tags, anchors and aliases, and keys that YAML 1.1 reads as ints.
YAML_BITS = st.sampled_from(
    [
        *["\n", "  ", "    ", "\t", "- ", ": ", ":", "? ", "#", "'", '"', "|", ">"],
        *["[", "]", "{", "}", ",", "---", "...", "%YAML 1.1"],
        *["~", "null", "true", "yes", "1200", "-1", "0o17", "1e3", ".nan", "2024-01-01"],
        *["name", "region", "network", "vpc", "cidr", "storage", "lustre", "cluster"],
        *["instance_groups", "us-west-2", "usw2-az2", "10.0.0.0/16"],
        *["!!int ", "!!bool ", "!!timestamp ", "&a ", "*a", "0x1f", "0b11", "1:30"],
    ]
)
YAML_TEXT = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(YAML_BITS, st.text(max_size=5)), max_size=60).map("".join),
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
)
KEYS = st.one_of(
    st.text(max_size=12),
    st.sampled_from([*default_data(), "vpc", "lustre", "instance_groups", "elastic"]),
    st.integers(min_value=-5, max_value=5),
    st.booleans(),
)
TREES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(text=YAML_TEXT)
def test_random_text_loads_or_raises_config_error(tmp_path: Path, text: str) -> None:
    """Any text at all, YAML or not: a config or a ConfigError, never another exception."""
    _loads_or_config_error(tmp_path / "env.yaml", text)


@SETTINGS
@given(tree=TREES)
def test_random_structures_load_or_raise_config_error(tmp_path: Path, tree: Any) -> None:
    """Any YAML document of nested maps, lists and scalars: a config or a ConfigError."""
    _loads_or_config_error(tmp_path / "env.yaml", yaml.safe_dump(tree))


def _leaf_paths(node: Any, loc: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        out = [loc] if loc else []
        return out + [p for k, v in node.items() for p in _leaf_paths(v, (*loc, k))]
    if isinstance(node, list):
        return [loc] + [p for i, v in enumerate(node) for p in _leaf_paths(v, (*loc, i))]
    return [loc]


DEFAULT_PATHS = _leaf_paths(default_data())


@SETTINGS
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(DEFAULT_PATHS), TREES, st.booleans()), min_size=1, max_size=3
    )
)
def test_default_with_random_values_loads_or_raises_config_error(
    tmp_path: Path, edits: list[tuple[tuple[Any, ...], Any, bool]]
) -> None:
    """The default with values replaced or deleted anywhere: reaches the validators too."""
    data = default_data()
    for loc, value, delete in edits:
        parent: Any = data
        try:
            for part in loc[:-1]:
                parent = parent[part]
            if delete:
                del parent[loc[-1]]
            else:
                parent[loc[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced this path
    _loads_or_config_error(tmp_path / "env.yaml", yaml.safe_dump(data, sort_keys=False))
