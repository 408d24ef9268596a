"""Every checkov skip in the templates is listed in docs/security.md ("checkov": resource, stack,
check, reason), and the list names no skip the templates lack.

The templates: the reviewed goldens of every example in environments/ (tests/golden, nested Studio
templates included; test_synth_examples keeps them equal to a synth), and the one variant whose
resources no example has, the remediation Lambda (one in-process synth, no gates). checkov itself
is not needed here: it pins its own boto3 and runs from its own venv (`make checkov`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from tests.conftest import REPO, merge
from tests.integration.test_security_baseline import function_key

pytestmark = pytest.mark.synth

ENVIRONMENTS = REPO / "environments"
GOLDEN = REPO / "tests" / "golden"
SECURITY_MD = REPO / "docs" / "security.md"
# What no example has: the remediation Lambda (HyperPod's own recovery off, auto-repair on).
REMEDIATION = {"cluster": {"node_recovery": "None"}, "trainer": {"job": {"auto_resume": False}}}

Skip = tuple[str, str, str, str]  # stack area, resource, check id, reason


def _skips(template: dict[str, Any], area: str) -> Iterator[Skip]:
    for logical_id, resource in template.get("Resources", {}).items():
        checkov = (resource.get("Metadata") or {}).get("checkov") or {}
        for skip in checkov.get("skip", []):
            yield area, function_key(logical_id), skip["id"], skip["comment"]


def _area(template: Path, environment: str) -> str:
    """``<name>-<area>.template.json`` -> area; a nested Studio template -> ``studio``."""
    if template.name.endswith(".nested.template.json"):
        return "studio"
    stack = template.name.removesuffix(".template.json")
    assert stack.startswith(f"{environment}-"), template
    return stack.removeprefix(f"{environment}-")


def _assembly_skips(folder: Path, environment: str) -> set[Skip]:
    return {
        skip
        for template in sorted(folder.glob("*.template.json"))
        for skip in _skips(json.loads(template.read_text()), _area(template, environment))
    }


def golden_skips() -> set[Skip]:
    out: set[Skip] = set()
    for example in sorted(ENVIRONMENTS.glob("*.yaml")):
        name = load_environment(example).config.name
        folder = GOLDEN / example.stem
        assert any(folder.glob("*.template.json")), f"no golden templates for {example.name}"
        out |= _assembly_skips(folder, name)
    return out


@pytest.fixture(scope="module")
def remediation_skips(tmp_path_factory: pytest.TempPathFactory) -> set[Skip]:
    from hyperpod_kit.app import build_environment, create_app

    work = tmp_path_factory.mktemp("remediation")
    source = work / "default.yaml"
    data = merge(yaml.safe_load((ENVIRONMENTS / "default.yaml").read_text()), REMEDIATION)
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_environment(source).config.at_source(ENVIRONMENTS)
    app = create_app(outdir=str(work / "cdk.out"))
    build_environment(app, config)
    skips = _assembly_skips(Path(app.synth().directory), config.name)
    assert any(resource == "MonitoringRemediationFunction" for _, resource, _, _ in skips)
    return skips


_ROW = re.compile(r"^\|(?P<cells>.+)\|\s*$")


def documented_skips(text: str) -> set[Skip]:
    """The rows of the suppression table under '## checkov' in docs/security.md:
    ``| `Resource` `Other` | stack | `CKV_AWS_n` | reason |``; one row may name several
    resources that share a stack, a check and a reason."""
    section = text.split("\n## checkov\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n| resource | stack | check | reason |\n", 1)[1]
    out: set[Skip] = set()
    for line in table.splitlines()[1:]:  # past the |---| line
        match = _ROW.match(line)
        if match is None:
            break
        resources, area, check, reason = (c.strip() for c in match["cells"].split("|"))
        names = re.findall(r"`([^`]+)`", resources)
        assert names and re.sub(r"`[^`]+`|\s", "", resources) == "", line
        (check_id,) = re.findall(r"^`(CKV2?_AWS_\d+)`$", check)
        out |= {(area, name, check_id, reason) for name in names}
    return out


def _render(skips: set[Skip]) -> list[str]:
    return [
        f"{area} {resource} {check}: {reason}" for area, resource, check, reason in sorted(skips)
    ]


def test_every_skip_is_listed_with_its_reason_and_the_list_has_no_other(
    remediation_skips: set[Skip],
) -> None:
    in_templates = golden_skips() | remediation_skips
    listed = documented_skips(SECURITY_MD.read_text())
    assert _render(in_templates - listed) == [], "skips docs/security.md does not list"
    assert _render(listed - in_templates) == [], "rows of docs/security.md no template has"


def test_each_skip_says_why_in_a_sentence() -> None:
    skips = golden_skips()
    assert len({(r, c) for _, r, c, _ in skips}) >= 30  # not vacuous: the goldens carry them
    for area, resource, check, reason in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", check), (area, resource, check)
        assert len(reason) >= 60 and "|" not in reason and "\n" not in reason, (resource, check)


def test_the_table_parser_reads_several_resources_and_stops_at_the_table_end() -> None:
    text = (
        "# x\n\n## checkov\n\nintro\n\n| resource | stack | check | reason |\n|---|---|---|---|\n"
        "| `A` `B` | eks | `CKV_AWS_115` | because |\n| `C` | studio | `CKV2_AWS_5` | why |\n"
        "\nafter\n| `D` | x | `CKV_AWS_1` | not read |\n## next\n"
    )
    assert documented_skips(text) == {
        ("eks", "A", "CKV_AWS_115", "because"),
        ("eks", "B", "CKV_AWS_115", "because"),
        ("studio", "C", "CKV2_AWS_5", "why"),
    }
