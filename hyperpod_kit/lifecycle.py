"""The node scripts HyperPod runs when it provisions a node, rendered from the environment file.

`lifecycle/` holds jinja2 templates (``*.j2``: rendered with validated values only, through
`hyperpod_kit.templating`: every value passes the filter of its context, ``| q`` for a shell word,
``| systemd`` in a unit) and static files (copied as they are). `build_bundle` adds what the
environment file names (each group's own scripts, the enroot/pyxis packages) and the users file,
and hashes everything: the upload goes to ``lifecycle/<hash>/``, so its S3 prefix changes exactly
when a byte of it changes, and a node still provisioning from the previous prefix keeps it.

What runs on a node, and in which order: docs/lifecycle.md.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path, PurePosixPath

from hyperpod_kit.config.derived import (
    FSX_MOUNT,
    IMAGES_DIR,
    names_at_synth,
    prometheus_agents,
    prometheus_endpoint,
    region_of_arn,
    remote_write_url,
    workspace_id_of,
)
from hyperpod_kit.config.facts import instance_type
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig
from hyperpod_kit.health_settings import node_health_settings
from hyperpod_kit.jobs import render_verify_jobs
from hyperpod_kit.naming import OBSERVABILITY_AREA, parameter_name
from hyperpod_kit.paths import LIFECYCLE_DIR
from hyperpod_kit.templating import RenderError, environment, render
from hyperpod_kit.verify_settings import verify_settings_document

ON_CREATE = "on_create.sh"
USERS_FILE = "users.json"
TEMPLATE_SUFFIX = ".j2"
GROUP_SCRIPTS_DIR = "groups"
ENROOT_PACKAGES_DIR = "packages/enroot-pyxis"
NODE_PACKAGES_DIR = "packages/node-setup"
METRICS_PACKAGES_DIR = "packages/metrics"
# NVIDIA's DCGM exporter image, by digest only: the linux/amd64 manifest of
# 4.5.2-4.8.1-ubuntu22.04, as a public AWS PCS reference architecture's docs/OPERATIONS.md §3.1
# pins it (docs/observability.md, "Pins"; not pulled or checked against nvcr.io here).
DCGM_EXPORTER_IMAGE = (
    "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:"
    "a7ad6547d4546eaf4dd5d6b4c0b4db4101e63ef7dc3cdff7f42b767d2c60b706"
)
# The binaries of monitoring.prometheus.packages the exporters run (built by the user: their
# sources publish them only on GitHub, which nodes never download from).
METRICS_BINARIES = ("efa-exporter", "slurm-exporter")
SYNC_INTERVAL_MINUTES = 5
# API-driven Slurm configuration fails an update when this file is anywhere under SourceS3Uri.
FORBIDDEN_NAMES = frozenset({"provisioning_parameters.json"})

# Files only Slurm nodes use, and only with enroot/pyxis on: left out of other uploads, so an EKS
# upload holds nothing it does not run (and its hash does not move when Slurm-only files change).
# The teams' Slurm accounts script is in every Slurm upload, teams or not: teams travel in the
# users file, so a team added later reaches a running controller without a new upload.
SLURM_ONLY = ("studio/", "bin/hyperpod-kit-slurm-accounts")
# The user sync: Slurm (accounts, homes, partition status), or EKS with Studio, where it runs in
# its partitions-only mode (the Studio partitions on FSx and their status; no accounts).
USER_SYNC = (
    "steps/users.sh",
    "bin/hyperpod-kit-user-sync",
    "systemd/hyperpod-kit-user-sync.",
)
ENROOT_ONLY = ("steps/enroot_pyxis.sh",)
# The controller's Slurm JWT issuer for Studio (and the hook that runs it): Slurm with Studio only.
STUDIO_SLURM_ONLY = ("studio/", "hooks.d/60-studio-jwt.sh")
# EKS with Studio: the host mount of FSx at /fsx and the hook that mounts it and runs the sync.
STUDIO_EKS_ONLY = ("bin/hyperpod-kit-mount-fsx", "hooks.d/40-studio-partitions.sh")
# The node health runner's settings, rendered from the environment file beside the runner.
HEALTH_SETTINGS = "health/settings.json"
# `hyperpod-kit-verify` (docs/verify.md): the command, its settings and its all-reduce jobs,
# installed by steps/verify.sh on Slurm nodes.
VERIFY_SETTINGS = "verify/settings.json"
VERIFY_ONLY = ("verify/", "bin/hyperpod-kit-verify", "steps/verify.sh")
# cluster.node_setup: each step (and what it installs) is in the upload only where it runs.
SSH_ONLY = ("steps/ssh.sh", "bin/hyperpod-kit-ssh-key")
PAM_ONLY = ("steps/pam_slurm_adopt.sh", "bin/hyperpod-kit-pam-adopt")
LOGROTATE_ONLY = ("steps/logrotate.sh", "logrotate/")
LOGROTATE_SLURM = "logrotate/hyperpod-kit-slurm"
HOLD_ONLY = ("steps/hold_lustre_client.sh",)
# monitoring.prometheus on Slurm: the agent step, its templates and units.
METRICS_ONLY = ("steps/metrics.sh", "metrics/", "systemd/hyperpod-kit-metrics-")
CONTAINER_STORAGE_ONLY = (
    "steps/container_storage.sh",
    "bin/hyperpod-kit-container-storage",
    "systemd/hyperpod-kit-container-storage.",
)

# Values a template places in shell or unit files: checked again here, whatever the schema said,
# so a bypassed validation can never put anything but a plain word into a node script.
_GROUP = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_USER = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_TEAM = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_ENV = re.compile(r"^[a-z][a-z0-9-]{1,22}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_LUSTRE_DNS = re.compile(r"^fs-[0-9a-f]{8,17}\.fsx\.[a-z0-9-]+\.amazonaws\.com$")
_LUSTRE_MOUNT = re.compile(r"^[a-z0-9]{8}$")
_SHARED_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
_DEB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_~-]*\.deb$")
_SSH_HOSTS = re.compile(r"^ip-\* (\d{1,3}\.){0,3}\*$")
_CONTAINER_STORAGE = re.compile(r"^(none|nvme|ebs)$")
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_REMOTE_WRITE = re.compile(
    r"^https://aps-workspaces\.[a-z0-9-]+\.amazonaws\.com/workspaces/ws-[A-Za-z0-9-]+"
    r"/api/v1/remote_write$"
)
_IMAGE_DIGEST = re.compile(r"^[a-z0-9./-]+@sha256:[0-9a-f]{64}$")


class LifecycleError(Exception):
    """The environment's lifecycle files cannot be built: a template error, a missing or unsafe
    file, a value that is not a plain word."""


def _checked(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not pattern.fullmatch(value):  # fullmatch: `$` would let a trailing line break through
        raise LifecycleError(f"{what} {value!r} is not a plain name")
    return value


@dataclass(frozen=True)
class UserValues:
    name: str
    uid: int
    gid: int
    admin: bool
    studio: bool  # gets a Studio profile (and, on Slurm, a token from the controller)


@dataclass(frozen=True)
class TeamValues:
    name: str
    members: tuple[str, ...]
    fairshare: int
    gpu_limit: int | None


@dataclass(frozen=True)
class GroupValues:
    name: str
    role: str
    instance_type: str
    accelerated: bool | None  # None: a type newer than the fact table
    efa: bool | None
    scripts: tuple[str, ...]  # paths in the upload, in run order


@dataclass(frozen=True)
class MonitoringValues:
    enabled: bool
    auto_repair: bool
    interval_seconds: int  # how often the node health timer runs the checks


@dataclass(frozen=True)
class MetricsValues:
    """monitoring.prometheus as the Slurm nodes' agent step applies it (docs/observability.md)."""

    enabled: bool
    remote_write_url: str  # an existing workspace's; "" when the node reads it from `parameter`
    parameter: str  # the observability stack's handles (remote_write_url)
    scrape_interval_seconds: int
    node: bool
    dcgm: bool
    efa: bool
    slurm: bool
    dcgm_image: str
    packages_dir: str  # folder of the upload with monitoring.prometheus.packages, or ""


@dataclass(frozen=True)
class NodeSetupValues:
    """cluster.node_setup as the nodes apply it (each off where the orchestrator has no use for
    it: keys and pam_slurm_adopt on Slurm, container storage on EKS)."""

    ssh_keys: bool
    ssh_hosts: str  # ssh_config Host patterns of the cluster's nodes: names and VPC addresses
    pam_slurm_adopt: bool
    logrotate: bool
    hold_lustre_client: bool
    container_storage: str  # none | nvme | ebs
    packages_dir: str  # folder of the upload with cluster.node_setup.packages, or ""

    @property
    def moves_container_storage(self) -> bool:
        return self.container_storage != "none"


@dataclass(frozen=True)
class LifecycleContext:
    """Everything a lifecycle template may use. Nothing else reaches a template."""

    environment: str
    region: str
    cluster_name: str
    orchestrator: str
    fsx_mount: str
    images_dir: str  # Slurm jobs' imported images (squashfs per digest), made by the controller
    lifecycle_parameter: str
    status_parameter_prefix: str
    groups: tuple[GroupValues, ...]
    users: tuple[UserValues, ...]
    teams: tuple[TeamValues, ...]  # Slurm: the Slurm accounts the controller keeps (users file)
    enroot_pyxis: bool
    enroot_packages_dir: str  # folder of the upload, or "" when the AMI's copy is the only source
    monitoring: MonitoringValues
    sync_interval_minutes: int
    studio_jwt: bool  # Studio on Slurm: the controller issues users' Slurm tokens
    data_bucket: str  # the data bucket's name when the environment file names it, else ""
    storage_parameter: str  # the storage stack's handles (bucket_name), for when it does not
    partitions_only: bool  # Studio on EKS: the user sync only makes and reports the partitions
    studio_shared_path: str  # Studio with `partitions: shared`: the folder under FSx, else ""
    lustre_dns_name: str  # an existing file system's names (environment file), else "": the
    lustre_mount_name: str  # node reads dns_name/mount_name from the storage parameter
    node_setup: NodeSetupValues
    internet: bool  # network.internet: false: nodes install only from the upload
    metrics: MetricsValues

    @property
    def user_sync(self) -> bool:
        """The nodes run the user sync: Slurm, or EKS with Studio (partitions only)."""
        return self.orchestrator == "slurm" or self.partitions_only

    @property
    def reads_storage_handles(self) -> bool:
        """A node reads the storage stack's SSM parameter at provisioning: the Slurm token
        issuer's hook for a bucket CloudFormation names, the FSx host mount on EKS for a file
        system the storage stack creates."""
        return (self.studio_jwt and not self.data_bucket) or (
            self.partitions_only and not self.lustre_dns_name
        )

    def as_template_vars(self) -> dict[str, object]:
        return {
            "environment": self.environment,
            "region": self.region,
            "cluster_name": self.cluster_name,
            "orchestrator": self.orchestrator,
            "fsx_mount": self.fsx_mount,
            "images_dir": self.images_dir,
            "lifecycle_parameter": self.lifecycle_parameter,
            "status_parameter_prefix": self.status_parameter_prefix,
            "groups": self.groups,
            "users": self.users,
            "enroot_pyxis": self.enroot_pyxis,
            "enroot_packages_dir": self.enroot_packages_dir,
            "monitoring": self.monitoring,
            "sync_interval_minutes": self.sync_interval_minutes,
            "studio_jwt": self.studio_jwt,
            "data_bucket": self.data_bucket,
            "storage_parameter": self.storage_parameter,
            "partitions_only": self.partitions_only,
            "studio_shared_path": self.studio_shared_path,
            "lustre_dns_name": self.lustre_dns_name,
            "lustre_mount_name": self.lustre_mount_name,
            "node_setup": self.node_setup,
            "internet": self.internet,
            "metrics": self.metrics,
        }


def lifecycle_parameter(environment: str) -> str:
    """The SSM parameter that names the newest lifecycle upload (the user sync reads it)."""
    return parameter_name(environment, "lifecycle")


def partition_status_parameter(environment: str, user: str | None = None) -> str:
    """Where the controller publishes a user's FSx partition status (Studio waits on it); without
    a user, the prefix of all of them."""
    prefix = parameter_name(environment, "partitions")
    return prefix if user is None else f"{prefix}/{_checked(_USER, user, 'user name')}"


def _script_name(index: int, path: Path) -> str:
    return f"{index:02d}-{_UNSAFE_FILE_CHARS.sub('_', path.name)}"


def _group_script_paths(config: EnvironmentConfig, group: InstanceGroupConfig) -> list[str]:
    return [
        f"{GROUP_SCRIPTS_DIR}/{group.name}/{_script_name(i, config.resolve_path(script))}"
        for i, script in enumerate(group.lifecycle.scripts, start=1)
    ]


def _enroot_packages(config: EnvironmentConfig) -> dict[str, Path]:
    """Upload path -> source of each enroot/pyxis package (Slurm with enroot_pyxis only)."""
    slurm = config.cluster.slurm
    if config.orchestrator != "slurm" or not slurm.enroot_pyxis or not slurm.enroot_pyxis_packages:
        return {}
    folder = config.resolve_path(slurm.enroot_pyxis_packages)
    if not folder.is_dir():
        raise LifecycleError(f"cluster.slurm.enroot_pyxis_packages: {folder} is not a folder")
    debs = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".deb")
    if not debs:
        raise LifecycleError(f"cluster.slurm.enroot_pyxis_packages: {folder} has no .deb files")
    return {
        f"{ENROOT_PACKAGES_DIR}/{_checked(_DEB, deb.name, 'package file name')}": deb
        for deb in debs
    }


def _node_packages(config: EnvironmentConfig) -> dict[str, Path]:
    """Upload path -> source of each package of cluster.node_setup.packages."""
    folder_name = config.cluster.node_setup.packages
    if folder_name is None:
        return {}
    folder = config.resolve_path(folder_name)
    if not folder.is_dir():
        raise LifecycleError(f"cluster.node_setup.packages: {folder} is not a folder")
    debs = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".deb")
    if not debs:
        raise LifecycleError(f"cluster.node_setup.packages: {folder} has no .deb files")
    return {
        f"{NODE_PACKAGES_DIR}/{_checked(_DEB, deb.name, 'package file name')}": deb for deb in debs
    }


def ssh_host_patterns(vpc_cidr: IPv4Network) -> str:
    """ssh_config `Host` patterns that match the cluster's nodes: HyperPod's node names
    (ip-10-1-2-3) and the addresses of the VPC, widened to whole octets (10.0.0.0/16 ->
    10.0.*; a /20 -> its /16)."""
    octets = str(vpc_cidr.network_address).split(".")[: vpc_cidr.prefixlen // 8]
    return "ip-* " + ".".join([*octets, "*"])


def _node_setup(config: EnvironmentConfig) -> NodeSetupValues:
    setup = config.cluster.node_setup
    slurm = config.orchestrator == "slurm"
    vpc = config.network.existing_vpc or config.network.new_vpc
    assert vpc is not None  # new_vpc is None only when existing_vpc is set
    return NodeSetupValues(
        ssh_keys=slurm and setup.ssh_keys,
        ssh_hosts=_checked(_SSH_HOSTS, ssh_host_patterns(vpc.cidr), "ssh host patterns"),
        pam_slurm_adopt=slurm and setup.pam_slurm_adopt,
        logrotate=setup.logrotate,
        hold_lustre_client=setup.hold_lustre_client,
        container_storage=_checked(
            _CONTAINER_STORAGE, "none" if slurm else setup.container_storage, "container_storage"
        ),
        packages_dir=NODE_PACKAGES_DIR if _node_packages(config) else "",
    )


def _metrics_packages(config: EnvironmentConfig) -> dict[str, Path]:
    """Upload path -> source of each file of monitoring.prometheus.packages the nodes use: the
    .deb packages and the exporters' binaries (Slurm with Prometheus only)."""
    prometheus = config.monitoring.prometheus
    if not prometheus_agents(config) or prometheus.packages is None:
        return {}
    folder = config.resolve_path(prometheus.packages)
    if not folder.is_dir():
        raise LifecycleError(f"monitoring.prometheus.packages: {folder} is not a folder")
    found: dict[str, Path] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink()):
        if path.suffix == ".deb":
            found[f"{METRICS_PACKAGES_DIR}/{_checked(_DEB, path.name, 'package file name')}"] = path
        elif path.name in METRICS_BINARIES:
            found[f"{METRICS_PACKAGES_DIR}/{path.name}"] = path
    return found


def _metrics(config: EnvironmentConfig) -> MetricsValues:
    prometheus = config.monitoring.prometheus
    exporters = prometheus.exporters
    on = prometheus_agents(config)
    url = ""
    if on and prometheus.workspace_arn is not None:
        arn = prometheus.workspace_arn
        url = remote_write_url(prometheus_endpoint(region_of_arn(arn), workspace_id_of(arn)))
        _checked(_REMOTE_WRITE, url, "remote write URL")
    return MetricsValues(
        enabled=on,
        remote_write_url=url,
        parameter=parameter_name(config.name, OBSERVABILITY_AREA),
        scrape_interval_seconds=prometheus.scrape_interval_seconds,
        node=on and exporters.node,
        dcgm=on and exporters.dcgm,
        efa=on and exporters.efa,
        slurm=on and exporters.slurm,
        dcgm_image=_checked(_IMAGE_DIGEST, DCGM_EXPORTER_IMAGE, "DCGM exporter image"),
        packages_dir=METRICS_PACKAGES_DIR if _metrics_packages(config) else "",
    )


def lifecycle_context(config: EnvironmentConfig) -> LifecycleContext:
    """The values every lifecycle template gets, from a config that passed validation."""
    environment = _checked(_ENV, config.name, "environment name")
    groups = []
    for g in config.cluster.instance_groups:
        facts = instance_type(g.primary_type)  # a flexible group's types agree (`validate`)
        groups.append(
            GroupValues(
                name=_checked(_GROUP, g.name, "instance group name"),
                role=g.role,
                instance_type=g.primary_type,
                accelerated=facts.accelerated if facts is not None else None,
                efa=facts.efa if facts is not None else None,
                scripts=tuple(_group_script_paths(config, g)),
            )
        )
    slurm = config.orchestrator == "slurm"
    enroot = slurm and config.cluster.slurm.enroot_pyxis
    studio_users = config.studio.selected(config.users) if config.studio.enabled else []
    studio = {u.name for u in studio_users}
    # A bucket CloudFormation names is a token at synth: the node reads it from the storage
    # stack's parameter instead (the hook that needs it).
    bucket = config.storage.bucket.existing_name or config.storage.bucket.name or ""
    # The same for the file system: a created one's DNS and mount names are tokens at synth.
    lustre = names_at_synth(config.storage.lustre)
    return LifecycleContext(
        environment=environment,
        region=_checked(_REGION, config.region, "region"),
        cluster_name=_checked(_GROUP, config.cluster_name, "cluster name"),
        orchestrator=config.orchestrator,
        fsx_mount=FSX_MOUNT,
        images_dir=IMAGES_DIR,
        lifecycle_parameter=lifecycle_parameter(environment),
        status_parameter_prefix=partition_status_parameter(environment),
        groups=tuple(groups),
        users=tuple(
            UserValues(
                _checked(_USER, u.name, "user name"), u.uid, u.gid, u.admin, u.name in studio
            )
            for u in config.users
        ),
        teams=tuple(
            TeamValues(
                _checked(_TEAM, t.name, "team name"),
                tuple(_checked(_USER, m, "team member") for m in t.members),
                t.fairshare,
                t.gpu_limit,
            )
            for t in (config.teams if slurm else [])
        ),
        enroot_pyxis=enroot,
        enroot_packages_dir=ENROOT_PACKAGES_DIR if _enroot_packages(config) else "",
        monitoring=MonitoringValues(
            config.monitoring.enabled,
            config.monitoring.auto_repair,
            config.monitoring.node_checks.interval_seconds,
        ),
        sync_interval_minutes=SYNC_INTERVAL_MINUTES,
        studio_jwt=slurm and config.studio.enabled,
        data_bucket=_checked(_BUCKET, bucket, "data bucket name") if bucket else "",
        storage_parameter=parameter_name(environment, "storage"),
        partitions_only=not slurm and config.studio.enabled,
        studio_shared_path=(
            _checked(_SHARED_PATH, config.studio.shared_path, "studio.shared_path")
            if config.studio.enabled and config.studio.partitions == "shared"
            else ""
        ),
        lustre_dns_name=_checked(_LUSTRE_DNS, lustre.dns_name, "FSx DNS name") if lustre else "",
        lustre_mount_name=(
            _checked(_LUSTRE_MOUNT, lustre.mount_name, "FSx mount name") if lustre else ""
        ),
        node_setup=_node_setup(config),
        internet=config.network.internet,
        metrics=_metrics(config),
    )


def _wanted(relative: str, context: LifecycleContext) -> bool:
    """Whether the upload of `context` holds the file `relative`: each file (or folder) goes
    only where something runs it."""
    setup = context.node_setup
    slurm = context.orchestrator == "slurm"
    only_when: tuple[tuple[tuple[str, ...], bool], ...] = (
        (SLURM_ONLY, slurm),
        (VERIFY_ONLY, slurm),
        (USER_SYNC, context.user_sync),
        (STUDIO_EKS_ONLY, context.partitions_only),
        (STUDIO_SLURM_ONLY, context.studio_jwt),
        (ENROOT_ONLY, context.enroot_pyxis),
        (SSH_ONLY, setup.ssh_keys),
        (PAM_ONLY, setup.pam_slurm_adopt),
        (LOGROTATE_ONLY, setup.logrotate),
        ((LOGROTATE_SLURM,), slurm),
        (HOLD_ONLY, setup.hold_lustre_client),
        (CONTAINER_STORAGE_ONLY, setup.moves_container_storage),
        (METRICS_ONLY, context.metrics.enabled),
    )
    return all(wanted or not relative.startswith(prefixes) for prefixes, wanted in only_when)


def users_document(context: LifecycleContext) -> str:
    """The users file the nodes apply (and the user sync fetches): data, never shell. With
    Studio on Slurm each user also says whether they are a Studio user: the controller's token
    issuer (lifecycle/studio/slurm_jwt.sh) reads the copy the sync keeps."""
    users: list[dict[str, object]] = [
        {"name": u.name, "uid": u.uid, "gid": u.gid, "admin": u.admin} for u in context.users
    ]
    if context.studio_jwt:
        for entry, u in zip(users, context.users, strict=True):
            entry["studio"] = u.studio
    document: dict[str, object] = {
        "version": 1,
        "environment": context.environment,
        "home_root": context.fsx_mount,
        "users": users,
    }
    if context.teams:
        # Slurm's accounts for the teams: the controller's accounts script applies them
        # (lifecycle/bin/hyperpod-kit-slurm-accounts, through the user sync).
        document["teams"] = [
            {"name": t.name, "members": list(t.members), "fairshare": t.fairshare,
             "gpu_limit": t.gpu_limit}
            for t in context.teams
        ]  # fmt: skip
    return json.dumps(document, indent=2) + "\n"


def render_lifecycle(config: EnvironmentConfig, *, source: Path = LIFECYCLE_DIR) -> dict[str, str]:
    """Every text file of the upload (relative path -> content): the templates of `source`
    rendered, its static files and each group's own scripts. The users file is not part of it
    (see `users_upload`): people change without touching the cluster."""
    context = lifecycle_context(config)
    files = render_templates(context, source=source)
    files[HEALTH_SETTINGS] = health_settings_document(config)
    if config.orchestrator == "slurm":
        files[VERIFY_SETTINGS] = verify_settings_document(config)
        for job in render_verify_jobs(config):
            files[f"verify/{job.filename}"] = job.text
    for group, g in zip(context.groups, config.cluster.instance_groups, strict=True):
        for target, script in zip(group.scripts, g.lifecycle.scripts, strict=True):
            path = config.resolve_path(script)
            try:
                files[target] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise LifecycleError(
                    f"{g.name}: lifecycle script {script!r} cannot be read as text ({e})"
                ) from None
    _check_names(files)
    return files


def render_templates(context: LifecycleContext, *, source: Path = LIFECYCLE_DIR) -> dict[str, str]:
    """The templates and static files of `source` this context uses (relative path ->
    content), rendered from `context` alone."""
    env = environment(source)
    variables = context.as_template_vars()
    files: dict[str, str] = {}
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source).as_posix()
        if "__pycache__" in relative or relative.endswith(".pyc"):
            continue
        target = relative.removesuffix(TEMPLATE_SUFFIX)
        if not _wanted(target, context):
            continue
        if relative.endswith(TEMPLATE_SUFFIX):
            try:
                text = render(env, relative, variables, shown_as=str(path))
            except RenderError as e:
                raise LifecycleError(f"{e}. Hint: {e.hint}") from None
            files[target] = text if text.endswith("\n") else text + "\n"
        else:
            files[target] = path.read_text(encoding="utf-8")
    return files


def health_settings_document(config: EnvironmentConfig) -> str:
    """The node health runner's settings.json: `node_health_settings`, as deterministic JSON."""
    return json.dumps(node_health_settings(config), indent=2, sort_keys=True) + "\n"


def _check_names(paths: Mapping[str, object]) -> None:
    for relative in paths:
        parts = PurePosixPath(relative).parts
        if FORBIDDEN_NAMES.intersection(parts):
            raise LifecycleError(
                f"{relative}: API-driven Slurm configuration fails when a "
                "provisioning_parameters.json is in the lifecycle upload"
            )
        if relative.startswith("/") or ".." in parts:
            raise LifecycleError(f"{relative}: not a path inside the upload")


def content_hash(files: Mapping[str, bytes]) -> str:
    """sha256 over the sorted paths and contents: equal exactly when the uploads are equal."""
    digest = hashlib.sha256()
    for relative in sorted(files):
        data = files[relative]
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def users_upload(config: EnvironmentConfig) -> bytes | None:
    """The users file the nodes' user sync applies (Slurm, or EKS with Studio), uploaded beside
    the scripts under its own hash: adding a person changes this object and the pointer to it,
    never the cluster's SourceS3Uri (which would be an UpdateCluster for each new user)."""
    context = lifecycle_context(config)
    return users_document(context).encode("utf-8") if context.user_sync else None


@dataclass(frozen=True)
class LifecycleBundle:
    """The whole upload: every file as bytes (rendered text and copied packages) and its hash,
    and the users file that travels separately."""

    files: Mapping[str, bytes]
    content_hash: str
    users: bytes | None = None

    @property
    def users_key(self) -> str | None:
        """The users file's S3 key, named by its own content hash."""
        if self.users is None:
            return None
        return f"users/{hashlib.sha256(self.users).hexdigest()}/{USERS_FILE}"

    @property
    def prefix(self) -> str:
        """The S3 key prefix of this upload."""
        return f"lifecycle/{self.content_hash}/"

    def text(self, relative: str) -> str:
        return self.files[relative].decode("utf-8")

    def write_to(self, folder: Path) -> None:
        """Write every file under `folder` (scripts executable; S3 keeps no modes, nodes run
        them with bash anyway)."""
        for relative, data in self.files.items():
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            executable = relative.endswith(".sh") or relative.startswith("bin/")
            target.chmod(0o755 if executable else 0o644)


def build_bundle(config: EnvironmentConfig, *, source: Path = LIFECYCLE_DIR) -> LifecycleBundle:
    """The environment's lifecycle upload: rendered files, group scripts, packages, hash."""
    files = {k: v.encode("utf-8") for k, v in render_lifecycle(config, source=source).items()}
    packages = {**_enroot_packages(config), **_node_packages(config), **_metrics_packages(config)}
    for relative, path in packages.items():
        files[relative] = path.read_bytes()
    _check_names(files)
    return LifecycleBundle(
        files=dict(sorted(files.items())), content_hash=content_hash(files),
        users=users_upload(config),
    )  # fmt: skip


@functools.cache
def _process_staging_root() -> Path:
    """A temporary folder of this process, removed when it exits: CDK copies an asset into the
    cloud assembly when it synthesizes, so the staged bundle is needed only until then, and
    nothing of ours is left behind in the user's temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="hyperpod-kit-stage."))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def stage_bundle(bundle: LifecycleBundle, *, under: Path | None = None) -> Path:
    """The bundle written to a folder named by its hash, outside any CDK output folder (so a
    failed or repeated synth never mixes two uploads). Written to a sibling and renamed: a
    folder that exists is complete, and is reused. Without `under`, the folder lives as long
    as this process."""
    root = (under or _process_staging_root()) / "hyperpod-kit-lifecycle"
    folder = root / bundle.content_hash
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle.content_hash[:12]}-", dir=root))
    try:
        bundle.write_to(staging)
        staging.chmod(0o755)
        os.rename(staging, folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder
