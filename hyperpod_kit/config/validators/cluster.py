"""Cluster rules: instance groups against HyperPod's instance-type table, Slurm's node types and
partitions, EKS versions and add-ons, the people created on the nodes."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from hyperpod_kit.config.derived import device_plugins
from hyperpod_kit.config.facts import (
    helm_chart_pins,
    helm_charts_checked,
    instance_type,
    instance_types,
    instance_types_checked,
)
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig
from hyperpod_kit.config.validators import validator

GROUPS = "cluster.instance_groups"

# Kubernetes versions HyperPod on EKS supports. The public documentation disagrees between
# snapshots (1.28-1.32 on docs.aws.amazon.com, 1.28-1.34 in the newest snapshot found, the Chinese
# edition of the EKS prerequisites page); the newest list is used. Checked 2026-11-23.
SUPPORTED_KUBERNETES = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
KUBERNETES_CHECKED = "2026-11-23"
MIN_VPC_CNI = (1, 18, 3)  # HyperPod's EKS prerequisites
RESERVED_USERS = frozenset(
    {"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
     "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "ubuntu", "slurm", "munge",
     "sshd", "syslog", "messagebus", "systemd-network", "systemd-resolve", "ssm-user", "admin"}
)  # fmt: skip


def _group(i: int, key: str | None = None) -> str:
    return f"{GROUPS}[{i}]" + (f".{key}" if key else "")


@validator("instance-group-names", area="cluster")
def check_group_names(config: EnvironmentConfig) -> Iterator[Finding]:
    """Instance group names are unique."""
    first: dict[str, int] = {}
    for i, g in enumerate(config.cluster.instance_groups):
        if first.setdefault(g.name, i) != i:
            yield Finding(
                Level.ERROR,
                _group(i, "name"),
                f"{g.name!r} is used by another group",
                "give each instance group its own name",
            )


@validator("instance-group-roles", area="cluster")
def check_group_roles(config: EnvironmentConfig) -> Iterator[Finding]:
    """Slurm: exactly one controller group of one instance, at most one login group, at least
    one compute group. EKS: worker groups only, at least one."""
    groups = config.cluster.instance_groups
    roles = Counter(g.role for g in groups)
    if config.orchestrator == "slurm":
        if roles["controller"] != 1:
            yield Finding(
                Level.ERROR,
                GROUPS,
                f"a Slurm cluster has exactly one controller group, not {roles['controller']}",
                "add one group with role: controller and instance_count: 1",
            )
        if roles["login"] > 1:
            yield Finding(
                Level.ERROR,
                GROUPS,
                f"a Slurm cluster has at most one login group, not {roles['login']}",
                "merge the login groups into one (raise its instance_count)",
            )
        if roles["compute"] == 0:
            yield Finding(
                Level.ERROR,
                GROUPS,
                "a Slurm cluster needs at least one compute group",
                "add a group with role: compute, e.g. ml.p5.48xlarge",
            )
        for i, g in enumerate(groups):
            if g.role == "worker":
                yield Finding(
                    Level.ERROR, _group(i, "role"), "role worker is for EKS clusters", "use compute"
                )
            if g.role == "controller" and g.instance_count != 1:
                yield Finding(
                    Level.ERROR,
                    _group(i, "instance_count"),
                    f"the controller group has {g.instance_count} instances; HyperPod's "
                    "API-driven Slurm has one controller",
                    "use 1",
                )
    else:
        if roles["worker"] == 0:
            yield Finding(
                Level.ERROR,
                GROUPS,
                "an EKS cluster needs at least one worker group",
                "add a group with role: worker",
            )
        for i, g in enumerate(groups):
            if g.role != "worker":
                yield Finding(
                    Level.ERROR,
                    _group(i, "role"),
                    f"role {g.role} is for Slurm clusters",
                    "use worker on EKS",
                )


@validator("instance-type", area="cluster")
def check_instance_types(config: EnvironmentConfig) -> Iterator[Finding]:
    """Every group's instance type is one HyperPod accepts (botocore's ClusterInstanceType, in
    the dated table) or is listed in `validation.allow_instance_types`."""
    allowed = set(config.validation.allow_instance_types)
    names = sorted(instance_types())
    for i, g in enumerate(config.cluster.instance_groups):
        if instance_type(g.instance_type) is not None or g.instance_type in allowed:
            continue
        close = difflib.get_close_matches(g.instance_type, names, n=1, cutoff=0.9)
        yield Finding(
            Level.ERROR,
            _group(i, "instance_type"),
            f"{g.instance_type} is not a HyperPod instance type (table of "
            f"{len(names)} types, checked {instance_types_checked()})",
            (f"did you mean {close[0]}? " if close else "")
            + "a type newer than the table goes in validation.allow_instance_types",
        )


@validator("deep-health-checks", area="cluster")
def check_deep_health_checks(config: EnvironmentConfig) -> Iterator[Finding]:
    """Deep health checks run only on accelerated types; turning them off on one is a warning."""
    for i, g in enumerate(config.cluster.instance_groups):
        facts = instance_type(g.instance_type)
        if g.deep_health_checks is None or facts is None:
            continue
        at = _group(i, "deep_health_checks")
        if len(set(g.deep_health_checks)) != len(g.deep_health_checks):
            yield Finding(Level.ERROR, at, "a check is listed twice", "list each check once")
        if g.deep_health_checks and not facts.accelerated:
            yield Finding(
                Level.ERROR,
                at,
                f"{g.instance_type} has no GPU or Trainium chip; HyperPod runs deep health "
                "checks on accelerated instances only",
                "remove deep_health_checks from this group",
            )
        elif not g.deep_health_checks and facts.accelerated:
            yield Finding(
                Level.WARNING,
                at,
                f"deep health checks are off on {g.instance_type}: a node with a bad GPU or "
                "EFA link can join the cluster and fail jobs",
                "leave deep_health_checks out (both checks run by default)",
            )


@validator("slurm-partitions", area="cluster")
def check_partitions(config: EnvironmentConfig) -> Iterator[Finding]:
    """A partition is set on Slurm compute groups only (HyperPod's SlurmConfig.PartitionNames)."""
    for i, g in enumerate(config.cluster.instance_groups):
        if g.partition is None:
            continue
        at = _group(i, "partition")
        if config.orchestrator == "eks":
            yield Finding(
                Level.ERROR, at, "partitions are for Slurm clusters", "remove partition on EKS"
            )
        elif g.role != "compute":
            yield Finding(
                Level.ERROR,
                at,
                f"a {g.role} group takes no partition (HyperPod sets partitions on compute "
                "groups only)",
                "remove partition here",
            )
        elif g.partition == "dev":
            yield Finding(
                Level.WARNING,
                at,
                "every node is already in the dev partition",
                "give the group its own partition name, e.g. " + repr(g.name),
            )


@validator("training-plan", area="cluster")
def check_training_plan(config: EnvironmentConfig) -> Iterator[Finding]:
    """A training plan belongs to the environment's region (and account, when it is given)."""
    arn = config.cluster.training_plan_arn
    if arn is None:
        return
    _, _, _, region, account, _ = arn.split(":", 5)
    at = "cluster.training_plan_arn"
    if region != config.region:
        yield Finding(
            Level.ERROR,
            at,
            f"the training plan is in {region}, the environment in {config.region}",
            "use a training plan of the environment's region",
        )
    if config.account is not None and account != config.account:
        yield Finding(
            Level.ERROR,
            at,
            f"the training plan belongs to account {account}, the environment to {config.account}",
            "use a training plan of the environment's account",
        )


@validator("users", area="cluster")
def check_users(config: EnvironmentConfig) -> Iterator[Finding]:
    """User names and uids are unique and no name is a system account; gids may be shared."""
    names: dict[str, int] = {}
    uids: dict[int, int] = {}
    for i, user in enumerate(config.users):
        if user.name in RESERVED_USERS:
            yield Finding(
                Level.ERROR,
                f"users[{i}].name",
                f"{user.name!r} is a system account on the nodes",
                "choose another name",
            )
        if (first := names.setdefault(user.name, i)) != i:
            yield Finding(
                Level.ERROR,
                f"users[{i}].name",
                f"{user.name!r} is also users[{first}]",
                "list each person once",
            )
        if (first := uids.setdefault(user.uid, i)) != i:
            yield Finding(
                Level.ERROR,
                f"users[{i}].uid",
                f"uid {user.uid} is also {config.users[first].name}'s",
                f"give each user their own uid, e.g. {max(u.uid for u in config.users) + 1}",
            )


def _files(config: EnvironmentConfig) -> Iterator[tuple[str, str, bool]]:
    """(path in the file, value, is a folder) of every file the environment file names."""
    for i, g in enumerate(config.cluster.instance_groups):
        for j, script in enumerate(g.lifecycle.scripts):
            yield _group(i, f"lifecycle.scripts[{j}]"), script, False
    slurm, eks = config.cluster.slurm, config.cluster.eks
    if slurm.enroot_pyxis_packages is not None and config.orchestrator == "slurm":
        yield "cluster.slurm.enroot_pyxis_packages", slurm.enroot_pyxis_packages, True
    if eks.helm_chart is not None and config.orchestrator == "eks":
        yield "cluster.eks.helm_chart", eks.helm_chart, True
    if config.orchestrator == "eks":
        for key, value in _plugin_folders(config).items():
            yield f"cluster.eks.device_plugins.{key}", value, True
    if config.trainer.job.template is not None:
        yield "trainer.job.template", config.trainer.job.template, False


@validator("files", area="cluster")
def check_files(config: EnvironmentConfig) -> Iterator[Finding]:
    """Scripts, templates, chart and package folders the file names exist (relative paths start
    at the environment file's folder)."""
    for at, value, folder in _files(config):
        path = config.resolve_path(value)
        kind = "folder" if folder else "file"
        if not (path.is_dir() if folder else path.is_file()):
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} is not a {kind} ({path})",
                f"give the {kind}'s path, relative to the environment file",
            )
        elif at == "cluster.eks.helm_chart" and not (path / "Chart.yaml").is_file():
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} has no Chart.yaml",
                "give the HyperPodHelmChart folder of sagemaker-hyperpod-cli",
            )
        elif at.startswith("cluster.eks.device_plugins."):
            yield from _check_plugin_folder(at, value, path)
        elif at == "cluster.slurm.enroot_pyxis_packages" and not any(path.glob("*.deb")):
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} holds no .deb packages",
                "put the enroot, enroot+caps and pyxis .deb files built for the cluster's "
                "Slurm here",
            )


@validator("enroot-pyxis-source", area="cluster")
def check_enroot_pyxis(config: EnvironmentConfig) -> Iterator[Finding]:
    """Containers in Slurm jobs need enroot and pyxis: from the AMI, or from a folder of packages
    (neither is in Debian or PyPI, and pyxis is built against the cluster's Slurm)."""
    slurm = config.cluster.slurm
    if config.orchestrator != "slurm" or not slurm.enroot_pyxis:
        return
    if slurm.enroot_pyxis_packages is None:
        yield Finding(
            Level.WARNING,
            "cluster.slurm.enroot_pyxis",
            "enroot and pyxis come from the AMI only; where it has none, jobs with "
            "--container-image fail",
            "name a folder of packages in cluster.slurm.enroot_pyxis_packages, or suppress "
            "enroot-pyxis-source if your AMI has them",
        )


# cluster.eks.device_plugins.<key> -> the chart it must hold
PLUGIN_FOLDERS = {"nvidia_chart": "nvidia-device-plugin", "efa_chart": "aws-efa-k8s-device-plugin"}


def _plugin_folders(config: EnvironmentConfig) -> dict[str, str]:
    folders = config.cluster.eks.device_plugins
    named = {"nvidia_chart": folders.nvidia_chart, "efa_chart": folders.efa_chart}
    return {key: value for key, value in named.items() if value is not None}


def _check_plugin_folder(at: str, value: str, path: Path) -> Iterator[Finding]:
    """A local copy of a device plugin's chart is that chart, at the version HyperPod pins."""
    from hyperpod_kit.constructs.eks_chart_folder import chart_identity

    pin = helm_chart_pins()[PLUGIN_FOLDERS[at.rsplit(".", 1)[1]]]
    fetch = f"helm pull {pin.name} --repo {pin.repository} --version {pin.version} --untar"
    if not (path / "Chart.yaml").is_file():
        yield Finding(Level.ERROR, at, f"{value!r} has no Chart.yaml", f"fetch it once: {fetch}")
        return
    name, version = chart_identity(path)
    if (name, version) != (pin.name, pin.version):
        yield Finding(
            Level.ERROR,
            at,
            f"{value!r} holds the chart {name} {version}, not {pin.name} {pin.version} (the "
            f"version HyperPod's own chart pins; table checked {helm_charts_checked()})",
            f"fetch it once: {fetch}",
        )


@validator("eks-device-plugins", area="cluster")
def check_device_plugins(config: EnvironmentConfig) -> Iterator[Finding]:
    """The NVIDIA and EFA device plugins: never beside HyperPod's chart (it ships both), each
    with instance types to run on, and fetchable at deploy (a local chart folder otherwise)."""
    if config.orchestrator != "eks":
        return
    eks = config.cluster.eks
    at = "cluster.eks.device_plugins"
    if eks.device_plugins.enabled and eks.helm_chart is not None:
        yield Finding(
            Level.ERROR,
            f"{at}.enabled",
            "HyperPod's Helm chart (cluster.eks.helm_chart) already ships the NVIDIA and EFA "
            "device plugins; a second copy conflicts",
            "leave cluster.eks.device_plugins.enabled out",
        )
        return
    plugins = device_plugins(config)
    if plugins is None:
        if eks.device_plugins.enabled:
            yield Finding(
                Level.INFO,
                f"{at}.enabled",
                "no instance group has a type with NVIDIA GPUs or EFA (instance table checked "
                f"{instance_types_checked()}): no device plugin is deployed",
            )
        for key in _plugin_folders(config):
            yield Finding(
                Level.WARNING,
                f"{at}.{key}",
                "not used: hyperpod-kit deploys no device plugin in this environment",
                "remove it, or set cluster.eks.device_plugins.enabled",
            )
        return
    deployed = {"nvidia_chart": plugins.nvidia_types, "efa_chart": plugins.efa_types}
    for key in _plugin_folders(config):
        if not deployed[key]:
            yield Finding(
                Level.WARNING,
                f"{at}.{key}",
                f"not used: no instance group has a type for {PLUGIN_FOLDERS[key]}",
                "remove it",
            )
    if plugins.unknown_types:
        yield Finding(
            Level.INFO,
            at,
            f"{', '.join(plugins.unknown_types)}: not in the instance table, so neither device "
            "plugin runs there",
            "install the plugins for those types yourself, or use cluster.eks.helm_chart",
        )
    network = config.network
    if network.existing_vpc is not None and network.interface_endpoints:
        pins = helm_chart_pins()
        for key, types in deployed.items():
            name = PLUGIN_FOLDERS[key]
            if types and key not in _plugin_folders(config):
                yield Finding(
                    Level.WARNING,
                    f"{at}.{key}",
                    f"the kubectl handler fetches {name} from {pins[name].repository} at "
                    "deploy; a VPC with interface endpoints instead of NAT has no route there",
                    f"give a local copy of the chart in {at}.{key} (and mirror its image)",
                )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("-", 1)[0]))


@validator("eks", area="cluster")
def check_eks(config: EnvironmentConfig) -> Iterator[Finding]:
    """EKS: a Kubernetes version HyperPod supports, VPC CNI 1.18.3 or newer, the HyperPod Helm
    chart for the resilience pieces."""
    if config.orchestrator != "eks":
        return
    eks = config.cluster.eks
    version = eks.kubernetes_version
    if (
        eks.existing_cluster_name is None
        and version not in SUPPORTED_KUBERNETES
        and version not in config.validation.allow_kubernetes_versions
    ):
        yield Finding(
            Level.ERROR,
            "cluster.eks.kubernetes_version",
            f"HyperPod supports Kubernetes {SUPPORTED_KUBERNETES[0]} to "
            f"{SUPPORTED_KUBERNETES[-1]} (list checked {KUBERNETES_CHECKED}), not {version}",
            f'use "{SUPPORTED_KUBERNETES[-2]}"; a newer supported version goes in '
            "validation.allow_kubernetes_versions",
        )
    if _version(eks.addons.vpc_cni) < MIN_VPC_CNI:
        yield Finding(
            Level.ERROR,
            "cluster.eks.addons.vpc_cni",
            f"HyperPod needs the VPC CNI 1.18.3 or newer, not {eks.addons.vpc_cni}",
            "use v1.20.1-eksbuild.3",
        )
    if eks.helm_chart is None:
        yield Finding(
            Level.WARNING if eks.existing_cluster_name is None else Level.INFO,
            "cluster.eks.helm_chart",
            "without the HyperPod Helm chart the cluster has no health-monitoring agent, deep "
            "health checks or job auto-restart"
            + (
                " (unless it is already installed on the existing cluster)"
                if eks.existing_cluster_name
                else ""
            )
            + "; "
            + _device_plugins_said(config),
            "give a pinned copy of sagemaker-hyperpod-cli's helm_chart/HyperPodHelmChart in "
            "cluster.eks.helm_chart",
        )


def _device_plugins_said(config: EnvironmentConfig) -> str:
    """What the missing-chart warning says about the device plugins the chart would bring."""
    plugins = device_plugins(config)
    if plugins is not None:
        which = [
            f"{name} ({', '.join(types)})"
            for name, types in (("NVIDIA", plugins.nvidia_types), ("EFA", plugins.efa_types))
            if types
        ]
        return (
            f"hyperpod-kit deploys the {' and '.join(which)} device plugin"
            f"{'s' if len(which) > 1 else ''} itself (cluster.eks.device_plugins)"
        )
    if config.cluster.eks.existing_cluster_name is not None:
        return (
            "no NVIDIA or EFA device plugin is deployed on an existing cluster unless "
            "cluster.eks.device_plugins.enabled is true: without one, GPU jobs stay Pending"
        )
    return (
        "with cluster.eks.device_plugins.enabled false no NVIDIA or EFA device plugin is "
        "deployed: nothing advertises nvidia.com/gpu or vpc.amazonaws.com/efa, and GPU jobs "
        "stay Pending"
    )


def group_of(config: EnvironmentConfig, name: str) -> tuple[int, InstanceGroupConfig] | None:
    """The index and group with this name."""
    for i, g in enumerate(config.cluster.instance_groups):
        if g.name == name:
            return i, g
    return None
