"""Job templates rendered from the environment file: sbatch for Slurm, HyperPodPyTorchJob for EKS.

Both launch the bundled trainer (`assets/trainer`) with the same `--set` overrides, so a job's
batch, data and checkpoint settings live in one place: `trainer.job` of the environment file.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperpod_kit.config.schema import EnvironmentConfig, JobConfig
from hyperpod_kit.naming import parameter_name

FSX_MOUNT = "/fsx"
RDZV_PORT = 29500


@dataclass(frozen=True)
class RenderedJob:
    filename: str
    text: str


def image_parameter(config: EnvironmentConfig) -> str:
    """The SSM parameter where the trainer-image stack publishes the image URI."""
    return parameter_name(config.name, "trainer-image")


def trainer_overrides(job: JobConfig) -> list[str]:
    """`--set` arguments of `python -m hyperpod_trainer` for this job."""
    return [
        f"model.preset={job.preset}",
        "data.source=tokens",
        f"data.path={job.data_path}",
        f"data.token_dtype={job.token_dtype}",
        f"data.seq_len={job.seq_len}",
        f"train.steps={job.max_steps}",
        f"train.global_batch_size={job.global_batch_size}",
        f"train.micro_batch_size={job.micro_batch_size}",
        f"checkpoint.dir={job.checkpoint_dir}",
        f"checkpoint.every_steps={job.checkpoint_every}",
        f"checkpoint.keep_last={job.keep_last}",
        "checkpoint.async_save=true",
        "checkpoint.resume=true",
    ]


def render_jobs(config: EnvironmentConfig, *, image: str | None = None) -> list[RenderedJob]:
    """The job template for the environment's orchestrator."""
    from hyperpod_kit.jobs.eks import render_pytorch_job
    from hyperpod_kit.jobs.slurm import render_sbatch

    name = config.trainer.job.name
    if config.orchestrator == "slurm":
        return [RenderedJob(f"{name}.sbatch", render_sbatch(config, image=image))]
    return [RenderedJob(f"{name}.hyperpodpytorchjob.yaml", render_pytorch_job(config, image=image))]
