"""The toolkit in a Studio space: the Studio package (`hyperpod_kit.studio_package`) installed
by its own install.sh into a Python that holds only what a Studio image brings of the toolkit's
dependencies (boto3, botocore, pydantic, PyYAML, Jinja2, jsonschema, rich, packaging, at
requirements.txt's pins, and what pip resolves for them): no aws-cdk-lib, constructs, cdk-nag,
cfn-lint or parliament. Then `hyperpod-kit job` from there, under `env -i`, in a folder outside
the repository: its help, a job rendered from the package's environment snapshot with the
trainer image install.json recorded at synth (no --image), and a submit to a Slurm whose client
commands are stand-ins printing what Debian's Slurm prints.

One venv for the module (`python -m venv`, no system site packages) that sees only those
distributions, linked from this interpreter's (installed at requirements.txt's pins);
install.sh's `pip install --user` goes to that venv (a venv takes no --user install: the
stand-in python3 drops the flag, and keeps --no-deps --no-index).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.studio_package import write_studio_package
from tests.conftest import REPO
from tests.integration.test_wheel import SYSTEM_PATH

pytestmark = pytest.mark.slow

# What a Studio image has of the toolkit's dependencies (requirements.txt pins their versions).
STUDIO_DEPENDENCIES = (
    "boto3", "botocore", "pydantic", "PyYAML", "Jinja2", "jsonschema", "rich", "packaging",
)  # fmt: skip
HEAVY = ("aws_cdk", "constructs", "cdk_nag", "cfnlint", "parliament", "jsii")
TRAINER_IMAGE = (
    "123456789012.dkr.ecr.us-west-2.amazonaws.com/"
    "cdk-hnb659fds-container-assets-123456789012-us-west-2:0a1b2c3d"
)
# The stand-in python3 of the space: install.sh's pip goes to the venv, without --user.
PYTHON3 = """#!/bin/bash
if [[ "$1 $2" == "-m pip" ]]; then
  args=(); for a in "$@"; do [[ "$a" == --user ]] || args+=("$a"); done
  exec {python} "${{args[@]}}"
fi
exec {python} "$@"
"""
# Slurm's client commands as Debian's Slurm answers (`sbatch --parsable`: the job id alone;
# `sinfo -h -o %T|%D|%P`: state|nodes|partition, a `*` after the default one).
SBATCH = '#!/bin/bash\necho "sbatch $*" >>{calls}\necho 4711\n'
SQUEUE = "#!/bin/bash\nexit 0\n"  # no jobs yet
SACCT = "#!/bin/bash\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n"
SINFO = '#!/bin/bash\necho "sinfo $*" >>{calls}\nprintf "idle|2|compute*\\nalloc|1|compute*\\n"\n'


def pins(names: tuple[str, ...]) -> list[str]:
    """requirements.txt's `name==version` of each of `names` (all of them pinned there)."""
    wanted = {n.lower(): n for n in names}
    found = []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match and match[1].lower() in wanted:
            found.append(f"{match[1]}=={match[2]}")
    assert len(found) == len(names), f"requirements.txt pins {found}, not all of {names}"
    return found


def link_distributions(wanted: list[str], site: Path) -> list[str]:
    """Link into `site` the files of the distributions `wanted` (`name==version`, as installed
    here) and of everything they require (markers of this interpreter; no extras), the way a
    Studio image holds them installed; the names linked."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    site.mkdir(parents=True)
    todo = [Requirement(w) for w in wanted]
    done: list[str] = []
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in done:
            continue
        dist = metadata.distribution(name)
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"{name} {dist.version} is installed here, not {requirement}"
        )
        done.append(name)
        for path in dist.files or []:
            top = path.parts[0]
            source = Path(str(dist.locate_file(top)))
            if top not in ("..", "__pycache__") and source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
        for line in dist.requires or []:
            needed = Requirement(line)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                todo.append(Requirement(needed.name))
    return sorted(done)


@dataclass
class Space:
    venv: Path
    home: Path
    work: Path
    bin: Path
    calls: Path

    @property
    def environment_file(self) -> Path:
        return self.home / ".hyperpod-kit" / "environment.yaml"

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`hyperpod-kit ARGS` from the venv under `env -i` (no PYTHONPATH), in the work folder."""
        base = {
            "PATH": f"{self.bin}:{self.venv / 'bin'}:{SYSTEM_PATH}",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
        }
        done = subprocess.run(
            ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in (base | (env or {})).items()),
             str(self.venv / "bin" / "hyperpod-kit"), *args],
            cwd=self.work, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr[-4000:]
        return done


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Space:
    base = tmp_path_factory.mktemp("studio-install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # Only those distributions (and what they require), linked from this interpreter's, where
    # requirements.txt installed them at its pins: nothing else is importable in the venv.
    site = base / "studio-image-site"
    linked = link_distributions(pins(STUDIO_DEPENDENCIES), site)
    assert "aws-cdk-lib" not in linked and "pydantic-core" in linked, linked
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", where],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "studio-image.pth").write_text(f"{site}\n")
    config = load_environment(REPO / "environments/studio-slurm.yaml").config
    package = write_studio_package(config, base / "package", trainer_image=TRAINER_IMAGE)
    home, work, bin_dir = base / "home", base / "work", base / "bin"
    for folder in (home, work, bin_dir):
        folder.mkdir()
    calls = base / "slurm-calls.log"
    for name, text in {
        "python3": PYTHON3.format(python=venv / "bin" / "python"),
        "sbatch": SBATCH.format(calls=calls),
        "sinfo": SINFO.format(calls=calls),
        "squeue": SQUEUE,
        "sacct": SACCT,
    }.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    state = home / ".hyperpod-kit"
    installed = subprocess.run(
        ["bash", str(package / "install.sh"), str(state), str(home)],
        env={"PATH": f"{bin_dir}:{SYSTEM_PATH}", "HOME": str(home), "LANG": "C.UTF-8"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    return Space(venv, home, work, bin_dir, calls)


def test_the_space_has_the_toolkit_and_none_of_the_cdk(space: Space) -> None:
    python = str(space.venv / "bin" / "python")
    code = (
        "import importlib.util as u, sys; import hyperpod_kit; print(hyperpod_kit.__file__); "
        f"print([m for m in {HEAVY!r} if u.find_spec(m)])"
    )
    done = subprocess.run(
        ["/usr/bin/env", "-i", f"PATH={SYSTEM_PATH}", python, "-c", code],
        cwd=space.work, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    where, heavy = done.stdout.splitlines()
    assert Path(where).is_relative_to(space.venv) and heavy == "[]"
    bashrc = (space.home / ".bashrc").read_text()
    assert 'HYPERPOD_KIT_ENVIRONMENT_FILE="${HOME}/.hyperpod-kit/environment.yaml"' in bashrc
    assert (space.environment_file.parent / "install.json").is_file()

    helped = space.run("job", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "render" in helped.stdout and "submit" in helped.stdout


def test_a_job_renders_from_the_snapshot_with_the_recorded_trainer_image(space: Space) -> None:
    """No --image and no aws-cdk-lib to compute it: the image is install.json's, found beside
    the environment file HYPERPOD_KIT_ENVIRONMENT_FILE names."""
    env = {"HYPERPOD_KIT_ENVIRONMENT_FILE": str(space.environment_file)}
    done = space.run("job", "render", str(space.environment_file), "-o", "out", "-q", env=env)
    assert done.returncode == 0, done.stderr
    (job,) = (space.work / "out").glob("*.sbatch")
    assert f"IMAGE=${{TRAINER_IMAGE:-{TRAINER_IMAGE}}}" in job.read_text()

    # Without the record (a snapshot outside a space), nothing names the image: exit 2, one line.
    done = space.run("job", "render", str(space.environment_file), "-o", "other", "-q")
    assert done.returncode == 2 and "--image" in done.stderr, done.stderr


def test_a_job_submits_to_the_cluster_s_slurm(space: Space) -> None:
    env = {"HYPERPOD_KIT_ENVIRONMENT_FILE": str(space.environment_file)}
    done = space.run(
        "job", "submit", str(space.environment_file), "--yes", "--folder", "F", "-q", env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4711"
    assert "submitted" in done.stderr and "4711" in done.stderr
    assert "2 of 3 free (sinfo -p compute: alloc 1, idle 2)" in done.stderr  # sinfo, as read
    calls = space.calls.read_text().splitlines()
    folder = os.path.realpath(space.work / "F")
    assert calls[-1].startswith("sbatch --parsable") and calls[-1].endswith(".sbatch")
    assert f"--chdir={folder}" in calls[-1]
    assert any(c.startswith("sinfo -h -o %T|%D|%P") for c in calls)
    (job,) = (space.work / "F").glob("*.sbatch")
    assert TRAINER_IMAGE in job.read_text()
