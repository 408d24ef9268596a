"""The Studio package: the toolkit's wheel built with zipfile alone (deterministic, setuptools'
file set, a RECORD that is the files), and the environment snapshot that reads back to the same
config and stands alone."""

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
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config import ConfigError
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.studio_package import (
    CONSOLE_SCRIPTS,
    ENVIRONMENT_FILE,
    INSTALL_FILE,
    INSTALL_SCRIPT,
    INSTALL_SCRIPT_NAME,
    PACKAGE_DATA,
    SUMS_FILE,
    build_wheel,
    environment_snapshot,
    snapshot_files,
    write_snapshot,
    write_studio_package,
)
from tests.conftest import REPO, default_data, merge

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DIST_INFO = "hyperpod_kit-0.1.0.dist-info"
# The repository's top-level files the wheel carries under hyperpod_kit/_bundled.
BUNDLED = ("lifecycle/", "assets/", "environments/default.yaml",
           "environments/environment.schema.json", "package.json", "package-lock.json")  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def _record(archive: zipfile.ZipFile) -> list[list[str]]:
    return list(csv.reader(io.StringIO(archive.read(f"{DIST_INFO}/RECORD").decode())))


def _tracked(*prefixes: str) -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *prefixes],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {name for name in listed if (REPO / name).is_file()}


def test_the_wheel_is_the_same_bytes_at_every_build(wheel: Path, tmp_path: Path) -> None:
    again = build_wheel(tmp_path / "again")
    assert again.name == wheel.name == "hyperpod_kit-0.1.0-py3-none-any.whl"
    assert again.read_bytes() == wheel.read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert [i.filename for i in infos[: -len(infos) + 1]] != []  # not empty
    names = [i.filename for i in infos]
    body = [n for n in names if not n.startswith(DIST_INFO)]
    assert body == sorted(body) and names[-1] == f"{DIST_INFO}/RECORD"


def test_the_record_is_every_file_with_its_hash_and_size(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        rows = _record(archive)
        names = archive.namelist()
        for name, digest, size in rows:
            if name.endswith("/RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
            assert digest == "sha256=" + expected.rstrip("="), name
            assert int(size) == len(data), name
    assert sorted(r[0] for r in rows) == sorted(names)


def test_the_wheel_holds_what_setuptools_packs(wheel: Path) -> None:
    """Every module, the package data pyproject names, the repository's bundled folders (through
    hyperpod_kit/_bundled's links) and the trainer's package; no caches."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        executable = {i.filename for i in archive.infolist() if (i.external_attr >> 16) & 0o111}
    modules = {
        n for n in _tracked("hyperpod_kit", "assets/trainer/hyperpod_trainer") if n.endswith(".py")
    }
    assert {m for m in modules if m.startswith("hyperpod_kit/")} <= names
    trainer = {m.removeprefix("assets/trainer/") for m in modules if m.startswith("assets/")}
    assert trainer and trainer <= names
    bundled = _tracked(*BUNDLED)
    inside = {n.removeprefix("hyperpod_kit/_bundled/") for n in names if "/_bundled/" in n}
    assert inside == bundled
    facts = {n for n in _tracked("hyperpod_kit/config/facts") if n.endswith(".json")}
    assert facts and facts <= names and "hyperpod_kit/py.typed" in names
    assert "hyperpod_kit/_bundled/assets/studio/client.sh" in executable
    assert "hyperpod_kit/cli/main.py" not in executable
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "egg-info" in n]
    # The rule is pyproject.toml's: the copy an installed toolkit uses is the same.
    assert PYPROJECT["tool"]["setuptools"]["package-data"] == PACKAGE_DATA


def test_the_metadata_is_pyprojects(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(f"{DIST_INFO}/METADATA").decode()
        entry_points = archive.read(f"{DIST_INFO}/entry_points.txt").decode()
        wheel_file = archive.read(f"{DIST_INFO}/WHEEL").decode()
    project = PYPROJECT["project"]
    lines = meta.splitlines()
    assert "Name: hyperpod-kit" in lines and "Version: 0.1.0" in lines
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line]
    assert requires[: len(project["dependencies"])] == project["dependencies"]
    assert 'matplotlib==3.11.2; extra == "verify"' in requires
    assert "Provides-Extra: verify" in lines
    assert f"Requires-Python: {project['requires-python']}" in lines
    scripts = dict(line.split(" = ") for line in entry_points.splitlines()[1:])
    assert entry_points.startswith("[console_scripts]\n")
    assert scripts == CONSOLE_SCRIPTS == project["scripts"]
    assert "Tag: py3-none-any" in wheel_file and "Root-Is-Purelib: true" in wheel_file


def test_an_installed_toolkit_builds_the_same_wheel(wheel: Path, tmp_path: Path) -> None:
    """From the wheel unpacked as pip would (no pyproject.toml beside it: the metadata comes from
    the installed distribution), build_wheel gives the same bytes again."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        for info in archive.infolist():  # pip keeps the executable bit; extractall does not
            if (info.external_attr >> 16) & 0o111:
                os.chmod(site / info.filename, 0o755)
    code = (
        "import sys; from pathlib import Path; import hyperpod_kit.studio_package as p; "
        "assert p.__file__.startswith(sys.argv[1]), p.__file__; "
        "print(p.build_wheel(Path(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(site), str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = Path(done.stdout.split()[-1])
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(rebuilt) as b:
        assert _record(a) == _record(b)
    assert rebuilt.read_bytes() == wheel.read_bytes()


# --- the environment snapshot ------------------------------------------------------------------

ENVIRONMENTS = sorted(
    p.relative_to(REPO).as_posix()
    for p in [*REPO.glob("environments/**/*.yaml"), *REPO.glob("examples/*/environment.yaml")]
    if "abstract: true" not in p.read_text()
)


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_every_example_snapshot_reads_back_to_an_equal_config(name: str, tmp_path: Path) -> None:
    config = load_environment(REPO / name).config
    written = write_snapshot(config, tmp_path)
    again = load_environment(written).config
    assert again.model_dump() == config.model_dump()
    assert "extends" not in yaml.safe_load(written.read_text())


def _with_paths(tmp_path: Path) -> tuple[Path, Path]:
    """An environment in envs/ that extends a base in shared/ (its job template relative to
    shared/), with a lifecycle script by absolute path and one outside its folder ("../")."""
    shared, envs, outside = tmp_path / "shared", tmp_path / "envs", tmp_path / "scripts"
    for folder in (shared / "templates", envs, outside):
        folder.mkdir(parents=True)
    template = (REPO / "hyperpod_kit/jobs/templates/slurm.sbatch.j2").read_text()
    (shared / "templates" / "job.sbatch.j2").write_text("# ours\n" + template)
    (outside / "a.sh").write_text("#!/bin/bash\necho a\n")
    absolute = tmp_path / "abs.sh"
    absolute.write_text("#!/bin/bash\necho abs\n")
    base = merge(default_data(), {"trainer": {"job": {"template": "templates/job.sbatch.j2"}}})
    (shared / "base.yaml").write_text(yaml.safe_dump({"abstract": True, **base}, sort_keys=False))
    groups = default_data()["cluster"]["instance_groups"]
    groups[2]["lifecycle"] = {"scripts": [str(absolute), "../scripts/a.sh"]}
    env = {
        "extends": "../shared/base.yaml",
        "name": "paths",
        "cluster": {"instance_groups": groups},
    }
    (envs / "env.yaml").write_text(yaml.safe_dump(env, sort_keys=False))
    return envs / "env.yaml", absolute


def _without_paths(data: dict[str, Any]) -> dict[str, Any]:
    data["trainer"]["job"]["template"] = None
    for group in data["cluster"]["instance_groups"]:
        group["lifecycle"]["scripts"] = []
    return data


def test_a_snapshot_carries_the_files_its_config_names(tmp_path: Path) -> None:
    """Paths written relative to another folder (a base's), absolute or with "..": copied into
    the snapshot's folder and named from there; everything else equal; the original files gone,
    the snapshot still loads and reads the same contents."""
    env, absolute = _with_paths(tmp_path)
    config = load_environment(env).config
    files = snapshot_files(config)
    kept = "templates/job.sbatch.j2"  # relative and inside: kept as written, copied there
    assert files[kept] == (tmp_path / "shared" / kept).resolve()
    moved = {n: p for n, p in files.items() if n != kept}
    assert sorted(p.name for p in moved.values()) == ["a.sh", "abs.sh"]
    assert all(n.startswith("files/") for n in moved)

    snapshot = tmp_path / "snapshot"
    written = write_snapshot(config, snapshot)
    for folder in ("shared", "envs", "scripts"):
        shutil.rmtree(tmp_path / folder)
    absolute.unlink()
    again = load_environment(written).config
    assert _without_paths(again.model_dump()) == _without_paths(config.model_dump())
    assert again.trainer.job.template == kept
    assert again.resolve_path(kept).read_text().startswith("# ours\n")
    scripts = again.cluster.instance_groups[2].lifecycle.scripts
    assert [again.resolve_path(s).read_text() for s in scripts] == [
        "#!/bin/bash\necho abs\n",
        "#!/bin/bash\necho a\n",
    ]
    assert environment_snapshot(again) == environment_snapshot(config)


def test_a_snapshot_without_its_files_is_refused(tmp_path: Path) -> None:
    """The neighbour: the same snapshot text alone names files that are not there."""
    env, _ = _with_paths(tmp_path)
    lonely = tmp_path / "lonely" / ENVIRONMENT_FILE
    lonely.parent.mkdir()
    lonely.write_text(environment_snapshot(load_environment(env).config))
    with pytest.raises(ConfigError) as err:
        load_environment(lonely)
    assert "trainer.job.template" in str(err.value)


def test_the_studio_package_folder(tmp_path: Path) -> None:
    config = load_environment(REPO / "environments/studio-slurm.yaml").config
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:abc"
    folder = write_studio_package(config, tmp_path / "package", trainer_image=image)
    install = json.loads((folder / INSTALL_FILE).read_text())
    wheel = folder / install["wheel"]
    assert install["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert install["environment"] == f"environment/{ENVIRONMENT_FILE}"
    assert install["trainer_image"] == image
    assert (
        load_environment(folder / install["environment"]).config.model_dump() == config.model_dump()
    )
    assert (folder / INSTALL_SCRIPT_NAME).read_bytes() == INSTALL_SCRIPT.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["environment", INSTALL_FILE, INSTALL_SCRIPT_NAME, SUMS_FILE, wheel.name]
    )
    # SHA256SUMS: every other file, as `sha256sum -c` checks them.
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != SUMS_FILE
    )
    sums = [line.split("  ", 1) for line in (folder / SUMS_FILE).read_text().splitlines()]
    assert [name for _, name in sums] == files
    assert f"{install['sha256']}  {wheel.name}" in (folder / SUMS_FILE).read_text()
    checked = subprocess.run(
        ["sha256sum", "-c", "--quiet", SUMS_FILE], cwd=folder, capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stdout
    (folder / ENVIRONMENT_FILE).write_text("not in the sums\n")  # extra files: not checked
    (folder / "environment" / ENVIRONMENT_FILE).write_text("name: changed\n")
    checked = subprocess.run(
        ["sha256sum", "-c", "--quiet", SUMS_FILE], cwd=folder, capture_output=True, check=False
    )
    assert checked.returncode != 0 and b"environment/environment.yaml" in checked.stdout
    (folder / ENVIRONMENT_FILE).unlink()

    again = write_studio_package(config, tmp_path / "again", trainer_image=image)
    nothing = write_studio_package(config, tmp_path / "none")
    assert json.loads((nothing / INSTALL_FILE).read_text())["trainer_image"] is None
    write_snapshot(config, folder / "environment")  # back as it was
    assert {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()} == {
        p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_a_new_job_setting_moves_only_the_package_and_its_parameter(tmp_path: Path) -> None:
    """What `plan` meets when trainer.job changes (here `task`): the lifecycle configurations
    (create-only, named after their content) stay as they are; the package differs only in the
    environment snapshot and its sum, so only its asset hash moves, and with it the value of the
    SSM parameter that holds its URL, which CloudFormation updates in place."""
    from hyperpod_kit.plan import create_only_properties
    from hyperpod_kit.studio_lifecycle import lifecycle_settings, render_lifecycle_script

    config = load_environment(REPO / "environments/studio-slurm.yaml").config
    job = config.trainer.job.model_copy(update={"task": "sft"})
    changed = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    scripts = [
        render_lifecycle_script(
            lifecycle_settings(c, file_system_id="fs-0123456789abcdef0", eks=None)
        )
        for c in (config, changed)
    ]
    assert scripts[0] == scripts[1]
    before = write_studio_package(config, tmp_path / "before")
    after = write_studio_package(changed, tmp_path / "after")

    def files(folder: Path) -> dict[str, bytes]:
        return {p.relative_to(folder).as_posix(): p.read_bytes()
                for p in folder.rglob("*") if p.is_file()}  # fmt: skip

    old, new = files(before), files(after)
    assert sorted(old) == sorted(new)
    assert sorted(n for n in old if old[n] != new[n]) == [
        SUMS_FILE,
        f"environment/{ENVIRONMENT_FILE}",
    ]
    assert "Value" not in create_only_properties("AWS::SSM::Parameter")
