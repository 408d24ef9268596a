"""CloudFormation's registry schemas, as the pinned cfn-lint ships them, and the rules they state
for the properties the environment file feeds (`registry_rules.json`).

The rows come from two sources, both in the repository: the keys of the file each property of the
examples' templates came from (`tests/golden/<example>/keys.json`, written with the goldens from
the constructs' provenance: `hyperpod_kit/constructs/provenance.py`), and cfn-lint's schemas.
For each (key, resource type, property) the schema's pattern, enum, length and range, and per
resource type the regions whose schemas lack it. `validators/cloudformation.py` checks the file's
values against them before any synth; tests/unit/test_registry_rules.py fails when the table is
not what `refresh()` makes of the goldens and the pinned cfn-lint.

Regenerate: ``python -m hyperpod_kit.config.facts.cfn_registry`` (after the goldens).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TABLE = HERE / "registry_rules.json"
# The constraints of a property's schema that a value of the file can break, as the table names
# them (the api-constraints table's names, so that one message format serves both).
_CONSTRAINTS = {
    "pattern": "pattern",
    "enum": "enum",
    "minLength": "min_length",
    "maxLength": "max_length",
    "minimum": "min",
    "maximum": "max",
    "minItems": "min_items",
    "maxItems": "max_items",
}


def _schemas_root() -> Path:
    import cfnlint

    return Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def providers(region: str) -> dict[str, str]:
    """Resource type -> its schema's file name, for the types cfn-lint knows in `region`."""
    path = _schemas_root() / "providers" / f"{region}.json"
    return dict(json.loads(path.read_text()))


@cache
def resource_schema(type_name: str) -> dict[str, Any]:
    """The registry schema of `type_name` (us-east-1's: the schemas are the same wherever a type
    is offered; which regions offer it is `regions_without`)."""
    name = providers("us-east-1")[type_name]
    return dict(json.loads((_schemas_root() / "resources" / f"{name}.json").read_text()))


def property_schema(type_name: str, path: str) -> dict[str, Any] | None:
    """The schema of the property at `path` (`/` between levels; a number or `*` for a list's
    item), `$ref`s followed; None where the schema has no such property (or no such type)."""
    if type_name not in providers("us-east-1"):
        return None
    schema = resource_schema(type_name)
    node: dict[str, Any] | None = {"properties": schema.get("properties", {})}
    for part in path.split("/"):
        node = _resolve(schema, node)
        if node is None:
            return None
        is_item = part.isdigit() or part == "*"
        node = node.get("items") if is_item else node.get("properties", {}).get(part)
    return _resolve(schema, node)


def _resolve(schema: dict[str, Any], node: dict[str, Any] | None) -> dict[str, Any] | None:
    while isinstance(node, dict) and "$ref" in node:
        node = schema.get("definitions", {}).get(node["$ref"].rsplit("/", 1)[-1])
    return node


def constraints(spec: dict[str, Any]) -> dict[str, Any]:
    """What of `spec` a value can break, under the table's names."""
    return {name: spec[rule] for rule, name in _CONSTRAINTS.items() if rule in spec}


def regions_without(type_name: str) -> list[str]:
    """The regions whose schemas (as cfn-lint ships them) lack `type_name`."""
    root = _schemas_root() / "providers"
    regions = sorted(
        p.stem for p in root.glob("*.json") if re.fullmatch(r"[a-z]+-[a-z-]+-\d", p.stem)
    )
    return [r for r in regions if type_name not in providers(r)]


def rows(keyed: Iterable[tuple[str, str, str, bool]]) -> list[dict[str, Any]]:
    """A row per (key, resource type, property) whose schema states a rule. A property that does
    not hold the file's value as written (an enum the toolkit spells its own way) carries only
    the regions without its type: its schema's rules are about the toolkit's spelling."""
    verbatim: dict[tuple[str, str, str], bool] = {}
    for key, type_name, path, as_written in keyed:  # one example may spell it, another not
        verbatim[(key, type_name, path)] = verbatim.get((key, type_name, path), True) and as_written
    found = []
    for (key, type_name, path), as_written in sorted(verbatim.items()):
        if type_name.startswith("Custom::") or type_name not in providers("us-east-1"):
            continue
        spec = property_schema(type_name, path)
        rules = constraints(spec) if spec is not None and as_written else {}
        if rules:
            found.append({"key": key, "resource": type_name, "property": path, **rules})
    return found


def type_gaps(types: Iterable[str]) -> dict[str, list[str]]:
    """The types among `types` that some region's registry lacks, with those regions."""
    gaps = {}
    for type_name in sorted(set(types)):
        if type_name.startswith("Custom::") or type_name not in providers("us-east-1"):
            continue
        missing = regions_without(type_name)
        if missing:
            gaps[type_name] = missing
    return gaps


def refresh(goldens: Path, today: str | None = None) -> dict[str, Any]:
    """The table, from every `keys.json` under `goldens` and the installed cfn-lint."""
    import cfnlint.version

    keyed: list[tuple[str, str, str, bool]] = []
    for keys in sorted(goldens.glob("*/keys.json")):
        keyed += [(k, t, p, bool(v)) for k, t, p, v in json.loads(keys.read_text())]
    return {
        "generated": today or date.today().isoformat(),
        "cfn_lint": cfnlint.version.__version__,
        "about": "The rules CloudFormation's registry schemas state for each property the "
        "environment file feeds: (key, resource type, property) from the examples' provenance "
        "(tests/golden/*/keys.json), pattern/enum/length/range from the schema where the "
        "property holds the file's value as written; and the regions whose registry lacks a "
        "type the file creates. Read by validators/cloudformation.py.",
        "rows": rows(keyed),
        "regions_without": type_gaps(t for _, t, _, _ in keyed),
    }


if __name__ == "__main__":
    golden = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "tests" / "golden"
    written = refresh(golden)
    TABLE.write_text(json.dumps(written, indent=1) + "\n")
    print(f"{len(written['rows'])} rows, cfn-lint {written['cfn_lint']}")
