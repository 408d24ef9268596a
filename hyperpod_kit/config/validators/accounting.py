"""Slurm accounting (docs/accounting.md): the database the environment creates for slurmdbd, its
subnet in a second zone, and the teams that become Slurm accounts.

The database rules come from the API (`AccountingDatabase` only with continuous provisioning) and
HyperPod's guide (AMIs released after a date; no way back to the controller's own database), each
recorded in `facts/accounting.json` with its source; the Aurora versions are the ones
CloudFormation knows (cfn-lint's table), so a version the gate would refuse is refused here first.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network

from hyperpod_kit.config.derived import continuous_provisioning
from hyperpod_kit.config.facts import accounting_facts
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig, NewVpcConfig, TeamConfig
from hyperpod_kit.config.validators.registry import validator

AT = "cluster.slurm.accounting"


@validator("slurm-accounting", area="cluster")
def check_accounting(config: EnvironmentConfig) -> Iterator[Finding]:
    """An accounting database is HyperPod's on Slurm with continuous provisioning; its version is
    one CloudFormation knows, its capacity a range of half ACUs; rotation and `destroy` are said
    aloud (one is not verified with HyperPod's slurmdbd, the other deletes every job record)."""
    acc = config.cluster.slurm.accounting
    facts = accounting_facts()
    if not acc.enabled:
        written = acc.model_fields_set - {"enabled"}
        if written:
            yield Finding(
                Level.WARNING,
                AT,
                f"accounting settings are written ({', '.join(sorted(written))}) while "
                "accounting is off: they are ignored",
                "set enabled: true, or remove them",
            )
        return
    at = f"{AT}.enabled"
    if config.orchestrator != "slurm":
        yield Finding(
            Level.ERROR,
            at,
            "a Slurm accounting database is for Slurm clusters",
            "remove cluster.slurm.accounting, or use orchestrator: slurm",
        )
        return
    if not continuous_provisioning(config):
        yield Finding(
            Level.ERROR,
            at,
            "HyperPod takes an accounting database only on clusters with continuous "
            "provisioning (the API's AccountingDatabase)",
            "set cluster.node_provisioning: continuous",
        )
    version = acc.engine_version
    if version is not None and version not in facts["engine_versions"]:
        yield Finding(
            Level.ERROR,
            f"{AT}.engine_version",
            f"{version} is not an Aurora MySQL 3 version CloudFormation takes (deprecated or "
            f"unknown; table checked {facts['checked']})",
            f"use {facts['default_engine_version']}, or leave engine_version out",
        )
    step = float(facts["capacity"]["step"])
    for key in ("min_capacity", "max_capacity"):
        value = getattr(acc, key)
        if (value / step) != int(value / step):
            yield Finding(
                Level.ERROR,
                f"{AT}.{key}",
                f"{value:g} ACUs is not a multiple of {step:g}",
                f"use {int(value / step) * step:g} or {(int(value / step) + 1) * step:g}",
            )
    if acc.min_capacity > acc.max_capacity:
        yield Finding(
            Level.ERROR,
            f"{AT}.min_capacity",
            f"{acc.min_capacity:g} ACUs is more than max_capacity ({acc.max_capacity:g})",
            f"use at most {acc.max_capacity:g}",
        )
    yield from _said_aloud(config)


def _said_aloud(config: EnvironmentConfig) -> Iterator[Finding]:
    """What an enabled database does that is worth saying: rotation not verified, a destroy
    without snapshot, a name RDS refuses. (The AMI date of `accounting.json` is not checked: a
    Slurm cluster pins no AMI release, `ami-updates-eks-only`; HyperPod gives it its latest.)"""
    acc = config.cluster.slurm.accounting
    if acc.rotation:
        yield Finding(
            Level.WARNING,
            f"{AT}.rotation",
            "whether HyperPod's slurmdbd reads the password again after Secrets Manager rotates "
            "it is not verified: accounting may stop at the first rotation until the "
            "controller is replaced",
            "keep rotation off unless you have checked it on a cluster (then suppress "
            "slurm-accounting)",
        )
    if acc.removal_policy == "destroy":
        yield Finding(
            Level.WARNING,
            f"{AT}.removal_policy",
            "`cdk destroy` deletes the accounting database without a final snapshot: every job "
            "record and the usage fair share is computed from go with it",
            "use retain (the default) or snapshot",
        )
    if "--" in config.name:
        yield Finding(
            Level.ERROR,
            "name",
            f"the accounting database is named {config.name}-slurm-accounting, and RDS refuses "
            "an identifier with two hyphens in a row",
            "use single hyphens in the environment's name",
        )


@validator("accounting-subnets", area="network")
def check_accounting_subnets(config: EnvironmentConfig) -> Iterator[Finding]:
    """A DB subnet group spans two zones while the nodes stay in one: the accounting database
    gets a small subnet of its own in a second zone (new VPC), or subnets named in the existing
    VPC."""
    net = config.network
    vpc = net.new_vpc
    needs = config.orchestrator == "slurm" and config.cluster.slurm.accounting.enabled
    if not needs:
        given = (vpc is not None and vpc.database_subnet_cidr is not None) or (
            net.existing_vpc is not None and net.existing_vpc.database_subnet_ids
        )
        if given or net.database_availability_zone_id is not None:
            yield Finding(
                Level.WARNING,
                "network",
                "database subnet settings are used only with a Slurm accounting database "
                "(cluster.slurm.accounting.enabled); they are ignored",
                "remove them",
            )
        return
    if vpc is None:
        existing = net.existing_vpc
        if existing is not None and not existing.database_subnet_ids:
            yield Finding(
                Level.ERROR,
                "network.existing_vpc.database_subnet_ids",
                "the accounting database's subnet group needs a private subnet in a second zone",
                "add database_subnet_ids: [subnet-...] in another availability zone",
            )
        elif existing is not None and existing.private_subnet_id in existing.database_subnet_ids:
            yield Finding(
                Level.ERROR,
                "network.existing_vpc.database_subnet_ids",
                f"{existing.private_subnet_id} is the cluster's subnet; the subnet group takes "
                "it already and needs one in another zone",
                "name subnets of other availability zones",
            )
        return
    az = net.database_availability_zone_id
    if az is None:
        yield Finding(
            Level.ERROR,
            "network.database_availability_zone_id",
            "the accounting database's subnet group needs a second availability zone",
            "add database_availability_zone_id: another AZ ID of the region",
        )
    elif az == config.availability_zone_id:
        yield Finding(
            Level.ERROR,
            "network.database_availability_zone_id",
            f"{az} is the environment's own zone; a DB subnet group needs subnets in two zones",
            "use another AZ ID of the region",
        )
    at = "network.vpc.database_subnet_cidr"
    cidr = vpc.database_subnet_cidr
    if cidr is None:
        yield Finding(
            Level.ERROR,
            at,
            "the accounting database needs a small private subnet in the second zone",
            f"add database_subnet_cidr: {free_block(vpc, 28)}",
        )
        return
    if not cidr.subnet_of(vpc.cidr):
        yield Finding(
            Level.ERROR,
            at,
            f"{cidr} is not inside the VPC CIDR {vpc.cidr}",
            f"use a free block such as {free_block(vpc, 28)}",
        )
    elif not 16 <= cidr.prefixlen <= 28:
        yield Finding(Level.ERROR, at, f"{cidr} has a /{cidr.prefixlen} prefix", "use a /24 to /28")
    for key, other in _subnets(vpc):
        if cidr.overlaps(other):
            yield Finding(
                Level.ERROR,
                at,
                f"{cidr} overlaps {key} {other}",
                f"use a free block such as {free_block(vpc, 28)}",
            )


def _subnets(vpc: NewVpcConfig) -> list[tuple[str, IPv4Network]]:
    found = [
        ("public_subnet_cidr", vpc.public_subnet_cidr),
        ("private_subnet_cidr", vpc.private_subnet_cidr),
    ]
    if vpc.control_plane_subnet_cidr is not None:
        found.append(("control_plane_subnet_cidr", vpc.control_plane_subnet_cidr))
    return found


def free_block(vpc: NewVpcConfig, prefix: int) -> str:
    """A block of the VPC of that prefix that overlaps none of its other subnets (for hints)."""
    taken = [net for _, net in _subnets(vpc)]
    for block in vpc.cidr.subnets(new_prefix=max(prefix, vpc.cidr.prefixlen)):
        if not any(block.overlaps(t) for t in taken):
            return str(block)
    return f"a free /{prefix} of the VPC"


# What a team says only to EKS task governance (docs/governance.md).
EKS_TEAM_KEYS = ("quota", "priority", "sharing", "borrow_limit_percent", "preempt_own_tasks")


@validator("teams", area="people")
def check_teams(config: EnvironmentConfig) -> Iterator[Finding]:
    """Teams are Slurm accounts, or on EKS the teams of task governance's compute allocations:
    named once (`root` being Slurm's own); their members are people of `users`, each in at most
    one team (their default account, the one place their GPU hours add up; on EKS the team of
    their jobs). On Slurm a person in no team gets no association, and teams without the
    environment's accounting database live in HyperPod's database on the controller."""
    teams = config.teams
    if not teams:
        return
    slurm = config.orchestrator == "slurm"
    if not slurm and not config.cluster.eks.task_governance.enabled:
        yield Finding(
            Level.ERROR,
            "teams",
            "on EKS, teams are task governance's compute allocations, and it is off",
            "turn on cluster.eks.task_governance (docs/governance.md), or remove teams",
        )
        return
    if slurm:
        yield from _eks_keys_on_slurm(teams)
    member_of: dict[str, int] = {}
    yield from _names_and_members(config, member_of, slurm=slurm)
    if not slurm:
        return
    lonely = [u.name for u in config.users if u.name not in member_of]
    if lonely:
        yield Finding(
            Level.WARNING,
            "users",
            f"{', '.join(lonely)} {'is' if len(lonely) == 1 else 'are'} in no team: no Slurm "
            "association is made for them, and where the cluster enforces associations they "
            "cannot submit jobs",
            "add them to a team",
        )
    if not config.cluster.slurm.accounting.enabled:
        yield Finding(
            Level.WARNING,
            "teams",
            "without cluster.slurm.accounting the teams' accounts live in HyperPod's database on "
            "the controller: the controller recreates them after a replacement, but the job "
            "history and usage fair share is computed from are lost with it",
            "turn on cluster.slurm.accounting (continuous provisioning), or suppress teams",
        )


def _eks_keys_on_slurm(teams: list[TeamConfig]) -> Iterator[Finding]:
    for i, team in enumerate(teams):
        written = [k for k in EKS_TEAM_KEYS if k in team.model_fields_set]
        if written:
            yield Finding(
                Level.WARNING,
                f"teams[{i}].{written[0]}",
                f"{', '.join(written)} {'is' if len(written) == 1 else 'are'} for EKS task "
                "governance: a Slurm account has none, so it is ignored",
                "remove them (fairshare and gpu_limit are the Slurm account's)",
            )


def _names_and_members(
    config: EnvironmentConfig, member_of: dict[str, int], *, slurm: bool
) -> Iterator[Finding]:
    """Each team named once (not `root` on Slurm), each member a person of `users` in one team
    (`member_of` gathers person -> team index)."""
    teams = config.teams
    users = {u.name for u in config.users}
    seen: dict[str, int] = {}
    for i, team in enumerate(teams):
        at = f"teams[{i}]"
        if slurm and team.name == "root":
            yield Finding(
                Level.ERROR,
                f"{at}.name",
                "root is Slurm's own account, the parent of every team",
                "name the team after the people in it",
            )
        first = seen.setdefault(team.name, i)
        if first != i:
            yield Finding(
                Level.ERROR,
                f"{at}.name",
                f"team {team.name!r} is also teams[{first}]",
                "give each team its own name, or merge the two",
            )
        for j, member in enumerate(team.members):
            where = f"{at}.members[{j}]"
            if member not in users:
                yield Finding(
                    Level.ERROR,
                    where,
                    f"{member!r} is not one of the environment's users",
                    "add them to users (with their uid), or remove them from the team",
                )
                continue
            other = member_of.setdefault(member, i)
            if other == i and team.members.index(member) != j:
                yield Finding(
                    Level.ERROR, where, f"{member!r} is listed twice", "list each member once"
                )
            elif other != i:
                yield Finding(
                    Level.ERROR,
                    where,
                    f"{member!r} is also in team {teams[other].name!r}: a person is in one team, "
                    + ("their default Slurm account" if slurm else "the team their jobs run for"),
                    "keep them in one team",
                )
