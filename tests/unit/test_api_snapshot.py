"""The construct library's public API (`hyperpod_kit.cdk.__all__` and the settings' keys) is
docs/api-snapshot.json; a change to it is named in CHANGELOG.md's [Unreleased] (in backticks)
and the file regenerated (`python -m hyperpod_kit.api_snapshot`)."""

from __future__ import annotations

import json
import re
from typing import Any

from hyperpod_kit.api_snapshot import SNAPSHOT, render, snapshot
from tests.conftest import REPO

CHANGELOG = REPO / "CHANGELOG.md"


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The public names and settings keys added, removed or changed from `old` to `new`."""
    found = []
    for part in ("names", "settings"):
        before, after = old.get(part, {}), new.get(part, {})
        found += sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return found


def unmentioned(entries: list[str], unreleased: str) -> list[str]:
    """The entries [Unreleased] does not name in backticks: a settings key in full (its list and
    map markers, `[]` and `{}`, dropped) or by its last part."""
    spans = re.findall(r"`([^`]+)`", unreleased)
    words = {w for span in spans for w in re.findall(r"[A-Za-z_][\w.]*", span)}
    words |= {w.rsplit(".", 1)[-1] for w in words}
    missing = []
    for entry in entries:
        key = entry.replace("[]", "").replace("{}", "")
        if key not in words and key.rsplit(".", 1)[-1] not in words:
            missing.append(entry)
    return missing


def unreleased_text() -> str:
    text = CHANGELOG.read_text()
    start = text.index("## [Unreleased]")
    end = text.find("\n## [", start + 1)
    return text[start : end if end != -1 else None]


def test_the_public_api_is_its_snapshot_and_changes_are_in_the_changelog() -> None:
    current = snapshot()
    recorded = json.loads(SNAPSHOT.read_text())
    missing = unmentioned(changed(recorded, current), unreleased_text())
    assert not missing, (
        f"the public API changed ({', '.join(missing)}) and CHANGELOG.md's [Unreleased] does not "
        "name it in backticks: say what changed for users, then run "
        "`python -m hyperpod_kit.api_snapshot`"
    )
    assert render(current) == SNAPSHOT.read_text(), (
        f"{SNAPSHOT.relative_to(REPO)} is not the API: run `python -m hyperpod_kit.api_snapshot`"
    )


def test_a_change_the_changelog_does_not_name_is_caught() -> None:
    old = {
        "names": {"gate": {"signature": "(a)"}, "gone": {}},
        "settings": {"storage.lustre.storage_capacity_gib": {"required": False}, "users[].uid": {}},
    }
    new = {
        "names": {"gate": {"signature": "(a, b)"}, "added": {}},
        "settings": {"storage.lustre.storage_capacity_gib": {"required": True}, "users[].gid": {}},
    }
    entries = changed(old, new)
    assert entries == [
        "added", "gate", "gone", "storage.lustre.storage_capacity_gib", "users[].gid",
        "users[].uid",
    ]  # fmt: skip
    text = "- `gate(assembly, quiet)` gained `b`; `users.gid` is new; removed `gone`."
    assert unmentioned(entries, text) == [
        "added", "storage.lustre.storage_capacity_gib", "users[].uid",
    ]  # fmt: skip
    assert unmentioned(entries, "gate, added (not in backticks)") == entries
