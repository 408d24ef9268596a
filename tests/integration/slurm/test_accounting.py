"""Slurm accounting for the environment's teams, under real daemons: Debian's slurmdbd and a local
MariaDB behind the local cluster (`LocalSlurm(accounting=True)`), the teams' accounts script
exactly as the controller runs it (lifecycle/bin/hyperpod-kit-slurm-accounts, rendered with the
rest of the upload), and a job of the bundled trainer accounted to its team.

What this shows: the script makes the accounts and associations of environments/slurm-platform.
yaml's teams with real sacctmgr and changes nothing the second time; a job run under a team's
account appears in `sacct` with its CPU-seconds under that account; `sshare` shows the teams'
fair share as the file writes it; associations are enforced. What it does not show: HyperPod's
own slurmdbd set-up against Aurora (Slurm 24.11+ there, 22.05 here; docs/accounting.md).

The harness runs Slurm as root and creates no account on this machine, so the job runs as root,
given an association in the team's account for the test (the members' associations are the
script's: a person's job would be accounted the same way under their own name).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.lifecycle import build_bundle
from hyperpod_kit.local import LocalSlurm, SlurmUnavailableError
from tests.conftest import REPO
from tests.integration.slurm.conftest import TrainingJob, explain, job_environment

pytestmark = [pytest.mark.slurm, pytest.mark.trainer]

EXAMPLE = REPO / "environments" / "slurm-platform.yaml"
STEPS = 10  # a short run: what is shown is its accounting, not its training
TEAM = "pretraining"
RECORD_TIMEOUT_S = 60.0


def _environment() -> dict[str, Any]:
    """The local training job's environment, with the example's people and teams."""
    example = yaml.safe_load(EXAMPLE.read_text())
    data = job_environment(steps=STEPS, checkpoint_every=5)
    data["users"] = example["users"]
    data["teams"] = example["teams"]
    # The teams' accounts live in slurmdbd's database whichever database that is: the warning
    # that this environment has no database of its own is beside the point here.
    data.setdefault("validation", {}).setdefault("suppress", []).append("teams")
    return data


@pytest.fixture(scope="module")
def accounting_slurm() -> Iterator[LocalSlurm]:
    slurm = LocalSlurm(partition="compute", accounting=True)
    try:
        slurm.start()
    except SlurmUnavailableError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm accounting must run under CI (.ci/run installs it): {e}")
        pytest.skip(f"no local Slurm accounting: {e}")
    try:
        yield slurm
    finally:
        slurm.stop()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainingJob, Path]:
    """The training job rendered for this machine, and the upload with the users file."""
    job = TrainingJob.prepare(tmp_path_factory.mktemp("accounting") / "job", _environment())
    bundle = build_bundle(load_environment(job.environment).config)
    folder = job.folder / "upload"
    bundle.write_to(folder)
    assert bundle.users is not None
    (folder / "users.json").write_bytes(bundle.users)
    return job, folder


def _accounts(slurm: LocalSlurm, upload: Path, root: Path) -> subprocess.CompletedProcess[str]:
    """The accounts script of the upload, as the controller's user sync runs it."""
    root.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(upload / "bin/hyperpod-kit-slurm-accounts"), str(upload / "users.json")],
        env=slurm.client_env({"HYPERPOD_KIT_ROOT": str(root)}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _rows(text: str) -> list[list[str]]:
    return [line.strip().split("|") for line in text.splitlines() if line.strip()]


def _associations(slurm: LocalSlurm) -> list[list[str]]:
    return _rows(
        slurm.client(
            "sacctmgr", "-n", "-P", "show", "association",
            "format=Account,User,Fairshare,GrpTRES,GrpSubmit,MaxSubmit",
        )
    )  # fmt: skip


def test_teams_accounts_twice_sacct_and_sshare(
    accounting_slurm: LocalSlurm, prepared: tuple[TrainingJob, Path], tmp_path: Path
) -> None:
    slurm = accounting_slurm
    job, upload = prepared
    example = yaml.safe_load(EXAMPLE.read_text())
    teams = {t["name"]: t for t in example["teams"]}

    # 1. The controller's script, twice: the accounts, then nothing more.
    first = _accounts(slurm, upload, tmp_path / "root")
    assert first.returncode == 0, first.stdout + first.stderr
    made = _associations(slurm)
    second = _accounts(slurm, upload, tmp_path / "root")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 change(s)" in second.stderr, second.stderr
    assert _associations(slurm) == made
    by_key = {(r[0], r[1]): r for r in made}
    for name, t in teams.items():
        account = by_key[(name, "")]
        assert account[2] == str(t["fairshare"]), made
        assert account[3] == f"gres/gpu={t['gpu_limit']}", made
        for member in t["members"]:
            assert (name, member) in by_key, made
    defaults = dict(_rows(slurm.client("sacctmgr", "-n", "-P", "show", "user",
                                       "format=User,DefaultAccount")))  # fmt: skip
    assert {m: defaults[m] for t in teams.values() for m in t["members"]} == {
        m: name for name, t in teams.items() for m in t["members"]
    }

    # 2. Associations are enforced: no job under an account one has no association in.
    refused = subprocess.run(
        ["sbatch", f"--account={TEAM}", "--wrap=true"],
        env=slurm.client_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode != 0 and "Invalid account" in refused.stderr, refused.stderr

    # 3. The bundled trainer's job, under the team's account (as root: see the module doc).
    slurm.client("sacctmgr", "-i", "add", "user", "root", f"account={TEAM}",
                 f"cluster={slurm.cluster_name}")  # fmt: skip
    job_id = job.submit(slurm, args=[f"--account={TEAM}"])
    try:
        done = slurm.wait_finished(job_id, 240)
    finally:
        slurm.cancel(job_id)
    assert done.state == "COMPLETED", f"{done}\n{explain(done)}"

    fields = "JobID,Account,User,State,AllocCPUS,ElapsedRaw,CPUTimeRAW"
    deadline = time.monotonic() + RECORD_TIMEOUT_S
    while True:  # slurmctld sends the record to slurmdbd after the job ends
        out = slurm.client("sacct", "-X", "-n", "-P", "-j", job_id, f"--format={fields}")
        rows = [r for r in _rows(out) if r[0] == job_id and r[3] == "COMPLETED"]
        if rows or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows, f"job {job_id} not in sacct as COMPLETED within {RECORD_TIMEOUT_S} s: {out}"
    print(f"sacct -X -j {job_id} --format={fields}\n{out}")  # shown with pytest -s
    (_, account, user, _, cpus, elapsed, cpu_seconds) = rows[0]
    assert (account, user) == (TEAM, "root")
    assert int(elapsed) > 0 and int(cpu_seconds) == int(cpus) * int(elapsed) > 0

    # 4. sshare: the teams' shares as the file writes them, the members under each.
    text = slurm.client("sshare", "-a", "-P", "-n", "--format=Account,User,RawShares")
    print(f"sshare -a --format=Account,User,RawShares\n{text}")
    share = _rows(text)
    shares = {(a.strip(), u): s for a, u, s in share}
    for name, t in teams.items():
        assert shares[(name, "")] == str(t["fairshare"]), share
        for member in t["members"]:
            assert (name, member) in shares, share


def test_an_unreachable_slurmdbd_is_a_temporary_failure(
    prepared: tuple[TrainingJob, Path], tmp_path: Path
) -> None:
    """Before slurmdbd answers (a controller's first minutes), the script says so and exits 75,
    which the user sync reports without failing the node."""
    _, upload = prepared
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nowhere\nSlurmctldHost=nowhere(127.0.0.1)\nSlurmctldPort=1\n")
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURM_CONF": str(conf),
        "HYPERPOD_KIT_ROOT": str(tmp_path / "root"),
        "HPK_SACCTMGR_TIMEOUT": "20",
    }
    result = subprocess.run(
        ["bash", str(upload / "bin/hyperpod-kit-slurm-accounts"), str(upload / "users.json")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if result.returncode == 75 and "not installed" in result.stderr:
        pytest.skip("sacctmgr is not installed")
    assert result.returncode == 75, result.stdout + result.stderr
    assert "the next sync tries again" in result.stderr
