"""The one gated path to AWS, from a clean shell: `env -i` with system paths and a HOME only.

No virtual environment on PATH, no AWS credentials, nothing inherited from the test process. The
pinned CDK CLI (`node_modules/.bin/cdk`, what `npx cdk` runs) finds the project's own Python
through cdk.json and runs app.py, which validates and runs both gates on what it synthesized;
`hyperpod-kit deploy` / `diff` stop at a bad file or a gate error before the CDK CLI runs, and
otherwise hand it the very assembly that passed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.gates import check_assembly
from hyperpod_kit.outputs import read_marker
from tests.conftest import REPO, WriteEnv

pytestmark = [
    pytest.mark.synth,
    pytest.mark.skipif(
        not (REPO / "node_modules/.bin/cdk").exists() or not (REPO / ".venv/bin/python").exists(),
        reason="run `make setup` first",
    ),
]
CDK = REPO / "node_modules" / ".bin" / "cdk"
HYPERPOD_KIT = REPO / ".venv" / "bin" / "hyperpod-kit"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
BANNER = "!!"  # how jsii's Node.js end-of-life banner shows


def clean(
    command: list[str], *, cwd: Path, home: Path, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` under `env -i PATH=<system> HOME=<home>` (and TMPDIR, when given)."""
    env = [f"PATH={SYSTEM_PATH}", f"HOME={home}"] + ([f"TMPDIR={tmpdir}"] if tmpdir else [])
    return subprocess.run(
        ["/usr/bin/env", "-i", *env, *map(str, command)],
        cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def cdk_synth(env_file: Path, out: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return clean(
        [CDK, "synth", "--quiet", "-o", out, "-c", f"environment={env_file}"], cwd=REPO, home=home
    )


def test_the_clean_shell_has_no_aws_cdk(home: Path) -> None:
    """The premise: whatever python3 a clean shell finds cannot run app.py by itself."""
    if shutil.which("python3", path=SYSTEM_PATH) is None:
        pytest.skip("no python3 on the system paths")
    result = clean(["python3", "-c", "import aws_cdk"], cwd=home, home=home)
    assert result.returncode != 0


def test_cdk_synth_of_the_default_passes_the_gates(tmp_path: Path, home: Path) -> None:
    """`npx cdk synth` works from a clean shell, prints our gate report, and marks the assembly
    as ours, so that `hyperpod-kit synth` may replace it later."""
    out = tmp_path / "cdk.out"
    result = cdk_synth(REPO / "environments/default.yaml", out, home)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert BANNER not in result.stderr, "jsii's Node banner is silenced in app.py"
    assert "cdk-nag AwsSolutions: 0 errors" in result.stderr
    assert "cfn-lint: 0 errors, 0 warnings" in result.stderr
    assert read_marker(out) is not None
    assert check_assembly(out).ok

    again = clean([HYPERPOD_KIT, "synth", REPO / "environments/default.yaml", "-o", out],
                  cwd=tmp_path, home=home)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert BANNER not in again.stderr, "and in the CLI"


# What `validate` rejects must stop `npx cdk synth` with our message: a value CloudFormation would
# reject later (a reserved `aws:` tag) as well as one of the file's own rules.
STOPPED_BY_VALIDATION = [
    pytest.param(
        {"storage": {"lustre": {"storage_capacity_gib": 2000}}},
        "storage.lustre.storage_capacity_gib: 2000 is not 1200 or a multiple of 2400",
        id="lustre-capacity",
    ),
    pytest.param(
        {"tags": {"aws:cost-center": "ml"}},
        "tags.aws:cost-center: tag keys starting with 'aws:' are reserved for AWS",
        id="reserved-aws-tag",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), STOPPED_BY_VALIDATION)
def test_cdk_synth_stops_at_what_validate_rejects(
    overrides: dict[str, Any], message: str, tmp_path: Path, home: Path, write_env: WriteEnv
) -> None:
    file = write_env(overrides)
    out = tmp_path / "cdk.out"
    result = cdk_synth(file, out, home)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith(f"{file}:")]
    assert ours and message in ours[0], result.stderr
    assert "Subprocess exited with error 2" in result.stderr
    assert not list(out.glob("*.template.json")), "nothing synthesized from a bad file"


def test_cdk_synth_stops_at_a_gate_error(tmp_path: Path, home: Path, write_env: WriteEnv) -> None:
    """Flow logs off: valid input, but cdk-nag's AwsSolutions-VPC7 is an error. app.py runs the
    gates, so `npx cdk synth` (and with it `cdk diff`, `cdk deploy`) stops."""
    file = write_env({"network": {"vpc": {"flow_logs": False}}})
    result = cdk_synth(file, tmp_path / "cdk.out", home)
    assert result.returncode != 0
    assert "AwsSolutions-VPC7" in result.stderr
    assert "cdk-nag AwsSolutions: 1 errors" in result.stderr
    assert f"{file}: rejected by the gates (1 errors); nothing goes to AWS" in result.stderr
    assert "Subprocess exited with error 1" in result.stderr


def test_without_the_project_environment_cdk_says_make_setup(tmp_path: Path, home: Path) -> None:
    """A checkout without .venv: one line that says what to do, not a Python traceback."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("cdk.json", "app.py"):
        shutil.copy(REPO / name, project / name)
    result = clean([CDK, "synth", "--quiet"], cwd=project, home=home)
    assert result.returncode != 0
    assert ".venv/bin/python: not found. Hint: run `make setup` first." in result.stderr
    assert "Subprocess exited with error 2" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["deploy", "diff"])
def test_a_bad_file_never_reaches_the_cdk_cli(
    command: str, tmp_path: Path, home: Path, write_env: WriteEnv
) -> None:
    """No credentials needed to prove it: exit 2 at validation, no assembly was even staged."""
    file = write_env({"storage": {"lustre": {"storage_capacity_gib": 2000}}})
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = clean([HYPERPOD_KIT, command, file], cwd=tmp_path, home=home, tmpdir=tmpdir)
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{file}:") and "storage.lustre.storage_capacity_gib: 2000" in first
    assert "Traceback" not in result.stderr
    assert list(tmpdir.iterdir()) == []


def test_a_gate_error_never_reaches_the_cdk_cli(
    tmp_path: Path, home: Path, write_env: WriteEnv
) -> None:
    """`diff` takes the same path (tests/unit/test_cli.py checks both with a fake CDK CLI).
    Made-up credentials in HOME: deploy checks for some before it synthesizes. The file is in a
    project with the pinned CDK CLI installed (package.json, node_modules), which deploy looks
    for before it synthesizes (else it would fetch it into HOME's cache)."""
    command = "deploy"
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = example\n"
    )
    file = write_env({"network": {"vpc": {"flow_logs": False}}})
    shutil.copy(REPO / "package.json", file.parent / "package.json")
    (file.parent / "node_modules").symlink_to(REPO / "node_modules")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = clean([HYPERPOD_KIT, command, file], cwd=tmp_path, home=home, tmpdir=tmpdir)
    assert result.returncode == 1
    assert "AwsSolutions-VPC7" in result.stderr
    assert f"{command} stopped by the gates: 1 errors; the CDK CLI was not run" in result.stderr
    assert BANNER not in result.stderr
    assert list(tmpdir.iterdir()) == [], "the staging assembly is removed"


@pytest.mark.parametrize("command", ["deploy", "destroy"])
def test_without_credentials_deploy_and_destroy_stop_before_synth(
    command: str, tmp_path: Path, home: Path
) -> None:
    """No AWS_* variable, an empty HOME: one line and exit 2 within seconds, with nothing
    synthesized or staged, and the CDK CLI never started."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = clean(
        [HYPERPOD_KIT, command, REPO / "environments/default.yaml"],
        cwd=tmp_path, home=home, tmpdir=tmpdir,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"{command}: no AWS credentials found"), result.stderr
    assert "Hint: configure credentials" in last
    assert "cdk-nag" not in result.stderr and BANNER not in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmpdir.iterdir()) == []


def test_diff_hands_the_cdk_cli_the_gated_assembly(tmp_path: Path, home: Path) -> None:
    """A valid file: hyperpod-kit gates once, then the CDK CLI reads that assembly without
    running app.py again (app.py would print a second gate report), and without credentials it
    fails at AWS, which proves it got that far. The assembly is removed afterwards."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    result = clean(
        [HYPERPOD_KIT, "diff", REPO / "environments/default.yaml", "--all", "--context-lines", "1"],
        cwd=tmp_path, home=home, tmpdir=tmpdir,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.count("cfn-lint: 0 errors, 0 warnings") == 1
    assert "Unable to resolve AWS account" in result.stderr or "credentials" in result.stderr
    assert "Unknown option" not in result.stderr, "--all and --context-lines passed correctly"
    assert BANNER not in result.stderr
    assert list(tmpdir.iterdir()) == []


def test_cdk_json_runs_the_projects_python() -> None:
    app = json.loads((REPO / "cdk.json").read_text())["app"]
    assert "exec .venv/bin/python app.py" in app
