"""The toolkit as a Studio space installs it: a wheel and the environment file, built at synth.

`build_wheel` packs the running toolkit (``hyperpod_kit`` and ``hyperpod_trainer``) into a
``py3-none-any`` wheel with nothing but `zipfile`: the files setuptools would pack by
pyproject.toml's rules (every module, and the package data its globs name), entries in a fixed
order with a fixed time and mode, so the same sources give the same bytes at every synth (the S3
asset's hash moves only when the toolkit does). It works from a checkout (the metadata from
pyproject.toml) and from an installed wheel (the installed distribution's metadata).

`environment_snapshot` writes the validated config as one YAML file that `load_environment`
reads back to an equal config; `snapshot_files` names the files and folders that config holds as
paths relative to its environment file (a base's own folder for a path written in a base), to be
copied beside it so the snapshot stands alone. `write_studio_package` puts them together in one
folder with ``install.json`` (the wheel's name and sha256, the trainer image), ``install.sh``
(what a space runs to install it) and ``SHA256SUMS``: the Studio stack's asset.

Light: the standard library, PyYAML and the config schema (no CDK): `validate` may call it.
"""

from __future__ import annotations

import atexit
import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.paths import ASSETS

DISTRIBUTION = "hyperpod-kit"
PACKAGES = ("hyperpod_kit", "hyperpod_trainer")
CONSOLE_SCRIPTS = {"hyperpod-kit": "hyperpod_kit.cli.main:run"}
# 1980-01-01, the earliest time a zip entry holds (SOURCE_DATE_EPOCH's usual floor for wheels).
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
# What a checkout may hold beside the sources that no build packs (pyproject's
# exclude-package-data, and the caches tools leave).
EXCLUDED_PARTS = frozenset(
    {"__pycache__", ".ruff_cache", ".mypy_cache", ".pytest_cache", ".hypothesis", ".git"}
)
EXCLUDED_NAMES = ("*.pyc", "*.pyo", "*.egg-info", "*~", "*.swp", ".DS_Store")
# pyproject.toml's package-data, for an installed toolkit (no pyproject.toml beside it); a test
# compares it with the file.
PACKAGE_DATA = {
    "hyperpod_kit": [
        "py.typed", "config/facts/*.json", "jobs/templates/*", "cli/templates/*",
        "cli/templates/github/*", "cli/templates/project/*", "rehearsal/site/*.py",
        "_bundled/package.json", "_bundled/package-lock.json", "_bundled/environments/*",
        "_bundled/lifecycle/**/*", "_bundled/assets/**/*", "_bundled/assets/**/.dockerignore",
    ],
}  # fmt: skip
ENVIRONMENT_FILE = "environment.yaml"
INSTALL_FILE = "install.json"
SUMS_FILE = "SHA256SUMS"
INSTALL_SCRIPT_NAME = "install.sh"  # the package's own installer, run by the space
INSTALL_SCRIPT = ASSETS / "studio" / "package-install.sh"
SNAPSHOT_FOLDER = "environment"  # the package's environment.yaml and its files, in a folder
SNAPSHOT_FILES = "files"  # where a path that would leave the snapshot's folder is copied
_NAME = re.compile(r"[^A-Za-z0-9.]+")


# --- the wheel ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where the running toolkit comes from: the folder its packages are in, and its metadata."""

    root: Path
    name: str
    version: str
    metadata: str  # METADATA's text
    package_data: dict[str, list[str]]


def _source() -> _Source:
    root = Path(__file__).resolve().parent.parent  # hyperpod_kit's parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        table = project["project"]
        data = project.get("tool", {}).get("setuptools", {}).get("package-data", PACKAGE_DATA)
        return _Source(root, table["name"], table["version"], _metadata_text(table), dict(data))
    installed = metadata.distribution(DISTRIBUTION)
    text = (installed.read_text("METADATA") or "").strip() + "\n"
    return _Source(root, installed.metadata["Name"], installed.version, text, PACKAGE_DATA)


def _metadata_text(project: dict[str, Any]) -> str:
    """Core metadata 2.1 from pyproject.toml's [project] (what setuptools writes of it, without
    the long description: a Studio space shows no README)."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if isinstance(project.get("license"), str):
        lines.append(f"License: {project['license']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, wanted in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in wanted]
    return "\n".join(lines) + "\n"


def _excluded(relative: PurePosixPath) -> bool:
    return bool(EXCLUDED_PARTS.intersection(relative.parts)) or any(
        fnmatchcase(part, pattern) for part in relative.parts for pattern in EXCLUDED_NAMES
    )


def _walk(folder: Path) -> Iterator[PurePosixPath]:
    """Every file under `folder` (links followed, as setuptools' build follows them), relative."""
    for top, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(top) / name
            relative = PurePosixPath(path.relative_to(folder).as_posix())
            if path.is_file() and not _excluded(relative):
                yield relative


def _data_matches(relative: PurePosixPath, patterns: list[str]) -> bool:
    """A package-data glob as setuptools reads it: ``**`` any folders, ``*`` within one name."""
    text = relative.as_posix()
    for pattern in patterns:
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        if re.fullmatch(regex, text):
            return True
    return False


def package_files(source: _Source | None = None) -> dict[str, Path]:
    """The wheel's files (its path -> the file), as setuptools packs them: every module (``.py``)
    of the packages (pyproject finds namespace packages, so every folder below counts) and the
    data files the package-data globs name."""
    source = source or _source()
    found: dict[str, Path] = {}
    for package in PACKAGES:
        folder = source.root / package
        patterns = source.package_data.get(package, [])
        for relative in _walk(folder):
            if relative.suffix == ".py" or _data_matches(relative, patterns):
                found[f"{package}/{relative.as_posix()}"] = folder / relative
    return dict(sorted(found.items()))


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def _entry(name: str, executable: bool = False) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    mode = 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    return info


def wheel_name(name: str, version: str) -> str:
    return f"{_NAME.sub('_', name).lower()}-{version}-py3-none-any.whl"


def build_wheel(out_dir: Path) -> Path:
    """The running toolkit as a wheel in `out_dir` (created if missing); the same sources give
    the same bytes."""
    source = _source()
    files = package_files(source)
    dist_info = f"{_NAME.sub('_', source.name).lower()}-{source.version}.dist-info"
    scripts = "".join(f"{k} = {v}\n" for k, v in sorted(CONSOLE_SCRIPTS.items()))
    generated = {
        f"{dist_info}/METADATA": source.metadata.encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hyperpod-kit studio_package\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{dist_info}/entry_points.txt": f"[console_scripts]\n{scripts}".encode(),
        f"{dist_info}/top_level.txt": "".join(f"{p}\n" for p in PACKAGES).encode(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel_name(source.name, source.version)
    partial = target.with_name(f".{target.name}.partial")
    rows: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            data = path.read_bytes()
            executable = bool(path.stat().st_mode & 0o111)
            archive.writestr(_entry(name, executable), data, compresslevel=9)
            rows.append((name, _hash(data), str(len(data))))
        for name, data in generated.items():
            archive.writestr(_entry(name), data, compresslevel=9)
            rows.append((name, _hash(data), str(len(data))))
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        writer.writerows([*rows, (f"{dist_info}/RECORD", "", "")])
        archive.writestr(_entry(f"{dist_info}/RECORD"), record.getvalue(), compresslevel=9)
    os.replace(partial, target)
    return target


# --- the environment file ----------------------------------------------------------------------


def _path_fields(config: EnvironmentConfig) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(where in the config, value) of every value the config reads as a path relative to its
    file (`EnvironmentConfig.resolve_path`'s users: the validator `files`' list, and
    monitoring.prometheus.packages)."""
    for i, group in enumerate(config.cluster.instance_groups):
        for j, script in enumerate(group.lifecycle.scripts):
            yield ("cluster", "instance_groups", i, "lifecycle", "scripts", j), script
    cluster = config.cluster
    plugins = cluster.eks.device_plugins
    named: dict[tuple[str | int, ...], str | None] = {
        ("cluster", "slurm", "enroot_pyxis_packages"): cluster.slurm.enroot_pyxis_packages,
        ("cluster", "node_setup", "packages"): cluster.node_setup.packages,
        ("cluster", "eks", "helm_chart"): cluster.eks.helm_chart,
        ("cluster", "eks", "device_plugins", "nvidia_chart"): plugins.nvidia_chart,
        ("cluster", "eks", "device_plugins", "efa_chart"): plugins.efa_chart,
        ("monitoring", "prometheus", "packages"): config.monitoring.prometheus.packages,
        ("trainer", "job", "template"): config.trainer.job.template,
    }  # fmt: skip
    for where, value in named.items():
        if value is not None:
            yield where, value


def _inside(value: str) -> bool:
    """A relative path that stays in the folder it starts from (kept as written)."""
    path = PurePosixPath(value)
    return bool(value) and not path.is_absolute() and ".." not in path.parts and "~" not in value


def _snapshot_name(config: EnvironmentConfig, value: str) -> str:
    """Where the snapshot keeps the file or folder `value` names: at `value` itself when it is
    relative and stays in the folder; else under files/, by a hash of where it is now."""
    if _inside(value):
        return PurePosixPath(value).as_posix()
    resolved = config.resolve_path(value).resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    return f"{SNAPSHOT_FILES}/{digest}/{resolved.name}"


def snapshot_files(config: EnvironmentConfig) -> dict[str, Path]:
    """Each path the snapshot names (relative to it) -> the file or folder it is now."""
    return {
        _snapshot_name(config, value): config.resolve_path(value).resolve()
        for _, value in _path_fields(config)
    }


def environment_snapshot(config: EnvironmentConfig) -> str:
    """The config as one YAML file (no `extends:`, every value as validated) that
    `load_environment` reads back to an equal config, given `snapshot_files` beside it."""
    data = config.model_dump(mode="json", exclude_unset=True, by_alias=True)
    for where, value in _path_fields(config):
        node: Any = data
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = _snapshot_name(config, value)
    header = (
        f"# hyperpod-kit: a snapshot of environment {config.name} (written at synth; edit the "
        "environment file, not this one)\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_snapshot(config: EnvironmentConfig, folder: Path) -> Path:
    """environment.yaml and the files it names, in `folder`; returns the environment file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in snapshot_files(config).items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
    path = folder / ENVIRONMENT_FILE
    path.write_text(environment_snapshot(config), encoding="utf-8")
    return path


def _sums(folder: Path) -> str:
    """SHA256SUMS of every file under `folder` (`sha256sum -c` reads it), in a fixed order."""
    lines = []
    for relative in sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
    ):
        if relative == SUMS_FILE:
            continue
        if "\n" in relative or "\\" in relative:  # sha256sum escapes such names
            raise ValueError(f"{relative!r}: the Studio package cannot hold that file name")
        digest = hashlib.sha256((folder / relative).read_bytes()).hexdigest()
        lines.append(f"{digest}  {relative}\n")
    return "".join(lines)


def write_studio_package(
    config: EnvironmentConfig, folder: Path, *, trainer_image: str | None = None
) -> Path:
    """The Studio stack's asset in `folder`: the wheel, the environment snapshot (with its
    files), install.sh (assets/studio/package-install.sh, which the space's lifecycle
    configuration runs), install.json (the wheel, its sha256, the environment file, and
    `trainer_image`: the trainer stack's image URI, or None without one) and SHA256SUMS of them
    all."""
    wheel = build_wheel(folder)
    write_snapshot(config, folder / SNAPSHOT_FOLDER)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    install = {
        "wheel": wheel.name,
        "sha256": digest,
        "environment": f"{SNAPSHOT_FOLDER}/{ENVIRONMENT_FILE}",
        "trainer_image": trainer_image,
    }
    (folder / INSTALL_FILE).write_text(json.dumps(install, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(INSTALL_SCRIPT, folder / INSTALL_SCRIPT_NAME)
    (folder / SUMS_FILE).write_text(_sums(folder))
    return folder


def stage_studio_package(config: EnvironmentConfig, *, trainer_image: str | None = None) -> Path:
    """`write_studio_package` in a temporary folder of this process, removed when it exits (CDK
    copies an asset into the cloud assembly when it synthesizes)."""
    folder = Path(tempfile.mkdtemp(prefix="hyperpod-kit-studio."))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return write_studio_package(config, folder / "package", trainer_image=trainer_image)
