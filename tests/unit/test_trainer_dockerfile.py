"""Static checks of the trainer's Dockerfile: what can be known without a Docker engine.

The image is built by `cdk deploy` (DockerImageAsset) on a machine with Docker; these checks catch
the mistakes that would only show there: an unpinned base, a missing file, a root user.
"""

from __future__ import annotations

import re

import pytest
from dockerfile_parse import DockerfileParser

from hyperpod_kit.constructs.trainer_image import TRAINER_DIR


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    parser = DockerfileParser(path=str(TRAINER_DIR / "Dockerfile"))
    assert parser.structure, "Dockerfile did not parse"
    return parser


def _instructions(parser: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def test_base_image_is_pinned_to_a_release(dockerfile: DockerfileParser) -> None:
    args = dict(a.split("=", 1) for a in _instructions(dockerfile, "ARG") if "=" in a)
    base = args["BASE_IMAGE"]
    assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", base), base  # a versioned tag, never latest
    assert _instructions(dockerfile, "FROM") == ["${BASE_IMAGE}"]


def test_versions_are_pinned(dockerfile: DockerfileParser) -> None:
    args = dict(a.split("=", 1) for a in _instructions(dockerfile, "ARG") if "=" in a)
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["EFA_INSTALLER_VERSION"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["HYPERPOD_ELASTIC_AGENT_VERSION"])
    run = " ".join(_instructions(dockerfile, "RUN"))
    assert "${EFA_INSTALLER_VERSION}" in run
    assert "hyperpod-elastic-agent==${HYPERPOD_ELASTIC_AGENT_VERSION}" in run
    assert "github" not in run.lower()  # nothing fetched from GitHub at build time


def test_copied_files_exist_in_the_asset(dockerfile: DockerfileParser) -> None:
    sources = [c.split()[0] for c in _instructions(dockerfile, "COPY")]
    assert sources
    for source in sources:
        assert (TRAINER_DIR / source).exists(), source


def test_runs_as_a_non_root_user_and_launches_torchrun(dockerfile: DockerfileParser) -> None:
    users = _instructions(dockerfile, "USER")
    assert users and users[-1] not in {"root", "0"}
    entrypoint = _instructions(dockerfile, "ENTRYPOINT")[-1]
    assert "tini" in entrypoint and "torchrun" in entrypoint  # PID 1 forwards SIGTERM
    assert "hyperpod_trainer" in _instructions(dockerfile, "CMD")[-1]


def test_build_context_ignores_caches() -> None:
    ignored = (TRAINER_DIR / ".dockerignore").read_text().split()
    assert "**/__pycache__" in ignored and "**/*.egg-info" in ignored


def test_trainer_runtime_dependencies_are_installed_pinned(dockerfile: DockerfileParser) -> None:
    """The trainer installs with --no-deps: every runtime dependency the NGC image lacks is
    installed explicitly, at the version the tests run with (requirements-dev.txt)."""
    args = dict(a.split("=", 1) for a in _instructions(dockerfile, "ARG") if "=" in a)
    run = " ".join(_instructions(dockerfile, "RUN"))
    dev = (TRAINER_DIR.parents[1] / "requirements-dev.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in dev if "==" in line and not line.startswith("#"))
    for package, arg in (
        ("safetensors", "SAFETENSORS_VERSION"),
        ("tokenizers", "TOKENIZERS_VERSION"),
    ):
        assert f'"{package}==${{{arg}}}"' in run
        assert args[arg] == pins[package]
        assert package in (TRAINER_DIR / "pyproject.toml").read_text()
