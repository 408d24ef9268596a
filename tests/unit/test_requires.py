"""`requires: {hyperpod_kit: RANGE}`: a file says which hyperpod-kit it is written for. Outside the
range it is refused in one line (file, line, range, this version, how to upgrade), exit 2, before
any other finding; a range that is not one is an error at its line. Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from hyperpod_kit import __version__
from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.jsonschema import environment_schema
from tests.conftest import default_data

HEAD = "name: hyperpod-dev\nregion: us-west-2\navailability_zone_id: usw2-az2\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "env.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_toolkit_in_range_reads_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = write(tmp_path, f'requires:\n  hyperpod_kit: ">={__version__},<99"\n{HEAD}')
    code, _, err = run(["validate", str(env)], capsys)
    assert code == 0, err
    assert f"{env}: valid" in err


def test_a_newer_file_is_refused_in_one_line_before_any_other_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file also uses a key this version does not know, misses a required key and holds a
    bad value: only the refusal is said, at the range's line."""
    env = write(
        tmp_path,
        "# written for a later hyperpod-kit\n"
        "name: hyperpod-dev\n"
        "requires:\n"
        '  hyperpod_kit: ">=99.1, <100"\n'
        "region: 42\n"
        "cluster:\n"
        "  a_key_of_the_future: true\n",
    )
    code, out, err = run(["validate", str(env)], capsys)
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"{env}:4 requires.hyperpod_kit: this file needs hyperpod-kit >=99.1, <100, and this is "
        f"hyperpod-kit {__version__}. Hint: upgrade hyperpod-kit into that range: pip install "
        "'hyperpod-kit>=99.1, <100' (in a checkout: check out a release in that range and run "
        "make setup); until then this file may use keys this version does not know."
    ]


def test_an_older_range_says_install_not_upgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = write(tmp_path, f'{HEAD}requires: {{hyperpod_kit: "<{__version__}"}}\n')
    code, _, err = run(["validate", str(env)], capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{env}:4 requires.hyperpod_kit: this file needs hyperpod-kit <")
    hint = f"Hint: install a hyperpod-kit in that range: pip install 'hyperpod-kit<{__version__}'"
    assert hint in line
    assert "upgrade" not in line


def test_json_format_has_the_refusal_as_one_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = write(tmp_path, f'requires:\n  hyperpod_kit: "~=99.0"\n{HEAD}')
    code, out, _ = run(["validate", str(env), "--format", "json"], capsys)
    assert code == 2
    (finding,) = json.loads(out)
    assert finding["line"] == 2
    assert finding["path"] == "requires.hyperpod_kit"
    assert finding["level"] == "error"
    assert "~=99.0" in finding["message"] and __version__ in finding["message"]
    assert "pip install 'hyperpod-kit~=99.0'" in finding["hint"]


@pytest.mark.parametrize(
    ("requires", "expected"),
    [
        (
            '  hyperpod_kit: "banana"',
            (2, "requires.hyperpod_kit", "'banana' is not a version range"),
        ),
        ('  hyperpod_kit: ">=0.1 <0.2"', (2, "requires.hyperpod_kit", "is not a version range")),
        ('  hyperpod_kit: ""', (2, "requires.hyperpod_kit", "'' is not a version range")),
        ("  hyperpod_kit: 0.1", (2, "requires.hyperpod_kit", "YAML read 0.1 as a number")),
        ("  hyperpod_kit:", (2, "requires.hyperpod_kit", "has no value")),
        ('  hyperpod_kit: ">=0.1\\u001b"', (2, "requires.hyperpod_kit", "control character")),
        (
            "  hyperpod_kit: '" + ">=0.1," * 40 + "'",
            (2, "requires.hyperpod_kit", "longer than 200"),
        ),
        ('  hyperpod-kit: ">=0.1"', (2, "requires.hyperpod-kit", "unknown key")),
        ('  aws_cdk_lib: ">=2"', (2, "requires.aws_cdk_lib", "unknown key")),
        ("  - hyperpod_kit", (1, "requires", "should be a mapping")),
        ("", (1, "requires", "is empty")),
    ],
)
def test_a_bad_requires_is_an_error_at_its_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    requires: str,
    expected: tuple[int, str, str],
) -> None:
    line, path, said = expected
    env = write(tmp_path, f"requires:\n{requires}\n{HEAD}")
    code, _, err = run(["validate", str(env)], capsys)
    assert code == 2
    (first,) = err.splitlines()
    assert first.startswith(f"{env}:{line} {path}: "), first
    assert said in first
    assert "Hint: " in first
    assert "Traceback" not in err


def test_a_did_you_mean_for_a_misspelt_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = write(tmp_path, f'requires:\n  hyperpod-kit: ">=0.1"\n{HEAD}')
    _, _, err = run(["validate", str(env)], capsys)
    assert "Hint: did you mean 'hyperpod_kit'?" in err


def test_each_file_of_a_chain_is_checked_and_none_inherits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A base written for a newer hyperpod-kit is refused at its own line; a base's range does
    not pass to the file on top (which may state its own)."""
    write(tmp_path, f'requires:\n  hyperpod_kit: ">=99"\n{HEAD}', "base.yaml")
    top = write(tmp_path, "extends: base.yaml\nname: team-dev\n", "dev.yaml")
    code, _, err = run(["validate", str(top)], capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{tmp_path / 'base.yaml'}:2 requires.hyperpod_kit: this file needs ")

    write(tmp_path, f'requires:\n  hyperpod_kit: ">=0.1"\n{HEAD}', "base.yaml")
    write(tmp_path, 'extends: base.yaml\nrequires: {hyperpod_kit: "<99"}\n', "dev.yaml")
    code, _, err = run(["validate", str(top)], capsys)
    assert code == 0, err


def test_the_top_file_is_checked_before_its_base_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newer file may name a base this version cannot read: the range is said first."""
    top = write(tmp_path, 'extends: missing.yaml\nrequires: {hyperpod_kit: ">=99"}\n')
    code, _, err = run(["validate", str(top)], capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{top}:2 requires.hyperpod_kit: this file needs hyperpod-kit >=99")


def test_the_json_schema_knows_requires() -> None:
    schema = environment_schema()
    data = default_data()
    jsonschema.validate({**data, "requires": {"hyperpod_kit": ">=0.1,<0.2"}}, schema)
    for bad in ({}, {"hyperpod_kit": ""}, {"hyperpod_kit": 0.1}, {"other": ">=1"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**data, "requires": bad}, schema)


def test_requires_is_a_directive_not_a_field(tmp_path: Path) -> None:
    """A directive, not a field: the config the stacks get is the same with or without it."""
    from hyperpod_kit.config.environment import load_environment

    plain = write(tmp_path, yaml.safe_dump(default_data()), "plain.yaml")
    stated = write(
        tmp_path,
        yaml.safe_dump({"requires": {"hyperpod_kit": f"=={__version__}"}, **default_data()}),
        "stated.yaml",
    )
    assert load_environment(plain).config == load_environment(stated).config
