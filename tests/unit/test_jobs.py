"""Job templates rendered from the environment file, checked structurally and by their consumers."""

from __future__ import annotations

import copy
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.cli.main import main
from hyperpod_kit.config import EnvironmentConfig, load_environment
from hyperpod_kit.jobs import render_jobs, trainer_overrides
from hyperpod_kit.jobs.eks import AUTO_RESUME, MAX_RETRIES, check_pytorch_job, pytorch_job
from hyperpod_kit.jobs.slurm import render_sbatch
from tests.conftest import REPO, default_data, merge

EKS = REPO / "environments" / "eks.yaml"
IMAGE = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainer:abc"


def _config(overrides: dict[str, Any] | None = None) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))


def _eks() -> EnvironmentConfig:
    return load_environment(EKS).config


# --- Slurm ---------------------------------------------------------------------------------------


def test_sbatch_directives_and_launch_follow_the_job() -> None:
    script = render_sbatch(_config())
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=pretrain\n#SBATCH --nodes=2\n")
    assert "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --signal=TERM@180" in script
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=170" in script
    assert "#SBATCH --partition=ml.g5.8xlarge" in script  # the one compute group's partition
    assert "srun --auto-resume=1 --container-image=" in script
    assert '--rdzv-endpoint="$HEAD_NODE:29500"' in script and "--rdzv-backend=c10d" in script
    assert "--nproc-per-node=1" in script
    assert "-m hyperpod_trainer" in script
    assert "aws ssm get-parameter --name /hyperpod-kit/hyperpod-dev/trainer-image" in script


def test_sbatch_without_auto_resume_and_with_a_fixed_image() -> None:
    script = render_sbatch(
        _config({"trainer": {"job": {"auto_resume": False, "partition": "dev"}}}), image=IMAGE
    )
    assert "--auto-resume" not in script
    assert "#SBATCH --partition=dev" in script
    assert f"IMAGE=${{TRAINER_IMAGE:-{IMAGE}}}" in script
    assert "aws ssm" not in script


def test_sbatch_is_valid_bash(tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(render_sbatch(_config()))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck not installed (.ci/run installs it)"
)
def test_sbatch_is_shellcheck_clean(tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(render_sbatch(_config()))
    result = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_sbatch_enroot_image_name(tmp_path: Path) -> None:
    """The registry URI becomes enroot's host#repository:tag inside the script, as bash runs it."""
    script = render_sbatch(_config(), image=IMAGE)
    lines = [
        line for line in script.splitlines() if line.startswith(("IMAGE=", "CONTAINER_IMAGE="))
    ]
    probe = tmp_path / "probe.sh"
    probe.write_text("\n".join([*lines, 'echo "$CONTAINER_IMAGE"']) + "\n")
    out = subprocess.run(["bash", str(probe)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "111122223333.dkr.ecr.us-west-2.amazonaws.com#trainer:abc"


# --- the trainer accepts what the templates pass --------------------------------------------------


def test_overrides_are_accepted_by_the_trainer() -> None:
    """Every `--set` the templates pass is a trainer field, and it gets the job's value."""
    from hyperpod_trainer.config import load_config

    job = _config().trainer.job
    cfg = load_config(None, trainer_overrides(job))
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
    job = _config().trainer.job
    words = shlex.split(
        render_sbatch(_config()).split("-m hyperpod_trainer", 1)[1].replace("\\\n", "")
    )
    assert words == [w for o in trainer_overrides(job) for w in ("--set", o)]


# --- EKS -----------------------------------------------------------------------------------------


def test_pytorch_job_manifest_for_the_elastic_example() -> None:
    manifest = yaml.safe_load(render_jobs(_eks(), image=IMAGE)[0].text)
    assert check_pytorch_job(manifest) == []
    assert manifest["apiVersion"] == "sagemaker.amazonaws.com/v1"
    assert manifest["kind"] == "HyperPodPyTorchJob"
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
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.g5.12xlarge"
    assert pod["terminationGracePeriodSeconds"] == 180


def test_pytorch_job_without_elastic_or_auto_resume() -> None:
    config = _eks().model_copy(deep=True)
    job = config.trainer.job.model_copy(update={"elastic": None, "auto_resume": False})
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    manifest = pytorch_job(config)
    assert "elasticPolicy" not in manifest["spec"]
    assert "annotations" not in manifest["metadata"]
    assert manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["image"] == (
        "${TRAINER_IMAGE}"
    )
    assert (
        "--nnodes=2"
        in manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    )


def _broken(change: str) -> dict[str, Any]:
    manifest = copy.deepcopy(pytorch_job(_eks(), image=IMAGE))
    spec = manifest["spec"]
    if change == "kind":
        manifest["kind"] = "PyTorchJob"
    elif change == "name":
        manifest["metadata"]["name"] = "Bad_Name"
    elif change == "replicas":
        spec["replicaSpecs"][0]["replicas"] = 9
    elif change == "both-steps":
        spec["elasticPolicy"]["replicaIncrementStep"] = 1
    elif change == "no-image":
        spec["replicaSpecs"][0]["template"]["spec"]["containers"][0]["image"] = ""
    elif change == "nproc":
        spec["nprocPerNode"] = "four"
    return manifest


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("kind", "apiVersion/kind"), ("name", "not a DNS label"),
        ("replicas", "outside elasticPolicy [1, 4]"), ("both-steps", "replicaIncrementStep or"),
        ("no-image", "needs an image"), ("nproc", "nprocPerNode"),
    ],
)  # fmt: skip
def test_check_pytorch_job_catches_broken_manifests(change: str, problem: str) -> None:
    problems = check_pytorch_job(_broken(change))
    assert len(problems) == 1 and problem in problems[0], problems


# --- the CLI -------------------------------------------------------------------------------------


def test_jobs_command_writes_the_orchestrators_template(tmp_path: Path) -> None:
    assert main(["jobs", str(EKS), "-o", str(tmp_path / "jobs"), "--image", IMAGE]) == 0
    (written,) = (tmp_path / "jobs").iterdir()
    assert written.name == "elastic-pretrain.hyperpodpytorchjob.yaml"
    assert check_pytorch_job(yaml.safe_load(written.read_text())) == []
    assert main(["jobs", str(REPO / "environments/default.yaml"), "-o", str(tmp_path / "s")]) == 0
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["pretrain.sbatch"]


def test_jobs_command_on_a_bad_file_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(merge(default_data(), {"trainer": {"job": {"nodes": 3}}})))
    assert main(["jobs", str(bad), "-o", str(tmp_path / "jobs")]) == 2
    assert not (tmp_path / "jobs").exists()
