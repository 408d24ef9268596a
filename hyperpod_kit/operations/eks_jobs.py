"""`hyperpod-kit job` on an EKS cluster: HyperPodPyTorchJobs and their pods, through the
Kubernetes API (`config.kubernetes_api`; docs/jobs.md).

A job is its HyperPodPyTorchJob (sagemaker.amazonaws.com/v1, `jobs/eks.py` renders it); its id
is its name in the namespace. Its state is the newest true condition the training operator set
(Created, Running, Succeeded, Failed, ...; Pending before it has one). Its output is the log of
its rank-0 pod: the operator names a job's pods after it and the replica spec, `<job>-pod-0`
for the one replica spec `jobs/eks.py` writes (the HyperPod SDK finds them the same way:
sagemaker-hyperpod-cli, `HyperPodPytorchJob.list_pods`, by the prefix `<job>-pod`). Its
progress is `read_progress` over that log's tail.

Light: the standard library, PyYAML and job_model, so a Studio space runs it with the package
installed `--no-deps`.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import yaml

from hyperpod_kit.config.aws import AwsUnavailableError
from hyperpod_kit.config.kubernetes_api import KubernetesApi, KubernetesApiError
from hyperpod_kit.operations.job_model import Capacity, JobError, JobRecord, read_progress

GROUP_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
PLURAL = "hyperpodpytorchjobs"
# Whose job it is, where a manifest says so (jobs/eks.py writes no such label yet: without it,
# everyone's jobs in the namespace are listed).
USER_LABEL = "hyperpod-kit/user"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HYPERPOD_NODE_LABEL = "sagemaker.amazonaws.com/node-health-status"
ENDED = frozenset({"Succeeded", "Failed", "Completed"})
# Extended resources only training pods ask for: a node running one is not free.
TRAINING_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa", "aws.amazon.com/neuron")
PROGRESS_TAIL_LINES = 5000
# A followed log may stay silent while the job waits (a checkpoint, a slow step): how long one
# read may wait before the follow gives up.
FOLLOW_READ_TIMEOUT_S = 3600.0
PLACEHOLDER = "${TRAINER_IMAGE}"


class EksJobs:
    """The job commands' view of an EKS cluster's namespace (`job_model.Scheduler`)."""

    kind = "eks"

    def __init__(
        self,
        api: KubernetesApi,
        namespace: str,
        user: str | None = None,
        *,
        sleep: Any = time.sleep,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.user = user
        self._sleep = sleep

    # --- the Scheduler protocol ----------------------------------------------------------------

    def submit(self, text: str, *, filename: str, folder: Path) -> str:
        """Write the rendered manifest as `folder/filename` (the folder must exist; a different
        file already there is never overwritten) and create the HyperPodPyTorchJob; its name."""
        manifest = self._manifest(text)
        meta = manifest["metadata"]
        name = str(meta["name"])
        namespace = meta.get("namespace") or self.namespace
        if namespace != self.namespace:
            raise JobError(
                f"the manifest's namespace {namespace} is not the namespace {self.namespace} "
                "the job commands look in: render the job from the same environment file"
            )
        _write_once(folder, filename, text)
        try:
            self.api.post(self._jobs_path(), manifest)
        except AwsUnavailableError as e:
            raise self._error(e, name, creating=True) from None
        return name

    def jobs(self, *, everyone: bool = False) -> list[JobRecord]:
        """The namespace's HyperPodPyTorchJobs, newest first; without `everyone`, those labelled
        with another user (`USER_LABEL`) left out."""
        try:
            answer = self.api.get(self._jobs_path())
        except AwsUnavailableError as e:
            raise self._error(e, None) from None
        items = [i for i in _items(answer) if isinstance(i.get("metadata"), dict)]
        if not everyone and self.user is not None:
            items = [i for i in items if _labels(i).get(USER_LABEL) in (None, self.user)]
        items.sort(key=lambda i: (_meta(i).get("creationTimestamp") or "", _name(i)), reverse=True)
        return [self._record(i) for i in items]

    def job(self, job_id: str) -> JobRecord:
        return self._record(self._get(job_id))

    def logs(self, job_id: str, *, follow: bool, out: TextIO, poll_s: float = 2.0) -> None:
        """Copy the rank-0 pod's log to `out`; with `follow`, stream it (and the log of any
        container that replaces it) until the job has ended."""
        job = self._get(job_id)
        pod_name, container = _rank0(job)
        if not follow:
            pod = self._pod(pod_name)
            if pod is not None and _started(pod):
                for line in self._log(pod_name, container):
                    out.write(line + "\n")
            return
        streamed: set[tuple[str, int]] = set()
        while True:
            pod = self._pod(pod_name)
            run = _run_of(pod) if pod is not None else None
            if pod is not None and run is not None and run not in streamed and _started(pod):
                # each run of the container (a new pod, a restart) has a log of its own
                streamed.add(run)
                query = {"follow": "true"}
                for line in self._log(pod_name, container, query, timeout_s=FOLLOW_READ_TIMEOUT_S):
                    out.write(line + "\n")
                    out.flush()
                continue
            try:
                job = self._get(job_id)
            except JobError:
                if streamed:  # cancelled while followed: its log has ended
                    return
                raise
            if _state(job) in ENDED:
                return
            self._sleep(poll_s)

    def cancel(self, job_id: str) -> None:
        try:
            self.api.delete(self._jobs_path(job_id))
        except AwsUnavailableError as e:
            raise self._error(e, job_id) from None

    def capacity(self, where: str | None) -> Capacity | None:
        """Ready, schedulable nodes of the instance type `where` (every HyperPod node: None)
        with no training pod (one asking for GPUs, EFA or Neuron) on them; None when the nodes
        or the pods of every namespace cannot be read (a namespace-scoped access entry)."""
        selector = f"{INSTANCE_TYPE_LABEL}={where}" if where else HYPERPOD_NODE_LABEL
        try:
            nodes = _items(self.api.get(f"/api/v1/nodes?{_query(labelSelector=selector)}"))
            pods = _items(self.api.get("/api/v1/pods?" + _query(
                fieldSelector="status.phase!=Succeeded,status.phase!=Failed")))  # fmt: skip
        except AwsUnavailableError:
            return None
        ready = {_name(n) for n in nodes if _ready(n)}
        busy = {
            str(p.get("spec", {}).get("nodeName"))
            for p in pods
            if _is_training(p) and p.get("spec", {}).get("nodeName")
        }
        free = ready - busy
        what = f"instance type {where}" if where else "HyperPod nodes"
        return Capacity(
            len(free), len(nodes),
            f"{len(free)} of {len(nodes)} nodes ({what}) ready with no training pod "
            f"({len(ready)} ready, {len(ready & busy)} running training pods)",
        )  # fmt: skip

    # --- reading -------------------------------------------------------------------------------

    def _jobs_path(self, name: str | None = None) -> str:
        path = f"/apis/{GROUP_VERSION}/namespaces/{_q(self.namespace)}/{PLURAL}"
        return path + (f"/{_q(name)}" if name is not None else "")

    def _get(self, job_id: str) -> dict[str, Any]:
        try:
            found = self.api.get(self._jobs_path(job_id))
        except AwsUnavailableError as e:
            raise self._error(e, job_id) from None
        if not isinstance(found, dict):
            raise JobError(f"no job {job_id} in namespace {self.namespace}: the API answered "
                           f"{type(found).__name__}")  # fmt: skip
        return found

    def _pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod = self.api.get(f"/api/v1/namespaces/{_q(self.namespace)}/pods/{_q(name)}")
        except AwsUnavailableError as e:
            if e.code == "404":
                return None
            raise self._error(e, None) from None
        return pod if isinstance(pod, dict) else None

    def _log(
        self,
        pod: str,
        container: str | None,
        query: dict[str, str] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        params = dict(query or {})
        if container:
            params["container"] = container
        path = f"/api/v1/namespaces/{_q(self.namespace)}/pods/{_q(pod)}/log"
        path += f"?{_query(**params)}" if params else ""
        try:
            yield from self.api.stream(path, timeout_s=timeout_s)
        except AwsUnavailableError as e:
            if e.code in ("400", "404"):  # waiting to start, or gone: no log (yet)
                return
            raise self._error(e, None) from None

    def _progress(self, job: dict[str, Any]) -> Any:
        pod_name, container = _rank0(job)
        pod = self._pod(pod_name)
        if pod is None or not _started(pod):
            return None
        lines = list(self._log(pod_name, container, {"tailLines": str(PROGRESS_TAIL_LINES)}))
        return read_progress(lines)

    def _record(self, job: dict[str, Any]) -> JobRecord:
        meta, status = _meta(job), job.get("status") or {}
        spec = job.get("spec") or {}
        condition = _newest_condition(job)
        replicas = [r.get("replicas") for r in spec.get("replicaSpecs") or []]
        nodes = sum(r for r in replicas if isinstance(r, int)) if replicas else None
        labels = _labels(job)
        details = {"namespace": str(meta.get("namespace") or self.namespace),
                   "pod": _rank0(job)[0]}  # fmt: skip
        for key, value in labels.items():
            if key.startswith("kueue.x-k8s.io/"):
                details[key.removeprefix("kueue.x-k8s.io/")] = str(value)
        restarts = status.get("restartCount")
        if isinstance(restarts, int):
            details["restarts"] = str(restarts)
        reason = None
        if condition is not None:
            reason = " ".join(
                str(condition.get(k)) for k in ("reason", "message") if condition.get(k)
            )
        return JobRecord(
            id=_name(job), name=_name(job), state=_state(job), user=labels.get(USER_LABEL),
            where=details["namespace"], nodes=nodes, reason=reason or None,
            submitted=meta.get("creationTimestamp"), started=status.get("startTime"),
            ended=status.get("completionTime"), progress=self._progress(job), details=details,
        )  # fmt: skip

    # --- what went wrong, in one line ----------------------------------------------------------

    def _manifest(self, text: str) -> dict[str, Any]:
        try:
            manifest = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise JobError(f"the job is not YAML: {' '.join(str(e).split())}") from None
        if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
            raise JobError(f"the job is not a {KIND} manifest (kind: {_kind(manifest)})")
        if manifest.get("apiVersion") != GROUP_VERSION:
            raise JobError(f"the job's apiVersion is {manifest.get('apiVersion')!r}, "
                           f"not {GROUP_VERSION}")  # fmt: skip
        meta = manifest.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise JobError("the job's manifest has no metadata.name")
        if any(PLACEHOLDER in image for image in _images(manifest)):
            raise JobError(
                f"the job's image is the placeholder {PLACEHOLDER}: render it with --image URI "
                "(or with trainer.build_image on)"
            )
        return manifest

    def _error(
        self, e: AwsUnavailableError, job: str | None, *, creating: bool = False
    ) -> JobError:
        cluster = self.api.name
        message = e.api_message if isinstance(e, KubernetesApiError) else ""
        if e.code in ("401", "403"):
            return JobError(
                f"the Kubernetes API of {cluster} refused your IAM identity (HTTP {e.code}): it "
                f"has no EKS access entry that allows {PLURAL} and pods in namespace "
                f"{self.namespace} (ask the cluster's admin for one, such as a role in "
                f"cluster.eks.admin_role_arns)" + (f": {message}" if message else "")
            )
        if e.code == "404" and job is not None and not creating:
            return JobError(f"no job {job} in namespace {self.namespace}")
        if e.code == "409" and creating:
            return JobError(
                f"a job {job} already exists in namespace {self.namespace}: cancel it "
                f"(hyperpod-kit job cancel {job}) or give trainer.job.name another name"
            )
        if e.code in ("400", "422") and creating:
            return JobError(f"the Kubernetes API refused the job {job}: {message or e}")
        return JobError(" ".join(str(e).split()))


def _write_once(folder: Path, filename: str, text: str) -> None:
    if not folder.is_dir():
        raise JobError(f"no folder {folder} to write the job {filename} in")
    path = folder / filename
    if path.exists():
        try:
            same = path.read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            raise JobError(f"{path} exists with other content: not overwritten (move it away, "
                           "or submit the job under another name)")  # fmt: skip
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise JobError(f"cannot write {path}: {e.strerror or e}") from None


def _images(manifest: dict[str, Any]) -> list[str]:
    specs = (manifest.get("spec") or {}).get("replicaSpecs") or []
    return [
        str(c.get("image", ""))
        for r in specs if isinstance(r, dict)
        for c in ((r.get("template") or {}).get("spec") or {}).get("containers") or []
        if isinstance(c, dict)
    ]  # fmt: skip


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _query(**params: str) -> str:
    return urllib.parse.urlencode(params)


def _kind(manifest: Any) -> str:
    return str(manifest.get("kind")) if isinstance(manifest, dict) else type(manifest).__name__


def _items(answer: Any) -> list[dict[str, Any]]:
    items = answer.get("items") if isinstance(answer, dict) else None
    return [i for i in items or [] if isinstance(i, dict)]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _name(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def _newest_condition(job: dict[str, Any]) -> dict[str, Any] | None:
    """The newest condition that holds (status "True"): by its lastTransitionTime, the later
    in the list where two are equal (the operator appends)."""
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [
        (str(c.get("lastTransitionTime") or ""), i, c)
        for i, c in enumerate(conditions)
        if isinstance(c, dict) and c.get("status") == "True" and c.get("type")
    ]
    return max(true, key=lambda t: (t[0], t[1]))[2] if true else None


def _state(job: dict[str, Any]) -> str:
    condition = _newest_condition(job)
    return str(condition["type"]) if condition is not None else "Pending"


def _rank0(job: dict[str, Any]) -> tuple[str, str | None]:
    """The rank-0 pod's name (`<job>-<replica spec>-0`) and the trainer's container."""
    specs = (job.get("spec") or {}).get("replicaSpecs") or [{}]
    first = specs[0] if isinstance(specs[0], dict) else {}
    containers = ((first.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    container = containers[0].get("name") if isinstance(containers[0], dict) else None
    return f"{_name(job)}-{first.get('name') or 'pod'}-0", container


def _started(pod: dict[str, Any]) -> bool:
    """Whether the pod's container has a log: it runs or ran (not Pending, nor waiting)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Running", "Succeeded", "Failed")


def _run_of(pod: dict[str, Any]) -> tuple[str, int]:
    """One run of the pod's container: the pod's uid and the container's restart count."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    restarts = statuses[0].get("restartCount", 0) if isinstance(statuses[0], dict) else 0
    return str(_meta(pod).get("uid", "")), restarts if isinstance(restarts, int) else 0


def _ready(node: dict[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _is_training(pod: dict[str, Any]) -> bool:
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        if any(str(asked.get(r, "0")) not in ("0", "") for r in TRAINING_RESOURCES):
            return True
    return False
