"""Studio rules: who gets a profile, names SageMaker accepts, partition paths, the file system
Studio can reach, and what the cluster needs for Studio's clients."""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Iterator

from hyperpod_kit.config.derived import FSX_MOUNT
from hyperpod_kit.config.facts import api_constraints
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.kubectl import KUBECTL_CHECKED, KUBECTL_VERSIONS, kubectl_version
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator
from hyperpod_kit.naming import eks_cluster_name

# SageMaker's UserProfileName and SpaceName pattern (CreateUserProfile, CreateSpace).
PROFILE_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# FSxLustreFileSystemConfig.FileSystemPath.
FILE_SYSTEM_PATH = re.compile(r"^/\S*$")
FILE_SYSTEM_PATH_MAX = 256


def _names(config: EnvironmentConfig) -> list[str]:
    return [u.name for u in config.users]


def _unknown(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {close[0]}? " if close else ""


@validator("studio-users", area="studio")
def check_studio_users(config: EnvironmentConfig) -> Iterator[Finding]:
    """Studio's people are a selection of the top-level `users` (who carry uid and gid): every
    name it selects or excludes is one of them, and an enabled domain selects someone."""
    studio, known = config.studio, _names(config)
    if studio.users:
        yield Finding(
            Level.WARNING,
            "studio.users",
            "studio.users is deprecated: people are defined once, in the top-level users, with "
            "their uid and gid, and Studio selects among them",
            f"rename it to studio.include: [{', '.join(studio.users)}], or remove it to give "
            "every user a profile",
        )
        if studio.include is not None:
            yield Finding(
                Level.ERROR,
                "studio.users",
                "studio.users and studio.include are both set",
                "keep only studio.include",
            )
    key = "include" if studio.include is not None else "users"
    for i, name in enumerate(studio.include if studio.include is not None else studio.users):
        if name not in known:
            yield Finding(
                Level.ERROR,
                f"studio.{key}[{i}]",
                f"{name!r} is not one of the environment's users, so it has no uid or gid",
                _unknown(name, known) + "add the person to the top-level users (name, uid, gid)",
            )
    for i, name in enumerate(studio.exclude):
        if name not in known:
            yield Finding(
                Level.WARNING,
                f"studio.exclude[{i}]",
                f"{name!r} is not one of the environment's users; excluding it does nothing",
                _unknown(name, known) + "remove it from studio.exclude",
            )
    if studio.enabled and not studio.selected(config.users):
        yield Finding(
            Level.ERROR,
            "studio.enabled",
            "Studio is enabled but selects no user, so there would be no profile to open it with",
            "list people in the top-level users (name, uid, gid); every one gets a profile "
            "unless studio.include or studio.exclude say otherwise",
        )


@validator("studio-profile-names", area="studio")
def check_profile_names(config: EnvironmentConfig) -> Iterator[Finding]:
    """A selected user's name becomes their profile name, the STS source identity that scopes
    their permissions, and part of their spaces' names: SageMaker's pattern must accept it."""
    if not config.studio.enabled:
        return
    selected = {u.name for u in config.studio.selected(config.users)}
    for i, user in enumerate(config.users):
        if user.name in selected and not PROFILE_NAME.match(user.name):
            yield Finding(
                Level.ERROR,
                f"users[{i}].name",
                f"{user.name!r} cannot be a Studio profile name (SageMaker names are letters, "
                "digits and single hyphens, ending with a letter or digit)",
                f"rename the user (e.g. {user.name.rstrip('-').replace('--', '-')!r}), or "
                "add it to studio.exclude",
            )


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


@validator("studio-partition-paths", area="studio")
def check_partition_paths(config: EnvironmentConfig) -> Iterator[Finding]:
    """The shared partition's path is a valid FileSystemPath (`^/\\S*$`, at most 256
    characters), not the root, and not inside (or around) a directory linked to S3, whose import
    and export would rewrite or publish it. (A per-user partition is its user's home:
    `user-homes` checks those.)"""
    studio = config.studio
    if not studio.enabled:
        return
    lustre = config.storage.lustre
    linked = (
        [d.file_system_path for d in lustre.data_repository_associations]
        if lustre.existing is None
        else []
    )
    if studio.partitions == "shared":
        path = studio.shared_path
        bad = (
            not FILE_SYSTEM_PATH.match(path)
            or len(path) > FILE_SYSTEM_PATH_MAX
            or path.rstrip("/") == ""
            or (path.endswith("/") and path != "/")
        )
        if bad:
            yield Finding(
                Level.ERROR,
                "studio.shared_path",
                f"{path!r} is not a directory Studio can mount (an absolute path without spaces, "
                f"at most {FILE_SYSTEM_PATH_MAX} characters, not / itself)",
                "use a path such as /shared",
            )
            return
        for dra in linked:
            if _overlaps(path, dra):
                yield Finding(
                    Level.ERROR,
                    "studio.shared_path",
                    f"{path} overlaps {dra}, a directory linked to S3 (its files are imported "
                    "and exported, with their owners and modes)",
                    "use a path outside the data repository associations, such as /shared",
                )


@validator("studio-shared-path-home", area="studio")
def check_shared_path_home(config: EnvironmentConfig) -> Iterator[Finding]:
    """The shared partition (every profile mounts it, mode 1777) is nobody's home: a user's home
    is /fsx/<name> on the nodes, private to them (mode 0700)."""
    studio = config.studio
    if not studio.enabled or studio.partitions != "shared":
        return
    for user in config.users:
        if _overlaps(studio.shared_path, f"/{user.name}"):
            yield Finding(
                Level.ERROR,
                "studio.shared_path",
                f"{studio.shared_path} overlaps {user.name}'s home ({FSX_MOUNT}/{user.name} on "
                "the nodes, private to them): every profile would mount it",
                "use a path no user is named after, such as /shared",
            )


@validator("studio-lifecycle-size", area="studio")
def check_lifecycle_size(config: EnvironmentConfig) -> Iterator[Finding]:
    """The lifecycle configuration each app starts with, rendered as synth renders it and counted
    as the API counts it (base64): above StudioLifecycleConfigContent's maximum (botocore) an
    error, above 90% of it a warning."""
    studio = config.studio
    if not studio.enabled or not studio.apps:
        return
    size = lifecycle_config_size(config)
    row = next(
        r for r in api_constraints()["fields"] if r["api"].endswith("StudioLifecycleConfigContent")
    )
    most = int(row["max_length"])
    what = (
        f"the Studio lifecycle configuration ({', '.join(dict.fromkeys(studio.apps))}) is "
        f"{size:,} characters in base64"
    )
    api = "sagemaker CreateStudioLifecycleConfig StudioLifecycleConfigContent"
    fix = (
        "shorten assets/studio/client.sh (its comment lines are left out already), or the "
        "values it carries (name, studio.shared_path, trainer.job.namespace)"
    )
    if size > most:
        yield Finding(
            Level.ERROR,
            "studio.apps",
            f"{what}; {api} takes at most {most:,} (botocore {api_constraints()['botocore']})",
            fix,
        )
    elif size > WARN_SHARE * most:
        yield Finding(
            Level.WARNING,
            "studio.apps",
            f"{what}, {size / most:.0%} of the {most:,} {api} takes: a few more lines in the "
            "script and Studio refuses it",
            fix,
        )


WARN_SHARE = 0.9
# What the lifecycle configuration carries in place of values synth does not know: a file system
# id is fs- and 17 hex digits.
_FILE_SYSTEM_ID = "fs-" + "0" * 17


def lifecycle_config_size(config: EnvironmentConfig) -> int:
    """Characters of the lifecycle configuration in base64, as StudioLifecycleConfigContent
    counts them, rendered by the function the Studio construct uses."""
    from hyperpod_kit.studio_lifecycle import (  # its templating loads jinja2: only with Studio
        StudioEks,
        lifecycle_settings,
        render_lifecycle_script,
    )

    existing = config.storage.lustre.existing
    eks = (
        StudioEks(cluster_name=eks_cluster_name(config), cluster_arn="")
        if config.orchestrator == "eks"
        else None
    )
    settings = lifecycle_settings(
        config,
        file_system_id=existing.file_system_id if existing is not None else _FILE_SYSTEM_ID,
        eks=eks,
    )
    return len(base64.b64encode(render_lifecycle_script(settings).encode()))


@validator("studio-file-system", area="studio")
def check_studio_file_system(config: EnvironmentConfig) -> Iterator[Finding]:
    """Studio mounts the file system from the environment's subnet: a file system the storage
    stack creates is there by construction; an existing one must be in the same (existing) VPC,
    which synth cannot look up."""
    if not config.studio.enabled:
        return
    existing = config.storage.lustre.existing
    if existing is None:
        return
    vpc = config.network.existing_vpc
    if vpc is None:
        yield Finding(
            Level.ERROR,
            "storage.lustre.existing",
            f"Studio mounts {existing.file_system_id} from the environment's VPC, which this "
            "deploy creates: an existing file system cannot be in it",
            "use network.existing_vpc (the file system's VPC), or leave storage.lustre.existing "
            "out so the storage stack creates the file system",
        )
    else:
        yield Finding(
            Level.INFO,
            "storage.lustre.existing",
            f"{existing.file_system_id} is assumed to be in {vpc.vpc_id} (not looked up); "
            "Studio's security group is added to its network interfaces at deploy and removed "
            "when the Studio stack is deleted",
        )


@validator("studio-cluster-client", area="studio")
def check_cluster_client(config: EnvironmentConfig) -> Iterator[Finding]:
    """Studio's cluster clients: on Slurm, JWT authentication edits slurm.conf, which the Managed
    strategy treats as drift; on EKS, a pinned kubectl exists for the cluster's version, and an
    existing cluster names the control plane's security group that Studio's kubectl reaches (the
    environment's cluster group is on a new cluster's control plane only)."""
    if not config.studio.enabled:
        return
    if config.orchestrator == "slurm":
        strategy = config.cluster.slurm.config_strategy
        at = "cluster.slurm.config_strategy"
        if strategy == "Managed":
            yield Finding(
                Level.ERROR,
                at,
                "Studio's Slurm client signs in with a per-user token (auth/jwt), which adds "
                "AuthAltTypes to slurm.conf; under Managed that edit is drift and every cluster "
                "update fails",
                "set cluster.slurm.config_strategy: Merge",
            )
        elif strategy == "Overwrite":
            yield Finding(
                Level.WARNING,
                at,
                "Overwrite drops the auth/jwt lines from slurm.conf at each cluster update; "
                "Studio's Slurm commands fail until the controller's timer puts them back "
                "(within 15 minutes)",
                "use Merge",
            )
        return
    eks = config.cluster.eks
    if eks.existing_cluster_name is not None and eks.existing_cluster_security_group_id is None:
        yield Finding(
            Level.ERROR,
            "cluster.eks.existing_cluster_security_group_id",
            f"Studio's kubectl needs HTTPS to the API endpoint of {eks.existing_cluster_name!r}, "
            "and hyperpod-kit does not know which security group its control plane carries "
            "(the environment's cluster security group is on a new cluster's control plane "
            "only, so a rule there would open nothing)",
            "set cluster.eks.existing_cluster_security_group_id to the cluster's security "
            f"group (aws eks describe-cluster --name {eks.existing_cluster_name} --query "
            "cluster.resourcesVpcConfig.clusterSecurityGroupId), or leave Studio off",
        )
    version = eks.kubernetes_version
    if kubectl_version(version) is None:
        yield Finding(
            Level.ERROR,
            "cluster.eks.kubernetes_version",
            f"no pinned kubectl for Kubernetes {version} (table of "
            f"{', '.join(KUBECTL_VERSIONS)}, checked {KUBECTL_CHECKED})",
            "use a version of the table, or add the conda-forge kubernetes-client build for it "
            "to KUBECTL_VERSIONS in hyperpod_kit/config/kubectl.py",
        )


@validator("studio-instance-types", area="studio")
def check_instance_types(config: EnvironmentConfig) -> Iterator[Finding]:
    """The instance type spaces start on is one users may use."""
    studio = config.studio
    if not studio.enabled:
        return
    if studio.default_instance_type not in studio.instance_types:
        yield Finding(
            Level.ERROR,
            "studio.default_instance_type",
            f"{studio.default_instance_type} is not in studio.instance_types, so no space could "
            "start on it",
            f"add {studio.default_instance_type} to studio.instance_types",
        )
