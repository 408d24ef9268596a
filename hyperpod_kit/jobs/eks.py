"""The HyperPodPyTorchJob manifest, built as data and serialised (never YAML pasted as text).

Elastic policy, run policy and auto-resume annotations from `trainer.job`; GPU and EFA requests
from the instance-type table; the FSx claim the EKS stack creates in the job's namespace; the
same shutdown window as the sbatch script (SIGTERM, then `stop_grace_seconds` for the final save).
Under task governance, the team's namespace and the Kueue queue and priority labels.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from hyperpod_kit.config.derived import FSX_MOUNT
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.jobs.context import JobContext
from hyperpod_kit.naming import FSX_CLAIM, HEALTH_LABEL, priority_label, queue_label
from hyperpod_kit.templating import json_value

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRIES = "sagemaker.amazonaws.com/job-max-retry-count"
IMAGE_PLACEHOLDER = "${TRAINER_IMAGE}"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
SCHEMA = Path(__file__).resolve().parent / "templates" / "hyperpodpytorchjob.schema.json"


def pytorch_job(config: EnvironmentConfig, context: JobContext) -> dict[str, Any]:
    job, net = context.job, context.network
    elastic = config.trainer.job.elastic
    nnodes = f"{elastic.min_replicas}:{elastic.max_replicas}" if elastic else str(job.nodes)
    command = [
        "hyperpodrun",  # the HyperPod elastic agent's torchrun, installed in the trainer image
        f"--nnodes={nnodes}",
        f"--nproc-per-node={job.processes_per_node}",
        "-m",
        "hyperpod_trainer",
    ]
    for key, value in context.settings:
        command += ["--set", f"{key}={value}"]
    env = [
        {"name": "OMP_NUM_THREADS", "value": "1"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        # hyperpodrun (torchrun) waits this long for the ranks' final checkpoint after SIGTERM
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(job.shutdown_timeout_seconds)},
        # The trainer's checkpoint lease knows a restart of this job from a second job.
        {"name": "HYPERPOD_TRAINER_JOB_ID", "value": f"{job.namespace}/{job.name}"},
    ]
    resources = {"nvidia.com/gpu": str(job.processes_per_node)}
    env += [{"name": name, "value": value} for name, value in net.environment]
    if net.efa and net.efa_interfaces:
        resources["vpc.amazonaws.com/efa"] = str(net.efa_interfaces)
    container: dict[str, Any] = {
        "name": "trainer",
        "image": context.image.uri if context.image is not None else IMAGE_PLACEHOLDER,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": env,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [
            {"name": "fsx", "mountPath": FSX_MOUNT},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
        # SIGTERM, then this long for the final checkpoint before the kill.
        "terminationGracePeriodSeconds": job.stop_grace_seconds,
        # Only nodes that passed HyperPod's health checks take training pods.
        "nodeSelector": {HEALTH_LABEL: "Schedulable"},
    }
    _place(pod_spec, context)
    user = next((u for u in config.users if u.name == config.trainer.job.user), None)
    if user is not None:
        # Checkpoints and logs on FSx belong to the person, as their Studio files do.
        pod_spec["securityContext"] = {
            "runAsUser": user.uid,
            "runAsGroup": user.gid,
            "fsGroup": user.gid,
        }
    spec: dict[str, Any] = {
        "nprocPerNode": str(job.processes_per_node),
        "replicaSpecs": [{"name": "pod", "replicas": job.nodes, "template": {"spec": pod_spec}}],
        "runPolicy": {"cleanPodPolicy": "None", "jobMaxRetryCount": job.max_retries},
    }
    if elastic is not None:
        policy: dict[str, Any] = {
            "minReplicas": elastic.min_replicas,
            "maxReplicas": elastic.max_replicas,
            "scalingTimeoutInSeconds": elastic.scaling_timeout_seconds,
            "gracefulShutdownTimeoutInSeconds": elastic.graceful_shutdown_timeout_seconds,
            "faultyScaleDownTimeoutInSeconds": elastic.faulty_scale_down_timeout_seconds,
        }
        if elastic.replica_discrete_values:
            policy["replicaDiscreteValues"] = list(elastic.replica_discrete_values)
        else:
            policy["replicaIncrementStep"] = elastic.replica_increment_step or 1
        spec["elasticPolicy"] = policy
    metadata: dict[str, Any] = {"name": job.name, "namespace": job.namespace}
    labels = governance_labels(context)
    if labels:
        # Kueue reads the job's labels; the pods carry them too, as HyperPod's own job template
        # (sagemaker-hyperpod-cli, hyperpod-pytorch-job-template v1_1) puts them on both: a
        # governed namespace admits no pod without its queue label (task governance's
        # ValidatingAdmissionPolicy).
        metadata["labels"] = dict(labels)
        template = spec["replicaSpecs"][0]["template"]
        spec["replicaSpecs"][0]["template"] = {"metadata": {"labels": dict(labels)}, **template}
    if job.auto_resume:
        metadata["annotations"] = {AUTO_RESUME: "true", MAX_RETRIES: str(job.max_retries)}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def governance_labels(context: JobContext) -> dict[str, str]:
    """The job's task governance labels: its team's queue and its priority class (HyperPod's
    names: hyperpod_kit/naming.py, facts/task_governance.json); none outside task governance."""
    job = context.job
    labels: dict[str, str] = {}
    if job.queue is not None:
        labels[queue_label()] = job.queue
    if job.priority_class is not None:
        labels[priority_label()] = job.priority_class
    return labels


def _place(pod_spec: dict[str, Any], context: JobContext) -> None:
    """The job's group: its own labels (HyperPod keeps them on the group's nodes) and its
    instance type (every type of a flexible group, through node affinity); its taints
    tolerated."""
    place, net = context.placement, context.network
    selector = pod_spec["nodeSelector"]
    selector.update(dict(place.labels))
    if len(place.instance_types) > 1:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": INSTANCE_TYPE_LABEL,
                                    "operator": "In",
                                    "values": list(place.instance_types),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    elif net.instance_type is not None:
        selector[INSTANCE_TYPE_LABEL] = net.instance_type
    if place.taints:
        pod_spec["tolerations"] = [
            {"key": key, "operator": "Equal", "value": value, "effect": effect}
            if value is not None
            else {"key": key, "operator": "Exists", "effect": effect}
            for key, value, effect in place.taints
        ]


def render_pytorch_job(manifest: dict[str, Any], *, environment: str, has_image: bool) -> str:
    # A value in a YAML comment is one line: the json filter of the templates (a plain name
    # gets quotes, nothing else changes).
    header = (
        f"# Generated by `hyperpod-kit jobs` from the environment {json_value(environment)}.\n"
        + (
            ""
            if has_image
            else "# Set the image: TRAINER_IMAGE=<uri> envsubst < THIS | kubectl apply -f -\n"
        )
    )
    return header + yaml.safe_dump(manifest, sort_keys=False, width=100)


@cache
def job_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


def check_pytorch_job(manifest: Any) -> list[str]:
    """Problems of a HyperPodPyTorchJob against the schema of its fields (the CRD's, as the
    HyperPod SDK models them) and the rules a schema cannot say."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(job_schema())
    problems = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(manifest)'}: {e.message}"
        for e in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    ]
    if problems or not isinstance(manifest, dict):
        return problems
    spec = manifest["spec"]
    replicas = spec["replicaSpecs"][0].get("replicas", 0)
    elastic = spec.get("elasticPolicy")
    if elastic:
        low, high = elastic.get("minReplicas", 1), elastic.get("maxReplicas", replicas)
        if not low <= replicas <= high:
            problems.append(f"spec.replicaSpecs.0.replicas: {replicas} outside [{low}, {high}]")
        if "replicaIncrementStep" in elastic and "replicaDiscreteValues" in elastic:
            problems.append("spec.elasticPolicy: replicaIncrementStep or replicaDiscreteValues")
    return problems
