"""The bundled files from a checkout (the editable install `make setup` makes): the same names as
in the wheel (tests/integration/test_wheel.py), here the repository's own top-level files through
the links in hyperpod_kit/_bundled."""

from __future__ import annotations

import pytest

from hyperpod_kit import paths
from tests.conftest import REPO


def test_a_checkout_reads_the_files_people_edit() -> None:
    assert paths.LIFECYCLE_DIR == REPO / "lifecycle"
    assert paths.TRAINER_DIR == REPO / "assets" / "trainer"
    assert paths.FUNCTIONS_DIR == REPO / "assets" / "functions"
    assert paths.DEFAULT_ENVIRONMENT == REPO / "environments" / "default.yaml"
    assert paths.PACKAGE_JSON == REPO / "package.json"
    assert (paths.TRAINER_DIR / "Dockerfile").is_file()


def test_the_links_are_relative_and_inside_the_repository() -> None:
    """A clone anywhere (or an sdist) resolves them: no link names one machine's path."""
    links = [p for p in (REPO / "hyperpod_kit" / "_bundled").rglob("*") if p.is_symlink()]
    links.append(REPO / "hyperpod_trainer")
    assert len(links) >= 7
    for link in links:
        target = link.readlink()
        assert not target.is_absolute(), link
        assert link.resolve().is_relative_to(REPO) and link.resolve().exists(), link


def test_a_missing_file_is_one_line() -> None:
    with pytest.raises(FileNotFoundError, match="package lacks lifecycle/nothing: reinstall it"):
        paths.bundled("lifecycle", "nothing")
