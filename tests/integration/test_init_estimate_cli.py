"""`init` and `estimate` as the real command in a fresh process (no credentials, no terminal):
help, the happy path from nothing to an estimate, and bad input as one line with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

DEFAULT = REPO / "environments" / "default.yaml"
BAD = REPO / "tests" / "data" / "bad"


@pytest.mark.parametrize("command", ["init", "estimate"])
def test_help(command: str, tmp_path: Path) -> None:
    done = run_cli(command, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: hyperpod-kit {command}")
    flags = ["--force", "--region", "--az-id", "--instance-type", "--count", "--users", "--studio"]
    for flag in flags if command == "init" else ["--step-time", "--format"]:
        assert flag in done.stdout


def test_from_nothing_to_an_estimate(tmp_path: Path) -> None:
    """init without flags and without a terminal, then validate and estimate the file."""
    done = run_cli("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "the embedded default's choices" in done.stderr
    assert "wrote environment.yaml" in done.stderr
    assert (tmp_path / "environment.yaml").is_file()
    assert run_cli("validate", "environment.yaml", cwd=tmp_path).returncode == 0
    done = run_cli("estimate", "environment.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Lustre throughput" in done.stdout and "300 MB/s" in done.stdout
    again = run_cli("init", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr


def test_estimate_default_environment(tmp_path: Path) -> None:
    done = run_cli("estimate", str(DEFAULT), "--step-time", "1.5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "checkpoint size" in done.stdout and "14.8 GB" in done.stdout
    assert "prices, checked " in done.stdout
    assert "no price data for ml.g5.8xlarge in us-west-2" in done.stdout
    assert list(tmp_path.iterdir()) == []  # estimate writes nothing


def test_bad_init_flag(tmp_path: Path) -> None:
    done = run_cli("init", "--region", "us-east-1", "--az-id", "usw2-az2", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("--az-id: 'usw2-az2' is a zone of us-west-2")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("missing.yaml", "missing.yaml (file): no such file"),
        (str(BAD / "yaml-tab.yaml"), "yaml-tab.yaml:"),
        (str(BAD / "unknown-nested-key.yaml"), "unknown-nested-key.yaml:"),
    ],
    ids=["missing-file", "bad-yaml", "unknown-key"],
)
def test_estimate_bad_input(file: str, expected: str, tmp_path: Path) -> None:
    done = run_cli("estimate", file, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and expected in done.stderr and "Hint:" in done.stderr
