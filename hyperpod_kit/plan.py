"""What a new synth would change against a baseline assembly, offline: refusals and losses first.

`cdk diff` needs credentials to read the deployed stacks; CI often has none. This compares two
cloud assemblies (the baseline is usually the `cdk.out` of what is deployed, or of main), nested
stacks included (found through the asset manifests, as the gates find them), and says per resource
whether it is added, updated, replaced or removed, and what each changed property does, from one
table of update rules (`config/facts/update_rules.json`) merged with the create-only properties of
the CloudFormation registry schemas that cfn-lint ships:

- `replace`: a new resource, the old one deleted; it spreads to whatever refers to the replaced
  resource in a create-only property, across stacks through exports and nested-stack parameters;
- `refused`: the service refuses the update (FSx capacity only grows, EKS moves one minor version
  up, Aurora and Managed Grafana versions only move up, a Slurm group's NodeType, the controller
  group removed, ...), or CloudFormation does (a replacement that keeps a custom name, a name
  removed and added, an export another deployed stack imports changed or removed): the deploy
  would fail and roll back half-way, so no flag lets it pass; a row that cites AWS's words names
  the page;
- `nodes_recreated`: an instance group renamed or removed (list items are paired by their
  identity, so a rename is a removal and an addition), a new instance type, fewer nodes;
- `rolling_update`: a new AMI (release version or image) for a group: HyperPod takes its nodes
  out of service batch by batch (the group's deployment configuration: batch size, wait, the
  alarms it rolls back on; on a Slurm cluster the whole group is one batch: AWS updates in
  batches on EKS clusters only), and jobs on a batch's nodes end;
- `new_nodes_only`: lifecycle scripts and storage, which only nodes provisioned later see;
- `safe`.

People (Studio profiles, the partitions gate, the users file the cluster stack uploads) are
compared by name: removed, uid changed or reused (refused: the nodes never renumber an account),
and added, where a re-added person cannot be told from a new one (synth records no removed people).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from hyperpod_kit.cloud_assembly import (
    AssemblyFileError,
    asset_of,
    file_assets,
    read_json,
    stack_artifacts,
)
from hyperpod_kit.config.facts import HERE as FACTS
from hyperpod_kit.lifecycle import USERS_FILE
from hyperpod_kit.lock import LOCK_IN_ASSEMBLY, lock_changes

STATEFUL_TYPES = frozenset(
    {
        "AWS::FSx::FileSystem", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::SageMaker::Cluster",
        "AWS::SageMaker::Domain", "AWS::EKS::Cluster", "AWS::EFS::FileSystem",
        "AWS::DynamoDB::Table", "AWS::RDS::DBCluster", "AWS::APS::Workspace",
    }
)  # fmt: skip

Action = Literal["add", "update", "replace", "refuse", "remove"]
Kind = Literal["refused", "replace", "nodes_recreated", "rolling_update", "new_nodes_only", "safe"]
KINDS: tuple[Kind, ...] = (
    "refused",
    "replace",
    "nodes_recreated",
    "rolling_update",
    "new_nodes_only",
    "safe",
)
UPDATE_RULES = FACTS / "update_rules.json"
NESTED_STACK = "AWS::CloudFormation::Stack"
_SUB_REF = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
# An RDS engine version: Aurora MySQL's `8.0.mysql_aurora.3.05.2` (the MySQL major, then Aurora's
# own release), or a plain dotted one (`16.4`).
_ENGINE_VERSION = re.compile(r"^(\d+)\.(\d+)\.mysql_aurora\.(\d+)\.(\d+)\.(\d+)$|^\d+(?:\.\d+)*$")

# Exit codes of `hyperpod-kit plan` (documented in its --help, the README and docs/architecture.md).
EXIT_OK, EXIT_DANGEROUS, EXIT_BAD_INPUT, EXIT_REFUSED = 0, 1, 2, 3


# An assembly plan cannot read: one line that names the file and what is wrong with it.
PlanInputError = AssemblyFileError


class NoStageError(PlanInputError):
    """A pipeline's assembly as the baseline, none of whose stages deploys the candidate's stacks:
    comparing with all of it would report every stack of the pipeline as removed."""

    hint = (
        "plan against the assembly of a pipeline that deploys this file (a stage of its "
        "`pipeline codepipeline --env`), or against `hyperpod-kit synth` of the file on main"
    )


# --- the rule table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    type: str
    path: str  # a schema pointer, through lists with `*`
    kind: Kind
    why: str
    source: str
    when: str = "changed"  # a comparator in COMPARATORS, or "removed" (a list item)
    match: tuple[tuple[str, Any], ...] = ()  # for "removed": values the old item must have
    order: tuple[str, ...] = ()  # for "moves_backwards"
    within: str = ""  # a pointer that must exist on both sides (the block the value lives in)
    url: str = ""  # where AWS states it (refusals name it)
    checked: str = ""  # when that statement was read


@dataclass(frozen=True)
class Rules:
    checked: str
    identity_keys: tuple[str, ...]
    rules: tuple[Rule, ...]
    registry: dict[str, tuple[str, ...]]  # type -> createOnly as recorded with the table
    registry_cfn_lint: str
    # type -> (its name property, the property that scopes the name or "")
    custom_names: dict[str, tuple[str, str]] = field(default_factory=dict)
    custom_name_source: str = ""
    exports_url: str = ""  # where CloudFormation states that an export in use cannot change

    def for_type(self, resource_type: str) -> list[Rule]:
        """Our rows for the type, then a `replace` row per create-only property of cfn-lint's
        schema that our rows do not already name."""
        ours = [r for r in self.rules if r.type == resource_type]
        named = {r.path for r in ours if r.kind == "replace"}
        return ours + [
            Rule(resource_type, path, "replace", "", "registry")
            for path in create_only_properties(resource_type)
            if path not in named
        ]


@cache
def update_rules(path: Path = UPDATE_RULES) -> Rules:
    data = json.loads(path.read_text(encoding="utf-8"))
    rules = tuple(
        Rule(
            type=row["type"], path=row["path"], kind=row["kind"], why=row["why"],
            source=row["source"], when=row.get("when", "changed"),
            match=tuple(sorted(row.get("match", {}).items())), order=tuple(row.get("order", ())),
            within=row.get("within", ""), url=row.get("url", ""), checked=row.get("checked", ""),
        )
        for row in data["rules"]
    )  # fmt: skip
    registry = data["registry_create_only"]
    return Rules(
        checked=str(data["checked"]),
        identity_keys=tuple(data["identity_keys"]),
        rules=rules,
        registry={t: tuple(paths) for t, paths in registry["types"].items()},
        registry_cfn_lint=str(registry["cfn_lint"]),
        custom_names={
            t: (row["name"], row.get("within", ""))
            for t, row in data["custom_names"]["types"].items()
        },
        custom_name_source=str(data["custom_names"]["source"]),
        exports_url=str(data.get("exports_in_use", {}).get("url", "")),
    )


@cache
def registry_create_only(resource_type: str) -> tuple[str, ...] | None:
    """`createOnlyProperties` of the CloudFormation registry schema bundled with cfn-lint
    (offline), as it stands; None for a type cfn-lint does not know."""
    from cfnlint.schema import ResourceNotFoundError
    from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    except ResourceNotFoundError:
        return None
    return tuple(schema.get("createOnlyProperties", []))


def create_only_properties(resource_type: str) -> tuple[str, ...]:
    """Properties whose change replaces the resource, from the CloudFormation registry schema
    bundled with cfn-lint (offline); none for an unknown type."""
    found = registry_create_only(resource_type) or ()
    return tuple(p for p in found if p.startswith("/properties/"))


def _cfn_lint_version() -> str:
    from cfnlint.version import __version__

    return str(__version__)


def registry_drift(rules: Rules | None = None) -> list[str]:
    """How the create-only properties that cfn-lint ships differ from those the table recorded
    when its rules were written, one line per type and direction; empty when they agree. A type
    the rules name but the record lacks is reported too."""
    rules = rules or update_rules()
    version, recorded_with = _cfn_lint_version(), rules.registry_cfn_lint
    report = [
        f"{t}: the table has rules for it but no record of its create-only properties"
        for t in sorted({r.type for r in rules.rules if r.type.startswith("AWS::")})
        if t not in rules.registry
    ]
    for resource_type, recorded in sorted(rules.registry.items()):
        now = registry_create_only(resource_type)
        if now is None:
            report.append(f"{resource_type}: cfn-lint {version} does not know the type any more")
            continue
        ours = sorted({f"{r.path} ({r.kind})" for r in rules.rules if r.type == resource_type})
        review = f"; the table's rules for it: {', '.join(ours)}" if ours else ""
        if added := [p for p in now if p not in recorded]:
            report.append(
                f"{resource_type}: cfn-lint {version} marks create-only (replace) what "
                f"{recorded_with} did not: {', '.join(added)}{review}"
            )
        if removed := [p for p in recorded if p not in now]:
            report.append(
                f"{resource_type}: cfn-lint {version} no longer marks create-only what "
                f"{recorded_with} did: {', '.join(removed)} (now an update to CloudFormation: "
                f"does the service refuse it, or recreate nodes?){review}"
            )
    return report


def record_registry(path: Path = UPDATE_RULES) -> None:
    """Record the installed cfn-lint's create-only properties in the table (after review)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    types = data["registry_create_only"]["types"]
    lines = [
        f"   {json.dumps(t)}: {json.dumps(list(registry_create_only(t) or ()))}" for t in types
    ]
    block = text.index('"registry_create_only"')
    start = text.index('  "types": {\n', block) + len('  "types": {\n')
    end = text.index("\n  }\n }\n}", start)
    text = text[:start] + ",\n".join(lines) + text[end:]
    text = re.sub(r'"cfn_lint": "[^"]*"', f'"cfn_lint": "{_cfn_lint_version()}"', text)
    json.loads(text)
    path.write_text(text, encoding="utf-8")
    update_rules.cache_clear()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _version(value: Any) -> tuple[int, int] | None:
    found = _VERSION.match(str(value)) if isinstance(value, str | int | float) else None
    return (int(found.group(1)), int(found.group(2))) if found else None


def _engine_version(value: Any) -> tuple[int, ...] | None:
    """`8.0.mysql_aurora.3.05.2` -> (8, 0, 3, 5, 2): the MySQL major first, so a change of family
    (5.7 -> 8.0) orders like Aurora's 2.x -> 3.x; `16.4` -> (16, 4); None for anything else."""
    found = _ENGINE_VERSION.match(value) if isinstance(value, str) else None
    if found is None:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", value))


def _engine_version_decreased(old: Any, new: Any, _: Rule) -> bool:
    a, b = _engine_version(old), _engine_version(new)
    return a is not None and b is not None and b < a


def _decreased(old: Any, new: Any, _: Rule) -> bool:
    a, b = _number(old), _number(new)
    return a is not None and b is not None and b < a


def _increased(old: Any, new: Any, _: Rule) -> bool:
    a, b = _number(old), _number(new)
    return a is not None and b is not None and b > a


def _version_decreased(old: Any, new: Any, _: Rule) -> bool:
    a, b = _version(old), _version(new)
    return a is not None and b is not None and b < a


def _version_skips_minor(old: Any, new: Any, _: Rule) -> bool:
    a, b = _version(old), _version(new)
    return a is not None and b is not None and b > (a[0], a[1] + 1)


def _version_next_minor(old: Any, new: Any, _: Rule) -> bool:
    a, b = _version(old), _version(new)
    return a is not None and b is not None and b == (a[0], a[1] + 1)


def _moves_backwards(old: Any, new: Any, rule: Rule) -> bool:
    return old in rule.order and new in rule.order and rule.order.index(new) < rule.order.index(old)


def _changed(old: Any, new: Any, _: Rule) -> bool:
    return bool(old != new)


def _unset(old: Any, new: Any, _: Rule) -> bool:
    return old is not None and new is None


# Comparators the table names in `when`: (old value, new value, rule) -> whether the rule applies.
COMPARATORS = {
    "changed": _changed,
    "decreased": _decreased,
    "increased": _increased,
    "version_decreased": _version_decreased,
    "engine_version_decreased": _engine_version_decreased,
    "version_skips_minor": _version_skips_minor,
    "version_next_minor": _version_next_minor,
    "moves_backwards": _moves_backwards,
    "unset": _unset,
}
_SAYS = {
    "changed": "changed",
    "decreased": "decreased",
    "increased": "increased",
    "version_decreased": "downgraded",
    "engine_version_decreased": "downgraded",
    "version_skips_minor": "skips a minor version",
    "version_next_minor": "upgraded",
    "moves_backwards": "moved back",
    "unset": "removed",
}


# --- what plan reports ------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """What one changed property (or list item) does."""

    kind: Kind
    where: str  # InstanceGroups[gpu].InstanceType
    what: str  # "changed (ml.p5.48xlarge -> ml.p5e.48xlarge)", "removed"
    why: str  # from the rule table; empty for cfn-lint's create-only rows
    source: str
    url: str = ""  # where AWS states it: a refusal names it

    def render(self) -> str:
        cited = f" (source: {self.url})" if self.url and self.kind == "refused" else ""
        return f"{self.where} {self.what}" + (f": {self.why}" if self.why else "") + cited

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "where": self.where, "what": self.what, "why": self.why,
                "source": self.source, "url": self.url}  # fmt: skip


@dataclass(frozen=True)
class Change:
    stack: str
    logical_id: str
    type: str
    action: Action
    why: tuple[str, ...] = ()
    retained: bool = False
    effects: tuple[Effect, ...] = ()

    @property
    def stateful(self) -> bool:
        return self.type in STATEFUL_TYPES

    @property
    def refused(self) -> bool:
        return self.action == "refuse"

    @property
    def nodes_recreated(self) -> bool:
        return any(e.kind == "nodes_recreated" for e in self.effects)

    @property
    def rolling_update(self) -> bool:
        return any(e.kind == "rolling_update" for e in self.effects)

    @property
    def dangerous(self) -> bool:
        """Refused by the service (the deploy fails and rolls back half-way), a stateful resource
        replaced or removed (its data lost or orphaned), nodes deleted, or nodes taken out of
        service batch by batch for a new AMI."""
        return (
            self.refused
            or (self.stateful and self.action in ("replace", "remove"))
            or (self.action == "update" and (self.nodes_recreated or self.rolling_update))
        )

    @property
    def label(self) -> str:
        if self.action == "update" and self.nodes_recreated:
            return "NODES RECREATED"
        if self.action == "update" and self.rolling_update:
            return "ROLLING AMI UPDATE"
        return {"replace": "REPLACE", "remove": "REMOVE", "refuse": "UPDATE REFUSED"}.get(
            self.action, self.action
        )

    def render(self) -> str:
        plain = {"add": "+", "update": "~", "remove": "-"}
        mark = "!" if self.dangerous or self.action not in plain else plain[self.action]
        extra = " (stateful)" if self.stateful and self.action != "add" else ""
        if self.action == "remove" and self.retained:
            extra += " (retained: orphaned, not deleted)"
        why = f": {'; '.join(self.why)}" if self.why else ""
        return f"{mark} {self.stack} {self.logical_id} ({self.type}) {self.label}{extra}{why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack, "logical_id": self.logical_id, "type": self.type,
            "action": self.action, "label": self.label, "stateful": self.stateful,
            "retained": self.retained, "refused": self.refused, "dangerous": self.dangerous,
            "why": list(self.why), "effects": [e.to_json() for e in self.effects],
        }  # fmt: skip


PersonAction = Literal["removed", "added", "uid_changed", "uid_reused"]


@dataclass(frozen=True)
class PersonChange:
    name: str
    action: PersonAction
    uid_before: int | None
    uid_after: int | None
    places: tuple[str, ...]  # where the person is (after, or before when removed)
    note: str

    @property
    def refused(self) -> bool:
        return self.action in ("uid_changed", "uid_reused")

    @property
    def dangerous(self) -> bool:
        return self.refused or self.action == "removed"

    def render(self) -> str:
        mark = {"removed": "-", "added": "+"}.get(self.action, "!")
        label = {"removed": "REMOVED", "added": "added", "uid_changed": "UID CHANGED (refused)",
                 "uid_reused": "UID REUSED (refused)"}[self.action]  # fmt: skip
        uid = (
            f"uid {self.uid_before} -> {self.uid_after}"
            if self.action == "uid_changed"
            else f"uid {self.uid_after if self.uid_after is not None else self.uid_before}"
        )
        return f"{mark} person {self.name} {label} ({uid}; {', '.join(self.places)}): {self.note}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "uid_before": self.uid_before,
            "uid_after": self.uid_after,
            "places": list(self.places),
            "refused": self.refused,
            "dangerous": self.dangerous,
            "note": self.note,
        }


_ACTIONS: tuple[Action, ...] = ("add", "update", "replace", "remove", "refuse")


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    people: list[PersonChange] = field(default_factory=list)
    lock: list[str] = field(default_factory=list)  # the version lock's changes, shown first

    @property
    def refused(self) -> list[Change | PersonChange]:
        return [*(c for c in self.changes if c.refused), *(p for p in self.people if p.refused)]

    @property
    def dangerous(self) -> list[Change | PersonChange]:
        """Everything that makes `plan` exit non-zero, refusals included."""
        return [*(c for c in self.changes if c.dangerous), *(p for p in self.people if p.dangerous)]

    def exit_code(self, *, allow_replacement: bool = False) -> int:
        """3 when AWS would refuse a change (no flag helps: the deploy would fail half-way);
        1 when something stateful is replaced or removed, nodes are deleted or people removed,
        unless `allow_replacement`; else 0."""
        if self.refused:
            return EXIT_REFUSED
        if self.dangerous and not allow_replacement:
            return EXIT_DANGEROUS
        return EXIT_OK

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {
            a: sum(1 for c in self.changes if c.action == a) for a in _ACTIONS
        }
        return {
            **counts,
            "nodes_recreated": sum(1 for c in self.changes if c.nodes_recreated),
            "rolling_updates": sum(1 for c in self.changes if c.rolling_update),
            "people_removed": sum(1 for p in self.people if p.action == "removed"),
            "people_added": sum(1 for p in self.people if p.action == "added"),
            "refused": len(self.refused),
            "dangerous": len(self.dangerous),
        }

    def summary(self) -> str:
        n = self.counts()
        refused = f", {n['refuse']} the service refuses" if n["refuse"] else ""
        people = ""
        if self.people:
            people = (f"; people: {n['people_added']} added, {n['people_removed']} removed, "
                      f"{sum(1 for p in self.people if p.refused)} uid refused")  # fmt: skip
        return (
            f"{n['add']} to add, {n['update']} to update, {n['replace']} to replace, "
            f"{n['remove']} to remove{refused}{people}; {n['dangerous']} dangerous "
            "(refused, stateful replaced or removed, nodes recreated or updated, people removed)"
        )

    def ordered(self) -> list[Change | PersonChange]:
        """Refused first, then dangerous, then the rest; people after resources in each."""
        rank = {"refuse": 0, "remove": 1, "replace": 2, "update": 3, "add": 4}

        def key(item: Change | PersonChange) -> tuple[int, int, str, str]:
            group = 0 if item.refused else 1 if item.dangerous else 2
            if isinstance(item, PersonChange):
                return (group, 5, "~people", item.name)
            return (group, rank[item.action], item.stack, item.logical_id)

        return sorted([*self.changes, *self.people], key=key)

    def render_text(self) -> str:
        return "\n".join([*self.lock, *(item.render() for item in self.ordered()), self.summary()])

    def to_json(self, *, allow_replacement: bool = False) -> dict[str, Any]:
        return {
            "format": 1,
            "exit_code": self.exit_code(allow_replacement=allow_replacement),
            "summary": self.counts(),
            "changes": [c.to_json() for c in self.ordered() if isinstance(c, Change)],
            "people": [p.to_json() for p in self.ordered() if isinstance(p, PersonChange)],
            "rules_checked": update_rules().checked,
            "lock": list(self.lock),
        }

    def render_markdown(self, *, allow_replacement: bool = False) -> str:
        code = self.exit_code(allow_replacement=allow_replacement)
        n = self.counts()
        head = {
            EXIT_REFUSED: f"**plan: {n['refused']} change(s) AWS or the nodes refuse** (the "
            "deploy would fail half-way)",
            EXIT_DANGEROUS: f"**plan: {n['dangerous']} dangerous change(s)** (data, nodes or "
            "people lost)",
            EXIT_OK: "**plan: nothing dangerous**"
            + (" (dangerous changes allowed)" if n["dangerous"] else ""),
        }[code]
        lines = [f"{head}: {self.summary()}", ""]
        if self.lock:  # the version lock first: what moved under the templates
            lines += [
                f"- {_cell(line).replace('lock: ', 'version lock: ', 1)}" for line in self.lock
            ]
            lines.append("")
        items = self.ordered()
        if not items:
            return "\n".join([*lines, "No changes."])
        lines += ["| | change | stack | resource | type | why |", "|---|---|---|---|---|---|"]
        for item in items:
            sign = "⛔" if item.refused else "⚠️" if item.dangerous else ""
            if isinstance(item, PersonChange):
                row = [sign, item.action, "", f"person `{item.name}`", "",
                       f"{', '.join(item.places)}: {item.note}"]  # fmt: skip
            else:
                row = [sign, item.label, item.stack, f"`{item.logical_id}`", item.type,
                       "; ".join(item.why)]  # fmt: skip
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- reading an assembly ----------------------------------------------------------------------


@dataclass
class Assembly:
    """The templates of an assembly by stack label (nested stacks as ``parent/Name``), how nested
    stacks get their parameters, the users files its stacks upload, and the stage each stack is
    deployed by (CDK Pipelines; "" for a stack at the top).

    A stack's label is its CloudFormation stack name, what a deploy updates: an environment's
    stacks are labelled alike whether `hyperpod-kit synth` wrote them or a pipeline's stage did,
    so either can be the other's baseline. Only where two stacks of one assembly share a name (in
    two accounts) does the second keep its stage's path (``prod/team-network``)."""

    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (nested label, parameter) -> (parent label, the value the parent passes)
    parameters: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)
    users_files: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> users.json
    stages: dict[str, str] = field(default_factory=dict)  # top-level stack label -> stage

    def only_stage(self, stage: str) -> Assembly:
        """The stacks of one stage, their nested stacks with them."""
        keep = {label for label, s in self.stages.items() if s == stage}

        def kept(label: str) -> bool:  # the stack, or one nested in it (``parent/Name``)
            return label in keep or any(label.startswith(f"{k}/") for k in keep)

        return Assembly(
            templates={k: v for k, v in self.templates.items() if kept(k)},
            parameters={k: v for k, v in self.parameters.items() if kept(k[0])},
            users_files={k: v for k, v in self.users_files.items() if kept(k)},
            stages={k: v for k, v in self.stages.items() if k in keep},
        )


def read_assembly(folder: Path) -> Assembly:
    """Every stack of a cloud assembly, nested stacks, users files and the stacks of its stages
    (nested assemblies, as CDK Pipelines deploys them) included; a file that is missing or not
    JSON raises PlanInputError naming it."""
    if not folder.is_dir():
        raise PlanInputError(f"{folder}: no such folder (a cloud assembly, e.g. cdk.out)")
    manifest = read_json(folder / "manifest.json", "the assembly's manifest")
    artifacts = manifest.get("artifacts", {}) if isinstance(manifest, dict) else None
    if not isinstance(artifacts, dict):
        raise PlanInputError(f"{folder / 'manifest.json'}: no artifacts")
    found = Assembly()
    assets: dict[Path, dict[str, Path]] = {}  # per assembly folder (a stage's is its own)
    for stack in stack_artifacts(folder, artifacts):
        if stack.folder not in assets:
            assets[stack.folder] = file_assets(stack.folder, stack.artifacts)
        template_file = (stack.artifact.get("properties") or {}).get("templateFile")
        if not isinstance(template_file, str):
            raise PlanInputError(
                f"{stack.folder / 'manifest.json'}: stack {stack.name} names no template"
            )
        label = stack.stack_name if stack.stack_name not in found.stages else stack.label
        template = _template(stack.folder / template_file, label)
        found.stages[label] = stack.stage
        _add_stack(found, label, template, assets[stack.folder], stack.folder)
    return found


def _template(path: Path, label: str) -> dict[str, Any]:
    template = read_json(path, f"the template of {label}")
    if not isinstance(template, dict) or not isinstance(template.get("Resources", {}), dict):
        raise PlanInputError(f"{path}: the template of {label} has no Resources object")
    rules = update_rules()
    for logical, resource in template.get("Resources", {}).items():
        if not isinstance(resource, dict) or not isinstance(resource.get("Type"), str):
            raise PlanInputError(f"{path}: resource {logical} of {label} has no Type")
        malformed = _malformed(resource, logical, rules)
        if malformed is not None:
            raise PlanInputError(f"{path}: {malformed} (stack {label})")
    return template


def _intrinsic(node: Any) -> bool:
    """A CloudFormation function (`Ref`, `Fn::...`): its value is not known offline."""
    if not isinstance(node, dict) or len(node) != 1:
        return False
    key = str(next(iter(node)))
    return key == "Ref" or key.startswith("Fn::")


def _a(node: Any) -> str:
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "a list"}
    shown = json.dumps(node)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{kinds.get(type(node), 'an object')} ({shown})"


def _malformed(resource: dict[str, Any], logical: str, rules: Rules) -> str | None:
    """Where a resource's properties are not the shape the update rules walk (a list where the
    rule goes through items, an object where it names a key), as a JSON path and what is there,
    or None. Without this a string for `InstanceGroups` read as "no groups", and the plan an
    update."""
    where = f"Resources.{logical}.Properties"
    props = resource.get("Properties")
    if props is None:
        return None
    if not isinstance(props, dict):
        return f"{where} is {_a(props)}, not an object"
    pointers = {r.path for r in rules.for_type(resource["Type"])}
    pointers |= {r.within for r in rules.for_type(resource["Type"]) if r.within}

    def walk(node: Any, parts: list[str], at: str) -> str | None:
        if not parts or node is None or _intrinsic(node):
            return None
        part, rest = parts[0], parts[1:]
        if part == "*":
            if not isinstance(node, list):
                return f"{at} is {_a(node)}, not a list"
            for i, item in enumerate(node):
                if (found := walk(item, rest, f"{at}[{i}]")) is not None:
                    return found
            return None
        if not isinstance(node, dict):
            return f"{at} is {_a(node)}, not an object"
        return walk(node.get(part), rest, f"{at}.{part}")

    for pointer in sorted(pointers):
        parts = pointer.split("/")[2:]  # "/properties/A/*/B" -> A, *, B
        if parts and (found := walk(props.get(parts[0]), parts[1:], f"{where}.{parts[0]}")):
            return found
    return None


def _add_stack(
    found: Assembly, label: str, template: dict[str, Any], assets: dict[str, Path], folder: Path
) -> None:
    found.templates[label] = template
    for logical, resource in template.get("Resources", {}).items():
        props = resource.get("Properties") or {}
        if resource["Type"] == NESTED_STACK:
            path = asset_of(props.get("TemplateURL"), assets)
            nested = f"{label}/{logical.split('NestedStack')[0] or logical}"
            if path is None:
                raise PlanInputError(
                    f"{folder}: the template of nested stack {nested} is not among the "
                    "assembly's assets"
                )
            for param, value in (props.get("Parameters") or {}).items():
                found.parameters[(nested, param)] = (label, value)
            _add_stack(found, nested, _template(path, nested), assets, folder)
        elif resource["Type"] == "Custom::CDKBucketDeployment":
            for key in props.get("SourceObjectKeys") or []:
                source = asset_of(str(key), assets)
                if source is not None and not source.exists():  # it may hold the users file
                    raise PlanInputError(f"{source}: an asset that {label} uploads is missing")
                if source is not None and source.is_dir() and (source / USERS_FILE).exists():
                    users = read_json(source / USERS_FILE, f"the users file of {label}")
                    found.users_files[f"{label}/{logical}"] = users


def load_templates(assembly: Path) -> dict[str, dict[str, Any]]:
    """Stack label -> template, for every stack of a cloud assembly folder, nested ones too."""
    return read_assembly(assembly).templates


# --- comparing --------------------------------------------------------------------------------


def plan(baseline: Path, candidate: Path) -> Plan:
    """Compare two assemblies. Raises PlanInputError when either cannot be read."""
    old, new = read_assembly(baseline), read_assembly(candidate)
    old = _stage_of(old, new, baseline)
    rules = update_rules()
    changes: dict[tuple[str, str], Change] = {}
    for stack in sorted(old.templates.keys() | new.templates.keys()):
        before = old.templates.get(stack, {}).get("Resources", {})
        after = new.templates.get(stack, {}).get("Resources", {})
        for logical in sorted(before.keys() | after.keys()):
            change = _compare(rules, stack, logical, before.get(logical), after.get(logical))
            if change is not None:
                changes[(stack, logical)] = change
    _spread_replacements(new, changes)
    _refuse_exports_in_use(rules, old, new, changes)
    _refuse_name_collisions(rules, old, new, changes)
    lock = lock_changes(_lock_of(baseline), _lock_of(candidate))
    return Plan(list(changes.values()), compare_people(people(old), people(new)), lock)


def _lock_of(assembly: Path) -> dict[str, Any] | None:
    """The version lock synth put into the assembly (none in an assembly older than locks)."""
    path = assembly / LOCK_IN_ASSEMBLY
    return read_json(path, "the version lock in the assembly") if path.is_file() else None


def _stage_of(baseline: Assembly, candidate: Assembly, folder: Path) -> Assembly:
    """A pipeline's assembly as the baseline of one environment's synth: only the stage that
    deploys the candidate's stacks (the others, and the pipeline's own stack, are not what the
    candidate would change). Unchanged when the candidate has stages too; NoStageError when no
    stage deploys any of the candidate's stacks."""
    if any(candidate.stages.values()) or not any(baseline.stages.values()):
        return baseline
    ours = set(candidate.stages)
    overlap = {
        stage: len(ours & {k for k, s in baseline.stages.items() if s == stage})
        for stage in set(baseline.stages.values())
        if stage
    }
    best = max(overlap, key=lambda stage: (overlap[stage], stage), default=None)
    if best is None or not overlap[best]:
        raise NoStageError(
            f"{folder}: no stage of this pipeline's assembly deploys the environment's stacks "
            f"({', '.join(sorted(ours))}); its stages are {', '.join(sorted(overlap))}"
        )
    return baseline.only_stage(best)


def _compare(
    rules: Rules,
    stack: str,
    logical: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> Change | None:
    if after is None:
        assert before is not None
        retained = before.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")
        return Change(stack, logical, before["Type"], "remove", retained=retained)
    if before is None:
        return Change(stack, logical, after["Type"], "add")
    kind = after["Type"]
    if before["Type"] != kind:
        return Change(stack, logical, kind, "replace", (f"type was {before['Type']}",))
    props_before, props_after = before.get("Properties", {}), after.get("Properties", {})
    if props_before == props_after and _policies(before) == _policies(after):
        return None
    effects = tuple(_effects(rules, kind, props_before, props_after))
    changed = sorted(k for k in props_before.keys() | props_after.keys()
                     if props_before.get(k) != props_after.get(k))  # fmt: skip
    kinds = {e.kind for e in effects}
    action: Action = (
        "refuse" if "refused" in kinds else "replace" if "replace" in kinds else "update"
    )
    covered = {re.split(r"[.\[]", e.where, maxsplit=1)[0] for e in effects}
    why = tuple(e.render() for e in effects) + tuple(k for k in changed if k not in covered)
    return Change(stack, logical, kind, action, why or ("policies",), effects=effects)


def _effects(
    rules: Rules, resource_type: str, before: dict[str, Any], after: dict[str, Any]
) -> Iterator[Effect]:
    seen: set[str] = set()  # a list item removed is reported once, by its most severe rule
    for rule in sorted(rules.for_type(resource_type), key=lambda r: KINDS.index(r.kind)):
        old = _values(before, rule.path, rules.identity_keys)
        new = _values(after, rule.path, rules.identity_keys)
        if rule.when == "removed":
            for where in old.keys() - new.keys():
                if where in seen or not _matches(old[where], rule.match):
                    continue
                seen.add(where)
                yield Effect(
                    rule.kind, where, _removed(where, old, new), rule.why, rule.source, rule.url
                )
            continue
        compare = COMPARATORS[rule.when]
        if rule.within and not (
            _present(before, rule.within, rules) and _present(after, rule.within, rules)
        ):
            continue
        for where in sorted(old.keys() & new.keys()):  # a property absent on one side is None
            was = old[where]
            if where in seen:  # a more severe rule said it already
                continue
            if was != new[where] and compare(was, new[where], rule):
                seen.add(where)
                what = _SAYS[rule.when] + _values_shown(was, new[where])
                why = rule.why
                if rule.kind == "rolling_update":
                    why = _rolling_update(after, where) + "; " + why
                yield Effect(rule.kind, where, what, why, rule.source, rule.url)


def _present(properties: dict[str, Any], pointer: str, rules: Rules) -> bool:
    return any(v is not None for v in _values(properties, pointer, rules.identity_keys).values())


def _rolling_update(properties: dict[str, Any], where: str) -> str:
    """ "rolling AMI update of group X in batches of N ...": the group's deployment configuration
    (its scheduled updates', else its patches') in the new template, or HyperPod's defaults. On
    a Slurm cluster the whole group at once (facts/orchestrator_rules.json)."""
    name = where.split("[", 1)[1].split("]", 1)[0] if where.startswith("InstanceGroups[") else "?"
    if "Slurm" in (properties.get("Orchestrator") or {}):
        return (
            f"AMI update of group {name}, all of its nodes at once (one batch: AWS updates in "
            "batches on EKS clusters only)"
        )
    group: dict[str, Any] = next(
        (g for g in properties.get("InstanceGroups", []) if g.get("InstanceGroupName") == name),
        {},
    )
    deployment = (
        (group.get("ScheduledUpdateConfig") or {}).get("DeploymentConfig")
        or (group.get("AutoPatchConfig") or {}).get("DeploymentConfig")
        or {}
    )
    size = (deployment.get("RollingUpdatePolicy") or {}).get("MaximumBatchSize") or {}
    if size:
        unit = "%" if size.get("Type") == "CAPACITY_PERCENTAGE" else " node(s)"
        batches = f"in batches of {size.get('Value')}{unit}"
    else:
        batches = "in batches of HyperPod's default size"
    wait = deployment.get("WaitIntervalInSeconds")
    alarms = deployment.get("AutoRollbackConfiguration") or []
    rollback = (
        f"rolled back if any of {len(alarms)} alarms fires" if alarms else "no rollback alarms"
    )
    between = f", {wait} s between batches" if wait else ""
    return f"rolling AMI update of group {name} {batches}{between}, {rollback}"


def _removed(where: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """ "removed", or, when exactly one item left the list and one joined it, "renamed to X",
    which to CloudFormation and the service is a removal and an addition (identities differ)."""
    prefix = where.rsplit("[", 1)[0]
    added = [w for w in new.keys() - old.keys() if w.rsplit("[", 1)[0] == prefix]
    gone = [w for w in old.keys() - new.keys() if w.rsplit("[", 1)[0] == prefix]
    if len(added) == 1 and len(gone) == 1:
        return f"renamed to {added[0].rsplit('[', 1)[1].rstrip(']')} (a removal and an addition)"
    return "removed"


def _matches(item: Any, match: tuple[tuple[str, Any], ...]) -> bool:
    for path, wanted in match:
        node = item
        for part in path.split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if node != wanted:
            return False
    return True


def _values_shown(old: Any, new: Any) -> str:
    scalar = (str, int, float, bool)
    if isinstance(old, scalar) and isinstance(new, scalar) and len(f"{old}{new}") <= 80:
        return f" ({old} -> {new})"
    return ""


def _policies(resource: dict[str, Any]) -> tuple[Any, ...]:
    return resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")


def _spread_replacements(assembly: Assembly, changes: dict[tuple[str, str], Change]) -> None:
    """A replaced resource has a new id: whatever refers to it in a create-only property is
    replaced too. Repeats until nothing new is replaced (chains across stacks via exports and
    into nested stacks via their parameters)."""
    templates = assembly.templates
    exports = {name: (stack, value) for name, (stack, _, value) in _exports(templates).items()}
    grew = True
    while grew:
        grew = False
        replaced = {key for key, c in changes.items() if c.action == "replace"}
        for stack, template in templates.items():
            for logical, res in template.get("Resources", {}).items():
                current = changes.get((stack, logical))
                if current is not None and current.action in ("replace", "add", "refuse"):
                    continue
                effects = tuple(
                    Effect("replace", where, f"refers to replaced {dep[1]}", "", "registry")
                    for pointer in create_only_properties(res["Type"])
                    for where, value in _values(res.get("Properties", {}), pointer).items()
                    for dep in _references(stack, value, exports, assembly.parameters)
                    if dep in replaced
                )
                if effects:
                    why = tuple(e.render() for e in effects)
                    changes[(stack, logical)] = Change(
                        stack, logical, res["Type"], "replace", why, effects=effects
                    )
                    grew = True


def _exports(templates: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, Any]]:
    """Export name -> (the stack that exports it, its output's logical id, the output's value)."""
    return {
        str(out["Export"]["Name"]): (stack, key, out.get("Value"))
        for stack, t in templates.items()
        for key, out in (t.get("Outputs") or {}).items()
        if isinstance(out, dict) and isinstance((out.get("Export") or {}).get("Name"), str)
    }


def _imports(node: Any) -> set[str]:
    """The export names a template (or any part of one) imports with `Fn::ImportValue`; CDK's
    cross-stack references are written as these too."""
    if isinstance(node, dict):
        found = {str(v) for k, v in node.items() if k == "Fn::ImportValue" and isinstance(v, str)}
        return found.union(*(_imports(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_imports(v) for v in node))
    return set()


def _refuse_exports_in_use(
    rules: Rules, old: Assembly, new: Assembly, changes: dict[tuple[str, str], Change]
) -> None:
    """CloudFormation refuses to change or delete an export while a deployed stack imports it
    (the baseline's importers: CDK deploys the exporting stack first). An export changes when its
    output is gone, its value is written differently, or the value refers to a resource that is
    replaced (a new id, whatever the template says). Run after `_spread_replacements`, which
    decides what is replaced; each refusal is one change of the exporting stack's output."""
    before, after = _exports(old.templates), _exports(new.templates)
    importers: dict[str, set[str]] = {}
    for stack, template in old.templates.items():
        for name in _imports(template):
            importers.setdefault(name, set()).add(stack)
    replaced = {key for key, c in changes.items() if c.action == "replace"}
    references = {name: (stack, value) for name, (stack, _, value) in after.items()}
    for name, (stack, output, value) in sorted(before.items()):
        users = sorted(importers.get(name, set()) - {stack})
        if not users:
            continue
        if name not in after:
            what = "removed"
        elif after[name][:2] != (stack, output) or after[name][2] != value:
            what = "changes its value"
        elif moved := sorted(
            dep[1] for dep in _references(stack, value, references, new.parameters)
            if dep in replaced
        ):  # fmt: skip
            what = f"changes its value (it refers to replaced {', '.join(moved)})"
        else:
            continue
        why = (
            f"{' and '.join(users)} import(s) it as {name}, and CloudFormation refuses to change "
            "or delete an export in use. Hint: deploy in two steps: first deploy "
            f"{' and '.join(users)} no longer importing it, then the change to {stack}"
        )
        effect = Effect("refused", "export", what, why, "cloudformation-exports", rules.exports_url)
        changes[(stack, f"Outputs.{output}")] = Change(
            stack, f"Outputs.{output}", "export", "refuse", (effect.render(),), effects=(effect,)
        )


def _name(rules: Rules, resource: dict[str, Any] | None) -> tuple[Any, Any] | None:
    """(custom name, the value that scopes it) of a resource whose type takes a custom name and
    that has one; None otherwise."""
    if resource is None or resource["Type"] not in rules.custom_names:
        return None
    name_path, within = rules.custom_names[resource["Type"]]
    props = resource.get("Properties") or {}
    (name,) = _values(props, name_path).values()
    if name is None:
        return None
    scope = next(iter(_values(props, within).values())) if within else None
    return name, scope


def _refuse_name_collisions(
    rules: Rules, old: Assembly, new: Assembly, changes: dict[tuple[str, str], Change]
) -> None:
    """CloudFormation creates a replacement (or an added resource) before it deletes the old
    one, so a custom name that stays the same collides: the update is refused. A replacement
    that moves the resource to a new scope (a profile into a new domain) is no collision."""

    def resource(assembly: Assembly, key: tuple[str, str]) -> dict[str, Any] | None:
        found: dict[str, Any] | None = (
            assembly.templates.get(key[0], {}).get("Resources", {}).get(key[1])
        )
        return found

    removed = {
        json.dumps(named, sort_keys=True, default=str): key
        for key, c in changes.items()
        if c.action == "remove" and (named := _name(rules, resource(old, key)))
    }
    why = "CloudFormation creates the new resource before it deletes the old one"
    for key, change in list(changes.items()):
        before, after = resource(old, key), resource(new, key)
        named = _name(rules, after)
        if named is None or after is None:
            continue
        label = named[0] if isinstance(named[0], str) else "its name"
        if change.action == "replace" and before is not None and before["Type"] == after["Type"]:
            name_path, within = rules.custom_names[change.type]
            scope_where = within.split("/")[-1] if within else None
            if _name(rules, before) != named or any(
                e.kind == "replace" and e.where == scope_where for e in change.effects
            ):
                continue
            effect = Effect("refused", name_path.split("/", 2)[2].replace("/", "."),
                            f"stays {label} while the resource is replaced",
                            f"a custom-named resource cannot be replaced: {why}. Hint: a new "
                            "name, or undo what replaces it", rules.custom_name_source)  # fmt: skip
        elif change.action == "add":
            taken = removed.get(json.dumps(named, sort_keys=True, default=str))
            if taken is None:
                continue
            effect = Effect("refused", "name", f"{label} is still taken by {taken[0]} {taken[1]}",
                            f"{why} (a rename of its logical id or stack)",
                            rules.custom_name_source)  # fmt: skip
        else:
            continue
        effects = (effect, *change.effects)
        changes[key] = dataclasses.replace(
            change, action="refuse", effects=effects, why=(effect.render(), *change.why)
        )


def _references(
    stack: str,
    value: Any,
    exports: dict[str, tuple[str, Any]],
    parameters: dict[tuple[str, str], tuple[str, Any]],
) -> set[tuple[str, str]]:
    """(stack, logical id) of every resource that `value` refers to, through imports and the
    parameters a parent stack passes to a nested one."""
    found: set[tuple[str, str]] = set()

    def ref(name: str) -> None:
        if (stack, name) in parameters:
            parent, passed = parameters[(stack, name)]
            found.update(_references(parent, passed, exports, parameters))
        else:
            found.add((stack, name))

    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not inner.startswith("AWS::"):
                ref(inner)
            elif key == "Fn::GetAtt":
                ref(str(inner[0] if isinstance(inner, list) else str(inner).split(".")[0]))
            elif key == "Fn::ImportValue" and isinstance(inner, str) and inner in exports:
                producer, exported = exports[inner]
                found |= _references(producer, exported, exports, parameters)
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                for name in _SUB_REF.findall(str(text)):
                    ref(name)
                extra = inner[1] if isinstance(inner, list) and len(inner) > 1 else None
                found |= _references(stack, extra, exports, parameters)
            else:
                found |= _references(stack, inner, exports, parameters)
    elif isinstance(value, list):
        for item in value:
            found |= _references(stack, item, exports, parameters)
    return found


def _values(
    properties: dict[str, Any], pointer: str, identity_keys: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The values at a schema pointer, by where they are: ``/properties/LustreConfiguration/
    DeploymentType`` gives one (None when absent); ``/properties/InstanceGroups/*/InstanceType``
    one per list item, named by the item's identity (``InstanceGroups[gpu].InstanceType``), its
    index when it has none; a pointer ending in ``*`` gives the items themselves."""
    keys = identity_keys if identity_keys is not None else update_rules().identity_keys
    found: dict[str, Any] = {}

    def walk(node: Any, parts: list[str], where: str) -> None:
        if not parts:
            found[where] = node
            return
        part, rest = parts[0], parts[1:]
        if part == "*":
            for i, item in enumerate(node if isinstance(node, list) else []):
                label = next((str(item[k]) for k in keys if isinstance(item, dict)
                              and isinstance(item.get(k), str)), str(i))  # fmt: skip
                walk(item, rest, f"{where}[{label}]")
        else:
            walk(node.get(part) if isinstance(node, dict) else None, rest,
                 f"{where}.{part}" if where else part)  # fmt: skip

    walk(properties, pointer.split("/")[2:], "")
    return found


# --- people -----------------------------------------------------------------------------------


@dataclass
class Person:
    name: str
    uid: int | None = None
    places: set[str] = field(default_factory=set)


def people(assembly: Assembly) -> dict[str, Person]:
    """Everyone the assembly knows, by name: the users files the cluster stack uploads, Studio
    profiles (their PosixUserConfig) and the Studio partitions gate, nested stacks included."""
    found: dict[str, Person] = {}

    def add(name: Any, uid: Any, place: str) -> None:
        if not isinstance(name, str):
            return
        person = found.setdefault(name, Person(name))
        if isinstance(uid, int) and not isinstance(uid, bool) and person.uid is None:
            person.uid = uid
        person.places.add(place)

    for users in assembly.users_files.values():
        for entry in users.get("users", []) if isinstance(users, dict) else []:
            if isinstance(entry, dict):
                add(entry.get("name"), entry.get("uid"), "users file")
    for template in assembly.templates.values():
        for resource in template.get("Resources", {}).values():
            props = resource.get("Properties", {})
            if resource.get("Type") == "AWS::SageMaker::UserProfile":
                posix = (props.get("UserSettings") or {}).get("CustomPosixUserConfig") or {}
                add(props.get("UserProfileName"), posix.get("Uid"), "Studio profile")
            elif resource.get("Type") == "Custom::StudioPartitions":
                for user in props.get("Users") or []:
                    if isinstance(user, dict):
                        add(user.get("Name"), user.get("Uid"), "Studio partition")
    return found


REMOVED_NOTE = (
    "removed: their account is locked on the nodes and their home stays; a retained Studio "
    "profile is orphaned"
)
ADDED_NOTE = (
    "new, or re-added: plan cannot tell (synth does not record removed people); a re-added "
    "person must keep their old uid"
)
STUDIO_READDED_NOTE = (
    ", and their retained Studio profile must be deleted or imported first (docs/studio.md)"
)


def compare_people(before: dict[str, Person], after: dict[str, Person]) -> list[PersonChange]:
    changes: list[PersonChange] = []
    owners = {p.uid: p.name for p in before.values() if p.uid is not None}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if new is None:
            assert old is not None
            changes.append(PersonChange(name, "removed", old.uid, None, tuple(sorted(old.places)),
                                        REMOVED_NOTE))  # fmt: skip
            continue
        places = tuple(sorted(new.places))
        if old is None:
            owner = owners.get(new.uid) if new.uid is not None else None
            if owner is not None and owner != name:
                note = (
                    f"uid {new.uid} was {owner}'s in the baseline: the nodes keep {owner}'s "
                    f"(locked) account, so {name}'s is never created. Hint: another uid"
                )
                changes.append(PersonChange(name, "uid_reused", None, new.uid, places, note))
            else:
                studio = STUDIO_READDED_NOTE if "Studio profile" in places else ""
                changes.append(
                    PersonChange(name, "added", None, new.uid, places, ADDED_NOTE + studio)
                )
        elif old.uid is not None and new.uid is not None and old.uid != new.uid:
            note = ("the nodes keep the old uid (accounts are never renumbered): files and Studio "
                    f"would disagree. Hint: keep uid {old.uid}")  # fmt: skip
            changes.append(PersonChange(name, "uid_changed", old.uid, new.uid, places, note))
    return changes
