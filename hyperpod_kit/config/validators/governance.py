"""HyperPod task governance on EKS (docs/governance.md): the add-on, the cluster policy, a compute
allocation per team, and the job that runs in a team's namespace and queue.

The names are HyperPod's and Kubernetes' (`facts/task_governance.json`, with sources): a team's
namespace is `hyperpod-ns-<team>` (so a team name is an RFC 1123 label), its queue
`hyperpod-ns-<team>-localqueue` (a label value every job carries: at most 63 characters), a
priority class `<name>-priority`. A quota is whole instances or accelerators of a type some worker
group has, no more than the groups hold; HyperPod's guide asks that the teams' quotas together
stay within the cluster. What the API model constrains field by field (list lengths, weights,
`FairShareWeight`) is `api-constraints`' (rows in `api_constraints.json`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hyperpod_kit.config.derived import (
    governed_teams,
    job_group,
    task_governance,
    team_of,
    worker_groups,
)
from hyperpod_kit.config.facts import instance_type, task_governance_facts
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.kubernetes_names import (
    DNS1123_LABEL_MAX,
    LABEL_VALUE_MAX,
    dns1123_label,
    label_value,
)
from hyperpod_kit.config.schema import EnvironmentConfig, TeamConfig, TeamQuotaConfig
from hyperpod_kit.config.validators.registry import validator
from hyperpod_kit.naming import (
    compute_quota_name,
    scheduler_config_name,
    team_local_queue,
    team_namespace,
)

AT = "cluster.eks.task_governance"
NAME_MAX = 63  # ComputeQuota and ClusterSchedulerConfig Name (the API model)
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


def _minor(version: str) -> tuple[int, int]:
    m = _VERSION.match(version)
    return (int(m[1]), int(m[2])) if m else (0, 0)


@validator("task-governance", area="cluster")
def check_task_governance(config: EnvironmentConfig) -> Iterator[Finding]:
    """Task governance is HyperPod's for EKS, on Kubernetes 1.30 or newer; its priority classes
    are named once; every team becomes a namespace (an RFC 1123 label) and a queue (a label value
    of at most 63 characters); the names of its compute allocations and cluster policy fit the
    API's 63 characters; a team's default priority is one of the classes."""
    tg = config.cluster.eks.task_governance
    facts = task_governance_facts()
    if not tg.enabled:
        written = sorted(tg.model_fields_set - {"enabled"})
        if config.cluster.eks.addons.task_governance is not None:
            written.append("the add-on's version (cluster.eks.addons.task_governance)")
        if written:
            yield Finding(
                Level.WARNING,
                AT,
                f"task governance settings are written ({', '.join(written)}) while task "
                "governance is off: they are ignored",
                "set cluster.eks.task_governance.enabled: true, or remove them",
            )
        return
    at = f"{AT}.enabled"
    if config.orchestrator != "eks":
        yield Finding(
            Level.ERROR,
            at,
            "task governance is HyperPod's for EKS clusters (an EKS add-on and Kueue); Slurm "
            "shares a cluster through accounts and fair share (teams)",
            "remove cluster.eks.task_governance, or use orchestrator: eks",
        )
        return
    needed = str(facts["min_kubernetes_version"])
    eks = config.cluster.eks
    if eks.existing_cluster_name is None:
        if _minor(eks.kubernetes_version) < _minor(needed):
            yield Finding(
                Level.ERROR,
                "cluster.eks.kubernetes_version",
                f"task governance needs Kubernetes {needed} or newer; the cluster runs "
                f"{eks.kubernetes_version}",
                f'use kubernetes_version: "{needed}" or newer',
            )
    else:
        yield Finding(
            Level.INFO,
            at,
            f"task governance needs the existing cluster {eks.existing_cluster_name!r} to run "
            f"Kubernetes {needed} or newer and no Kueue of its own (the add-on brings Kueue "
            f"{facts['default_addon_kueue']}); not checked offline",
            "check with `kubectl version` and `kubectl get deploy -A | grep kueue`",
        )
    yield from _priority_classes(config)
    yield from _names(config)
    if not config.teams:
        yield Finding(
            Level.INFO,
            at,
            "no teams: the cluster policy applies, but no compute allocation, team namespace or "
            "queue is made, and jobs run outside task governance",
            "add teams (with their quota) to share the cluster",
        )


def _priority_classes(config: EnvironmentConfig) -> Iterator[Finding]:
    classes = config.cluster.eks.task_governance.priority_classes
    first: dict[str, int] = {}
    for i, pc in enumerate(classes):
        j = first.setdefault(pc.name, i)
        if j != i:
            yield Finding(
                Level.ERROR,
                f"{AT}.priority_classes[{i}].name",
                f"priority class {pc.name!r} is also priority_classes[{j}]",
                "name each class once",
            )
    names = [pc.name for pc in classes]
    for i, team in enumerate(config.teams):
        if team.priority is not None and team.priority not in names:
            yield _unknown_class(f"teams[{i}].priority", team.priority, names)


def _unknown_class(at: str, name: str, names: list[str]) -> Finding:
    return Finding(
        Level.ERROR,
        at,
        f"{name!r} is not a priority class of cluster.eks.task_governance.priority_classes",
        f"use one of {', '.join(names)}"
        if names
        else "add it to cluster.eks.task_governance.priority_classes",
    )


def _names(config: EnvironmentConfig) -> Iterator[Finding]:
    longest = int(task_governance_facts()["team_name_max_length"])
    cluster = config.cluster_name
    policy = scheduler_config_name(cluster)
    if len(policy) > NAME_MAX:
        yield Finding(
            Level.ERROR,
            "cluster.name" if config.cluster.name is not None else "name",
            f"the cluster policy is named {policy!r}, {len(policy)} characters; the API takes "
            f"at most {NAME_MAX}",
            "use a shorter cluster name",
        )
    for i, team in enumerate(config.teams):
        at = f"teams[{i}].name"
        # The namespace is a DNS-1123 label (the registry's TeamName says so), the queue a label
        # value of every job of the team (Kubernetes' rules: config/kubernetes_names.py).
        namespace, queue = team_namespace(team.name), team_local_queue(team.name)
        if dns1123_label(namespace) is not None and len(namespace) <= DNS1123_LABEL_MAX:
            yield Finding(
                Level.ERROR,
                at,
                f"{team.name!r} cannot name the team's namespace {namespace!r}: "
                f"{dns1123_label(namespace)}",
                "rename the team with hyphens instead of underscores",
            )
        elif label_value(queue) is not None or dns1123_label(namespace) is not None:
            yield Finding(
                Level.ERROR,
                at,
                f"{team.name!r} has {len(team.name)} characters: the team's queue "
                f"{queue!r}, a label value of its jobs, would pass {LABEL_VALUE_MAX}",
                f"use at most {longest} characters",
            )
        quota = compute_quota_name(cluster, team.name)
        if len(quota) > NAME_MAX:
            yield Finding(
                Level.ERROR,
                at,
                f"the team's compute allocation is named {quota!r}, {len(quota)} characters; "
                f"the API takes at most {NAME_MAX}",
                "use a shorter team or cluster name",
            )


# --- quotas ------------------------------------------------------------------------------------


def _capacity(config: EnvironmentConfig) -> dict[str, int]:
    """Instances of each type the worker groups may hold (a flexible group's count counts for
    each of its types: it may get any of them)."""
    found: dict[str, int] = {}
    for g in worker_groups(config):
        for t in g.types:
            found[t] = found.get(t, 0) + g.instance_count
    return found


def _instances(item: TeamQuotaConfig) -> float | None:
    """The quota item in instances (accelerators as a share of instances); None if unknown."""
    if item.instances is not None:
        return float(item.instances)
    facts = instance_type(item.instance_type)
    if item.accelerators is None or facts is None or not facts.accelerators:
        return None
    return item.accelerators / facts.accelerators


@validator("team-fair-share", area="cluster")
def check_team_fair_share(config: EnvironmentConfig) -> Iterator[Finding]:
    """On EKS a team's fairshare becomes its compute quota's FairShareWeight, which HyperPod
    uses "only when FairShare is enabled" (the API model's ComputeQuotaTarget.FairShareWeight;
    prose_rules.json): a weight written while task_governance.fair_share is off does nothing."""
    tg = config.cluster.eks.task_governance
    if config.orchestrator != "eks" or not tg.enabled or tg.fair_share:
        return
    for i, t in enumerate(config.teams):
        if "fairshare" in t.model_fields_set:
            yield Finding(
                Level.WARNING,
                f"teams[{i}].fairshare",
                f"team {t.name!r} has a fair-share weight ({t.fairshare}), and "
                f"{AT}.fair_share is off: HyperPod uses the weight only with fair share on",
                f"set {AT}.fair_share: true, or remove fairshare",
            )


@validator("team-quotas", area="cluster")
def check_team_quotas(config: EnvironmentConfig) -> Iterator[Finding]:
    """A team's quota names a type some worker group has, in instances or accelerators (one of
    the two), no more than the groups hold; together the teams stay within the cluster
    (HyperPod's guide); a borrow limit goes with borrowing; a team with no quota that does not
    borrow can run nothing. GPU limits are Slurm's."""
    if config.orchestrator != "eks":
        return
    for i, team in enumerate(config.teams):
        if team.gpu_limit is not None:
            yield Finding(
                Level.WARNING,
                f"teams[{i}].gpu_limit",
                "gpu_limit is a Slurm account's GrpTRES: on EKS it is ignored, and a team's "
                "share is its quota",
                "give the team a quota (accelerators of a worker type), and remove gpu_limit",
            )
    if not task_governance(config):
        return
    capacity = _capacity(config)
    totals: dict[str, float] = {}
    for i, team in enumerate(config.teams):
        yield from _team_quota(team, f"teams[{i}]", capacity, totals)
        yield from _team_sharing(team, f"teams[{i}]")
    for itype, total in sorted(totals.items()):
        if total > capacity.get(itype, 0):
            yield Finding(
                Level.WARNING,
                "teams",
                f"the teams are guaranteed {total:g} {itype} instances together; the worker "
                f"groups hold {capacity.get(itype, 0)}: HyperPod's guide asks that the quotas "
                "stay within the cluster's capacity",
                "lower a team's quota, or add instances to the groups",
            )


def _team_quota(
    team: TeamConfig, at: str, capacity: dict[str, int], totals: dict[str, float]
) -> Iterator[Finding]:
    seen: dict[str, int] = {}
    for j, item in enumerate(team.quota):
        where = f"{at}.quota[{j}]"
        k = seen.setdefault(item.instance_type, j)
        if k != j:
            yield Finding(
                Level.ERROR,
                f"{where}.instance_type",
                f"{item.instance_type} is also quota[{k}] of team {team.name!r}",
                "give each type once",
            )
            continue
        if (item.instances is None) == (item.accelerators is None):
            yield Finding(
                Level.ERROR,
                where,
                "a quota item gives instances or accelerators, one of the two",
                "keep instances (whole nodes) or accelerators (GPUs of them)",
            )
            continue
        held = capacity.get(item.instance_type)
        if held is None:
            types = ", ".join(sorted(capacity)) or "none"
            yield Finding(
                Level.ERROR,
                f"{where}.instance_type",
                f"{item.instance_type} is not the type of a worker group (the cluster has {types})",
                f"use one of {types}",
            )
            continue
        facts = instance_type(item.instance_type)
        if item.accelerators is not None and facts is not None:
            if not facts.accelerators:
                yield Finding(
                    Level.ERROR,
                    f"{where}.accelerators",
                    f"{item.instance_type} has no accelerators",
                    "give the quota in instances",
                )
                continue
            most = held * facts.accelerators
            if item.accelerators > most:
                yield Finding(
                    Level.ERROR,
                    f"{where}.accelerators",
                    f"{item.accelerators} accelerators of {item.instance_type}: the worker "
                    f"groups hold {most} ({held} x {facts.accelerators})",
                    f"use at most {most}",
                )
                continue
        if item.instances is not None and item.instances > held:
            yield Finding(
                Level.ERROR,
                f"{where}.instances",
                f"{item.instances} {item.instance_type} instances: the worker groups hold {held}",
                f"use at most {held}",
            )
            continue
        share = _instances(item)
        if share is not None:
            totals[item.instance_type] = totals.get(item.instance_type, 0.0) + share


def _team_sharing(team: TeamConfig, at: str) -> Iterator[Finding]:
    if team.borrow_limit_percent is not None and team.sharing != "lend_and_borrow":
        yield Finding(
            Level.WARNING,
            f"{at}.borrow_limit_percent",
            f"a borrow limit with sharing: {team.sharing} is ignored (the team does not borrow)",
            "set sharing: lend_and_borrow, or remove borrow_limit_percent",
        )
    guaranteed = any((q.instances or 0) > 0 or (q.accelerators or 0) > 0 for q in team.quota)
    if not guaranteed and team.sharing != "lend_and_borrow":
        yield Finding(
            Level.WARNING,
            f"{at}.sharing",
            f"team {team.name!r} has no quota and does not borrow: its jobs are never admitted",
            "give it a quota, or set sharing: lend_and_borrow",
        )


# --- the job -----------------------------------------------------------------------------------


@validator("job-team", area="trainer")
def check_job_team(config: EnvironmentConfig) -> Iterator[Finding]:
    """The job's team and priority class exist; under task governance the job runs in its team's
    namespace and queue (a job of no team runs outside it, said aloud); a job that needs more of
    its group's type than its team is guaranteed is admitted only while the team borrows."""
    job = config.trainer.job
    at = "trainer.job"
    if not task_governance(config):
        written = [k for k in ("team", "priority") if getattr(job, k) is not None]
        if written:
            yield Finding(
                Level.WARNING,
                f"{at}.{written[0]}",
                f"trainer.job.{' and '.join(written)} {'is' if len(written) == 1 else 'are'} "
                "for EKS task governance: ignored here",
                "turn on cluster.eks.task_governance, or remove them",
            )
        return
    teams = governed_teams(config)
    names = [t.name for t in teams]
    if job.team is not None and job.team not in names:
        yield Finding(
            Level.ERROR,
            f"{at}.team",
            f"{job.team!r} is not one of the environment's teams",
            f"use one of {', '.join(names)}" if names else "add the team to teams",
        )
        return
    classes = [pc.name for pc in config.cluster.eks.task_governance.priority_classes]
    if job.priority is not None and job.priority not in classes:
        yield _unknown_class(f"{at}.priority", job.priority, classes)
    own = team_of(config, job.user)
    if job.team is not None and own is not None and own.name != job.team:
        yield Finding(
            Level.WARNING,
            f"{at}.team",
            f"the job runs as {job.user!r}, a member of team {own.name!r}, in team "
            f"{job.team!r}'s namespace and quota",
            f"set team: {own.name}, or run it as a member of {job.team}",
        )
    team = next((t for t in teams if t.name == job.team), None) if job.team else own
    if team is None:
        if teams:
            yield Finding(
                Level.WARNING,
                at,
                f"the job belongs to no team: it runs in {job.namespace!r} outside task "
                "governance (no queue, no quota, no priority)",
                "set trainer.job.team, or trainer.job.user to a team's member",
            )
        return
    if "namespace" in job.model_fields_set and job.namespace != team_namespace(team.name):
        yield Finding(
            Level.INFO,
            f"{at}.namespace",
            f"the job of team {team.name!r} runs in the team's namespace "
            f"{team_namespace(team.name)!r}; {job.namespace!r} keeps its FSx claim for jobs "
            "outside task governance",
            "remove trainer.job.namespace if no job runs there",
        )
    yield from _job_fits(config, team)


def _job_fits(config: EnvironmentConfig, team: TeamConfig) -> Iterator[Finding]:
    group = job_group(config)
    if group is None:
        return
    nodes = config.trainer.job.nodes
    guaranteed = sum(
        share
        for item in team.quota
        if item.instance_type in group.types and (share := _instances(item)) is not None
    )
    if nodes <= guaranteed:
        return
    what = f"the job asks for {nodes} {group.primary_type} nodes; team {team.name!r} is " + (
        f"guaranteed {guaranteed:g}"
    )
    if team.sharing != "lend_and_borrow":
        yield Finding(
            Level.ERROR,
            "trainer.job.nodes",
            f"{what} and does not borrow: Kueue never admits the job",
            f"use at most {int(guaranteed)} nodes, or raise the team's quota",
        )
    else:
        yield Finding(
            Level.INFO,
            "trainer.job.nodes",
            f"{what}: the job is admitted only while it can borrow idle compute, and borrowed "
            "compute is taken back when its team needs it",
            "raise the team's quota to guarantee the job its nodes",
        )
