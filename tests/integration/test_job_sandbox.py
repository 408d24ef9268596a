"""The rendered Slurm job, run for real up to its step: the image it was rendered with, one
squashfs per digest imported into FSx (a temporary folder here) with ECR credentials for enroot,
and `srun` given that squashfs. `aws`, `enroot` and `srun` are recording fakes
(tests/integration/job_fakes.py); nothing reads SSM. Not verified on a HyperPod node: whether
the AMI's enroot and pyxis behave as the fakes do (docs/trainer.md).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.jobs import lint, render_jobs
from hyperpod_kit.jobs.image import JobImage, given_image, trainer_stack_image
from tests.conftest import default_data, merge
from tests.integration.job_fakes import install_fakes

REGISTRY = "111122223333.dkr.ecr.us-west-2.amazonaws.com"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
ASSET = "f" * 64
STACK_IMAGE = (
    f"@ACCOUNT@.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-@ACCOUNT@-"
    f"us-west-2:{ASSET}"
)


class Job:
    """A rendered job in a sandbox: fakes first on PATH, FSx's images folder under tmp."""

    def __init__(self, tmp: Path, image: JobImage, overrides: dict[str, Any] | None = None):
        config = EnvironmentConfig.model_validate(merge(default_data(), overrides or {}))
        (job,) = render_jobs(config, image=image)
        assert lint(job) == []
        self.tmp = tmp
        self.script = tmp / job.filename
        self.script.write_text(job.text)
        self.state, self.bin = tmp / "fake", tmp / "bin"
        self.state.mkdir(exist_ok=True)
        install_fakes(self.bin)
        self.images = tmp / "fsx" / "images" / str(os.getuid())
        (tmp / "fsx" / "images").mkdir(parents=True, exist_ok=True)

    def knob(self, name: str, value: str) -> None:
        path = self.state / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)

    def ecr_has(self, repository: str, tag: str, digest: str) -> None:
        self.knob(f"ecr/111122223333/{repository}/{tag}", digest)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.tmp),
            "FAKE_STATE": str(self.state),
            "HYPERPOD_IMAGES_DIR": str(self.images),
            "TMPDIR": str(self.tmp),
            "SLURM_JOB_ID": "7",
            **extra,
        }

    def start(self, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["bash", str(self.script)], env=self.env(**extra), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    def run(self, **extra: str) -> subprocess.CompletedProcess[str]:
        (self.state / "calls.jsonl").unlink(missing_ok=True)
        return subprocess.run(
            ["bash", str(self.script)], env=self.env(**extra), capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip

    def calls(self, name: str) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r["args"] for r in rows if r["cmd"] == name]

    def imports(self) -> list[dict[str, str]]:
        path = self.state / "imports.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def container_image(self) -> str:
        (srun,) = self.calls("srun")
        (flag,) = [a for a in srun if a.startswith("--container-image=")]
        return flag.removeprefix("--container-image=")

    def leftovers(self) -> list[str]:
        """Temporary imports and credential folders that outlived the job."""
        temps = [p.name for p in self.images.glob(".*")] if self.images.exists() else []
        return temps + [p.name for p in self.tmp.glob("tmp.*")]


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def test_first_job_imports_once_with_ecr_credentials_then_srun_reads_fsx(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    ok(job.run())
    (ecr_lookup,) = [c for c in job.calls("aws") if c[:2] == ["ecr", "batch-get-image"]]
    assert ecr_lookup[ecr_lookup.index("--registry-id") + 1] == "111122223333"
    assert "imageTag=v1" in ecr_lookup and "--repository-name" in ecr_lookup
    (imported,) = job.imports()
    # enroot's own reference syntax, by digest: the tag cannot move under the import
    assert imported["uri"] == f"docker://AWS@{REGISTRY}#trainer:{DIGEST}"
    assert imported["credentials"] == (
        f"machine {REGISTRY} login AWS password ecr-password-for-us-west-2\n"
    )
    assert imported["mode"] == "0o600"
    squashfs = job.images / f"{DIGEST.removeprefix('sha256:')}.sqsh"
    assert squashfs.read_text() == f"squashfs of {imported['uri']}\n"
    assert job.container_image() == str(squashfs)
    assert stat.S_IMODE(job.images.stat().st_mode) == 0o755
    assert job.leftovers() == []  # no temporary import, no credentials left behind
    assert not [c for c in job.calls("aws") if c[:1] == ["ssm"]]


def test_a_second_job_and_a_restart_read_the_squashfs_without_pulling(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    ok(job.run())
    first = job.container_image()
    ok(job.run())
    assert job.container_image() == first
    assert len(job.imports()) == 1
    assert job.calls("enroot") == []
    assert not [c for c in job.calls("aws") if c[:2] == ["ecr", "get-login-password"]]


def test_a_new_digest_behind_the_same_tag_is_imported_beside_the_old(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:latest"))
    job.ecr_has("trainer", "latest", DIGEST)
    ok(job.run())
    job.ecr_has("trainer", "latest", OTHER)
    ok(job.run())
    assert job.container_image().endswith(f"{OTHER.removeprefix('sha256:')}.sqsh")
    assert sorted(p.name for p in job.images.iterdir()) == sorted(
        f"{d.removeprefix('sha256:')}.sqsh" for d in (DIGEST, OTHER)
    )


def test_concurrent_importers_are_harmless(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    job.knob("enroot_sleep", "1")
    runs = [job.start() for _ in range(3)]
    for run in runs:
        _, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
    assert 1 <= len(job.imports()) <= 3  # as many as started before the first one finished
    assert [p.name for p in job.images.iterdir()] == [f"{DIGEST.removeprefix('sha256:')}.sqsh"]
    assert job.leftovers() == []


def test_an_importer_that_finishes_second_renames_over_the_first(tmp_path: Path) -> None:
    """Deterministically, the race above: another job renamed the same digest into place while
    this one imported. The rename replaces it with identical content; both jobs use the path."""
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    final = job.images / f"{DIGEST.removeprefix('sha256:')}.sqsh"
    job.knob("enroot_other_first", str(final))
    ok(job.run())
    assert final.read_text().startswith("squashfs of docker://")
    assert job.container_image() == str(final) and job.leftovers() == []


def test_a_failed_import_leaves_nothing_and_fails_the_job(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    job.knob("enroot_fail", "")
    result = job.run()
    assert result.returncode != 0
    assert job.calls("srun") == []
    assert list(job.images.iterdir()) == [] and job.leftovers() == []


def test_an_image_ecr_does_not_have_fails_before_any_import(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:missing"))
    result = job.run()
    assert result.returncode != 0
    assert "no image" in result.stderr and "(digest: None)" in result.stderr
    assert job.calls("enroot") == [] and job.calls("srun") == []


def test_a_digest_in_the_reference_needs_no_lookup(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer@{DIGEST}"))
    ok(job.run())
    assert not [c for c in job.calls("aws") if c[:2] == ["ecr", "batch-get-image"]]
    assert job.imports()[0]["uri"] == f"docker://AWS@{REGISTRY}#trainer:{DIGEST}"


def test_another_registry_with_a_digest_is_cached_without_ecr_credentials(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image(f"nvcr.io/nvidia/pytorch:25.06-py3@{DIGEST}"))
    ok(job.run())
    (imported,) = job.imports()
    assert imported["uri"] == f"docker://nvcr.io#nvidia/pytorch:{DIGEST}"
    assert imported["credentials"] == ""
    assert job.calls("aws") == []


def test_an_image_without_a_knowable_digest_is_pulled_by_the_nodes(tmp_path: Path) -> None:
    job = Job(tmp_path, given_image("nvcr.io/nvidia/pytorch:25.06-py3"))
    result = ok(job.run())
    assert "names no digest" in result.stderr
    assert job.container_image() == "nvcr.io#nvidia/pytorch:25.06-py3"
    assert job.calls("enroot") == [] and job.calls("aws") == []


def test_the_trainer_stacks_image_takes_the_account_from_sts(tmp_path: Path) -> None:
    """No account in the environment file: the URI rendered offline names the asset's tag, the
    node fills in the execution role's account (sts get-caller-identity needs no grant)."""
    job = Job(tmp_path, trainer_stack_image(STACK_IMAGE))
    job.knob("account", "444455556666")
    repository = "cdk-hnb659fds-container-assets-444455556666-us-west-2"
    job.knob(f"ecr/444455556666/{repository}/{ASSET}", DIGEST)
    ok(job.run())
    assert ["sts", "get-caller-identity", "--region", "us-west-2", "--query", "Account",
            "--output", "text"] in job.calls("aws")  # fmt: skip
    (imported,) = job.imports()
    registry = "444455556666.dkr.ecr.us-west-2.amazonaws.com"
    assert imported["uri"] == f"docker://AWS@{registry}#{repository}:{DIGEST}"


def test_trainer_image_in_the_environment_overrides_the_rendered_one(tmp_path: Path) -> None:
    job = Job(tmp_path, trainer_stack_image(STACK_IMAGE))
    job.ecr_has("mine", "v2", OTHER)
    ok(job.run(TRAINER_IMAGE=f"{REGISTRY}/mine:v2"))
    assert not [c for c in job.calls("aws") if c[:1] == ["sts"]]
    assert job.container_image().endswith(f"{OTHER.removeprefix('sha256:')}.sqsh")


@pytest.mark.parametrize("case", ["group-writable", "someone else's"])
def test_an_images_folder_others_can_write_is_refused(tmp_path: Path, case: str) -> None:
    job = Job(tmp_path, given_image(f"{REGISTRY}/trainer:v1"))
    job.ecr_has("trainer", "v1", DIGEST)
    job.images.mkdir(parents=True)
    if case == "group-writable":
        job.images.chmod(0o775)
        env: dict[str, str] = {}
    else:
        env = {"HYPERPOD_IMAGES_DIR": "/tmp"}  # root's (or not mine), and anyone may write it
    result = job.run(**env)
    assert result.returncode != 0
    assert "is not a folder only you can write" in result.stderr
    assert job.calls("enroot") == [] and job.calls("srun") == []
