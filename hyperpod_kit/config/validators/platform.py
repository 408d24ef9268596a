"""The cluster features HyperPod grew after its launch (docs/platform.md): continuous provisioning,
Karpenter autoscaling, capacity (flexible types, spot, minimum counts, training plans per group),
AMI pinning and patching, Kubernetes labels and taints, tiered checkpointing, deep health checks and
lifecycle stages as CloudFormation carries them, per-group network and volume settings.

Each rule is one the service (or CloudFormation's schema) would otherwise apply at deploy time, half
way through; where the rule comes from the developer guide rather than the API model it says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hyperpod_kit.config.derived import continuous_provisioning, job_group
from hyperpod_kit.config.facts import (
    eks_only,
    instance_type,
    limit,
    limits_checked,
    orchestrator_rules_checked,
)
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.kubernetes_names import (
    dns1035_label,
    dns1123_label,
    dns1123_subdomain,
    label_value,
    qualified_name,
    taint_effect,
)
from hyperpod_kit.config.pins import incompatible, unlisted_versions
from hyperpod_kit.config.schema import EnvironmentConfig, InstanceGroupConfig, RollingDeployment
from hyperpod_kit.config.validators.registry import validator
from hyperpod_kit.naming import fsx_volume_name, priority_class_label_value

GROUPS = "cluster.instance_groups"
# Label and taint prefixes a user may not set on nodes: Kubernetes' own, and HyperPod's (it
# writes sagemaker.amazonaws.com/node-health-status and friends itself).
RESERVED_K8S_PREFIXES = ("kubernetes.io/", "k8s.io/", "sagemaker.amazonaws.com/")
_CRON = re.compile(r"^cron\((?P<fields>[^()]+)\)$")


def _at(i: int, key: str) -> str:
    return f"{GROUPS}[{i}].{key}"


def _groups(config: EnvironmentConfig) -> Iterator[tuple[int, InstanceGroupConfig]]:
    return enumerate(config.cluster.instance_groups)


@validator("group-instance-types", area="cluster")
def check_group_types(config: EnvironmentConfig) -> Iterator[Finding]:
    """A group names its type once: `instance_type`, or `instance_types` for a flexible group
    (priority order). A flexible group's types are alike where it matters: all accelerated or
    none (deep health checks and the trainer), and the job's group alike in GPUs and EFA (one
    rank per GPU, one request of EFA interfaces)."""
    job = job_group(config)
    for i, g in _groups(config):
        if g.instance_type is None and g.instance_types is None:
            yield Finding(
                Level.ERROR,
                f"{GROUPS}[{i}]",
                f"group {g.name!r} names no instance type",
                "add instance_type (like ml.p5.48xlarge), or instance_types for a flexible group",
            )
            continue
        if g.instance_type is not None and g.instance_types is not None:
            yield Finding(
                Level.ERROR,
                _at(i, "instance_types"),
                "instance_type and instance_types are exclusive (InstanceType and "
                "InstanceRequirements)",
                "keep instance_types for a flexible group, or instance_type for one type",
            )
            continue
        if g.instance_types is None:
            continue
        if len(g.instance_types) == 1:
            yield Finding(
                Level.WARNING,
                _at(i, "instance_types"),
                "a flexible group of one type",
                f"write instance_type: {g.instance_types[0]}",
            )
        known = [(t, f) for t in g.instance_types if (f := instance_type(t)) is not None]
        if len({f.accelerated for _, f in known}) > 1:
            cpu = [t for t, f in known if not f.accelerated]
            yield Finding(
                Level.ERROR,
                _at(i, "instance_types"),
                f"the group mixes accelerated types with CPU types ({', '.join(cpu)}): deep "
                "health checks and jobs would meet nodes that cannot run them",
                "keep a flexible group's types all accelerated or all CPU",
            )
        elif g is job:
            # one nproc-per-node, and one request of EFA devices per pod
            shapes = {(f.gpus, f.efa_interfaces or 0) for _, f in known}
            if len(shapes) > 1:
                listing = ", ".join(
                    f"{t} ({f.gpus} GPUs, {f.efa_interfaces or 0} EFA interfaces)" for t, f in known
                )
                yield Finding(
                    Level.ERROR,
                    _at(i, "instance_types"),
                    f"the job runs on this group, whose types differ in GPUs or EFA ({listing}): "
                    "a job has one number of ranks per node and of EFA interfaces",
                    "keep the job's group to types of the same GPU count and EFA, or run the job "
                    "on another group (trainer.job.instance_group)",
                )


@validator("node-provisioning", area="cluster")
def check_node_provisioning(config: EnvironmentConfig) -> Iterator[Finding]:
    """With continuous provisioning HyperPod takes only the Merge Slurm strategy and refuses an
    explicit `SlurmConfigStrategy` (facts-hyperpod.md §3, §7)."""
    strategy = config.cluster.slurm.config_strategy
    if continuous_provisioning(config) and config.orchestrator == "slurm" and strategy is not None:
        yield Finding(
            Level.ERROR,
            "cluster.slurm.config_strategy",
            f"with continuous provisioning HyperPod refuses SlurmConfigStrategy ({strategy}); "
            "it merges the API's partitions with manual edits (Merge)",
            "leave config_strategy out",
        )


@validator("autoscaling", area="cluster")
def check_autoscaling(config: EnvironmentConfig) -> Iterator[Finding]:
    """Karpenter autoscaling is HyperPod's on EKS, built on continuous provisioning, with
    automatic node recovery and HyperPod's health-monitoring agent 1.0.742.0_1.0.241.0 or newer
    (the HyperPod EKS autoscaling guide's prerequisites)."""
    if not config.cluster.autoscaling.enabled:
        return
    at = "cluster.autoscaling.enabled"
    if config.orchestrator != "eks":
        yield Finding(
            Level.ERROR, at, "autoscaling (Karpenter) is for EKS clusters", "remove autoscaling"
        )
        return
    if not continuous_provisioning(config):
        yield Finding(
            Level.ERROR,
            at,
            "autoscaling needs continuous provisioning",
            "set cluster.node_provisioning: continuous",
        )
    if config.cluster.node_recovery != "Automatic":
        yield Finding(
            Level.ERROR,
            at,
            "autoscaling needs automatic node recovery",
            "set cluster.node_recovery: Automatic",
        )
    eks = config.cluster.eks
    if eks.existing_cluster_name is None and eks.helm_chart is None:
        yield Finding(
            Level.ERROR,
            at,
            "autoscaling needs HyperPod's health-monitoring agent (1.0.742.0_1.0.241.0 or "
            "newer), which HyperPod's Helm chart installs, and no chart is given",
            "set cluster.eks.helm_chart to a folder with the chart (docs/eks.md)",
        )
    for i, g in _groups(config):
        if g.instance_count > 0:
            yield Finding(
                Level.INFO,
                _at(i, "instance_count"),
                f"Karpenter scales the groups its HyperpodNodeClass names down to 0 when they "
                f"start with nodes ({g.instance_count} here)",
                "start the groups Karpenter manages at instance_count: 0",
            )


@validator("tiered-checkpointing", area="cluster")
def check_tiered_checkpointing(config: EnvironmentConfig) -> Iterator[Finding]:
    """Managed tiered checkpointing needs an EKS cluster and 20-100% of node memory (the
    developer guide's range; the API model allows 0-100). The bundled trainer does not use it."""
    tiered = config.cluster.tiered_checkpointing
    if not tiered.enabled:
        if tiered.memory_percent is not None:
            yield Finding(
                Level.WARNING,
                "cluster.tiered_checkpointing.memory_percent",
                "memory_percent is set, but tiered checkpointing is off",
                "set enabled: true, or remove memory_percent",
            )
        return
    if config.orchestrator != "eks":
        yield Finding(
            Level.ERROR,
            "cluster.tiered_checkpointing.enabled",
            "managed tiered checkpointing is for EKS clusters (its guide's prerequisite)",
            "remove tiered_checkpointing, or use orchestrator: eks",
        )
    least = limit("tiered_checkpointing_min_memory_percent")
    if tiered.memory_percent is not None and tiered.memory_percent < least:
        yield Finding(
            Level.ERROR,
            "cluster.tiered_checkpointing.memory_percent",
            f"{tiered.memory_percent}% is below the {least}% HyperPod allocates at least "
            f"(table checked {limits_checked()})",
            f"use {least} to 100",
        )
    yield Finding(
        Level.WARNING,
        "cluster.tiered_checkpointing.enabled",
        "the bundled trainer writes its checkpoints with PyTorch DCP to FSx and does not use "
        "AWS's checkpointing library: the memory set aside on each node stays unused by it",
        "keep it for jobs of your own that use amzn-sagemaker-checkpointing, or turn it off",
    )


@validator("group-capacity", area="cluster")
def check_capacity(config: EnvironmentConfig) -> Iterator[Finding]:
    """Spot capacity and training plans are exclusive (a plan reserves capacity); a controller
    or login node on spot takes the cluster down with it; a minimum count is at most the count."""
    for i, g in _groups(config):
        if g.min_instance_count is not None and g.min_instance_count > g.instance_count:
            yield Finding(
                Level.ERROR,
                _at(i, "min_instance_count"),
                f"{g.min_instance_count} is more than the group's {g.instance_count} instances",
                f"use at most {g.instance_count}",
            )
        if g.capacity != "spot":
            continue
        if g.training_plan_arn is not None:
            yield Finding(
                Level.ERROR,
                _at(i, "capacity"),
                "spot capacity and a training plan are exclusive: the plan is reserved capacity",
                "remove capacity: spot, or the group's training_plan_arn",
            )
        if g.role in ("controller", "login"):
            yield Finding(
                Level.ERROR if g.role == "controller" else Level.WARNING,
                _at(i, "capacity"),
                f"a {g.role} node on spot capacity can be reclaimed at any time"
                + (
                    ": slurmctld and every running job go with it" if g.role == "controller" else ""
                ),
                "keep controller and login groups on on-demand capacity",
            )


@validator("ami-pinning", area="cluster")
def check_ami(config: EnvironmentConfig) -> Iterator[Finding]:
    """A release version pins HyperPod's own AMI: it means nothing with an AMI of your own."""
    for i, g in _groups(config):
        if g.image_release_version is not None and g.image_id not in (None, "default"):
            yield Finding(
                Level.ERROR,
                _at(i, "image_release_version"),
                f"image_release_version pins HyperPod's AMI, and the group runs its own "
                f"({g.image_id})",
                "keep one: image_release_version, or image_id",
            )


def _rolling(
    config: EnvironmentConfig, at: str, rolling: RollingDeployment | None
) -> Iterator[Finding]:
    if rolling is None:
        return
    if rolling.batch_unit == "percent":
        for key, value in (
            ("batch_size", rolling.batch_size),
            ("rollback_batch_size", rolling.rollback_batch_size),
        ):
            if value is not None and value > 100:
                yield Finding(
                    Level.ERROR,
                    f"{at}.{key}",
                    f"{value}% is more than the whole group",
                    "use 1-100",
                )
    if rolling.rollback_on_alarms and not config.monitoring.enabled:
        yield Finding(
            Level.ERROR,
            f"{at}.rollback_on_alarms",
            "the update rolls back on the monitoring stack's health alarms, and monitoring is off",
            "set monitoring.enabled: true, or rollback_on_alarms: false",
        )


@validator("ami-updates", area="cluster")
def check_updates(config: EnvironmentConfig) -> Iterator[Finding]:
    """Scheduled AMI updates and patches: a cron expression of six fields, batches within the
    group, and alarms to roll back on that exist (batches on EKS only: `ami-updates-eks-only`)."""
    batches = config.orchestrator == "eks"
    for i, g in _groups(config):
        if g.ami_updates is not None:
            at = _at(i, "ami_updates")
            m = _CRON.match(g.ami_updates.schedule)
            fields = m["fields"].split() if m else []
            if len(fields) != 6:
                yield Finding(
                    Level.ERROR,
                    f"{at}.schedule",
                    f"{g.ami_updates.schedule!r} is not a cron expression of six fields "
                    "(minutes hours day-of-month month day-of-week year)",
                    "like cron(0 3 ? * SUN *): 03:00 UTC every Sunday",
                )
            if batches:
                yield from _rolling(config, f"{at}.deployment", g.ami_updates.deployment)
        if g.auto_patch is not None and batches:
            yield from _rolling(config, _at(i, "auto_patch.deployment"), g.auto_patch.deployment)


@validator("auto-patch-deployment", area="cluster")
def check_auto_patch_deployment(config: EnvironmentConfig) -> Iterator[Finding]:
    """A patch deployment (batches, waits, rollback) is for rolling patches: the API model says
    `ClusterAutoPatchConfig.DeploymentConfig` is "only applicable when using a rolling patching
    strategy", and when_all_idle (WhenAllIdle) patches every node of the group at once, when none
    runs a job (prose_rules.json). when_idle patches node by node as each goes idle."""
    for i, g in _groups(config):
        patch = g.auto_patch
        if patch is not None and patch.strategy == "when_all_idle" and patch.deployment:
            yield Finding(
                Level.WARNING,
                _at(i, "auto_patch.deployment"),
                "when_all_idle patches the whole group at once, once no node runs a job; a "
                "deployment (batches, waits, rollback) applies only to rolling patches",
                "remove auto_patch.deployment, or use strategy: when_idle",
            )


@validator("ami-updates-eks-only", area="cluster")
def check_ami_updates_eks_only(config: EnvironmentConfig) -> Iterator[Finding]:
    """A Slurm cluster pins no HyperPod AMI release and updates a group's AMI all at once: AWS
    offers `ImageReleaseVersion` and updates in batches (`DeploymentConfig`) on EKS clusters
    only (facts/orchestrator_rules.json, with the words of each source)."""
    if config.orchestrator != "slurm":
        return
    release, batches = eks_only("image_release_version"), eks_only("deployment")
    checked = f"table checked {orchestrator_rules_checked()}"
    for i, g in _groups(config):
        if g.image_release_version is not None:
            yield Finding(
                Level.ERROR,
                _at(i, "image_release_version"),
                "a Slurm cluster takes no AMI release: ImageReleaseVersion is "
                f'"{release["quote"]}" ({release["cite"]}; {checked})',
                "remove it: HyperPod gives a Slurm group its latest AMI when the group is created, "
                "and `aws sagemaker update-cluster-software` moves it to a newer one "
                "(docs/platform.md, AMI pinning and patching)",
            )
        written = [
            (key, hint)
            for key, section, hint in (
                ("ami_updates", g.ami_updates, "the schedule alone updates the whole group"),
                ("auto_patch", g.auto_patch, "the strategy alone decides when nodes are patched"),
            )
            if section is not None
            and "deployment" in section.model_fields_set
            and section.deployment is not None
        ]
        for key, hint in written:
            yield Finding(
                Level.ERROR,
                _at(i, f"{key}.deployment"),
                f"a Slurm cluster updates a group's AMI all at once, not in batches: "
                f'"{batches["quote"]}" ({batches["cite"]}; {checked})',
                f"remove {key}.deployment: {hint}",
            )


@validator("kubernetes-labels", area="cluster")
def check_kubernetes(config: EnvironmentConfig) -> Iterator[Finding]:
    """Labels and taints are for EKS; Kubernetes' own prefixes and HyperPod's are not ours to
    set; a taint is set once per key and effect."""
    for i, g in _groups(config):
        k8s = g.kubernetes
        if k8s is None:
            continue
        at = _at(i, "kubernetes")
        if config.orchestrator != "eks":
            yield Finding(
                Level.ERROR, at, "labels and taints are for EKS clusters", "remove kubernetes"
            )
            continue
        for key in k8s.labels:
            if key.startswith(RESERVED_K8S_PREFIXES):
                yield Finding(
                    Level.ERROR,
                    f"{at}.labels[{key}]",
                    f"{key!r} is in a prefix Kubernetes or HyperPod keeps for itself",
                    "use a prefix of your own, like example.com/",
                )
        seen: dict[tuple[str, str], int] = {}
        for j, taint in enumerate(k8s.taints):
            if taint.key.startswith(RESERVED_K8S_PREFIXES):
                yield Finding(
                    Level.ERROR,
                    f"{at}.taints[{j}].key",
                    f"{taint.key!r} is in a prefix Kubernetes or HyperPod keeps for itself",
                    "use a prefix of your own, like example.com/",
                )
            first = seen.setdefault((taint.key, taint.effect), j)
            if first != j:
                yield Finding(
                    Level.ERROR,
                    f"{at}.taints[{j}]",
                    f"taint {taint.key}:{taint.effect} is also taints[{first}]",
                    "set each key and effect once",
                )


@validator("kubernetes-names", area="cluster")
def check_kubernetes_names(config: EnvironmentConfig) -> Iterator[Finding]:
    """Every value that becomes a Kubernetes name follows Kubernetes' syntax
    (config/kubernetes_names.py): a group's label and taint keys are qualified names (a prefix of
    at most 253, a name of at most 63), their values label values, a taint's effect one of
    Kubernetes'; the job's name a DNS-1035 label, its namespace a DNS-1123 label, the volume
    named after it a DNS-1123 subdomain; a priority class's Kueue label value (`<name>-priority`)
    a label value. A team's namespace and queue are task-governance's check, by the same rules."""
    if config.orchestrator != "eks":
        return
    for i, g in _groups(config):
        if g.kubernetes is None:
            continue
        at = _at(i, "kubernetes")
        for key, value in g.kubernetes.labels.items():
            yield from _k8s(f"{at}.labels[{key}]", f"label key {key!r}", qualified_name(key))
            yield from _k8s(
                f"{at}.labels[{key}]", f"the value {value!r} of label {key!r}", label_value(value)
            )
        for j, taint in enumerate(g.kubernetes.taints):
            t = f"{at}.taints[{j}]"
            yield from _k8s(f"{t}.key", f"taint key {taint.key!r}", qualified_name(taint.key))
            if taint.value is not None:
                yield from _k8s(
                    f"{t}.value", f"taint value {taint.value!r}", label_value(taint.value)
                )
            yield from _k8s(
                f"{t}.effect", f"taint effect {taint.effect!r}", taint_effect(taint.effect)
            )
    job = config.trainer.job
    yield from _k8s("trainer.job.name", f"the job's name {job.name!r}", dns1035_label(job.name))
    namespace = dns1123_label(job.namespace)
    yield from _k8s("trainer.job.namespace", f"namespace {job.namespace!r}", namespace)
    volume = fsx_volume_name(config.name, job.namespace)
    if namespace is None:
        yield from _k8s(
            "trainer.job.namespace",
            f"the FSx volume named after it, {volume!r},",
            dns1123_subdomain(volume),
        )
    for k, pc in enumerate(config.cluster.eks.task_governance.priority_classes):
        kueue = priority_class_label_value(pc.name)
        yield from _k8s(
            f"cluster.eks.task_governance.priority_classes[{k}].name",
            f"the class's Kueue name {kueue!r} (a label value of its jobs)",
            label_value(kueue) or dns1123_subdomain(kueue),
        )


def _k8s(at: str, what: str, why: str | None) -> Iterator[Finding]:
    if why is not None:
        yield Finding(
            Level.ERROR,
            at,
            f"{what} is not a Kubernetes name: {why}",
            "follow Kubernetes' syntax (docs/platform.md, Kubernetes names)",
        )


@validator("deep-health-checks-api", area="cluster")
def check_deep_health_check_names(config: EnvironmentConfig) -> Iterator[Finding]:
    """MultiNodeTrainingValidation is in the API's model, and CloudFormation's schema refuses it
    (cfn-lint E3030): a template cannot set it today."""
    for i, g in _groups(config):
        for j, check in enumerate(g.deep_health_checks or []):
            if check == "MultiNodeTrainingValidation":
                yield Finding(
                    Level.ERROR,
                    _at(i, f"deep_health_checks[{j}]"),
                    "CloudFormation cannot set MultiNodeTrainingValidation (its schema allows "
                    "InstanceStress and InstanceConnectivity only)",
                    "remove it here; run it after deploy with aws sagemaker update-cluster "
                    "(docs/platform.md)",
                )


@validator("group-network", area="cluster")
def check_group_network(config: EnvironmentConfig) -> Iterator[Finding]:
    """An EFA interface type only on EFA types; subnets of the group's own only in an existing
    VPC (a new VPC has one private subnet, the cluster's); security groups only with them."""
    for i, g in _groups(config):
        net = g.network
        if net is None:
            continue
        at = _at(i, "network")
        if net.interface_type is not None:
            plain = [
                t for t in g.types if (f := instance_type(t)) is not None and not f.efa_interfaces
            ]
            if plain:
                yield Finding(
                    Level.ERROR,
                    f"{at}.interface_type",
                    f"{', '.join(plain)} has no EFA, so no EFA interface type",
                    "remove interface_type, or use an EFA type",
                )
        if net.security_group_ids and not net.subnet_ids:
            yield Finding(
                Level.ERROR,
                f"{at}.security_group_ids",
                "a group's own security groups come with its own subnets (OverrideVpcConfig)",
                "add subnet_ids, or remove security_group_ids",
            )
        if net.subnet_ids and config.network.existing_vpc is None:
            yield Finding(
                Level.ERROR,
                f"{at}.subnet_ids",
                "the new VPC hyperpod-kit creates has one private subnet, the cluster's: there "
                "is no other subnet of it to name",
                "remove subnet_ids, or use network.existing_vpc",
            )


@validator("volume-keys", area="cluster")
def check_volume_keys(config: EnvironmentConfig) -> Iterator[Finding]:
    """A node volume's key is in the environment's region (and account, when it is given)."""
    for i, g in _groups(config):
        for key in ("ebs_kms_key_arn", "root_volume_kms_key_arn"):
            arn = getattr(g, key)
            if arn is None:
                continue
            _, _, _, region, account, _ = arn.split(":", 5)
            if region != config.region or (config.account and account != config.account):
                yield Finding(
                    Level.ERROR,
                    _at(i, key),
                    f"the key is in {account}/{region}, the environment in "
                    f"{config.account or 'its account'}/{config.region}",
                    "use a key of the environment's region and account",
                )


@validator("version-compatibility", area="cluster")
def check_compatibility(config: EnvironmentConfig) -> Iterator[Finding]:
    """Pinned versions and settings known to break together (facts/compatibility.json, each row
    with its public report); the lock's values are checked again once applied."""
    yield from incompatible(config)


@validator("version-tables", area="cluster")
def check_version_tables(config: EnvironmentConfig) -> Iterator[Finding]:
    """Versions from sets AWS changes, against their dated tables: an EKS add-on no newer than
    the latest EKS listed for the cluster's minor, kube-proxy of the cluster's own minor
    (`eks_addons.json`); a Grafana major Managed Grafana documents (`grafana_versions.json`).
    The lock's values are checked the same way when the lock is applied."""
    yield from unlisted_versions(config)
