"""`hyperpod-kit init --project DIR`: a team's repository that works where it is cloned.

Written into an empty folder with --no-input, the environment file validates and its lock is
what `lock` writes; `npm ci` takes package.json and package-lock.json as they are; from a clean
shell (`env -i`, system PATH, an empty HOME) `npx cdk synth -c environment=FILE` through the
project's own node_modules runs cdk.json's launcher, which finds a Python with hyperpod-kit (the
project's .venv: here a link to this interpreter's environment, as any venv with hyperpod-kit
does), and both gates pass. The launcher's other ways (the `hyperpod-kit` command's Python in
~/.local/bin, as pipx installs it; none at all) are checked with a stand-in app.py. A folder of
someone else's is refused, nothing written; --force adds the project's files and keeps theirs;
the --github variant's workflows pass actionlint and zizmor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.pipeline import WORKFLOWS
from hyperpod_kit.outputs import MARKER, read_marker
from hyperpod_kit.paths import PACKAGE_JSON

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
ENV_FILE = "environments/hyperpod-dev.yaml"  # the default choices' name
FILES = {
    ENV_FILE, "environments/hyperpod-dev.lock.json", "package.json", "package-lock.json",
    "cdk.json", "bin/cdk-app", "app.py", "README.md", ".gitignore",
}  # fmt: skip
BIN = Path(sys.executable).parent
NPM = shutil.which("npm")


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)


def init(capsys: pytest.CaptureFixture[str], project: Path | str, *extra: str) -> tuple[int, str]:
    code = cli.main(["init", "--project", str(project), "--no-input", *extra])
    return code, capsys.readouterr().err


def files_of(folder: Path) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != MARKER
    }


def clean(
    command: list[str], *, cwd: Path, home: Path, pythonpath: bool = False
) -> subprocess.CompletedProcess[str]:
    """`command` under `env -i` with the system PATH and an empty HOME. With `pythonpath`, this
    process's PYTHONPATH goes along where it has one (a worktree run: its code before the
    venv's, for the synth); never for the launcher's choice, which any PYTHONPATH would sway."""
    env = [f"PATH={SYSTEM_PATH}", f"HOME={home}", "npm_config_update_notifier=false"]
    if pythonpath and os.environ.get("PYTHONPATH"):
        env.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    return subprocess.run(
        ["/usr/bin/env", "-i", *env, *command],
        cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_a_new_project_validates_and_pins_the_cdk_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = init(capsys, "team-envs")
    assert code == 0, err
    project = tmp_path / "team-envs"
    assert files_of(project) == FILES
    marker = read_marker(project)
    assert marker is not None and marker["kind"] == "project"
    assert f"next: cd team-envs; git init; npm ci; hyperpod-kit validate {ENV_FILE}" in err

    pinned = json.loads(PACKAGE_JSON.read_text())["devDependencies"]
    package = json.loads((project / "package.json").read_text())
    lock = json.loads((project / "package-lock.json").read_text())
    assert package["devDependencies"] == pinned and package["name"] == "team-envs"
    assert lock["name"] == lock["packages"][""]["name"] == "team-envs"
    assert lock["packages"][""]["devDependencies"] == pinned
    cdk = json.loads((project / "cdk.json").read_text())
    assert cdk["app"] == "sh bin/cdk-app" and cdk["context"]["environment"] == ENV_FILE
    for name in FILES:
        assert str(tmp_path) not in (project / name).read_text(), f"{name} names this machine"

    monkeypatch.chdir(project)
    assert cli.main(["validate", ENV_FILE]) == 0
    assert cli.main(["lock", ENV_FILE]) == 0  # the lock is already what `lock` writes
    assert f"{Path(ENV_FILE).with_name('hyperpod-dev.lock.json')}: unchanged" in (
        capsys.readouterr().err
    )


@pytest.mark.synth
@pytest.mark.skipif(NPM is None, reason="needs npm")
def test_npx_cdk_synth_from_a_clean_shell_in_the_project(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "envs"
    assert init(capsys, project)[0] == 0
    ci = subprocess.run(
        [str(NPM), "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ci.returncode == 0, ci.stderr  # package.json and package-lock.json agree
    (project / ".venv").symlink_to(Path(sys.prefix))  # any venv that has hyperpod-kit
    result = clean(
        ["npx", "cdk", "synth", "--quiet", "-c", f"environment={ENV_FILE}"],
        cwd=project,
        home=home,
        pythonpath=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "cdk-nag AwsSolutions: 0 errors" in result.stderr
    assert "cfn-lint: 0 errors, 0 warnings" in result.stderr
    marker = read_marker(project / "cdk.out")
    assert marker is not None and marker["kind"] == "cloud-assembly"
    assert list((project / "cdk.out").glob("hyperpod-dev-*.template.json"))


APP_STANDIN = "import sys\nimport hyperpod_kit\nprint(sys.executable)\n"


def test_the_launcher_finds_hyperpod_kits_python(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bin/cdk-app from a clean shell, app.py a stand-in that prints its interpreter: the
    project's .venv first; else the `hyperpod-kit` command's Python in ~/.local/bin (pipx's
    link to its venv); else one line, exit 2."""
    system = clean(["python3", "-c", "import hyperpod_kit"], cwd=tmp_path, home=home)
    if shutil.which("hyperpod-kit", path=SYSTEM_PATH) or system.returncode == 0:
        pytest.skip("this machine's system paths have hyperpod-kit")
    project = tmp_path / "envs"
    assert init(capsys, project)[0] == 0
    (project / "app.py").write_text(APP_STANDIN)
    launcher = ["sh", "bin/cdk-app"]
    shellcheck = shutil.which("shellcheck")
    if shellcheck is not None:  # .ci/run installs it
        lint = subprocess.run([shellcheck, "-s", "sh", "bin/cdk-app"], cwd=project, check=False)
        assert lint.returncode == 0, "bin/cdk-app passes shellcheck"

    nothing = clean(launcher, cwd=project, home=home)
    assert nothing.returncode == 2
    assert nothing.stderr.startswith("bin/cdk-app: no Python with hyperpod-kit")
    assert "Hint: pipx install hyperpod-kit" in nothing.stderr

    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "hyperpod-kit").symlink_to(BIN / "hyperpod-kit")
    pipx = clean(launcher, cwd=project, home=home)
    assert pipx.returncode == 0, pipx.stderr
    assert Path(pipx.stdout.strip()).parent == BIN

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (project / ".venv").symlink_to(venv)  # no hyperpod_kit in it: passed over
    assert clean(launcher, cwd=project, home=home).stdout.strip() == str(BIN / "python")
    (project / ".venv").unlink()
    (project / ".venv").symlink_to(Path(sys.prefix))
    first = clean(launcher, cwd=project, home=home)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(project / ".venv" / "bin" / "python")


def test_a_folder_of_someone_elses_is_refused_then_force_adds_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "existing"
    project.mkdir()
    (project / "notes.md").write_text("mine\n")
    (project / "README.md").write_text("my readme\n")
    code, err = init(capsys, project)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{project}: is a folder with files that hyperpod-kit did not write")
    assert "Hint: " in line
    assert files_of(project) == {"notes.md", "README.md"}, "nothing written"

    code, err = init(capsys, project, "--force")
    assert code == 0, err
    assert files_of(project) == FILES | {"notes.md"}
    assert (project / "notes.md").read_text() == "mine\n"
    assert (project / "README.md").read_text() != "my readme\n", "--force overwrites its names"
    assert read_marker(project) is None, "a folder of someone else's is not marked as ours"


def test_a_project_of_ours_is_rewritten_unless_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "envs"
    assert init(capsys, project)[0] == 0
    code, err = init(capsys, project)  # the same choices: nothing changes
    assert code == 0, err
    assert f"wrote the project {project} (0 files written, {len(FILES)} unchanged)" in err

    (project / "cdk.json").write_text("{}\n")  # edited by hand
    code, err = init(capsys, project, "--name", "hyperpod-prod")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"{project / 'cdk.json'}: was edited after")
    assert (project / "cdk.json").read_text() == "{}\n"
    assert not (project / "environments" / "hyperpod-prod.yaml").exists(), "nothing written"

    (project / "mine.txt").write_text("a user's file\n")
    code, err = init(capsys, project, "--name", "hyperpod-prod", "--force")
    assert code == 0, err
    assert json.loads((project / "cdk.json").read_text())["context"]["environment"] == (
        "environments/hyperpod-prod.yaml"
    )
    assert (project / "environments" / "hyperpod-dev.yaml").exists(), "nothing removed"
    assert (project / "mine.txt").read_text() == "a user's file\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--name", "Bad_Name"], "--name: 'Bad_Name' is not an environment name"),
        (["--github"], "--toolkit-repository is needed"),
        (["--github", "--name", "plan", "--toolkit-repository", "o/r"], "--name: 'plan' is a"),
    ],
    ids=["bad-name", "github-without-repository", "reserved-name"],
)
def test_bad_choices_one_line_nothing_written(
    extra: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "envs"
    code, err = init(capsys, project, *extra)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(expected) and "Hint: " in line, line
    assert list(tmp_path.iterdir()) == []


def test_github_only_with_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["init", str(tmp_path / "env.yaml"), "--no-input", "--github"])
    assert code == 2
    assert capsys.readouterr().err.startswith("--github: only with --project")
    assert list(tmp_path.iterdir()) == []


def test_github_workflows_pass_the_workflow_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "envs"
    code, err = init(
        capsys, project, "--github", "--toolkit-repository", "example-org/hyperpod-kit"
    )
    assert code == 0, err
    folder = project / ".github" / "workflows"
    assert files_of(project) == FILES | {f".github/workflows/{name}" for name in WORKFLOWS}
    deploy = (folder / "hyperpod-kit-deploy.yml").read_text()
    assert f'HPK_FILE: "{ENV_FILE}"' in deploy and 'environment: "hyperpod-dev"' in deploy
    readme = (project / "README.md").read_text()
    assert 'pipx install "git+https://github.com/example-org/hyperpod-kit@v' in readme
    assert "HYPERPOD_KIT_ROLE_ARN_HYPERPOD_DEV" in readme
    files = sorted(str(p) for p in folder.glob("*.yml"))
    env = {**os.environ, "PATH": f"/usr/bin:{os.environ['PATH']}"}  # shellcheck for run: steps
    lint = subprocess.run(
        [str(BIN / "actionlint"), *files], capture_output=True, text=True, env=env, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", "--color", "never", *files],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "No findings to report" in audit.stdout + audit.stderr
