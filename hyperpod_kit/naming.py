"""Names that several parts must agree on: stacks, constructs and job templates alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperpod_kit.config.schema import EnvironmentConfig


def parameter_name(environment: str, area: str) -> str:
    """The SSM parameter where an environment publishes one area's handles."""
    return f"/hyperpod-kit/{environment}/{area}"


# Studio on Slurm: what the controller's token issuer (lifecycle/studio/slurm_jwt.sh) writes and
# Studio's lifecycle configuration reads. The cluster stack grants the writes, the Studio stack
# the reads.
# The observability stack's handles (the Prometheus workspace's address): the stack writes them,
# the Slurm nodes' agent step reads them, the cluster stack grants the read.
OBSERVABILITY_AREA = "observability"

CLIENT_BUNDLE_PREFIX = "hyperpod-kit/slurm-client/"
"""Key prefix, in the data bucket, of the Slurm client bundles the controller publishes."""


def slurm_token_prefix(environment: str) -> str:
    """Where the controller keeps each Studio user's Slurm JWT: SecureStrings <prefix>/<user>."""
    return parameter_name(environment, "slurm-jwt")


def slurm_token_parameter(environment: str, user: str) -> str:
    """SecureString where the controller keeps a user's Slurm JWT."""
    return f"{slurm_token_prefix(environment)}/{user}"


def slurm_client_parameter(environment: str) -> str:
    """String the controller publishes: Slurm version, controller address, client bundle."""
    return parameter_name(environment, "slurm-client")


def studio_package_parameter(environment: str) -> str:
    """String the Studio stack writes: the s3:// URL of its package asset (the toolkit's wheel
    and the environment file), which the lifecycle configuration reads at each app start (the
    configuration's content, create-only, stays the same when the toolkit changes)."""
    return parameter_name(environment, "studio-package")


ACCOUNT_PLACEHOLDER = "@ACCOUNT@"
"""Stands for the account id in an image URI whose account is known only on the node (the
environment file names none): the trainer stack's URI as `hyperpod-kit jobs` renders it."""


def accounting_cluster_identifier(environment: str) -> str:
    """The Aurora cluster that holds an environment's Slurm accounting (its DBClusterIdentifier:
    RDS names its log groups after it, `/aws/rds/cluster/<identifier>/<log>`)."""
    return f"{environment}-slurm-accounting"


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


# EKS: the node label HyperPod sets from a node's health (jobs select `Schedulable`; HyperPod
# taints with `Unschedulable` while deep health checks run), and the claim of the static FSx
# volume the EKS add-ons stack creates in the job's namespace and jobs mount.
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
FSX_CLAIM = "fsx-claim"


def eks_cluster_name(config: EnvironmentConfig) -> str:
    """The EKS cluster's name: the existing one, or ``<cluster name>-eks`` for a new one."""
    return config.cluster.eks.existing_cluster_name or f"{config.cluster_name}-eks"


SPACE_KINDS = {"JupyterLab": "jupyterlab", "CodeEditor": "code-editor"}
LIFECYCLE_KINDS = {"JupyterLab": "jl", "CodeEditor": "ce"}


def studio_domain_name(environment: str) -> str:
    return f"{environment}-studio"


def studio_space_name(user: str, app: str) -> str:
    """A user's private space for one Studio app."""
    return f"{user}-{SPACE_KINDS[app]}"


def studio_lifecycle_config_name(environment: str, app: str, digest: str) -> str:
    """A lifecycle configuration's name: every property is create-only, so new content gets a
    new name, ending with 8 hex digits of its hash."""
    return f"{environment}-{LIFECYCLE_KINDS[app]}-{digest}"


# The GitHub deploy role (`pipeline bootstrap`) allows sessions this long and the generated deploy
# workflow asks for them: creating or updating a cluster can outlast the default hour.
DEPLOY_SESSION_SECONDS = 4 * 3600

# The GitHub environment of the read-only `cdk diff` jobs (`pipeline github --diff`), whose OIDC
# subject the plan role of `pipeline bootstrap --plan-role` trusts.
PLAN_ENVIRONMENT = "plan"

# The GitHub environment of the nightly drift jobs, whose OIDC subject the read-only role of
# `pipeline bootstrap` trusts (never the deploy role).
DRIFT_ENVIRONMENT = "drift"

# The GitHub environment names the bootstrap's roles tell apart: no environment that deploys may
# take one (its subject would then be trusted by the deploy role), in any `pipeline` command.
RESERVED_ENVIRONMENTS = (PLAN_ENVIRONMENT, DRIFT_ENVIRONMENT)

# The read-only role of `pipeline bootstrap` (drift, and `status --watch` after each deploy) allows
# sessions this long and the workflows ask for them. Assumed through GitHub OIDC, not chained from
# another role (a chained session ends after 1 hour), and longer than the longest watch
# (`status --watch` gives up after 2 hours; tested).
READ_SESSION_SECONDS = 3 * 3600


def alarm_name(environment: str, alarm: str) -> str:
    """A fixed alarm name of the monitoring stack (the cluster's rolling deployments name some
    of them before the monitoring stack exists)."""
    return f"{environment}-{alarm}"


# The health alarms an AMI update or a patch rolls back on (the monitoring stack's): a new AMI
# that breaks the lifecycle scripts, fails hyperpod-kit's node checks, or makes HyperPod report
# unhealthy nodes.
ROLLBACK_ALARMS = ("lifecycle-script-failures", "node-check-failures", "node-health-events")


def rollback_alarm_names(config: EnvironmentConfig) -> list[str]:
    return [alarm_name(config.name, a) for a in ROLLBACK_ALARMS]


def fsx_volume_name(environment: str, namespace: str) -> str:
    """The FSx PersistentVolume whose claim lives in `namespace` (a DNS-1123 subdomain: the EKS
    stack names it, `validate` measures it)."""
    return f"{environment}-fsx-{namespace}"


# Task governance (EKS): the names HyperPod gives a team's objects and the labels a job carries
# to reach them. The values are facts of HyperPod's (facts/task_governance.json, with sources);
# the add-on stack names the teams, the job renderer labels the job, and `validate` measures both.
def _governance_names() -> dict[str, str]:
    from hyperpod_kit.config.facts import task_governance_facts  # config imports this module

    names: dict[str, str] = task_governance_facts()["names"]
    return names


def team_namespace(team: str) -> str:
    """The namespace HyperPod creates for a team's compute quota: ``hyperpod-ns-<team>``."""
    return f"{_governance_names()['namespace_prefix']}{team}"


def team_local_queue(team: str) -> str:
    """The team's Kueue LocalQueue, in its namespace: ``hyperpod-ns-<team>-localqueue``."""
    return f"{team_namespace(team)}{_governance_names()['local_queue_suffix']}"


def priority_class_label_value(name: str) -> str:
    """The Kueue WorkloadPriorityClass HyperPod makes of a cluster policy's priority class, as a
    job names it: ``<name>-priority``."""
    return f"{name}{_governance_names()['priority_class_suffix']}"


def queue_label() -> str:
    """The label that puts a job in a Kueue LocalQueue: ``kueue.x-k8s.io/queue-name``."""
    return _governance_names()["queue_label"]


def priority_label() -> str:
    """The label that gives a job a Kueue priority class: ``kueue.x-k8s.io/priority-class``."""
    return _governance_names()["priority_label"]


def compute_quota_name(cluster_name: str, team: str) -> str:
    """The compute allocation of a team (`AWS::SageMaker::ComputeQuota` Name, create-only)."""
    return f"{cluster_name}-{team}"


def scheduler_config_name(cluster_name: str) -> str:
    """The cluster policy (`AWS::SageMaker::ClusterSchedulerConfig` Name, create-only)."""
    return f"{cluster_name}-policy"


PROVENANCE_METADATA = "hyperpod-kit:keys"
"""The construct metadata type under which a resource records the keys of the environment file
its properties came from (`constructs/provenance.py` writes it, the gates read it)."""
