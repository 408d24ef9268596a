"""A Kubernetes API server on loopback for the job tests: the paths the job commands use,
answered from memory as the real API answers them (JSON objects, `Status` objects with the
HTTP status of a refusal, text pod logs that a `follow=true` request streams until the
container ends).

What is POSTed is checked as the API server would: a core kind against the Kubernetes OpenAPI
schema of the stub's version (kubernetes-validate's bundled schemas, strict: an unknown field
is refused, as `kubectl --validate=strict` and server-side field validation do), a
HyperPodPyTorchJob against the CRD's schema the repository bundles
(hyperpod_kit/jobs/templates/hyperpodpytorchjob.schema.json) with its pod template against the
core PodTemplateSpec; a refusal is HTTP 422 `Invalid` with the API's kind of message.

Knobs: `token` (the bearer token to expect: another is 401), `forbid` (every request is 403,
as for an IAM identity without an access entry), `start(...)` (the operator's part: the rank-0
pod, its log and the job's conditions), `append_log`, `finish`.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import jsonschema
import kubernetes_validate

from hyperpod_kit.jobs.eks import job_schema

JOB_RESOURCE = "hyperpodpytorchjobs.sagemaker.amazonaws.com"
CORE_PLURALS = {"pods": "Pod", "configmaps": "ConfigMap", "services": "Service"}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.body = code, status(code, reason, message)


class KubeStub:
    def __init__(self, *, version: str = "1.32", token: str | None = None) -> None:
        self.version = version
        self.token = token
        self.forbid = False
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name)
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.changed = threading.Condition()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub._serve(self, "GET")

            def do_POST(self) -> None:
                stub._serve(self, "POST")

            def do_DELETE(self) -> None:
                stub._serve(self, "DELETE")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        with self.changed:
            for pod in self.pods.values():
                pod["status"]["phase"] = "Succeeded"
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    # --- the operator's and the kubelet's part -------------------------------------------------

    def start(self, ns: str, job: str, log: Iterable[str] = (), *, node: str = "node-1") -> str:
        """The job Running, its rank-0 pod `<job>-pod-0` on `node` with `log` so far."""
        with self.changed:
            obj = self.jobs[(ns, job)]
            replica = obj["spec"]["replicaSpecs"][0]
            pod_name = f"{job}-{replica['name']}-0"
            template = replica["template"]
            self.pods[(ns, pod_name)] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": ns, "uid": str(uuid.uuid4()),
                             "labels": dict(template.get("metadata", {}).get("labels", {}))},
                "spec": {**template["spec"], "nodeName": node},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": template["spec"]["containers"][0]["name"], "restartCount": 0}]},
            }  # fmt: skip
            self.logs[(ns, pod_name)] = list(log)
            self._condition(obj, "Running")
            obj["status"]["startTime"] = now()
            self.changed.notify_all()
            return pod_name

    def append_log(self, ns: str, pod: str, *lines: str) -> None:
        with self.changed:
            self.logs[(ns, pod)] += lines
            self.changed.notify_all()

    def finish(self, ns: str, job: str, state: str = "Succeeded") -> None:
        """The rank-0 container ends (a followed log closes) and the job takes `state`."""
        with self.changed:
            obj = self.jobs[(ns, job)]
            for (pns, name), pod in self.pods.items():
                if pns == ns and name.startswith(f"{job}-"):
                    pod["status"]["phase"] = state if state in ("Succeeded", "Failed") else "Failed"
            self._condition(obj, state)
            obj["status"]["completionTime"] = now()
            self.changed.notify_all()

    def _condition(self, obj: dict[str, Any], kind: str) -> None:
        conditions = obj["status"].setdefault("conditions", [])
        for c in conditions:
            c["status"] = "False"
        conditions.append({"type": kind, "status": "True", "reason": kind,
                           "lastTransitionTime": now()})  # fmt: skip

    # --- the API --------------------------------------------------------------------------------

    def _serve(self, handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(handler.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        self.requests.append((method, handler.path))
        try:
            if self.token is not None and handler.headers.get("Authorization") != (
                f"Bearer {self.token}"
            ):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if self.forbid:
                raise ApiError(403, "Forbidden", f'{url.path} is forbidden: User "arn:aws:sts::'
                               '111122223333:assumed-role/alice/alice" cannot '
                               f"{method.lower()} this resource")  # fmt: skip
            body = None
            if method == "POST":
                length = int(handler.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(handler.rfile.read(length))
                except ValueError:
                    raise ApiError(400, "BadRequest", "the body is not JSON") from None
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            if parts[-1] == "log" and method == "GET":
                self._log(handler, parts, query)
                return
            answer = self._route(method, parts, query, body)
        except ApiError as e:
            self._send(handler, e.code, e.body)
            return
        self._send(handler, 201 if method == "POST" else 200, answer)

    def _send(self, handler: Any, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(  # noqa: PLR0911 (one return per path, as the API's routes)
        self, method: str, parts: list[str], query: dict[str, str], body: Any
    ) -> Any:
        with self.changed:
            match parts:
                case ["apis", "sagemaker.amazonaws.com", "v1", "namespaces", ns,
                      "hyperpodpytorchjobs"]:  # fmt: skip
                    if method == "POST":
                        return self._create_job(ns, body)
                    items = [j for (n, _), j in self.jobs.items() if n == ns]
                    return {"apiVersion": "sagemaker.amazonaws.com/v1",
                            "kind": "HyperPodPyTorchJobList", "items": items}  # fmt: skip
                case ["apis", "sagemaker.amazonaws.com", "v1", "namespaces", ns,
                      "hyperpodpytorchjobs", name]:  # fmt: skip
                    if (ns, name) not in self.jobs:
                        raise ApiError(404, "NotFound", f'{JOB_RESOURCE} "{name}" not found')
                    if method == "DELETE":
                        for key in [k for k in self.pods if k[0] == ns and
                                    k[1].startswith(f"{name}-")]:  # fmt: skip
                            self.pods[key]["status"]["phase"] = "Failed"
                            del self.pods[key]
                        self.changed.notify_all()
                        return self.jobs.pop((ns, name))
                    return self.jobs[(ns, name)]
                case ["api", "v1", "namespaces", ns, "pods", name] if method == "GET":
                    if (ns, name) not in self.pods:
                        raise ApiError(404, "NotFound", f'pods "{name}" not found')
                    return self.pods[(ns, name)]
                case ["api", "v1", "namespaces", ns, plural] if plural in CORE_PLURALS:
                    if method == "POST":
                        return self._create_core(ns, plural, body)
                    items = [o for (p, n, _), o in self.objects.items() if (p, n) == (plural, ns)]
                    return {"apiVersion": "v1", "kind": f"{CORE_PLURALS[plural]}List",
                            "items": items}  # fmt: skip
                case ["api", "v1", "nodes"]:
                    return {"kind": "NodeList", "apiVersion": "v1",
                            "items": _select(self.nodes, query.get("labelSelector"))}  # fmt: skip
                case ["api", "v1", "pods"]:
                    pods = [p for p in self.pods.values()
                            if p["status"]["phase"] not in ("Succeeded", "Failed")]  # fmt: skip
                    return {"kind": "PodList", "apiVersion": "v1", "items": pods}
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _create_job(self, ns: str, body: Any) -> dict[str, Any]:
        name = _metadata_name(body, ns)
        problems = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in jsonschema.Draft202012Validator(job_schema()).iter_errors(body)
        ]
        if not problems:
            for i, replica in enumerate(body["spec"]["replicaSpecs"]):
                problems += self._core_problems(
                    {"apiVersion": "v1", "kind": "PodTemplate",
                     "metadata": {"name": f"{name}-{replica['name']}", "namespace": ns},
                     "template": replica["template"]},
                    prefix=f"spec.replicaSpecs[{i}].",
                )  # fmt: skip
        if problems:
            raise ApiError(422, "Invalid", f'HyperPodPyTorchJob.sagemaker.amazonaws.com "{name}" '
                           f"is invalid: {'; '.join(sorted(problems))}")  # fmt: skip
        if (ns, name) in self.jobs:
            raise ApiError(409, "AlreadyExists",
                f'{JOB_RESOURCE} "{name}" already exists')  # fmt: skip
        stored = _stored(body, ns)
        self.jobs[(ns, name)] = stored
        return stored

    def _create_core(self, ns: str, plural: str, body: Any) -> dict[str, Any]:
        name = _metadata_name(body, ns)
        if body.get("kind") != CORE_PLURALS[plural]:
            raise ApiError(400, "BadRequest", f"the kind {body.get('kind')} is not {plural}")
        problems = self._core_problems(body)
        if problems:
            raise ApiError(422, "Invalid", f'{body["kind"]} "{name}" is invalid: '
                           f"{'; '.join(problems)}")  # fmt: skip
        if (plural, ns, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists')
        stored = _stored(body, ns)
        self.objects[(plural, ns, name)] = stored
        return stored

    def _core_problems(self, obj: dict[str, Any], prefix: str = "") -> list[str]:
        try:
            kubernetes_validate.validate(obj, self.version, strict=True)
        except kubernetes_validate.ValidationError as e:
            return [f"{prefix}{'.'.join(str(p) for p in e.path)}: {e.message}"]
        except kubernetes_validate.SchemaNotFoundError as e:
            return [f"no such kind: {e}"]
        return []

    def _log(self, handler: Any, parts: list[str], query: dict[str, str]) -> None:
        ns, name = parts[3], parts[5]
        with self.changed:
            pod = self.pods.get((ns, name))
            if pod is None:
                raise_code = 404, status(404, "NotFound", f'pods "{name}" not found')
            elif pod["status"]["phase"] == "Pending":
                waiting = f'container "trainer" in pod "{name}" is waiting to start'
                raise_code = 400, status(400, "BadRequest", f"{waiting}: ContainerCreating")
            else:
                raise_code = None
            lines = list(self.logs.get((ns, name), []))
        if raise_code is not None:
            self._send(handler, *raise_code)
            return
        tail = query.get("tailLines")
        start = max(0, len(lines) - int(tail)) if tail is not None else 0
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()  # HTTP/1.0: the answer ends when the connection closes
        sent = start
        while True:
            for line in lines[sent:]:
                handler.wfile.write((line + "\n").encode())
            handler.wfile.flush()
            sent = len(lines)
            if query.get("follow") != "true":
                return
            with self.changed:
                while True:
                    pod = self.pods.get((ns, name))
                    lines = list(self.logs.get((ns, name), []))
                    if len(lines) > sent or pod is None or pod["status"]["phase"] != "Running":
                        break
                    self.changed.wait(5)
            if len(lines) == sent:
                return


def _metadata_name(body: Any, ns: str) -> str:
    meta = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName "
                       "is required")  # fmt: skip
    if meta.get("namespace") not in (None, ns):
        raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                       "the namespace sent on the request")  # fmt: skip
    return str(meta["name"])


def _stored(body: dict[str, Any], ns: str) -> dict[str, Any]:
    stored = json.loads(json.dumps(body))
    stored["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now(),
                              resourceVersion="1")  # fmt: skip
    stored.setdefault("status", {})
    return dict(stored)


def _select(objects: list[dict[str, Any]], selector: str | None) -> list[dict[str, Any]]:
    """Objects whose labels match `key=value` / `key` terms (comma: and)."""
    if not selector:
        return list(objects)
    terms = [t.partition("=") for t in selector.split(",")]
    return [
        o for o in objects
        if all((k in o["metadata"].get("labels", {})) and (not eq or
               o["metadata"]["labels"][k] == v) for k, eq, v in terms)
    ]  # fmt: skip


def node(name: str, instance_type: str, *, ready: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "node.kubernetes.io/instance-type": instance_type,
                "sagemaker.amazonaws.com/node-health-status": "Schedulable"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}  # fmt: skip
