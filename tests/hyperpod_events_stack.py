"""The monitoring stack with every row of `hyperpod_events.json` that a Slurm cluster gets
(continuous provisioning on), the remediation queue, and as many subscribed topics as EventBridge
allows (the node-health rule at 5 targets): synthesized once per test module that asks, for the
table's unit and moto tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from hyperpod_kit.app import FEATURE_FLAGS
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.facts.hyperpod_events import lookup
from hyperpod_kit.stacks.monitoring import MonitoringStack
from tests.conftest import default_data, merge

# The clusters of the samples (the sources' own example cluster).
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster"
TOPICS = [f"arn:aws:sns:us-west-2:111122223333:pager-{i}" for i in range(3)]
OVERRIDES = {
    "cluster": {"node_provisioning": "continuous", "node_recovery": "None"},
    "monitoring": {"auto_repair": True, "subscribers": {"sns_topic_arns": TOPICS}},
}


class Cluster:
    cluster_arn = CLUSTER_ARN
    cluster_name = "sample-cluster"
    cluster_id = "abcdef123456"


def config() -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), OVERRIDES))


def synth(outdir: Path) -> dict[str, Any]:
    """The stack's template (no gates: test_monitoring runs them on its variants)."""
    conf = config()
    app = cdk.App(outdir=str(outdir), context=dict(FEATURE_FLAGS))
    stack = MonitoringStack(
        app, "events", config=conf, cluster=Cluster(), file_system_id="fs-0123456789abcdef0",
        env=cdk.Environment(region=conf.region),
    )  # fmt: skip
    template: dict[str, Any] = app.synth().get_stack_by_name(stack.stack_name).template
    return template


def rules(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each rule's properties by its construct id (`rule_id`): logical id Monitoring<id><hash>."""
    found = {}
    for logical, resource in template["Resources"].items():
        m = re.fullmatch(r"Monitoring([A-Za-z0-9]+?)[0-9A-F]{8}", logical)
        if resource["Type"] == "AWS::Events::Rule" and m:
            found[m.group(1)] = resource["Properties"]
    return found


def render(target: dict[str, Any], event: dict[str, Any]) -> str:
    """What EventBridge's input transformer sends SNS for `event` (string template lines; a
    missing field is empty)."""
    transformer = target["InputTransformer"]
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value = lookup(event, path)
        values[name] = "" if value is None else str(value)
    text = re.sub(r"<([^>]+)>", lambda m: values[m.group(1)], transformer["InputTemplate"])
    return "\n".join(json.loads(line) for line in text.splitlines())
