"""`plan --deployed`: the baseline is what CloudFormation holds now, not a folder kept by hand.

A kept `cdk.out` may be stale (someone deployed from another branch); the account is not. For
each stack of the candidate assembly (by its CloudFormation name) this reads the stack's status
(`DescribeStacks`), the template as it was submitted (`GetTemplate`, stage `Original`: what synth
wrote, before transforms are expanded) and its nested stacks (`ListStackResources` gives each
`AWS::CloudFormation::Stack` resource's physical id, a stack ARN, whose template is read the same
way), and writes them as a cloud assembly folder (a manifest, the templates, one asset manifest
that maps each nested template's hash, from the parent's `TemplateURL`, to its file, and the
users file the cluster stack uploaded, read back from its bucket with `s3:GetObject`) that
`hyperpod_kit.plan.plan` reads like any other baseline. Nothing in the comparison changes.

A stack that does not exist is absent from the baseline (its resources are "add"s); one that
CloudFormation holds but that has nothing a deploy would update (`ROLLBACK_COMPLETE`,
`REVIEW_IN_PROGRESS`, a failed creation: the CDK CLI deletes and re-creates it) is absent too,
with a warning; one that is changing or stuck (`*_IN_PROGRESS`, `UPDATE_ROLLBACK_FAILED`,
`DELETE_FAILED`) is compared as it stands, with a warning that a deploy now would wait or fail.
When no stack of the candidate exists, `NothingDeployedError`.

Then the counts: an operator may have scaled an instance group by hand (`UpdateCluster`) or added
a group. The template does not know, and a deploy that updates the cluster sends the file's
groups: the group goes back to the file's count, or is removed. `scale_backs` asks
`sagemaker:DescribeCluster` for the live groups and returns a dangerous `Change` (effect
`nodes_recreated`, as fewer nodes are everywhere else in `plan`) per group the deploy would
shrink or remove. Where the cluster scales itself (`AutoScaling` enabled: Karpenter adds and
deletes nodes), the live counts are not compared, only the groups.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperpod_kit.cloud_assembly import ASSET_HASH, read_json, stack_artifacts
from hyperpod_kit.lifecycle import USERS_FILE
from hyperpod_kit.plan import NESTED_STACK, Change, Effect, PlanInputError

if TYPE_CHECKING:
    from hyperpod_kit.config.aws import AwsFacade

CLUSTER = "AWS::SageMaker::Cluster"
# CloudFormation holds the stack, but a deploy does not update it: the CDK CLI deletes it and
# creates it again, so each of its resources is an "add".
NOT_DEPLOYED = frozenset(
    {"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED", "REVIEW_IN_PROGRESS",
     "DELETE_COMPLETE"}
)  # fmt: skip
# A deploy now would wait for the stack, or be refused until someone repairs it.
STUCK = frozenset({"UPDATE_ROLLBACK_FAILED", "DELETE_FAILED", "IMPORT_ROLLBACK_FAILED"})
SOURCE = "sagemaker:DescribeCluster"


class NothingDeployedError(PlanInputError):
    """No stack of the candidate exists in the account and region."""

    hint = (
        "deploy it first (hyperpod-kit deploy FILE), use the credentials of the account it is "
        "in, or compare with a synthesized folder (--baseline)"
    )


@dataclass
class DeployedBaseline:
    """The folder written, and what the account said: each stack's status (None where it does
    not exist), warnings to show, and the physical id of every resource by (label, logical id)."""

    folder: Path
    region: str
    statuses: dict[str, str | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    physical_ids: dict[tuple[str, str], str] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> template

    def to_json(self) -> dict[str, Any]:
        return {"region": self.region, "stacks": dict(self.statuses),
                "warnings": list(self.warnings)}  # fmt: skip


def stack_names(candidate: Path) -> list[str]:
    """The CloudFormation names of the candidate assembly's stacks, in the manifest's order."""
    manifest = read_json(candidate / "manifest.json", "the assembly's manifest")
    artifacts = manifest.get("artifacts", {}) if isinstance(manifest, dict) else {}
    return [s.stack_name for s in stack_artifacts(candidate, artifacts)]


def require_deployed(aws: AwsFacade, names: list[str]) -> None:
    """`NothingDeployedError` unless one of the stacks exists: checked with the names the file
    implies (`config.derived.environment_areas`, which synth checks its stacks against) before
    a minute of synth is spent."""
    if not any(_describe(aws, name) is not None for name in names):
        raise _nothing(aws, names)


def _nothing(aws: AwsFacade, names: list[str]) -> NothingDeployedError:
    return NothingDeployedError(
        f"none of the stacks {', '.join(names) or '(none)'} is deployed in {aws.region}"
    )


def write_deployed_assembly(aws: AwsFacade, candidate: Path, outdir: Path) -> DeployedBaseline:
    """Read the deployed stacks of the candidate's names into a cloud assembly in `outdir` (an
    empty folder). Raises `AwsUnavailableError` when the account cannot be asked,
    `NothingDeployedError` when none of the stacks exists, PlanInputError for a template that is
    not JSON."""
    found = DeployedBaseline(outdir, aws.region)
    artifacts: dict[str, Any] = {}
    assets: dict[str, Any] = {}
    for name in stack_names(candidate):
        row = _describe(aws, name)
        status = None if row is None else str(row.get("StackStatus", ""))
        found.statuses[name] = status
        if row is None or status is None:
            continue
        if status in NOT_DEPLOYED:
            found.warnings.append(
                f"stack {name} is {status}: nothing of it is deployed that a deploy would "
                "update (the CDK CLI deletes and creates it again); its resources are shown as "
                "added"
            )
            continue
        if status.endswith("_IN_PROGRESS"):
            found.warnings.append(
                f"stack {name} is {status}: compared with its template as it stands; a deploy "
                "now waits for it, and what it changes may not be final"
            )
        elif status in STUCK:
            found.warnings.append(
                f"stack {name} is {status}: a deploy now is refused until it is repaired "
                "(continue the rollback, or delete it)"
            )
        stack_id = str(row.get("StackId") or name)
        template = _read_stack(aws, found, name, stack_id, assets)
        file = f"{name}.template.json"
        (outdir / file).write_text(json.dumps(template, indent=1), encoding="utf-8")
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "properties": {"templateFile": file, "stackName": name},
        }
    if not any(s is not None for s in found.statuses.values()):
        raise _nothing(aws, list(found.statuses))
    (outdir / "deployed.assets.json").write_text(json.dumps({"version": "deployed",
                                                             "files": assets}))  # fmt: skip
    artifacts["deployed.assets"] = {
        "type": "cdk:asset-manifest",
        "properties": {"file": "deployed.assets.json"},
    }
    manifest = {"version": "deployed", "artifacts": artifacts}
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return found


def _describe(aws: AwsFacade, name: str) -> dict[str, Any] | None:
    """The stack's row of `DescribeStacks`, or None when it does not exist."""
    from hyperpod_kit.config.aws import AwsUnavailableError

    cfn = aws.client("cloudformation")
    try:
        rows = aws.call("cloudformation:DescribeStacks", cfn.describe_stacks, StackName=name)
    except AwsUnavailableError as e:
        if e.code == "ValidationError" and "does not exist" in str(e):
            return None
        raise
    stacks = rows.get("Stacks") or []
    return stacks[0] if stacks else None


def _read_stack(
    aws: AwsFacade, found: DeployedBaseline, label: str, stack_id: str, assets: dict[str, Any]
) -> dict[str, Any]:
    """The stack's submitted template with its nested stacks' templates written as assets (a
    nested stack that has no stack yet is left out of its parent: an "add")."""
    template = _template(aws, label, stack_id)
    found.templates[label] = template
    resources = template.get("Resources") or {}
    nested = {
        k for k, r in resources.items() if isinstance(r, dict) and r.get("Type") == NESTED_STACK
    }
    for row in aws.pages("cloudformation", "list_stack_resources", "StackResourceSummaries",
                         StackName=stack_id):  # fmt: skip
        if row.get("PhysicalResourceId"):
            found.physical_ids[(label, row["LogicalResourceId"])] = row["PhysicalResourceId"]
    _users_files(aws, found, label, resources, assets)
    for logical in sorted(nested):
        physical = found.physical_ids.get((label, logical))
        if physical is None:
            found.warnings.append(
                f"nested stack {logical} of {label} has no stack yet: its resources are shown as "
                "added"
            )
            del resources[logical]
            continue
        child = f"{label}/{logical.split('NestedStack')[0] or logical}"  # as plan labels it
        inner = _read_stack(aws, found, child, physical, assets)
        props = resources[logical].setdefault("Properties", {})
        digest = ASSET_HASH.search(json.dumps(props.get("TemplateURL")))
        key = digest.group(1) if digest else hashlib.sha256(child.encode()).hexdigest()
        if digest is None:  # not a CDK template URL: give it a name plan can find
            props["TemplateURL"] = f"deployed/{key}.json"
        file = f"{key}.deployed.nested.template.json"
        (found.folder / file).write_text(json.dumps(inner, indent=1), encoding="utf-8")
        assets[key] = {"source": {"path": file}, "destinations": {}}
    return template


def _users_files(
    aws: AwsFacade,
    found: DeployedBaseline,
    label: str,
    resources: dict[str, Any],
    assets: dict[str, Any],
) -> None:
    """The users file the cluster stack uploaded (`users/<hash>/users.json` in the lifecycle
    bucket, content-addressed), written as the folder asset its deployment names, so `plan`
    compares people as it does between two assemblies. Unreadable: a warning, and the people
    of the users file are shown as added."""
    from hyperpod_kit.config.aws import AwsUnavailableError

    for logical, resource in sorted(resources.items()):
        if not isinstance(resource, dict) or resource.get("Type") != "Custom::CDKBucketDeployment":
            continue
        props = resource.get("Properties") or {}
        prefix, bucket = props.get("DestinationBucketKeyPrefix"), props.get("DestinationBucketName")
        if not isinstance(prefix, str):
            continue
        if not prefix.startswith("users/"):  # only the users upload; the scripts are not read
            continue
        if isinstance(bucket, dict) and isinstance(bucket.get("Ref"), str):
            bucket = found.physical_ids.get((label, bucket["Ref"]))
        keys = [ASSET_HASH.search(json.dumps(k)) for k in props.get("SourceObjectKeys") or []]
        digests = [k.group(1) for k in keys if k is not None]
        if not isinstance(bucket, str) or not digests:
            continue
        s3 = aws.client("s3")
        key = f"{prefix.rstrip('/')}/{USERS_FILE}"
        try:
            got = aws.call("s3:GetObject", s3.get_object, Bucket=bucket, Key=key,
                           missing=("NoSuchKey", "NoSuchBucket"))  # fmt: skip
            users = None if got is None else json.loads(got["Body"].read())
        except (AwsUnavailableError, ValueError) as error:
            users, why = None, str(error)
        else:
            why = "it is not there"
        if users is None:
            found.warnings.append(
                f"the users file of {label} (s3://{bucket}/{key}, {logical}) cannot be read "
                f"({why}): its people are shown as added"
            )
            continue
        folder = found.folder / f"users.{digests[0]}"
        folder.mkdir(exist_ok=True)
        (folder / USERS_FILE).write_text(json.dumps(users, indent=1), encoding="utf-8")
        assets[digests[0]] = {"source": {"path": folder.name}, "destinations": {}}


def _template(aws: AwsFacade, label: str, stack_id: str) -> dict[str, Any]:
    cfn = aws.client("cloudformation")
    got = aws.call("cloudformation:GetTemplate", cfn.get_template, StackName=stack_id,
                   TemplateStage="Original")  # fmt: skip
    body = got.get("TemplateBody")
    if isinstance(body, str):  # botocore decodes a JSON body; YAML stays a string
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            raise PlanInputError(
                f"the deployed template of {label} is not JSON (YAML is not read)"
            ) from None
    if not isinstance(body, dict):
        raise PlanInputError(f"the deployed template of {label} is not a template object")
    return dict(body)


# --- the counts an operator changed by hand ---------------------------------------------------


def scale_backs(
    aws: AwsFacade,
    candidate: dict[str, dict[str, Any]],
    deployed: DeployedBaseline,
    changes: list[Change],
) -> list[Change]:
    """`changes` with, per HyperPod cluster deployed, a dangerous entry for each live instance
    group the deploy would shrink (the live TargetCount above the file's InstanceCount) or
    remove (a group added by hand), merged into the cluster's own change where there is one."""
    by_key = {(c.stack, c.logical_id): c for c in changes}
    out = list(changes)
    for label, template in sorted(candidate.items()):
        for logical, resource in sorted((template.get("Resources") or {}).items()):
            if not isinstance(resource, dict) or resource.get("Type") != CLUSTER:
                continue
            if logical not in (deployed.templates.get(label, {}).get("Resources") or {}):
                continue  # not deployed: the cluster is created with the file's counts
            props = resource.get("Properties") or {}
            name = deployed.physical_ids.get((label, logical)) or props.get("ClusterName")
            if not isinstance(name, str) or not name:
                continue
            # With HyperPod's autoscaling, Karpenter moves the counts: not an operator's hand
            scaled = (props.get("AutoScaling") or {}).get("Mode") == "Enable"
            effects = _group_effects(
                aws, deployed, name, props.get("InstanceGroups"), counts=not scaled
            )
            if not effects:
                continue
            before = by_key.get((label, logical))
            updated = before is not None and before.action != "add"
            whys = tuple(_why(e, updated=updated) for e in effects)
            if before is None:
                change = Change(label, logical, CLUSTER, "update", whys, effects=effects)
                out.append(change)
            else:
                change = dataclasses.replace(
                    before, why=before.why + whys, effects=before.effects + effects
                )
                out[out.index(before)] = change
    return out


def _group_effects(
    aws: AwsFacade, deployed: DeployedBaseline, name: str, groups: Any, *, counts: bool = True
) -> tuple[Effect, ...]:
    sagemaker = aws.client("sagemaker")
    live = aws.call(SOURCE, sagemaker.describe_cluster, ClusterName=name,
                    missing=("ResourceNotFound", "ValidationException"))  # fmt: skip
    if live is None:
        deployed.warnings.append(f"cluster {name} is in the stack but SageMaker does not know it")
        return ()
    wanted: dict[str, Any] = {
        g["InstanceGroupName"]: g.get("InstanceCount")
        for g in (groups if isinstance(groups, list) else [])
        if isinstance(g, dict) and isinstance(g.get("InstanceGroupName"), str)
    }
    effects = []
    for group in live.get("InstanceGroups") or []:
        gname = str(group.get("InstanceGroupName", ""))
        target = int(group.get("TargetCount", group.get("CurrentCount", 0)) or 0)
        current = int(group.get("CurrentCount", 0) or 0)
        seen = f"live TargetCount {target}, CurrentCount {current}"
        where = f"InstanceGroups[{gname}].InstanceCount"
        if gname not in wanted:
            what = f"added by hand ({seen}), not in the file: the deploy removes the group"
        elif counts and isinstance(wanted[gname], int) and target > wanted[gname]:
            what = f"scaled back ({seen} -> the file's {wanted[gname]})"
        else:
            continue
        hint = "put the count in the file, or pass --allow-replacement if that is intended"
        effects.append(Effect("nodes_recreated", where, what, hint, SOURCE))
    return tuple(effects)


def _why(effect: Effect, *, updated: bool) -> str:
    when = (
        "this deploy updates the cluster"
        if updated
        else "this deploy leaves the cluster's template alone; the next one that changes it does"
    )
    return f"{effect.where} {effect.what} ({when}). Hint: {effect.why}"
