"""Kubernetes' name syntax (hyperpod_kit/config/kubernetes_names.py), each rule with a bad value
beside its good neighbour; the schema's patterns built from it; the `kubernetes-names` finding
at the key's own line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest

from hyperpod_kit.config import ConfigError, EnvironmentConfig
from hyperpod_kit.config import kubernetes_names as k8s
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.schema import TaintEffect
from tests.conftest import WriteEnv, default_data, merge

PREFIX_253 = ".".join(["p" * 63] * 3 + ["p" * 61])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gpu", None),
        ("n" * 63, None),
        ("n" * 64, "has 64 characters; Kubernetes takes at most 63"),
        ("example.com/pool", None),
        ("Example_Key.v-2", None),  # a name may have upper case, '_' and '.'
        ("-gpu", "is not a qualified name"),
        ("gpu-", "is not a qualified name"),
        ("_gpu", "is not a qualified name"),
        (f"{PREFIX_253}/n", None),
        (f"a{PREFIX_253}/n", "a DNS-1123 subdomain has 254 characters"),
        (f"example.com/{'n' * 63}", None),
        (f"example.com/{'n' * 64}", "has 64 characters; Kubernetes takes at most 63"),
        ("Example.com/pool", "its prefix 'Example.com'"),  # a prefix is lower case
        ("/pool", "prefix (before '/') is empty"),
        ("example.com/", "name part is empty"),
        ("a/b/c", "at most one '/'"),
        ("", "name part is empty"),
    ],
)
def test_qualified_name(value: str, why: str | None) -> None:
    found = k8s.qualified_name(value)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found
    # the schema's anchored pattern (with its total length) agrees on the syntax
    pattern_ok = re.fullmatch(k8s.QUALIFIED_NAME_PATTERN, value) is not None
    if why is None:
        assert pattern_ok and len(value) <= k8s.QUALIFIED_NAME_TOTAL_MAX


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", None),  # an empty label value is allowed
        ("v" * 63, None),
        ("v" * 64, "a label value has 64 characters; Kubernetes takes at most 63"),
        ("A_b.c-9", None),
        ("-v", "starts and ends with a letter or digit"),
        ("v.", "starts and ends with a letter or digit"),
        ("a/b", "letters, digits, '-', '_' and '.' only"),
        ("a b", "letters, digits, '-', '_' and '.' only"),
    ],
)
def test_label_value(value: str, why: str | None) -> None:
    found = k8s.label_value(value)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found
    assert (re.fullmatch(k8s.LABEL_VALUE_PATTERN, value) is not None) == (
        why is None or "characters" in why
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("training", None),
        ("1team", None),  # a DNS-1123 label may start with a digit
        ("n" * 63, None),
        ("n" * 64, "a DNS-1123 label has 64 characters; Kubernetes takes at most 63"),
        ("Training", "lowercase letters, digits and '-' only"),  # no upper case
        ("-training", "starts and ends with a letter or digit"),
        ("training-", "starts and ends with a letter or digit"),
        ("ml_ops", "lowercase letters, digits and '-' only"),
        ("a.b", "lowercase letters, digits and '-' only"),
        ("", "lowercase letters, digits and '-' only"),
    ],
)
def test_dns1123_label(value: str, why: str | None) -> None:
    found = k8s.dns1123_label(value)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("a.b-c.d", None),
        (PREFIX_253, None),
        ("a" + PREFIX_253, "a DNS-1123 subdomain has 254 characters; Kubernetes takes at most 253"),
        ("a..b", "each part starting and ending with a letter or digit"),
        ("a.-b", "each part starting and ending with a letter or digit"),
        ("A.b", "lowercase letters"),
    ],
)
def test_dns1123_subdomain(value: str, why: str | None) -> None:
    found = k8s.dns1123_subdomain(value)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("pretrain", None),
        ("p" * 63, None),
        ("p" * 64, "a DNS-1035 label has 64 characters"),
        ("1pretrain", "starts with a letter"),  # a DNS-1123 label, not a DNS-1035 one
        ("Pretrain", "lowercase"),
    ],
)
def test_dns1035_label(value: str, why: str | None) -> None:
    found = k8s.dns1035_label(value)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found


def test_taint_effects_are_kubernetes_and_the_schemas() -> None:
    for effect in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        assert k8s.taint_effect(effect) is None
    found = k8s.taint_effect("NoExecution")
    assert found == "a taint's effect is one of NoSchedule, PreferNoSchedule, NoExecute"
    assert k8s.taint_effect("noschedule") is not None  # case matters
    assert get_args(TaintEffect) == k8s.TAINT_EFFECTS


# --- the schema and the file -------------------------------------------------------------------


def _config(overrides: dict[str, Any]) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides))


def test_schema_namespace_is_a_dns1123_label() -> None:
    """A namespace may start with a digit (a DNS-1123 label); upper case or a leading '-' is
    refused by the schema, before any check."""
    assert _config({"trainer": {"job": {"namespace": "1team"}}}).trainer.job.namespace == "1team"
    for bad in ("Training", "-training", "n" * 64):
        with pytest.raises(ValueError):
            _config({"trainer": {"job": {"namespace": bad}}})


def test_schema_job_name_is_a_dns1035_label() -> None:
    assert _config({"trainer": {"job": {"name": "a1"}}}).trainer.job.name == "a1"
    with pytest.raises(ValueError):
        _config({"trainer": {"job": {"name": "1a"}}})


EKS = {
    "orchestrator": "eks",
    "network": {
        "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
        "control_plane_availability_zone_id": "usw2-az1",
    },
}


def test_a_bad_label_key_is_reported_at_its_own_line(write_env: WriteEnv) -> None:
    """A label key with dots in it is one key of the path (`labels[example.com/...]`), so the
    finding lands on the key's line, not on `labels:`."""
    key = "example.com/" + "n" * 64
    workers = {
        "name": "workers",
        "role": "worker",
        "instance_type": "ml.g5.12xlarge",
        "instance_count": 4,
        "kubernetes": {"labels": {"example.com/ok": "a", key: "b"}},
    }
    path: Path = write_env(merge(EKS, {"cluster": {"instance_groups": [workers]}}))
    with pytest.raises(ConfigError) as e:
        load_environment(path)
    (finding,) = [f for f in e.value.findings if f.check == "kubernetes-names"]
    lines = path.read_text().splitlines()
    assert finding.line is not None
    assert lines[finding.line - 1].strip().startswith(key), lines[finding.line - 1]
    assert "has 64 characters; Kubernetes takes at most 63" in finding.render(str(path))
