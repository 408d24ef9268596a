"""The rules AWS states only in prose (hyperpod_kit/config/facts/prose_rules.json): every sentence
that `refresh.prose_sentences` finds in the pinned registry schemas and service models has a row,
and every row has a verdict that holds: a check that exists, or a written reason.

The listing reads cfn-lint's schemas and botocore's models once per process (a few seconds).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import botocore
import cfnlint
import cfnlint.version
import pytest

from hyperpod_kit.config.facts import refresh
from hyperpod_kit.config.validators import REGISTRY

TABLE_PATH = Path(refresh.__file__).parent / "prose_rules.json"
_GATE = re.compile(r"^cfn-lint ([EWI]\d{4})$")


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def listed() -> list[dict[str, str]]:
    return refresh.prose_sentences()


def _cfn_lint_rule_exists(rule_id: str) -> bool:
    rules = Path(cfnlint.__file__).parent / "rules"
    return any(f'id = "{rule_id}"' in p.read_text(encoding="utf-8") for p in rules.rglob("*.py"))


def _golden_keys(type_name: str) -> set[str]:
    """Every property key, at any depth, of the golden templates' resources of `type_name`."""
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            keys.update(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in refresh.GOLDEN.glob("*/*.template.json"):
        for resource in json.loads(path.read_text(encoding="utf-8"))["Resources"].values():
            if resource["Type"] == type_name:
                walk(resource.get("Properties", {}))
    return keys


# --- (a) every sentence has a row ----------------------------------------------------------------


def test_the_listing_finds_sentences_in_both_sources(listed: list[dict[str, str]]) -> None:
    schemas = [s for s in listed if s["id"].startswith("cfn:")]
    models = [s for s in listed if s["id"].startswith("api:")]
    assert len(schemas) > 100 and len(models) > 50, (len(schemas), len(models))
    ids = [s["id"] for s in listed]
    assert len(ids) == len(set(ids))
    # the rules that motivated the table are among them
    sentences = {(s["id"].split("#")[0], s["sentence"]) for s in listed}
    assert (
        "cfn:AWS::SageMaker::Cluster/definitions/ClusterInstanceGroup/properties/"
        "ImageReleaseVersion",
        "Supported only for EKS-orchestrated clusters.",
    ) in sentences
    assert (
        "api:sagemaker:ClusterOrchestratorSlurmConfig.AccountingDatabase",
        "This field is only supported for clusters using Continuous as the NodeProvisioningMode .",
    ) in sentences


def test_every_listed_sentence_has_a_row_with_a_verdict(
    table: dict[str, Any], listed: list[dict[str, str]]
) -> None:
    missing = refresh.uncovered(table, listed)
    assert not missing, (
        "sentences without a verdict (run `python -m hyperpod_kit.config.facts.refresh --prose`, "
        "then give each an enforced_by or a reason):\n"
        + "\n".join(f"{s['id']}: {s['sentence']}" for s in missing)
    )


def test_the_table_is_dated_and_names_the_pinned_sources(table: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table["checked"])
    assert f"cfn-lint {cfnlint.version.__version__}" in table["sources"]["schemas"]
    assert f"botocore {botocore.__version__}" in table["sources"]["models"]
    assert table["sources"]["phrases"] == refresh.PROSE_RULE.pattern


# --- (b) every row holds ------------------------------------------------------------------------


def test_no_stale_rows(table: dict[str, Any], listed: list[dict[str, str]]) -> None:
    gone = refresh.stale(table, listed)
    assert not gone, "rows whose sentence is no longer listed:\n" + "\n".join(r["id"] for r in gone)


def test_rows_carry_the_listed_sentence_and_source(
    table: dict[str, Any], listed: list[dict[str, str]]
) -> None:
    by_id = {s["id"]: s for s in listed}
    for row in table["rows"]:
        if row["id"] in by_id:
            assert {k: row[k] for k in ("source", "where", "sentence")} == {
                k: by_id[row["id"]][k] for k in ("source", "where", "sentence")
            }, row["id"]


def test_each_row_has_exactly_one_verdict(table: dict[str, Any]) -> None:
    for row in table["rows"]:
        verdicts = [k for k in ("enforced_by", "reason") if row.get(k)]
        assert len(verdicts) == 1, row["id"]
        if "reason" in row:
            assert len(row["reason"]) >= 30, f"{row['id']}: a reason says why, in words"


def test_enforced_by_names_a_registered_check_or_a_gate_rule(table: dict[str, Any]) -> None:
    for row in table["rows"]:
        name = row.get("enforced_by")
        if name is None:
            continue
        gate = _GATE.match(name)
        if gate:
            assert _cfn_lint_rule_exists(gate[1]), f"{row['id']}: cfn-lint has no rule {gate[1]}"
        else:
            assert name in REGISTRY, f"{row['id']}: no validator is registered as {name!r}"


def test_never_set_reasons_hold_for_the_golden_templates(table: dict[str, Any]) -> None:
    """A reason that says the toolkit never sets a schema property is checked against every
    example's synthesized templates: the property is in none of that type's resources."""
    checked = 0
    for row in table["rows"]:
        if not row["id"].startswith("cfn:") or not row.get("reason", "").startswith("Never set"):
            continue
        type_name = row["source"].removeprefix("registry schema ")
        prop = row["where"].rstrip("/").rsplit("/", 1)[-1]
        assert prop not in _golden_keys(type_name), f"{row['id']}: the toolkit sets {prop}"
        checked += 1
    assert checked > 50  # most schema rows are of properties the toolkit leaves alone


# --- (c) a refresh that adds a sentence fails ---------------------------------------------------

NEW = {
    "id": "cfn:AWS::SageMaker::Cluster/definitions/ClusterInstanceGroup/properties/Example"
    "#00000000",
    "source": "registry schema AWS::SageMaker::Cluster",
    "where": "/definitions/ClusterInstanceGroup/properties/Example",
    "sentence": "Supported only for clusters integrated with Amazon EKS.",
}


def test_a_new_sentence_is_reported_uncovered(
    table: dict[str, Any], listed: list[dict[str, str]]
) -> None:
    assert refresh.uncovered(table, [*listed, NEW]) == [NEW]


def test_a_refresh_keeps_the_verdicts_and_leaves_a_new_sentence_without_one(
    table: dict[str, Any], listed: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refresh, "prose_sentences", lambda *a, **k: [*listed, NEW])
    regenerated = refresh.prose_rules(table, today="2099-01-01")
    rows = {r["id"]: r for r in regenerated["rows"]}
    assert "enforced_by" not in rows[NEW["id"]] and "reason" not in rows[NEW["id"]]
    assert refresh.uncovered(regenerated, [*listed, NEW]) == [NEW]
    old = {r["id"]: r for r in table["rows"]}
    for rid, row in rows.items():
        if rid in old:
            assert row == old[rid]


def test_a_removed_sentence_makes_its_row_stale(
    table: dict[str, Any], listed: list[dict[str, str]]
) -> None:
    assert [r["id"] for r in refresh.stale(table, listed[1:])] == [listed[0]["id"]]


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        ("Supported only for EKS-orchestrated clusters.", 1),
        ("Batches are available only for clusters integrated with Amazon EKS.", 1),
        ("MinInstanceCount must be less than or equal to InstanceCount.", 1),
        ("It must be between 1 and 100. It cannot be changed later.", 2),
        ("<p>Mutually exclusive with <code>OnCreate</code>.</p>", 1),
        ("(Multi-AZ only) The route tables.", 1),
        ("You must not set both.", 1),
        ("Specifies the name of the instance group. It is read-only.", 0),
        ("The only way is up.", 0),
    ],
)
def test_the_phrases_that_mark_a_rule(text: str, rules: int) -> None:
    found = [s for s in refresh._sentences(text) if refresh.PROSE_RULE.search(s)]
    assert len(found) == rules, found
