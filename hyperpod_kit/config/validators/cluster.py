"""Cluster rules: instance groups against HyperPod's instance-type table, Slurm's node types and
partitions, EKS versions and add-ons, the people created on the nodes."""

from __future__ import annotations

import datetime
import difflib
import re
from collections import Counter
from collections.abc import Iterator
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

from hyperpod_kit.charts import chart_identity
from hyperpod_kit.config.derived import FSX_MOUNT, device_plugins, training_plan_of
from hyperpod_kit.config.facts import (
    ami_accounts,
    eks_versions,
    helm_chart_pins,
    helm_charts_checked,
    instance_type,
    instance_types,
    instance_types_checked,
    limit,
    limits_checked,
    threads_per_core,
    threads_per_core_checked,
)
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig
from hyperpod_kit.config.validators.registry import validator

GROUPS = "cluster.instance_groups"

# Kubernetes versions HyperPod on EKS supports: eks_versions.json (`hyperpod_supported`, with its
# source and date: the public snapshots disagree, and the newest list is kept).
SUPPORTED_KUBERNETES = tuple(str(v) for v in eks_versions()["hyperpod_supported"])
KUBERNETES_CHECKED = str(eks_versions()["hyperpod_checked"])
MIN_VPC_CNI = (1, 18, 3)  # HyperPod's EKS prerequisites


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
        for at, name in _type_paths(i, g):
            if instance_type(name) is not None or name in allowed:
                continue
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.9)
            yield Finding(
                Level.ERROR,
                at,
                f"{name} is not a HyperPod instance type (table of "
                f"{len(names)} types, checked {instance_types_checked()})",
                (f"did you mean {close[0]}? " if close else "")
                + "a type newer than the table goes in validation.allow_instance_types",
            )


def _type_paths(i: int, g: InstanceGroupConfig) -> list[tuple[str, str]]:
    """(path, type) for each instance type a group names."""
    if g.instance_types is not None:
        return [(_group(i, f"instance_types[{j}]"), t) for j, t in enumerate(g.instance_types)]
    return [(_group(i, "instance_type"), g.instance_type)] if g.instance_type else []


@validator("deep-health-checks", area="cluster")
def check_deep_health_checks(config: EnvironmentConfig) -> Iterator[Finding]:
    """Deep health checks run only on accelerated types; turning them off on one is a warning."""
    for i, g in enumerate(config.cluster.instance_groups):
        facts = instance_type(g.primary_type)
        if g.deep_health_checks is None or facts is None:
            continue
        at = _group(i, "deep_health_checks")
        if len(set(g.deep_health_checks)) != len(g.deep_health_checks):
            yield Finding(Level.ERROR, at, "a check is listed twice", "list each check once")
        if g.deep_health_checks and not facts.accelerated:
            yield Finding(
                Level.ERROR,
                at,
                f"{g.primary_type} has no GPU or Trainium chip; HyperPod runs deep health "
                "checks on accelerated instances only",
                "remove deep_health_checks from this group",
            )
        elif not g.deep_health_checks and facts.accelerated:
            yield Finding(
                Level.WARNING,
                at,
                f"deep health checks are off on {g.primary_type}: a node with a bad GPU or "
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
    plans = [("cluster.training_plan_arn", config.cluster.training_plan_arn)] + [
        (_group(i, "training_plan_arn"), g.training_plan_arn)
        for i, g in enumerate(config.cluster.instance_groups)
    ]
    for at, arn in plans:
        if arn is not None:
            yield from _training_plan_place(config, at, arn)


def _training_plan_place(config: EnvironmentConfig, at: str, arn: str) -> Iterator[Finding]:
    _, _, _, region, account, _ = arn.split(":", 5)
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
    """User names and uids are unique; gids may be shared. (Names and ids the nodes' own
    accounts use are `ami-accounts`'.)"""
    names: dict[str, int] = {}
    uids: dict[int, int] = {}
    for i, user in enumerate(config.users):
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
    if config.cluster.node_setup.packages is not None:
        yield "cluster.node_setup.packages", config.cluster.node_setup.packages, True
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
        elif at == "cluster.node_setup.packages" and not any(path.glob("*.deb")):
            yield Finding(
                Level.ERROR,
                at,
                f"{value!r} holds no .deb packages",
                "put the .deb files the node steps install here (a *pam*slurm*adopt*.deb "
                "built for the cluster's Slurm, logrotate_*.deb)",
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
    chart for the resilience pieces; the control plane's security group is given only for an
    existing cluster (a new one's control plane carries the environment's cluster group)."""
    if config.orchestrator != "eks":
        return
    eks = config.cluster.eks
    if eks.existing_cluster_security_group_id is not None and eks.existing_cluster_name is None:
        yield Finding(
            Level.ERROR,
            "cluster.eks.existing_cluster_security_group_id",
            "is only for an existing cluster (existing_cluster_name); the cluster created here "
            "carries the environment's cluster security group, which Studio's rule uses",
            "remove it, or set cluster.eks.existing_cluster_name",
        )
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


@validator("threads-per-core", area="cluster")
def check_threads_per_core(config: EnvironmentConfig) -> Iterator[Finding]:
    """threads_per_core: 2 only where the instance family's processor has SMT
    (threads_per_core.json: AWS Graviton and NVIDIA Grace run one thread per core)."""
    for i, g in enumerate(config.cluster.instance_groups):
        for name in g.types:  # a flexible group may get any of its types
            known = threads_per_core(name)
            if known is None:
                continue
            allowed, source = known
            if allowed is None or g.threads_per_core in allowed:
                continue
            yield Finding(
                Level.ERROR,
                _group(i, "threads_per_core"),
                f"{name} runs {allowed[-1]} thread per core "
                f"({source.split(': ', 1)[-1]}); HyperPod refuses threads_per_core "
                f"{g.threads_per_core} (table checked {threads_per_core_checked()})",
                f"use threads_per_core: {allowed[-1]}, or leave it out",
            )
            break


@validator("training-plan-types", area="cluster")
def check_training_plan_types(config: EnvironmentConfig) -> Iterator[Finding]:
    """A training plan reserves capacity of one instance type: the groups it applies to (the
    accelerated compute or worker groups under the cluster's plan, and each group with a plan of
    its own) share that type, and a flexible group cannot use one."""
    plans: dict[str, list[tuple[int, InstanceGroupConfig]]] = {}
    for i, g in enumerate(config.cluster.instance_groups):
        if (arn := training_plan_of(config, g)) is not None:
            plans.setdefault(arn, []).append((i, g))
    most = limit("training_plan_instance_types")
    for planned in plans.values():
        own = [(i, g) for i, g in planned if g.training_plan_arn is not None]
        at = _group(own[0][0], "training_plan_arn") if own else "cluster.training_plan_arn"
        types = list(dict.fromkeys(t for _, g in planned for t in g.types))
        if len(types) > most:
            groups = ", ".join(f"{g.name} ({', '.join(g.types)})" for _, g in planned)
            yield Finding(
                Level.ERROR,
                at,
                f"a training plan reserves one instance type, and this one would apply to groups "
                f"of {len(types)}: {groups} (table checked {limits_checked()})",
                f"give every accelerated compute group the plan's instance type (e.g. {types[0]}), "
                "or leave training_plan_arn out"
                if not own
                else f"give every group on the plan one instance type (e.g. {types[0]}), or "
                "leave the plan out",
            )


def _date(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


@validator("eks-version-calendar", area="cluster")
def check_eks_calendar(config: EnvironmentConfig) -> Iterator[Finding]:
    """A new EKS cluster's Kubernetes version against EKS's calendar, as of the calendar's own
    date (never the clock, so validate gives the same answer tomorrow): past extended support
    is an error (EKS creates no cluster on it), in extended support a warning (it costs more per
    cluster hour), standard support ending within 90 days an info."""
    if config.orchestrator != "eks" or config.cluster.eks.existing_cluster_name is not None:
        return
    table = eks_versions()
    today = _date(table["checked"])
    version = config.cluster.eks.kubernetes_version
    row = table["versions"].get(version)
    if row is None:
        return
    at = "cluster.eks.kubernetes_version"
    standard, extended = row["standard_until"], row["extended_until"]
    newest = _newest_standard(table, today)
    use = f'use "{newest}" (standard support until {table["versions"][newest]["standard_until"]})'
    as_of = f"EKS calendar checked {table['checked']}"
    if extended is not None and today >= _date(extended):
        yield Finding(
            Level.ERROR,
            at,
            f"Kubernetes {version}'s extended support ended on {extended} ({as_of}): EKS "
            "creates no new cluster on it",
            use,
        )
    elif standard is None or today >= _date(standard):
        until = f" until {extended}" if extended else ""
        yield Finding(
            Level.WARNING,
            at,
            f"Kubernetes {version} is in extended support{until} ({as_of}): EKS charges more "
            "per cluster hour, then upgrades the cluster itself",
            use,
        )
    elif (_date(standard) - today).days <= 90:
        yield Finding(
            Level.INFO,
            at,
            f"Kubernetes {version}'s standard support ends on {standard} ({as_of}); extended "
            "support costs more per cluster hour",
        )


def _newest_standard(table: dict[str, Any], today: datetime.date) -> str:
    """The newest version HyperPod supports that is in standard support on the table's date."""
    usable = [
        v
        for v, row in table["versions"].items()
        if v in SUPPORTED_KUBERNETES
        and row["standard_until"] is not None
        and today < _date(row["standard_until"])
    ]
    return max(usable or SUPPORTED_KUBERNETES, key=_version)


@validator("eks-public-access-cidrs", area="cluster")
def check_public_access_cidrs(config: EnvironmentConfig) -> Iterator[Finding]:
    """A new EKS cluster's public endpoint: at most 40 CIDRs (EKS's quota, which cannot be
    raised), each of public addresses."""
    eks = config.cluster.eks
    if config.orchestrator != "eks" or eks.existing_cluster_name is not None:
        return
    at = "cluster.eks.public_access_cidrs"
    most = limit("eks_public_access_cidrs")
    if len(eks.public_access_cidrs) > most:
        yield Finding(
            Level.ERROR,
            at,
            f"{len(eks.public_access_cidrs)} CIDRs; EKS takes at most {most} public access "
            f"CIDR ranges per cluster, a quota that cannot be raised (table checked "
            f"{limits_checked()})",
            "merge neighbouring blocks into larger ones",
        )
    for i, cidr in enumerate(eks.public_access_cidrs):
        if _not_public(cidr):
            yield Finding(
                Level.ERROR,
                f"{at}[{i}]",
                f"{cidr} is a private or reserved range; the public endpoint takes public "
                "addresses only",
                "reach the private endpoint from the VPC instead; list here the public addresses "
                "you connect from (your NAT's, as a /32)",
            )


# Ranges no request from the internet comes from: private (RFC 1918), shared (carrier-grade NAT),
# loopback, link-local, "this network", multicast and reserved.
_NOT_PUBLIC = tuple(
    IPv4Network(block)
    for block in (
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
        "169.254.0.0/16", "0.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip


def _not_public(cidr: IPv4Network) -> bool:
    """Inside a range that is not public (0.0.0.0/0, everyone, is EKS's own default)."""
    return cidr.prefixlen > 0 and any(cidr.subnet_of(block) for block in _NOT_PUBLIC)


@validator("ami-accounts", area="cluster")
def check_ami_accounts(config: EnvironmentConfig) -> Iterator[Finding]:
    """No user takes a name, uid or gid of the accounts the nodes' Ubuntu AMI already has
    (ami_accounts.json: uids and gids 0-999 and 65534-65535; Debian's base-passwd accounts and
    the usual Ubuntu and cluster service accounts; not read from a HyperPod AMI)."""
    table = ami_accounts()
    owners = {name: group for group, names in table["names"].items() for name in names}
    where = f"table checked {table['checked']}, not read from a HyperPod AMI"
    taken = {u.uid for u in config.users}
    for i, user in enumerate(config.users):
        if user.name in owners:
            yield Finding(
                Level.ERROR,
                f"users[{i}].name",
                f"{user.name!r} is an account the nodes' AMI already has ({owners[user.name]}; "
                f"{where})",
                "choose another login name",
            )
        if _in(user.uid, table["uid_ranges"]):
            free = next(n for n in range(10000, 4000001) if n not in taken)
            yield Finding(
                Level.ERROR,
                f"users[{i}].uid",
                f"uid {user.uid} belongs to the AMI's own accounts ({_what(user.uid)}; {where})",
                f"use a uid no account has, e.g. {free}",
            )
        if _in(user.gid, table["gid_ranges"]):
            yield Finding(
                Level.ERROR,
                f"users[{i}].gid",
                f"gid {user.gid} belongs to the AMI's own groups ({_what(user.gid)}; {where})",
                "use a gid of your own, e.g. 1001 (the default)",
            )


def _in(number: int, ranges: list[list[int]]) -> bool:
    return any(lo <= number <= hi for lo, hi in ranges)


def _what(number: int) -> str:
    return {65534: "nobody / nogroup", 65535: "(uid_t)-1 of 16-bit ids, never assigned"}.get(
        number, "system accounts"
    )


@validator("user-homes", area="cluster")
def check_user_homes(config: EnvironmentConfig) -> Iterator[Finding]:
    """A user's home, /fsx/<name> on the nodes (also their Studio partition), is not inside, and
    does not hold, a directory linked to S3: import and export would publish it to the bucket and
    rewrite its files' owners."""
    lustre = config.storage.lustre
    if lustre.existing is not None:
        return  # associations are made only on a file system this environment creates
    dras = "storage.lustre.data_repository_associations"
    for i, user in enumerate(config.users):
        home = f"/{user.name}"
        for j, dra in enumerate(lustre.data_repository_associations):
            if _overlaps(home, dra.file_system_path):
                yield Finding(
                    Level.ERROR,
                    f"users[{i}].name",
                    f"{user.name}'s home {FSX_MOUNT}{home} overlaps {FSX_MOUNT}"
                    f"{dra.file_system_path.rstrip('/')}, linked to S3 by {dras}[{j}]: a "
                    "private home would be exported to the bucket",
                    f"rename the user, or move {dras}[{j}].file_system_path to a directory no "
                    "user is named after",
                )


def _overlaps(a: str, b: str) -> bool:
    """Two directories of the file system are the same, or one holds the other."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def group_of(config: EnvironmentConfig, name: str) -> tuple[int, InstanceGroupConfig] | None:
    """The index and group with this name."""
    for i, g in enumerate(config.cluster.instance_groups):
        if g.name == name:
            return i, g
    return None
