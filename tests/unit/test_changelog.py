"""CHANGELOG.md keeps the Keep a Changelog format, and its newest release is the package's version
(hyperpod_kit.__version__, which pyproject.toml states too)."""

from __future__ import annotations

import datetime
import re
import tomllib
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from hyperpod_kit import __version__
from tests.conftest import REPO

CHANGELOG = REPO / "CHANGELOG.md"
SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\S+)(?P<rest>.*)$")


@dataclass
class Release:
    title: str  # "Unreleased" or the version
    date: datetime.date | None
    line: int
    sections: dict[str, list[str]] = field(default_factory=dict)


def parse(text: str) -> list[Release]:
    """The releases, newest first; AssertionError naming the line for anything out of format."""
    lines = text.splitlines()
    assert lines[0] == "# Changelog", "the first line is '# Changelog'"
    releases: list[Release] = []
    section: list[str] | None = None
    for number, line in enumerate(lines[1:], start=2):
        if line.startswith("# "):
            raise AssertionError(f"line {number}: one '# ' title only")
        if line == "## [Unreleased]":
            assert not releases, f"line {number}: [Unreleased] comes first"
            releases.append(Release("Unreleased", None, number))
            section = None
        elif line.startswith("## "):
            m = _RELEASE.match(line)
            assert m and not m["rest"], f"line {number}: '## [VERSION] - YYYY-MM-DD', not {line!r}"
            try:
                date = datetime.date.fromisoformat(m["date"])
            except ValueError:
                raise AssertionError(f"line {number}: {m['date']!r} is not YYYY-MM-DD") from None
            assert m["date"] == date.isoformat(), f"line {number}: YYYY-MM-DD"
            releases.append(Release(m["version"], date, number))
            section = None
        elif line.startswith("### "):
            assert releases, f"line {number}: a section outside a release"
            name = line[4:]
            assert name in SECTIONS, f"line {number}: {name!r} is none of {SECTIONS}"
            assert name not in releases[-1].sections, f"line {number}: {name} given twice"
            section = releases[-1].sections.setdefault(name, [])
        elif line.startswith("#"):
            raise AssertionError(f"line {number}: only #, ## and ### headings: {line!r}")
        elif line.startswith("- "):
            assert section is not None, f"line {number}: an entry outside a section"
            section.append(line[2:])
    return releases


def test_the_changelog_is_in_format() -> None:
    releases = parse(CHANGELOG.read_text(encoding="utf-8"))
    assert releases and releases[0].title == "Unreleased"
    for release in releases:
        for name, entries in release.sections.items():
            assert entries, f"{release.title}: ### {name} has no entries"
    released = releases[1:]
    assert released, "at least one release"
    versions = []
    for release in released:
        try:
            versions.append(Version(release.title))
        except InvalidVersion:
            raise AssertionError(f"line {release.line}: {release.title!r} is no version") from None
        assert release.sections, f"{release.title}: a release says what it brought"
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), (
        "versions descend, newest first, each once"
    )
    dates = [r.date for r in released]
    assert dates == sorted(dates, reverse=True), "dates descend with the versions"  # type: ignore[type-var]


def test_the_newest_release_is_the_packages_version() -> None:
    newest = parse(CHANGELOG.read_text(encoding="utf-8"))[1]
    assert newest.title == __version__, (
        f"CHANGELOG.md's newest release is {newest.title}, the package is {__version__}: move "
        "[Unreleased]'s entries under a new release heading when the version changes"
    )
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__


def test_the_parser_refuses_what_is_out_of_format() -> None:
    """The checks above can fail: each mistake is named with its line."""
    good = "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2027-01-15\n\n### Added\n\n- x\n"
    assert [r.title for r in parse(good)] == ["Unreleased", "0.2.0"]
    for bad, said in (
        (good.replace("2027-01-15", "15/01/2027"), "line 5"),
        (good.replace("2027-01-15", "2027-1-15"), "line 5"),
        (good.replace("### Added", "### New"), "line 7"),
        (good.replace("## [0.2.0] - 2027-01-15", "## 0.2.0"), "line 5"),
        (good + "\n## [Unreleased]\n", "[Unreleased] comes first"),
        (good.replace("## [Unreleased]\n", "- early\n"), "outside a section"),
    ):
        try:
            parse(bad)
        except AssertionError as e:
            assert said in str(e), (said, str(e))
        else:
            raise AssertionError(f"accepted: {bad!r}")
