"""The version lock: what a deploy would otherwise take as "latest" or from the toolkit's defaults,
pinned in one file per environment (`<file>.lock.json` beside the environment file, so that
`environments/*.yaml` never matches it), written by `synth` and committed by the user.

A pin (`config/pins.py`) is one value a deploy depends on: an instance group's AMI release (EKS
clusters only: AWS takes no release for a Slurm group), the Kubernetes version, an EKS add-on's
version, a Helm chart's, the Slurm configuration strategy. Each comes from:

- ``file``: the environment file writes it. The file always wins, and the lock follows it.
- ``default``: the toolkit's default or one of its dated tables. When this hyperpod-kit's default
  differs from the locked one (after an upgrade, say), synth refuses, naming the key, unless asked
  (`synth --update-lock`): the environment would otherwise move under a deploy nobody asked for.
- ``deployed``: read from the deployed cluster (`hyperpod-kit lock --from-deployed`). Offline,
  synth cannot know "latest"; a value read once is applied from then on.
- ``latest``: nothing pins it: the service picks at deploy time (said, never guessed).

A lock written by a newer hyperpod-kit than this one (its `written_by`, compared as PEP 440
versions) is refused in one line: this one may not read it as written. An older or equal one is
read as usual (and rewritten as this version's when it changes).

Synth also copies the lock it resolved into the assembly (`LOCK_IN_ASSEMBLY`), so `plan` shows
what a change does to the pins before anything else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import Version
from pydantic import BaseModel, ValidationError

from hyperpod_kit import __version__
from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.pins import (
    ADDONS,
    Pin,
    ami_pin_key,
    incompatible,
    resolved_pins,
    unlisted_versions,
)
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.files import fileio
from hyperpod_kit.outputs import FileWrite, check_file
from hyperpod_kit.versions import TOOLKIT, parse_version, toolkit_version

# A lock is a few KB (one row per pin); anything past this is not one.
MAX_LOCK_BYTES = 1 << 20

LOCK_FORMAT = 1
LOCK_IN_ASSEMBLY = "hyperpod-kit.lock.json"


def lock_path(environment_file: str | Path) -> Path:
    """`<folder>/<stem>.lock.json` beside the environment file."""
    path = Path(environment_file)
    return path.with_name(f"{path.stem}.lock.json")


# --- the lock file -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LockFile:
    path: Path
    pins: dict[str, Pin]
    text: str = ""
    environment: str | None = None  # the environment it was written for

    def line_of(self, key: str) -> int | None:
        return _line_of(self.text, key)


class LockError(Exception):
    """The lock cannot be used or written: findings placed in the lock file (exit 2)."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__("\n".join(f.render(f.file or "") for f in findings))


class NewerLockError(LockError):
    """The lock was written by a newer hyperpod-kit: refused, `--force` or not (it is ours, and
    replacing it would drop what the newer version pinned)."""


def read_lock(path: Path) -> LockFile | None:
    """The lock at `path`, None when there is none; a file that is not a lock of ours is an
    error (it is never overwritten without --force)."""
    if not path.exists() and not path.is_symlink():
        return None

    def bad(message: str, hint: str) -> LockError:
        return LockError(
            [Finding(Level.ERROR, "(lock)", message, hint, file=str(path), check="lock")]
        )

    restore = "restore it from version control, or move it away and synth again to write a new one"
    try:  # the one input layer: a regular file, bounded, UTF-8
        text = fileio.read_text(path, limit=MAX_LOCK_BYTES, what="version lock", hint=restore)
    except fileio.InputError as e:
        raise bad(e.message, restore) from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise bad(f"not a hyperpod-kit lock ({e.__class__.__name__})", restore) from None
    if not isinstance(data, dict) or data.get("tool") != "hyperpod-kit":
        raise bad(
            'not a hyperpod-kit lock (no "tool": "hyperpod-kit")',
            "move it away: hyperpod-kit writes <environment>.lock.json beside the environment file",
        )
    newer = _newer_writer(data.get("written_by"))
    if newer is not None:  # before its format: a newer hyperpod-kit may write another one
        raise NewerLockError(
            [
                Finding(
                    Level.ERROR, "written_by",
                    f"this lock was written by {TOOLKIT} {newer}, newer than this {TOOLKIT} "
                    f"({__version__}), which may not read it as written",
                    f"upgrade hyperpod-kit: pip install '{TOOLKIT}>={newer}' (in a checkout: "
                    f"check out {newer} or later and run make setup)",
                    _line_of(text, "written_by"), file=str(path), check="lock",
                )
            ]
        )  # fmt: skip
    if data.get("format") != LOCK_FORMAT:
        raise bad(
            f"lock format {data.get('format')!r}; this hyperpod-kit reads format {LOCK_FORMAT}",
            "use the hyperpod-kit that wrote it, or move it away and synth again",
        )
    pins = {}
    for key, row in (data.get("pins") or {}).items():
        if not isinstance(row, dict) or row.get("source") not in (
            "file", "default", "deployed", "latest",
        ):  # fmt: skip
            raise bad(f"pin {key!r} has no valid source", "restore the file from version control")
        value = row.get("value")
        pins[key] = Pin(
            key, None if value is None else str(value), row["source"], row.get("what", "")
        )
    environment = data.get("environment")
    return LockFile(path, pins, text, environment if isinstance(environment, str) else None)


def _newer_writer(written_by: Any) -> Version | None:
    """The version in `written_by` ("hyperpod-kit X") when it is newer than this hyperpod-kit;
    None for an older or equal one, and for one that names no version (nothing to compare)."""
    if not isinstance(written_by, str) or not written_by.startswith(f"{TOOLKIT} "):
        return None
    version = parse_version(written_by.removeprefix(f"{TOOLKIT} ").strip())
    return version if version is not None and version > toolkit_version() else None


def _line_of(text: str, key: str) -> int | None:
    needle = json.dumps(key) + ":"
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def render_lock(config: EnvironmentConfig, pins: dict[str, Pin]) -> str:
    body = {
        "tool": "hyperpod-kit",
        "format": LOCK_FORMAT,
        "environment": config.name,
        "written_by": f"{TOOLKIT} {__version__}",
        "about": "Pinned versions of this environment (docs/platform.md#the-version-lock). "
        "Written by `hyperpod-kit synth`; commit it. `synth --update-lock` takes new defaults.",
        "pins": {key: pins[key].to_json() for key in sorted(pins)},
    }
    return json.dumps(body, indent=1) + "\n"


# --- resolving against the lock ----------------------------------------------------------------


@dataclass
class Resolution:
    config: EnvironmentConfig  # with the deployed values of the lock applied
    pins: dict[str, Pin]  # the lock to write
    drift: list[Finding] = field(default_factory=list)  # refused without --update-lock
    updated: list[str] = field(default_factory=list)  # keys --update-lock moved
    notes: list[Finding] = field(default_factory=list)  # warnings: locked values not applied


def resolve(
    config: EnvironmentConfig, lock: LockFile | None, *, update: bool = False
) -> Resolution:
    """Pins from the file, the defaults and the lock; a default that moved is drift, refused
    unless `update`; deployed values of the lock are applied where the file leaves them open."""
    now = resolved_pins(config)
    locked = lock.pins if lock is not None else {}
    pins: dict[str, Pin] = {}
    drift: list[Finding] = []
    updated: list[str] = []
    for key, pin in now.items():
        old = locked.get(key)
        chosen = pin
        if pin.source == "default" and old is not None and old.source == "default":
            if old.value != pin.value:
                if update:
                    updated.append(key)
                else:
                    assert lock is not None
                    drift.append(_drift(lock, key, old, pin))
                    chosen = old
        elif pin.source == "latest" and old is not None and old.source == "deployed":
            chosen = old
        pins[key] = chosen
    applied = _apply(config, {k: p.value for k, p in pins.items() if p.source == "deployed"})
    notes = list(_slurm_releases(config, lock)) if lock is not None else []
    return Resolution(applied, pins, drift, updated, notes)


def _slurm_releases(config: EnvironmentConfig, lock: LockFile) -> Iterator[Finding]:
    """A warning for each AMI release the lock pins for a group of a Slurm cluster (an older
    hyperpod-kit wrote them, `lock --from-deployed` too): AWS takes `ImageReleaseVersion` on EKS
    clusters only, so it is not applied, and the next lock written leaves it out."""
    if config.orchestrator != "slurm":
        return
    for g in config.cluster.instance_groups:
        key = ami_pin_key(g.name)
        old = lock.pins.get(key)
        if old is None or old.value is None:
            continue  # "latest": it pinned nothing
        yield Finding(
            Level.WARNING,
            key,
            f"the lock pins AMI release {old.value!r} ({old.source}) for group {g.name} of a Slurm "
            "cluster, and AWS takes ImageReleaseVersion on EKS clusters only: not applied",
            "nothing to do: the next `hyperpod-kit lock` or synth writes the lock without it; "
            "`aws sagemaker update-cluster-software` moves a Slurm group's AMI (docs/platform.md)",
            line=lock.line_of(key),
            file=str(lock.path),
            check="lock",
        )


def _drift(lock: LockFile, key: str, old: Pin, new: Pin) -> Finding:
    return Finding(
        Level.ERROR,
        key,
        f"locked at {old.value} (this toolkit's default when the lock was written); this "
        f"hyperpod-kit's default is {new.value}",
        "synthesize with --update-lock to take the new default, or write the locked value in "
        "the environment file to keep it",
        line=lock.line_of(key),
        file=str(lock.path),
        check="lock",
    )


def _apply(config: EnvironmentConfig, values: dict[str, str | None]) -> EnvironmentConfig:
    """The config with the lock's deployed values in the keys the file leaves open."""
    if not values:
        return config
    cluster = config.cluster
    groups = []
    for g in cluster.instance_groups:
        key = ami_pin_key(g.name)
        release = values.get(key)
        if release:
            _schema_accepts(g, {"image_release_version": release}, key)
        groups.append(g.model_copy(update={"image_release_version": release}) if release else g)
    addons = {
        key: values[f"cluster.eks.addons.{key}"]
        for key in ADDONS
        if values.get(f"cluster.eks.addons.{key}")
    }
    eks = cluster.eks
    if addons:
        for key, value in addons.items():
            _schema_accepts(eks.addons, {key: value}, f"cluster.eks.addons.{key}")
        eks = eks.model_copy(update={"addons": eks.addons.model_copy(update=addons)})
    cluster = cluster.model_copy(update={"instance_groups": groups, "eks": eks})
    return config.model_copy(update={"cluster": cluster})


class LockValueError(Exception):
    """A value of the lock that the environment file's schema refuses."""

    def __init__(self, key: str, message: str) -> None:
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}")


def _schema_accepts(model: BaseModel, update: dict[str, Any], key: str) -> None:
    """A lock's value goes through the same schema as the file's (a control character, a
    shell word in a release version is refused here as it would be in the file)."""
    try:
        type(model).model_validate({**model.model_dump(), **update})
    except ValidationError as e:
        first, value = e.errors()[0], str(next(iter(update.values())))
        raise LockValueError(key, f"{first['msg']} (value {value!r})") from None


def deployed_pins(
    config: EnvironmentConfig, cluster: dict[str, Any], addons: dict[str, str]
) -> dict[str, Pin]:
    """Pins read from AWS: each group's current AMI release (DescribeCluster; EKS clusters only,
    where a release is a pin) and the add-ons' versions (DescribeAddon, by add-on name), for the
    keys the file leaves open."""
    now = resolved_pins(config)
    found: dict[str, Pin] = {}
    for group in cluster.get("InstanceGroups", []):
        key = ami_pin_key(str(group.get("InstanceGroupName")))
        release = group.get("CurrentImageReleaseVersion")
        if key in now and now[key].source == "latest" and release:
            found[key] = Pin(key, str(release), "deployed", now[key].what)
    for key, (addon, _) in ADDONS.items():
        pin_key = f"cluster.eks.addons.{key}"
        if pin_key in now and now[pin_key].source == "latest" and addons.get(addon):
            found[pin_key] = Pin(pin_key, addons[addon], "deployed", now[pin_key].what)
    return found


# --- for the commands --------------------------------------------------------------------------


def lock_environment(
    loaded: LoadedEnvironment,
    *,
    update: bool = False,
    replace_foreign: bool = False,
    warn_drift: bool = False,
) -> tuple[LoadedEnvironment, Resolution]:
    """The environment with its lock applied (deployed values where the file leaves them open),
    and the resolution to write; `LockError` on a lock that is not ours (unless
    `replace_foreign`: then as if there were none), on one a newer hyperpod-kit wrote (always),
    on drift (unless `update`; with `warn_drift` the locked values stay and the drift is a
    warning among the findings: `destroy` deploys nothing), or on a locked value the
    compatibility table refuses."""
    try:
        lock = read_lock(lock_path(loaded.file))
    except NewerLockError:
        raise
    except LockError:
        if not replace_foreign:
            raise
        lock = None
    if lock is not None and lock.environment not in (None, loaded.config.name):
        if not replace_foreign:
            raise LockError(
                [
                    Finding(
                        Level.ERROR, "(lock)",
                        f"is the lock of environment {lock.environment!r}, not of "
                        f"{loaded.config.name!r} (the environment file's name)",
                        "a lock belongs to one environment: move it away, or restore this "
                        "environment's lock from version control",
                        file=str(lock.path), line=lock.line_of("environment"), check="lock",
                    )
                ]
            )  # fmt: skip
        lock = None
    try:
        res = resolve(loaded.config, lock, update=update)
    except LockValueError as e:
        assert lock is not None
        raise LockError(
            [
                Finding(
                    Level.ERROR, e.key, f"the lock's value is refused: {e.message}",
                    "restore the lock from version control, or run `hyperpod-kit lock "
                    "--from-deployed` again",
                    file=str(lock.path), line=lock.line_of(e.key), check="lock",
                )
            ]
        ) from None  # fmt: skip
    if res.drift and not warn_drift:
        raise LockError(res.drift)
    if res.notes:
        loaded = replace(loaded, findings=[*loaded.findings, *res.notes])
    if res.drift:
        warnings = [
            replace(
                f,
                level=Level.WARNING,
                hint="nothing is deployed, so the lock stays as it is; " + (f.hint or ""),
            )
            for f in res.drift
        ]
        loaded = replace(loaded, findings=[*loaded.findings, *warnings])
    if res.config is not loaded.config and lock is not None:
        found = [*incompatible(res.config), *unlisted_versions(res.config)]
        refused = [f for f in found if f.level is Level.ERROR]
        if refused:
            raise LockError(
                [
                    replace(f, file=str(lock.path), line=lock.line_of(f.path), check="lock")
                    for f in refused
                ]
            )
    return replace(loaded, config=res.config, pins=res.pins), res


def lock_write(
    loaded: LoadedEnvironment, pins: dict[str, Pin], *, force: bool = False
) -> FileWrite:
    """The checked write of the environment's lock (`OutputError` if the file there is not a
    lock of ours and not `force`). Nothing is written yet: `write_file` does it."""
    path = lock_path(loaded.file)
    ours = None
    if path.is_file():
        try:
            found = read_lock(path)
            ours = None if found is None else hashlib.sha256(found.text.encode()).hexdigest()
        except LockError:
            ours = None
    return check_file(
        path,
        render_lock(loaded.config, pins),
        force=force,
        ours=ours,
        other="move it away (hyperpod-kit writes <environment>.lock.json)",
        updates=path,  # the lock is the one input a command rewrites in place
    )


def lock_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """Lines for `plan`: each pin whose value or source differs between two assemblies' locks."""
    if not old or not new:
        return []
    before, after = old.get("pins", {}), new.get("pins", {})
    lines = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None:
            lines.append(f"lock: + {key} = {_shown(b)}")
        elif b is None:
            lines.append(f"lock: - {key} (was {_shown(a)})")
        elif a.get("value") != b.get("value") or a.get("source") != b.get("source"):
            lines.append(f"lock: ~ {key}: {_shown(a)} -> {_shown(b)}")
    return lines


def _shown(row: dict[str, Any] | None) -> str:
    if row is None:
        return "none"
    value = row.get("value")
    return f"{value if value is not None else 'latest at deploy'} ({row.get('source')})"
