"""Names that several parts must agree on: stacks, constructs and job templates alike."""

from __future__ import annotations


def parameter_name(environment: str, area: str) -> str:
    """The SSM parameter where an environment publishes one area's handles."""
    return f"/hyperpod-kit/{environment}/{area}"


def stack_name(environment: str, area: str) -> str:
    """The CloudFormation stack of one area (network, storage, cluster, ...) of an environment."""
    return f"{environment}-{area}"


ENVIRONMENT_TAG = "hyperpod-kit:environment"  # on every stack, its value the environment's name


def cluster_log_group_name(cluster_name: str, cluster_id: str) -> str:
    """HyperPod's log group for a cluster: lifecycle scripts, its health-monitoring agent, and
    (shipped by the nodes' hyperpod-kit-ship-logs) the node-side runner and the lifecycle log."""
    return f"/aws/sagemaker/Clusters/{cluster_name}/{cluster_id}"


# Log streams of the cluster's group, per instance (docs/health.md, "Logs"): HyperPod's copy of the
# first lifecycle run, the streams lifecycle/systemd/hyperpod-kit-ship-logs.service.j2 ships, and
# the health-monitoring agent's. Kind -> stream name prefix (the instance id follows, except for
# HyperPod's, where `LifecycleConfig/<group>/<instance-id>` ends with it).
LOG_STREAMS: dict[str, str] = {
    "lifecycle": "LifecycleConfig/",
    "shipped-lifecycle": "hyperpod-kit/lifecycle/",
    "health": "hyperpod-kit/health/",
    "jobs": "hyperpod-kit/jobs/",
    "agent": "SagemakerHealthMonitoringAgent",
}
