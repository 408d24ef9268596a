"""The committed JSON Schema (for editors) is exactly what `hyperpod-kit schema` prints."""

import json

from hyperpod_kit.config.jsonschema import environment_schema
from tests.conftest import REPO


def test_committed_schema_is_current() -> None:
    committed = json.loads((REPO / "environments" / "environment.schema.json").read_text())
    assert committed == environment_schema(), (
        "environments/environment.schema.json is stale: run "
        "`hyperpod-kit schema -o environments/environment.schema.json --force`"
    )


def test_every_example_points_editors_at_the_schema() -> None:
    for example in sorted((REPO / "environments").glob("*.yaml")):
        first = example.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=./environment.schema.json", example.name


def test_configuration_reference_is_current() -> None:
    from hyperpod_kit.config.reference import markdown_reference

    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == markdown_reference(), (
        "docs/configuration.md is stale: run "
        "`hyperpod-kit schema --markdown -o docs/configuration.md --force`"
    )
