"""The lifecycle scripts, run for real in a sandbox root, twice.

A temporary folder stands for ``/`` (the scripts spell every absolute path ``$ROOT/...``, and
``HYPERPOD_KIT_ROOT`` sets it); the commands that would change the real machine are recording
fakes first on PATH (hyperpod_kit/rehearsal/fakes.py, run by hyperpod_kit/rehearsal/sandbox.py).
The scripts run in bubblewrap where this machine has it (uid 65534, no network, nothing of the
machine writable but the sandbox: hyperpod_kit/rehearsal/sandbox.py), else as ``nobody`` when the
tests run as root, so a path that misses its ROOT prefix fails instead of writing to /etc.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.lifecycle import build_bundle
from hyperpod_kit.rehearsal.sandbox import BASE_GROUP, BASE_PASSWD, SYSTEM_PYTHON
from hyperpod_kit.rehearsal.sandbox import Node as SandboxNode
from tests.conftest import default_data, merge

# Changes a second run must not make: the machine is already as the first run left it.
MUTATING = {"useradd", "groupadd", "usermod", "chown", "apt-get", "systemd-tmpfiles"}
LOGS = ("var/log/hyperpod-kit/", "var/log/provision/")

pytestmark = pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists() or shutil.which("bash") is None,
    reason="needs bash and /usr/bin/python3",
)

USERS = [
    {"name": "alice", "uid": 10001, "gid": 1001, "admin": True},
    {"name": "bob", "uid": 10002, "gid": 1001},
    {"name": "carol", "uid": 10003, "gid": 20003},
]
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/a1b2c3d4e5f6"
IPS = {"controller": "10.0.128.10", "login": "10.0.128.11", "compute": "10.0.128.20"}


def config(
    overrides: dict[str, Any] | None = None, *, source: Path | None = None
) -> EnvironmentConfig:
    data = merge(default_data(), {"users": USERS, **(overrides or {})})
    loaded = EnvironmentConfig.model_validate(data)
    return loaded.at_source(source) if source else loaded


class Node(SandboxNode):
    """One sandboxed node of `cfg`: the package's sandbox with the rendered upload, the users file
    published, and a resource config with one instance per group."""

    def __init__(self, base: Path, cfg: EnvironmentConfig, group: str) -> None:
        self.cfg, self.group = cfg, group
        bundle = build_bundle(cfg)
        bundle.write_to(base / "lifecycle")
        groups = [
            {
                "Name": g.name,
                "InstanceType": g.instance_type,
                "Instances": [
                    {
                        "InstanceName": f"{g.name}-1",
                        "InstanceId": f"i-0{i:016x}",
                        "CustomerIpAddress": IPS.get(g.name, f"10.0.130.{i}"),
                    }
                ],
            }
            for i, g in enumerate(cfg.cluster.instance_groups)
        ]
        resource_config = {
            "ClusterConfig": {"ClusterArn": CLUSTER_ARN, "ClusterName": cfg.cluster_name},
            "InstanceGroups": groups,
        }
        own_ip = next(i["Instances"][0]["CustomerIpAddress"] for i in groups if i["Name"] == group)
        super().__init__(
            base, bundle=base / "lifecycle", resource_config=resource_config, ip=own_ip
        )
        # The accounts the scripts meet on this sandbox's AMI: root and ubuntu only.
        self.write("/etc/passwd", "".join(BASE_PASSWD.splitlines(keepends=True)[:2]))
        self.write("/etc/group", "".join(BASE_GROUP.splitlines(keepends=True)[:2]))
        if bundle.users is not None:  # what the stack uploads beside the scripts, and points at
            document = json.loads(bundle.users)
            publish_users(self, document["users"], teams=document.get("teams"))

    def mutations(self) -> list[list[str]]:
        found = [c for c in self.calls() if c[0] in MUTATING]
        found += [c for c in self.calls("systemctl") if c[1] in ("daemon-reload", "restart")]
        found += [c for c in self.calls("apt-mark") if c[1] == "hold"]
        found += self.calls("runuser")  # a user's key made (ssh_keys)
        found += [c for c in self.calls("aws") if "put-parameter" in c]
        return found

    def owner(self, node_path: str) -> tuple[int, int, str]:
        path = self.path(node_path)
        uid, gid = self.owners()[str(path)]
        return uid, gid, format(stat.S_IMODE(path.stat().st_mode), "o")

    def snapshot(self) -> dict[str, Any]:
        """Everything the scripts left in the sandbox except the (growing) logs."""
        tree: dict[str, Any] = {}
        for path in sorted(self.root.rglob("*")):
            relative = path.relative_to(self.root).as_posix()
            if relative.startswith(LOGS):
                continue
            mode = stat.S_IMODE(path.lstat().st_mode)
            content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            tree[relative] = (mode, content)
        ssm = {
            p.relative_to(self.state).as_posix(): p.read_text()
            for p in sorted((self.state / "ssm").rglob("*"))
            if p.is_file()
        }
        return {"tree": tree, "owners": self.owners(), "ssm": ssm}

    def log(self) -> str:
        return self.path("/var/log/hyperpod-kit/lifecycle.log").read_text()

    def passwd(self) -> dict[str, list[str]]:
        rows = self.path("/etc/passwd").read_text().splitlines()
        return {r.split(":")[0]: r.split(":") for r in rows}


@pytest.fixture
def sandbox() -> Iterator[Any]:
    bases: list[Path] = []

    def make(cfg: EnvironmentConfig, group: str = "controller") -> Node:
        base = Path(tempfile.mkdtemp(prefix="hpk-node-", dir="/tmp"))
        base.chmod(0o755)
        bases.append(base)
        return Node(base, cfg, group)

    yield make
    for base in bases:
        shutil.rmtree(base, ignore_errors=True)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


# --- a Slurm node, twice -------------------------------------------------------------------------


def test_controller_twice_same_tree_and_no_second_change(sandbox: Any) -> None:
    node = sandbox(config())
    first = ok(node.run())
    after_first = node.snapshot()
    first_calls = node.mutations()
    ok(node.run())
    assert node.snapshot() == after_first
    assert node.mutations() == [], "the second run changed the machine again"
    assert first_calls, "the first run did nothing"
    assert "lifecycle complete" in first.stdout  # stdout: what HyperPod keeps
    assert node.log().count("lifecycle complete") == 2  # one log file per node, appended
    provision_log = node.path("/var/log/provision/provisioning.log").read_text()
    assert "this node: instance group controller, role controller" in provision_log


def test_users_groups_homes_and_sudo(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    users = node.passwd()
    assert users["alice"][2:4] == ["10001", "1001"] and users["alice"][5:] == [
        "/fsx/alice",
        "/bin/bash",
    ]
    assert users["bob"][2:4] == ["10002", "1001"]
    assert users["carol"][2:4] == ["10003", "20003"]
    groups = {r.split(":")[2]: r.split(":")[0] for r in node.path("/etc/group").read_text().split()}
    assert groups["1001"] == "hyperpod-1001"  # shared by alice and bob
    assert groups["20003"] == "carol"  # carol's own
    for name, uid, gid in (("alice", 10001, 1001), ("bob", 10002, 1001), ("carol", 10003, 20003)):
        assert node.owner(f"/fsx/{name}") == (uid, gid, "700")
    assert all("-R" not in c for c in node.calls("chown"))
    sudoers = node.path("/etc/sudoers.d/90-hyperpod-kit-alice")
    assert sudoers.read_text() == "alice ALL=(ALL) NOPASSWD:ALL\n"
    assert format(stat.S_IMODE(sudoers.stat().st_mode), "o") == "440"
    assert not node.path("/etc/sudoers.d/90-hyperpod-kit-bob").exists()
    assert [c[:3] for c in node.calls("visudo")] == [["visudo", "-c", "-q"]]
    assert node.path("/etc/hyperpod-kit/node.env").read_text() == (
        "HPK_GROUP=controller\nHPK_ROLE=controller\n"
    )


def test_existing_home_is_never_taken_over(sandbox: Any) -> None:
    node = sandbox(config())
    home = node.path("/fsx/bob")
    home.mkdir()
    (home / "results.txt").write_text("bob's work\n")
    ok(node.run())
    assert str(home) not in node.owners()
    status = json.loads((node.state / "ssm/hyperpod-kit/hyperpod-dev/partitions/bob").read_text())
    assert status["exists"] is True and status["ready"] is False


def test_user_sync_timer_installed_and_enabled(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    timer = node.path("/etc/systemd/system/hyperpod-kit-user-sync.timer").read_text()
    assert "OnUnitActiveSec=5min" in timer
    service = node.path("/etc/systemd/system/hyperpod-kit-user-sync.service").read_text()
    assert "ExecStart=/bin/bash /opt/hyperpod-kit/bin/hyperpod-kit-user-sync" in service
    assert node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync").is_file()
    assert ["systemctl", "daemon-reload"] in node.calls("systemctl")
    assert ["systemctl", "enable", "--now", "hyperpod-kit-user-sync.timer"] in node.calls(
        "systemctl"
    )


def test_controller_publishes_partition_status(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    puts = [c for c in node.calls("aws") if "put-parameter" in c]
    assert len(puts) == 3
    assert all(c[c.index("--region") + 1] == "us-west-2" for c in puts)
    status = json.loads((node.state / "ssm/hyperpod-kit/hyperpod-dev/partitions/alice").read_text())
    assert status == {
        "user": "alice", "uid": 10001, "gid": 1001, "path": "/fsx/alice", "exists": True,
        "owner_uid": 10001, "owner_gid": 1001, "mode": "0700", "locked": False, "ready": True,
    }  # fmt: skip


def test_compute_node_creates_users_but_publishes_nothing(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    ok(node.run())
    assert "alice" in node.passwd()
    assert not [c for c in node.calls("aws") if "put-parameter" in c]


def test_fsx_not_mounted_yet_homes_follow_with_the_sync(sandbox: Any) -> None:
    node = sandbox(config())
    node.knob("mounts", "/opt/dlami/nvme")
    result = ok(node.run())
    assert "alice" in node.passwd()
    assert not node.path("/fsx/alice").exists()
    assert "/fsx is not mounted" in result.stdout
    assert len(node.calls("sleep")) >= 5  # waited with backoff before going on
    node.knob("mounts", "/fsx /opt/dlami/nvme")
    ok(node.run(str(node.bundle / "bin/hyperpod-kit-user-sync")))
    assert node.owner("/fsx/alice") == (10001, 1001, "700")


def test_uid_taken_fails_provisioning_with_the_reason(sandbox: Any) -> None:
    node = sandbox(config())
    node.path("/etc/passwd").write_text(
        node.path("/etc/passwd").read_text() + "alice:x:5000:5000::/home/alice:/bin/bash\n"
    )
    result = node.run()
    assert result.returncode == 1
    assert "alice exists with uid 5000, not 10001" in result.stdout
    assert "FAILED in creating users" in result.stdout
    assert "bob" in node.passwd()  # the others are still applied
    assert ["sleep", "60"] in node.calls("sleep")  # the default grace for the logs to ship


def test_sudoers_that_visudo_rejects_is_not_installed(sandbox: Any) -> None:
    node = sandbox(config())
    node.knob("visudo_fail", "")
    result = node.run()
    assert result.returncode == 1
    assert not node.path("/etc/sudoers.d/90-hyperpod-kit-alice").exists()
    assert "does not pass visudo -c" in result.stdout


def test_network_calls_retry_with_backoff(sandbox: Any) -> None:
    node = sandbox(config({"users": USERS[:1]}))
    node.knob("aws_fail", "2")
    ok(node.run())
    assert len([c for c in node.calls("aws") if "get-parameter" in c]) == 3  # 2 failures, 1 success
    assert len([c for c in node.calls("aws") if "put-parameter" in c]) == 1
    waits = [int(c[1]) for c in node.calls("sleep")]
    assert len(waits) == 2 and 2 <= waits[0] <= 3 and 4 <= waits[1] <= 6


def test_status_publishing_gives_up_for_the_run_not_for_each_user(sandbox: Any) -> None:
    node = sandbox(config())
    node.knob("aws_put_fail", "100")  # the role lacks ssm:PutParameter, or SSM fails to write
    result = ok(node.run())  # provisioning does not depend on the status
    assert len([c for c in node.calls("aws") if "put-parameter" in c]) == 6  # one user's retries
    assert "no more status this run" in result.stdout
    assert not (node.state / "ssm/hyperpod-kit/hyperpod-dev/partitions").exists()
    assert not node.path("/var/lib/hyperpod-kit/status/alice.json").exists()  # retried next time


def test_provisioning_goes_on_when_the_users_file_cannot_be_fetched(sandbox: Any) -> None:
    """AWS unreachable at provisioning: the node comes up, the timer applies people later."""
    node = sandbox(config())
    node.knob("aws_fail", "100")
    result = ok(node.run())
    assert "the user-sync timer applies it later" in result.stdout
    assert "alice" not in node.passwd()
    assert node.path("/etc/systemd/system/hyperpod-kit-user-sync.timer").exists()
    node.knob("aws_fail", None)
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    assert "alice" in node.passwd()


# --- the timer: later changes to users -----------------------------------------------------------


def publish_users(
    node: Node, users: list[dict[str, Any]], *, teams: list[dict[str, Any]] | None = None
) -> None:
    key = "sagemaker-111122223333-us-west-2-hyperpod-dev/lifecycle/abc/users.json"
    target = node.state / "s3" / key
    target.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {"version": 1, "users": users}
    if teams is not None:
        document["teams"] = teams
    target.write_text(json.dumps(document))
    pointer = node.state / "ssm/hyperpod-kit/hyperpod-dev/lifecycle"
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps({"users_uri": f"s3://{key}", "hash": "abc"}))


def test_timer_sync_adds_locks_and_unlocks(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    sync = str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))  # the installed copy
    dave = {"name": "dave", "uid": 10004, "gid": 1001, "admin": False}
    publish_users(node, [USERS[1], USERS[2], dave])  # alice removed, dave added

    ok(node.run(sync))
    assert node.passwd()["dave"][2] == "10004"
    assert node.owner("/fsx/dave") == (10004, 1001, "700")
    assert ["usermod", "--expiredate", "1", "alice"] in node.calls("usermod")
    assert not node.path("/etc/sudoers.d/90-hyperpod-kit-alice").exists()
    assert node.path("/fsx/alice").is_dir() and "alice" in node.passwd()  # locked, never deleted
    status = json.loads((node.state / "ssm/hyperpod-kit/hyperpod-dev/partitions/alice").read_text())
    assert status["locked"] is True and status["ready"] is False
    assert node.path("/var/lib/hyperpod-kit/users/locked").read_text() == "alice\n"
    assert "users in sync" in node.path("/var/log/hyperpod-kit/user-sync.log").read_text()

    settled = node.snapshot()
    ok(node.run(sync))
    assert node.mutations() == [] and node.snapshot() == settled

    publish_users(node, [*USERS, dave])  # alice back
    ok(node.run(sync))
    assert ["usermod", "--expiredate", "", "alice"] in node.calls("usermod")
    assert node.path("/etc/sudoers.d/90-hyperpod-kit-alice").exists()
    assert node.path("/var/lib/hyperpod-kit/users/locked").read_text() == ""


# --- the teams' Slurm accounts (docs/accounting.md) ----------------------------------------------

TEAMS = [
    {"name": "pretraining", "members": ["alice", "bob"], "fairshare": 3, "gpu_limit": 16},
    {"name": "research", "members": ["carol"], "fairshare": 1},
]


def slurmdb(node: Node) -> dict[str, Any]:
    """What the sacctmgr fake holds: accounts, associations (cluster `cluster`), defaults."""
    data: dict[str, Any] = json.loads((node.state / "slurmdb.json").read_text())
    return data


def assocs(node: Node) -> dict[tuple[str, str], dict[str, str]]:
    return {(a["account"], a["user"]): a for a in slurmdb(node)["assocs"]}


def sacctmgr_changes(node: Node) -> list[list[str]]:
    return [c for c in node.calls("sacctmgr") if "-i" in c]


def test_controller_makes_the_teams_accounts_twice_the_same(sandbox: Any) -> None:
    """The first provisioning makes each team's account (ours, its fair share and GPU limit)
    and each member's association, their default account; the second changes nothing."""
    node = sandbox(config({"teams": TEAMS}))
    ok(node.run())
    first = slurmdb(node)
    found = assocs(node)
    assert found[("pretraining", "")]["fairshare"] == "3"
    assert found[("pretraining", "")]["grptres"] == "gres/gpu=16"
    assert found[("research", "")]["grptres"] == ""
    assert {k for k in found if k[1] not in ("", "root")} == {
        ("pretraining", "alice"), ("pretraining", "bob"), ("research", "carol"),
    }  # fmt: skip
    assert first["accounts"]["pretraining"]["organization"] == "hyperpod-kit"
    assert first["defaults"] | {} == {"root": "root", "alice": "pretraining", "bob": "pretraining",
                                     "carol": "research"}  # fmt: skip
    assert "slurm accounts in sync on cluster cluster: 2 team(s), 3 member(s), 5 change(s)" in (
        node.log()
    )
    snapshot = node.snapshot()
    ok(node.run())
    assert slurmdb(node) == first
    assert sacctmgr_changes(node) == [], "the second run changed Slurm's accounts again"
    assert node.snapshot() == snapshot
    assert "3 member(s), 0 change(s)" in node.log()


def test_teams_are_the_controllers_only(sandbox: Any) -> None:
    node = sandbox(config({"teams": TEAMS}), group="compute")
    ok(node.run())
    assert node.calls("sacctmgr") == []
    assert node.path("/opt/hyperpod-kit/bin/hyperpod-kit-slurm-accounts").is_file()


def test_without_teams_the_controller_asks_slurm_nothing(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    assert node.calls("sacctmgr") == []


def test_accounting_not_answering_yet_does_not_fail_the_controller(sandbox: Any) -> None:
    """slurmdbd down at provisioning: the controller comes up; the timer's sync makes the
    accounts once it answers."""
    node = sandbox(config({"teams": TEAMS}))
    node.knob("slurmdbd_down", "")
    first = ok(node.run())
    assert "Slurm's accounting does not answer yet" in first.stdout
    assert not (node.state / "slurmdb.json").exists()
    node.knob("slurmdbd_down", None)
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    assert ("research", "carol") in assocs(node)


def test_sync_blocks_who_left_and_never_deletes(sandbox: Any) -> None:
    """carol moves to pretraining, research leaves the file, the GPU limit goes: carol's old
    association and the research account are blocked (history kept), her default follows her,
    pretraining's limit is cleared; twice the same."""
    node = sandbox(config({"teams": TEAMS}))
    ok(node.run())
    sync = str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))
    moved = [{"name": "pretraining", "members": ["alice", "bob", "carol"], "fairshare": 2,
              "gpu_limit": None}]  # fmt: skip
    publish_users(node, USERS, teams=moved)
    ok(node.run(sync))
    found = assocs(node)
    assert found[("research", "carol")]["maxsubmit"] == "0"
    assert found[("research", "")]["grpsubmit"] == "0"
    assert found[("pretraining", "")]["fairshare"] == "2"
    assert found[("pretraining", "")]["grptres"] == ""
    assert slurmdb(node)["defaults"]["carol"] == "pretraining"
    after = slurmdb(node)
    ok(node.run(sync))
    assert slurmdb(node) == after and sacctmgr_changes(node) == []
    publish_users(node, USERS, teams=TEAMS)  # research is back: unblocked
    ok(node.run(sync))
    found = assocs(node)
    assert found[("research", "carol")]["maxsubmit"] == ""
    assert found[("research", "")]["grpsubmit"] == ""
    assert found[("pretraining", "carol")]["maxsubmit"] == "0"
    assert slurmdb(node)["defaults"]["carol"] == "research"


def test_an_account_that_is_not_ours_is_left_alone(sandbox: Any) -> None:
    node = sandbox(config({"teams": TEAMS}))
    db = {
        "clusters": ["cluster"],
        "accounts": {"root": {"organization": "root", "description": "root"},
                     "research": {"organization": "physics", "description": "by hand"}},
        "assocs": [{"cluster": "cluster", "account": "research", "user": "", "fairshare": "7",
                    "grptres": "", "grpsubmit": "", "maxsubmit": ""}],
        "defaults": {},
        "tres": ["cpu|", "gres|gpu"],
    }  # fmt: skip
    (node.state / "slurmdb.json").write_text(json.dumps(db))
    result = ok(node.run())  # a warning, not a failed controller
    assert "account research exists and is not hyperpod-kit's (organization physics)" in (
        result.stdout
    )
    found = assocs(node)
    assert found[("research", "")]["fairshare"] == "7" and ("research", "carol") not in found
    assert ("pretraining", "alice") in found


def test_timer_sync_keeps_going_when_aws_is_down(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    node.knob("aws_fail", "100")
    result = node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync")))
    assert result.returncode == 75  # EX_TEMPFAIL: the timer tries again
    assert "cannot read SSM /hyperpod-kit/hyperpod-dev/lifecycle" in result.stdout
    assert len(node.calls("sleep")) == 5  # six attempts
    assert "alice" in node.passwd()  # nothing undone


# --- hooks and the groups' own scripts -----------------------------------------------------------


def scripts_env(tmp: Path, bodies: dict[str, str]) -> dict[str, Any]:
    for name, body in bodies.items():
        (tmp / name).write_text("#!/bin/bash\nset -eu\n" + body)
    groups = [
        {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
         "instance_count": 1},
        {"name": "login", "role": "login", "instance_type": "ml.m5.xlarge", "instance_count": 1},
        {
            "name": "compute", "role": "compute", "instance_type": "ml.g5.8xlarge",
            "instance_count": 2,
            "lifecycle": {"scripts": sorted(bodies)},
        },
    ]  # fmt: skip
    return {"cluster": {"instance_groups": groups}}


def test_hooks_then_group_scripts_in_order(sandbox: Any, tmp_path: Path) -> None:
    record = 'echo "$0 $HPK_GROUP $HPK_ROLE" >> "$HYPERPOD_KIT_ROOT/var/tmp/order"\n'
    overrides = scripts_env(tmp_path, {"b-second.sh": record, "a first.sh": record})
    node = sandbox(config(overrides, source=tmp_path), group="compute")
    node.path("/var/tmp").mkdir(parents=True)
    result = ok(node.run())
    order = node.path("/var/tmp/order").read_text().splitlines()
    assert [line.split("/")[-1] for line in order] == [
        "01-a_first.sh compute compute",
        "02-b-second.sh compute compute",
    ]
    out = result.stdout
    assert out.index("step: hook 50-health.sh") < out.index(
        "step: group script compute/01-a_first.sh"
    )
    assert "health: checks every 300 s from hyperpod-kit-health.timer" in out


def test_failing_group_script_fails_provisioning_with_its_name(
    sandbox: Any, tmp_path: Path
) -> None:
    overrides = scripts_env(
        tmp_path, {"1-ok.sh": "true\n", "2-broken.sh": "exit 3\n", "3-never.sh": "touch /never\n"}
    )
    node = sandbox(config(overrides, source=tmp_path), group="compute")
    result = node.run(env={"HYPERPOD_KIT_FAIL_GRACE_SECONDS": "7"})
    assert result.returncode == 1
    assert "ERROR: group script compute/02-2-broken.sh failed (exit 3)" in result.stdout
    assert "FAILED in group script compute/02-2-broken.sh" in node.log()
    assert "03-3-never.sh" not in result.stdout
    assert ["sleep", "7"] in node.calls("sleep")  # time for the logs to ship


def test_other_groups_do_not_run_compute_scripts(sandbox: Any, tmp_path: Path) -> None:
    overrides = scripts_env(tmp_path, {"x.sh": "exit 1\n"})
    node = sandbox(config(overrides, source=tmp_path), group="login")
    ok(node.run())


# --- missing resource config, unknown node -------------------------------------------------------


def test_no_resource_config_exits_0_with_a_message(sandbox: Any) -> None:
    node = sandbox(config())
    node.path("/opt/ml/config/resource_config.json").unlink()
    result = ok(node.run())
    assert "resource_config.json does not exist: not a HyperPod cluster node" in result.stdout
    assert node.mutations() == []
    assert not node.path("/opt/hyperpod-kit").exists()


def test_node_not_in_resource_config_fails(sandbox: Any) -> None:
    node = sandbox(config())
    node.knob("ips", "192.168.9.9")
    result = node.run()
    assert result.returncode == 1
    assert "cannot tell this node's instance group" in result.stdout


# --- enroot and pyxis ----------------------------------------------------------------------------


def enroot_block(node: Node) -> list[str]:
    text = node.path("/etc/enroot/enroot.conf").read_text()
    return [line for line in text.splitlines() if line.startswith("ENROOT_")]


def test_enroot_pyxis_from_the_ami(sandbox: Any) -> None:
    node = sandbox(config())
    enroot = node.bin / "enroot"
    enroot.write_text("#!/bin/sh\n")
    enroot.chmod(0o755)
    node.write("/usr/local/lib/slurm/spank_pyxis.so", "plugin")
    node.write(
        "/usr/local/share/pyxis/pyxis.conf", "required /usr/local/lib/slurm/spank_pyxis.so\n"
    )
    node.write("/etc/enroot/enroot.conf", "ENROOT_SQUASH_OPTIONS -comp lzo\n")
    plugstack = "include /usr/local/share/pyxis/*.conf\n"
    node.write("/opt/slurm/etc/plugstack.conf", plugstack)
    result = ok(node.run())
    assert node.calls("apt-get") == []
    assert node.path("/opt/slurm/etc/plugstack.conf").read_text() == plugstack
    assert not node.path("/opt/slurm/etc/plugstack.conf.d").exists()
    assert "pyxis: already configured" in result.stdout
    assert enroot_block(node) == [
        "ENROOT_SQUASH_OPTIONS -comp lzo",  # the AMI's own settings stay
        "ENROOT_RUNTIME_PATH /opt/dlami/nvme/enroot/runtime/user-$(id -u)",
        "ENROOT_CACHE_PATH /opt/dlami/nvme/enroot/cache/user-$(id -u)",
        "ENROOT_DATA_PATH /opt/dlami/nvme/enroot/data/user-$(id -u)",
        "ENROOT_TEMP_PATH /opt/dlami/nvme/enroot/tmp",
    ]
    mode = stat.S_IMODE(node.path("/opt/dlami/nvme/enroot/data").stat().st_mode)
    assert mode == 0o1777


def test_enroot_pyxis_from_the_bundled_packages(sandbox: Any, tmp_path: Path) -> None:
    packages = tmp_path / "debs"
    packages.mkdir()
    for name in ("enroot_3.5.0-1_amd64.deb", "enroot+caps_3.5.0-1_amd64.deb",
                 "nvslurm-plugin-pyxis_0.20.0-1_amd64.deb"):  # fmt: skip
        (packages / name).write_bytes(b"!<arch>\n")
    cfg = config({"cluster": {"slurm": {"enroot_pyxis_packages": "debs"}}}, source=tmp_path)
    node = sandbox(cfg, group="compute")
    node.knob("active", "slurmd")
    node.knob("mounts", "/fsx /opt/sagemaker")  # no local NVMe on this type
    node.knob("apt_fail", "1")  # the dpkg lock is busy once
    ok(node.run())
    installs = [c for c in node.calls("apt-get") if "install" in c]
    assert [[Path(a).name for a in c if a.endswith(".deb")] for c in installs] == [
        ["enroot+caps_3.5.0-1_amd64.deb", "enroot_3.5.0-1_amd64.deb"],
        ["nvslurm-plugin-pyxis_0.20.0-1_amd64.deb"],
    ]
    assert all("DPkg::Lock::Timeout=300" in c for c in node.calls("apt-get"))
    assert len([c for c in node.calls("apt-get") if "update" in c]) == 2  # 1 lock failure + 1
    pyxis = "/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"
    assert (
        node.path("/opt/slurm/etc/plugstack.conf.d/pyxis.conf").read_text() == f"required {pyxis}\n"
    )
    assert node.path("/opt/slurm/etc/plugstack.conf").read_text() == (
        "# HyperPod's plugstack\ninclude /opt/slurm/etc/plugstack.conf.d/pyxis.conf\n"
    )
    assert ["systemctl", "restart", "slurmd"] in node.calls("systemctl")
    assert "ENROOT_DATA_PATH /opt/sagemaker/enroot/data/user-$(id -u)" in enroot_block(node)

    settled = node.snapshot()
    ok(node.run())  # everything is there now: no install, no restart
    assert node.calls("apt-get") == [] and node.mutations() == []
    assert node.snapshot() == settled


def test_enroot_pyxis_neither_warns_and_continues(sandbox: Any) -> None:
    node = sandbox(config())
    result = ok(node.run())
    assert "WARNING: enroot is not on this AMI and no packages are bundled" in result.stdout
    assert "WARNING: the pyxis plugin (spank_pyxis.so) is not on this AMI" in result.stdout
    assert node.calls("apt-get") == []
    assert not node.path("/etc/enroot").exists()


def test_the_controller_makes_the_images_folder_jobs_import_into(sandbox: Any) -> None:
    """The rendered Slurm job imports each image once per digest into <images>/<uid>/ on FSx
    (hyperpod_kit/jobs/templates/slurm.sbatch.j2): the controller makes <images> (1777, so each
    user can make their own folder in it), once; other nodes leave FSx alone."""
    controller = sandbox(config())
    ok(controller.run())
    images = controller.path("/fsx/.hyperpod-kit/images")
    assert stat.S_IMODE(images.stat().st_mode) == 0o1777
    assert stat.S_IMODE(images.parent.stat().st_mode) == 0o755
    assert "made /fsx/.hyperpod-kit/images (1777)" in controller.log()
    compute = sandbox(config(), group="compute")
    ok(compute.run())
    assert not compute.path("/fsx/.hyperpod-kit").exists()


def test_no_images_folder_while_fsx_is_not_mounted(sandbox: Any) -> None:
    node = sandbox(config())
    node.knob("mounts", "/opt/dlami/nvme /opt/sagemaker")
    result = ok(node.run())
    assert "/fsx/.hyperpod-kit/images not made" in result.stdout
    assert not node.path("/fsx/.hyperpod-kit").exists()


def test_enroot_pyxis_off_runs_no_container_step(sandbox: Any) -> None:
    node = sandbox(config({"cluster": {"slurm": {"enroot_pyxis": False}}}))
    result = ok(node.run())
    assert "enroot" not in result.stdout


# --- EKS -----------------------------------------------------------------------------------------


WORKERS = {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
           "instance_count": 2}  # fmt: skip


def eks_data(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default environment on EKS with one worker group and the test users."""
    eks = merge(
        {k: v for k, v in default_data().items() if k != "trainer"},
        {
            "orchestrator": "eks",
            "network": {"vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
                        "control_plane_availability_zone_id": "usw2-az1"},
            "cluster": {"instance_groups": [WORKERS]},
            "users": USERS,
        },
    )  # fmt: skip
    return merge(eks, overrides or {})


def test_eks_worker_only_logs_hooks_and_group_scripts(sandbox: Any, tmp_path: Path) -> None:
    (tmp_path / "setup.sh").write_text('echo ran >> "$HYPERPOD_KIT_ROOT/var/tmp/eks"\n')
    group = {**WORKERS, "lifecycle": {"scripts": ["setup.sh"]}}
    eks = eks_data({"cluster": {"instance_groups": [group]}})
    cfg = EnvironmentConfig.model_validate(eks).at_source(tmp_path)
    node = sandbox(cfg, group="workers")
    node.path("/var/tmp").mkdir(parents=True)
    result = ok(node.run())
    assert "role worker" in result.stdout
    assert node.path("/var/tmp/eks").read_text() == "ran\n"
    assert "alice" not in node.passwd()
    assert node.calls("aws") == []
    # The health timer and the log shipper are the only units an EKS node gets (no user sync,
    # no Studio issuer).
    assert sorted(p.name for p in node.path("/etc/systemd/system").iterdir()) == [
        "hyperpod-kit-health.service", "hyperpod-kit-health.timer",
        "hyperpod-kit-ship-logs.service", "hyperpod-kit-ship-logs.timer",
    ]  # fmt: skip
    assert node.calls("systemctl")[-2:] == [
        ["systemctl", "enable", "--now", "hyperpod-kit-health.timer"],
        ["systemctl", "enable", "--now", "hyperpod-kit-ship-logs.timer"],
    ]


# --- the health hook -----------------------------------------------------------------------------

HEALTH_UNITS = ("hyperpod-kit-health.service", "hyperpod-kit-health.timer")
SHIP_UNITS = ("hyperpod-kit-ship-logs.service", "hyperpod-kit-ship-logs.timer")


def test_health_hook_twice_installs_runner_settings_and_timer(sandbox: Any) -> None:
    cfg = config({"monitoring": {"node_checks": {"interval_seconds": 120}}})
    node = sandbox(cfg, group="compute")
    ok(node.run())
    first = node.snapshot()
    assert ["systemctl", "daemon-reload"] in node.calls("systemctl")
    ok(node.run())
    assert node.snapshot() == first
    assert node.mutations() == [], "the second run changed the machine again"
    assert node.calls("systemctl")[-2:] == [
        ["systemctl", "enable", "--now", HEALTH_UNITS[1]],
        ["systemctl", "enable", "--now", SHIP_UNITS[1]],
    ]

    for path in ("runner.py", "settings.json", "checks/core.py", "checks/xid.py"):
        installed = node.path(f"/opt/hyperpod-kit/health/{path}")
        assert installed.read_bytes() == (node.bundle / "health" / path).read_bytes(), path
    assert stat.S_IMODE(node.path("/opt/hyperpod-kit/health/runner.py").stat().st_mode) == 0o755
    settings = json.loads(node.path("/opt/hyperpod-kit/health/settings.json").read_text())
    assert settings["interval_seconds"] == 120
    service = node.path(f"/etc/systemd/system/{HEALTH_UNITS[0]}").read_text()
    assert (
        "ExecStart=/usr/bin/python3 /opt/hyperpod-kit/health/runner.py run "
        "--settings /opt/hyperpod-kit/health/settings.json --instance-group compute\n"
    ) in service
    assert str(node.root) not in service  # node paths, not the sandbox's
    timer = node.path(f"/etc/systemd/system/{HEALTH_UNITS[1]}").read_text()
    assert "OnUnitActiveSec=120\n" in timer and "WantedBy=timers.target" in timer

    # The log shipper: installed beside the runner, a timer every 60 s, health.jsonl and the
    # lifecycle log to the streams docs/health.md names.
    shipper = node.path("/opt/hyperpod-kit/bin/hyperpod-kit-ship-logs")
    assert shipper.read_bytes() == (node.bundle / "bin/hyperpod-kit-ship-logs").read_bytes()
    assert stat.S_IMODE(shipper.stat().st_mode) == 0o755
    service = node.path(f"/etc/systemd/system/{SHIP_UNITS[0]}").read_text()
    assert (
        "ExecStart=/usr/bin/python3 /opt/hyperpod-kit/bin/hyperpod-kit-ship-logs "
        f"--region us-west-2 --cluster-name {cfg.cluster_name} "
        "--source /var/log/hyperpod-kit/health.jsonl=hyperpod-kit/health/{instance_id} "
        "--source /var/log/hyperpod-kit/lifecycle.log=hyperpod-kit/lifecycle/{instance_id} "
        "--spool /var/log/hyperpod-kit/jobs=hyperpod-kit/jobs/{name}/{instance_id}\n"
    ) in service
    assert "EnvironmentFile=-/etc/hyperpod-kit/ship-logs.env\n" in service
    timer = node.path(f"/etc/systemd/system/{SHIP_UNITS[1]}").read_text()
    assert "OnUnitActiveSec=60s\n" in timer and "WantedBy=timers.target" in timer
    # The jobs' spool the shipper reads: root's, 1733 (anyone creates, only root lists), made
    # once: the second run above changed nothing.
    assert node.owner("/var/log/hyperpod-kit/jobs") == (0, 0, "1733")


def test_installed_shipper_sends_the_nodes_health_lines(sandbox: Any) -> None:
    """The unit's own command line, run on the sandbox node after provisioning: the group from
    resource_config.json, the stream from the instance id, each line once."""
    node = sandbox(config(), group="compute")
    ok(node.run())
    node.write("/sys/devices/virtual/dmi/id/board_asset_tag", "i-0abc\n")
    node.write("/var/log/hyperpod-kit/health.jsonl", '{"event": "verdict"}\n')
    service = node.path(f"/etc/systemd/system/{SHIP_UNITS[0]}").read_text()
    command = next(x for x in service.splitlines() if x.startswith("ExecStart="))
    argv = command.removeprefix("ExecStart=").split()
    argv[1] = str(node.path(argv[1]))
    for _ in range(2):
        result = node.run("-c", 'exec "$@"', "ship", *argv)
        assert result.returncode == 0, result.stderr
    assert not [c for c in node.calls("aws") if "put-log-events" in c], "sent twice"
    group = f"aws/sagemaker/Clusters/{node.cfg.cluster_name}/a1b2c3d4e5f6"
    stream = node.state / "logs" / group / "hyperpod-kit/health/i-0abc.jsonl"
    assert [json.loads(x)["message"] for x in stream.read_text().splitlines()] == [
        '{"event": "verdict"}'
    ]
    lifecycle = node.state / "logs" / group / "hyperpod-kit/lifecycle/i-0abc.jsonl"
    assert "step: hook 50-health.sh" in lifecycle.read_text()


def test_health_hook_with_monitoring_off_installs_nothing(sandbox: Any) -> None:
    node = sandbox(config({"monitoring": {"enabled": False}}), group="compute")
    result = ok(node.run())
    assert "health: monitoring.enabled is off; no node-side checks are installed" in result.stdout
    assert not node.path("/opt/hyperpod-kit/health").exists()
    assert not any(
        node.path(f"/etc/systemd/system/{unit}").exists() for unit in HEALTH_UNITS + SHIP_UNITS
    )
    assert not node.path("/opt/hyperpod-kit/bin/hyperpod-kit-ship-logs").exists()
    assert not any("hyperpod-kit-health" in " ".join(c) for c in node.calls("systemctl"))


# --- Studio's Slurm token issuer (hooks.d/60-studio-jwt.sh) --------------------------------------

STUDIO = {"studio": {"enabled": True, "exclude": ["carol"]},
          "cluster": {"slurm": {"config_strategy": "Merge"}}}  # fmt: skip
# Stands in for lifecycle/studio/slurm_jwt.sh in the upload: records how the hook ran it.
ISSUER_STUB = """#!/bin/bash
printf '%s\\n' "$0" "$HYPERPOD_KIT_ENVIRONMENT" "$HYPERPOD_KIT_REGION" "$HYPERPOD_KIT_BUCKET" \\
  "$HYPERPOD_KIT_USERS_FILE" "$HYPERPOD_KIT_CONTROLLER" >>"$HYPERPOD_KIT_ROOT/var/tmp/issuer"
"""


def studio_node(
    sandbox: Any,
    group: str,
    overrides: dict[str, Any] | None = None,
    *,
    issuer: str | None = ISSUER_STUB,
) -> Node:
    """A Studio-on-Slurm node; `issuer` stands in for the token issuer (None: the real one)."""
    node = sandbox(config(merge(STUDIO, overrides or {})), group=group)
    if issuer is not None:
        (node.bundle / "studio/slurm_jwt.sh").write_text(issuer)
    node.path("/var/tmp").mkdir(parents=True)
    return node


def test_studio_token_hook_does_nothing_off_the_controller(sandbox: Any) -> None:
    node = studio_node(sandbox, "login")
    result = ok(node.run())
    assert "step: hook 60-studio-jwt.sh" in result.stdout
    assert "nothing to do on a login node" in result.stdout
    assert not node.path("/var/tmp/issuer").exists()
    assert not node.path("/opt/hyperpod-kit/studio").exists()


def test_studio_token_hook_runs_the_installed_issuer_on_the_controller(sandbox: Any) -> None:
    node = studio_node(sandbox, "controller")
    handles = node.state / "ssm/hyperpod-kit/hyperpod-dev/storage"
    handles.parent.mkdir(parents=True, exist_ok=True)
    handles.write_text(json.dumps({"bucket_name": "hyperpod-dev-data-1a2b3c", "dns_name": "x"}))
    node.knob("active", "slurmctld")
    ok(node.run())
    issuer = node.path("/opt/hyperpod-kit/studio/slurm_jwt.sh")
    assert issuer.read_text() == ISSUER_STUB and stat.S_IMODE(issuer.stat().st_mode) == 0o755
    assert node.path("/var/tmp/issuer").read_text().splitlines() == [
        str(issuer), "hyperpod-dev", "us-west-2", "hyperpod-dev-data-1a2b3c",
        "/var/lib/hyperpod-kit/users.json", "1",
    ]  # fmt: skip
    # What the issuer reads: the users file the sync keeps, saying who has a Studio profile.
    kept = json.loads(node.path("/var/lib/hyperpod-kit/users.json").read_text())
    assert [(u["name"], u["studio"]) for u in kept["users"]] == [
        ("alice", True), ("bob", True), ("carol", False),
    ]  # fmt: skip
    assert ["systemctl", "is-active", "--quiet", "slurmctld"] in node.calls("systemctl")


def test_studio_token_hook_uses_the_named_bucket_without_asking_ssm(sandbox: Any) -> None:
    node = studio_node(sandbox, "controller", {"storage": {"bucket": {"name": "team-data"}}})
    node.knob("active", "slurmctld")
    ok(node.run())
    assert node.path("/var/tmp/issuer").read_text().splitlines()[3] == "team-data"
    assert not any("hyperpod-dev/storage" in " ".join(c) for c in node.calls("aws"))


def test_studio_token_hook_before_slurmctld_is_up_installs_the_issuer_s_timer(sandbox: Any) -> None:
    """A first deploy: HyperPod's slurmctld is not active while the lifecycle scripts run. The
    real issuer installs its timer anyway (the timer's runs issue the tokens later), writes and
    asks nothing of AWS yet, and the controller's provisioning succeeds."""
    node = studio_node(sandbox, "controller", {"storage": {"bucket": {"name": "team-data"}}},
                       issuer=None)  # fmt: skip
    result = ok(node.run())
    assert "slurmctld is not active yet" in result.stdout + node.log()
    units = node.path("/etc/systemd/system")
    service = (units / "hyperpod-kit-studio-jwt.service").read_text()
    assert "ExecStart=/opt/hyperpod-kit/studio/slurm_jwt.sh" in service
    assert "OnUnitActiveSec=10min" in (units / "hyperpod-kit-studio-jwt.timer").read_text()
    env = node.path("/etc/hyperpod-kit/studio-slurm-jwt.env").read_text().splitlines()
    assert env == [
        "HYPERPOD_KIT_ENVIRONMENT=hyperpod-dev", "HYPERPOD_KIT_REGION=us-west-2",
        "HYPERPOD_KIT_BUCKET=team-data", "HYPERPOD_KIT_USERS_FILE=/var/lib/hyperpod-kit/users.json",
        "HYPERPOD_KIT_CONTROLLER=1",
    ]  # fmt: skip
    assert ["systemctl", "enable", "--now", "hyperpod-kit-studio-jwt.timer"] in node.calls(
        "systemctl"
    )
    issuer_calls = [
        c for c in node.calls("aws") if "slurm-jwt" in str(c) or "slurm-client" in str(c)
    ]
    assert issuer_calls == []


def test_studio_token_issuer_failing_does_not_fail_the_controller(sandbox: Any) -> None:
    node = studio_node(sandbox, "controller", {"storage": {"bucket": {"name": "team-data"}}},
                       issuer="#!/bin/bash\necho 'AccessDenied' >&2\nexit 254\n")  # fmt: skip
    node.knob("active", "slurmctld")
    result = ok(node.run())
    assert "the Slurm token issuer failed (exit 254); its timer tries again" in result.stdout
    assert "lifecycle complete" in result.stdout


# --- Studio on EKS: the host mount of FSx and the partitions-only sync ---------------------------

FSX_DNS = "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"
FSX_HANDLES = {"bucket_name": "hyperpod-dev-data-1a2b3c", "dns_name": FSX_DNS,
               "mount_name": "abcdefgh", "file_system_id": "fs-0123456789abcdef0"}  # fmt: skip


def eks_studio_config(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(
        eks_data(merge({"studio": {"enabled": True}}, overrides or {}))
    )


def eks_studio_node(sandbox: Any, overrides: dict[str, Any] | None = None) -> Node:
    node = sandbox(eks_studio_config(overrides), group="workers")
    node.knob("mounts", "/opt/dlami/nvme /opt/sagemaker")  # HyperPod mounts no FSx on EKS hosts
    handles = node.state / "ssm/hyperpod-kit/hyperpod-dev/storage"
    handles.parent.mkdir(parents=True, exist_ok=True)
    handles.write_text(json.dumps(FSX_HANDLES))
    return node


def partition_status(node: Node, user: str) -> Any:
    return json.loads((node.state / f"ssm/hyperpod-kit/hyperpod-dev/partitions/{user}").read_text())


def test_eks_studio_node_twice_mounts_once_and_makes_the_partitions(sandbox: Any) -> None:
    node = eks_studio_node(sandbox)
    first = ok(node.run())
    assert "step: hook 40-studio-partitions.sh" in first.stdout
    assert node.calls("mount") == [
        ["mount", "-t", "lustre", "-o", "relatime,flock", f"{FSX_DNS}@tcp:/abcdefgh",
         str(node.path("/fsx"))],
    ]  # fmt: skip
    # The names came from the storage stack's parameter.
    reads = [c for c in node.calls("aws") if "get-parameter" in c]
    assert reads[0][3:6] == ["ssm", "get-parameter", "--name"]
    assert reads[0][6] == "/hyperpod-kit/hyperpod-dev/storage"
    for name, uid, gid in (("alice", 10001, 1001), ("bob", 10002, 1001), ("carol", 10003, 20003)):
        assert node.owner(f"/fsx/{name}") == (uid, gid, "700")
    # The status, published from a worker (any EKS node), exactly as the Slurm controller's.
    puts = [c for c in node.calls("aws") if "put-parameter" in c]
    assert len(puts) == 3
    alice = next(c for c in puts if "/hyperpod-kit/hyperpod-dev/partitions/alice" in c)
    assert alice[alice.index("--value") + 1] == (
        '{"user":"alice","uid":10001,"gid":1001,"path":"/fsx/alice","exists":true,'
        '"owner_uid":10001,"owner_gid":1001,"mode":"0700","locked":false,"ready":true}'
    )
    # No accounts, groups or sudoers: the host's users are not the environment's.
    assert set(node.passwd()) == {"root", "ubuntu"}
    assert not node.calls("useradd") and not node.calls("groupadd") and not node.calls("usermod")
    assert not node.path("/etc/sudoers.d").exists()
    # The sync and its timer, for users added later.
    assert node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync").is_file()
    assert ["systemctl", "enable", "--now", "hyperpod-kit-user-sync.timer"] in node.calls(
        "systemctl"
    )
    after_first = node.snapshot()

    ok(node.run())
    assert node.snapshot() == after_first
    assert node.mutations() == [], "the second run changed the machine again"
    assert node.calls("mount") == []  # already mounted: nothing


def test_eks_studio_timer_mounts_after_a_failed_mount_and_adds_a_later_user(sandbox: Any) -> None:
    node = eks_studio_node(sandbox)
    node.knob("mount_fail", "")
    result = ok(node.run())  # the node comes up: its pods get FSx from the CSI driver
    assert "could not be mounted now" in result.stdout
    assert not node.path("/fsx/alice").exists()
    assert not (node.state / "ssm/hyperpod-kit/hyperpod-dev/partitions").exists()

    node.knob("mount_fail", None)
    dave = {"name": "dave", "uid": 10004, "gid": 1001, "admin": True}
    publish_users(node, [*USERS, dave])
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    assert len(node.calls("mount")) == 1
    assert node.owner("/fsx/dave") == (10004, 1001, "700")
    assert partition_status(node, "dave")["ready"] is True
    assert "dave" not in node.passwd()


def test_eks_studio_existing_file_system_names_come_from_the_environment_file(
    sandbox: Any,
) -> None:
    existing = {"file_system_id": "fs-0fedcba9876543210",
                "dns_name": "fs-0fedcba9876543210.fsx.us-west-2.amazonaws.com",
                "mount_name": "zyxwvuts"}  # fmt: skip
    node = eks_studio_node(sandbox, {"storage": {"lustre": {"existing": existing}}})
    ok(node.run())
    assert node.calls("mount")[0][5] == f"{existing['dns_name']}@tcp:/zyxwvuts"
    assert not any("hyperpod-dev/storage" in " ".join(c) for c in node.calls("aws"))


BUCKET_NAMED = {"bucket": {"name": "team-data"}}


@pytest.mark.parametrize("orchestrator", ["slurm", "eks"])
def test_shared_partition_is_made_once_and_reported(sandbox: Any, orchestrator: str) -> None:
    """`studio.partitions: shared`: the folder every profile mounts exists, root 1777, and its
    status is published as `_shared` (what the Studio gate waits for); a second run changes
    nothing and a folder already there is never changed."""
    shared = {"studio": {"partitions": "shared", "shared_path": "/team"}}
    if orchestrator == "slurm":  # a named bucket: the token hook needs no SSM read here
        node = studio_node(sandbox, "controller", merge(shared, {"storage": BUCKET_NAMED}))
    else:
        node = eks_studio_node(sandbox, shared)
    ok(node.run())
    node.path("/var/tmp/issuer").unlink(missing_ok=True)  # the token issuer stub's record of runs
    assert node.owner("/fsx/team") == (0, 0, "1777")
    status = partition_status(node, "_shared")
    assert status == {
        "user": "_shared", "uid": 0, "gid": 0, "path": "/fsx/team", "exists": True,
        "owner_uid": 0, "owner_gid": 0, "mode": "01777", "locked": False, "ready": True,
    }  # fmt: skip
    after_first = node.snapshot()
    ok(node.run())
    node.path("/var/tmp/issuer").unlink(missing_ok=True)
    assert node.snapshot() == after_first
    assert node.mutations() == [], "the second run changed the machine again"
