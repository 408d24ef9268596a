"""The pinned CDK CLI, found or fetched (hyperpod_kit/cdk_cli.py): fetched once from the npm
registry into an empty per-user cache and then used without npm; a project's own
`node_modules/.bin/cdk` used only at the pinned version; no Node.js on PATH is one line and exit
2 before anything is synthesized; a half-written or foreign cache is never trusted.

Only the first test downloads (the registry, with an empty npm cache of its own: a real fetch);
the others use that cache, or a fake `npm` that records what it was asked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.cdk_cli import (
    CdkCliError,
    binary_in,
    cache_folder,
    installed_version,
    pinned_version,
    project_of,
    resolve,
)
from hyperpod_kit.outputs import MARKER, read_marker
from tests.conftest import NO_CREDENTIALS, REPO

NODE = shutil.which("node")
NPM = shutil.which("npm")
pytestmark = pytest.mark.skipif(NODE is None or NPM is None, reason="needs Node.js and npm")
VERSION = pinned_version()


def bin_folder(root: Path, **commands: str) -> str:
    """A folder for PATH holding `node` (the real one) and the given commands (name -> script)."""
    root.mkdir(parents=True, exist_ok=True)
    assert NODE is not None
    (root / "node").symlink_to(NODE)
    for name, script in commands.items():
        (root / name).write_text("#!/bin/sh\n" + script)
        (root / name).chmod(0o755)
    return str(root)


def environment_file(folder: Path) -> Path:
    """An environment file in `folder` (in no npm project unless the test makes one)."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "dev.yaml"
    shutil.copy(REPO / "environments" / "default.yaml", file)
    return file


def no_project_above(path: Path) -> None:
    assert project_of(path) is None, "a package.json above the temporary folder"


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str], float]]:
    """The pinned CDK CLI fetched by the real npm into an empty cache (XDG_CACHE_HOME), with an
    empty npm cache of its own so that npm really downloads it: the cache folder, what was said,
    and how long it took."""
    import time

    root = tmp_path_factory.mktemp("cdk-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg"))
        mp.setenv("npm_config_cache", str(root / "npm-cache"))
        env_file = environment_file(root / "envs")
        no_project_above(env_file)
        said: list[str] = []
        started = time.monotonic()
        found = resolve(env_file, say=said.append)
        took = time.monotonic() - started
        assert found == binary_in(cache_folder(VERSION))
        yield cache_folder(VERSION), said, took


@pytest.fixture
def cache_home(fetched: tuple[Path, list[str], float], monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = fetched[0]
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent))
    return cache


@pytest.mark.slow
def test_an_empty_cache_is_filled_once_then_used_without_npm(
    fetched: tuple[Path, list[str], float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, said, took = fetched
    assert said[0] == f"fetching the pinned CDK CLI aws-cdk@{VERSION} into {cache} (once)"
    assert said[-1].startswith(f"fetched aws-cdk@{VERSION} in ")
    assert installed_version(cache) == VERSION
    marker = read_marker(cache)
    assert marker is not None and marker["kind"] == "cdk-cli"
    siblings = [p.name for p in cache.parent.iterdir() if p != cache]
    assert siblings == [], "the temporary sibling npm installed into is gone"
    print(f"fetched in {took:.1f} s")

    # Again, with node but no npm on PATH: the cache is used as it is.
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent))
    monkeypatch.setenv("PATH", bin_folder(tmp_path / "bin"))
    assert shutil.which("npm") is None
    said_again: list[str] = []
    cdk = resolve(environment_file(tmp_path / "envs"), say=said_again.append)
    assert cdk == binary_in(cache)
    assert said_again == []
    result = subprocess.run(
        [str(cdk), "--version"], capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(VERSION)


@pytest.mark.slow
def test_a_filled_cache_is_used_and_a_project_only_at_the_pinned_version(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """npm is never run (it would fail loudly): the cache is there. A project whose
    node_modules holds another aws-cdk is said in one line and passed over; one with the pinned
    version is used (looked for from the environment file's folder upwards)."""
    calls = tmp_path / "npm-calls"
    monkeypatch.setenv("PATH", bin_folder(tmp_path / "bin", npm=f'echo "$@" >> {calls}; exit 1\n'))
    other = tmp_path / "other-project"
    other.mkdir()
    shutil.copy(REPO / "package.json", other / "package.json")  # an npm project
    package = other / "node_modules" / "aws-cdk"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "aws-cdk", "version": "2.1000.0"}))
    (package / "bin" / "cdk").write_text("#!/bin/sh\nexit 3\n")
    (other / "node_modules" / ".bin").mkdir()
    (other / "node_modules" / ".bin" / "cdk").symlink_to("../aws-cdk/bin/cdk")
    said: list[str] = []
    assert resolve(environment_file(other / "environments"), say=said.append) == binary_in(
        cache_home
    )
    assert said == [
        f"{other / 'node_modules'} is aws-cdk 2.1000.0, not the pinned {VERSION}: using the "
        "pinned one from the per-user cache instead (`npm ci` there installs the pinned one)"
    ]

    pinned = tmp_path / "pinned-project"
    pinned.mkdir()
    shutil.copy(REPO / "package.json", pinned / "package.json")
    (pinned / "node_modules").symlink_to(REPO / "node_modules")  # `make setup`'s, the pin
    said.clear()
    env_file = environment_file(pinned / "environments" / "team")
    assert resolve(env_file, say=said.append) == binary_in(pinned)
    assert said == []
    assert not calls.exists(), "npm was not run"


def test_without_node_one_line_exit_2_before_any_synth(tmp_path: Path) -> None:
    """The real `hyperpod-kit diff` in a fresh process whose PATH has no node: validation, then
    one line and exit 2 at once (the CDK CLI is looked for before the synth)."""
    env_file = environment_file(tmp_path / "envs")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", "diff", str(env_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**NO_CREDENTIALS, "PATH": str(empty), "XDG_CACHE_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"the CDK CLI needs Node.js and npm on PATH: `node` was not found to run aws-cdk "
        f"{VERSION}. Hint: install Node.js 20 or newer (npm comes with it), then run the "
        "command again"
    )
    assert "cdk-nag" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "xdg").exists(), "nothing fetched, nothing created"


def test_without_npm_an_empty_cache_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", bin_folder(tmp_path / "bin"))
    with pytest.raises(CdkCliError) as e:
        resolve(environment_file(tmp_path / "envs"))
    assert str(e.value) == (
        f"the CDK CLI needs Node.js and npm on PATH: `npm` was not found to fetch aws-cdk "
        f"{VERSION} into {tmp_path / 'xdg' / 'hyperpod-kit' / f'aws-cdk-{VERSION}'} (once). "
        "Hint: install Node.js 20 or newer (npm comes with it), then run the command again"
    )


# A fake npm: records its arguments, then installs a stand-in aws-cdk of $FAKE_VERSION into
# --prefix (or nothing with FAKE_VERSION=none; or fails like npm with FAKE_FAIL set).
FAKE_NPM = """
printf '%s\\n' "$*" >> "$FAKE_CALLS"
if [ -n "${FAKE_FAIL:-}" ]; then
  echo "npm error code E404" >&2
  echo "npm error 404 Not Found - GET https://registry.example/aws-cdk" >&2
  echo "npm error A complete log of this run can be found in: /tmp/x.log" >&2
  exit 1
fi
while [ "$#" -gt 0 ]; do [ "$1" = --prefix ] && prefix=$2; shift; done
[ "$FAKE_VERSION" = none ] && exit 0
mkdir -p "$prefix/node_modules/aws-cdk/bin" "$prefix/node_modules/.bin"
printf '{"name": "aws-cdk", "version": "%s"}\\n' "$FAKE_VERSION" \\
  > "$prefix/node_modules/aws-cdk/package.json"
printf '#!/bin/sh\\necho fake\\n' > "$prefix/node_modules/aws-cdk/bin/cdk"
chmod +x "$prefix/node_modules/aws-cdk/bin/cdk"
ln -s ../aws-cdk/bin/cdk "$prefix/node_modules/.bin/cdk"
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    calls = tmp_path / "npm-calls"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # the fake shadows the real npm; the system's folders give it mkdir, ln and chmod
    monkeypatch.setenv("PATH", bin_folder(tmp_path / "bin", npm=FAKE_NPM) + ":/usr/bin:/bin")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("FAKE_VERSION", VERSION)
    return calls


def test_a_half_cache_of_ours_is_not_trusted_but_replaced(fake_npm: Path, tmp_path: Path) -> None:
    """Our cache folder without its binary (its files deleted since), and the sibling of an
    install killed halfway (its process gone): neither is used; npm installs into a new sibling
    (`--prefix`, never -g), which is renamed into place once checked; the leftovers go."""
    cache = cache_folder(VERSION)
    package = cache / "node_modules" / "aws-cdk"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"version": VERSION}))
    written = ["node_modules", "node_modules/.bin", "node_modules/aws-cdk",
               "node_modules/aws-cdk/package.json"]  # fmt: skip
    (cache / MARKER).write_text(
        json.dumps({"tool": "hyperpod-kit", "kind": "cdk-cli", "version": "0", "written": written})
    )
    killed = cache.parent / f".{cache.name}.new.999999999.abc"  # no such process
    killed.mkdir()
    (killed / MARKER).write_text(json.dumps({"tool": "hyperpod-kit", "kind": "cdk-cli"}))
    said: list[str] = []
    assert resolve(environment_file(tmp_path / "envs"), say=said.append) == binary_in(cache)
    (call,) = fake_npm.read_text().splitlines()
    words = call.split()
    prefix = Path(words[words.index("--prefix") + 1])
    assert prefix.parent == cache.parent and prefix.name.startswith(f".{cache.name}.new.")
    assert words[0] == "install" and "-g" not in words and "--global" not in words
    assert {"--no-save", "--no-audit", "--no-fund"} <= set(words)
    assert words[-1] == f"aws-cdk@{VERSION}"
    assert binary_in(cache).is_file() and installed_version(cache) == VERSION
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name], "no leftovers"
    assert said[0].startswith("fetching the pinned CDK CLI")


def test_a_foreign_cache_folder_is_refused_untouched(fake_npm: Path, tmp_path: Path) -> None:
    cache = cache_folder(VERSION)
    cache.mkdir(parents=True)
    (cache / "notes.txt").write_text("mine\n")
    with pytest.raises(CdkCliError) as e:
        resolve(environment_file(tmp_path / "envs"))
    line = str(e.value)
    assert line.startswith(f"{cache}: is a folder with files that hyperpod-kit did not write")
    assert "Hint: remove it" in line and "\n" not in line
    assert not fake_npm.exists(), "npm was not run"
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"FAKE_VERSION": "none"}, "npm installed no usable aws-cdk"),
        ({"FAKE_VERSION": "2.0.0"}, "npm installed no usable aws-cdk"),
        ({"FAKE_FAIL": "1"}, "E404: 404 Not Found - GET https://registry.example/aws-cdk. Hint:"),
    ],
    ids=["nothing", "another-version", "npm-fails"],
)
def test_a_failed_fetch_keeps_nothing(
    setting: dict[str, str],
    expected: str,
    fake_npm: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CdkCliError) as e:
        resolve(environment_file(tmp_path / "envs"))
    assert expected in str(e.value) and "\n" not in str(e.value)
    cache = cache_folder(VERSION)
    assert list(cache.parent.iterdir()) == [], "no cache, no half-written sibling"
