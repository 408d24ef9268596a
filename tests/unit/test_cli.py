"""`hyperpod-kit` in-process: exit codes, what goes to stdout/stderr, and the JSON it prints.

No CDK synth here: these are the quick checks of the command line around the loader.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.validators import REGISTRY
from tests.conftest import REPO, WriteEnv

DEFAULT = REPO / "environments" / "default.yaml"
ENVIRONMENTS = sorted([*REPO.glob("environments/*.yaml"), *REPO.glob("environments/*.yml")])
BAD = REPO / "tests" / "data" / "bad"
JSON_KEYS = {"file", "line", "level", "path", "message", "hint", "check"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def exit_code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    """Run a command line that argparse must reject; return SystemExit's code and stderr."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    _, err = capsys.readouterr()
    return exc.value.code, err


def schema(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = run(["schema"], capsys)
    assert code == 0
    loaded: dict[str, Any] = json.loads(out)
    return loaded


# --- validate ----------------------------------------------------------------------------------


def test_validate_default(capsys: pytest.CaptureFixture[str]) -> None:
    """The embedded default is valid: exit 0, a `valid` summary on stderr, nothing on stdout."""
    code, out, err = run(["validate", str(DEFAULT)], capsys)
    assert code == 0, err
    assert out == ""
    assert f"{DEFAULT}: valid (" in err
    assert "Traceback" not in err


def test_validate_without_file_uses_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hyperpod-kit validate` alone reads environments/default.yaml from the current folder."""
    monkeypatch.chdir(REPO)
    code, _, err = run(["validate"], capsys)
    assert code == 0, err
    assert "environments/default.yaml: valid" in err


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`--format json` prints only a JSON list of finding rows on stdout, for tools."""
    code, out, err = run(["validate", str(DEFAULT), "--format", "json"], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and rows, "the default has at least the throughput info"
    for row in rows:
        assert set(row) == JSON_KEYS
        assert row["file"] == str(DEFAULT)
        assert row["level"] in {"info", "warning"}
        assert row["line"] is None or (isinstance(row["line"], int) and row["line"] > 0)
    assert any(r["check"] == "lustre-throughput-tier" for r in rows)
    assert "valid (" not in err, "the text summary is not mixed into JSON mode"


def test_validate_json_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad file in JSON mode still exits 2 and gives the error as a row with path and line."""
    file = BAD / "lustre-capacity.yaml"
    code, out, _ = run(["validate", str(file), "--format", "json"], capsys)
    assert code == 2
    rows = json.loads(out)
    errors = [r for r in rows if r["level"] == "error"]
    assert errors[0] == rows[0], "worst first"
    assert errors[0]["path"] == "storage.lustre.storage_capacity_gib"
    assert errors[0]["line"] == 7
    assert errors[0]["hint"] == "use 2400"
    assert errors[0]["check"] == "lustre-capacity"


def test_validate_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    """`--quiet` prints errors only: a valid file with infos prints nothing at all."""
    code, out, err = run(["validate", str(DEFAULT), "--quiet"], capsys)
    assert code == 0
    assert out == ""
    assert err == ""


def test_validate_quiet_still_shows_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """`--quiet` hides infos, never the error that makes the exit code 2."""
    file = BAD / "lustre-capacity.yaml"
    code, _, err = run(["validate", str(file), "-q"], capsys)
    assert code == 2
    assert err.startswith(f"{file}:7 storage.lustre.storage_capacity_gib: 2000 is not 1200")


def test_validate_suppress_hides_info(capsys: pytest.CaptureFixture[str]) -> None:
    """`--suppress NAME` hides that check's infos, and the summary counts what is shown."""
    _, _, before = run(["validate", str(DEFAULT)], capsys)
    assert "info: storage.lustre.throughput_per_unit_storage" in before
    code, _, err = run(
        ["validate", str(DEFAULT), "--suppress", "lustre-throughput-tier",
         "--suppress", "enroot-pyxis-source"],
        capsys,
    )  # fmt: skip
    assert code == 0
    assert "storage.lustre.throughput_per_unit_storage" not in err
    assert "aggregate throughput" not in err
    assert "valid (0 warnings, 0 infos)" in err


def test_validate_suppress_in_file(write_env: WriteEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """`validation.suppress` in the file does what `--suppress` does."""
    file = write_env({"validation": {"suppress": ["lustre-throughput-tier"]}})
    code, _, err = run(["validate", str(file)], capsys)
    assert code == 0, err
    assert "aggregate throughput" not in err


def test_suppress_cannot_hide_an_error(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Errors are not suppressible: they mean AWS would reject the stack."""
    file = write_env({"storage": {"lustre": {"throughput_per_unit_storage": 200}}})
    code, _, err = run(["validate", str(file), "--suppress", "lustre-throughput-tier"], capsys)
    assert code == 2
    assert "storage.lustre.throughput_per_unit_storage: 200 MB/s/TiB" in err


def test_unknown_suppress_name_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt check name is a warning that lists the real names, not silently ignored."""
    code, _, err = run(["validate", str(DEFAULT), "--suppress", "lustre-throughput"], capsys)
    assert code == 0
    line = next(x for x in err.splitlines() if "validation.suppress" in x)
    assert "warning: validation.suppress: no check is named 'lustre-throughput'" in line
    assert "Hint: names:" in line
    for name in REGISTRY:
        assert name in line


def test_validate_bad_file_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    """In-process, a bad file returns 2 (no exception) with `FILE:LINE path: message. Hint:`."""
    file = BAD / "az-of-another-region.yaml"
    code, out, err = run(["validate", str(file)], capsys)
    assert code == 2
    assert out == ""
    first = err.splitlines()[0]
    assert re.match(rf"^{re.escape(str(file))}:4 availability_zone_id: .+ Hint: .+\.$", first)
    assert "valid (" not in err


# --- schema ------------------------------------------------------------------------------------


def test_schema_top_level(capsys: pytest.CaptureFixture[str]) -> None:
    """`schema` prints a closed JSON Schema with the required keys, usable by editors."""
    s = schema(capsys)
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["type"] == "object"
    assert s["additionalProperties"] is False
    assert {"name", "region", "availability_zone_id", "network", "storage"} <= set(s["properties"])
    assert {"name", "region", "availability_zone_id"} <= set(s["required"])


def test_schema_every_section_is_closed(capsys: pytest.CaptureFixture[str]) -> None:
    """Every nested object forbids unknown keys too, so an editor flags a typo anywhere."""
    defs = schema(capsys)["$defs"]
    assert {"NetworkConfig", "NewVpcConfig", "LustreConfig"} <= set(defs)
    for name, definition in defs.items():
        if definition.get("type") == "object":
            assert definition.get("additionalProperties") is False, name


def test_schema_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`schema -o FILE` writes exactly what `schema` prints, and prints nothing."""
    printed = run(["schema"], capsys)[1]
    target = tmp_path / "environment.schema.json"
    code, out, _ = run(["schema", "-o", str(target)], capsys)
    assert code == 0
    assert out == ""
    assert target.read_text() == printed


@pytest.mark.parametrize("file", ENVIRONMENTS, ids=lambda p: p.name)
def test_examples_match_json_schema(file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each example environment validates against the published schema (CIDRs are strings)."""
    data = yaml.safe_load(file.read_text())
    validator = jsonschema.Draft202012Validator(schema(capsys))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []


@pytest.mark.parametrize(
    "name",
    [
        "unknown-top-level-key.yaml",
        "unknown-nested-key.yaml",
        "missing-region.yaml",
        "string-for-int.yaml",
        "list-for-mapping.yaml",
        "bool-for-cidr.yaml",
        "bool-for-existing-vpc-cidr.yaml",
        "lustre-throughput-tier.yaml",
    ],
)
def test_json_schema_rejects_schema_mistakes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON Schema that editors use rejects what phase one of validation is meant to reject."""
    data = yaml.safe_load((BAD / name).read_text())
    validator = jsonschema.Draft202012Validator(schema(capsys))
    assert list(validator.iter_errors(data)), f"{name} passes the JSON Schema"


# --- check, deploy, diff, destroy --------------------------------------------------------------


def test_check_without_assembly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a folder with no manifest.json is bad input (2) with a hint, not a crash."""
    (tmp_path / "template.json").write_text("{}")
    code, _, err = run(["check", str(tmp_path)], capsys)
    assert code == 2
    assert f"{tmp_path}: no cloud assembly here." in err
    assert "Hint: run `hyperpod-kit synth`" in err


def test_check_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a folder that does not exist answers the same way."""
    code, _, err = run(["check", str(tmp_path / "cdk.out")], capsys)
    assert code == 2
    assert "Hint:" in err


@pytest.mark.parametrize("command", ["deploy", "diff", "destroy"])
def test_cdk_cli_missing(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without node_modules/.bin/cdk the CDK commands exit 2 with a hint, running nothing."""
    monkeypatch.setattr("hyperpod_kit.cli.cdk.cdk_binary", lambda: None)

    def no_subprocess(*args: object, **kwargs: object) -> int:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr("hyperpod_kit.cli.cdk.subprocess.call", no_subprocess)
    code, _, err = run([command, str(DEFAULT)], capsys)
    assert code == 2
    assert "the CDK CLI is not installed. Hint: run `make setup`" in err
    assert "Traceback" not in err


def test_deploy_validates_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`deploy` of a bad file stops at validation: the CDK CLI is not even looked for."""

    def no_cdk() -> None:
        raise AssertionError("looked for the CDK CLI before validating")

    monkeypatch.setattr("hyperpod_kit.cli.cdk.cdk_binary", no_cdk)
    file = BAD / "lustre-capacity.yaml"
    code, _, err = run(["deploy", str(file)], capsys)
    assert code == 2
    assert err.startswith(f"{file}:7 storage.lustre.storage_capacity_gib:")


# --- the command line itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        [],
        ["validate", "--format", "xml"],
        ["validate", "--no-such-flag"],
        ["schema", "extra-argument"],
    ],
    ids=["unknown-command", "no-command", "bad-choice", "unknown-flag", "extra-argument"],
)
def test_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong command line exits 2 with argparse's usage message and no traceback."""
    code, err = exit_code(argv, capsys)
    assert code == 2
    assert "usage: hyperpod-kit" in err
    assert "Traceback" not in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` prints the package version and exits 0."""
    from hyperpod_kit import __version__

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"hyperpod-kit {__version__}"


def test_deploy_runs_the_pinned_cli_with_the_file_and_this_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy passes the file by absolute path, every stack, and this Python for app.py."""
    record = tmp_path / "args.txt"
    fake = tmp_path / "cdk"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setattr("hyperpod_kit.cli.cdk.cdk_binary", lambda: fake)
    assert cli.main(["deploy", str(DEFAULT), "--", "--profile", "dev"]) == 0
    args = record.read_text().splitlines()
    assert args[:3] == ["deploy", "--all", "-c"]
    assert args[3] == f"environment={DEFAULT.resolve()}"
    assert f"{sys.executable} " in args[args.index("--app") + 1]
    assert args[-2:] == ["--profile", "dev"]
    assert "--require-approval" in args
