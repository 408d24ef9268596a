"""Job templates rendered from the environment file: sbatch for Slurm, HyperPodPyTorchJob for EKS.

Both launch the bundled trainer (`assets/trainer`) with the same `--set` overrides, so a job's
batch, data and checkpoint settings live in one place: `trainer.job` of the environment file.
Every rendered file is linted before anyone sees it: the script with `bash -n` and shellcheck,
the manifest against the HyperPodPyTorchJob schema.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from hyperpod_kit.config.derived import VERIFY_DIR, group_facts, worker_groups
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.jobs.context import LocalRun, job_context, network_values
from hyperpod_kit.jobs.image import ImageError, JobImage, given_image

__all__ = [
    "ImageError", "JobImage", "LocalRun", "RenderedJob", "lint", "render_jobs",
    "render_verify_jobs",
]  # fmt: skip


@dataclass(frozen=True)
class RenderedJob:
    filename: str
    text: str
    kind: str  # "sbatch" or "manifest"


def render_jobs(
    config: EnvironmentConfig,
    *,
    image: str | JobImage | None = None,
    local: LocalRun | None = None,
) -> list[RenderedJob]:
    """The job file for the environment's orchestrator (`local`: the sbatch for a machine
    without HyperPod). `image`: a URI (``--image``) or a `JobImage`; a Slurm job needs one (it
    never looks its image up at run time), an EKS manifest without one gets a placeholder.
    Raises `ImageError` for a Slurm job without an image."""
    from hyperpod_kit.jobs.eks import pytorch_job, render_pytorch_job
    from hyperpod_kit.jobs.slurm import BUNDLED, render_sbatch

    job_image = given_image(image) if isinstance(image, str) else image
    if config.orchestrator == "slurm" and local is None and job_image is None:
        raise ImageError(
            "a Slurm job is rendered with its image: give --image URI, or keep "
            "trainer.build_image on (the trainer stack's image, known offline)"
        )
    context = job_context(config, image=job_image, local=local)
    name = context.job.name
    if config.orchestrator == "slurm" or local is not None:
        own = config.trainer.job.template
        template = config.resolve_path(own) if own else BUNDLED
        return [RenderedJob(f"{name}.sbatch", render_sbatch(context, template=template), "sbatch")]
    manifest = pytorch_job(config, context)
    text = render_pytorch_job(manifest, environment=config.name, has_image=image is not None)
    return [RenderedJob(f"{name}.hyperpodpytorchjob.yaml", text, "manifest")]


# `hyperpod-kit-verify`'s all-reduce benchmark (docs/verify.md): one job per group, from the
# bundled template, with constants of its own, so that nothing of `trainer.job` reaches the
# cluster's lifecycle upload that carries these files.
VERIFY_JOB = "hyperpod-kit-verify"
VERIFY_STOP_GRACE_SECONDS = 60
# The trainer's words: the run id and the records file come from the submitting environment
# (HPK_VERIFY_RUN, HPK_VERIFY_OUT), which sbatch, srun and pyxis pass on to the ranks.
VERIFY_COMMAND = ("bench-allreduce", "--pairs")


def verify_job_name(group: str) -> str:
    return f"{VERIFY_JOB}-allreduce-{group}.sbatch"


def render_verify_jobs(
    config: EnvironmentConfig, *, local: LocalRun | None = None
) -> list[RenderedJob]:
    """The all-reduce benchmark of each Slurm compute group as an sbatch of the bundled template:
    every node of the group (`sbatch --nodes` when it is submitted), one rank per accelerator, the
    group's EFA settings, no auto-resume, the trainer's `bench-allreduce` instead of training, and
    the image given when it is submitted (`TRAINER_IMAGE`: `hyperpod-kit verify FILE` prints the
    command with it), so a new trainer image never changes the cluster's lifecycle upload."""
    from hyperpod_kit.jobs.slurm import BUNDLED, render_sbatch

    base = job_context(config, image=None, local=local)
    verify_dir = VERIFY_DIR if local is None else str(local.fsx_root) + VERIFY_DIR[len("/fsx") :]
    rendered: list[RenderedJob] = []
    for group in worker_groups(config):
        facts = group_facts(group)
        context = dataclasses.replace(
            base,
            job=dataclasses.replace(
                base.job,
                name=VERIFY_JOB,
                # The command asks for the partition's nodes when it submits (`sbatch --nodes`):
                # a group's count in this file would tie its scaling to the lifecycle upload.
                nodes=1,
                # One rank per accelerator; one per node on this machine (gloo on CPU).
                processes_per_node=facts.processes_per_node
                if facts and facts.processes_per_node and local is None
                else 1,
                partition=group.slurm_partition,
                stop_grace_seconds=VERIFY_STOP_GRACE_SECONDS,
                shutdown_timeout_seconds=VERIFY_STOP_GRACE_SECONDS - 10,
                auto_resume=False,
                checkpoint_dir=verify_dir,
            ),
            network=network_values(facts, local=local),
            settings=[],
            node_log_dir=None,
            command=(*VERIFY_COMMAND, f"--group={group.name}"),
        )
        rendered.append(
            RenderedJob(
                verify_job_name(group.name), render_sbatch(context, template=BUNDLED), "sbatch"
            )
        )
    return rendered


def lint(job: RenderedJob) -> list[str]:
    """What is wrong with a rendered job file; empty when it passes."""
    if job.kind == "manifest":
        from hyperpod_kit.jobs.eks import check_pytorch_job

        return check_pytorch_job(yaml.safe_load(job.text))
    return lint_shell(job.text, name=job.filename)


def lint_shell(text: str, *, name: str) -> list[str]:
    """`bash -n` always; shellcheck too where it is installed (CI installs it)."""
    with tempfile.TemporaryDirectory(prefix="hyperpod-kit-lint.") as folder:
        path = Path(folder) / name
        path.write_text(text)
        checks = [["bash", "-n", str(path)]]
        if shutil.which("shellcheck"):
            checks.append(["shellcheck", "--format=gcc", str(path)])
        problems: list[str] = []
        for command in checks:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                output = (result.stdout + result.stderr).replace(str(path), name)
                problems += [line for line in output.splitlines() if line.strip()]
        return problems
