"""Monitoring rules: who gets the alerts, which node checks run and what a failing one may ask
HyperPod for, and alarm thresholds that can fire at all."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from hyperpod_kit.config.derived import alert_topics, remediation_function
from hyperpod_kit.config.facts import limit, limits_checked
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import (
    AGENT_COVERED_CHECKS,
    NODE_CHECK_DEFAULTS,
    NODE_CHECK_NAMES,
    EnvironmentConfig,
    Remediation,
)
from hyperpod_kit.config.validators.registry import validator

AT = "monitoring"
CHECKS = f"{AT}.node_checks"
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
TOPIC_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sns:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"(?P<name>[A-Za-z0-9_-]{1,256}(\.fifo)?)$"
)
MIN_INTERVAL, MAX_INTERVAL = 60, 3600
MIN_FSX_TIMEOUT = 5


def _names_hint(name: str) -> str:
    close = difflib.get_close_matches(name, NODE_CHECK_NAMES, n=1, cutoff=0.5)
    return (
        (f"did you mean {close[0]!r}? " if close else "")
        + "checks: "
        + ", ".join(sorted(NODE_CHECK_NAMES))
    )


def effective_remediation(config: EnvironmentConfig) -> dict[str, Remediation]:
    """What each check that runs asks for when it fails: the file's choice, else the default.
    Checks that HyperPod's agent covers never act, whatever the file says."""
    node = config.monitoring.node_checks
    out: dict[str, Remediation] = {}
    for name in dict.fromkeys(node.checks):
        if name not in NODE_CHECK_DEFAULTS:
            continue
        chosen = node.remediation.get(name, NODE_CHECK_DEFAULTS[name])
        out[name] = "none" if name in AGENT_COVERED_CHECKS else chosen
    return out


@validator("monitoring-subscribers", area="monitoring")
def check_subscribers(config: EnvironmentConfig) -> Iterator[Finding]:
    """E-mail addresses look like addresses; topics are SNS ARNs in the environment's region
    (EventBridge delivers only to targets in its own region). No subscriber at all is legal: the
    topic exists and people subscribe later (the default environment has none)."""
    mon = config.monitoring
    subs = mon.subscribers
    at = f"{AT}.subscribers"
    if not mon.enabled:
        if mon.emails or subs.sns_topic_arns:
            yield Finding(
                Level.WARNING,
                f"{AT}.enabled",
                "monitoring is off: nothing is deployed, so the subscribers get no alerts",
                "set monitoring.enabled: true, or remove the subscribers",
            )
        return
    seen: set[str] = set()
    if mon.alarm_email:
        seen.add(mon.alarm_email.lower())
    for i, email in enumerate(subs.emails):
        path = f"{at}.emails[{i}]"
        if not EMAIL.match(email):
            yield Finding(
                Level.ERROR,
                path,
                f"{email!r} is not an e-mail address"
                + (" (it contains a space)" if re.search(r"\s", email) else ""),
                "an address like ml-oncall@example.com",
            )
        elif email.lower() in seen:
            yield Finding(
                Level.INFO,
                path,
                f"{email} is listed twice (alarm_email counts as one subscriber); it gets each "
                "alert once",
                "remove the duplicate",
            )
        seen.add(email.lower())
    for i, arn in enumerate(subs.sns_topic_arns):
        path = f"{at}.sns_topic_arns[{i}]"
        m = TOPIC_ARN.match(arn)
        if m is None:
            yield Finding(
                Level.ERROR,
                path,
                f"{arn!r} is not an SNS topic ARN",
                "like arn:aws:sns:us-west-2:111122223333:oncall-pager",
            )
            continue
        if m["region"] != config.region:
            yield Finding(
                Level.ERROR,
                path,
                f"the topic is in {m['region']}, the environment in {config.region}; "
                "EventBridge rules deliver only to targets in their own region",
                f"use a topic in {config.region}",
            )
        if config.account is not None and m["account"] != config.account:
            yield Finding(
                Level.WARNING,
                path,
                f"the topic belongs to account {m['account']}, not {config.account}",
                "its access policy must let this account's EventBridge rules and CloudWatch "
                "alarms publish, or alerts are dropped",
            )


@validator("monitoring-targets", area="monitoring")
def check_alert_targets(config: EnvironmentConfig) -> Iterator[Finding]:
    """Every alert topic is a target of each EventBridge rule (and the remediation queue one more
    of the node-health rule) and an action of each alarm state: EventBridge takes at most 5
    targets a rule, CloudWatch 5 actions a state (`limits.json`). Past either, synth (or the
    deploy) fails; here it is the file's line."""
    mon = config.monitoring
    if not mon.enabled:
        return
    arns = mon.subscribers.sns_topic_arns
    topics = alert_topics(config)
    queue = remediation_function(config)
    most_targets = limit("eventbridge_targets_per_rule")
    most_actions = limit("cloudwatch_alarm_actions_per_state")
    targets = topics + (1 if queue else 0)  # the node-health rule, the one with the most
    over: list[str] = []
    if targets > most_targets:
        over.append(
            f"the node-health EventBridge rule would have {targets} targets ({topics} topics"
            + (" and the remediation queue" if queue else "")
            + f"); EventBridge takes at most {most_targets} a rule"
        )
    if topics > most_actions:
        over.append(
            f"each alarm would have {topics} actions a state; CloudWatch takes at most "
            f"{most_actions}"
        )
    if not over:
        return
    room = min(most_targets - 1 - (1 if queue else 0), most_actions - 1)
    yield Finding(
        Level.ERROR,
        f"{AT}.subscribers.sns_topic_arns[{room}]",
        f"{len(arns)} topics here and monitoring's own make {topics}: "
        + "; ".join(over)
        + f" (limits checked {limits_checked()})",
        f"list at most {room} topics here"
        + (
            " (the remediation queue takes one target: cluster.node_recovery: None with "
            "auto_repair)"
            if queue
            else ""
        )
        + "; to reach more, add their subscriptions (e-mail, SQS, Lambda, HTTPS) to one of "
        "these topics, or list the people in monitoring.subscribers.emails",
    )


@validator("monitoring-node-checks", area="monitoring")
def check_node_checks(config: EnvironmentConfig) -> Iterator[Finding]:
    """Checks are known by name and listed once; the interval and the FSx deadline leave the
    checks time to finish; volumes are absolute paths."""
    if not config.monitoring.enabled:
        return
    node = config.monitoring.node_checks
    seen: set[str] = set()
    for i, name in enumerate(node.checks):
        path = f"{CHECKS}.checks[{i}]"
        if name not in NODE_CHECK_DEFAULTS:
            yield Finding(Level.ERROR, path, f"unknown check {name!r}", _names_hint(name))
        elif name in seen:
            yield Finding(Level.ERROR, path, f"{name} is listed twice", "list each check once")
        seen.add(name)
    if not node.checks:
        yield Finding(
            Level.INFO,
            f"{CHECKS}.checks",
            "no node checks run: only HyperPod's own agent watches the nodes",
            None,
        )
    interval = node.interval_seconds
    if interval < MIN_INTERVAL:
        yield Finding(
            Level.ERROR,
            f"{CHECKS}.interval_seconds",
            f"{interval} s is shorter than a run of the checks can take (the FSx probe alone "
            f"may wait {node.fsx_timeout_seconds} s)",
            f"use {MIN_INTERVAL} or more; 300 is usual",
        )
    elif interval > MAX_INTERVAL:
        yield Finding(
            Level.WARNING,
            f"{CHECKS}.interval_seconds",
            f"a node whose /fsx hangs or whose disk fills would go unnoticed for up to "
            f"{interval // 60} minutes",
            f"use at most {MAX_INTERVAL}; 300 is usual",
        )
    timeout = node.fsx_timeout_seconds
    if timeout < MIN_FSX_TIMEOUT:
        yield Finding(
            Level.ERROR,
            f"{CHECKS}.fsx_timeout_seconds",
            f"{timeout} s is too short: a busy but healthy Lustre mount can take seconds to "
            "answer, and would be reported hung",
            "use 30",
        )
    elif timeout * 2 > interval >= MIN_INTERVAL:
        yield Finding(
            Level.ERROR,
            f"{CHECKS}.fsx_timeout_seconds",
            f"a {timeout} s probe could take more than half of the {interval} s interval",
            f"use at most {interval // 2}, or a longer interval",
        )
    for i, volume in enumerate(node.volumes):
        if not volume.startswith("/"):
            yield Finding(
                Level.ERROR,
                f"{CHECKS}.volumes[{i}]",
                f"{volume!r} is not an absolute path",
                "a mount point such as /opt/sagemaker",
            )


@validator("monitoring-remediation", area="monitoring")
def check_remediation(config: EnvironmentConfig) -> Iterator[Finding]:
    """A remediation names a known check that runs; GPU checks never act (HyperPod's agent does);
    an action HyperPod will not carry out (node_recovery: None) is a warning."""
    mon = config.monitoring
    if not mon.enabled:
        return
    node = mon.node_checks
    at = f"{CHECKS}.remediation"
    running = set(node.checks)
    for name, action in node.remediation.items():
        path = f"{at}.{name}"
        if name not in NODE_CHECK_DEFAULTS:
            yield Finding(Level.ERROR, path, f"unknown check {name!r}", _names_hint(name))
            continue
        if name in AGENT_COVERED_CHECKS and action != "none":
            yield Finding(
                Level.ERROR,
                path,
                f"{name} only logs and alerts: HyperPod's health-monitoring agent watches GPU "
                "count, nvidia-smi and XID errors itself and reboots or replaces the node, and a "
                "second actor would fight it",
                "use none",
            )
        elif name not in running and action != "none":
            yield Finding(
                Level.WARNING,
                path,
                f"{name} is not in monitoring.node_checks.checks, so this never applies",
                f"add {name} to the checks, or remove this line",
            )
    acting = {n: a for n, a in effective_remediation(config).items() if a != "none"}
    if not acting:
        return
    listed = ", ".join(f"{n}: {a}" for n, a in sorted(acting.items()))
    if not mon.auto_repair:
        yield Finding(
            Level.INFO,
            f"{AT}.auto_repair",
            f"auto_repair is off: failing checks ({listed}) log and alert but ask HyperPod for "
            "nothing",
            None,
        )
    elif config.cluster.node_recovery == "None":
        yield Finding(
            Level.WARNING,
            "cluster.node_recovery",
            f"node checks ask HyperPod to repair a failing node ({listed}), but with "
            "node_recovery: None HyperPod's recovery is off and the node may stay out of service "
            "until someone replaces it",
            "set cluster.node_recovery: Automatic, or the remediation to none",
        )


@validator("monitoring-alarms", area="monitoring")
def check_alarms(config: EnvironmentConfig) -> Iterator[Finding]:
    """Count thresholds that the cluster's size cannot reach never fire; an existing file system's
    capacity is unknown offline, so its capacity alarms are left out."""
    mon = config.monitoring
    if not mon.enabled:
        return
    nodes = sum(g.instance_count for g in config.cluster.instance_groups)
    at = f"{AT}.alarms"
    for key, value, what in (
        ("lifecycle_failures", mon.alarms.lifecycle_failures, "lifecycle-script failures"),
        ("node_health_events", mon.alarms.node_health_events, "node health events"),
    ):
        if value > max(nodes, 1):
            yield Finding(
                Level.WARNING,
                f"{at}.{key}",
                f"{value} {what} within 15 minutes needs more nodes than the cluster's {nodes}: "
                "the alarm would hardly ever fire",
                f"use at most {max(nodes, 1)}",
            )
    if config.storage.lustre.existing is not None:
        yield Finding(
            Level.INFO,
            at,
            "the file system exists already and its capacity is unknown offline: no "
            "free-capacity or throughput alarm (the dashboard still shows free bytes)",
            None,
        )
