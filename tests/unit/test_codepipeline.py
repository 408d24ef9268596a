"""`hyperpod-kit pipeline codepipeline`: bad input is one line naming the flag or the file (with
its line, the key and a hint), exit 2, nothing written and nothing synthesized; an output folder
of someone else's is refused, --force or not (never the current folder or a file); the steps'
shell commands quote what they are given. The synthesized pipeline itself:
tests/integration/test_codepipeline.py."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.codepipeline import (
    Connection,
    check_connection,
    install_commands,
    pinned_cdk_cli,
    synth_commands,
)

REPO = Path(__file__).resolve().parents[2]
ARN = (
    "arn:aws:codeconnections:us-west-2:111122223333:connection/0c4e8f2a-1b2c-4d3e-9f00-123456789abc"
)
TEAM = ["--env", "dev=environments/team/dev.yaml", "--env", "prod=environments/team/prod.yaml"]
FLAGS = [
    "--repository",
    "example-org/team-envs",
    "--toolkit-repository",
    "example-org/hyperpod-kit",
]


@pytest.fixture
def team_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository of environment files (the team example, the default, and a bad one) as the
    current folder."""
    (tmp_path / "environments").mkdir()
    shutil.copy(REPO / "environments" / "default.yaml", tmp_path / "environments" / "default.yaml")
    shutil.copytree(REPO / "environments" / "team", tmp_path / "environments" / "team")
    bad = yaml.safe_load((REPO / "environments" / "default.yaml").read_text())
    bad["account"] = "111122223333"
    bad["storage"]["lustre"]["storage_capacity_gib"] = 2000
    (tmp_path / "environments" / "bad.yaml").write_text(yaml.safe_dump(bad))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["pipeline", "codepipeline", *argv])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([*TEAM, *FLAGS], "--connection-arn is needed: the CodeConnections connection"),
        (
            [*TEAM, *FLAGS, "--connection-arn", "arn:aws:s3:::bucket"],
            "is not the ARN of a CodeConnections connection",
        ),
        (
            [*TEAM, "--connection-arn", ARN, "--toolkit-repository", "o/t"],
            "--repository is needed: the repository of the environment files",
        ),
        (
            [*TEAM, *FLAGS, "--connection-arn", ARN, "--name", "Team Pipeline"],
            "--name: 'Team Pipeline' is not a pipeline name",
        ),
        (
            [*TEAM, *FLAGS, "--connection-arn", ARN, "--toolkit-ref", "v1..2"],
            "--toolkit-ref: 'v1..2' is not a git tag",
        ),
        (
            [*TEAM, *FLAGS, "--connection-arn", ARN, "--branch", "a..b"],
            "--branch: 'a..b' is not a branch name",
        ),
        (
            [*TEAM, *FLAGS, "--connection-arn", ARN.replace("us-west-2", "us-east-1")],
            "--env: 'dev=environments/team/dev.yaml' deploys to us-west-2, not to the pipeline's "
            "region us-east-1",
        ),
        (
            ["--env", "dev=environments/default.yaml", *FLAGS, "--connection-arn", ARN],
            "environments/default.yaml:1 account: not set, and a CodePipeline stage deploys to an "
            "explicit account",
        ),
        (
            ["--env", "dev=environments/bad.yaml", *FLAGS, "--connection-arn", ARN],
            "--env: 'dev=environments/bad.yaml' does not validate (environments/bad.yaml:",
        ),
        (
            ["--env", "dev=environments/missing.yaml", *FLAGS, "--connection-arn", ARN],
            "names a file that does not exist",
        ),
        (  # reserved in every pipeline command (the GitHub roles' environments)
            ["--env", "plan=environments/team/dev.yaml", *FLAGS, "--connection-arn", ARN],
            "--env: 'plan=environments/team/dev.yaml' names the environment 'plan'",
        ),
        (
            ["--env", "drift=environments/team/dev.yaml", *FLAGS, "--connection-arn", ARN],
            "--env: 'drift=environments/team/dev.yaml' names the environment 'drift'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    argv: list[str], expected: str, team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1, err
    assert expected in err and "Hint: " in err, err
    assert "Traceback" not in err
    assert not (team_repo / "pipeline.out").exists()
    assert sorted(p.name for p in team_repo.iterdir()) == ["environments"]  # no staging left


def test_a_file_that_does_not_validate_names_its_line_key_and_hint(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(capsys, "--env", "dev=environments/bad.yaml", *FLAGS, "--connection-arn", ARN)
    lines = (team_repo / "environments" / "bad.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "storage_capacity_gib" in text)
    assert code == 2
    assert f"(environments/bad.yaml:{line} storage.lustre.storage_capacity_gib: 2000 is not" in err
    assert "Hint: use 2400" in err


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_a_folder_of_someone_else_is_refused_force_or_not(
    team_repo: Path, capsys: pytest.CaptureFixture[str], force: list[str]
) -> None:
    theirs = team_repo / "pipeline.out"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    code, err = _run(capsys, *TEAM, *FLAGS, "--connection-arn", ARN, *force)
    assert code == 2 and err.count("\n") == 1
    assert "pipeline.out: is a folder with files that hyperpod-kit did not write" in err
    assert "--force" not in err
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in team_repo.iterdir()) == ["environments", "pipeline.out"]


@pytest.mark.parametrize("where", ["file", "current folder", "link"])
def test_force_never_replaces_a_file_a_link_or_the_current_folder(
    where: str, team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = {"file": "pipeline.out", "current folder": ".", "link": "pipeline.out"}[where]
    if where == "file":
        (team_repo / "pipeline.out").write_text("mine")
    elif where == "link":
        (team_repo / "elsewhere").mkdir()
        (team_repo / "pipeline.out").symlink_to(team_repo / "elsewhere")
    code, err = _run(capsys, *TEAM, *FLAGS, "--connection-arn", ARN, "-o", target, "--force")
    assert code == 2 and err.count("\n") == 1, err
    says = {"file": "is a file", "current folder": "is the current folder", "link": "symbolic link"}
    assert says[where] in err and "--force" not in err
    if where == "file":
        assert (team_repo / "pipeline.out").read_text() == "mine"


def test_connection_arn_gives_the_pipelines_account_and_region() -> None:
    legacy = ARN.replace("codeconnections", "codestar-connections")
    for arn in (ARN, legacy):
        assert check_connection(arn) == Connection(arn, "aws", "us-west-2", "111122223333")


def test_the_steps_commands_quote_what_they_are_given() -> None:
    """Every value reaches the shell through `shlex.quote`: the flags validated it already, so
    this only holds if a later check lets something odd through."""
    connection = check_connection(ARN)
    synth = synth_commands(
        [("dev", "environments/a b.yaml")], connection=connection, repository="o/r",
        branch="main", toolkit_repository="o/t", ref="v1", name="p",
    )  # fmt: skip
    assert synth[:2] == [
        "hyperpod-kit validate 'environments/a b.yaml'",
        "hyperpod-kit check --rehearse 'environments/a b.yaml'",
    ]
    assert shlex.split(synth[-1])[:5] == [
        "hyperpod-kit", "pipeline", "codepipeline", "--env", "dev=environments/a b.yaml",
    ]  # fmt: skip
    assert shlex.split(synth[-1])[-2:] == ["-o", "cdk.out"]
    install = install_commands("o/t", "v1")
    assert "fetch --quiet --depth 1 https://github.com/o/t.git v1" in install[1]


def test_the_steps_install_the_toolkit_as_a_package_from_its_pinned_checkout() -> None:
    """The checkout at the ref, then a venv of its own with hyperpod-kit built from that
    checkout and the checkout's pinned requirements; the venv's command on PATH. No `make`, no
    command of the checkout itself (tests/integration/test_pipeline_steps.py runs the same
    install from the GitHub workflow)."""
    assert install_commands("o/t", "v1") == [
        "git init --quiet .hyperpod-kit/toolkit",
        "git -C .hyperpod-kit/toolkit fetch --quiet --depth 1 https://github.com/o/t.git v1",
        "git -C .hyperpod-kit/toolkit checkout --quiet FETCH_HEAD",
        "python3 -m venv --clear .hyperpod-kit/venv",
        ".hyperpod-kit/venv/bin/python -m pip install --quiet --disable-pip-version-check "
        "-r .hyperpod-kit/toolkit/requirements.txt ./.hyperpod-kit/toolkit",
        'ln -sf "$CODEBUILD_SRC_DIR/.hyperpod-kit/venv/bin/hyperpod-kit" '
        "/usr/local/bin/hyperpod-kit",
    ]


def test_the_pinned_cdk_cli_version_is_the_whole_locked_tree() -> None:
    """The self-mutation step installs `aws-cdk@<package.json's version>` (CDK Pipelines writes
    that step): the same as `npm ci` of the lock only while aws-cdk depends on nothing. Should a
    lock ever give it dependencies, that step must install from the lock instead."""
    lock = json.loads((REPO / "package-lock.json").read_text())
    cli_package = lock["packages"]["node_modules/aws-cdk"]
    assert cli_package["version"] == pinned_cdk_cli()
    assert not cli_package.get("dependencies"), cli_package
    assert sorted(lock["packages"]) == ["", "node_modules/aws-cdk"]
