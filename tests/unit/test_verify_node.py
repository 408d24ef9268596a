"""`hyperpod-kit-verify` in the lifecycle upload (docs/verify.md): where it is, what it carries, and
its answers to bad input. The whole suite runs under the local Slurm in
tests/integration/slurm/test_verify_suite.py."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.jobs import lint, render_verify_jobs
from hyperpod_kit.lifecycle import VERIFY_SETTINGS, build_bundle
from hyperpod_kit.paths import LIFECYCLE_DIR

ROOT = Path(__file__).resolve().parents[2]
COMMAND = LIFECYCLE_DIR / "bin" / "hyperpod-kit-verify"


def _config(tmp_path: Path, name: str, change: dict[str, Any] | None = None) -> Any:
    data = yaml.safe_load((ROOT / "environments" / f"{name}.yaml").read_text())
    for dotted, value in (change or {}).items():
        *path, key = dotted.split(".")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node[key] = value
    file = tmp_path / f"{name}.yaml"
    file.write_text(yaml.safe_dump(data))
    return load_environment(file).config


def test_slurm_uploads_carry_the_command_its_settings_and_a_job_per_compute_group(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "prod-slurm")
    bundle = build_bundle(config)
    settings = json.loads(bundle.text(VERIFY_SETTINGS))
    groups = {g["name"]: g for g in settings["groups"]}
    assert groups and all("count" not in g for g in groups.values())  # Slurm's to say
    for name in groups:
        job = bundle.text(f"verify/hyperpod-kit-verify-allreduce-{name}.sbatch")
        assert f"--group={name}" in job and "bench-allreduce" in job and "--auto-resume" not in job
        assert "IMAGE=${TRAINER_IMAGE:?" in job  # the image comes with the submission
    assert "bin/hyperpod-kit-verify" in bundle.files and "steps/verify.sh" in bundle.files
    lustre = config.storage.lustre
    assert settings["fsx"]["provisioned_mb_s"] == pytest.approx(
        lustre.storage_capacity_gib / 1000 * lustre.throughput_per_unit_storage
    )
    on_create = bundle.text("on_create.sh")
    assert 'run_step "installing hyperpod-kit-verify" "$HERE/steps/verify.sh"' in on_create


def test_eks_uploads_have_none_of_it(tmp_path: Path) -> None:
    bundle = build_bundle(_config(tmp_path, "eks"))
    assert not [f for f in bundle.files if "verify" in f]


def test_a_trainer_job_change_or_a_scaled_group_leaves_the_cluster_upload_as_it_was(
    tmp_path: Path,
) -> None:
    """The verify files take nothing of trainer.job and no node count: a new job or a group
    scaled must not change the cluster's lifecycle upload."""
    before = build_bundle(_config(tmp_path, "prod-slurm"))
    data = yaml.safe_load((ROOT / "environments" / "prod-slurm.yaml").read_text())
    groups = copy.deepcopy(data["cluster"]["instance_groups"])
    for group in groups:
        if group["role"] == "compute":
            group["instance_count"] = group["instance_count"] + 1
    after = build_bundle(
        _config(
            tmp_path,
            "prod-slurm",
            {
                "trainer.job.name": "another",
                "trainer.job.stop_grace_seconds": 300,
                "cluster.instance_groups": groups,
            },
        )
    )
    assert before.content_hash == after.content_hash


@pytest.mark.parametrize("name", ["default", "prod-slurm", "studio-slurm", "slurm-platform"])
def test_every_verify_job_passes_bash_n_and_shellcheck(tmp_path: Path, name: str) -> None:
    for job in render_verify_jobs(_config(tmp_path, name)):
        lint(job)


def _settings(tmp_path: Path) -> Path:
    settings = {
        "version": 1, "environment": "e", "cluster": "c", "region": "us-west-2",
        "fsx": {"path": str(tmp_path), "provisioned_mb_s": None},
        "groups": [{"name": "gpu", "partition": "gpu", "instance_type": "ml.p5.48xlarge",
                    "accelerators": 8}],
        "studio": {"enabled": False}, "out_root": str(tmp_path / "runs"),
        "spool": str(tmp_path / "spool"),
    }  # fmt: skip
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    return path


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(COMMAND), *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--min-bytes=3"], "--min-bytes: 3 is not a power of two"),
        (["--max-bytes=0"], "--max-bytes: 0 is not positive"),
        (["--min-bytes=4096", "--max-bytes=1024"], "--min-bytes 4096 is above --max-bytes 1024"),
        (["--group=no-such"], "--group no-such: not a compute group of this cluster (gpu)"),
        (["--group=a;b"], "--group: 'a;b' is not a plain name"),
        (["--skip=everything"], "--skip: invalid choice"),
        (["--fsx-mib=x"], "--fsx-mib: 'x' is not a whole number"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2_before_anything_is_written(
    tmp_path: Path, args: list[str], says: str
) -> None:
    settings = _settings(tmp_path)
    out = _verify(f"--settings={settings}", *args)
    assert out.returncode == 2, out
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file (is this a node of a hyperpod-kit Slurm cluster?)"),
        ("{not json", "cannot be read as JSON"),
        ('{"version": 7}', "not a version 1 settings file"),
    ],
)
def test_missing_or_damaged_settings_are_one_line(
    tmp_path: Path, content: str | None, says: str
) -> None:
    settings = tmp_path / "settings.json"
    if content is not None:
        settings.write_text(content)
    out = _verify(f"--settings={settings}")
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr


def test_the_settings_name_no_person_and_nothing_of_trainer_job(tmp_path: Path) -> None:
    config = _config(tmp_path, "studio-slurm")
    text = build_bundle(config).text(VERIFY_SETTINGS)
    for user in config.users:
        assert user.name not in text
    assert config.trainer.job.name not in text
    assert copy.deepcopy(json.loads(text))["studio"]["partitions"] == config.studio.partitions


@pytest.mark.parametrize(
    ("value", "says"),
    [("3", "3 is not a power of two from 1 MiB to 1 GiB"), ("x", "'x' is not a whole number")],
)
def test_make_verify_demo_refuses_a_bad_size_in_one_line(
    tmp_path: Path, value: str, says: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.local.verify", "--max-bytes", value,
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()
