"""Job templates rendered from the environment file: hardware facts, validated values only, and
linted output (bash -n, shellcheck, the HyperPodPyTorchJob schema)."""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.cli.main import main
from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.config.derived import JOB_EVENTS_DIR, trainer_settings
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.facts import instance_types
from hyperpod_kit.jobs import ImageError, JobImage, LocalRun, RenderedJob, lint, render_jobs
from hyperpod_kit.jobs.context import UnsafeValueError, job_context
from hyperpod_kit.jobs.eks import AUTO_RESUME, MAX_RETRIES, check_pytorch_job, pytorch_job
from hyperpod_kit.jobs.image import trainer_stack_image
from hyperpod_kit.jobs.slurm import TemplateError
from hyperpod_kit.paths import LIFECYCLE_DIR
from hyperpod_kit.stacks.trainer import trainer_image_uri
from tests.conftest import REPO, default_data, merge

EKS = REPO / "environments" / "eks.yaml"
EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))
IMAGE = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainer:abc"
GPU_TYPES = sorted(name for name, t in instance_types().items() if t.accelerator_kind == "gpu")
needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None and os.environ.get("CI") != "true",
    reason="shellcheck not installed (.ci/run installs it)",
)


def _config(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))


def _on(instance_type: str, orchestrator: str = "slurm") -> EnvironmentConfig:
    """The default job on one node group of `instance_type`."""
    if orchestrator == "slurm":
        groups = [
            {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
             "instance_count": 1},
            {"name": "gpu", "role": "compute", "instance_type": instance_type, "instance_count": 2},
        ]  # fmt: skip
    else:
        groups = [{"name": "gpu", "role": "worker", "instance_type": instance_type,
                   "instance_count": 2}]  # fmt: skip
    return _config({"orchestrator": orchestrator, "cluster": {"instance_groups": groups}})


def _sbatch(config: EnvironmentConfig, **kw: Any) -> str:
    if "local" not in kw:
        kw.setdefault("image", IMAGE)  # a Slurm job is always rendered with its image
    (job,) = render_jobs(config, **kw)
    assert job.kind == "sbatch"
    return job.text


def _manifest(config: EnvironmentConfig, image: str | None = IMAGE) -> dict[str, Any]:
    (job,) = render_jobs(config, image=image)
    assert job.kind == "manifest"
    loaded: dict[str, Any] = yaml.safe_load(job.text)
    return loaded


def _eks() -> EnvironmentConfig:
    return load_environment(EKS).config


# --- Slurm ---------------------------------------------------------------------------------------


def test_sbatch_directives_and_launch_follow_the_job() -> None:
    script = _sbatch(_config())
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=pretrain\n#SBATCH --nodes=2\n")
    assert "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --signal=TERM@180" in script
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=170" in script
    assert "srun --auto-resume=1 --container-image=" in script
    assert "--rdzv-backend=c10d" in script and "exec torchrun" in script
    assert "export HYPERPOD_NPROC=1 " in script  # ml.g5.8xlarge: one GPU, one rank
    assert "-m hyperpod_trainer" in script
    assert f"IMAGE=${{TRAINER_IMAGE:-{IMAGE}}}" in script
    assert "aws ssm" not in script  # the execution role has no grant for the image parameter
    assert "--requeue" not in script


def test_sbatch_partition_is_the_compute_groups_partition() -> None:
    """HyperPod's API-driven Slurm names partitions from SlurmConfig.PartitionNames (the group's
    `partition`, default its name), never after the instance type."""
    assert "#SBATCH --partition=compute\n" in _sbatch(_config())
    groups = copy.deepcopy(default_data()["cluster"]["instance_groups"])
    groups[2]["partition"] = "a100"
    script = _sbatch(_config({"cluster": {"instance_groups": groups}}))
    assert "#SBATCH --partition=a100\n" in script
    assert "ml.g5.8xlarge" not in script.split("\n#SBATCH --partition")[1].splitlines()[0]


def test_sbatch_without_auto_resume_and_with_a_fixed_image() -> None:
    script = _sbatch(
        _config({"trainer": {"job": {"auto_resume": False, "partition": "dev"}}}), image=IMAGE
    )
    assert "--auto-resume" not in script
    assert "#SBATCH --partition=dev" in script
    assert f"IMAGE=${{TRAINER_IMAGE:-{IMAGE}}}" in script
    assert "aws ssm" not in script


@pytest.mark.parametrize("instance_type", GPU_TYPES)
def test_sbatch_follows_the_instance_types_interconnect(instance_type: str) -> None:
    """EFA variables only where the type has EFA; device RDMA only where the EFA device has it
    (libfabric aborts with FI_EFA_USE_DEVICE_RDMA=1 on a device without RDMA)."""
    facts = instance_types()[instance_type]
    script = _sbatch(_on(instance_type))
    assert ("export FI_PROVIDER=efa" in script) == facts.efa
    assert ("FI_EFA_USE_DEVICE_RDMA=1" in script) == (facts.efa and facts.rdma_read)
    # As the public FSDP examples set them where the type has EFA: forked data-loader workers
    # and EFA's huge pages do not mix; no CUDA sync-memops on every buffer.
    assert ("export FI_EFA_USE_HUGE_PAGE=0" in script) == facts.efa
    assert ("export FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in script) == facts.efa
    assert f"export HYPERPOD_NPROC={facts.gpus} " in script
    exported = [line.removeprefix("export ").split("=", 1) for line in script.splitlines()
                if line.startswith("export FI_")]  # fmt: skip
    assert [tuple(e) for e in exported] == job_context(_on(instance_type)).network.environment


def test_g5_has_efa_without_device_rdma_and_p5_has_both() -> None:
    g5 = _sbatch(_config())
    assert "export FI_PROVIDER=efa" in g5 and "FI_EFA_USE_DEVICE_RDMA" not in g5
    p5 = _sbatch(_on("ml.p5.48xlarge"))
    assert "export FI_EFA_USE_DEVICE_RDMA=1" in p5
    assert "# ml.p5.48xlarge: 32 EFA interface(s), RDMA" in p5
    g5x = _sbatch(_on("ml.g5.xlarge"))
    assert "FI_PROVIDER" not in g5x  # no EFA on a g5.xlarge: NCCL over TCP


def _example_image(config: EnvironmentConfig) -> JobImage | None:
    """What `hyperpod-kit jobs` renders without --image: the trainer stack's image (Slurm)."""
    if config.orchestrator != "slurm":
        return None
    return trainer_stack_image(trainer_image_uri(config))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_renders_lint_clean(example: Path) -> None:
    config = load_environment(example).config
    (job,) = render_jobs(config, image=_example_image(config))
    assert lint(job) == []
    assert "aws ssm" not in job.text


@needs_shellcheck
@pytest.mark.parametrize("instance_type", GPU_TYPES[::3])
def test_generated_instance_types_render_shellcheck_clean(instance_type: str) -> None:
    for config in (_on(instance_type), _config({"trainer": {"job": {"auto_resume": False}}})):
        (job,) = render_jobs(config, image=IMAGE)
        assert lint(job) == []
        (local,) = render_jobs(config, local=LocalRun(fsx_root=Path("/tmp/x"), python="/p y"))
        assert lint(local) == []


def test_lint_reports_a_broken_script() -> None:
    problems = lint(RenderedJob("x.sbatch", "#!/bin/bash\nif then\n", "sbatch"))
    assert problems and any("x.sbatch" in p for p in problems)


# --- running the rendered script ----------------------------------------------------------------


def _run_rendered(script: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run the rendered sbatch with `srun` standing in as "run the command here" and the
    launcher recording its arguments; returns the launcher's argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec "$@"\n')
    record = tmp_path / "argv"
    fake_python = bin_dir / "python"
    fake_python.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {shlex.quote(str(record))}\n')
    for f in (srun, fake_python):
        f.chmod(0o755)
    job = tmp_path / "job.sbatch"
    job.write_text(script)
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2"}
    result = subprocess.run(
        ["bash", str(job)], env=base | env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return record.read_text().splitlines()


@pytest.mark.parametrize(
    ("job_nodes", "step_nodes", "head"),
    [
        ("ip-10-1-2-[5-7,9]", None, "ip-10-1-2-5"),
        ("ip-10-1-2-5,ip-10-1-3-1", None, "ip-10-1-2-5"),
        ("node[01-04]", None, "node01"),
        ("single", None, "single"),
        ("ip-10-1-2-[5,7]", "ip-10-1-2-[7,11]", "ip-10-1-2-7"),  # restarted step, new first node
    ],
)
def test_rendezvous_host_comes_from_the_steps_node_list(
    tmp_path: Path, job_nodes: str, step_nodes: str | None, head: str
) -> None:
    """The head node is computed inside the step auto-resume repeats: a restart on a replaced
    first node uses the step's node list, not the one the batch script started with."""
    local = LocalRun(fsx_root=tmp_path / "fsx", python=str(tmp_path / "bin" / "python"))
    script = _sbatch(_config(), local=local)
    env = {"SLURM_JOB_NODELIST": job_nodes}
    if step_nodes:
        env["SLURM_STEP_NODELIST"] = step_nodes
    argv = _run_rendered(script, tmp_path, env)
    assert argv[:2] == ["-m", "torch.distributed.run"]
    assert f"--rdzv-endpoint={head}:29500" in argv
    assert "--rdzv-id=77" in argv and "--nnodes=2" in argv and "--nproc-per-node=1" in argv
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert f"checkpoint.dir={tmp_path}/fsx/checkpoints" in sets


def _run_job_with_launcher(tmp_path: Path, launcher: str) -> tuple[int, str, Path, bool]:
    """Run the local variant with `launcher` as the trainer's python (a bash body); returns
    (exit code, stderr, checkpoint folder, whether the launcher ran)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    ran = tmp_path / "ran"
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec "$@"\n')
    python = bin_dir / "python"
    python.write_text(f"#!/bin/bash\ntouch {shlex.quote(str(ran))}\n{launcher}\n")
    for f in (srun, python):
        f.chmod(0o755)
    local = LocalRun(fsx_root=tmp_path / "fsx", python=str(python))
    job = tmp_path / "job.sbatch"
    job.write_text(_sbatch(_config(), local=local))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "1"}
    env["SLURM_JOB_NODELIST"] = "node1"
    result = subprocess.run(
        ["bash", str(job)], env=env, capture_output=True, text=True, check=False
    )
    ran_now = ran.exists()
    ran.unlink(missing_ok=True)
    return result.returncode, result.stderr, tmp_path / "fsx" / "checkpoints", ran_now


def test_sbatch_exits_with_the_trainers_recorded_final_code(tmp_path: Path) -> None:
    """torchrun exits 1 whatever its ranks' code; the trainer records a final failure in its
    checkpoint folder (docs/trainer.md): the job ends with that code, and a requeued job stops
    before starting anything."""
    ckpt = tmp_path / "fsx" / "checkpoints"
    record = '{\n "exit_code": 5,\n "reason": "no intact checkpoint"\n}'
    fails = f"mkdir -p {shlex.quote(str(ckpt))}; printf '%s' {shlex.quote(record)} > "
    fails += f"{shlex.quote(str(ckpt / 'FAILED.json'))}; exit 1"
    code, stderr, _, ran = _run_job_with_launcher(tmp_path, fails)
    assert (code, ran) == (5, True), stderr
    assert "final failure recorded" in stderr
    code, stderr, _, ran = _run_job_with_launcher(tmp_path, "exit 0")  # a requeue of the job
    assert (code, ran) == (5, False), stderr
    (ckpt / "FAILED.json").unlink()
    code, stderr, _, ran = _run_job_with_launcher(tmp_path, "exit 1")  # a crash: its own code
    assert (code, ran) == (1, True), stderr
    code, stderr, _, ran = _run_job_with_launcher(tmp_path, "exit 0")
    assert (code, ran) == (0, True), stderr


def test_a_slurm_job_is_rendered_with_its_image() -> None:
    """Never looked up at run time: a Slurm job without an image is refused when rendered."""
    with pytest.raises(ImageError, match="--image"):
        render_jobs(_config())
    local = LocalRun(fsx_root=Path("/tmp/x"), python="/p")  # the local variant runs no container
    assert render_jobs(_config(), local=local)
    with pytest.raises(ImageError, match="not an image reference"):
        render_jobs(_config(), image="x.dkr.ecr/trainer:v1\nrm -rf /")


def test_the_trainer_stacks_image_without_an_account_is_completed_on_the_node() -> None:
    pattern = (
        "@ACCOUNT@.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-@ACCOUNT@-"
        "us-west-2:abc"
    )
    script = _sbatch(_config(), image=trainer_stack_image(pattern))
    assert "aws sts get-caller-identity --region us-west-2 --query Account" in script
    assert f"image_pattern={pattern}\n" in script
    assert "TRAINER_IMAGE=${image_pattern//@ACCOUNT@/$account}" in script
    assert "From: the trainer stack's image, CDK asset abc." in script


def test_local_variant_drops_hyperpod_flags_and_maps_fsx(tmp_path: Path) -> None:
    script = _sbatch(_config(), local=LocalRun(fsx_root=tmp_path, python="/opt/py/bin/python"))
    assert "srun --auto-resume" not in script and "--container-image" not in script
    assert "#SBATCH --requeue" in script
    assert "export HYPERPOD_PYTHON=/opt/py/bin/python" in script
    assert f"--set checkpoint.dir={tmp_path}/checkpoints" in script
    assert "FI_PROVIDER" not in script


# --- values that reach a template ----------------------------------------------------------------


def test_a_value_that_bypassed_validation_never_reaches_a_directive() -> None:
    """The schema rejects a partition with a newline; if validation were bypassed, rendering
    still refuses rather than inject an #SBATCH line."""
    config = _config()
    job = config.trainer.job.model_copy(update={"partition": "gpu\n#SBATCH --uid=0"})
    bad = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    with pytest.raises(UnsafeValueError, match="partition"):
        job_context(bad)


EVENTS_SET = "--set 'metrics.events_file=/var/log/hyperpod-kit/jobs/{job_id}.jsonl'"
NODE_LOG_MOUNT = ",/var/log/hyperpod-kit:/var/log/hyperpod-kit "


def test_with_monitoring_rank_0s_events_go_to_the_nodes_spool(tmp_path: Path) -> None:
    """The log shipper reads the spool (lifecycle/bin/hyperpod-kit-ship-logs --spool): the job
    names its file there and mounts the folder into the container."""
    script = _sbatch(_config({"monitoring": {"enabled": True}}))
    assert EVENTS_SET in script
    assert "--container-mounts=/fsx:/fsx" + NODE_LOG_MOUNT in script
    assert lint(RenderedJob("j.sbatch", script, "sbatch")) == []
    service = (LIFECYCLE_DIR / "systemd" / "hyperpod-kit-ship-logs.service.j2").read_text()
    assert f"--spool {JOB_EVENTS_DIR}=" in service  # the folder the shipper reads


@pytest.mark.parametrize("case", ["monitoring off", "local"])
def test_without_a_shipper_no_events_file_and_no_extra_mount(tmp_path: Path, case: str) -> None:
    if case == "local":
        local = LocalRun(fsx_root=tmp_path, python="/opt/py/bin/python")
        script = _sbatch(_config({"monitoring": {"enabled": True}}), local=local)
    else:
        script = _sbatch(_config({"monitoring": {"enabled": False}}))
    assert "metrics.events_file" not in script
    assert "/var/log/hyperpod-kit" not in script


def test_eks_jobs_name_no_events_file() -> None:
    (job,) = render_jobs(_eks(), image=IMAGE)
    assert "metrics.events_file" not in job.text


def test_values_that_need_quoting_are_quoted(tmp_path: Path) -> None:
    config = _config({"trainer": {"job": {"checkpoint_dir": "/fsx/my ckpt/$(id)"}}})
    script = _sbatch(config)
    # double quotes where the value holds a $: the same word, and shellcheck-clean (SC2016)
    assert '--set "checkpoint.dir=/fsx/my ckpt/\\$(id)"' in script
    assert lint(RenderedJob("j.sbatch", script, "sbatch")) == []


def test_a_users_own_template_gets_the_same_values(tmp_path: Path) -> None:
    own = tmp_path / "mine.sbatch.j2"
    own.write_text(
        "#!/bin/bash\n#SBATCH --job-name={{ job.name | sbatch }}\n"
        "echo {{ job.checkpoint_dir | q }} {{ network.efa }} {{ settings | length }}\n"
    )
    config = _config({"trainer": {"job": {"template": str(own)}}})
    # 14 settings, and model.activation_checkpointing, which default.yaml turns on
    assert (
        _sbatch(config)
        == "#!/bin/bash\n#SBATCH --job-name=pretrain\necho /fsx/checkpoints True 15\n"
    )


def test_the_documented_own_template_renders_lint_clean(tmp_path: Path) -> None:
    """docs/trainer.md's example of a template of one's own renders and passes the linters."""
    text = (REPO / "docs" / "trainer.md").read_text()
    example = text.split("### Your own sbatch template", 1)[1].split("```jinja\n", 1)[1]
    own = tmp_path / "my-job.sbatch.j2"
    own.write_text(example.split("```", 1)[0])
    script = _sbatch(_config({"trainer": {"job": {"template": str(own)}}}))
    assert "#SBATCH --job-name=pretrain\n" in script and "--set model.preset=llama-1b" in script
    assert lint(RenderedJob("j.sbatch", script, "sbatch")) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{{ job.nme }}", "has no attribute 'nme'"),
        ("{% if %}", "mine.sbatch.j2:1:"),
        # a value without the filter of its context: the line and the expression as written
        (
            "#!/bin/bash\n#SBATCH --job-name={{ job.name }}\n",
            r"mine.sbatch.j2:2: \{\{ job.name \}\} reaches the output without a filter",
        ),
        ("#!/bin/bash\n# {{ job.checkpoint_dir ~ '/x' | q }}\n", r"mine.sbatch.j2:2:"),
    ],
)
def test_a_broken_user_template_is_a_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    own = tmp_path / "mine.sbatch.j2"
    own.write_text(text)
    with pytest.raises(TemplateError, match=problem):
        render_jobs(_config({"trainer": {"job": {"template": str(own)}}}), image=IMAGE)


# --- the trainer accepts what the templates pass --------------------------------------------------


def test_overrides_are_accepted_by_the_trainer() -> None:
    """Every `--set` the templates pass is a trainer field, and it gets the job's value."""
    from hyperpod_trainer.config import load_config

    config = _config({"monitoring": {"enabled": True}})
    job = config.trainer.job
    cfg = load_config(None, [f"{key}={value}" for key, value in job_context(config).settings])
    assert cfg.metrics.events_file == f"{JOB_EVENTS_DIR}/{{job_id}}.jsonl"
    assert cfg.model.preset == job.preset
    assert cfg.train.global_batch_size == job.global_batch_size
    assert cfg.train.micro_batch_size == job.micro_batch_size
    assert cfg.train.steps == job.max_steps
    assert cfg.data.path == job.data_path and cfg.data.seq_len == job.seq_len
    assert cfg.data.token_dtype == job.token_dtype
    assert cfg.checkpoint.dir == job.checkpoint_dir
    assert cfg.checkpoint.every_steps == job.checkpoint_every
    assert cfg.checkpoint.keep_last == job.keep_last
    assert cfg.checkpoint.async_save is True and cfg.checkpoint.resume is True


def test_sbatch_passes_exactly_the_overrides() -> None:
    config = _config()
    settings = job_context(config).settings
    assert settings[: len(trainer_settings(config.trainer.job))] == [
        (s.key, s.value) for s in trainer_settings(config.trainer.job)
    ]
    tail = _sbatch(config).split("hyperpod-trainer \\\n", 1)[1]
    tail, handler = tail.split(" \\\n  || ", 1)  # then: the recorded final code, if any
    assert handler.startswith('{ status=$?; hyperpod_final; exit "$status"; }')
    tail = tail.replace("\\\n", "")
    assert shlex.split(tail) == [w for key, value in settings for w in ("--set", f"{key}={value}")]


# --- EKS -----------------------------------------------------------------------------------------


def test_pytorch_job_manifest_for_the_elastic_example() -> None:
    manifest = _manifest(_eks())
    assert check_pytorch_job(manifest) == []
    assert manifest["apiVersion"] == "sagemaker.amazonaws.com/v1"
    assert manifest["kind"] == "HyperPodPyTorchJob"
    assert manifest["metadata"]["namespace"] == "training"
    assert manifest["metadata"]["annotations"] == {AUTO_RESUME: "true", MAX_RETRIES: "3"}
    spec = manifest["spec"]
    assert spec["nprocPerNode"] == "4"
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "jobMaxRetryCount": 3}
    assert spec["elasticPolicy"] == {
        "minReplicas": 1, "maxReplicas": 4, "replicaDiscreteValues": [1, 2, 3, 4],
        "scalingTimeoutInSeconds": 600, "gracefulShutdownTimeoutInSeconds": 600,
        "faultyScaleDownTimeoutInSeconds": 600,
    }  # fmt: skip
    (replica,) = spec["replicaSpecs"]
    assert replica["replicas"] == 2
    pod = replica["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"][:4] == ["hyperpodrun", "--nnodes=1:4", "--nproc-per-node=4", "-m"]
    # ml.g5.12xlarge: 4 GPUs, 1 EFA interface, no device RDMA
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env
    assert env["FI_EFA_USE_HUGE_PAGE"] == "0" and env["FI_EFA_SET_CUDA_SYNC_MEMOPS"] == "0"
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.g5.12xlarge"


def test_eks_shutdown_window_matches_the_sbatch() -> None:
    """SIGTERM, then stop_grace_seconds before the kill: hyperpodrun waits the same
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT as the sbatch's torchrun, so the final save fits."""
    config = _eks()
    job = config.trainer.job.model_copy(update={"stop_grace_seconds": 600})
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    pod = _manifest(config)["spec"]["replicaSpecs"][0]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert pod["terminationGracePeriodSeconds"] == 600
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "590"
    assert env["HYPERPOD_TRAINER_JOB_ID"] == "training/elastic-pretrain"
    script = _sbatch(_config({"trainer": {"job": {"stop_grace_seconds": 600}}}))
    assert "#SBATCH --signal=TERM@600" in script
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=590" in script


@pytest.mark.parametrize("instance_type", GPU_TYPES)
def test_manifest_requests_gpus_and_efa_of_the_instance_type(instance_type: str) -> None:
    facts = instance_types()[instance_type]
    manifest = _manifest(_on(instance_type, "eks"))
    assert check_pytorch_job(manifest) == []
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(facts.gpus)
    efa = limits.get("vpc.amazonaws.com/efa")
    assert efa == (str(facts.efa_interfaces) if facts.efa_interfaces else None)


def test_pods_run_as_the_jobs_user() -> None:
    data = yaml.safe_load(EKS.read_text())
    data["users"] = [{"name": "alice", "uid": 10001, "gid": 2001}]
    data["trainer"]["job"]["user"] = "alice"
    config = EnvironmentConfig.model_validate(data)
    pod = _manifest(config)["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 10001, "runAsGroup": 2001, "fsGroup": 2001}


def test_pytorch_job_without_elastic_or_auto_resume() -> None:
    config = _eks()
    job = config.trainer.job.model_copy(update={"elastic": None, "auto_resume": False})
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    manifest = pytorch_job(config, job_context(config))
    assert check_pytorch_job(manifest) == []
    assert "elasticPolicy" not in manifest["spec"]
    assert "annotations" not in manifest["metadata"]
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["image"] == "${TRAINER_IMAGE}"
    assert "--nnodes=2" in container["command"]


def _broken(change: str) -> dict[str, Any]:
    manifest = copy.deepcopy(_manifest(_eks()))
    spec = manifest["spec"]
    pod = spec["replicaSpecs"][0]["template"]["spec"]
    if change == "kind":
        manifest["kind"] = "PyTorchJob"
    elif change == "name":
        manifest["metadata"]["name"] = "Bad_Name"
    elif change == "long-name":
        manifest["metadata"]["name"] = "a" * 41
    elif change == "replicas":
        spec["replicaSpecs"][0]["replicas"] = 9
    elif change == "both-steps":
        spec["elasticPolicy"]["replicaIncrementStep"] = 1
    elif change == "no-image":
        del pod["containers"][0]["image"]
    elif change == "nproc":
        spec["nprocPerNode"] = "four"
    elif change == "unknown-key":
        spec["runPolcy"] = spec.pop("runPolicy")
    elif change == "quantity":
        pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "eight"
    elif change == "clean-pod-policy":
        spec["runPolicy"]["cleanPodPolicy"] = "Never"
    return manifest


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("kind", "'HyperPodPyTorchJob' was expected"), ("name", "does not match"),
        ("long-name", "is too long"), ("replicas", "outside [1, 4]"),
        ("both-steps", "replicaIncrementStep or"), ("no-image", "'image' is a required property"),
        ("nproc", "does not match"), ("unknown-key", "'runPolcy' was unexpected"),
        ("quantity", "does not match"), ("clean-pod-policy", "is not one of"),
    ],
)  # fmt: skip
def test_check_pytorch_job_catches_broken_manifests(change: str, problem: str) -> None:
    problems = check_pytorch_job(_broken(change))
    assert len(problems) == 1 and problem in problems[0], problems


# --- the CLI -------------------------------------------------------------------------------------


def test_jobs_command_writes_the_orchestrators_template(tmp_path: Path) -> None:
    assert main(["jobs", str(EKS), "-o", str(tmp_path / "jobs"), "--image", IMAGE]) == 0
    written = [p for p in (tmp_path / "jobs").iterdir() if not p.name.startswith(".")]
    assert [p.name for p in written] == ["elastic-pretrain.hyperpodpytorchjob.yaml"]
    assert check_pytorch_job(yaml.safe_load(written[0].read_text())) == []
    assert main(["jobs", str(REPO / "environments/default.yaml"), "-o", str(tmp_path / "s")]) == 0
    assert [p.name for p in (tmp_path / "s").iterdir() if not p.name.startswith(".")] == [
        "pretrain.sbatch"
    ]


def test_jobs_command_renders_the_trainer_stacks_image(tmp_path: Path) -> None:
    default = REPO / "environments/default.yaml"  # no account: completed on the node
    assert main(["jobs", str(default), "-o", str(tmp_path / "s")]) == 0
    script = (tmp_path / "s" / "pretrain.sbatch").read_text()
    pattern = trainer_image_uri(load_environment(default).config)
    assert pattern.startswith("@ACCOUNT@.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-")
    assert f"image_pattern={pattern}\n" in script and "aws ssm" not in script
    prod = REPO / "environments/prod-slurm.yaml"  # an account: the whole URI, rendered
    assert main(["jobs", str(prod), "-o", str(tmp_path / "p")]) == 0
    uri = trainer_image_uri(load_environment(prod).config)
    assert uri.startswith("111122223333.dkr.ecr.us-east-1.amazonaws.com/")
    text = next((tmp_path / "p").glob("*.sbatch")).read_text()
    assert f"IMAGE=${{TRAINER_IMAGE:-{uri}}}" in text and "sts" not in text


def test_jobs_command_without_an_image_to_render_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / "env.yaml"
    env.write_text(yaml.safe_dump(merge(default_data(), {"trainer": {"build_image": False}})))
    assert main(["jobs", str(env), "-o", str(tmp_path / "jobs")]) == 2
    assert (
        "jobs: a Slurm job is rendered with its image: give --image URI" in capsys.readouterr().err
    )
    assert not (tmp_path / "jobs").exists()
    assert main(["jobs", str(env), "-o", str(tmp_path / "jobs"), "--image", IMAGE]) == 0


def test_jobs_help_says_when_the_image_is_decided(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["jobs", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "submit time" not in text
    assert "rendered into the job, never looked up at run time" in text


def test_jobs_command_on_a_bad_file_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(merge(default_data(), {"trainer": {"job": {"nodes": 3}}})))
    assert main(["jobs", str(bad), "-o", str(tmp_path / "jobs")]) == 2
    assert not (tmp_path / "jobs").exists()


# --- placement on EKS: the group's labels, taints and types ---------------------------------------


def test_eks_job_selects_its_groups_labels_and_tolerates_its_taints() -> None:
    """`kubernetes.labels` and `taints` of the job's group (docs/platform.md): the pods go to
    that group's nodes, past its taints, and only there (examples/eks-platform.yaml)."""
    config = load_environment(REPO / "environments" / "eks-platform.yaml").config
    manifest = _manifest(config)
    assert check_pytorch_job(manifest) == []
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
        "example.com/pool": "train",
        "node.kubernetes.io/instance-type": "ml.p5.48xlarge",
    }
    assert pod["tolerations"] == [
        {"key": "example.com/dedicated", "operator": "Equal", "value": "train",
         "effect": "NoSchedule"},
    ]  # fmt: skip
    assert "affinity" not in pod


def test_eks_job_on_a_flexible_group_accepts_each_of_its_types() -> None:
    """A flexible group's pods may land on any of its types: node affinity, no single type."""
    groups = [{"name": "gpu", "role": "worker", "instance_types": ["ml.p5.48xlarge",
               "ml.p5e.48xlarge"], "instance_count": 2,
               "kubernetes": {"taints": [{"key": "gpu", "effect": "NoExecute"}]}}]  # fmt: skip
    config = _config({"orchestrator": "eks", "cluster": {"instance_groups": groups}})
    manifest = _manifest(config)
    assert check_pytorch_job(manifest) == []
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert "node.kubernetes.io/instance-type" not in pod["nodeSelector"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In",
         "values": ["ml.p5.48xlarge", "ml.p5e.48xlarge"]},
    ]  # fmt: skip
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"  # both have 32


# --- task governance on EKS: the team's namespace, queue and priority ---------------------------

PLATFORM = REPO / "environments" / "eks-platform.yaml"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def _platform(**job: Any) -> EnvironmentConfig:
    """eks-platform.yaml (task governance, teams pretraining and research) with `job` changes."""
    data = yaml.safe_load(PLATFORM.read_text())
    data["users"] = [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002}]
    data["teams"][0]["members"] = ["alice"]
    data["teams"][1]["members"] = ["bob"]
    data["trainer"]["job"].pop("team")
    data["trainer"]["job"].update(job)
    return EnvironmentConfig.model_validate(data)


def test_a_teams_job_runs_in_its_namespace_and_queue_with_its_priority() -> None:
    """HyperPod's names (facts/task_governance.json): namespace hyperpod-ns-<team>, queue
    hyperpod-ns-<team>-localqueue, priority class <class>-priority; on the job, which Kueue
    reads, and on its pods, which a governed namespace admits only with their queue label."""
    config = load_environment(PLATFORM).config
    manifest = _manifest(config)
    assert check_pytorch_job(manifest) == []
    labels = {
        QUEUE_LABEL: "hyperpod-ns-pretraining-localqueue",
        PRIORITY_LABEL: "training-priority",
    }
    assert manifest["metadata"]["namespace"] == "hyperpod-ns-pretraining"
    assert manifest["metadata"]["labels"] == labels
    template = manifest["spec"]["replicaSpecs"][0]["template"]
    assert template["metadata"] == {"labels": labels}
    env = {e["name"]: e["value"] for e in template["spec"]["containers"][0]["env"]}
    assert env["HYPERPOD_TRAINER_JOB_ID"] == "hyperpod-ns-pretraining/pretrain"
    # The claim the stack makes in the team's namespace.
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "fsx"]
    assert volume["persistentVolumeClaim"] == {"claimName": "fsx-claim"}


def test_the_job_takes_its_users_team_and_its_own_priority() -> None:
    manifest = _manifest(_platform(user="bob", priority="inference"))
    assert check_pytorch_job(manifest) == []
    assert manifest["metadata"]["namespace"] == "hyperpod-ns-research"
    assert manifest["metadata"]["labels"] == {
        QUEUE_LABEL: "hyperpod-ns-research-localqueue",
        PRIORITY_LABEL: "inference-priority",
    }


def test_a_team_without_a_priority_gives_only_the_queue() -> None:
    data = yaml.safe_load(PLATFORM.read_text())
    del data["teams"][0]["priority"]
    manifest = _manifest(EnvironmentConfig.model_validate(data))
    assert manifest["metadata"]["labels"] == {QUEUE_LABEL: "hyperpod-ns-pretraining-localqueue"}


def test_a_job_of_no_team_stays_outside_task_governance() -> None:
    """No team (validate warns): its own namespace, no Kueue label, no pod template metadata."""
    manifest = _manifest(_platform())
    assert check_pytorch_job(manifest) == []
    assert manifest["metadata"]["namespace"] == "ml-training"
    assert "labels" not in manifest["metadata"]
    assert "metadata" not in manifest["spec"]["replicaSpecs"][0]["template"]


def test_without_task_governance_team_settings_change_nothing() -> None:
    data = yaml.safe_load(EKS.read_text())
    data["trainer"]["job"].update({"team": "research", "priority": "training"})
    manifest = _manifest(EnvironmentConfig.model_validate(data))
    assert "labels" not in manifest["metadata"]
    assert manifest["metadata"]["namespace"] == _eks().trainer.job.namespace


def test_the_governance_labels_pass_the_schema_check_and_a_bad_one_does_not() -> None:
    manifest = _manifest(load_environment(PLATFORM).config)
    manifest["metadata"]["labels"][QUEUE_LABEL] = 7  # not a string
    problems = check_pytorch_job(manifest)
    assert problems and problems[0].startswith("metadata.labels.kueue.x-k8s.io/queue-name:")
