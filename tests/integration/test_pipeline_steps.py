"""The generated pull-request workflow's steps run here, in order, as plain commands: the same
`hyperpod-kit` calls GitHub would make, in a repository of environment files whose pull request
changes one value against its base commit, with no GitHub and no AWS credentials.

The install step runs for real: this checkout's working tree, copied to `.hyperpod-kit/toolkit`,
stands in for the pinned checkout; the step makes its venv, `pip install`s the toolkit from that
copy as a package and `npm ci`s its CDK CLI, and every later step runs the `hyperpod-kit` of that
venv (on PATH through `$GITHUB_PATH`, as on GitHub), never this checkout's. To stay offline and
cheap, the stand-in for setup-python's interpreter makes venvs that see this test run's installed
packages (a .pth file) instead of downloading them, pip gets no index and no build isolation
(setuptools from those packages builds the wheel), and npm runs from its cache.

Only what GitHub's actions do is played by the test: `actions/checkout` (the repository is
already here; the base commit goes to its folder with `git archive`; the toolkit is this
checkout, copied), the Python set-up (the stand-in above) and the Node one (this machine's), and
the artifact upload (its folder must hold the plan). A step of any other kind, or a `${{ }}`
expression the test does not know, fails the test: the workflow cannot drift away from what is
run here."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit import __version__
from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.codepipeline import pinned_cdk_cli
from tests.conftest import NO_CREDENTIALS, REPO

# The expressions of the PR job and what GitHub would give them for pull request #7 (no label).
EXPRESSIONS = {
    "${{ contains(github.event.pull_request.labels.*.name, 'allow-replacement') }}": "false",
    "${{ github.event.pull_request.number }}": "7",
}
INSTALL_STEP = "install-toolkit"
# What this test run has installed (the shared venv): the stand-in Python's venvs see it.
PACKAGES = sysconfig.get_paths()["purelib"]
# Offline and cheap (module docstring): pip's `--no-index` and `--no-build-isolation` (pip reads
# PIP_NO_BUILD_ISOLATION inverted: 0 turns isolation off), npm's `--offline`.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "npm_config_offline": "true"}


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


def _plan_job(repo: Path) -> tuple[dict[str, Any], Any]:
    """The plan workflow hyperpod-kit writes into `repo`, and its job for `dev` (a failure's
    message is in the captured stderr)."""
    before = Path.cwd()
    os.chdir(repo)
    try:
        code = cli.main(
            ["pipeline", "github", "--env", "dev=environments/dev.yaml",
             "--toolkit-repository", "example-org/hyperpod-kit"]
        )  # fmt: skip
    finally:
        os.chdir(before)
    assert code == 0
    workflow = yaml.safe_load((repo / ".github/workflows/hyperpod-kit-plan.yml").read_text())
    return workflow, workflow["jobs"]["plan-dev"]


def _expand(value: Any) -> str:
    text = str(value)
    for expression, given in EXPRESSIONS.items():
        text = text.replace(expression, given)
    assert "${{" not in text, f"an expression the test does not know: {text}"
    return text


def _copy_checkout(target: Path) -> None:
    """This checkout's working tree (tracked files and new ones git does not ignore, links kept
    as links) at `target`: what `actions/checkout` of the toolkit's ref would leave there. A copy,
    so that the build and `npm ci` write nothing into this checkout."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    for name in sorted({n for n in listed.decode().split("\0") if n}):
        source, copy = REPO / name, target / name
        if not source.is_symlink() and not source.exists():  # deleted, not yet committed
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)


def _setup_python(root: Path) -> Path:
    """A `bin` folder whose `python` plays setup-python's: this machine's interpreter, whose
    `-m venv` makes a venv that sees this run's packages (`PACKAGES`, a .pth file) and has no
    pip of its own (the packages' pip serves it)."""
    bin_dir = root / "setup-python"
    bin_dir.mkdir()
    python = bin_dir / "python"
    base = getattr(sys, "_base_executable", sys.executable)
    python.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f'  {base} -m venv --without-pip "${{@:3}}" || exit\n'
        "  for venv; do :; done\n"
        "  get='import sysconfig; print(sysconfig.get_path(\"purelib\"))'\n"
        '  site=$("$venv/bin/python" -c "$get")\n'
        f'  printf "%s\\n" {PACKAGES} > "$site/hyperpod-kit-test-packages.pth"\n'
        "  exit\n"
        "fi\n"
        f'exec {base} "$@"\n'
    )
    python.chmod(0o755)
    return bin_dir


def _logging_hyperpod_kit(root: Path, log: Path) -> Path:
    """A `bin` folder, first on PATH, whose `hyperpod-kit` logs its arguments and runs the next
    `hyperpod-kit` on PATH: the one the install step put there."""
    bin_dir = root / "log-calls"
    bin_dir.mkdir()
    script = bin_dir / "hyperpod-kit"
    script.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        f'PATH="${{PATH#{bin_dir}:}}" exec hyperpod-kit "$@"\n'
    )
    script.chmod(0o755)
    return bin_dir


class Job:
    """Plays a job's steps as the runner would: the environment of the workflow, the job and the
    step; `$GITHUB_PATH` entries first on PATH for the steps after the one that wrote them; no
    PYTHONPATH, and nothing of this checkout's or this test run's venv on PATH."""

    def __init__(
        self, repo: Path, root: Path, workflow: dict[str, Any], job: dict[str, Any], base: str
    ) -> None:
        self.repo, self.root, self.job, self.base = repo, root, job, base
        self.github_path = root / "github-path"
        self.github_path.touch()
        self.summary = root / "step-summary.md"
        self.first: list[Path] = []  # folders before $GITHUB_PATH's (the test's own)
        self.python: list[Path] = []  # setup-python's
        inherited = {
            k: v for k, v in NO_CREDENTIALS.items()
            if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"} and not k.startswith("PIP_")
        }  # fmt: skip
        machine = os.environ["PATH"].split(":")  # without any hyperpod-kit (this run's venv's)
        self.path = [d for d in machine if d and not (Path(d) / "hyperpod-kit").exists()]
        self.env = inherited | OFFLINE
        self.env |= {
            "GITHUB_WORKSPACE": str(repo),
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "GITHUB_PATH": str(self.github_path),
        }
        self.env |= {k: _expand(v) for k, v in workflow["env"].items()}
        self.env |= {k: _expand(v) for k, v in job.get("env", {}).items()}
        self.uploaded: Path | None = None
        self.install_seconds = 0.0

    def environment(self, step: dict[str, Any] | None = None) -> dict[str, str]:
        added = self.github_path.read_text().splitlines()[::-1]  # the last one written first
        path = [*map(str, self.first), *added, *map(str, self.python), *self.path]
        step_env = {k: _expand(v) for k, v in (step or {}).get("env", {}).items()}
        return self.env | step_env | {"PATH": ":".join(path)}

    def play(self, step: dict[str, Any]) -> subprocess.CompletedProcess[str] | None:
        uses = str(step.get("uses", "")).split("@")[0]
        if uses == "actions/checkout":
            path = step.get("with", {}).get("path")
            if path == self.env["HPK_TOOLKIT"]:  # the pinned toolkit: this checkout, copied
                assert step["with"]["ref"] and step["with"]["persist-credentials"] is False
                _copy_checkout(self.repo / path)
            elif path == self.env.get("HPK_BASE"):  # the base branch's commit, in its folder
                assert step["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
                (self.repo / path).mkdir(parents=True)
                archive = subprocess.run(
                    ["git", "-C", str(self.repo), "archive", self.base],
                    capture_output=True, check=True,
                ).stdout  # fmt: skip
                subprocess.run(
                    ["tar", "-x", "-C", str(self.repo / path)], input=archive, check=True
                )
            else:
                assert path is None, step  # the repository itself is here already
            return None
        if uses == "actions/setup-python":
            self.python.append(_setup_python(self.root))
            return None
        if uses == "actions/setup-node":  # this machine's Node.js
            return None
        if uses == "actions/upload-artifact":
            self.uploaded = self.repo / _expand(step["with"]["path"])
            return None
        assert "run" in step and not uses, f"a step the test cannot play: {step}"
        started = time.monotonic()
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=self.repo,
            env=self.environment(step),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if step.get("id") == INSTALL_STEP:
            self.install_seconds = time.monotonic() - started
            if result.returncode != 0 and "ENOTCACHED" in result.stderr:
                pytest.skip(
                    f"npm's cache lacks aws-cdk@{pinned_cdk_cli()}, which the offline `npm ci` "
                    "needs: run `make setup` (its npm ci) once"
                )
            assert result.returncode == 0, f"the install step: {result.stdout}{result.stderr}"
        return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The PR job's steps up to and including its install step, played once for the module:
    the install (a venv, `pip install` of the toolkit, `npm ci`) is the slow part, and both tests
    start from it. A test that goes on plays the rest on a copy of the runner."""
    root = tmp_path_factory.mktemp("pr-job")
    repo, base = _team_repository(root)
    workflow, job = _plan_job(repo)
    runner = Job(repo, root, workflow, job, base)
    for step in _steps(job, through_install=True):
        runner.play(step)
    return runner


def _steps(job: dict[str, Any], *, through_install: bool) -> list[dict[str, Any]]:
    """The job's steps through its install step, or the ones after it."""
    steps: list[dict[str, Any]] = job["steps"]
    install = next(i for i, s in enumerate(steps) if s.get("id") == INSTALL_STEP)
    return steps[: install + 1] if through_install else steps[install + 1 :]


def test_the_install_step_installs_the_pinned_checkout_as_a_package(
    installed: Job, tmp_path: Path
) -> None:
    """The workflow's own set-up steps, up to its install step, run against this checkout; then
    the venv's `hyperpod-kit`, in a folder outside both repositories, is the package (not this
    checkout, nor the copy it was built from) and validates a file; the CDK CLI is the pinned
    one."""
    runner, repo = installed, installed.repo
    venv = repo / ".hyperpod-kit" / "venv"
    assert runner.github_path.read_text() == f"{venv}/bin\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(REPO / "environments" / "default.yaml", elsewhere / "mine.yaml")
    env = runner.environment()
    assert shutil.which("hyperpod-kit", path=env["PATH"]) == str(venv / "bin" / "hyperpod-kit")

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip

    version = run("hyperpod-kit", "--version")
    first = version.stdout.splitlines()[0] if version.stdout else ""
    assert (version.returncode, first) == (0, f"hyperpod-kit {__version__}"), version
    valid = run("hyperpod-kit", "validate", "mine.yaml")
    assert valid.returncode == 0, valid.stderr
    assert "mine.yaml: valid" in valid.stderr
    # The package the venv imports: its own copy, files and all, not a checkout's.
    where = run(
        "python", "-c",
        "import json, hyperpod_kit, hyperpod_kit.paths as p; "
        "print(json.dumps([hyperpod_kit.__file__, str(p.LIFECYCLE_DIR), str(p.PACKAGE_LOCK)]))",
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    site = Path(
        run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout
        .strip()
    )  # fmt: skip
    assert site.is_relative_to(venv)
    for found in map(Path, json.loads(where.stdout)):
        assert found.is_relative_to(site / "hyperpod_kit"), found
        assert not found.is_symlink()
    # The CDK CLI the workflow's later steps run: the lock's, in the checkout's node_modules.
    cdk = run(f"{repo}/.hyperpod-kit/toolkit/node_modules/.bin/cdk", "--version")
    assert cdk.returncode == 0 and cdk.stdout.startswith(f"{pinned_cdk_cli()} "), cdk
    print(f"install step: {runner.install_seconds:.1f} s")


@pytest.mark.synth
@pytest.mark.slow
def test_pull_request_steps_run_locally_in_order(installed: Job, tmp_path: Path) -> None:
    """Every step of the job in order: the module's fixture played the ones through the install
    step (no `hyperpod-kit` is on PATH until the install step's `$GITHUB_PATH` entry, so a call
    in one of them would have failed its step there); the rest run here, each `hyperpod-kit`
    call logged."""
    runner = copy.copy(installed)  # this test's PATH additions and results, not the module's
    repo, job = runner.repo, runner.job
    log = tmp_path / "hyperpod-kit.log"
    runner.first = [*installed.first, _logging_hyperpod_kit(tmp_path, log)]
    failed: list[str] = []
    for step in _steps(job, through_install=False):
        result = runner.play(step)
        if result is not None and result.returncode != 0:
            failed.append(step["name"])
            assert step is job["steps"][-1], f"{step['name']}: {result.stdout}{result.stderr}"

    # The same hyperpod-kit calls, in order: validate, synth, rehearsal, the base's synth, plan;
    # each by the venv's hyperpod-kit, which the install step made.
    calls = log.read_text().splitlines()
    assert calls == [
        "validate environments/dev.yaml",
        "synth environments/dev.yaml -o .hyperpod-kit/out/dev/assembly",
        "check --rehearse environments/dev.yaml",
        "synth .hyperpod-kit/base/environments/dev.yaml -o .hyperpod-kit/out/dev/baseline",
        "plan environments/dev.yaml --baseline .hyperpod-kit/out/dev/baseline --format json",
        "plan environments/dev.yaml --baseline .hyperpod-kit/out/dev/baseline --format markdown",
    ]
    assert runner.github_path.read_text() == f"{repo}/.hyperpod-kit/venv/bin\n"
    assert (repo / ".hyperpod-kit/out/dev/assembly/manifest.json").is_file()
    # What the comment workflow reads: the plan of this pull request's change, as uploaded.
    uploaded = runner.uploaded
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
    assert markdown in runner.summary.read_text()
    # The check fails exactly when the plan refuses the change or finds it destructive.
    assert failed == ([] if exit_code == 0 else ["Fail on a refused or destructive change"])
    print(f"install step: {runner.install_seconds:.1f} s")
