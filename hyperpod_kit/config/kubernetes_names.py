"""Kubernetes' syntax for the names a value of the environment file becomes: label and taint keys
(qualified names), label and taint values, namespaces and other object names (DNS-1123 labels
and subdomains, DNS-1035 labels), taint effects.

The rules are Kubernetes' own, as k8s.io/apimachinery/pkg/util/validation (validation.go:
IsQualifiedName, IsValidLabelValue, IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label) and
k8s.io/api/core/v1 (TaintEffect) write them. The schema's patterns are built from the formats
here, and the `kubernetes-names` check (validators/platform.py) measures what a pattern cannot:
the lengths of a key's prefix and name, and names made of several values. Each function returns
None for a good value, or a message that names the rule and its limit.
"""

from __future__ import annotations

import re

# The formats, unanchored, as apimachinery writes them.
QUALIFIED_NAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
DNS1123_LABEL_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = rf"{DNS1123_LABEL_FMT}(\.{DNS1123_LABEL_FMT})*"
DNS1035_LABEL_FMT = r"[a-z]([-a-z0-9]*[a-z0-9])?"

QUALIFIED_NAME_MAX = 63  # the name part of a qualified name
LABEL_VALUE_MAX = 63
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253  # also a qualified name's prefix
DNS1035_LABEL_MAX = 63
# A qualified name at its longest: a 253-character prefix, "/", a 63-character name.
QUALIFIED_NAME_TOTAL_MAX = DNS1123_SUBDOMAIN_MAX + 1 + QUALIFIED_NAME_MAX

# Anchored patterns for the schema's fields (pydantic's `pattern`).
QUALIFIED_NAME_PATTERN = rf"^({DNS1123_SUBDOMAIN_FMT}/)?{QUALIFIED_NAME_FMT}$"
LABEL_VALUE_PATTERN = rf"^({QUALIFIED_NAME_FMT})?$"
DNS1123_LABEL_PATTERN = rf"^{DNS1123_LABEL_FMT}$"
DNS1123_SUBDOMAIN_PATTERN = rf"^{DNS1123_SUBDOMAIN_FMT}$"
DNS1035_LABEL_PATTERN = rf"^{DNS1035_LABEL_FMT}$"

# k8s.io/api/core/v1 TaintEffect: the effects a node taint may have.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_FMT)
_DNS1123_LABEL = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL = re.compile(DNS1035_LABEL_FMT)


def _too_long(what: str, value: str, most: int) -> str | None:
    if len(value) > most:
        return f"{what} has {len(value)} characters; Kubernetes takes at most {most}"
    return None


def qualified_name(value: str) -> str | None:
    """A label, annotation or taint key: an optional prefix (a DNS-1123 subdomain of at most
    253 characters) and "/", then a name of at most 63 letters, digits, '-', '_' and '.' that
    starts and ends with a letter or digit (IsQualifiedName)."""
    parts = value.split("/")
    if len(parts) > 2:
        return "a qualified name has at most one '/' (prefix/name)"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "a qualified name's prefix (before '/') is empty"
        why = dns1123_subdomain(prefix)
        if why is not None:
            return f"its prefix {prefix!r}: {why}"
    else:
        name = parts[0]
    if not name:
        return "a qualified name's name part is empty"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            f"its name {name!r} is not a qualified name: letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return _too_long(f"its name {name!r}", name, QUALIFIED_NAME_MAX)


def label_value(value: str) -> str | None:
    """A label (or taint) value: empty, or at most 63 letters, digits, '-', '_' and '.' that
    start and end with a letter or digit (IsValidLabelValue)."""
    if value and not _QUALIFIED_NAME.fullmatch(value):
        return (
            "a label value has letters, digits, '-', '_' and '.' only, and starts and ends with "
            "a letter or digit"
        )
    return _too_long("a label value", value, LABEL_VALUE_MAX)


def dns1123_label(value: str) -> str | None:
    """A namespace (and most object names): at most 63 lowercase letters, digits and '-',
    starting and ending with a letter or digit (IsDNS1123Label, RFC 1123)."""
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            "a DNS-1123 label has lowercase letters, digits and '-' only, and starts and ends "
            "with a letter or digit"
        )
    return _too_long("a DNS-1123 label", value, DNS1123_LABEL_MAX)


def dns1123_subdomain(value: str) -> str | None:
    """An object name such as a PersistentVolume's, or a key's prefix: DNS-1123 labels joined by
    '.', at most 253 characters (IsDNS1123Subdomain)."""
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "a DNS-1123 subdomain is lowercase letters, digits, '-' and '.', each part starting "
            "and ending with a letter or digit"
        )
    return _too_long("a DNS-1123 subdomain", value, DNS1123_SUBDOMAIN_MAX)


def dns1035_label(value: str) -> str | None:
    """A Service's name (and so a job's, whose pods get a Service each): a DNS-1123 label that
    starts with a letter (IsDNS1035Label)."""
    if not _DNS1035_LABEL.fullmatch(value):
        return (
            "a DNS-1035 label has lowercase letters, digits and '-' only, starts with a letter "
            "and ends with a letter or digit"
        )
    return _too_long("a DNS-1035 label", value, DNS1035_LABEL_MAX)


def taint_effect(value: str) -> str | None:
    """A taint's effect: NoSchedule, PreferNoSchedule or NoExecute."""
    if value not in TAINT_EFFECTS:
        return f"a taint's effect is one of {', '.join(TAINT_EFFECTS)}"
    return None
