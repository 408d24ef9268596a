"""The Studio partitions custom resource's handler, against moto (EC2 interfaces and security
groups, FSx, SSM) and botocore's Stubber for what moto lacks (user profiles).

Each test plays CloudFormation and the Provider framework: `on_event`, then `is_complete` with the
plan merged in, as the framework does (``{**event, **on_event_result}``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from moto.fsx.models import FileSystem

from tests.conftest import REPO

HANDLER = REPO / "assets" / "functions" / "studio_partitions" / "handler.py"
REGION = "us-west-2"
ENV = "research"
DOMAIN = "d-abcdef123456"
OTHER_FS = "fs-0fedcba9876543210"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("studio_partitions_handler", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


h = _load()


# --- AWS: moto for EC2, FSx and SSM; a stubbed SageMaker client -----------------------------------


class World:
    """A VPC with a file system (two network interfaces), Studio's security group, and SSM."""

    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.fsx = boto3.client("fsx", region_name=REGION)
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.128.0/17")["Subnet"]
        self.cluster_sg = self._group(vpc, "cluster")
        self.studio_sg = self._group(vpc, "studio-fsx")
        self.enis = [
            self.ec2.create_network_interface(
                SubnetId=subnet["SubnetId"], Groups=[self.cluster_sg], Description=f"fsx {i}"
            )["NetworkInterface"]["NetworkInterfaceId"]
            for i in range(2)
        ]
        fs = self.fsx.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            SubnetIds=[subnet["SubnetId"]],
            SecurityGroupIds=[self.cluster_sg],
            LustreConfiguration={"DeploymentType": "PERSISTENT_2"},
        )["FileSystem"]
        self.fs_id = fs["FileSystemId"]
        self.sagemaker = boto3.client("sagemaker", region_name=REGION)
        self.stub = Stubber(self.sagemaker)
        self.stub.activate()

    def _group(self, vpc: str, name: str) -> str:
        return str(
            self.ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
        )

    def aws(self) -> Any:
        return h.Aws(ssm=self.ssm, sagemaker=self.sagemaker, fsx=self.fsx, ec2=self.ec2)

    def groups(self, eni: str) -> list[str]:
        reply = self.ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])
        return [g["GroupId"] for g in reply["NetworkInterfaces"][0]["Groups"]]

    def report(self, user: str | None, **overrides: Any) -> None:
        """What the node-side sync publishes after it stat()s the partition."""
        status = {
            "path": f"/fsx/{user or 'shared'}",
            "uid": USERS[user]["Uid"] if user else 0,
            "gid": USERS[user]["Gid"] if user else 0,
            "mode": "0700" if user else "1777",
            "node": "ip-10-0-130-12",
            "time": "2026-11-23T09:00:00Z",
        } | overrides
        self.ssm.put_parameter(
            Name=h.partition_parameter(ENV, user),
            Value=json.dumps(status),
            Type="String",
            Overwrite=True,
        )

    # SageMaker profiles, as DescribeUserProfile shows them.
    def profile(self, name: str, configs: list[dict[str, Any]] | None) -> None:
        params = {"DomainId": DOMAIN, "UserProfileName": name}
        if configs is None:
            self.stub.add_client_error(
                "describe_user_profile",
                "ResourceNotFound",
                f"User profile {name} does not exist",
                expected_params=params,
            )
        else:
            settings = {"CustomFileSystemConfigs": configs}
            self.stub.add_response(
                "describe_user_profile",
                {"DomainId": DOMAIN, "UserProfileName": name, "UserSettings": settings},
                params,
            )

    def expect_update(self, name: str, configs: list[dict[str, Any]]) -> None:
        self.stub.add_response(
            "update_user_profile",
            {"UserProfileArn": f"arn:aws:sagemaker:{REGION}:123456789012:user-profile/x/{name}"},
            {
                "DomainId": DOMAIN,
                "UserProfileName": name,
                "UserSettings": {"CustomFileSystemConfigs": configs},
            },
        )


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # not needed; slow to load
    with mock_aws():
        w = World()
        # moto's FSx does not report network interfaces; the real service does (the ENIs it
        # made in the subnet). Report the ones this world made.
        original = FileSystem.to_dict

        def with_enis(fs: FileSystem) -> dict[str, Any]:
            return original(fs) | {"NetworkInterfaceIds": list(w.enis)}

        monkeypatch.setattr(FileSystem, "to_dict", with_enis)
        yield w
        w.stub.assert_no_pending_responses()


# --- events ---------------------------------------------------------------------------------------

USERS: dict[str, dict[str, Any]] = {
    "alice": {"Uid": 10001, "Gid": 1001},
    "bob": {"Uid": 10002, "Gid": 2000},
    "carol": {"Uid": 10003, "Gid": 1001},
}


def props(fs: str, *names: str, mode: str = "per_user", timeout: int = 1200) -> dict[str, Any]:
    """Properties as CloudFormation sends them: every number as text."""
    users = [
        {
            "Name": n,
            "Uid": str(USERS[n]["Uid"]),
            "Gid": str(USERS[n]["Gid"]),
            "Path": f"/{n}" if mode == "per_user" else "/shared",
        }
        for n in names
    ]
    return {
        "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:provider",
        "Environment": ENV,
        "DomainId": DOMAIN,
        "FileSystemId": fs,
        "Mode": mode,
        "SharedPath": "/shared",
        "Users": users,
        "TimeoutSeconds": str(timeout),
    }


def event(
    request: str,
    properties: dict[str, Any],
    old: dict[str, Any] | None = None,
    kind: str = "Custom::StudioPartitions",
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": kind,
        "LogicalResourceId": "Partitions0",
        "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/research-studio/x",
        "RequestId": "r-1",
        "ResponseURL": "https://example.invalid/response",
        "ResourceProperties": properties,
    }
    if request != "Create":
        e["PhysicalResourceId"] = f"{ENV}/{DOMAIN}/{properties.get('FileSystemId')}/Partitions0"
    if old is not None:
        e["OldResourceProperties"] = old
    return e


def planned(e: dict[str, Any]) -> dict[str, Any]:
    return {**e, **h.on_event(e)}


def expired(state: dict[str, Any]) -> dict[str, Any]:
    """The same request, polled after its deadline."""
    return {**state, "HyperPodKit": {**state["HyperPodKit"], "deadline": time.time() - 1}}


def ours(fs: str, path: str) -> dict[str, Any]:
    return {"FSxLustreFileSystemConfig": {"FileSystemId": fs, "FileSystemPath": path}}


# --- Create: wait for the node's report, then complete --------------------------------------------


def test_create_waits_for_every_partition_then_completes(world: World) -> None:
    state = planned(event("Create", props(world.fs_id, "alice", "bob")))
    assert state["HyperPodKit"]["plan"] == {
        "wait": ["alice", "bob"],
        "attach": ["alice", "bob"],
        "detach": [],
    }
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": False}  # nothing reported
    world.report("alice")
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": False}  # bob still missing
    world.report("bob")
    # New profiles do not exist yet: CloudFormation creates them, with the partition, next.
    world.profile("alice", None)
    world.profile("bob", None)
    result = h.is_complete(state, aws=world.aws())
    assert result == {"IsComplete": True, "Data": {"Attached": "0", "Detached": "0"}}


def test_numbers_in_the_status_are_compared_as_modes(world: World) -> None:
    world.report("alice", mode="700")  # `stat -c %a` prints 700
    world.profile("alice", None)
    state = planned(event("Create", props(world.fs_id, "alice")))
    assert h.is_complete(state, aws=world.aws())["IsComplete"] is True


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        pytest.param(
            {"uid": 10099},
            "alice: /fsx/alice seen by ip-10-0-130-12 at 2026-11-23T09:00:00Z has owner "
            "10099:1001, expected 10001:1001",
            id="wrong-owner",
        ),
        pytest.param(
            {"mode": "0755"},
            "alice: /fsx/alice seen by ip-10-0-130-12 at 2026-11-23T09:00:00Z has mode 0755, "
            "expected 0700",
            id="wrong-mode",
        ),
        pytest.param(
            {"path": "/fsx/home/alice"},
            "has path /fsx/home/alice, expected /fsx/alice",
            id="wrong-path",
        ),
    ],
)
def test_a_wrong_status_keeps_waiting_then_fails_saying_what_was_seen(
    world: World, overrides: dict[str, Any], says: str
) -> None:
    world.report("alice", **overrides)
    state = planned(event("Create", props(world.fs_id, "alice", timeout=600)))
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": False}  # the sync may fix it
    with pytest.raises(h.NotReadyError) as failed:
        h.is_complete(expired(state), aws=world.aws())
    assert str(failed.value).startswith(
        "partitions not ready after 600 s, so no profile got them: "
    )
    assert says in str(failed.value)


def _as_the_sync_writes(user: str, **overrides: Any) -> str:
    """The JSON lifecycle/bin/hyperpod-kit-user-sync publishes (see the sandbox tests): uid/gid
    are the wanted ids, owner_uid/owner_gid what `stat` saw, mode with a leading 0."""
    wanted = {"uid": USERS[user]["Uid"], "gid": USERS[user]["Gid"]}
    status = {
        "user": user, **wanted, "path": f"/fsx/{user}", "exists": True,
        "owner_uid": wanted["uid"], "owner_gid": wanted["gid"], "mode": "0700",
        "locked": False, "ready": True,
    } | overrides  # fmt: skip
    return json.dumps(status, separators=(",", ":"))


@pytest.mark.parametrize(
    ("overrides", "ready", "says"),
    [
        pytest.param({}, True, "", id="as-wanted"),
        pytest.param(
            {"owner_uid": 10099, "ready": False}, False,
            "has owner 10099:1001, expected 10001:1001", id="owner-is-what-counts",
        ),
        pytest.param(
            {"exists": False, "owner_uid": None, "owner_gid": None, "mode": None, "ready": False},
            False, "/fsx/alice does not exist on the node yet", id="not-yet-created",
        ),
    ],
)  # fmt: skip
def test_the_status_the_nodes_publish_is_read_by_its_owner(
    world: World, overrides: dict[str, Any], ready: bool, says: str
) -> None:
    """The gate reads the node sync's own format: a folder whose owner differs from the wanted
    ids is not ready, whatever uid/gid the status also carries."""
    world.ssm.put_parameter(
        Name=h.partition_parameter(ENV, "alice"),
        Value=_as_the_sync_writes("alice", **overrides),
        Type="String",
        Overwrite=True,
    )
    state = planned(event("Create", props(world.fs_id, "alice")))
    if ready:
        world.profile("alice", None)
        assert h.is_complete(state, aws=world.aws())["IsComplete"] is True
        return
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": False}
    with pytest.raises(h.NotReadyError) as failed:
        h.is_complete(expired(state), aws=world.aws())
    assert says in str(failed.value)
    assert "seen by ?" not in str(failed.value)


def test_the_shared_status_the_nodes_publish_reads_as_mode_1777(world: World) -> None:
    """`stat -c %a` prints 1777 for the sticky folder; the sync writes it as "01777"."""
    state = planned(event("Create", props(world.fs_id, "alice", mode="shared")))
    world.ssm.put_parameter(
        Name=h.partition_parameter(ENV, None),
        Value=json.dumps({
            "user": "_shared", "uid": 0, "gid": 0, "path": "/fsx/shared", "exists": True,
            "owner_uid": 0, "owner_gid": 0, "mode": "01777", "locked": False, "ready": True,
        }),
        Type="String",
        Overwrite=True,
    )  # fmt: skip
    world.profile("alice", None)
    assert h.is_complete(state, aws=world.aws())["IsComplete"] is True


def test_a_missing_status_fails_at_the_deadline_naming_user_and_parameter(world: World) -> None:
    world.report("alice")
    state = planned(event("Create", props(world.fs_id, "alice", "bob")))
    with pytest.raises(h.NotReadyError) as failed:
        h.is_complete(expired(state), aws=world.aws())
    message = str(failed.value)
    assert "bob: no status at /hyperpod-kit/research/partitions/bob" in message
    assert "is a cluster node running, and does its users list include bob?" in message
    assert "alice" not in message  # alice was reported as expected


def test_an_unreadable_status_is_reported(world: World) -> None:
    world.ssm.put_parameter(
        Name=h.partition_parameter(ENV, "alice"), Value="created", Type="String"
    )
    state = planned(event("Create", props(world.fs_id, "alice")))
    with pytest.raises(h.NotReadyError, match=r"alice: status at .*/alice is unreadable"):
        h.is_complete(expired(state), aws=world.aws())


def test_shared_mode_waits_for_one_root_owned_sticky_directory(world: World) -> None:
    state = planned(event("Create", props(world.fs_id, "alice", "bob", mode="shared")))
    assert state["HyperPodKit"]["plan"]["wait"] == ["_shared"]
    world.report(None, mode="0777")
    with pytest.raises(h.NotReadyError, match=r"shared partition: /fsx/shared .* mode 0777, "):
        h.is_complete(expired(state), aws=world.aws())
    world.report(None)
    world.profile("alice", None)
    world.profile("bob", None)
    assert h.is_complete(state, aws=world.aws())["IsComplete"] is True


# --- Update: users added and removed --------------------------------------------------------------


def test_update_waits_only_for_the_added_user_and_attaches_an_existing_profile(
    world: World,
) -> None:
    """carol is added back: her profile was kept when she was removed, so it exists already."""
    old = props(world.fs_id, "alice", "bob")
    state = planned(event("Update", props(world.fs_id, "alice", "bob", "carol"), old))
    assert state["HyperPodKit"]["plan"] == {"wait": ["carol"], "attach": ["carol"], "detach": []}
    world.report("carol")
    world.profile("carol", [])
    world.expect_update("carol", [ours(world.fs_id, "/carol")])
    result = h.is_complete(state, aws=world.aws())
    assert result["Data"] == {"Attached": "1", "Detached": "0"}


def test_update_detaches_a_removed_user_keeping_their_other_file_systems(world: World) -> None:
    """Removing bob takes this file system off his profile; nothing is deleted."""
    other = ours(OTHER_FS, "/team")
    state = planned(
        event("Update", props(world.fs_id, "alice"), props(world.fs_id, "alice", "bob"))
    )
    assert state["HyperPodKit"]["plan"] == {"wait": [], "attach": [], "detach": ["bob"]}
    world.profile("bob", [other, ours(world.fs_id, "/bob")])
    world.expect_update("bob", [other])
    assert h.is_complete(state, aws=world.aws())["Data"] == {"Attached": "0", "Detached": "1"}


def test_an_unchanged_update_does_nothing(world: World) -> None:
    same = props(world.fs_id, "alice", "bob")
    state = planned(event("Update", same, same))
    assert state["HyperPodKit"]["plan"] == {"wait": [], "attach": [], "detach": []}
    assert h.is_complete(state, aws=world.aws())["IsComplete"] is True  # no AWS call at all


def test_a_new_uid_is_awaited_again(world: World) -> None:
    old = props(world.fs_id, "alice")
    old["Users"][0]["Uid"] = "10050"
    state = planned(event("Update", props(world.fs_id, "alice"), old))
    assert state["HyperPodKit"]["plan"]["wait"] == ["alice"]


def test_another_file_system_is_a_new_resource_and_the_old_one_is_detached_on_delete(
    world: World,
) -> None:
    state = planned(event("Update", props(world.fs_id, "alice"), props(OTHER_FS, "alice", "bob")))
    assert state["PhysicalResourceId"].endswith(f"/{world.fs_id}/Partitions0")
    assert state["HyperPodKit"]["plan"] == {"wait": ["alice"], "attach": ["alice"], "detach": []}


# --- Delete ---------------------------------------------------------------------------------------


def test_delete_detaches_every_profile_and_tolerates_missing_ones(world: World) -> None:
    state = planned(event("Delete", props(world.fs_id, "alice", "bob", "carol")))
    world.profile("alice", [ours(world.fs_id, "/alice")])
    world.expect_update("alice", [])
    world.profile("bob", None)  # deleted by hand: nothing to detach
    world.profile("carol", [])  # never attached
    assert h.is_complete(state, aws=world.aws())["Data"] == {"Attached": "0", "Detached": "1"}


def test_delete_of_a_malformed_resource_succeeds_without_touching_anything(world: World) -> None:
    e = event("Delete", {"Users": "not a list"})
    state = planned(e)
    assert state["PhysicalResourceId"] == e["PhysicalResourceId"]
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": True}


# --- idempotence, throttling, failures, malformed events ------------------------------------------


def test_a_repeated_request_changes_nothing_the_second_time(world: World) -> None:
    world.report("carol")
    old = props(world.fs_id, "alice")
    e = event("Update", props(world.fs_id, "alice", "carol"), old)
    world.profile("carol", [])
    world.expect_update("carol", [ours(world.fs_id, "/carol")])
    assert h.is_complete(planned(e), aws=world.aws())["Data"]["Attached"] == "1"
    world.profile("carol", [ours(world.fs_id, "/carol")])  # as the first request left it
    assert h.is_complete(planned(e), aws=world.aws())["Data"]["Attached"] == "0"


def test_throttling_means_ask_again_then_success(world: World) -> None:
    world.report("carol")
    state = planned(
        event("Update", props(world.fs_id, "alice", "carol"), props(world.fs_id, "alice"))
    )
    world.stub.add_client_error("describe_user_profile", "ThrottlingException", "Rate exceeded")
    assert h.is_complete(state, aws=world.aws()) == {"IsComplete": False}
    world.profile("carol", [])
    world.expect_update("carol", [ours(world.fs_id, "/carol")])
    assert h.is_complete(state, aws=world.aws())["Data"]["Attached"] == "1"


def test_throttled_status_reads_are_retried_at_the_next_poll(world: World) -> None:
    ssm = boto3.client("ssm", region_name=REGION)
    with Stubber(ssm) as stub:
        stub.add_client_error("get_parameters", "ThrottlingException", "Rate exceeded")
        state = planned(event("Create", props(world.fs_id, "alice")))
        aws = world.aws()
        aws.ssm = ssm
        assert h.is_complete(state, aws=aws) == {"IsComplete": False}


def test_throttling_past_the_deadline_fails(world: World) -> None:
    state = expired(
        planned(event("Update", props(world.fs_id, "alice"), props(world.fs_id, "alice", "bob")))
    )
    world.stub.add_client_error("describe_user_profile", "ThrottlingException", "Rate exceeded")
    with pytest.raises(ClientError):
        h.is_complete(state, aws=world.aws())


def test_a_failure_in_the_middle_undoes_what_the_request_attached(world: World) -> None:
    for name in ("alice", "bob", "carol"):
        world.report(name)
    state = planned(
        event(
            "Update",
            props(world.fs_id, "alice", "bob", "carol"),
            props(OTHER_FS, "alice", "bob", "carol"),
        )
    )
    world.profile("alice", [])
    world.expect_update("alice", [ours(world.fs_id, "/alice")])
    world.profile("bob", [])
    world.stub.add_client_error(
        "update_user_profile",
        "AccessDeniedException",
        "not authorized",
        expected_params={
            "DomainId": DOMAIN,
            "UserProfileName": "bob",
            "UserSettings": {"CustomFileSystemConfigs": [ours(world.fs_id, "/bob")]},
        },
    )
    world.expect_update("alice", [])  # the undo
    with pytest.raises(RuntimeError) as failed:
        h.is_complete(state, aws=world.aws())
    assert str(failed.value).startswith("attaching the partition of bob failed (")
    assert "not authorized" in str(failed.value)
    assert str(failed.value).endswith("undone for: alice")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"Users": [{"Name": "alice", "Uid": "x", "Gid": "1", "Path": "/a"}]},
                     "Users[0].Uid is not an integer: 'x'", id="uid"),
        pytest.param({"Users": [{"Name": "al ice", "Uid": "1", "Gid": "1", "Path": "/a"}]},
                     "Name 'al ice' does not match", id="name"),
        pytest.param({"Mode": "everyone"}, "Mode 'everyone' is not per_user or shared", id="mode"),
        pytest.param({"FileSystemId": "fs-x"}, "FileSystemId 'fs-x' does not match", id="fs"),
        pytest.param({"DomainId": None}, "DomainId is missing", id="domain"),
        pytest.param({"Users": [{"Name": "a", "Uid": "1", "Gid": "1", "Path": "/a"}] * 2},
                     "Users lists a name twice", id="twice"),
    ],
)  # fmt: skip
def test_a_malformed_create_fails_with_the_reason(change: dict[str, Any], message: str) -> None:
    with pytest.raises(h.MalformedEventError) as failed:
        h.on_event(event("Create", props("fs-0123456789abcdef0", "alice") | change))
    assert message in str(failed.value)


def test_unknown_request_and_resource_types_fail() -> None:
    with pytest.raises(h.MalformedEventError, match="RequestType 'Replace'"):
        h.on_event({"RequestType": "Replace", "ResourceType": "Custom::StudioPartitions"})
    with pytest.raises(h.MalformedEventError, match="ResourceType 'Custom::Other'"):
        h.on_event({"RequestType": "Create", "ResourceType": "Custom::Other"})
    with pytest.raises(h.MalformedEventError, match="no plan"):
        h.is_complete({"RequestType": "Create", "ResourceType": "Custom::StudioPartitions"})


# --- Studio's security group on an existing file system -------------------------------------------


def access(world: World, request: str, sg: str | None = None) -> dict[str, Any]:
    e = event(
        request,
        {"FileSystemId": world.fs_id, "SecurityGroupId": sg or world.studio_sg},
        kind="Custom::StudioFileSystemAccess",
    )
    e["PhysicalResourceId"] = f"{world.fs_id}/{sg or world.studio_sg}"
    return planned(e)


def test_access_adds_the_group_to_every_interface_and_removes_it_on_delete(world: World) -> None:
    result = h.is_complete(access(world, "Create"), aws=world.aws())
    assert result == {"IsComplete": True, "Data": {"Interfaces": "2"}}
    assert all(world.groups(e) == [world.cluster_sg, world.studio_sg] for e in world.enis)
    again = h.is_complete(access(world, "Create"), aws=world.aws())  # repeated: no change
    assert again["Data"] == {"Interfaces": "0"}
    assert h.is_complete(access(world, "Delete"), aws=world.aws())["Data"] == {"Interfaces": "2"}
    assert all(world.groups(e) == [world.cluster_sg] for e in world.enis)


def test_access_delete_of_a_deleted_file_system_succeeds(world: World) -> None:
    state = access(world, "Delete")
    state["ResourceProperties"]["FileSystemId"] = "fs-0123456789abcdef9"
    state["HyperPodKit"]["plan"]["file_system"] = "fs-0123456789abcdef9"
    assert h.is_complete(state, aws=world.aws())["Data"] == {"Interfaces": "0"}


def test_access_failing_on_the_second_interface_undoes_the_first(world: World) -> None:
    calls: list[str] = []
    real = world.ec2.modify_network_interface_attribute

    def flaky(**kw: Any) -> Any:
        calls.append(kw["NetworkInterfaceId"])
        if len(calls) == 2:
            raise ClientError(
                {"Error": {"Code": "UnauthorizedOperation", "Message": "denied"}},
                "ModifyNetworkInterfaceAttribute",
            )
        return real(**kw)

    aws = world.aws()
    aws.ec2 = type("Ec2", (), {})()
    aws.ec2.describe_network_interfaces = world.ec2.describe_network_interfaces
    aws.ec2.modify_network_interface_attribute = flaky
    with pytest.raises(RuntimeError, match=r"adding sg-\w+ on fs-\w+'s interfaces failed"):
        h.is_complete(access(world, "Create"), aws=aws)
    assert all(world.groups(e) == [world.cluster_sg] for e in world.enis)  # as before


def test_access_with_a_bad_group_id_fails_on_create_but_not_on_delete(world: World) -> None:
    with pytest.raises(h.MalformedEventError, match="SecurityGroupId 'default'"):
        access(world, "Create", sg="default")
    assert h.is_complete(access(world, "Delete", sg="default"), aws=world.aws()) == {
        "IsComplete": True
    }


def test_handler_is_plain_boto3() -> None:
    """The Lambda runtime has boto3 and botocore; nothing else is installed at run time."""
    imports = {
        line.split()[1].split(".")[0]
        for line in HANDLER.read_text().splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "json", "logging", "re", "time", "collections", "dataclasses",
                       "typing", "boto3", "botocore"}  # fmt: skip
    assert Path(HANDLER).parent.joinpath("__init__.py").exists() is False
