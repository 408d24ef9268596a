"""`hyperpod-kit` in-process: exit codes, what goes to stdout/stderr, and the JSON it prints.

No CDK synth here: these are the quick checks of the command line around the loader.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.validators import REGISTRY
from tests.conftest import REPO, WriteEnv, merge

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


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_validate_quiet_hides_warnings_of_a_file_with_an_error(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with an error also has warnings and infos (this one: enroot, throughput): with
    `-q` only the error is printed, in text and in JSON; without it, all three."""
    file = BAD / "lustre-capacity.yaml"
    code, _, loud = run(["validate", str(file)], capsys)
    assert code == 2 and "warning: " in loud and "info: " in loud
    code, out, err = run(["validate", str(file), "-q", "--format", fmt], capsys)
    assert code == 2
    if fmt == "json":
        assert [f["level"] for f in json.loads(out)] == ["error"]
    else:
        assert err.splitlines() == [
            f"{file}:7 storage.lustre.storage_capacity_gib: 2000 is not 1200 or a multiple of "
            "2400 (PERSISTENT_2). Hint: use 2400."
        ]


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
    # required unless the file extends a base, which may set them (docs/environments.md)
    assert s["if"] == {"required": ["extends"]}
    assert {"name", "region", "availability_zone_id"} <= set(s["else"]["required"])


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


def test_check_rehearse_refuses_an_assembly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check ASSEMBLY --rehearse FILE` is one line, exit 2, nothing written: the rehearsal
    synthesizes FILE itself, and an assembly it would silently ignore may be of another version
    of the file."""
    (tmp_path / "cdk.out").mkdir()
    before = sorted(tmp_path.rglob("*"))
    code, out, err = run(["check", "cdk.out", "--rehearse", str(DEFAULT)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("cdk.out: check --rehearse synthesizes ")
    assert f"Hint: `hyperpod-kit check --rehearse {DEFAULT}`" in err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.usefixtures("aws_credentials")
@pytest.mark.parametrize("command", ["deploy", "diff", "destroy"])
def test_cdk_cli_missing(
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without Node.js on PATH the CDK commands exit 2 with one line and a hint, before anything
    is synthesized or run (tests/integration/test_cdk_cli_cache.py: the rest of the lookup)."""
    empty = tmp_path / "no-node"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    def no_subprocess(*args: object, **kwargs: object) -> int:
        raise AssertionError(f"ran {args}")

    def no_synth(*args: object, **kwargs: object) -> None:
        raise AssertionError("synthesized before looking for the CDK CLI")

    monkeypatch.setattr("hyperpod_kit.cli.cdk.subprocess.call", no_subprocess)
    monkeypatch.setattr("hyperpod_kit.cli.synth.gated_assembly", no_synth)
    code, _, err = run([command, str(DEFAULT)], capsys)
    assert code == 2, err
    last = err.splitlines()[-1]
    assert last.startswith("the CDK CLI needs Node.js and npm on PATH: `node` was not found")
    assert "Hint: install Node.js 20 or newer" in last
    assert "Traceback" not in err


def test_deploy_validates_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`deploy` of a bad file stops at validation: the CDK CLI is not even looked for."""

    def no_cdk(*args: object) -> None:
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
    """`--version` prints the package version first (then its components, one a line: see
    tests/unit/test_versions.py) and exits 0."""
    from hyperpod_kit import __version__

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"hyperpod-kit {__version__}"


# --- the gated path to the CDK CLI --------------------------------------------------------------


def no_aws(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """A clean environment for credentials: no AWS_* variable, HOME an empty folder; only the
    instance-metadata lookup is turned off (on a CI machine with an instance role it would find
    one)."""
    import os

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made-up credentials in the shared files of an empty HOME: profiles `default` and `dev`
    (nothing here calls AWS: the CDK CLI is a fake)."""
    home = tmp_path / "aws-home"
    no_aws(monkeypatch, home)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(
        "".join(
            f"[{p}]\naws_access_key_id = AKIAEXAMPLE{i}\naws_secret_access_key = example\n"
            for i, p in enumerate(("default", "dev"))
        )
    )


def fake_cdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, exit_code: int = 0) -> Path:
    """A `cdk` that records its arguments, and the assembly it was given, in tmp_path/calls."""
    calls = tmp_path / "calls"
    calls.mkdir()
    fake = tmp_path / "cdk"
    fake.write_text(
        "#!/bin/sh\n"
        f'n=$(ls {calls} | wc -l); printf "%s\\n" "$@" > {calls}/$n.args\n'
        f'while [ "$#" -gt 0 ]; do if [ "$1" = --app ]; then ls -A "$2" > {calls}/$n.app; fi; '
        "shift; done\n"
        f"exit {exit_code}\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr("hyperpod_kit.cli.cdk.cdk_binary", lambda *args: fake)
    return calls


def recorded(calls: Path) -> list[list[str]]:
    return [p.read_text().splitlines() for p in sorted(calls.glob("*.args"))]


@pytest.mark.usefixtures("aws_credentials")
def test_deploy_hands_the_gated_assembly_to_the_pinned_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """deploy synthesizes and gates, then `cdk deploy --app <that assembly>`: no second synth.

    Options after the file go to the CDK CLI (here --profile), and the assembly, ours, is gone
    afterwards.
    """
    calls = fake_cdk(tmp_path, monkeypatch)
    assert cli.main(["deploy", str(DEFAULT), "--profile", "dev"]) == 0
    (args,) = recorded(calls)
    assert args[:2] == ["deploy", "--app"]
    assembly = Path(args[2])
    assert assembly.is_absolute() and not assembly.exists(), "the staging assembly is removed"
    listing = (calls / "0.app").read_text().split()
    assert "manifest.json" in listing and ".hyperpod-kit" in listing
    assert {"hyperpod-dev-network.template.json", "hyperpod-dev-storage.template.json"} <= set(
        listing
    )
    assert "--all" in args
    assert args[args.index("--concurrency") + 1] == "4"
    assert args[args.index("--require-approval") + 1] == "broadening"
    assert args[-2:] == ["--profile", "dev"]
    assert not any(a.startswith(("-c", "--context", "environment=")) for a in args)
    err = capsys.readouterr().err
    assert "cdk-nag AwsSolutions: 0 errors" in err and "cfn-lint: 0 errors" in err
    stages = re.findall(r"^hyperpod-kit: deploy: (.+) \.\.\. \d+\.\d s$", err, re.M)
    assert stages == ["build the stacks", "synthesize, cdk-nag", "cfn-lint", "rehearsal"]
    assert "hyperpod-kit: deploy: handing over to the CDK CLI (cdk deploy)" in err


@pytest.mark.usefixtures("aws_credentials")
def test_a_gate_error_stops_deploy_before_the_cdk_cli(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_env: WriteEnv,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Flow logs off is an AwsSolutions-VPC7 error: exit 1 and the CDK CLI never runs."""
    calls = fake_cdk(tmp_path, monkeypatch)
    file = write_env({"network": {"vpc": {"flow_logs": False}}})
    assert cli.main(["deploy", str(file), "--require-approval", "never"]) == 1
    assert recorded(calls) == []
    err = capsys.readouterr().err
    assert "AwsSolutions-VPC7" in err
    assert "deploy stopped by the gates: 1 errors; the CDK CLI was not run" in err


def test_the_cdk_clis_exit_code_is_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """And -q is the CDK CLI's (passed on); it silences hyperpod-kit's stage lines too."""
    calls = fake_cdk(tmp_path, monkeypatch, exit_code=1)
    assert cli.main(["diff", str(DEFAULT), "-q", "--fail"]) == 1
    (args,) = recorded(calls)
    assert args[0] == "diff" and args[-2:] == ["-q", "--fail"] and "--all" not in args
    err = capsys.readouterr().err
    assert "hyperpod-kit: diff:" not in err and "cfn-lint: 0 errors" in err


@pytest.mark.parametrize(
    ("argv", "ours", "theirs"),
    [
        (["FILE"], ["FILE"], []),
        (["FILE", "--profile", "dev"], ["FILE"], ["--profile", "dev"]),
        (["--all"], [], ["--all"]),
        (["--profile", "dev"], [], ["--profile", "dev"]),
        (["FILE", "--", "--profile", "dev"], ["FILE"], ["--profile", "dev"]),
        (["FILE", "--suppress", "x", "--hotswap"], ["FILE", "--suppress", "x"], ["--hotswap"]),
        (["FILE", "--hotswap", "--suppress=x"], ["FILE", "--suppress=x"], ["--hotswap"]),
        (["FILE", "net", "--exclusively"], ["FILE"], ["net", "--exclusively"]),
        (["--", "--help"], [], ["--help"]),
        (["FILE", "--help"], ["FILE", "--help"], []),
    ],
)
def test_split_of_hyperpod_kit_and_cdk_arguments(
    argv: list[str], ours: list[str], theirs: list[str]
) -> None:
    """The file (first, before any CDK option), --suppress and --help are ours; the rest is the
    CDK CLI's, in order; `--` hands over everything after it."""
    assert cli.split_cdk_argv(argv) == (ours, theirs)


A = Path("/tmp/assembly")


@pytest.mark.parametrize(
    ("command", "extra", "expected"),
    [
        ("deploy", [], ["--all", "--concurrency", "4", "--require-approval", "broadening"]),
        (
            "deploy",
            ["--require-approval", "never", "--concurrency=8", "--hotswap"],
            ["--all", "--require-approval", "never", "--concurrency=8", "--hotswap"],
        ),
        (
            "deploy",
            ["hyperpod-dev-network", "--exclusively"],
            ["--concurrency", "4", "--require-approval", "broadening", "hyperpod-dev-network",
             "--exclusively"],
        ),
        ("deploy", ["--all"], ["--concurrency", "4", "--require-approval", "broadening", "--all"]),
        ("diff", ["--all"], []),
        ("diff", ["--profile", "dev", "hyperpod-dev-storage"], ["--profile", "dev",
                                                                "hyperpod-dev-storage"]),
        ("destroy", ["--profile", "dev", "--force"], ["--all", "--profile", "dev", "--force"]),
        ("destroy", ["-c", "a=b", "c=d", "net"], ["-c", "a=b", "c=d", "net"]),
        ("destroy", ["--tags", "a=b", "c=d"], ["--all", "--tags", "a=b", "c=d"]),
    ],
)  # fmt: skip
def test_cdk_arguments(command: str, extra: list[str], expected: list[str]) -> None:
    """`--all` only when no stack is named (a named stack never becomes every stack), our deploy
    defaults only where the user gave none; `cdk diff` has no --all and diffs every stack."""
    from hyperpod_kit.cli.cdk import cdk_arguments

    assert cdk_arguments(command, A, extra) == [command, "--app", str(A), *expected]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["deploy", "--profile", "dev", "ENV"], "ENV: an environment file must come right after"),
        (["destroy", "ENV", "--app", "cdk.out"], "--app: hyperpod-kit destroy hands the CDK CLI"),
        (["diff", "ENV", "--app=python3 app.py"], "--app=python3 app.py: hyperpod-kit diff"),
    ],
)
def test_cdk_options_that_would_bypass_the_gates_are_refused(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another --app, or a file that would be taken for a stack name: exit 2, no synth, no CDK."""
    calls = fake_cdk(tmp_path, monkeypatch)
    monkeypatch.setattr(
        "hyperpod_kit.cli.synth.build_assembly", lambda *a: pytest.fail("synthesized")
    )
    argv = [str(DEFAULT) if a == "ENV" else a for a in argv]
    code, _, err = run(argv, capsys)
    assert code == 2
    last = err.splitlines()[-1]
    assert last.startswith(expected.replace("ENV", str(DEFAULT)))
    assert ". Hint: " in last
    assert recorded(calls) == []


def _cdk_help_options(command: str) -> dict[str, str]:
    """Every option of the pinned `cdk COMMAND --help` with its type (string, array, boolean...)."""
    import subprocess

    text = subprocess.run(
        [str(REPO / "node_modules/.bin/cdk"), command, "--help"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    options: dict[str, str] = {}
    for block in re.split(r"\n(?=  -)", text):
        names = re.match(r"  ((?:-{1,2}[\w-]+)(?:, -{1,2}[\w-]+)*)", block)
        kind = re.search(r"\[(string|boolean|number|array|count)\]", block)
        if names and kind:
            for name in names[1].split(", "):
                options[name] = kind[1]
    return options


@pytest.mark.skipif(not (REPO / "node_modules/.bin/cdk").exists(), reason="run `make setup` first")
@pytest.mark.parametrize("command", ["deploy", "diff", "destroy"])
def test_value_options_match_the_pinned_cdk_cli(command: str) -> None:
    """hyperpod-kit tells stack names from option values with a table of the CDK CLI's options;
    the table must match the pinned CLI (a name cut off by the help's column is matched by its
    start)."""
    from hyperpod_kit.cli.cdk import CDK_ARRAY_OPTIONS, CDK_VALUE_OPTIONS

    options = _cdk_help_options(command)
    assert "--profile" in options and ("--concurrency" in options or command == "diff")
    assert "--all" not in options if command == "diff" else "--all" in options

    def known(name: str, table: frozenset[str]) -> bool:
        return any(o == name or (len(name) > 30 and o.startswith(name)) for o in table)

    for name, kind in options.items():
        if kind in {"string", "number"}:
            assert known(name, CDK_VALUE_OPTIONS), f"{name} takes a value: add it"
        elif kind == "array":
            assert known(name, CDK_ARRAY_OPTIONS), f"{name} takes values: add it"
        else:
            assert not known(name, CDK_VALUE_OPTIONS | CDK_ARRAY_OPTIONS), name


# --- help texts ---------------------------------------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_and_option_has_a_help_text() -> None:
    subparsers = _subparsers()
    assert set(subparsers) >= {"validate", "schema", "synth", "plan", "check", "jobs", "diff",
                               "deploy", "destroy"}  # fmt: skip
    for name, parser in subparsers.items():
        assert parser.description, f"{name} has no description"
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, (
                f"{name} {action.option_strings or action.dest} has no help text"
            )


@pytest.mark.parametrize("command", ["schema", "check", "deploy"])
def test_help_describes_the_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 8, out
    if command == "deploy":
        assert "go to the CDK CLI" in out


# --- writing files: schema -o, jobs -o ----------------------------------------------------------


def test_schema_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "schema.json"
    target.write_text("my own notes")
    code, _, err = run(["schema", "-o", str(target)], capsys)
    assert code == 2
    assert err == (
        f"{target}: exists and would be overwritten; nothing was written. Hint: pass --force to "
        "overwrite it, or choose another -o.\n"
    )
    assert target.read_text() == "my own notes"
    code, _, _ = run(["schema", "-o", str(target), "--force"], capsys)
    assert code == 0
    assert json.loads(target.read_text())["type"] == "object"
    assert run(["schema", "-o", str(target)], capsys)[0] == 0, "the same bytes: nothing to refuse"


def test_schema_into_a_missing_folder_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["schema", "-o", str(tmp_path / "nonexistent" / "x.json")], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith(f"{tmp_path / 'nonexistent' / 'x.json'}: the folder ")
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_jobs_into_an_existing_file_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "jobs"
    target.write_text("not a folder")
    code, _, err = run(["jobs", str(DEFAULT), "-o", str(target), "-q"], capsys)
    assert code == 2
    assert err == (
        f"{target}: is a file, not a folder. Hint: give a new or empty folder for job files "
        "(e.g. -o jobs).\n"
    )
    assert target.read_text() == "not a folder"


def test_jobs_twice_and_after_an_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Running `jobs` again rewrites its own files; a job file the user edited needs --force."""
    out = tmp_path / "jobs"
    assert run(["jobs", str(DEFAULT), "-o", str(out), "-q"], capsys)[0] == 0
    (job,) = [p for p in out.iterdir() if p.name != ".hyperpod-kit"]
    code, _, err = run(["jobs", str(DEFAULT), "-o", str(out), "-q"], capsys)
    assert code == 0 and err == f"unchanged {job}\n"
    assert run(["jobs", str(DEFAULT), "-o", str(out), "-q", "--image", "x:1"], capsys)[0] == 0
    job.write_text(job.read_text() + "# my change\n")
    code, _, err = run(["jobs", str(DEFAULT), "-o", str(out), "-q"], capsys)
    assert code == 2 and "was edited after hyperpod-kit wrote it" in err
    assert job.read_text().endswith("# my change\n")
    assert run(["jobs", str(DEFAULT), "-o", str(out), "-q", "--force"], capsys)[0] == 0
    assert not job.read_text().endswith("# my change\n")


def test_too_many_alert_topics_is_one_line_at_the_topic(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Five existing topics passed validate, then synth died with a jsii traceback: now the
    error is at the line of the first topic past EventBridge's and CloudWatch's limit of 5."""
    arns = [f"arn:aws:sns:us-west-2:111122223333:pager-{i}" for i in range(5)]
    path = write_env({"monitoring": {"subscribers": {"sns_topic_arns": arns}}})
    code, out, err = run(["validate", str(path), "-q"], capsys)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if arns[4] in t)
    assert code == 2 and out == ""
    assert err.startswith(f"{path}:{line} monitoring.subscribers.sns_topic_arns[4]: 5 topics")
    assert err.count("\n") == 1 and "Hint: list at most 4 topics here" in err
    assert "Traceback" not in err
    path = write_env({"monitoring": {"subscribers": {"sns_topic_arns": arns[:4]}}})
    assert run(["validate", str(path), "-q"], capsys)[0] == 0


STUDIO_ON_EXISTING_EKS = {
    "orchestrator": "eks",
    "network": {"vpc": {"control_plane_subnet_cidr": None}},
    "cluster": {
        "instance_groups": [
            {"name": "workers", "role": "worker", "instance_type": "ml.g5.12xlarge",
             "instance_count": 2}
        ],
        "eks": {"existing_cluster_name": "ml-platform"},
    },
    "users": [{"name": "alice", "uid": 10001}],
    "studio": {"enabled": True},
}  # fmt: skip


def test_studio_on_an_existing_eks_cluster_needs_its_security_group(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the control plane's security group, Studio's HTTPS rule would open a group the
    control plane does not carry: one error at `eks:` (the key is not in the file) with the
    command that finds the group; with it, the file is valid."""
    path = write_env(STUDIO_ON_EXISTING_EKS)
    code, out, err = run(["validate", str(path), "-q"], capsys)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.strip() == "eks:")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"{path}:{line} cluster.eks.existing_cluster_security_group_id: ")
    assert "Hint: set cluster.eks.existing_cluster_security_group_id" in err
    with_group = merge(
        STUDIO_ON_EXISTING_EKS,
        {"cluster": {"eks": {"existing_cluster_security_group_id": "sg-0c0ffee0c0ffee000"}}},
    )
    code, _, err = run(["validate", str(write_env(with_group)), "-q"], capsys)
    assert code == 0, err


# --- deploy and destroy: credentials first, a drifted lock ------------------------------------


def _never_synthesized(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_synth(*args: object, **kwargs: object) -> None:
        raise AssertionError("synthesized")

    monkeypatch.setattr("hyperpod_kit.cli.synth.gated_assembly", no_synth)


@pytest.mark.parametrize(
    "argv",
    [
        [command, *profile]
        for command in ("deploy", "destroy")
        for profile in ([], ["--profile", "dev"], ["--profile=dev"])
    ],
)
def test_without_credentials_deploy_and_destroy_stop_before_synth(
    argv: list[str],
    tmp_path: Path,
    write_env: WriteEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No AWS_* variable and an empty HOME: one line, exit 2, before any synth, rehearsal, lock
    write or CDK CLI (they used to run for a minute before the CDK CLI said so)."""
    no_aws(monkeypatch, tmp_path / "home")
    calls = fake_cdk(tmp_path, monkeypatch)
    _never_synthesized(monkeypatch)
    command, profile = argv[0], argv[1:]
    env = write_env()
    code, out, err = run([command, str(env), *profile], capsys)
    assert code == 2 and out == ""
    (line,) = [t for t in err.splitlines() if t.startswith(f"{command}: ")]
    assert err.endswith(line + "\n"), "the last line says why"
    if profile:  # a profile that is not configured is named
        assert line.startswith(f"{command}: --profile dev: ") and "could not be found" in line
    else:
        assert line.startswith(f"{command}: no AWS credentials found, so the CDK CLI could not")
    assert "nothing was synthesized. Hint: configure credentials" in line
    assert recorded(calls) == [] and not (tmp_path / "env.lock.json").exists()
    assert "Traceback" not in err


@pytest.mark.usefixtures("aws_credentials")
@pytest.mark.parametrize("profile", [[], ["--profile", "dev"]])
def test_with_credentials_destroy_goes_on_to_the_cdk_cli(
    profile: list[str],
    tmp_path: Path,
    write_env: WriteEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The good neighbour: credentials in ~/.aws/credentials (default or the profile passed on)
    and the command goes on (the assembly stands in: the gated path is tested above)."""
    from types import SimpleNamespace

    calls = fake_cdk(tmp_path, monkeypatch)
    monkeypatch.setattr(
        "hyperpod_kit.cli.synth.gated_assembly", lambda *a, **k: SimpleNamespace(ok=True)
    )
    code, _, err = run(["destroy", str(write_env()), *profile], capsys)
    assert code == 0, err
    (args,) = recorded(calls)
    assert args[0] == "destroy" and "--all" in args


@pytest.mark.usefixtures("aws_credentials")
def test_destroy_is_not_refused_for_a_drifted_lock(
    tmp_path: Path,
    write_env: WriteEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A lock whose default moved blocks synth and deploy (they would deploy something else),
    not destroy, which deploys nothing: a warning at the lock's line, the lock unchanged, and
    the CDK CLI runs."""
    from types import SimpleNamespace

    from hyperpod_kit.lock import lock_path

    env = write_env()
    assert run(["lock", str(env)], capsys)[0] == 0
    lock = lock_path(env)
    data = json.loads(lock.read_text())
    data["pins"]["cluster.slurm.config_strategy"]["value"] = "Overwrite"  # an older default
    lock.write_text(json.dumps(data, indent=1) + "\n")
    before = lock.read_text()
    calls = fake_cdk(tmp_path, monkeypatch)
    monkeypatch.setattr(
        "hyperpod_kit.cli.synth.gated_assembly", lambda *a, **k: SimpleNamespace(ok=True)
    )
    code, _, err = run(["deploy", str(env)], capsys)
    assert code == 2 and "cluster.slurm.config_strategy: locked at Overwrite" in err
    assert recorded(calls) == []
    code, _, err = run(["destroy", str(env)], capsys)
    assert code == 0, err
    warning = rf"^{re.escape(str(lock))}:\d+ warning: cluster.slurm.config_strategy: locked at "
    assert re.search(warning + "Overwrite", err, re.M), err
    assert "Hint: nothing is deployed, so the lock stays as it is; synthesize with" in err
    assert lock.read_text() == before
    assert recorded(calls)[0][0] == "destroy"
