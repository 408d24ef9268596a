"""The lifecycle upload rendered from the environment file: validated values only, shellcheck-clean
scripts for every example, a hash that moves exactly with the content, and the node-side JSON
helper (lifecycle/lib/node.py) on well-formed and hostile input."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from ipaddress import IPv4Network
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.health_settings import node_health_settings
from hyperpod_kit.lifecycle import (
    ENROOT_PACKAGES_DIR,
    NODE_PACKAGES_DIR,
    LifecycleError,
    build_bundle,
    content_hash,
    lifecycle_context,
    partition_status_parameter,
    render_lifecycle,
    ssh_host_patterns,
    stage_bundle,
    users_upload,
)
from hyperpod_kit.paths import LIFECYCLE_DIR
from hyperpod_kit.templating import shell_word
from tests.conftest import REPO, default_data, merge

EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))
USERS = [
    {"name": "alice", "uid": 10001, "gid": 1001, "admin": True},
    {"name": "bob", "uid": 10002, "gid": 1001},
]
needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None and os.environ.get("CI") != "true",
    reason="shellcheck not installed (.ci/run installs it)",
)


def config(
    overrides: dict[str, Any] | None = None, source: Path | None = None
) -> EnvironmentConfig:
    loaded = EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))
    return loaded.at_source(source) if source else loaded


def eks(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    data = merge(
        {k: v for k, v in default_data().items() if k != "trainer"},
        {
            "orchestrator": "eks",
            "cluster": {"instance_groups": [
                {"name": "workers", "role": "worker", "instance_type": "ml.g5.8xlarge",
                 "instance_count": 2},
            ]},
        },
    )  # fmt: skip
    return EnvironmentConfig.model_validate(merge(data, overrides or {}))


def bash_files(files: dict[str, bytes]) -> list[str]:
    return sorted(
        p for p, data in files.items() if p.endswith(".sh") or data.startswith(b"#!/bin/bash")
    )


def shellcheck(folder: Path, scripts: list[str]) -> str:
    """shellcheck every script from the upload's root, following `source` between them."""
    result = subprocess.run(
        ["shellcheck", "-x", "--severity=style", *scripts],
        cwd=folder, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return result.stdout + result.stderr


def variants(tmp: Path) -> list[EnvironmentConfig]:
    """The examples plus the branches they do not reach: own scripts, packages, EKS, all off."""
    (tmp / "setup.sh").write_text("#!/bin/bash\necho setup\n")
    (tmp / "debs").mkdir(exist_ok=True)
    (tmp / "debs" / "enroot_3.5.0-1_amd64.deb").write_bytes(b"!<arch>\n")
    groups = default_data()["cluster"]["instance_groups"]
    groups = [*groups[:2], {**groups[2], "lifecycle": {"scripts": ["setup.sh"]}}]
    return [
        *(load_environment(e).config for e in EXAMPLES),
        config(
            {"users": USERS, "cluster": {"instance_groups": groups,
                                         "slurm": {"enroot_pyxis_packages": "debs"}}},
            source=tmp,
        ),
        config({"cluster": {"slurm": {"enroot_pyxis": False}}, "monitoring": {"enabled": False}}),
        eks({"users": USERS}),
        # every node set-up on, with packages, without internet
        config({"users": USERS, "network": NO_NAT,
                "cluster": {"node_setup": {"pam_slurm_adopt": True, "packages": "debs"}}},
               source=tmp),
        eks({"network": NO_NAT, "cluster": {"node_setup": {"container_storage": "nvme"}}}),
        # every node set-up off
        config({"cluster": {"node_setup": NODE_SETUP_OFF}}),
    ]  # fmt: skip


NO_NAT = {
    "vpc": None,
    "existing_vpc": {"vpc_id": "vpc-0123456789abcdef0", "cidr": "172.31.0.0/16",
                     "private_subnet_id": "subnet-0123456789abcdef0"},
    "interface_endpoints": True,
    "internet": False,
}  # fmt: skip
NODE_SETUP_OFF = {"ssh_keys": False, "pam_slurm_adopt": False, "logrotate": False,
                  "hold_lustre_client": False}  # fmt: skip


# --- every example, linted ----------------------------------------------------------------------


@needs_shellcheck
def test_every_variant_renders_shellcheck_clean(tmp_path: Path) -> None:
    linted: set[str] = set()
    for i, cfg in enumerate(variants(tmp_path)):
        bundle = build_bundle(cfg)
        folder = tmp_path / f"upload-{i}"
        bundle.write_to(folder)
        scripts = bash_files(dict(bundle.files))
        assert "on_create.sh" in scripts and "lib/common.sh" in scripts
        assert shellcheck(folder, scripts) == "", cfg.name
        linted.update(scripts)
    # every hook, including Studio's (the studio-slurm example), is among them
    assert {"hooks.d/50-health.sh", "hooks.d/60-studio-jwt.sh", "studio/slurm_jwt.sh"} <= linted
    # and Studio on EKS's (the studio-eks example): the host mount of FSx and its hook
    assert {"hooks.d/40-studio-partitions.sh", "bin/hyperpod-kit-mount-fsx"} <= linted
    # and every node set-up step with what it installs
    assert set(NODE_SETUP_SCRIPTS) <= linted


def test_every_variant_parses_and_compiles(tmp_path: Path) -> None:
    for i, cfg in enumerate(variants(tmp_path)):
        bundle = build_bundle(cfg)
        folder = tmp_path / f"upload-{i}"
        bundle.write_to(folder)
        for script in bash_files(dict(bundle.files)):
            result = subprocess.run(
                ["bash", "-n", script], cwd=folder, capture_output=True, check=False
            )
            assert result.returncode == 0, (script, result.stderr)
        compile(bundle.text("lib/node.py"), "node.py", "exec")


def test_no_provisioning_parameters_and_nothing_left_unrendered(tmp_path: Path) -> None:
    for cfg in variants(tmp_path):
        files = render_lifecycle(cfg)
        assert not any("provisioning_parameters" in p for p in files)
        for path, text in files.items():
            if (LIFECYCLE_DIR / f"{path}.j2").exists():  # a template: fully rendered
                assert "{{" not in text and "{%" not in text and "{#" not in text, path


def test_a_template_folder_with_provisioning_parameters_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "lifecycle"
    shutil.copytree(LIFECYCLE_DIR, source)
    (source / "provisioning_parameters.json").write_text("{}")
    with pytest.raises(LifecycleError, match=r"provisioning_parameters\.json"):
        render_lifecycle(config(), source=source)


def test_a_misspelt_template_variable_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "lifecycle"
    shutil.copytree(LIFECYCLE_DIR, source)
    (source / "extra.sh.j2").write_text("echo {{ enviroment }}\n")
    with pytest.raises(LifecycleError, match=r"extra\.sh\.j2.*enviroment"):
        render_lifecycle(config(), source=source)


# --- what the upload holds ----------------------------------------------------------------------


def test_slurm_upload_holds_the_sync_and_the_users_travel_beside_it() -> None:
    files = render_lifecycle(config({"users": USERS}))
    assert "users.json" not in files  # people change without changing the scripts' hash
    users = json.loads(users_upload(config({"users": USERS})) or b"")
    assert users == {
        "version": 1,
        "environment": "hyperpod-dev",
        "home_root": "/fsx",
        "users": [
            {"name": "alice", "uid": 10001, "gid": 1001, "admin": True},
            {"name": "bob", "uid": 10002, "gid": 1001, "admin": False},
        ],
    }
    for path in ("bin/hyperpod-kit-user-sync", "steps/users.sh", "steps/enroot_pyxis.sh",
                 "systemd/hyperpod-kit-user-sync.timer", "hooks.d/50-health.sh"):  # fmt: skip
        assert path in files
    assert not any(p.endswith(".j2") for p in files)
    on_create = files["on_create.sh"]
    assert on_create.index("steps/users.sh") < on_create.index("steps/enroot_pyxis.sh")
    assert on_create.index("steps/enroot_pyxis.sh") < on_create.index("hooks.d")
    assert on_create.index("hooks.d") < on_create.index("GROUP_SCRIPTS")


def test_eks_upload_is_minimal() -> None:
    files = render_lifecycle(eks({"users": USERS}))
    assert sorted(files) == [
        "bin/hyperpod-kit-ship-logs",
        "health/checks/__init__.py", "health/checks/core.py", "health/checks/disk.py",
        "health/checks/efa.py", "health/checks/fsx.py", "health/checks/gpu.py",
        "health/checks/xid.py", "health/runner.py", "health/settings.json",
        "hooks.d/50-health.sh", "lib/common.sh", "lib/node.py", "lib/settings.sh",
        "logrotate/hyperpod-kit", "on_create.sh", "steps/hold_lustre_client.sh",
        "steps/install.sh", "steps/logrotate.sh",
        "systemd/hyperpod-kit-ship-logs.service", "systemd/hyperpod-kit-ship-logs.timer",
    ]  # fmt: skip
    assert "steps/users.sh" not in files["on_create.sh"]
    assert "workers) printf '%s\\n' worker ;;" in files["lib/settings.sh"]


def test_enroot_off_leaves_out_the_container_step() -> None:
    files = render_lifecycle(config({"cluster": {"slurm": {"enroot_pyxis": False}}}))
    assert "steps/enroot_pyxis.sh" not in files
    assert "enroot" not in files["on_create.sh"]


def test_settings_are_the_validated_values_quoted() -> None:
    settings = render_lifecycle(config())["lib/settings.sh"]
    assert "HPK_ENVIRONMENT=hyperpod-dev\n" in settings
    assert "HPK_REGION=us-west-2\n" in settings
    assert "HPK_LIFECYCLE_PARAMETER=/hyperpod-kit/hyperpod-dev/lifecycle\n" in settings
    assert "HPK_STATUS_PARAMETER_PREFIX=/hyperpod-kit/hyperpod-dev/partitions\n" in settings
    assert "HPK_ENROOT_PACKAGES=''\n" in settings
    assert "    compute) printf '%s\\n' compute ;;\n" in settings
    assert partition_status_parameter("hyperpod-dev", "alice") == (
        "/hyperpod-kit/hyperpod-dev/partitions/alice"
    )


def test_group_scripts_are_copied_in_order_with_safe_names(tmp_path: Path) -> None:
    (tmp_path / "my setup;rm.sh").write_text("echo one\n")
    (tmp_path / "two.sh").write_text("echo two\n")
    groups = default_data()["cluster"]["instance_groups"]
    groups[2] = {**groups[2], "lifecycle": {"scripts": ["two.sh", "my setup;rm.sh"]}}
    files = render_lifecycle(config({"cluster": {"instance_groups": groups}}, source=tmp_path))
    assert files["groups/compute/01-two.sh"] == "echo two\n"
    assert files["groups/compute/02-my_setup_rm.sh"] == "echo one\n"
    line = "  compute) GROUP_SCRIPTS=(groups/compute/01-two.sh groups/compute/02-my_setup_rm.sh) ;;"
    assert line in files["on_create.sh"]


def test_enroot_packages_are_bundled_bytes_for_bytes(tmp_path: Path) -> None:
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs" / "enroot+caps_3.5.0-1_amd64.deb").write_bytes(b"\x00\x01binary")
    (tmp_path / "debs" / "README").write_text("not a package")
    cfg = config({"cluster": {"slurm": {"enroot_pyxis_packages": "debs"}}}, source=tmp_path)
    bundle = build_bundle(cfg)
    key = f"{ENROOT_PACKAGES_DIR}/enroot+caps_3.5.0-1_amd64.deb"
    assert bundle.files[key] == b"\x00\x01binary"
    assert not any(p.endswith("README") for p in bundle.files)
    assert f"HPK_ENROOT_PACKAGES={ENROOT_PACKAGES_DIR}\n" in bundle.text("lib/settings.sh")


def test_unsafe_values_never_reach_a_template() -> None:
    """Values that bypassed validation (model_copy skips it) are refused, not quoted."""
    base = config()
    group = base.cluster.instance_groups[0].model_copy(update={"name": "a;reboot"})
    bad = base.model_copy(
        update={"cluster": base.cluster.model_copy(update={"instance_groups": [group]})}
    )
    with pytest.raises(LifecycleError, match="instance group name 'a;reboot'"):
        lifecycle_context(bad)
    with pytest.raises(LifecycleError, match="region"):
        lifecycle_context(base.model_copy(update={"region": "us-west-2$(id)"}))


def test_q_quotes_what_it_is_given() -> None:
    # the filter is templating.shell_word (tests/unit/test_templating.py reads it back in bash)
    assert shlex.split(f"x={shell_word('a b')}") == ["x=a b"]


# --- the hash -----------------------------------------------------------------------------------


def test_hash_moves_exactly_with_the_content(tmp_path: Path) -> None:
    same = [build_bundle(config({"users": USERS})).content_hash for _ in range(2)]
    assert same[0] == same[1]
    assert len(same[0]) == 64
    # people travel beside the scripts: another user list is another users file, same scripts
    other_user = build_bundle(config({"users": USERS[:1]}))
    assert other_user.content_hash == same[0]
    assert other_user.users_key != build_bundle(config({"users": USERS})).users_key
    (tmp_path / "s.sh").write_text("echo 1\n")
    groups = default_data()["cluster"]["instance_groups"]
    groups[2] = {**groups[2], "lifecycle": {"scripts": ["s.sh"]}}
    overrides = {"cluster": {"instance_groups": groups}}
    first = build_bundle(config(overrides, source=tmp_path)).content_hash
    (tmp_path / "s.sh").write_text("echo 2\n")
    assert build_bundle(config(overrides, source=tmp_path)).content_hash != first
    # EKS nodes get no users file: people changes do not touch an EKS cluster's lifecycle.
    assert build_bundle(eks({"users": USERS})).content_hash == build_bundle(eks()).content_hash


def test_hash_covers_paths_and_contents() -> None:
    assert content_hash({"a": b"1"}) != content_hash({"b": b"1"})
    assert content_hash({"a": b"1"}) != content_hash({"a": b"2"})
    assert content_hash({"a": b"1", "b": b""}) != content_hash({"a": b"1b"})


def test_bundle_prefix_and_staging(tmp_path: Path) -> None:
    bundle = build_bundle(config())
    assert bundle.prefix == f"lifecycle/{bundle.content_hash}/"
    folder = stage_bundle(bundle, under=tmp_path)
    assert folder.name == bundle.content_hash
    assert stage_bundle(bundle, under=tmp_path) == folder  # reused
    staged = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    assert staged == dict(bundle.files)
    assert os.access(folder / "on_create.sh", os.X_OK)
    assert [p.name for p in (tmp_path / "hyperpod-kit-lifecycle").iterdir()] == [folder.name]


# --- lifecycle/lib/node.py ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hpk_node", LIFECYCLE_DIR / "lib" / "node.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hpk_node"] = module
    spec.loader.exec_module(module)
    return module


RESOURCE_CONFIG = {
    "ClusterConfig": {"ClusterArn": "arn:aws:sagemaker:us-west-2:1:cluster/x", "ClusterName": "c"},
    "InstanceGroups": [
        {"Name": "controller", "Instances": [{"InstanceName": "controller-1",
                                              "CustomerIpAddress": "10.0.0.5"}]},
        {"Name": "gpu", "Instances": [{"CustomerIpAddress": "10.0.0.6"},
                                      {"CustomerIpAddress": "10.0.0.7"}]},
    ],
}  # fmt: skip


def test_node_group_of(node: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(RESOURCE_CONFIG))
    assert node.group_of(str(path), ["172.17.0.1", "10.0.0.7"]) == "gpu"
    with pytest.raises(LookupError):
        node.group_of(str(path), ["10.9.9.9"])
    bad = {"InstanceGroups": [{"Name": "x;y", "Instances": [{"CustomerIpAddress": "1.1.1.1"}]}]}
    path.write_text(json.dumps(bad))
    with pytest.raises(node.NodeInputError):
        node.group_of(str(path), ["1.1.1.1"])


def test_node_users_lines_and_group_names(node: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    carol = {"name": "carol", "uid": 10003, "gid": 5000}
    path.write_bytes(users_upload(config({"users": [*USERS, carol]})) or b"")
    assert node.users(str(path)) == [
        "G 1001 hyperpod-1001",
        "G 5000 carol",
        "U alice 10001 1001 1",
        "U bob 10002 1001 0",
        "U carol 10003 5000 0",
    ]


@pytest.mark.parametrize(
    "user",
    [
        {"name": "Alice", "uid": 10001, "gid": 1001},
        {"name": "a$(id)", "uid": 10001, "gid": 1001},
        {"name": "alice", "uid": 99, "gid": 1001},
        {"name": "alice", "uid": True, "gid": 1001},
        {"name": "alice", "uid": "10001", "gid": 1001},
        {"name": "alice", "uid": 10001, "gid": 1001, "admin": "yes"},
    ],
)
def test_node_users_refuses_a_bad_entry(node: ModuleType, tmp_path: Path, user: Any) -> None:
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"users": [user]}))
    with pytest.raises(node.NodeInputError):
        node.users(str(path))


def test_node_users_refuses_duplicates(node: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"users": [USERS[0], {**USERS[1], "uid": 10001}]}))
    with pytest.raises(node.NodeInputError, match="listed twice"):
        node.users(str(path))


def test_node_cli_exit_codes(tmp_path: Path) -> None:
    script = str(LIFECYCLE_DIR / "lib" / "node.py")
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(RESOURCE_CONFIG))

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, script, *args], input=stdin, capture_output=True,
                              text=True, check=False)  # fmt: skip

    assert run("group-of", str(path), "10.0.0.5").stdout == "controller\n"
    assert run("group-of", str(path), "10.1.1.1").returncode == 3
    assert run("group-of", str(tmp_path / "missing.json"), "1.1.1.1").returncode == 2
    uri = "s3://sagemaker-1-us-west-2-dev/lifecycle/abc/users.json"
    assert run("field", "users_uri", stdin=json.dumps({"users_uri": uri})).stdout == uri + "\n"
    assert run("field", "users_uri", stdin='{"users_uri": "s3://b/$(reboot)"}').returncode == 2
    assert run("field", "users_uri", stdin="not json").returncode == 2
    assert run("nonsense").returncode == 2


def test_adding_a_person_leaves_the_scripts_prefix_alone() -> None:
    """The cluster's SourceS3Uri follows the scripts only: a new user changes the users file
    and the pointer, never the cluster (no UpdateCluster per person)."""
    before = build_bundle(config({"users": USERS}))
    after = build_bundle(config({"users": [*USERS, {"name": "dave", "uid": 10009}]}))
    assert after.content_hash == before.content_hash
    assert after.users_key != before.users_key


# --- the health hook and Studio's token issuer ---------------------------------------------------


def test_bundle_carries_the_health_settings_on_slurm_and_eks() -> None:
    for cfg in (config({"monitoring": {"node_checks": {"interval_seconds": 120}}}), eks()):
        bundle = build_bundle(cfg)
        text = bundle.text("health/settings.json")
        assert json.loads(text) == node_health_settings(cfg)
        assert text == json.dumps(node_health_settings(cfg), indent=2, sort_keys=True) + "\n"
        for path in ("health/runner.py", "health/checks/core.py", "hooks.d/50-health.sh"):
            assert path in bundle.files, (cfg.orchestrator, path)
        # The shipper reads the jobs' spool (the hook makes it: tests/integration runs it).
        assert (
            " --spool /var/log/hyperpod-kit/jobs=hyperpod-kit/jobs/{name}/{instance_id}\n"
            in bundle.text("systemd/hyperpod-kit-ship-logs.service")
        )
    hook = render_lifecycle(config())["hooks.d/50-health.sh"]
    assert 'runner.py" units --root' in hook and "enable --now" in hook


def test_a_health_setting_moves_the_upload_hash() -> None:
    base = build_bundle(config())
    other = build_bundle(config({"monitoring": {"node_checks": {"interval_seconds": 120}}}))
    assert base.content_hash != other.content_hash
    assert {p for p in base.files if base.files[p] != other.files[p]} == {
        "health/settings.json", "hooks.d/50-health.sh",  # the log line names the interval
    }  # fmt: skip


def test_monitoring_off_the_health_hook_only_logs() -> None:
    hook = render_lifecycle(config({"monitoring": {"enabled": False}}))["hooks.d/50-health.sh"]
    assert "monitoring.enabled is off" in hook
    code = "\n".join(line for line in hook.splitlines() if not line.startswith("#"))
    assert "put_file" not in code and "systemctl" not in code and "runner.py" not in code
    assert "chmod" not in code, "no spool folder either"


STUDIO = {
    "studio": {"enabled": True, "exclude": ["bob"]},
    "cluster": {"slurm": {"config_strategy": "Merge"}},
    "users": USERS,
}


def test_studio_token_hook_only_with_studio_on_slurm() -> None:
    hook, issuer = "hooks.d/60-studio-jwt.sh", "studio/slurm_jwt.sh"
    files = render_lifecycle(config(STUDIO))
    assert hook in files and issuer in files
    assert files[issuer] == (LIFECYCLE_DIR / issuer).read_text()
    for cfg in (config({"users": USERS}), eks({"studio": {"enabled": True}, "users": USERS})):
        files = render_lifecycle(cfg)
        assert hook not in files and not any(p.startswith("studio/") for p in files)


def test_studio_users_file_says_who_gets_a_token() -> None:
    users = json.loads(users_upload(config(STUDIO)) or b"")["users"]
    assert [(u["name"], u["studio"]) for u in users] == [("alice", True), ("bob", False)]
    plain = json.loads(users_upload(config({"users": USERS})) or b"")["users"]
    assert all("studio" not in u for u in plain)  # unchanged without Studio


def test_studio_token_hook_bucket_named_or_read_from_the_storage_handles() -> None:
    named = render_lifecycle(merge_config(STUDIO, {"storage": {"bucket": {"name": "my-data"}}}))
    assert "BUCKET=my-data\n" in named["hooks.d/60-studio-jwt.sh"]
    hook = render_lifecycle(config(STUDIO))["hooks.d/60-studio-jwt.sh"]
    assert "BUCKET=''\n" in hook
    assert "ssm get-parameter --name /hyperpod-kit/hyperpod-dev/storage" in hook
    assert 'HYPERPOD_KIT_USERS_FILE="$HPK_STATE/users.json"' in hook
    assert "[[ ${HPK_ROLE:?} != controller ]]" in hook


def merge_config(*overrides: dict[str, Any]) -> EnvironmentConfig:
    data: dict[str, Any] = {}
    for o in overrides:
        data = merge(data, o)
    return config(data)


# --- Studio on EKS: the partitions-only sync ---------------------------------------------------

EKS_STUDIO_ONLY = {"hooks.d/40-studio-partitions.sh", "bin/hyperpod-kit-mount-fsx"}
USER_SYNC_FILES = {
    "steps/users.sh", "bin/hyperpod-kit-user-sync", "systemd/hyperpod-kit-user-sync.service",
    "systemd/hyperpod-kit-user-sync.timer",
}  # fmt: skip


@pytest.mark.parametrize(
    ("orchestrator", "studio"), [("slurm", False), ("slurm", True), ("eks", False), ("eks", True)]
)
def test_bundle_per_orchestrator_and_studio(orchestrator: str, studio: bool) -> None:
    overrides: dict[str, Any] = {"users": USERS, "studio": {"enabled": studio}}
    cfg = config(overrides) if orchestrator == "slurm" else eks(overrides)
    files = render_lifecycle(cfg)
    users = users_upload(cfg)
    settings = files["lib/settings.sh"]
    sync = orchestrator == "slurm" or studio
    assert set(files) >= USER_SYNC_FILES if sync else not USER_SYNC_FILES & set(files)
    assert (users is not None) == sync
    if orchestrator == "eks" and studio:
        assert set(files) >= EKS_STUDIO_ONLY
        assert "HPK_PARTITIONS_ONLY=1\n" in settings
        assert "steps/users.sh" not in files["on_create.sh"]  # the hook runs it, after the mount
        assert "hooks.d/60-studio-jwt.sh" not in files
        assert [u["name"] for u in json.loads(users or b"")["users"]] == ["alice", "bob"]
    else:
        assert not EKS_STUDIO_ONLY & set(files)
        assert "HPK_PARTITIONS_ONLY" not in settings


def test_eks_studio_mount_names_named_or_read_from_the_storage_handles() -> None:
    hook = render_lifecycle(eks({"studio": {"enabled": True}, "users": USERS}))
    script = hook["bin/hyperpod-kit-mount-fsx"]
    assert "DNS_NAME=''\nMOUNT_NAME=''\n" in script
    assert "ssm get-parameter --name /hyperpod-kit/hyperpod-dev/storage" in script
    assert "mount -t lustre -o relatime,flock" in script
    existing = {"file_system_id": "fs-0123456789abcdef0", "mount_name": "abcdefgh",
                "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"}  # fmt: skip
    named = render_lifecycle(
        eks({"studio": {"enabled": True}, "users": USERS,
             "storage": {"lustre": {"existing": existing}}})
    )["bin/hyperpod-kit-mount-fsx"]  # fmt: skip
    assert f"DNS_NAME={existing['dns_name']}\nMOUNT_NAME=abcdefgh\n" in named


def test_which_nodes_read_the_storage_handles_while_provisioning() -> None:
    """The cluster stack grants ssm:GetParameter on the storage parameter exactly for these."""
    existing = {"file_system_id": "fs-0123456789abcdef0", "mount_name": "abcdefgh",
                "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"}  # fmt: skip
    studio = {"studio": {"enabled": True}, "users": USERS}
    cases = [
        (config({"users": USERS}), False),
        (config(studio), True),  # the token hook: CloudFormation names the bucket
        (merge_config(studio, {"storage": {"bucket": {"name": "my-data"}}}), False),
        (eks({"users": USERS}), False),
        (eks(studio), True),  # the host mount: the file system's names are tokens
        (eks({**studio, "storage": {"lustre": {"existing": existing}}}), False),
    ]
    assert [lifecycle_context(c).reads_storage_handles for c, _ in cases] == [w for _, w in cases]


# --- node set-up (cluster.node_setup, network.internet) ------------------------------------------

NODE_SETUP_SCRIPTS = {
    "steps/ssh.sh": "setting up ssh between nodes",
    "bin/hyperpod-kit-ssh-key": None,
    "steps/pam_slurm_adopt.sh": "setting up pam_slurm_adopt",
    "bin/hyperpod-kit-pam-adopt": None,
    "steps/logrotate.sh": "setting up log rotation",
    "steps/hold_lustre_client.sh": "holding the Lustre client packages",
    "steps/container_storage.sh": "moving container storage off the root volume",
    "bin/hyperpod-kit-container-storage": None,
}
SLURM_DEFAULT_SETUP = {
    "steps/ssh.sh", "bin/hyperpod-kit-ssh-key", "steps/logrotate.sh", "logrotate/hyperpod-kit",
    "logrotate/hyperpod-kit-slurm", "steps/hold_lustre_client.sh",
}  # fmt: skip
EKS_DEFAULT_SETUP = {"steps/logrotate.sh", "logrotate/hyperpod-kit", "steps/hold_lustre_client.sh"}


def _setup_files(files: dict[str, str]) -> set[str]:
    return {
        p for p in files
        if p in NODE_SETUP_SCRIPTS or p.startswith("logrotate/") or "container-storage" in p
    }  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "orchestrator", "expected"),
    [
        pytest.param({}, "slurm", SLURM_DEFAULT_SETUP, id="slurm-defaults"),
        pytest.param({"pam_slurm_adopt": True}, "slurm", SLURM_DEFAULT_SETUP | {
            "steps/pam_slurm_adopt.sh", "bin/hyperpod-kit-pam-adopt"}, id="slurm-pam"),
        pytest.param(NODE_SETUP_OFF, "slurm", set(), id="slurm-off"),
        # Slurm has no container storage to move (validate warns), EKS no keys or PAM stack
        pytest.param({**NODE_SETUP_OFF, "container_storage": "nvme"}, "slurm", set(),
                     id="slurm-storage-ignored"),
        pytest.param({}, "eks", EKS_DEFAULT_SETUP, id="eks-defaults"),
        pytest.param({"container_storage": "ebs", "pam_slurm_adopt": True}, "eks",
                     EKS_DEFAULT_SETUP | {"steps/container_storage.sh",
                                          "bin/hyperpod-kit-container-storage",
                                          "systemd/hyperpod-kit-container-storage.service"},
                     id="eks-storage"),
    ],
)  # fmt: skip
def test_each_node_setup_step_is_uploaded_only_where_it_runs(
    overrides: dict[str, Any], orchestrator: str, expected: set[str]
) -> None:
    setup = {"cluster": {"node_setup": overrides}}
    files = render_lifecycle(config(setup) if orchestrator == "slurm" else eks(setup))
    assert _setup_files(files) == expected
    on_create = files["on_create.sh"]
    for path, step in NODE_SETUP_SCRIPTS.items():
        if step is not None:
            assert (f'run_step "{step}" "$HERE/{path}"' in on_create) == (path in expected), path


def test_node_setup_steps_run_in_their_order() -> None:
    on_create = render_lifecycle(config({"cluster": {"node_setup": {"pam_slurm_adopt": True}}}))[
        "on_create.sh"
    ]
    order = ["steps/install.sh", "steps/hold_lustre_client.sh", "steps/users.sh",
             "steps/enroot_pyxis.sh", "steps/ssh.sh", "steps/pam_slurm_adopt.sh",
             "steps/logrotate.sh", "hooks.d"]  # fmt: skip
    assert [on_create.index(p) for p in order] == sorted(on_create.index(p) for p in order)
    eks_create = render_lifecycle(eks({"cluster": {"node_setup": {"container_storage": "nvme"}}}))[
        "on_create.sh"
    ]
    assert eks_create.index("steps/install.sh") < eks_create.index("steps/container_storage.sh")
    assert eks_create.index("steps/container_storage.sh") < eks_create.index("steps/logrotate.sh")


def test_node_setup_settings() -> None:
    settings = render_lifecycle(config())["lib/settings.sh"]
    lines = ["HPK_SSH_KEYS=1", "HPK_SSH_HOSTS='ip-* 10.0.*'", "HPK_PAM_SLURM_ADOPT=0",
             "HPK_CONTAINER_STORAGE=none", "HPK_NODE_PACKAGES=''", "HPK_INTERNET=1"]  # fmt: skip
    for line in lines:
        assert f"{line}\n" in settings
    offline = render_lifecycle(
        eks({"network": NO_NAT, "cluster": {"node_setup": {"container_storage": "ebs"}}})
    )["lib/settings.sh"]
    for line in ("HPK_SSH_KEYS=0", "HPK_SSH_HOSTS='ip-* 172.31.*'", "HPK_CONTAINER_STORAGE=ebs",
                 "HPK_INTERNET=0"):  # fmt: skip
        assert f"{line}\n" in offline


@pytest.mark.parametrize(
    ("cidr", "patterns"),
    [("10.0.0.0/16", "ip-* 10.0.*"), ("10.8.0.0/20", "ip-* 10.8.*"),
     ("172.16.0.0/12", "ip-* 172.*"), ("192.168.4.0/24", "ip-* 192.168.4.*"),
     ("10.1.2.16/28", "ip-* 10.1.2.*")],
)  # fmt: skip
def test_ssh_host_patterns_cover_the_vpc(cidr: str, patterns: str) -> None:
    assert ssh_host_patterns(IPv4Network(cidr)) == patterns


def test_node_packages_are_bundled_bytes_for_bytes(tmp_path: Path) -> None:
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs" / "logrotate_3.19.0-1_amd64.deb").write_bytes(b"\x00\x02deb")
    (tmp_path / "debs" / "notes.txt").write_text("not a package")
    cfg = config({"cluster": {"node_setup": {"packages": "debs"}}}, source=tmp_path)
    bundle = build_bundle(cfg)
    assert bundle.files[f"{NODE_PACKAGES_DIR}/logrotate_3.19.0-1_amd64.deb"] == b"\x00\x02deb"
    assert not any(p.endswith("notes.txt") for p in bundle.files)
    assert f"HPK_NODE_PACKAGES={NODE_PACKAGES_DIR}\n" in bundle.text("lib/settings.sh")
    (tmp_path / "debs" / "logrotate_3.19.0-1_amd64.deb").unlink()
    with pytest.raises(LifecycleError, match=r"has no \.deb files"):
        build_bundle(cfg)
