"""JSON on the node, for hyperpod-kit's lifecycle scripts (bash does not parse JSON).

Runs with the node's own python3 (3.10 on HyperPod's Ubuntu 22.04 AMIs): standard library only.
Everything it prints is checked against the same patterns as the environment file's schema, so a
damaged or tampered file can never hand the shell anything but plain names and numbers.

    node.py group-of RESOURCE_CONFIG IP...   this node's instance group (matched by IP address)
    node.py users USERS_JSON                 "G gid name" and "U name uid gid admin" lines
    node.py teams USERS_JSON                 "T team fairshare gpu_limit" (-1: none) and
                                             "M team user" lines; exit 4 when it has no teams
    node.py field NAME < JSON                one field of a JSON object (an s3:// or https://
                                             URI, or a word)
"""

from __future__ import annotations

import json
import re
import sys

GROUP = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
USER = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9/._-]+$")
WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(/[A-Za-z0-9._~-]+)*/?$")
TEAM = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
NO_TEAMS = 4  # the users file has no "teams" key: the environment keeps no Slurm accounts


class NodeInputError(Exception):
    pass


def group_of(resource_config: str, ips: list[str]) -> str:
    """The instance group whose instance has one of this node's addresses.

    /opt/ml/config/resource_config.json lists every instance group ("InstanceGroups": [{"Name",
    "Instances": [{"InstanceName", "CustomerIpAddress", ...}]}]) and the cluster ("ClusterConfig").
    """
    with open(resource_config, encoding="utf-8") as f:
        data = json.load(f)
    wanted = set(ips)
    for group in data.get("InstanceGroups") or []:
        for instance in group.get("Instances") or []:
            if instance.get("CustomerIpAddress") in wanted:
                name = group.get("Name")
                if not isinstance(name, str) or not GROUP.match(name):
                    raise NodeInputError(f"instance group name {name!r} is not a plain name")
                return name
    raise LookupError(f"no instance in {resource_config} has an address of this node {sorted(ips)}")


def _int(user: dict[str, object], key: str, low: int, high: int, kind: str = "user") -> int:
    value = user.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise NodeInputError(f"{kind} {user.get('name')!r}: {key} {value!r} is not in {low}-{high}")
    return value


def users(path: str) -> list[str]:
    """The users file as lines for the shell: groups first, then users in file order.

    A gid used by one user names its group after that user; a gid shared by several users names
    it hyperpod-<gid>. (An existing group with that gid is used as it is, whatever its name.)
    """
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("users"), list):
        raise NodeInputError(f"{path}: expected an object with a list of users")
    rows: list[tuple[str, int, int, bool]] = []
    names: set[str] = set()
    uids: set[int] = set()
    for user in data["users"]:
        if not isinstance(user, dict):
            raise NodeInputError(f"{path}: a user is not an object")
        name = user.get("name")
        if not isinstance(name, str) or not USER.match(name):
            raise NodeInputError(f"{path}: user name {name!r} is not a valid login name")
        uid = _int(user, "uid", 10000, 4000000)
        gid = _int(user, "gid", 1001, 4000000)
        admin = user.get("admin", False)
        if not isinstance(admin, bool):
            raise NodeInputError(f"{path}: user {name!r}: admin {admin!r} is not true or false")
        if name in names or uid in uids:
            raise NodeInputError(f"{path}: user {name!r} or uid {uid} is listed twice")
        names.add(name)
        uids.add(uid)
        rows.append((name, uid, gid, admin))
    members: dict[int, list[str]] = {}
    for name, _, gid, _ in rows:
        members.setdefault(gid, []).append(name)
    lines = [
        f"G {gid} {group[0] if len(group) == 1 else f'hyperpod-{gid}'}"
        for gid, group in members.items()
    ]
    lines += [f"U {name} {uid} {gid} {int(admin)}" for name, uid, gid, admin in rows]
    return lines


class NoTeamsError(Exception):
    pass


def teams(path: str) -> list[str]:
    """The users file's teams as lines for the shell (docs/accounting.md): each team's account
    with its fair share and GPU limit (-1: none), then its members. Members are users of the
    same file, each in one team; `root` is Slurm's own account."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "teams" not in data:
        raise NoTeamsError(f"{path} has no teams")
    found = data["teams"]
    if not isinstance(found, list):
        raise NodeInputError(f"{path}: teams is not a list")
    people = {u.get("name") for u in data.get("users") or [] if isinstance(u, dict)}
    lines: list[str] = []
    names: set[str] = set()
    member_of: dict[str, str] = {}
    for team in found:
        if not isinstance(team, dict):
            raise NodeInputError(f"{path}: a team is not an object")
        name = team.get("name")
        if not isinstance(name, str) or not TEAM.match(name) or name == "root":
            raise NodeInputError(f"{path}: team name {name!r} is not a Slurm account name")
        if name in names:
            raise NodeInputError(f"{path}: team {name!r} is listed twice")
        names.add(name)
        share = _int(team, "fairshare", 1, 1000000, "team")
        gpus = -1 if team.get("gpu_limit") is None else _int(team, "gpu_limit", 0, 1000000, "team")
        lines.append(f"T {name} {share} {gpus}")
        members = team.get("members")
        if not isinstance(members, list):
            raise NodeInputError(f"{path}: team {name!r}: members is not a list")
        for member in members:
            if not isinstance(member, str) or member not in people:
                raise NodeInputError(f"{path}: team {name!r}: {member!r} is not a user of it")
            if member in member_of:
                raise NodeInputError(f"{path}: {member!r} is in {member_of[member]!r} and {name!r}")
            member_of[member] = name
            lines.append(f"M {name} {member}")
    return lines


def field(name: str) -> str:
    data = json.load(sys.stdin)
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, str) or not any(p.match(value) for p in (S3_URI, WORD, HTTPS_URL)):
        raise NodeInputError(f"field {name!r} is missing or not a plain value: {value!r}")
    return value


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 2 and argv[0] == "group-of":
            print(group_of(argv[1], argv[2:]))
        elif len(argv) == 2 and argv[0] == "users":
            print("\n".join(users(argv[1])))
        elif len(argv) == 2 and argv[0] == "teams":
            print("\n".join(teams(argv[1])))
        elif len(argv) == 2 and argv[0] == "field":
            print(field(argv[1]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except LookupError as e:
        print(f"node.py: {e}", file=sys.stderr)
        return 3
    except NoTeamsError as e:
        print(f"node.py: {e}", file=sys.stderr)
        return NO_TEAMS
    except (OSError, ValueError, NodeInputError) as e:  # json.JSONDecodeError is a ValueError
        print(f"node.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
