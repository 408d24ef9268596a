"""The wheel is the product: built from the working tree, installed with its pinned dependencies
into a fresh virtual environment, and run from an empty folder outside the repository.

One session builds the wheel and the sdist (setuptools' PEP 517 hooks, offline), a wheel from
that sdist, and one venv (`pip install -r requirements.txt WHEEL`: the pins, from pip's cache on a
machine that ran `make setup`). Every command then runs under `env -i` (system PATH, the venv's
bin, a HOME of its own, no PYTHONPATH) in a folder that starts empty, with an audit hook
(`sys.addaudithook`, event `open`) that records every file the process opens. What it opened
under the venv must be in an installed distribution's RECORD (the toolkit's under its own
packages), and nothing may be under the repository.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [
    pytest.mark.synth,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("node") is None, reason="the CDK needs Node.js"),
]
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
TOOLKIT = ("hyperpod_kit", "hyperpod_trainer")
# The repository's top-level files the wheel carries inside the package (hyperpod_kit/_bundled).
BUNDLED = ("lifecycle/", "assets/", "environments/default.yaml",
           "environments/environment.schema.json", "package.json", "package-lock.json")  # fmt: skip
# Run the CLI with an audit hook that appends each opened path to $AUDIT_LOG at once (the CLI
# may leave through os._exit after a synth: nothing at exit would run).
AUDITED = """
import os, sys
log = os.open(os.environ["AUDIT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
seen = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and args[0] not in seen:
        seen.add(args[0])
        name = os.fsdecode(args[0])
        os.write(log, (os.path.abspath(name) + "\\n").encode("utf-8", "surrogateescape"))
sys.addaudithook(hook)
from hyperpod_kit.cli.main import run
sys.argv[0] = "hyperpod-kit"
run()
"""


def source_tree(target: Path) -> Path:
    """The working tree as git sees it (tracked and new files, links kept as links): what a
    clone of the repository at this commit would hold, without ignored build outputs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source, copy = REPO / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet in git
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy, follow_symlinks=False)
    return target


def build(source: Path, hook: str, out: Path) -> Path:
    """Run one setuptools PEP 517 hook (`build_wheel`, `build_sdist`) in `source`, offline."""
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=source, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def record(wheel: Path) -> dict[str, str]:
    """The wheel's RECORD: path -> sha256 (the RECORD's own line has none)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.StringIO(archive.read(name).decode()))
        return {row[0]: row[1] for row in rows if row}


@dataclass
class Installed:
    wheel: Path
    sdist: Path
    sdist_wheel: Path
    venv: Path
    home: Path
    work: Path
    logs: Path

    @property
    def site_packages(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))

    def run(
        self, *args: str, name: str, timeout: int = 600, expect: int = 0, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`hyperpod-kit ARGS` from the venv under `env -i`, in the work folder, audited."""
        log = self.logs / f"{name}.opened"
        env = {
            "PATH": f"{self.venv / 'bin'}:{SYSTEM_PATH}",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "AUDIT_LOG": str(log),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "CDK_DISABLE_CLI_TELEMETRY": "true",
        }
        python = self.venv / "bin" / "python"
        done = subprocess.run(
            ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
             str(python), "-c", AUDITED, *args],
            cwd=cwd or self.work, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        assert done.returncode == expect, f"{args}: exit {done.returncode}\n{done.stderr[-4000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-4000:]
        return done

    def opened(self, name: str) -> set[Path]:
        lines = (self.logs / f"{name}.opened").read_text().splitlines()
        return {Path(os.path.realpath(line)) for line in lines}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source = source_tree(base / "src")
    dist = base / "dist"
    wheel = build(source, "build_wheel", dist)
    sdist = build(source, "build_sdist", dist)
    with tarfile.open(sdist) as archive:
        archive.extractall(base / "unpacked", filter="data")
    (unpacked,) = (base / "unpacked").iterdir()
    sdist_wheel = build(unpacked, "build_wheel", base / "dist-from-sdist")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        # --no-compile: the interpreter writes the bytecode of what the commands import, not of
        # every module of every dependency (aws-cdk-lib's are most of the install's time)
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         "--no-compile",
         "-r", str(REPO / "requirements.txt"), str(wheel)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    for folder in ("home", "work", "logs"):
        (base / folder).mkdir()
    yield Installed(wheel, sdist, sdist_wheel, venv, base / "home", base / "work", base / "logs")


def repository_files(*prefixes: str) -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *prefixes],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {name for name in listed if (REPO / name).is_file()}


def test_the_wheel_carries_the_repository_layout(installed: Installed) -> None:
    """Every file of lifecycle/, assets/, the default environment and the CDK CLI's pin is in the
    wheel under hyperpod_kit/_bundled, the trainer's package also as hyperpod_trainer, and the
    wheel holds nothing else from those folders (no caches, no build outputs)."""
    names = set(record(installed.wheel))
    tracked = repository_files(*BUNDLED)
    bundled = {n.removeprefix("hyperpod_kit/_bundled/") for n in names if "/_bundled/" in n}
    assert tracked - bundled == set(), "in the repository, not in the wheel"
    assert bundled - tracked == set(), "in the wheel, not in the repository"
    trainer = {n for n in tracked if n.startswith("assets/trainer/hyperpod_trainer/")}
    shipped = {n for n in names if n.startswith("hyperpod_trainer/")}
    assert {n.removeprefix("assets/trainer/") for n in trainer} == shipped
    assert not [n for n in names if "__pycache__" in n or ".egg-info" in n]


def test_an_sdist_builds_the_same_wheel(installed: Installed) -> None:
    """The sdist's wheel holds the same files with the same contents (RECORD's hashes)."""
    assert installed.sdist.name == "hyperpod_kit-0.1.0.tar.gz"
    direct, from_sdist = record(installed.wheel), record(installed.sdist_wheel)
    assert direct == from_sdist


def test_the_installed_toolkit_finds_its_files_in_site_packages(installed: Installed) -> None:
    code = "import hyperpod_kit.paths as p; print(p.LIFECYCLE_DIR, p.TRAINER_DIR, p.PACKAGE_JSON)"
    done = installed.run("--version", name="version")
    assert done.stdout.startswith("hyperpod-kit 0.1.0")
    python = installed.venv / "bin" / "python"
    where = subprocess.run(
        ["/usr/bin/env", "-i", f"PATH={SYSTEM_PATH}", str(python), "-c", code],
        cwd=installed.work, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    site = installed.site_packages.resolve()
    assert all(Path(p).is_relative_to(site / "hyperpod_kit" / "_bundled") for p in where), where
    assert (Path(where[1]) / "Dockerfile").is_file()


def test_from_an_empty_folder(installed: Installed) -> None:
    """A project of one's own (`init --project`), then validate, schema, synth (both gates),
    jobs, plan, and the rehearsal of what it wrote: from the wheel, in a folder outside the
    repository that starts empty."""
    assert list(installed.work.iterdir()) == []
    installed.run("init", "--project", "team", "--no-input", name="init")
    project, env = installed.work / "team", "environments/hyperpod-dev.yaml"
    assert (project / env).is_file() and (project / "cdk.json").is_file()
    installed.run("validate", env, name="validate", cwd=project)
    schema = installed.run("schema", name="schema", cwd=project)
    assert json.loads(schema.stdout)["title"]
    installed.run("synth", env, "-q", name="synth", cwd=project)
    assert (project / "cdk.out" / "manifest.json").is_file()
    installed.run("jobs", env, "-o", "jobs", name="jobs", cwd=project)
    assert any((project / "jobs").iterdir())
    plan = installed.run("plan", env, "--baseline", "cdk.out", name="plan", cwd=project)
    assert "0 dangerous" in plan.stdout + plan.stderr
    installed.run("check", "--rehearse", env, name="rehearse", cwd=project)


COMMANDS = ("version", "init", "validate", "schema", "synth", "jobs", "plan", "rehearse")


def installed_records(site_packages: Path) -> dict[str, set[Path]]:
    """Every installed distribution's files (RECORD), by distribution folder name."""
    files: dict[str, set[Path]] = {}
    for record_file in site_packages.glob("*.dist-info/RECORD"):
        rows = csv.reader(io.StringIO(record_file.read_text()))
        files[record_file.parent.name] = {
            Path(os.path.realpath(site_packages / row[0])) for row in rows if row
        }
    return files


def source(path: Path) -> Path:
    """A module's source for its bytecode (`__pycache__/name.cpython-311.pyc` -> `name.py`): the
    interpreter may write bytecode pip did not, but the module it came from was installed."""
    if path.parent.name == "__pycache__" and path.suffix == ".pyc":
        return path.parent.parent / f"{path.name.split('.')[0]}.py"
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_every_file_the_commands_open_is_installed(installed: Installed, command: str) -> None:
    """Recorded, not listed by hand: each file the command opened under the venv is in a RECORD
    (the toolkit's own files in hyperpod-kit's), and none is under the repository."""
    log = installed.logs / f"{command}.opened"
    if not log.exists():
        pytest.skip("test_from_an_empty_folder did not run this command")
    opened = installed.opened(command)
    assert opened, "the audit hook recorded nothing"
    venv = installed.venv.resolve()
    assert [p for p in opened if p.is_relative_to(REPO)] == []
    records = installed_records(installed.site_packages.resolve())
    ours = next(files for name, files in records.items() if name.startswith("hyperpod_kit-"))
    anyone = set().union(*records.values())
    site = installed.site_packages.resolve()
    under_venv = {source(p) for p in opened if p.is_relative_to(venv) and p.is_file()}
    toolkit = {p for p in under_venv if p.relative_to(site).parts[:1] in {(t,) for t in TOOLKIT}}
    assert toolkit, "the command opened none of the toolkit's files"
    if command == "synth":  # the node scripts render from the bundled lifecycle templates
        lifecycle = site / "hyperpod_kit" / "_bundled" / "lifecycle"
        assert any(p.is_relative_to(lifecycle) for p in toolkit)
    assert toolkit - ours == set(), "opened, not in hyperpod-kit's RECORD"
    outside = {p for p in under_venv - toolkit if p.is_relative_to(site)}
    assert outside - anyone == set(), "opened, in no distribution's RECORD"


def test_wheel_record_hashes_are_the_files(installed: Installed) -> None:
    """What pip installed is byte for byte what the wheel's RECORD says (a spot check of the
    bundled folders, where a link could have been packed instead of its file)."""
    site = installed.site_packages
    for name, digest in record(installed.wheel).items():
        if "/_bundled/" not in name:
            continue
        data = (site / name).read_bytes()
        expected = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
        assert expected.rstrip("=") == digest, name


def test_the_construct_library_example_from_the_wheel(installed: Installed) -> None:
    """examples/existing-app, copied outside the repository and run by the wheel's Python: an app
    with its own VPC and bucket gets a HyperPod cluster, FSx and Studio from `hyperpod_kit.cdk`,
    and both gates pass on the whole app (cdk-nag on the app's own stack too). The one synth of
    the example in the suite."""
    app = installed.work.parent / "existing-app"
    shutil.copytree(REPO / "examples" / "existing-app", app)
    env = {
        "PATH": f"{installed.venv / 'bin'}:{SYSTEM_PATH}",
        "HOME": str(installed.home),
        "LANG": "C.UTF-8",
        "CDK_OUTDIR": str(app / "cdk.out"),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    code = "import hyperpod_kit.cdk as m, runpy; print(m.__file__); runpy.run_path('app.py')"
    done = subprocess.run(
        ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
         str(installed.venv / "bin" / "python"), "-c", code],
        cwd=app, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert Path(done.stdout.split()[0]).is_relative_to(installed.site_packages)
    assert "cdk-nag AwsSolutions: 0 errors" in done.stderr, done.stderr[-4000:]
    assert "cfn-lint: 0 errors" in done.stderr, done.stderr[-4000:]
    manifest = json.loads((app / "cdk.out" / "manifest.json").read_text())
    stacks = {k for k, a in manifest["artifacts"].items() if a["type"].endswith(":stack")}
    areas = ("network", "storage", "cluster", "studio", "monitoring")
    assert stacks == {"shared", *(f"hyperpod-shared-{a}" for a in areas)}
    network = (app / "cdk.out" / "hyperpod-shared-network.template.json").read_text()
    assert "AWS::EC2::VPC" not in network and "shared:ExportsOutputRefVpc" in network
