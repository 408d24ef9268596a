"""operations.eks_jobs against the stub Kubernetes API (tests/kube_stub.py): the job rendered from
environments/studio-eks.yaml submitted, listed, shown with the trainer's progress from its rank-0
pod's log, its log copied and followed, cancelled; an unknown job, an identity without an access
entry, and manifests the API refuses (the CRD's schema, the core pod template schema)."""

from __future__ import annotations

import copy
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.kubernetes_api import KubernetesApi, KubernetesApiError
from hyperpod_kit.jobs import render_jobs
from hyperpod_kit.operations.eks_jobs import USER_LABEL, EksJobs
from hyperpod_kit.operations.job_model import JobError
from tests.conftest import REPO
from tests.kube_stub import KubeStub, node

IMAGE = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainer:abc"
TOKEN = "k8s-aws-v1.test"
LOG = [
    "[rank0] starting hyperpodrun",
    '{"event": "step", "step": 1, "loss": 3.5, "tokens_per_s": 90.0}',
    "a torchrun warning",
    '{"event": "checkpoint", "step": 2}',
    '{"event": "step", "step": 3, "loss": 2.5, "tokens_per_s": 100.0}',
]


@pytest.fixture(scope="module")
def rendered() -> tuple[str, str, dict[str, Any], str]:
    config = load_environment(REPO / "environments" / "studio-eks.yaml").config
    (job,) = render_jobs(config, image=IMAGE)
    manifest = yaml.safe_load(job.text)
    return job.filename, job.text, manifest, manifest["metadata"]["namespace"]


@pytest.fixture
def stub() -> Iterator[KubeStub]:
    server = KubeStub(token=TOKEN)
    yield server
    server.close()


def jobs_on(stub: KubeStub, namespace: str, user: str | None = None) -> EksJobs:
    api = KubernetesApi(stub.endpoint, lambda: TOKEN, None, name="hyperpod-studio-eks")
    return EksJobs(api, namespace, user, sleep=lambda s: time.sleep(min(s, 0.05)))


def one_line(e: pytest.ExceptionInfo[JobError]) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


def test_submit_list_show_logs_cancel(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    filename, text, manifest, ns = rendered
    name = manifest["metadata"]["name"]
    eks = jobs_on(stub, ns)
    assert eks.submit(text, filename=filename, folder=tmp_path) == name
    assert (tmp_path / filename).read_text() == text
    # the API stored what the manifest says
    stored = stub.jobs[(ns, name)]
    assert stored["spec"] == manifest["spec"]
    # before the operator has started it: Pending, no progress, no log
    (pending,) = eks.jobs()
    assert (pending.id, pending.state, pending.where, pending.progress) == (name, "Pending", ns,
                                                                             None)  # fmt: skip
    assert pending.nodes == manifest["spec"]["replicaSpecs"][0]["replicas"]
    out = io.StringIO()
    eks.logs(name, follow=False, out=out)
    assert out.getvalue() == ""

    pod = stub.start(ns, name, LOG)
    assert pod == f"{name}-pod-0"
    shown = eks.job(name)
    assert shown.state == "Running" and shown.started is not None and shown.ended is None
    assert shown.details["pod"] == pod
    assert shown.progress is not None
    progress = shown.progress
    assert (progress.step, progress.loss, progress.tokens_per_s) == (3, 2.5, 100.0)
    assert shown.progress.last_checkpoint == 2
    # progress reads the log's tail only, from the trainer's container
    assert any(p.endswith(f"/pods/{pod}/log?tailLines=5000&container=trainer")
               for _, p in stub.requests)  # fmt: skip
    out = io.StringIO()
    eks.logs(name, follow=False, out=out)
    assert out.getvalue().splitlines() == LOG

    stub.finish(ns, name, "Succeeded")
    (done,) = eks.jobs()
    assert done.state == "Succeeded" and done.ended is not None

    eks.cancel(name)
    assert (ns, name) not in stub.jobs and (ns, pod) not in stub.pods
    with pytest.raises(JobError) as gone:
        eks.job(name)
    assert one_line(gone) == f"no job {name} in namespace {ns}"
    assert eks.jobs() == []


def test_logs_follow_until_the_job_ends(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    filename, text, manifest, ns = rendered
    name = manifest["metadata"]["name"]
    eks = jobs_on(stub, ns)
    eks.submit(text, filename=filename, folder=tmp_path)
    out = io.StringIO()
    follower = threading.Thread(target=eks.logs, args=(name,),
                                kwargs={"follow": True, "out": out, "poll_s": 0.05})  # fmt: skip
    follower.start()
    time.sleep(0.2)  # the follower waits for the pod
    assert follower.is_alive() and out.getvalue() == ""
    pod = stub.start(ns, name, LOG[:2])
    later = ['{"event": "step", "step": 4, "loss": 2.25, "tokens_per_s": 101.0}', "saving"]
    deadline = time.monotonic() + 10
    while out.getvalue().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    stub.append_log(ns, pod, *later)
    while out.getvalue().count("\n") < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert follower.is_alive()  # the job still runs
    stub.finish(ns, name, "Failed")
    follower.join(10)
    assert not follower.is_alive()
    assert out.getvalue().splitlines() == LOG[:2] + later  # each line once, in order


def test_an_unknown_job_is_one_line(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str]
) -> None:
    ns = rendered[3]
    eks = jobs_on(stub, ns)
    for call in (lambda: eks.job("nope"), lambda: eks.cancel("nope"),
                 lambda: eks.logs("nope", follow=True, out=io.StringIO())):  # fmt: skip
        with pytest.raises(JobError) as caught:
            call()
        assert one_line(caught) == f"no job nope in namespace {ns}"


def test_no_access_entry_is_named(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    filename, text, _, ns = rendered
    stub.forbid = True
    eks = jobs_on(stub, ns)
    for call in (lambda: eks.submit(text, filename=filename, folder=tmp_path),
                 eks.jobs, lambda: eks.job("pretrain")):  # fmt: skip
        with pytest.raises(JobError) as caught:
            call()
        message = one_line(caught)
        assert "hyperpod-studio-eks refused your IAM identity (HTTP 403)" in message
        assert (
            f"no EKS access entry that allows hyperpodpytorchjobs and pods in namespace {ns}"
            in message
        )
        assert "cannot" in message  # the API's own words
    # a token the cluster does not take: 401, the same advice
    stub.forbid = False
    api = KubernetesApi(stub.endpoint, lambda: "k8s-aws-v1.other", None, name="c")
    with pytest.raises(JobError, match=r"refused your IAM identity \(HTTP 401\).*access entry"):
        EksJobs(api, ns).jobs()


def test_a_manifest_the_crd_schema_refuses_is_the_apis_message(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    _, _, manifest, ns = rendered
    eks = jobs_on(stub, ns)
    bad = copy.deepcopy(manifest)
    bad["spec"]["replicaSpecs"][0]["replicas"] = "two"
    bad["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    with pytest.raises(JobError) as caught:
        eks.submit(yaml.safe_dump(bad), filename="bad.yaml", folder=tmp_path)
    message = one_line(caught)
    name = manifest["metadata"]["name"]
    assert message.startswith(
        f"the Kubernetes API refused the job {name}: "
        f'HyperPodPyTorchJob.sagemaker.amazonaws.com "{name}" is invalid: '
    )
    assert "spec.replicaSpecs.0.replicas: 'two' is not of type 'integer'" in message
    assert "spec.runPolicy.cleanPodPolicy: 'Sometimes' is not one of" in message
    assert stub.jobs == {}
    # what the CRD leaves open, the core pod template schema does not
    bad = copy.deepcopy(manifest)
    bad["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["securityContext"] = {
        "privileged": "yes"
    }
    with pytest.raises(JobError) as caught:
        eks.submit(yaml.safe_dump(bad), filename="bad2.yaml", folder=tmp_path)
    assert ("spec.replicaSpecs[0].template.spec.containers.0.securityContext.privileged: "
            "'yes' is not of type 'boolean'") in one_line(caught)  # fmt: skip
    assert stub.jobs == {}


def test_what_submit_refuses_before_the_api(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    filename, text, manifest, ns = rendered
    eks = jobs_on(stub, ns)
    config = load_environment(REPO / "environments" / "studio-eks.yaml").config
    (no_image,) = render_jobs(config)
    with pytest.raises(JobError, match=r"placeholder \$\{TRAINER_IMAGE\}: render it with --image"):
        eks.submit(no_image.text, filename=filename, folder=tmp_path)
    (tmp_path / filename).write_text("someone else's job\n")
    with pytest.raises(JobError, match="exists with other content: not overwritten"):
        eks.submit(text, filename=filename, folder=tmp_path)
    with pytest.raises(JobError, match="no folder"):
        eks.submit(text, filename=filename, folder=tmp_path / "missing")
    with pytest.raises(JobError, match="is not the namespace other"):
        jobs_on(stub, "other").submit(text, filename="x.yaml", folder=tmp_path)
    assert [m for m, _ in stub.requests] == []  # nothing reached the API
    # the same job twice: the API's conflict, in the job commands' words
    (tmp_path / filename).unlink()
    eks.submit(text, filename=filename, folder=tmp_path)
    with pytest.raises(JobError, match=f"a job {manifest['metadata']['name']} already exists"):
        eks.submit(text, filename=filename, folder=tmp_path)


def test_list_newest_first_and_only_this_users(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    _, _, manifest, ns = rendered
    eks = jobs_on(stub, ns, user="alice")
    for name, owner in (("first", "alice"), ("second", "bob"), ("third", None)):
        job = copy.deepcopy(manifest)
        job["metadata"]["name"] = name
        if owner:
            job["metadata"].setdefault("labels", {})[USER_LABEL] = owner
        eks.submit(yaml.safe_dump(job), filename=f"{name}.yaml", folder=tmp_path)
        stub.jobs[(ns, name)]["metadata"]["creationTimestamp"] = (
            f"2025-01-0{len(stub.jobs)}T00:00:00Z"
        )
    assert [j.id for j in eks.jobs()] == ["third", "first"]
    assert [(j.id, j.user) for j in eks.jobs(everyone=True)] == [
        ("third", None), ("second", "bob"), ("first", "alice")]  # fmt: skip


def test_capacity_counts_ready_nodes_without_training_pods(
    stub: KubeStub, rendered: tuple[str, str, dict[str, Any], str], tmp_path: Path
) -> None:
    filename, text, manifest, ns = rendered
    kind = "ml.g5.8xlarge"
    stub.nodes = [node("n1", kind), node("n2", kind), node("n3", kind, ready=False),
                  node("other", "ml.m5.xlarge")]  # fmt: skip
    eks = jobs_on(stub, ns)
    eks.submit(text, filename=filename, folder=tmp_path)
    stub.start(ns, manifest["metadata"]["name"], node="n1")
    capacity = eks.capacity(kind)
    assert capacity is not None
    assert (capacity.free, capacity.total) == (1, 3)
    assert "1 of 3 nodes (instance type ml.g5.8xlarge)" in capacity.detail
    stub.forbid = True  # a namespace-scoped identity cannot read nodes: unknown, not an error
    assert eks.capacity(kind) is None


def test_the_stub_checks_core_kinds_against_the_kubernetes_schema(stub: KubeStub) -> None:
    api = KubernetesApi(stub.endpoint, lambda: TOKEN, None)
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "1"}}  # fmt: skip
    assert api.post("/api/v1/namespaces/n/configmaps", good)["metadata"]["namespace"] == "n"
    bad = {**good, "metadata": {"name": "d"}, "data": {"a": 1}}
    with pytest.raises(KubernetesApiError) as caught:
        api.post("/api/v1/namespaces/n/configmaps", bad)
    assert caught.value.code == "422"
    assert caught.value.api_message == (
        "ConfigMap \"d\" is invalid: data.a: 1 is not of type 'string', 'null'"
    )


# --- `hyperpod-kit job` on EKS: the command line over the same stub ------------------------------


@pytest.fixture
def cli_on_stub(stub: KubeStub, monkeypatch: pytest.MonkeyPatch) -> KubeStub:
    """The command line's AWS facade with credentials, whose Kubernetes API is the stub's."""
    from hyperpod_kit.config.aws import AwsFacade

    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: True)
    monkeypatch.setattr(
        AwsFacade, "kubernetes",
        lambda self, cluster: KubernetesApi(stub.endpoint, lambda: TOKEN, None, name=cluster),
    )  # fmt: skip
    return stub


def test_the_job_commands_on_eks(
    cli_on_stub: KubeStub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    rendered: tuple[str, str, dict[str, Any], str],
) -> None:  # fmt: skip
    from hyperpod_kit.cli.main import main

    _, _, _, namespace = rendered
    example = str(REPO / "environments" / "studio-eks.yaml")
    kind = load_environment(example).config.cluster.instance_groups[-1].primary_type
    cli_on_stub.nodes = [node("n-1", kind), node("n-2", kind), node("n-3", "ml.t3.medium")]
    folder = tmp_path / "runs"
    code = main(["job", "submit", example, "--name", "sft-1", "--task", "sft", "--yes",
                 "--folder", str(folder), "--image", IMAGE, "-q"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "sft-1"
    assert f"nodes       2 of 2 free (2 of 2 nodes (instance type {kind})" in err, err
    assert "sft-1: sft of" in err
    created = cli_on_stub.jobs[(namespace, "sft-1")]  # what the API holds, validated by it
    assert "train.task=sft" in json.dumps(created)
    assert (folder / "sft-1.hyperpodpytorchjob.yaml").is_file()

    cli_on_stub.start(namespace, "sft-1", LOG)
    assert main(["job", "show", example, "sft-1", "--format", "json", "-q"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["progress"]["step"] == 3 and shown["progress"]["last_checkpoint"] == 2
    assert main(["job", "list", example, "-q"]) == 0
    assert "sft-1" in capsys.readouterr().out
    assert main(["job", "cancel", example, "sft-1", "-q"]) == 0
    capsys.readouterr()
    assert main(["job", "show", example, "sft-1", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no job sft-1 in namespace" in err


def test_no_credentials_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hyperpod_kit.cli.main import main
    from hyperpod_kit.config.aws import AwsFacade

    monkeypatch.setattr(AwsFacade, "has_credentials", lambda self: False)
    assert main(["job", "list", str(REPO / "environments" / "studio-eks.yaml"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no AWS credentials" in err
