"""The versions hyperpod-kit runs with, and how a file or a lock says which ones it needs.

`--version` prints this toolkit's version and those of what decides its output: aws-cdk-lib
(the templates), the CDK CLI pinned in package.json (what deploys them), cfn-lint (the gate)
and botocore (the API's constraints `validate` checks). Installed distributions are read from
their metadata (`importlib.metadata`), never by importing them: `--version` must not start jsii.

Versions are compared as PEP 440 versions (`packaging`), never as strings: 0.10.0 is newer
than 0.9.0.
"""

from __future__ import annotations

import importlib.metadata

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from hyperpod_kit import __version__

TOOLKIT = "hyperpod-kit"
CDK_CLI = "aws-cdk"
NOT_INSTALLED = "not installed"
# package.json is a few hundred bytes; anything past this is not ours.
MAX_PACKAGE_JSON_BYTES = 64 << 10


def installed(distribution: str) -> str | None:
    """The installed version of `distribution`, None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cdk_cli_pin() -> str | None:
    """The `aws-cdk` CLI version the package's package.json pins (devDependencies or
    dependencies; hyperpod_kit/paths.py), None when it is unreadable or pins none.

    The one place that reads the pin: `--version`, the CDK CLI's cache and the pipelines."""
    from hyperpod_kit.files import fileio
    from hyperpod_kit.paths import PACKAGE_JSON

    try:
        data = fileio.read_json(PACKAGE_JSON, limit=MAX_PACKAGE_JSON_BYTES, what="package.json")
    except fileio.InputError:
        return None
    if not isinstance(data, dict):
        return None
    for section in ("devDependencies", "dependencies"):
        pins = data.get(section)
        if isinstance(pins, dict) and isinstance(pins.get(CDK_CLI), str):
            return str(pins[CDK_CLI])
    return None


def version_report() -> str:
    """What `hyperpod-kit --version` prints: the toolkit's line first (as before), then one line
    per component, each `NAME VERSION` (or `NAME not installed`)."""
    pin = cdk_cli_pin()
    cli = f"{pin} (the CDK CLI pinned in package.json)" if pin else "not pinned (no package.json)"
    lines = [
        f"{TOOLKIT} {__version__}",
        f"aws-cdk-lib {installed('aws-cdk-lib') or NOT_INSTALLED}",
        f"{CDK_CLI} {cli}",
        *(f"{name} {installed(name) or NOT_INSTALLED}" for name in ("cfn-lint", "botocore")),
    ]
    return "\n".join(lines) + "\n"


def toolkit_version() -> Version:
    return Version(__version__)


def parse_version(text: str) -> Version | None:
    """`text` as a PEP 440 version, None when it is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def parse_specifier(text: str) -> SpecifierSet | None:
    """`text` as a PEP 440 specifier set (`>=0.1,<0.2`), None when it is not one. An empty text
    is not one either: a requirement that says nothing is a mistake."""
    if not text.strip():
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def toolkit_satisfies(specifier: SpecifierSet) -> bool:
    """Whether this hyperpod-kit is in `specifier`; a pre-release or development version is
    compared like any other (0.2.0.dev1 is in `>=0.1`, not in `>=0.2`), never left out."""
    return specifier.contains(toolkit_version(), prereleases=True)
