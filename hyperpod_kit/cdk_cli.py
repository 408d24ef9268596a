"""The CDK CLI that `deploy`, `diff` and `destroy` hand the gated assembly to: exactly the version
this hyperpod-kit pins (its bundled package.json, `paths.PACKAGE_JSON`), found or fetched once.

Where it comes from, in order:

1. The environment's project: the nearest folder holding a `package.json` (npm's project), from
   the environment file's own folder up to the filesystem root; not from the current folder, so
   the answer does not depend on where the command runs. Its `node_modules/.bin/cdk` is where
   `npm ci` installs the CLI in a project written by `init --project`, or in the toolkit's own
   checkout (`make setup`). Used only if `node_modules/aws-cdk/package.json` says the pinned
   version; another version is said in one line and left alone.
2. A per-user cache, `${XDG_CACHE_HOME:-~/.cache}/hyperpod-kit/aws-cdk-<version>`, filled on first
   use with `npm install --prefix <that folder> --no-save ... aws-cdk@<version>` (never `npm -g`).
   npm installs into a temporary sibling, which is renamed into place only once the binary is
   there with the pinned version (the output layer's `FolderOutput`: a run killed halfway leaves
   a sibling the next run removes, never a cache that is trusted). A cache is used only if its
   binary exists and its package.json says the pinned version.

Node.js must be on PATH to run either (the CDK CLI is a Node program); npm only to fetch. What
is missing is one line (`CdkCliError`), exit 2, before anything is synthesized.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from hyperpod_kit.paths import PACKAGE_JSON
from hyperpod_kit.versions import cdk_cli_pin

PACKAGE = "aws-cdk"
EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
MAX_PACKAGE_JSON = 1 << 20
NODE_HINT = "Hint: install Node.js 20 or newer (npm comes with it), then run the command again"

Say = Callable[[str], None]


class CdkCliError(Exception):
    """Why no usable CDK CLI could be had: one line (the command exits 2)."""


def pinned_version() -> str:
    """The exact aws-cdk version hyperpod-kit's package.json pins (versions.cdk_cli_pin)."""
    version = cdk_cli_pin()
    if version is None or not EXACT_VERSION.match(version):
        raise CdkCliError(
            f"{PACKAGE_JSON}: hyperpod-kit's package.json pins no exact {PACKAGE} version "
            f"({version!r}). Hint: reinstall hyperpod-kit"
        )
    return version


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/hyperpod-kit`, or `~/.cache/hyperpod-kit` (XDG: a relative value is
    ignored)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "hyperpod-kit"


def cache_folder(version: str) -> Path:
    return cache_root() / f"{PACKAGE}-{version}"


def binary_in(folder: Path) -> Path:
    """Where npm puts the `cdk` command of a folder it installed into."""
    return folder / "node_modules" / ".bin" / "cdk"


def installed_version(folder: Path) -> str | None:
    """The version of the aws-cdk npm installed into `folder` (its package.json), or None. Read
    bounded, and not remembered as an input of the command (the cache is replaced later)."""
    from hyperpod_kit.files import fileio

    try:
        raw = fileio.existing_bytes(
            folder / "node_modules" / PACKAGE / "package.json", limit=MAX_PACKAGE_JSON
        )
        version = json.loads(raw.decode("utf-8")).get("version")
    except (OSError, fileio.PathError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def usable(folder: Path, version: str) -> bool:
    """`folder` has npm's `cdk` command (a file, through its link) of exactly `version`."""
    return binary_in(folder).is_file() and installed_version(folder) == version


def project_of(environment_file: Path | str) -> Path | None:
    """The environment file's project: the nearest folder with a package.json, from the file's
    own folder up to the filesystem root; None outside any."""
    start = Path(os.path.abspath(environment_file)).parent
    for folder in (start, *start.parents):
        if os.path.lexists(folder / "package.json"):
            return folder
    return None


def _ignore(line: str) -> None:
    del line


def resolve(environment_file: Path | str, *, say: Say = _ignore) -> Path:
    """The pinned CDK CLI for this environment file: the project's, if it is the pinned version,
    else the cache's (fetched now if missing). `say` gets the progress lines."""
    version = pinned_version()
    if shutil.which("node") is None:
        raise CdkCliError(
            f"the CDK CLI needs Node.js and npm on PATH: `node` was not found to run {PACKAGE} "
            f"{version}. {NODE_HINT}"
        )
    project = project_of(environment_file)
    if project is not None and os.path.lexists(binary_in(project)):
        found = installed_version(project)
        if found == version and binary_in(project).is_file():
            return binary_in(project)
        modules = project / "node_modules"
        if found == version:  # the version, but its command is a broken link
            why = f"{modules / '.bin' / 'cdk'} is a broken link"
        elif found is None:
            why = f"{modules} holds no readable {PACKAGE}, not the pinned {version}"
        else:
            why = f"{modules} is {PACKAGE} {found}, not the pinned {version}"
        say(
            f"{why}: using the pinned one from the per-user cache instead (`npm ci` there "
            "installs the pinned one)"
        )
    cache = cache_folder(version)
    if not usable(cache, version):
        fetch(version, cache, say=say)
    return binary_in(cache)


def fetch(version: str, cache: Path, *, say: Say = _ignore) -> None:
    """Install aws-cdk@version into `cache` with npm, through a temporary sibling renamed into
    place once complete and checked; an unusable folder of ours there is replaced, anything
    else refused (`CdkCliError`)."""
    from hyperpod_kit.outputs import CDK_CLI, FolderOutput, OutputError

    npm = shutil.which("npm")
    if npm is None:
        raise CdkCliError(
            f"the CDK CLI needs Node.js and npm on PATH: `npm` was not found to fetch {PACKAGE} "
            f"{version} into {cache} (once). {NODE_HINT}"
        )
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        output = FolderOutput.checked(cache, CDK_CLI)
        say(f"fetching the pinned CDK CLI {PACKAGE}@{version} into {cache} (once)")
        started = time.monotonic()
        with output.staging() as staging:
            _npm_install(npm, version, staging, cache)
            if not usable(staging, version):
                raise CdkCliError(
                    f"npm installed no usable {PACKAGE} {version} (node_modules/.bin/cdk and "
                    f"its package.json) for {cache}; nothing was kept. Hint: run the command "
                    "again; if it persists, check `npm config list`"
                )
            if usable(cache, version):  # another run filled it meanwhile: keep that one
                return
            output.commit(staging, package=f"{PACKAGE}@{version}")
        say(f"fetched {PACKAGE}@{version} in {time.monotonic() - started:.1f} s")
    except OutputError as e:
        raise CdkCliError(
            f"{e.path}: {e.message} (the per-user cache of the pinned CDK CLI). Hint: remove it "
            f"(hyperpod-kit fetches {PACKAGE} {version} there again), or set XDG_CACHE_HOME to "
            "another folder"
        ) from None
    except OSError as e:
        from hyperpod_kit.outputs import write_error

        raise CdkCliError(write_error(e, cache)) from None


def _npm_install(npm: str, version: str, staging: Path, cache: Path) -> None:
    command = [
        npm, "install", "--prefix", str(staging), "--no-save", "--no-audit", "--no-fund",
        "--no-update-notifier", f"{PACKAGE}@{version}",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=staging, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise CdkCliError(
            f"npm could not fetch {PACKAGE}@{version} into {cache}: "
            f"{npm_reason(result.stderr, result.returncode)}. Hint: check the network and npm's "
            "registry (`npm config get registry`), then run the command again"
        )


_NPM_PREFIX = re.compile(r"^npm (?:error|ERR!)\s?")
_NPM_FIELD = re.compile(r"^(?:code|syscall|errno|path|dest|A complete log of this run)\b")
_NPM_TAG = re.compile(r"^[a-z][a-z0-9]* (?=[A-Z])")  # "notarget No matching version ..."


def npm_reason(stderr: str, returncode: int) -> str:
    """npm's reason in one line: its error code and first message line (`ETARGET: No matching
    version found for aws-cdk@9.9.9.`), else its last stderr line."""
    lines = [_NPM_PREFIX.sub("", line).strip() for line in stderr.splitlines()]
    code = next((line.split()[1] for line in lines if re.match(r"^code \S+$", line)), None)
    message = next(
        (
            _NPM_TAG.sub("", line)
            for line in lines
            if line and not _NPM_FIELD.match(line) and not line.startswith(("at ", "{", "}"))
        ),
        None,
    )
    if message is None:
        shown = [line for line in stderr.splitlines() if line.strip()]
        message = shown[-1].strip() if shown else f"exit status {returncode}"
    message = message.rstrip(".")
    return f"{code}: {message}" if code else message
