"""Custom resources behind Studio's FSx partitions (CDK `custom_resources.Provider`).

`Custom::StudioPartitions` (one per batch of users) is a gate: CloudFormation creates a user's
profile, with its partition in `CustomFileSystemConfigs`, only after this resource is complete, and
it completes only once the cluster's node-side user sync has reported, in an SSM parameter, that
the partition exists with the user's uid, gid and mode 0700 (shared mode: one root-owned 1777
directory). A Lambda cannot mount Lustre, and nothing here starts a session on a node: the node
creates, this waits. Then it puts the partition on profiles that already exist (a user re-added,
a rollback) and takes it off the profiles of users removed from the batch; a stack delete takes it
off every profile of the batch. Nothing ever deletes a directory, a profile or a space.

`Custom::StudioFileSystemAccess` puts Studio's security group on the network interfaces of an
existing file system (one the storage stack creates already carries it) and removes it on delete.

`on_event` only plans; `is_complete` does every AWS call, so throttling or a node that has not
reported yet is "not complete, ask again" until a deadline, and a failure part-way undoes what the
same call changed before it reports a reason that names the user and what was seen.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

LOG = logging.getLogger(__name__)
LOG.setLevel(logging.INFO)

PARTITIONS = "Custom::StudioPartitions"
ACCESS = "Custom::StudioFileSystemAccess"

# --- the partition status contract with the node-side user sync ---------------------------------
# One place to adapt when the sync's parameter name or format changes.

NODE_MOUNT = "/fsx"
SHARED_KEY = "_shared"
USER_MODE = "0700"
SHARED_OWNER = (0, 0)
SHARED_MODE = "1777"


def partition_parameter(environment: str, user: str | None) -> str:
    """The SSM parameter where the node-side sync reports a partition (None: the shared one)."""
    return f"/hyperpod-kit/{environment}/partitions/{user or SHARED_KEY}"


@dataclass(frozen=True)
class PartitionStatus:
    """What a node saw when it stat()ed a partition."""

    path: str
    uid: int
    gid: int
    mode: str
    node: str
    time: str


def parse_status(text: str) -> PartitionStatus:
    """The parameter's JSON, as the nodes' user sync writes it (bin/hyperpod-kit-user-sync):
    {"user", "uid", "gid", "path", "exists", "owner_uid", "owner_gid", "mode", "locked", "ready"},
    where uid/gid are what the environment file asks for and owner_uid/owner_gid what the node saw.
    The owner is what counts. The plain form {"path", "uid", "gid", "mode", "node", "time"} (uid/gid
    as seen) is read too."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    seen = ("owner_uid", "owner_gid") if "owner_uid" in data else ("uid", "gid")
    missing = [k for k in ("path", *seen, "mode") if k not in data]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if data.get("exists") is False:
        raise ValueError(f"{data['path']} does not exist on the node yet")
    uid, gid = data[seen[0]], data[seen[1]]
    if not isinstance(uid, int) or not isinstance(gid, int) or isinstance(uid, bool):
        raise ValueError("uid and gid are not integers")
    try:
        mode = format(int(str(data["mode"]), 8), "04o")  # "700", "0700", "01777": one spelling
    except ValueError:
        raise ValueError(f"mode {data['mode']!r} is not octal") from None
    return PartitionStatus(
        path=str(data["path"]),
        uid=uid,
        gid=gid,
        mode=mode,
        node=str(data.get("node", "?")),
        time=str(data.get("time", "?")),
    )


# --- events -------------------------------------------------------------------------------------

RETRY = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=5, read_timeout=30)
THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
    }
)
NOT_FOUND = frozenset({"ResourceNotFound", "ResourceNotFoundException", "FileSystemNotFound"})
NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
FS_ID = re.compile(r"^fs-[0-9a-f]{8,}$")
SG_ID = re.compile(r"^sg-[0-9a-f]{8,}$")
DEFAULT_TIMEOUT = 1200
ACCESS_TIMEOUT = 600


class MalformedEventError(ValueError):
    """The event is not what this handler's resources send; CloudFormation gets the reason."""


class NotReadyError(RuntimeError):
    """A partition was not reported as expected before the deadline."""


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    path: str  # FileSystemPath in Studio: /<name> or the shared path


@dataclass(frozen=True)
class Batch:
    environment: str
    domain_id: str
    file_system_id: str
    mode: str
    shared_path: str
    users: tuple[User, ...]
    timeout: int

    def user(self, name: str) -> User:
        return next(u for u in self.users if u.name == name)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise MalformedEventError(f"{where} is not an integer: {value!r}")
    try:
        return int(str(value))
    except ValueError:
        raise MalformedEventError(f"{where} is not an integer: {value!r}") from None


def _text(props: dict[str, Any], key: str, pattern: re.Pattern[str] | None = None) -> str:
    value = props.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedEventError(f"{key} is missing")
    if pattern is not None and not pattern.match(value):
        raise MalformedEventError(f"{key} {value!r} does not match {pattern.pattern}")
    return value


def parse_batch(props: object) -> Batch:
    """A `Custom::StudioPartitions` resource's properties (CloudFormation sends numbers as text)."""
    if not isinstance(props, dict):
        raise MalformedEventError("ResourceProperties is not an object")
    mode = _text(props, "Mode")
    if mode not in ("per_user", "shared"):
        raise MalformedEventError(f"Mode {mode!r} is not per_user or shared")
    raw = props.get("Users")
    if not isinstance(raw, list):
        raise MalformedEventError("Users is not a list")
    users = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MalformedEventError(f"Users[{i}] is not an object")
        name = _text(item, "Name", NAME)
        path = _text(item, "Path")
        users.append(User(name, _int(item.get("Uid"), f"Users[{i}].Uid"),
                          _int(item.get("Gid"), f"Users[{i}].Gid"), path))  # fmt: skip
    if len({u.name for u in users}) != len(users):
        raise MalformedEventError("Users lists a name twice")
    return Batch(
        environment=_text(props, "Environment"),
        domain_id=_text(props, "DomainId"),
        file_system_id=_text(props, "FileSystemId", FS_ID),
        mode=mode,
        shared_path=str(props.get("SharedPath", "/shared")),
        users=tuple(users),
        timeout=_int(props.get("TimeoutSeconds", DEFAULT_TIMEOUT), "TimeoutSeconds"),
    )


def on_event(event: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Plan the request; `is_complete` carries it out. Deletes never fail on bad properties."""
    LOG.info("event %s", json.dumps({k: v for k, v in event.items() if k != "ResponseURL"}))
    request = event.get("RequestType")
    kind = event.get("ResourceType")
    if request not in ("Create", "Update", "Delete"):
        raise MalformedEventError(f"RequestType {request!r} is not Create, Update or Delete")
    if kind == PARTITIONS:
        return _plan_partitions(event, request)
    if kind == ACCESS:
        return _plan_access(event, request)
    if request == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "none")}
    raise MalformedEventError(f"ResourceType {kind!r} is not {PARTITIONS} or {ACCESS}")


def _plan_partitions(event: dict[str, Any], request: str) -> dict[str, Any]:
    if request == "Delete":
        try:
            batch = parse_batch(event.get("ResourceProperties"))
        except MalformedEventError as e:
            LOG.warning("delete of a resource with bad properties: nothing to undo (%s)", e)
            return {"PhysicalResourceId": event["PhysicalResourceId"], "HyperPodKit": None}
        plan = {"wait": [], "attach": [], "detach": [u.name for u in batch.users]}
        return _planned(event["PhysicalResourceId"], plan, DEFAULT_TIMEOUT)
    batch = parse_batch(event.get("ResourceProperties"))
    physical = f"{batch.environment}/{batch.domain_id}/{batch.file_system_id}/" + str(
        event.get("LogicalResourceId", "partitions")
    )
    names = [u.name for u in batch.users]
    old: Batch | None = None
    if request == "Update":
        try:
            old = parse_batch(event.get("OldResourceProperties"))
        except MalformedEventError:
            old = None
    same_target = old is not None and (old.domain_id, old.file_system_id) == (
        batch.domain_id,
        batch.file_system_id,
    )
    if old is None or not same_target:
        # New, or another domain or file system: CloudFormation deletes the old resource (and
        # with it the old attachments) once this one is complete.
        changed, removed = names, []
    else:
        before = {u.name: u for u in old.users}
        changed = [u.name for u in batch.users if before.get(u.name) != u]
        if (old.mode, old.shared_path) != (batch.mode, batch.shared_path):
            changed = names
        removed = [n for n in before if n not in names]
    wait = changed if batch.mode == "per_user" else ([SHARED_KEY] if changed else [])
    plan = {"wait": wait, "attach": changed, "detach": removed}
    return _planned(physical, plan, batch.timeout)


def _planned(physical: str, plan: dict[str, list[str]], timeout: int) -> dict[str, Any]:
    LOG.info("plan %s", json.dumps(plan))
    state = {"plan": plan, "deadline": time.time() + timeout, "timeout": timeout}
    return {"PhysicalResourceId": physical, "HyperPodKit": state}


def _plan_access(event: dict[str, Any], request: str) -> dict[str, Any]:
    props = event.get("ResourceProperties")
    try:
        if not isinstance(props, dict):
            raise MalformedEventError("ResourceProperties is not an object")
        fs = _text(props, "FileSystemId", FS_ID)
        sg = _text(props, "SecurityGroupId", SG_ID)
    except MalformedEventError:
        if request == "Delete":
            return {"PhysicalResourceId": event["PhysicalResourceId"], "HyperPodKit": None}
        raise
    physical = event["PhysicalResourceId"] if request == "Delete" else f"{fs}/{sg}"
    state = {
        "plan": {"file_system": fs, "group": sg, "present": request != "Delete"},
        "deadline": time.time() + ACCESS_TIMEOUT,
        "timeout": ACCESS_TIMEOUT,
    }
    return {"PhysicalResourceId": physical, "HyperPodKit": state}


# --- carrying the plan out ----------------------------------------------------------------------


@dataclass
class Aws:
    """The clients, made in the Lambda with adaptive retries; tests pass moto or stubbed ones."""

    ssm: Any
    sagemaker: Any
    fsx: Any
    ec2: Any

    @classmethod
    def default(cls) -> Aws:
        return cls(*(boto3.client(s, config=RETRY) for s in ("ssm", "sagemaker", "fsx", "ec2")))


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_complete(
    event: dict[str, Any], context: object = None, aws: Aws | None = None
) -> dict[str, Any]:
    """Do the planned work once every awaited partition is reported; until then, not complete."""
    state = event.get("HyperPodKit")
    if state is None and event.get("RequestType") == "Delete":
        return {"IsComplete": True}
    if not isinstance(state, dict) or not isinstance(state.get("plan"), dict):
        raise MalformedEventError("the event carries no plan from on_event")
    aws = aws or Aws.default()
    deadline = float(state.get("deadline", 0))
    try:
        if event.get("ResourceType") == ACCESS:
            done = _security_group(aws, **state["plan"])
            return {"IsComplete": True, "Data": {"Interfaces": str(done)}}
        return _partitions(event, state["plan"], aws, deadline, int(state.get("timeout", 0)))
    except ClientError as e:
        if _code(e) in THROTTLING and time.time() < deadline:
            LOG.warning("throttled (%s); trying again at the next poll", e)
            return {"IsComplete": False}
        raise


def _partitions(
    event: dict[str, Any], plan: dict[str, list[str]], aws: Aws, deadline: float, timeout: int
) -> dict[str, Any]:
    batch = parse_batch(event.get("ResourceProperties"))
    if plan["wait"]:
        problems = _unready(aws.ssm, batch, plan["wait"])
        if problems:
            if time.time() < deadline:
                LOG.info("waiting for %d partition(s): %s", len(problems), "; ".join(problems))
                return {"IsComplete": False}
            more = [f"and {len(problems) - 10} more"] if len(problems) > 10 else []
            shown = problems[:10] + more
            raise NotReadyError(
                f"partitions not ready after {timeout} s, so no profile got them: "
                + "; ".join(shown)
            )
    changes = [(n, True) for n in plan["attach"]] + [(n, False) for n in plan["detach"]]
    attached, detached = _profiles(aws.sagemaker, batch, changes)
    return {"IsComplete": True, "Data": {"Attached": str(attached), "Detached": str(detached)}}


def _expected(batch: Batch, key: str) -> tuple[str, int, int, str]:
    """(path on the nodes, uid, gid, mode) the status of `key` must show."""
    if key == SHARED_KEY:
        return NODE_MOUNT + batch.shared_path, *SHARED_OWNER, SHARED_MODE
    user = batch.user(key)
    return f"{NODE_MOUNT}/{user.name}", user.uid, user.gid, USER_MODE


def _unready(ssm: Any, batch: Batch, keys: list[str]) -> list[str]:
    """What is wrong with each awaited partition's status (empty: all as expected)."""
    names = {
        partition_parameter(batch.environment, None if k == SHARED_KEY else k): k for k in keys
    }
    found: dict[str, str] = {}
    ordered = list(names)
    for i in range(0, len(ordered), 10):  # GetParameters takes at most 10 names
        reply = ssm.get_parameters(Names=ordered[i : i + 10])
        found.update({p["Name"]: p["Value"] for p in reply.get("Parameters", [])})
    problems = []
    for parameter, key in names.items():
        who = "shared partition" if key == SHARED_KEY else key
        path, uid, gid, mode = _expected(batch, key)
        if parameter not in found:
            problems.append(
                f"{who}: no status at {parameter} (the nodes' user sync has not reported "
                f"{path}: is a cluster node running, and does its users list include {who}?)"
            )
            continue
        try:
            seen = parse_status(found[parameter])
        except (ValueError, TypeError) as e:
            problems.append(f"{who}: status at {parameter} is unreadable ({e})")
            continue
        wrong = []
        if seen.path != path:
            wrong.append(f"path {seen.path}, expected {path}")
        if (seen.uid, seen.gid) != (uid, gid):
            wrong.append(f"owner {seen.uid}:{seen.gid}, expected {uid}:{gid}")
        if seen.mode != mode:
            wrong.append(f"mode {seen.mode}, expected {mode}")
        if wrong:
            seen_by = f" seen by {seen.node} at {seen.time}" if seen.node != "?" else ""
            where = f"{who}: {path}{seen_by} has "
            problems.append(where + ", ".join(wrong))
    return problems


def _profiles(sagemaker: Any, batch: Batch, changes: list[tuple[str, bool]]) -> tuple[int, int]:
    """Put the partition on (True) or take it off (False) existing profiles; a failure undoes the
    changes this call made, then raises. Profiles that do not exist are CloudFormation's to
    create (with the partition) or already gone."""
    undo: list[tuple[str, list[dict[str, Any]]]] = []
    counts = [0, 0]
    for name, attach in changes:
        try:
            previous = _set_partition(sagemaker, batch, name, attach)
        except Exception as e:
            undone = _undo_profiles(sagemaker, batch, undo)
            if isinstance(e, ClientError) and _code(e) in THROTTLING:
                raise  # undone; is_complete asks again at the next poll
            verb = "attaching" if attach else "detaching"
            raise RuntimeError(
                f"{verb} the partition of {name} failed ({e}); undone for: "
                f"{', '.join(undone) or 'none'}"
            ) from e
        if previous is not None:
            undo.append((name, previous))
            counts[0 if attach else 1] += 1
    return counts[0], counts[1]


def _set_partition(
    sagemaker: Any, batch: Batch, name: str, attach: bool
) -> list[dict[str, Any]] | None:
    """The profile's previous CustomFileSystemConfigs when this changed them, else None."""
    try:
        profile = sagemaker.describe_user_profile(DomainId=batch.domain_id, UserProfileName=name)
    except ClientError as e:
        if _code(e) in NOT_FOUND or "does not exist" in str(e):
            return None
        raise
    current = list(profile.get("UserSettings", {}).get("CustomFileSystemConfigs", []))
    others = [c for c in current if _file_system(c) != batch.file_system_id]
    wanted = others
    if attach:
        path = batch.user(name).path
        ours = {"FSxLustreFileSystemConfig": {"FileSystemId": batch.file_system_id,
                                              "FileSystemPath": path}}  # fmt: skip
        wanted = [*others, ours]
    if wanted == current:
        return None
    _update(sagemaker, batch, name, wanted)
    LOG.info("%s: %s the partition", name, "attached" if attach else "detached")
    return current


def _file_system(config: dict[str, Any]) -> str | None:
    fsx = config.get("FSxLustreFileSystemConfig")
    return fsx.get("FileSystemId") if isinstance(fsx, dict) else None


def _update(sagemaker: Any, batch: Batch, name: str, configs: list[dict[str, Any]]) -> None:
    sagemaker.update_user_profile(
        DomainId=batch.domain_id,
        UserProfileName=name,
        UserSettings={"CustomFileSystemConfigs": configs},
    )


def _undo_profiles(
    sagemaker: Any, batch: Batch, undo: list[tuple[str, list[dict[str, Any]]]]
) -> list[str]:
    undone = []
    for name, previous in reversed(undo):
        try:
            _update(sagemaker, batch, name, previous)
            undone.append(name)
        except ClientError as e:  # keep undoing the others; the reason lists what was undone
            LOG.error("could not undo %s: %s", name, e)
    return undone


def _security_group(aws: Aws, *, file_system: str, group: str, present: bool) -> int:
    """Add (present) or remove the group on every network interface of the file system; undo
    this call's changes if one fails. Returns how many interfaces changed."""
    try:
        found = aws.fsx.describe_file_systems(FileSystemIds=[file_system])["FileSystems"]
    except ClientError as e:
        if _code(e) in NOT_FOUND and not present:
            return 0  # gone already: nothing to remove the group from
        raise
    enis = found[0].get("NetworkInterfaceIds", []) if found else []
    if not enis:
        if present:
            raise RuntimeError(f"{file_system} reports no network interfaces to add {group} to")
        return 0
    interfaces = aws.ec2.describe_network_interfaces(NetworkInterfaceIds=enis)
    undo: list[tuple[str, list[str]]] = []
    try:
        for eni in interfaces["NetworkInterfaces"]:
            groups = [g["GroupId"] for g in eni.get("Groups", [])]
            if present == (group in groups):
                continue
            wanted = [*groups, group] if present else [g for g in groups if g != group]
            if not wanted:
                LOG.warning("%s keeps %s: it is its only group", eni["NetworkInterfaceId"], group)
                continue
            _groups(aws.ec2, eni["NetworkInterfaceId"], wanted)
            undo.append((eni["NetworkInterfaceId"], groups))
    except Exception as e:
        undone = _undo(undo, lambda eni, groups: _groups(aws.ec2, eni, groups))
        if isinstance(e, ClientError) and _code(e) in THROTTLING:
            raise  # undone; is_complete asks again at the next poll
        verb = "adding" if present else "removing"
        raise RuntimeError(
            f"{verb} {group} on {file_system}'s interfaces failed ({e}); undone on: "
            f"{', '.join(undone) or 'none'}"
        ) from e
    return len(undo)


def _groups(ec2: Any, eni: str, groups: list[str]) -> None:
    ec2.modify_network_interface_attribute(NetworkInterfaceId=eni, Groups=groups)


def _undo(undo: list[tuple[str, list[str]]], apply: Callable[[str, list[str]], None]) -> list[str]:
    undone = []
    for eni, groups in reversed(undo):
        try:
            apply(eni, groups)
            undone.append(eni)
        except ClientError as e:
            LOG.error("could not undo %s: %s", eni, e)
    return undone
