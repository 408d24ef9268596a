"""The gates' findings come back to the file's line (hyperpod_kit/constructs/provenance.py).

For an example, every property whose key the constructs recorded gets a value that
CloudFormation's registry schema refuses (made from the pinned cfn-lint's schema for that
property: a value outside its enum, one that does not match its pattern, one past its length or
range; never a hand list), all in one synth. The config is changed after validation, so the
values reach the gates as a value `validate` does not know to refuse would: each finding must
name the key and its line, `FILE:LINE key: message (cfn-lint RULE at STACK Resources/...)`.

Three examples cover the constructs (Slurm with the defaults, EKS with an existing cluster and
task governance, Studio on Slurm): two synths each, about a minute.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from hyperpod_kit.app import build_environment, create_app
from hyperpod_kit.config.environment import LoadedEnvironment, load_environment
from hyperpod_kit.config.facts.cfn_registry import property_schema
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.gates import at_path, check_assembly
from tests.conftest import REPO, run_cli
from tests.integration.provenance import Traced, value_at

pytestmark = pytest.mark.synth
EXAMPLES = ["default", "eks-platform", "studio-slurm"]


@dataclass(frozen=True)
class Mutation:
    key: str
    value: Any
    resource_type: str
    path: str
    why: str


def _refused(spec: dict[str, Any], value: Any) -> tuple[Any, str] | None:
    """A value of `value`'s type that `spec` refuses, and which rule refuses it."""
    candidates: list[tuple[Any, str]] = []
    if isinstance(value, str):
        if "enum" in spec:
            candidates.append(("NotOneOfThem", f"enum {spec['enum'][:4]}"))
        if "maxLength" in spec:
            too_long = "a" * (int(spec["maxLength"]) + 1)
            candidates.append((too_long, f"maxLength {spec['maxLength']}"))
        if "pattern" in spec and not re.search(spec["pattern"], "~~"):
            candidates.append(("~~", f"pattern {spec['pattern']}"))
    elif isinstance(value, int) and not isinstance(value, bool):
        if "maximum" in spec:
            candidates.append((int(spec["maximum"]) + 1, f"maximum {spec['maximum']}"))
        if "minimum" in spec:
            candidates.append((int(spec["minimum"]) - 1, f"minimum {spec['minimum']}"))
    return candidates[0] if candidates else None


def mutations(assembly: Path, loaded: LoadedEnvironment) -> list[Mutation]:
    """One refused value per key recorded for a property (the first property that key feeds)."""
    traced = Traced.read(assembly)
    found: dict[str, Mutation] = {}
    for stack, provenance in traced.provenance.items():
        for logical_id, record in provenance.by_logical_id.items():
            resource_type = traced.resources[stack].get(logical_id, {}).get("Type")
            if resource_type is None or resource_type.startswith("Custom::"):
                continue
            properties = traced.resources[stack][logical_id].get("Properties", {})
            for path, key in sorted(record.properties.items()):
                if key in found or "[" in key.rsplit(".", 1)[-1]:
                    continue  # an item of a list of the file: its list's key is mutated
                if not isinstance(at_path(properties, path.split("/")), (str, int)):
                    continue  # not in the template, or built with an intrinsic (Fn::Join)
                spec = property_schema(resource_type, path)
                value = value_at(loaded, key)
                refused = _refused(spec, value) if spec is not None else None
                if refused is not None:
                    found[key] = Mutation(key, refused[0], resource_type, path, refused[1])
    return list(found.values())


def mutate(config: EnvironmentConfig, changes: dict[str, Any]) -> EnvironmentConfig:
    """`config` with the values at `changes`' keys replaced, past validation (model_copy)."""
    for key, value in changes.items():
        parts: list[str | int] = [
            int(p[1:-1]) if p.startswith("[") else p for p in key.replace("[", ".[").split(".") if p
        ]
        config = _set(config, parts, value)
    return config


def _set(node: Any, parts: list[str | int], value: Any) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(head, int):
        items = list(node)
        items[head] = _set(items[head], rest, value)
        return items
    if isinstance(node, dict):
        return {**node, head: _set(node[head], rest, value)}
    assert isinstance(node, BaseModel)
    copy = node.model_copy(update={head: _set(getattr(node, head), rest, value)})
    copy.__pydantic_private__ = dict(node.__pydantic_private__ or {})  # its source folder
    return copy


def _synth(config: EnvironmentConfig, outdir: Path) -> Path:
    app = create_app(outdir=str(outdir))
    build_environment(app, config)
    app.synth()
    return outdir


@pytest.mark.parametrize("name", EXAMPLES)
def test_gate_findings_name_the_key_and_its_line(name: str, tmp_path: Path) -> None:
    example = REPO / "environments" / f"{name}.yaml"
    loaded = load_environment(example)
    baseline = _synth(loaded.config, tmp_path / "baseline")
    found = mutations(baseline, loaded)
    # A seeded sample when there are many: the same keys on every run, and one synth
    chosen = sorted(random.Random(24).sample(found, min(len(found), 40)), key=lambda m: m.key)
    assert len(chosen) >= 5, [m.key for m in found]
    # A value the toolkit's own code refuses while it builds (a name it renders into a node
    # script) never reaches the gates: `validate` refuses it first (its schema). Such keys are
    # dropped, found by their value in the error.
    for _ in range(len(chosen)):
        mutated = mutate(loaded.config, {m.key: m.value for m in chosen})
        try:
            build_environment(create_app(outdir=str(tmp_path / "probe")), mutated)
            break
        except Exception as error:  # which mutation: found by its value in the message
            culprits = [m for m in chosen if str(m.value) in str(error)]
            assert culprits, error
            chosen = [m for m in chosen if m not in culprits]
    report = check_assembly(_synth(mutated, tmp_path / "mutated"))
    errors = [f for f in report.errors if f.gate == "cfn-lint"]
    by_key = {f.key for f in errors if f.exact}
    missed = [f"{m.key} = {m.value!r} ({m.resource_type} {m.path}: {m.why})" for m in chosen
              if m.key not in by_key]  # fmt: skip
    assert missed == [], "\n".join([*missed, *(f.render(loaded.at) for f in errors)])
    for finding in errors:
        if finding.key in {m.key for m in chosen}:
            line = finding.render(loaded.at)
            file, number = loaded.at(finding.key).rsplit(":", 1)
            assert file == str(example) and number.isdigit(), line
            assert line.startswith(f"{file}:{number} {finding.key}: "), line
            assert f"(cfn-lint {finding.rule} at {finding.stack} Resources/" in line, line
    assert report.traced or any(not f.exact for f in report.errors)


def test_a_value_cdk_refuses_while_building_is_the_file_s_line(tmp_path: Path) -> None:
    """A bucket name `validate` lets through (dots and hyphens side by side) and CDK's S3
    construct refuses: `synth` answers at the key's line, exit 2, no traceback, nothing
    written. Whichever layer catches it, the line reads the same."""
    env = tmp_path / "env.yaml"
    text = (REPO / "environments" / "default.yaml").read_text()
    assert "  bucket:\n" in text
    env.write_text(text.replace("  bucket:\n", "  bucket:\n    name: my-data.-bucket\n", 1))
    line = env.read_text().splitlines().index("    name: my-data.-bucket") + 1
    result = run_cli("synth", str(env), "-o", str(tmp_path / "cdk.out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    said = [s for s in result.stderr.splitlines() if "storage.bucket.name" in s]
    assert said and said[0].startswith(f"{env}:{line} storage.bucket.name: "), result.stderr
    assert "my-data.-bucket" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.yaml"]
