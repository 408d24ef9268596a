"""Node set-up (cluster.node_setup, network.internet): the steps run for real in a sandbox root,
twice, as in test_lifecycle_sandbox.py; then what they write, checked by the real programs where
this machine has them: `logrotate` reads (and rotates with) the installed files, and sshd's PAM
account stack with the rendered pam_slurm_adopt block is run by `pamtester` in a private mount
namespace (nothing of this machine's /etc changes).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config.schema import EnvironmentConfig
from tests.conftest import merge
from tests.integration.test_lifecycle_sandbox import (
    USERS,
    Node,
    config,
    eks_data,
    ok,
    publish_users,
)

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/python3").exists() or shutil.which("bash") is None,
    reason="needs bash and /usr/bin/python3",
)
needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")

KERNEL = "6.8.0-1024-aws"
LUSTRE = ["lustre-client-modules-aws", f"lustre-client-modules-{KERNEL}", "lustre-client-utils"]
# What `scontrol show config` says on a Slurm ready for pam_slurm_adopt (and on one that is not).
SLURM_READY = (
    "ClusterName = cluster\nPrologFlags = Alloc,Contain\nProctrackType = proctrack/cgroup\n"
    "TaskPlugin = task/cgroup,task/affinity\n"
)
SLURM_NOT_READY = "ClusterName = cluster\nPrologFlags = Alloc\nProctrackType = proctrack/cgroup\n"
# The account stack of Ubuntu 22.04's /etc/pam.d/sshd (openssh-server 1:8.9p1).
UBUNTU_SSHD_PAM = """# PAM configuration for the Secure Shell service
@include common-auth
account    required     pam_nologin.so
@include common-account
session [success=ok ignore=ignore module_unknown=ignore default=bad]        pam_selinux.so close
session    required     pam_loginuid.so
session    optional     pam_keyinit.so force revoke
@include common-session
@include common-password
"""
PAM_BLOCK = [
    "# BEGIN hyperpod-kit: pam_slurm_adopt (cluster.node_setup.pam_slurm_adopt)",
    "account sufficient pam_access.so accessfile=/etc/security/hyperpod-kit-access.conf",
    "-account required /lib/security/pam_slurm_adopt.so",
    "# END hyperpod-kit",
]
NO_NAT = {
    "network": {
        "vpc": None,
        "existing_vpc": {
            "vpc_id": "vpc-0123456789abcdef0",
            "private_subnet_id": "subnet-0123456789abcdef0",
            "cidr": "172.31.0.0/16",
            "route_table_ids": ["rtb-0123456789abcdef0"],
        },
        "interface_endpoints": True,
        "internet": False,
    }
}
PAM_ON = {"cluster": {"node_setup": {"pam_slurm_adopt": True}}}


@pytest.fixture
def sandbox() -> Iterator[Any]:
    bases: list[Path] = []

    def make(cfg: EnvironmentConfig, group: str = "controller") -> Node:
        base = Path(tempfile.mkdtemp(prefix="hpk-setup-", dir="/tmp"))
        base.chmod(0o755)
        bases.append(base)
        node = Node(base, cfg, group)
        node.write("/proc/sys/kernel/osrelease", f"{KERNEL}\n")
        return node

    yield make
    for base in bases:
        shutil.rmtree(base, ignore_errors=True)


def twice(node: Node) -> subprocess.CompletedProcess[str]:
    """Run the node's lifecycle twice: the second run leaves the same tree and changes nothing."""
    first = ok(node.run())
    settled = node.snapshot()
    ok(node.run())
    assert node.snapshot() == settled
    assert node.mutations() == [], "the second run changed the machine again"
    return first


def mode(path: Path) -> str:
    return format(stat.S_IMODE(path.lstat().st_mode), "o")


# --- SSH keys ------------------------------------------------------------------------------------


@needs_ssh_keygen
def test_controller_makes_each_users_key_once_and_authorizes_it(sandbox: Any) -> None:
    node = sandbox(config())
    twice(node)
    for user in ("alice", "bob", "carol"):
        ssh = node.path(f"/fsx/{user}/.ssh")
        assert mode(ssh) == "700"
        assert mode(ssh / "id_ed25519") == "600" and mode(ssh / "id_ed25519.pub") == "644"
        public = (ssh / "id_ed25519.pub").read_text()
        assert public.startswith("ssh-ed25519 ")
        assert public.rstrip().endswith(f" hyperpod-kit:hyperpod-dev:{user}")
        assert (ssh / "authorized_keys").read_text() == public  # once, after two runs
        assert mode(ssh / "authorized_keys") == "600"
        assert not list(ssh.glob(".hyperpod-kit-keygen.*"))  # no temporary left behind
    # made as each user (runuser), never by root in the user's home
    assert node.calls("runuser") == []  # the second run: every user is done (state list ssh-keys)
    assert node.path("/var/lib/hyperpod-kit/users/ssh-keys").read_text() == "alice\nbob\ncarol\n"


@needs_ssh_keygen
def test_keys_are_made_as_the_user_and_never_overwritten(sandbox: Any) -> None:
    node = sandbox(config())
    # bob already has a key of his own (another type, and an ed25519 half without its .pub);
    # carol has an ed25519 pair of her own
    bob = node.path("/fsx/bob/.ssh")
    bob.mkdir(parents=True)
    (bob / "id_ed25519").write_text("bob's own private key\n")
    carol = node.path("/fsx/carol/.ssh")
    carol.mkdir(parents=True)
    (carol / "id_ed25519").write_text("carol's private key\n")
    (carol / "id_ed25519.pub").write_text("ssh-ed25519 AAAAcarol carol@laptop\n")
    # the homes are theirs (the fake chown keeps owners in its state)
    node.state.joinpath("owners").write_text(
        f"{node.path('/fsx/bob')} 10002 1001\n{node.path('/fsx/carol')} 10003 20003\n"
    )
    ok(node.run())
    assert [c[:3] for c in node.calls("runuser")] == [
        ["runuser", "-u", "alice"], ["runuser", "-u", "bob"], ["runuser", "-u", "carol"],
    ]  # fmt: skip
    assert (bob / "id_ed25519").read_text() == "bob's own private key\n"
    assert not (bob / "id_ed25519.pub").exists() and not (bob / "authorized_keys").exists()
    assert (carol / "id_ed25519.pub").read_text() == "ssh-ed25519 AAAAcarol carol@laptop\n"
    assert not (carol / "authorized_keys").exists()  # her own key is her business
    assert node.path("/fsx/alice/.ssh/authorized_keys").is_file()


@needs_ssh_keygen
@pytest.mark.parametrize("planted", [".ssh", ".ssh/id_ed25519", ".ssh/authorized_keys"])
def test_a_symbolic_link_in_the_home_is_refused_not_followed(sandbox: Any, planted: str) -> None:
    node = sandbox(config({"users": USERS[:1]}))
    target = node.path("/etc/shadow")
    target.write_text("root:*:19000::::::\n")
    home = node.path("/fsx/alice")
    home.mkdir()
    node.state.joinpath("owners").write_text(f"{home} 10001 1001\n")
    if planted != ".ssh":
        (home / ".ssh").mkdir()
    link = home / planted
    link.symlink_to(target if planted != ".ssh" else node.path("/etc"))
    result = ok(node.run())
    assert f"refused: {link} is a symbolic link" in result.stdout
    assert target.read_text() == "root:*:19000::::::\n"
    assert (
        not node.path("/etc/id_ed25519").exists() and not node.path("/etc/authorized_keys").exists()
    )
    # refused is not done: the next sync looks again
    assert not node.path("/var/lib/hyperpod-kit/users/ssh-keys").exists()


def test_no_key_in_a_home_that_is_not_the_users(sandbox: Any) -> None:
    node = sandbox(config({"users": USERS[:1]}))
    home = node.path("/fsx/alice")
    home.mkdir()
    (home / "work").write_text("someone else's\n")  # not empty: ensure_home leaves it alone
    result = ok(node.run())
    assert "/fsx/alice is not alice's (10001:1001): no key made" in result.stdout
    assert node.calls("runuser") == [] and not (home / ".ssh").exists()


@needs_ssh_keygen
def test_only_the_controller_makes_keys_and_every_node_trusts_the_vpc(sandbox: Any) -> None:
    compute = sandbox(config(), group="compute")
    ok(compute.run())
    assert compute.calls("runuser") == [] and not compute.path("/fsx/alice/.ssh").exists()
    conf = compute.path("/etc/ssh/ssh_config.d/hyperpod-kit.conf").read_text()
    assert "Host ip-* 10.0.*\n" in conf
    assert "    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n" in conf
    other = sandbox(config(NO_NAT), group="login")
    ok(other.run())
    assert (
        "Host ip-* 172.31.*\n" in other.path("/etc/ssh/ssh_config.d/hyperpod-kit.conf").read_text()
    )


def test_ssh_keys_off_makes_no_keys_and_no_client_config(sandbox: Any) -> None:
    node = sandbox(config({"cluster": {"node_setup": {"ssh_keys": False}}}))
    result = ok(node.run())
    assert node.calls("runuser") == []
    assert not node.path("/etc/ssh/ssh_config.d").exists()
    assert "ssh between nodes" not in result.stdout


@needs_ssh_keygen
def test_a_user_added_later_gets_a_key_from_the_timer(sandbox: Any) -> None:
    node = sandbox(config())
    ok(node.run())
    dave = {"name": "dave", "uid": 10004, "gid": 1001, "admin": False}
    publish_users(node, [*USERS, dave])
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    assert [c[2] for c in node.calls("runuser")] == ["dave"]
    assert node.path("/fsx/dave/.ssh/authorized_keys").is_file()


# --- pam_slurm_adopt -----------------------------------------------------------------------------


def pam_node(sandbox: Any, overrides: dict[str, Any] | None = None, *, module: bool = True,
             slurm: str = SLURM_READY) -> Node:  # fmt: skip
    node = sandbox(config(merge(PAM_ON, overrides or {})), group="compute")
    node.write("/etc/pam.d/sshd", UBUNTU_SSHD_PAM)
    if module:
        node.write("/lib/security/pam_slurm_adopt.so", "the AMI's module\n")
    node.knob("scontrol_config", slurm)
    return node


def test_pam_slurm_adopt_on_a_compute_node_twice(sandbox: Any) -> None:
    node = pam_node(sandbox)
    result = twice(node)
    pam = node.path("/etc/pam.d/sshd").read_text()
    assert pam == UBUNTU_SSHD_PAM + "\n".join(PAM_BLOCK) + "\n"  # the AMI's stack, then ours
    assert node.path("/etc/security/hyperpod-kit-access.conf").read_text().splitlines()[2:] == [
        "+:root ubuntu alice:ALL",  # alice is the admin of USERS
        "-:ALL:ALL",
    ]
    assert "without a job: root ubuntu alice" in result.stdout
    assert node.path("/opt/hyperpod-kit/bin/hyperpod-kit-pam-adopt").is_file()


def test_pam_admins_follow_the_users_file(sandbox: Any) -> None:
    node = pam_node(sandbox)
    ok(node.run())
    pam = node.path("/etc/pam.d/sshd").read_text()
    dave = {"name": "dave", "uid": 10004, "gid": 1001, "admin": True}
    publish_users(node, [{**USERS[0], "admin": False}, *USERS[1:], dave])
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    access = node.path("/etc/security/hyperpod-kit-access.conf").read_text()
    assert "+:root ubuntu dave:ALL\n" in access
    assert node.path("/etc/pam.d/sshd").read_text() == pam  # the block is unchanged
    assert node.calls("scontrol") == []  # configured: Slurm is not asked again


def test_pam_waits_for_a_slurm_that_contains_jobs(sandbox: Any) -> None:
    node = pam_node(sandbox, slurm=SLURM_NOT_READY)
    result = ok(node.run())
    assert (
        "Slurm runs without PrologFlags=Contain TaskPlugin=task/cgroup (HyperPod's slurm.conf, "
        "which hyperpod-kit does not edit)" in result.stdout
    )
    assert node.path("/etc/pam.d/sshd").read_text() == UBUNTU_SSHD_PAM
    node.knob("scontrol_config", SLURM_READY)  # someone changed HyperPod's Slurm configuration
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-user-sync"))))
    assert node.path("/etc/pam.d/sshd").read_text().endswith("\n".join(PAM_BLOCK) + "\n")


def test_pam_without_the_module_changes_nothing(sandbox: Any) -> None:
    node = pam_node(sandbox, module=False)
    result = ok(node.run())
    assert "pam_slurm_adopt.so is not on this node" in result.stdout
    assert node.path("/etc/pam.d/sshd").read_text() == UBUNTU_SSHD_PAM
    assert node.calls("apt-get") == []  # never from the distribution's archive


def test_pam_module_from_the_packages_without_internet(sandbox: Any, tmp_path: Path) -> None:
    (tmp_path / "debs").mkdir()
    deb = "slurm-smd-libpam-slurm-adopt_24.11.5-1_amd64.deb"
    (tmp_path / "debs" / deb).write_bytes(b"!<arch>\n")
    cfg = config(merge(merge(PAM_ON, NO_NAT), {"cluster": {"node_setup": {"packages": "debs"}}}),
                 source=tmp_path)  # fmt: skip
    node = sandbox(cfg, group="compute")
    node.write("/etc/pam.d/sshd", UBUNTU_SSHD_PAM)
    node.knob("scontrol_config", SLURM_READY)
    ok(node.run())
    apt = node.calls("apt-get")
    assert not [c for c in apt if "update" in c]  # network.internet: false
    (install,) = apt
    assert "--no-download" in install and install[-1].endswith(f"packages/node-setup/{deb}")
    assert node.path("/etc/pam.d/sshd").read_text().endswith("\n".join(PAM_BLOCK) + "\n")


@pytest.mark.parametrize("group", ["controller", "login"])
def test_pam_only_on_compute_nodes(sandbox: Any, group: str) -> None:
    node = sandbox(config(PAM_ON), group=group)
    node.write("/etc/pam.d/sshd", UBUNTU_SSHD_PAM)
    node.write("/lib/security/pam_slurm_adopt.so", "module\n")
    result = ok(node.run())
    assert f"compute nodes only; nothing to do on this {group} node" in result.stdout
    assert node.path("/etc/pam.d/sshd").read_text() == UBUNTU_SSHD_PAM
    assert not node.path("/etc/security/hyperpod-kit-access.conf").exists()


def test_pam_leaves_a_damaged_block_alone(sandbox: Any) -> None:
    node = pam_node(sandbox)
    damaged = UBUNTU_SSHD_PAM + PAM_BLOCK[0] + "\naccount required pam_permit.so\n"
    node.write("/etc/pam.d/sshd", damaged)
    result = ok(node.run())
    assert "has a damaged hyperpod-kit block (1 BEGIN, 0 END lines): left as it is" in result.stdout
    assert node.path("/etc/pam.d/sshd").read_text() == damaged


# --- log rotation --------------------------------------------------------------------------------


def test_logrotate_files_and_the_amis_own_slurm_rotation(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    twice(node)
    ours = node.path("/etc/logrotate.d/hyperpod-kit")
    assert "/var/log/hyperpod-kit/*.log {" in ours.read_text() and mode(ours) == "644"
    assert "/var/log/slurm/*.log {" in node.path("/etc/logrotate.d/hyperpod-kit-slurm").read_text()
    assert [c[:2] for c in node.calls("logrotate")] == [["logrotate", "-d"]] * 2

    ami = sandbox(config(), group="compute")
    ami.write("/etc/logrotate.d/sagemaker-hyperpod-slurm", '"/var/log/slurm/*.log" {\n}\n')
    result = ok(ami.run())
    assert "/etc/logrotate.d/sagemaker-hyperpod-slurm rotates Slurm's logs already" in result.stdout
    assert not ami.path("/etc/logrotate.d/hyperpod-kit-slurm").exists()


def test_eks_rotates_only_its_own_logs(sandbox: Any) -> None:
    node = sandbox(EnvironmentConfig.model_validate(eks_data()), group="workers")
    ok(node.run())
    assert sorted(p.name for p in node.path("/etc/logrotate.d").iterdir()) == ["hyperpod-kit"]


def test_logrotate_missing_installed_from_the_packages_else_a_warning(
    sandbox: Any, tmp_path: Path
) -> None:
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs" / "logrotate_3.19.0-1ubuntu1_amd64.deb").write_bytes(b"!<arch>\n")
    cfg = config(merge(NO_NAT, {"cluster": {"node_setup": {"packages": "debs"}}}), source=tmp_path)
    node = sandbox(cfg, group="compute")
    node.knob("packages", "")  # this AMI has no logrotate
    ok(node.run())
    (install,) = [c for c in node.calls("apt-get") if "install" in c]
    assert install[-1].endswith("logrotate_3.19.0-1ubuntu1_amd64.deb")
    assert [c[:2] for c in node.calls("logrotate")] == [["logrotate", "-d"]] * 2

    bare = sandbox(config(NO_NAT), group="compute")
    bare.knob("packages", "")
    result = ok(bare.run())
    assert "logrotate is not on this node (nor in cluster.node_setup.packages)" in result.stdout
    assert bare.calls("apt-get") == []  # no internet: nothing from the archive


def test_logrotate_missing_with_internet_comes_from_the_archive(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    node.knob("packages", "")
    ok(node.run())
    assert [c[-2:] for c in node.calls("apt-get")] == [
        ["-q", "update"], ["--no-install-recommends", "logrotate"],
    ]  # fmt: skip
    ok(node.run())
    assert node.calls("apt-get") == []  # installed now


def test_logrotate_that_cannot_be_installed_does_not_fail_the_node(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    node.knob("packages", "")
    node.knob("apt_fail", "100")  # the dpkg lock stays busy
    result = ok(node.run())
    assert "logrotate could not be installed: logs are not rotated" in result.stdout


# --- the Lustre client hold ----------------------------------------------------------------------


def test_lustre_client_held_once(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    node.knob("packages", "\n".join(["logrotate", *LUSTRE]))
    node.knob("apt_fail", "1")  # the dpkg lock is busy once
    first = twice(node)
    assert (node.state / "holds").read_text().split() == sorted(LUSTRE)
    assert f"lustre hold: held {' '.join(LUSTRE)} (kernel {KERNEL})" in first.stdout


def test_lustre_hold_reports_a_kernel_without_its_module(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    node.knob(
        "packages", "logrotate\nlustre-client-modules-aws\nlustre-client-modules-6.8.0-1021-aws\n"
    )
    result = ok(node.run())
    assert f"lustre-client-modules-{KERNEL} is not installed" in result.stdout
    assert (node.state / "holds").read_text() == "lustre-client-modules-aws\n"


def test_a_hold_that_fails_is_a_warning_not_a_failed_node(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    node.knob("packages", "\n".join(["logrotate", *LUSTRE]))
    node.knob("apt_fail", "100")
    result = ok(node.run())
    assert f"lustre hold: could not hold {' '.join(LUSTRE)}" in result.stdout
    holds = node.calls("apt-mark")
    assert len([c for c in holds if "hold" in c]) == 5  # with retries
    assert all(c[1:3] == ["-o", "DPkg::Lock::Timeout=300"] for c in holds if "hold" in c)


def test_lustre_hold_without_the_client_holds_nothing(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    result = ok(node.run())
    assert "no Lustre client package is installed (dpkg): nothing to hold" in result.stdout
    assert not (node.state / "holds").exists()


@pytest.mark.skipif(shutil.which("apt-mark") is not None, reason="this machine has apt-mark")
def test_lustre_hold_without_apt_leaves_the_node_alone(sandbox: Any) -> None:
    node = sandbox(EnvironmentConfig.model_validate(eks_data()), group="workers")
    for fake in ("apt-mark", "dpkg-query"):
        (node.bin / fake).unlink()  # Amazon Linux: no apt
    assert "no apt on this node" in ok(node.run()).stdout


# --- container storage (EKS) ---------------------------------------------------------------------


def eks_node(sandbox: Any, storage: str) -> Node:
    data = eks_data({"cluster": {"node_setup": {"container_storage": storage}}})
    node = sandbox(EnvironmentConfig.model_validate(data), group="workers")
    node.write("/var/lib/containerd/io.containerd.content.v1.content/blobs/pause", "pause image\n")
    node.write("/var/lib/kubelet/kubeconfig", "kubelet's kubeconfig\n")
    return node


def test_containerd_and_kubelet_on_the_nvme_twice(sandbox: Any) -> None:
    node = eks_node(sandbox, "nvme")
    twice(node)
    store = node.path("/opt/dlami/nvme/hyperpod-kit")
    assert (store / "containerd/io.containerd.content.v1.content/blobs/pause").read_text() == (
        "pause image\n"
    )
    assert (store / "kubelet/kubeconfig").read_text() == "kubelet's kubeconfig\n"
    mounts = (node.state / "mounts").read_text().split()
    assert {"/var/lib/containerd", "/var/lib/kubelet"} <= set(mounts)
    units = node.path("/etc/systemd/system")
    assert (
        "Before=containerd.service kubelet.service"
        in (units / "hyperpod-kit-container-storage.service").read_text()
    )
    for daemon in ("containerd", "kubelet"):
        dropin = (units / f"{daemon}.service.d/50-hyperpod-kit-storage.conf").read_text()
        assert "Wants=hyperpod-kit-container-storage.service\n" in dropin
        assert "After=hyperpod-kit-container-storage.service\n" in dropin
    assert node.path("/etc/hyperpod-kit/container-storage.env").read_text() == (
        "HPK_CONTAINER_VOLUME=/opt/dlami/nvme\n"
    )
    assert ["systemctl", "enable", "hyperpod-kit-container-storage.service"] in node.calls(
        "systemctl"
    )


def test_nvme_missing_falls_back_to_the_ebs_volume_and_stays_there(sandbox: Any) -> None:
    node = eks_node(sandbox, "nvme")
    node.knob("mounts", "/opt/sagemaker")  # a type without instance storage
    result = ok(node.run())
    assert "/opt/dlami/nvme is not mounted" in result.stdout
    assert node.path("/opt/sagemaker/hyperpod-kit/kubelet/kubeconfig").is_file()
    # a later boot (the unit's program): the same volume, the folders bound again, no new copy
    node.knob("mounts", "/opt/sagemaker /opt/dlami/nvme")
    ok(node.run(str(node.path("/opt/hyperpod-kit/bin/hyperpod-kit-container-storage"))))
    assert [c[-1] for c in node.calls("mount")] == [
        str(node.path("/var/lib/containerd")), str(node.path("/var/lib/kubelet")),
    ]  # fmt: skip
    assert not node.path("/opt/dlami/nvme/hyperpod-kit").exists()


def test_running_containerd_moves_at_the_next_boot_not_now(sandbox: Any) -> None:
    node = eks_node(sandbox, "ebs")
    node.knob("active", "containerd kubelet")
    result = ok(node.run())
    assert "containerd kubelet already running: their data moves at the next boot" in result.stdout
    assert node.calls("mount") == [] and not node.path("/opt/sagemaker/hyperpod-kit").exists()
    assert node.path("/etc/systemd/system/hyperpod-kit-container-storage.service").is_file()


def test_container_storage_none_installs_nothing(sandbox: Any) -> None:
    node = sandbox(EnvironmentConfig.model_validate(eks_data()), group="workers")
    result = ok(node.run())
    assert "container storage" not in result.stdout
    assert not node.path("/etc/systemd/system/hyperpod-kit-container-storage.service").exists()


# --- without internet ----------------------------------------------------------------------------


def test_without_internet_enroot_installs_from_the_upload_only(
    sandbox: Any, tmp_path: Path
) -> None:
    (tmp_path / "debs").mkdir()
    for name in ("enroot_3.5.0-1_amd64.deb", "nvslurm-plugin-pyxis_0.20.0-1_amd64.deb"):
        (tmp_path / "debs" / name).write_bytes(b"!<arch>\n")
    cfg = config(merge(NO_NAT, {"cluster": {"slurm": {"enroot_pyxis_packages": "debs"}}}),
                 source=tmp_path)  # fmt: skip
    node = sandbox(cfg, group="compute")
    ok(node.run())
    apt = node.calls("apt-get")
    assert len(apt) == 2 and not [c for c in apt if "update" in c]
    assert all("--no-download" in c for c in apt)


def test_bundled_packages_that_do_not_install_fail_the_node(sandbox: Any, tmp_path: Path) -> None:
    (tmp_path / "debs").mkdir()
    (tmp_path / "debs" / "enroot_3.5.0-1_amd64.deb").write_bytes(b"!<arch>\n")
    cfg = config({"cluster": {"slurm": {"enroot_pyxis_packages": "debs"}}}, source=tmp_path)
    node = sandbox(cfg, group="compute")
    node.knob("apt_fail", "100")
    result = node.run(env={"HYPERPOD_KIT_FAIL_GRACE_SECONDS": "0"})
    assert result.returncode == 1
    assert "installing enroot_3.5.0-1_amd64.deb failed" in result.stdout
    assert "FAILED in setting up enroot and pyxis" in result.stdout


# --- the real programs ---------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"


@pytest.mark.skipif(
    not Path(LOGROTATE).exists(), reason="logrotate not installed (apt-get install logrotate)"
)
def test_logrotate_reads_the_installed_files(sandbox: Any) -> None:
    node = sandbox(config(), group="compute")
    ok(node.run())
    for name in ("hyperpod-kit", "hyperpod-kit-slurm"):
        conf = node.base / name  # a copy of this test's own (the sandbox's files are nobody's)
        shutil.copyfile(node.path(f"/etc/logrotate.d/{name}"), conf)
        result = subprocess.run(
            [LOGROTATE, "-d", "-s", str(node.base / "state"), str(conf)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "error" not in (result.stdout + result.stderr).lower(), result.stderr


@needs_root
@pytest.mark.skipif(
    not Path(LOGROTATE).exists(), reason="logrotate not installed (apt-get install logrotate)"
)
def test_logrotate_rotates_our_logs_the_way_the_shipper_reads_them(tmp_path: Path) -> None:
    """Our file, with its log folder moved under tmp_path, rotated for real three times: .1 stays
    plain text (the log shipper reads lifecycle.log.1 to its end), .2 on are compressed, a new
    file takes the name, and health.jsonl (the runner's own rotation) is never touched."""
    source = Path(__file__).resolve().parents[2] / "lifecycle/logrotate/hyperpod-kit"
    logs = tmp_path / "log"
    logs.mkdir()
    conf = tmp_path / "hyperpod-kit"
    conf.write_text(source.read_text().replace("/var/log/hyperpod-kit/", f"{logs}/"))
    conf.chmod(0o644)
    (logs / "health.jsonl").write_text('{"event": "verdict"}\n')
    for run in range(3):
        (logs / "lifecycle.log").write_text(f"run {run}\n")
        subprocess.run([LOGROTATE, "-f", "-s", str(tmp_path / "state"), str(conf)], check=True)
    assert (logs / "lifecycle.log").read_text() == ""  # made again, empty
    assert mode(logs / "lifecycle.log") == "644"
    assert (logs / "lifecycle.log.1").read_text() == "run 2\n"
    assert (logs / "lifecycle.log.2.gz").is_file() and (logs / "lifecycle.log.3.gz").is_file()
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("health")) == ["health.jsonl"]


PAM_MODULE = Path("/lib/security/pam_slurm_adopt.so")  # Debian's libpam-slurm-adopt


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(
    shutil.which("pamtester") is None or not PAM_MODULE.exists() or not _unshare_works(),
    reason="needs root, unshare, pamtester and Debian's libpam-slurm-adopt "
    "(apt-get install pamtester libpam-slurm-adopt)",
)
def test_the_rendered_pam_stack_lets_admins_in_and_keeps_others_out(
    sandbox: Any, tmp_path: Path
) -> None:
    """sshd's account stack as the compute node's step leaves it, run by PAM itself: the
    Ubuntu stack, then our block with the real pam_access and pam_slurm_adopt (Debian's build of
    Slurm 22.05, reading a slurm.conf whose spool holds no job). In a private mount namespace
    /etc/pam.d, /etc/security, /etc/passwd and /etc/shadow are the test's copies."""
    node = pam_node(sandbox)
    ok(node.run())
    etc = tmp_path / "etc"
    shutil.copytree("/etc/pam.d", etc / "pam.d")
    shutil.copytree("/etc/security", etc / "security")
    shutil.copy(node.path("/etc/pam.d/sshd"), etc / "pam.d/sshd")
    shutil.copy(node.path("/etc/security/hyperpod-kit-access.conf"), etc / "security")
    people = {"alice": 10001, "bob": 10002, "ubuntu": 1000}
    passwd = Path("/etc/passwd").read_text() + "".join(
        f"{name}:x:{uid}:1001::/nonexistent:/bin/bash\n" for name, uid in people.items()
    )
    shadow = Path("/etc/shadow").read_text() + "".join(
        f"{name}:*:19000:0:99999:7:::\n" for name in people
    )
    (etc / "passwd").write_text(passwd)
    (etc / "shadow").write_text(shadow)
    (tmp_path / "spool").mkdir()
    slurm_conf = tmp_path / "slurm.conf"
    slurm_conf.write_text(
        f"ClusterName=test\nSlurmctldHost=localhost\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
        f"NodeName={os.uname().nodename} CPUs=1\nPartitionName=p Nodes=ALL\n"
    )
    binds = " && ".join(
        f"mount --bind {etc / name} /etc/{name}"
        for name in ("pam.d", "security", "passwd", "shadow")
    )
    script = (
        f"{binds} && for u in root ubuntu alice bob; do "
        'pamtester sshd "$u" acct_mgmt >/dev/null 2>"$T/$u.err"; echo "$u $?"; done'
    )
    result = subprocess.run(
        ["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, check=False,
        env={"PATH": os.environ["PATH"], "SLURM_CONF": str(slurm_conf), "T": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    outcome = {user: rc for user, rc in (line.split() for line in result.stdout.splitlines())}
    assert outcome == {"root": "0", "ubuntu": "0", "alice": "0", "bob": "1"}, result.stdout
    assert "Access denied by pam_slurm_adopt: you have no active jobs on this node" in (
        (tmp_path / "bob.err").read_text()
    )
