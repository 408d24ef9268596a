"""The generated pull-request workflow's steps run here, in order, as plain commands: the same
`hyperpod-kit` calls GitHub would make, in a repository of environment files whose pull request
changes one value against its base commit, with no GitHub and no AWS credentials.

Only what GitHub's actions do is played by the test: `actions/checkout` (the repository is
already here; the base commit goes to its folder with `git archive`; the toolkit is this
checkout), the Python and Node set-ups and the toolkit's install (this interpreter's
`hyperpod-kit` goes first on PATH), and the artifact upload (its folder must hold the plan). A
step of any other kind, or a `${{ }}` expression the test does not know, fails the test: the
workflow cannot drift away from what is run here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.cli import main as cli
from tests.conftest import NO_CREDENTIALS, REPO

pytestmark = [pytest.mark.synth, pytest.mark.slow]

# The expressions of the PR job and what GitHub would give them for pull request #7 (no label).
EXPRESSIONS = {
    "${{ contains(github.event.pull_request.labels.*.name, 'allow-replacement') }}": "false",
    "${{ github.event.pull_request.number }}": "7",
}
PLAYED = {"actions/setup-python", "actions/setup-node"}  # nothing to do here


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _team_repository(root: Path) -> tuple[Path, str]:
    """A git repository of environment files: the base commit, then the pull request's change
    (Lustre throughput 250 -> 500 MB/s per TiB). Returns the folder and the base commit."""
    repo = root / "team"
    (repo / "environments").mkdir(parents=True)
    env = repo / "environments" / "dev.yaml"
    shutil.copy(REPO / "environments" / "default.yaml", env)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    text = env.read_text()
    assert "throughput_per_unit_storage: 250" in text
    env.write_text(
        text.replace("throughput_per_unit_storage: 250", "throughput_per_unit_storage: 500")
    )
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qam", "pr")
    return repo, base


def _expand(value: Any) -> str:
    text = str(value)
    for expression, given in EXPRESSIONS.items():
        text = text.replace(expression, given)
    assert "${{" not in text, f"an expression the test does not know: {text}"
    return text


def _hyperpod_kit_on_path(root: Path, log: Path) -> Path:
    """A `bin` folder whose `hyperpod-kit` is this checkout's command (and logs its arguments)."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "hyperpod-kit"
    script.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        f"PYTHONPATH={REPO}:{REPO / 'assets' / 'trainer'} exec {sys.executable} "
        '-m hyperpod_kit.cli.main "$@"\n'
    )
    script.chmod(0o755)
    return bin_dir


def test_pull_request_steps_run_locally_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, base = _team_repository(tmp_path)
    monkeypatch.chdir(repo)
    code = cli.main(
        ["pipeline", "github", "--env", "dev=environments/dev.yaml",
         "--toolkit-repository", "example-org/hyperpod-kit"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    workflow = yaml.safe_load((repo / ".github/workflows/hyperpod-kit-plan.yml").read_text())
    job = workflow["jobs"]["plan-dev"]
    log = tmp_path / "hyperpod-kit.log"
    bin_dir = _hyperpod_kit_on_path(tmp_path, log)
    summary = tmp_path / "step-summary.md"
    github = {
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_PATH": str(tmp_path / "github-path"),
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env = NO_CREDENTIALS | github | {k: _expand(v) for k, v in workflow["env"].items()}
    env |= {k: _expand(v) for k, v in job["env"].items()}
    failed: list[str] = []
    uploaded: Path | None = None
    for step in job["steps"]:
        uses = str(step.get("uses", "")).split("@")[0]
        if uses == "actions/checkout":
            path = step.get("with", {}).get("path")
            if path == env["HPK_BASE"]:  # the base branch's commit, in its own folder
                assert step["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
                (repo / path).mkdir(parents=True)
                archive = subprocess.run(
                    ["git", "-C", str(repo), "archive", base], capture_output=True, check=True
                ).stdout
                subprocess.run(["tar", "-x", "-C", str(repo / path)], input=archive, check=True)
            continue  # the repository is here; the toolkit is this checkout
        if uses in PLAYED or step.get("id") == "install-toolkit":
            continue
        if uses == "actions/upload-artifact":
            uploaded = repo / _expand(step["with"]["path"])
            continue
        assert "run" in step and not uses, f"a step the test cannot play: {step}"
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=repo,
            env=env | {k: _expand(v) for k, v in step.get("env", {}).items()},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if result.returncode != 0:
            failed.append(step["name"])
            assert step is job["steps"][-1], f"{step['name']}: {result.stdout}{result.stderr}"

    # The same hyperpod-kit calls, in order: validate, synth, rehearsal, the base's synth, plan.
    calls = log.read_text().splitlines()
    assert calls == [
        "validate environments/dev.yaml",
        "synth environments/dev.yaml -o .hyperpod-kit/out/dev/assembly",
        "check --rehearse environments/dev.yaml",
        "synth .hyperpod-kit/base/environments/dev.yaml -o .hyperpod-kit/out/dev/baseline",
        "plan environments/dev.yaml --baseline .hyperpod-kit/out/dev/baseline --format json",
        "plan environments/dev.yaml --baseline .hyperpod-kit/out/dev/baseline --format markdown",
    ]
    assert (repo / ".hyperpod-kit/out/dev/assembly/manifest.json").is_file()
    # What the comment workflow reads: the plan of this pull request's change, as uploaded.
    assert uploaded == repo / ".hyperpod-kit/out/dev/plan/"
    assert (uploaded / "pull-request").read_text() == "7\n"
    assert (uploaded / "environment").read_text() == "dev\n"
    plan = json.loads((uploaded / "plan.json").read_text())
    changed = [c for c in plan["changes"] if c["type"] == "AWS::FSx::FileSystem"]
    assert changed, plan
    exit_code = int((uploaded / "exit-code").read_text())
    assert exit_code == plan["exit_code"]
    markdown = (uploaded / "plan.md").read_text()
    assert markdown.startswith("**plan: ") and "AWS::FSx::FileSystem" in markdown
    assert markdown in summary.read_text()
    # The check fails exactly when the plan refuses the change or finds it destructive.
    assert failed == ([] if exit_code == 0 else ["Fail on a refused or destructive change"])
