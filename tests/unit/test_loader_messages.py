"""Messages that say what to do: how YAML read a value, empty sections, encodings, and never
pydantic's internals (class names, "instance of", union member tags) in front of a user."""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hyperpod_kit.config import ConfigError, Finding, Level
from hyperpod_kit.config import schema as schema_module
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.loader import schema_findings

HEAD = "name: hyperpod-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\n"
HEAD_LINES = HEAD.count("\n")


def _errors(tmp_path: Path, text: str) -> list[Finding]:
    path = tmp_path / "env.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    return err.value.findings


def _only(tmp_path: Path, text: str) -> Finding:
    findings = _errors(tmp_path, text)
    assert len(findings) == 1, findings
    return findings[0]


# --- values YAML converts before the schema sees them --------------------------------------------

LUSTRE = "storage:\n  lustre:\n    weekly_maintenance_start_time: {}\n"


@pytest.mark.parametrize(
    ("text", "path", "message", "hint"),
    [
        pytest.param(
            "account: 111122223333",
            "account",
            "111122223333: input should be a valid string",
            'YAML read 111122223333 as the number 111122223333; quote it: "111122223333"',
            id="account-id",
        ),
        pytest.param(
            "account: 012345670123",
            "account",
            "012345670123: input should be a valid string",
            'YAML read 012345670123 as the number 1402433619; quote it: "012345670123"',
            id="leading-zero-is-octal",
        ),
        pytest.param(
            "account: 12345",
            "account",
            "12345: input should be a valid string",
            "12 digits, in quotes (YAML read 12345 as the number 12345)",
            id="quoting-alone-would-not-do",
        ),
        pytest.param(
            LUSTRE.format("7:03:00"),
            "storage.lustre.weekly_maintenance_start_time",
            "7:03:00: input should be a valid string",
            'YAML read 7:03:00 as the number 25380; quote it: "7:03:00"',
            id="sexagesimal",
        ),
        pytest.param(
            "tags: {ratio: 1.5e+3}",
            "tags.ratio",
            "1.5e+3: input should be a valid string",
            'YAML read 1.5e+3 as the number 1500.0; quote it: "1.5e+3"',
            id="exponent",
        ),
        pytest.param(
            "tags: {owner: yes}",
            "tags.owner",
            "yes: input should be a valid string",
            'YAML read yes as the boolean true; quote it: "yes"',
            id="yes",
        ),
        pytest.param(
            "tags: {audit: off}",
            "tags.audit",
            "off: input should be a valid string",
            'YAML read off as the boolean false; quote it: "off"',
            id="off",
        ),
        pytest.param(
            "orchestrator: on",
            "orchestrator",
            "on: input should be 'slurm' or 'eks'",
            'YAML read on as the boolean true; quote it: "on"',
            id="bool-for-literal",
        ),
        pytest.param(
            "tags: {created: 2024-01-01}",
            "tags.created",
            "2024-01-01: input should be a valid string",
            'YAML read 2024-01-01 as a date; quote it: "2024-01-01"',
            id="date",
        ),
        pytest.param(
            "tags: {at: 2024-01-01 10:00:00}",
            "tags.at",
            "2024-01-01 10:00:00: input should be a valid string",
            'YAML read 2024-01-01 10:00:00 as a date and time; quote it: "2024-01-01 10:00:00"',
            id="datetime",
        ),
        pytest.param(
            "tags: {code: 0x1f}",
            "tags.code",
            "0x1f: input should be a valid string",
            'YAML read 0x1f as the number 31; quote it: "0x1f"',
            id="hex",
        ),
        pytest.param(
            "studio:\n  users: [alice, 1001]",
            "studio.users[1]",
            "1001: input should be a valid string",
            'YAML read 1001 as the number 1001; quote it: "1001"',
            id="list-item",
        ),
        pytest.param(
            "tags: {owner: ~}",
            "tags.owner",
            "has no value",
            'YAML reads ~ as no value; quote it if you mean the text: "~"',
            id="tilde",
        ),
        pytest.param(
            "tags: {owner: null}",
            "tags.owner",
            "has no value",
            'YAML reads null as no value; quote it if you mean the text: "null"',
            id="null",
        ),
        pytest.param(
            'storage:\n  lustre:\n    storage_capacity_gib: "2400"',
            "storage.lustre.storage_capacity_gib",
            "'2400': input should be a valid integer",
            "the quotes make it text; write it without them: 2400",
            id="quoted-number",
        ),
        pytest.param(
            "monitoring:\n  enabled: 'false'",
            "monitoring.enabled",
            "'false': input should be a valid boolean",
            "the quotes make it text; write it without them: false",
            id="quoted-boolean",
        ),
        pytest.param(
            "cluster:\n  instance_groups:\n    - {name: c, role: controller, "
            "instance_type: ml.m5.xlarge, instance_count: 1, threads_per_core: '2'}",
            "cluster.instance_groups[0].threads_per_core",
            "'2': input should be 1 or 2",
            "the quotes make it text; write it without them: 2",
            id="quoted-number-literal",
        ),
        pytest.param(
            "storage:\n  lustre:\n    storage_capacity_gib: on",
            "storage.lustre.storage_capacity_gib",
            "on: input should be a valid integer",
            "YAML read on as the boolean true; write a whole number",
            id="bool-for-int",
        ),
        pytest.param(
            "account: !!int 111122223333",
            "account",
            "111122223333: input should be a valid string",
            "the tag !!int makes 111122223333 a number; remove the tag",
            id="explicit-tag",
        ),
        pytest.param(
            "storage:\n  lustre:\n    storage_capacity_gib: !!str 2400",
            "storage.lustre.storage_capacity_gib",
            "'2400': input should be a valid integer",
            "the tag !!str makes 2400 text; remove the tag",
            id="explicit-str-tag",
        ),
        pytest.param(
            "tags: {1: x}",
            "tags[1]",
            "1: keys should be strings",
            'YAML read the key 1 as the number 1; quote it: "1"',
            id="number-as-tag-key",
        ),
        pytest.param(
            "yes: x",
            "[yes]",
            "yes: keys should be strings",
            "YAML read the key yes as the boolean true; a key here is a name such as `region`",
            id="boolean-as-key",
        ),
        pytest.param(
            "~: x",
            "[~]",
            "~: keys should be strings",
            "YAML read the key ~ as null (no value); a key here is a name such as `region`",
            id="null-as-key",
        ),
    ],
)
def test_a_value_yaml_converted_says_so_and_how_to_keep_it(
    tmp_path: Path, text: str, path: str, message: str, hint: str
) -> None:
    """The message quotes what was written; the hint says what YAML made of it and the fix."""
    f = _only(tmp_path, HEAD + text + "\n")
    assert (f.level, f.path, f.message, f.hint) == (Level.ERROR, path, message, hint)
    assert f.line is not None and f.line > HEAD_LINES


def test_the_issue_account_example_renders_as_one_line(tmp_path: Path) -> None:
    """Issue #7's example, rendered as the CLI prints it."""
    f = _only(tmp_path, HEAD + "account: 111122223333\n")
    assert f.render("env.yaml") == (
        "env.yaml:4 account: 111122223333: input should be a valid string. "
        'Hint: YAML read 111122223333 as the number 111122223333; quote it: "111122223333".'
    )


def test_quoted_values_load(tmp_path: Path) -> None:
    """And the fix works: the same values quoted are accepted."""
    path = tmp_path / "env.yaml"
    path.write_text(
        HEAD + 'account: "012345678901"\n'
        "tags: {owner: 'yes', created: '2024-01-01'}\n"
        + LUSTRE.format('"7:03:00"').replace("storage:\n", "storage:\n", 1)
    )
    config = load_environment(path).config
    assert config.account == "012345678901"
    assert config.tags == {"owner": "yes", "created": "2024-01-01"}
    assert config.storage.lustre.weekly_maintenance_start_time == "7:03:00"


# --- empty sections -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "message", "hint"),
    [
        pytest.param(
            "storage:",
            "storage",
            "is empty",
            "remove 'storage:', or add keys under it, such as bucket, lustre",
            id="section",
        ),
        pytest.param(
            "storage:\n  lustre:",
            "storage.lustre",
            "is empty",
            "remove 'lustre:', or add keys under it, such as existing, storage_capacity_gib, "
            "throughput_per_unit_storage, data_compression",
            id="nested-section",
        ),
        pytest.param(
            "tags:",
            "tags",
            "is empty",
            "remove 'tags:', or add `key: value` lines under it",
            id="mapping",
        ),
        pytest.param(
            "cluster:\n  instance_groups:",
            "cluster.instance_groups",
            "is empty",
            "remove 'instance_groups:', or add items under it, each on a line `- ...`",
            id="list",
        ),
        pytest.param(
            "cluster:\n  instance_groups:\n    -",
            "cluster.instance_groups[0]",
            "is empty",
            "remove the empty `-` item, or add keys under it, such as name, role, "
            "instance_type, instance_count",
            id="list-item",
        ),
        pytest.param(
            "storage:\n  lustre:\n    storage_capacity_gib:",
            "storage.lustre.storage_capacity_gib",
            "has no value",
            "remove the key to use the default (1200)",
            id="number-with-default",
        ),
        pytest.param(
            "orchestrator:",
            "orchestrator",
            "has no value",
            "remove the key to use the default (slurm)",
            id="choice-with-default",
        ),
        pytest.param(
            "network:\n  vpc:\n    cidr:",
            "network.vpc.cidr",
            "has no value",
            "a network address such as 10.0.0.0/16",
            id="x-hint",
        ),
    ],
)
def test_an_empty_key_says_so(
    tmp_path: Path, text: str, path: str, message: str, hint: str
) -> None:
    """`storage:` with nothing under it is YAML null: "is empty", not "valid dictionary or
    instance of StorageConfig"."""
    f = _only(tmp_path, HEAD + text + "\n")
    assert (f.path, f.message, f.hint) == (path, message, hint)
    assert f.line == HEAD_LINES + text.count("\n") + 1


def test_an_empty_required_value_keeps_its_hint(tmp_path: Path) -> None:
    f = _only(tmp_path, "name:\nregion: us-west-2\navailability_zone_id: usw2-az2\n")
    assert (f.path, f.message, f.line) == ("name", "has no value", 1)
    assert f.hint == "3-24 lowercase letters, digits and hyphens, starting with a letter"


# --- encodings ------------------------------------------------------------------------------------

LATIN1 = HEAD + "tags:\n  team: caf\xe9\n"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            codecs.BOM_UTF16_LE + HEAD.encode("utf-16-le"),
            "the file is UTF-16 text, not UTF-8",
            id="utf16-le-bom",
        ),
        pytest.param(
            codecs.BOM_UTF16_BE + HEAD.encode("utf-16-be"),
            "the file is UTF-16 text, not UTF-8",
            id="utf16-be-bom",
        ),
        pytest.param(HEAD.encode("utf-16"), "the file is UTF-16 text, not UTF-8", id="utf16"),
        pytest.param(
            HEAD.encode("utf-16-le"),
            "the file looks like UTF-16 (little-endian) text (no byte-order mark), not UTF-8",
            id="utf16-le",
        ),
        pytest.param(
            HEAD.encode("utf-16-be"),
            "the file looks like UTF-16 (big-endian) text (no byte-order mark), not UTF-8",
            id="utf16-be",
        ),
        pytest.param(HEAD.encode("utf-32"), "the file is UTF-32 text, not UTF-8", id="utf32"),
        pytest.param(
            HEAD.encode("utf-32-le"),
            "the file looks like UTF-32 (little-endian) text (no byte-order mark), not UTF-8",
            id="utf32-le",
        ),
        pytest.param(
            HEAD.encode("utf-32-be"),
            "the file looks like UTF-32 (big-endian) text (no byte-order mark), not UTF-8",
            id="utf32-be",
        ),
    ],
)
def test_a_wide_encoding_is_named(tmp_path: Path, data: bytes, message: str) -> None:
    """A file saved as "Unicode" by Windows tools: say which encoding, and to save as UTF-8."""
    path = tmp_path / "env.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (f,) = err.value.findings
    assert (f.path, f.message, f.line) == ("(file)", message, None)
    assert f.hint == "save it as UTF-8 (in most editors: Save As, Encoding: UTF-8)"


@pytest.mark.parametrize(
    ("data", "message", "hint"),
    [
        pytest.param(
            LATIN1.encode("latin-1"),
            "byte 0xe9 on line 5, column 12 is not UTF-8 text",
            "save the file as UTF-8; in Latin-1 / Windows-1252 it is 'é'",
            id="latin1",
        ),
        pytest.param(
            (HEAD + "tags: {q: \u201cx\u201d}\n").encode("cp1252"),
            "byte 0x93 on line 4, column 11 is not UTF-8 text",
            "save the file as UTF-8; in Latin-1 / Windows-1252 it is '\u201c'",
            id="cp1252-smart-quote",
        ),
        pytest.param(
            "# caf\u00e9 \u2713\n".encode() + b"name: \x81\n",
            "byte 0x81 on line 2, column 7 is not UTF-8 text",
            "save the file as UTF-8",
            id="after-real-utf8",
        ),
    ],
)
def test_a_legacy_byte_is_located(tmp_path: Path, data: bytes, message: str, hint: str) -> None:
    """Latin-1 / Windows-1252: the first byte that is not UTF-8, by line and column (in
    characters, counting the UTF-8 before it correctly)."""
    path = tmp_path / "env.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (f,) = err.value.findings
    assert (f.path, f.message, f.hint) == ("(file)", message, hint)


def test_utf8_bom_and_crlf_keep_their_lines(tmp_path: Path) -> None:
    """A file saved on Windows as UTF-8 (BOM, CRLF) loads, and errors keep their lines."""
    text = HEAD + "account: 111122223333\ntags: {team: caf\u00e9}\n"
    path = tmp_path / "env.yaml"
    path.write_bytes(codecs.BOM_UTF8 + text.replace("\n", "\r\n").encode())
    (f,) = _errors_at(path)
    assert (f.path, f.line) == ("account", 4)
    path.write_bytes(codecs.BOM_UTF8 + HEAD.replace("\n", "\r\n").encode())
    assert load_environment(path).config.region == "us-west-2"


def _errors_at(path: Path) -> list[Finding]:
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    return err.value.findings


# --- no pydantic internals in any message ---------------------------------------------------------

# Every model class of the schema module, read at test time so new sections are covered.
_MODEL_NAMES = sorted(
    name
    for name, obj in vars(schema_module).items()
    if isinstance(obj, type) and issubclass(obj, BaseModel) and obj is not BaseModel
)
_JARGON = re.compile(
    r"instance of|\[type=|input_value|Union\[|Optional\[|Literal\[|Annotated\[|pydantic"
    r"|NoneType|function-after|function-before|\bdict\[|\blist\[|class_name|"
    + "|".join(rf"\b{re.escape(n)}\b" for n in _MODEL_NAMES)
)

# One mistake each, covering the error types the schema can produce.
MISTAKES: list[tuple[str, str]] = [
    ("nmae: x", "nmae"),  # extra_forbidden
    ("storage: 5", "storage"),  # model_type
    ("storage: [a]", "storage"),  # model_type, list
    ("storage:", "storage"),  # model_type, null
    ("network:\n  vpc: 5", "network.vpc"),  # model_type through Optional
    ("network:\n  vpc: [1]", "network.vpc"),
    ("trainer:\n  job:\n    elastic: 5", "trainer.job.elastic"),
    ("trainer:\n  job:\n    elastic: {min_replicas: 1}", "trainer.job.elastic.max_replicas"),
    ("tags: [a]", "tags"),  # dict_type
    ("tags:", "tags"),
    ("tags: {a: [1]}", "tags.a"),  # string_type, list
    ("account: 5", "account"),  # string_type through Optional
    ("account: [5]", "account"),
    ("account: 12345", "account"),  # string_pattern_mismatch
    ("account: {a: 1}", "account"),
    ("orchestrator: k8s", "orchestrator"),  # literal_error
    ("orchestrator: [slurm]", "orchestrator"),
    ("storage:\n  lustre:\n    storage_capacity_gib: lots", "storage.lustre.storage_capacity_gib"),
    ("storage:\n  lustre:\n    storage_capacity_gib: 0", "storage.lustre.storage_capacity_gib"),
    ("storage:\n  lustre:\n    storage_capacity_gib: 1.5", "storage.lustre.storage_capacity_gib"),
    ("storage:\n  lustre:\n    automatic_backup_retention_days: 91", "storage.lustre"),
    ("storage:\n  lustre:\n    metadata: {iops: x}", "storage.lustre.metadata.iops"),
    ("storage:\n  lustre:\n    data_repository_associations: x", "storage.lustre"),
    ("storage:\n  lustre:\n    data_repository_associations: [5]", "storage.lustre"),
    ("storage:\n  lustre:\n    existing: {file_system_id: x}", "storage.lustre.existing"),
    ("monitoring:\n  enabled: maybe", "monitoring.enabled"),  # bool_type
    ("monitoring:\n  enabled: [true]", "monitoring.enabled"),
    ("network:\n  vpc:\n    cidr: 10.0.0.0/33", "network.vpc.cidr"),  # ip errors
    ("network:\n  vpc:\n    cidr: [10.0.0.0/16]", "network.vpc.cidr"),
    ("network:\n  vpc:\n    cidr: 10", "network.vpc.cidr"),
    ("network:\n  existing_vpc: {vpc_id: vpc-1}", "network.existing_vpc"),
    ("cluster:\n  instance_groups: 5", "cluster.instance_groups"),  # list_type
    ("cluster:\n  instance_groups: {a: 1}", "cluster.instance_groups"),
    ("cluster:\n  instance_groups: [5]", "cluster.instance_groups[0]"),
    ("cluster:\n  instance_groups: [{name: a}]", "cluster.instance_groups[0]"),
    ("studio:\n  users: [Bad_User!]", "studio.users[0]"),
    ("studio:\n  users: alice", "studio.users"),
    ("validation:\n  suppress: [1]", "validation.suppress[0]"),
    ("1: x", "[1]"),  # invalid_key
    ("tags: {1: x}", "tags[1]"),
    ("trainer:\n  job:\n    elastic:\n      replica_discrete_values: {a: 1}", "trainer.job"),
]


@pytest.mark.parametrize(
    ("text", "path"), [pytest.param(t, p, id=p + ":" + t) for t, p in MISTAKES]
)
def test_no_message_leaks_pydantic_internals(tmp_path: Path, text: str, path: str) -> None:
    """Whatever the mistake, the rendered lines name the key in the file's terms, without class
    names, union member tags or pydantic's error codes."""
    findings = _errors(tmp_path, HEAD + text + "\n")
    for f in findings:
        rendered = f.render("env.yaml")
        assert not _JARGON.search(rendered), rendered
        assert f.line is not None, rendered
    assert findings[0].path.startswith(path), [f.path for f in findings]


def test_every_schema_model_is_in_the_jargon_list() -> None:
    """The jargon test knows every model class (a new section is covered without edits)."""
    assert {"EnvironmentConfig", "StorageConfig", "LustreConfig", "NewVpcConfig"} <= set(
        _MODEL_NAMES
    )


# --- unions: pydantic's member tags never reach a path --------------------------------------------


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    size: int = Field(ge=1)


class _WithUnions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    either: int | str = 0
    several: list[int] | dict[str, int] | None = None
    nested: _Inner | int = 0
    kind: Literal["a", "b"] | int = 0


def _union_findings(data: dict[str, Any]) -> list[Finding]:
    with pytest.raises(ValidationError) as err:
        _WithUnions.model_validate(data)
    return schema_findings(_WithUnions, err.value.errors())


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        pytest.param(
            {"either": [1]},
            "either",
            "a list: input should be a valid integer or a valid string",
            id="scalar-members",
        ),
        pytest.param(
            {"several": 5},
            "several",
            "5: input should be a valid list or a valid dictionary (a mapping of keys)",
            id="collection-members",
        ),
        pytest.param(
            {"several": [1, "x"]}, "several[1]", "'x': input should be a valid integer", id="item"
        ),
        pytest.param(
            {"nested": {"size": 0}},
            "nested.size",
            "0: input should be greater than or equal to 1",
            id="model-member-wins",
        ),
        pytest.param(
            {"nested": {"size": 1, "sise": 1}}, "nested.sise", "unknown key", id="model-extra"
        ),
        pytest.param({"either": None}, "either", "has no value", id="null"),
    ],
)
def test_union_errors_read_as_one_finding_at_the_real_path(
    data: dict[str, Any], path: str, message: str
) -> None:
    """pydantic reports a union once per member with its tag in the path (`either.int`,
    `nested._Inner.size`); a user sees one finding at `either`, or the member that got further."""
    findings = _union_findings(data)
    assert [(f.path, f.message) for f in findings][:1] == [(path, message)]
    assert len({f.path for f in findings}) == len(findings)
    for f in findings:
        assert "_Inner" not in f.render("x") and "[int]" not in f.path
