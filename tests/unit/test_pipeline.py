"""`hyperpod-kit pipeline github`: the workflows it writes pass actionlint, pin every action by
commit, keep pull requests (forks too) away from credentials and write tokens, deploy in order
with OIDC; it refuses to overwrite an edited workflow without --force; a bad flag is one line,
exit 2, nothing written."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.pipeline import WORKFLOWS, ours_digest
from hyperpod_kit.config import load_environment
from hyperpod_kit.config.facts import action_pins

REPO = Path(__file__).resolve().parents[2]
ACTIONLINT = Path(sys.executable).parent / "actionlint"
ENV_FILES = {"dev": "environments/team/dev.yaml", "prod": "environments/team/prod.yaml"}
ENVS = [arg for name, file in ENV_FILES.items() for arg in ("--env", f"{name}={file}")]
TOOLKIT = ["--toolkit-repository", "example-org/hyperpod-kit"]
ROLE = "arn:aws:iam::123456789012:role/hyperpod-kit-deploy"


@pytest.fixture
def team_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository that holds only environment files (the team example, and two standalone
    ones for the bad-flag cases), as the current folder."""
    (tmp_path / "environments").mkdir()
    for name in ("default.yaml", "prod-slurm.yaml"):
        shutil.copy(REPO / "environments" / name, tmp_path / "environments" / name)
    shutil.copytree(REPO / "environments" / "team", tmp_path / "environments" / "team")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def generate(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = cli.main(["pipeline", "github", *ENVS, *TOOLKIT, *extra])
    return code, capsys.readouterr().err


def workflows(repo: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name in WORKFLOWS:
        data = yaml.safe_load((repo / ".github" / "workflows" / name).read_text())
        data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as true
        out[name] = data
    return out


@pytest.mark.parametrize("extra", [[], ["--diff"]], ids=["plan", "plan-and-diff"])
def test_workflows_pass_actionlint(
    extra: list[str], team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(capsys, *extra)[0] == 0
    files = sorted(str(p) for p in (team_repo / ".github" / "workflows").glob("*.yml"))
    assert len(files) == len(WORKFLOWS)
    env = {**os.environ, "PATH": f"/usr/bin:{os.environ['PATH']}"}  # shellcheck for run: steps
    result = subprocess.run(
        [str(ACTIONLINT), "-verbose", *files], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Rule "shellcheck" was disabled' not in result.stderr  # run: scripts checked too


def test_every_action_pinned_by_commit(team_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert generate(capsys)[0] == 0
    pins = {p.uses: p.tag for p in action_pins().values()}
    seen = set()
    for name in WORKFLOWS:
        for line in (team_repo / ".github" / "workflows" / name).read_text().splitlines():
            if "uses:" not in line:
                continue
            found = re.match(r'^\s+(?:- )?uses: "([^"@]+)@([0-9a-f]{40})"  # (v[0-9.]+)$', line)
            assert found, f"{name}: {line}"
            uses = f"{found[1]}@{found[2]}"
            assert pins[uses] == found[3], f"{name}: the comment is not the tag of {uses}"
            seen.add(found[1])
    assert seen == set(action_pins())  # every pinned action is used, none unpinned


def test_pull_requests_get_no_credentials_nor_write_token(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(capsys)[0] == 0
    texts = {n: (team_repo / ".github" / "workflows" / n).read_text() for n in WORKFLOWS}
    assert not any("pull_request_target" in t for t in texts.values())
    flows = workflows(team_repo)
    plan = flows["hyperpod-kit-plan.yml"]
    assert set(plan["on"]) == {"pull_request"}
    assert plan["permissions"] == {"contents": "read"}
    for job in plan["jobs"].values():
        assert job["permissions"] == {"contents": "read"}
        assert "environment" not in job
        assert not any("configure-aws-credentials" in s.get("uses", "") for s in job["steps"])
    plan_text = texts["hyperpod-kit-plan.yml"]
    assert "id-token" not in plan_text and "secrets." not in plan_text
    # The comment: a separate workflow_run job that never checks out or runs the PR's code.
    comment = flows["hyperpod-kit-plan-comment.yml"]
    assert set(comment["on"]) == {"workflow_run"}
    assert comment["on"]["workflow_run"]["workflows"] == [plan["name"]]
    assert comment["permissions"] == {}
    (job,) = comment["jobs"].values()
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert not any("checkout" in s.get("uses", "") or "run" in s for s in job["steps"])


def test_deploys_in_order_with_oidc_from_one_synth(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = generate(capsys, "--aws-role-arn", f"prod={ROLE}", "--deploy-runner", "big-64gb")
    assert code == 0
    deploy = workflows(team_repo)["hyperpod-kit-deploy.yml"]
    assert deploy["on"] == {"push": {"branches": ["main"]}}
    jobs = deploy["jobs"]
    assert list(jobs) == ["synth", "deploy-dev", "deploy-prod"]
    assert "id-token" not in jobs["synth"]["permissions"]
    assert jobs["deploy-dev"]["needs"] == ["synth"]
    assert jobs["deploy-prod"]["needs"] == ["deploy-dev"]
    for name in ("dev", "prod"):
        job = jobs[f"deploy-{name}"]
        assert job["environment"] == name
        assert job["runs-on"] == "big-64gb"  # where the trainer image is built
        assert job["permissions"] == {"contents": "read", "id-token": "write"}
        assert job["concurrency"]["group"] == f"hyperpod-kit-{name}"
        steps = job["steps"]
        # The assembly comes from the synth job of the same run: no synth in a deploy job.
        assert not any("hyperpod-kit synth" in s.get("run", "") for s in steps)
        (download,) = [s for s in steps if "download-artifact" in s.get("uses", "")]
        assert download["with"]["name"] == f"hyperpod-kit-assembly-{name}"
        aws, read = [s for s in steps if "configure-aws-credentials" in s.get("uses", "")]
        role = aws["with"]["role-to-assume"]
        assert role == (ROLE if name == "prod" else "${{ vars.HYPERPOD_KIT_ROLE_ARN_DEV }}")
        assert "role-chaining" not in aws["with"]
        assert aws["with"]["role-duration-seconds"] == 4 * 3600  # the role's MaxSessionDuration
        # status reads with the CDK bootstrap's read-only lookup role, chained after the deploy.
        assert read["with"]["role-chaining"] is True
        region = load_environment(REPO / ENV_FILES[name]).config.region  # through its base
        account = "${{ steps.aws.outputs.aws-account-id }}"
        assert read["with"]["role-to-assume"] == (
            f"arn:aws:iam::{account}:role/cdk-hnb659fds-lookup-role-{account}-{region}"
        )
        runs = [s.get("run", "") for s in steps]
        deploy_at = next(i for i, r in enumerate(runs) if 'cdk" deploy --app' in r)
        assert 'hyperpod-kit check "$HPK_OUT/assembly"' in runs[deploy_at]
        assert steps.index(read) == deploy_at + 1
        assert "hyperpod-kit status" in runs[deploy_at + 2]
    assert deploy["jobs"]["deploy-prod"]["steps"][-1]["run"].endswith("--watch")
    drift = workflows(team_repo)["hyperpod-kit-drift.yml"]
    assert set(drift["on"]) == {"schedule", "workflow_dispatch"}
    assert drift["jobs"]["report"]["permissions"] == {"issues": "write"}
    assert drift["jobs"]["drift-dev"]["concurrency"]["group"] == "hyperpod-kit-dev"


FORK_GUARD = "${{ github.event.pull_request.head.repo.full_name == github.repository }}"
PLAN_ROLE = "arn:aws:iam::444455556666:role/hyperpod-kit-plan"


def test_diff_runs_only_for_the_repositorys_own_branches_with_a_read_only_role(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--diff`: one `cdk diff` job per environment beside the plan jobs, which stay as they are
    (no credentials, forks too). Only the diff jobs get `id-token`, only for a pull request whose
    head is in this repository (never a fork), and only as the GitHub environment `plan`."""
    code, err = generate(capsys, "--diff-role-arn", f"prod={PLAN_ROLE}")  # implies --diff
    assert code == 0, err
    assert "the GitHub environment plan its read-only role" in err
    plan = workflows(team_repo)["hyperpod-kit-plan.yml"]
    assert set(plan["on"]) == {"pull_request"} and plan["permissions"] == {"contents": "read"}
    jobs = plan["jobs"]
    assert list(jobs) == ["plan-dev", "plan-prod", "diff-dev", "diff-prod"]
    for name in ("dev", "prod"):
        job = jobs[f"plan-{name}"]
        assert job["permissions"] == {"contents": "read"} and "environment" not in job
        assert "if" not in job  # the plan itself runs for forks too
        diff = jobs[f"diff-{name}"]
        assert diff["if"] == FORK_GUARD
        assert diff["environment"] == "plan"
        assert diff["permissions"] == {"contents": "read", "id-token": "write"}
        (aws,) = [s for s in diff["steps"] if "configure-aws-credentials" in s.get("uses", "")]
        assert aws["with"]["role-to-assume"] == (
            PLAN_ROLE if name == "prod" else "${{ vars.HYPERPOD_KIT_PLAN_ROLE_ARN_DEV }}"
        )
        assert "role-chaining" not in aws["with"]  # the CDK CLI assumes the lookup role itself
        runs = [s.get("run", "") for s in diff["steps"]]
        synth = next(i for i, r in enumerate(runs) if "hyperpod-kit synth" in r)
        assert synth < diff["steps"].index(aws)  # gated before any credentials exist
        (cdk,) = [r for r in runs if 'cdk" diff' in r]
        assert '--app "$HPK_OUT/assembly" --method template' in cdk  # no change set, no deploy role
    # Every job that may ask for an OIDC token is a diff job behind the fork guard.
    text = (team_repo / ".github" / "workflows" / "hyperpod-kit-plan.yml").read_text()
    assert text.count("id-token: write") == 2 and text.count(FORK_GUARD) == 2
    assert "pull_request_target" not in text and "secrets." not in text


def test_without_diff_the_plan_workflow_has_no_diff_job(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(capsys)[0] == 0
    text = (team_repo / ".github" / "workflows" / "hyperpod-kit-plan.yml").read_text()
    assert "cdk diff" not in text and "environment: plan" not in text and "id-token" not in text


def test_diff_refuses_an_environment_named_plan(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["pipeline", "github", "--env", "plan=environments/default.yaml", "--diff", *TOOLKIT]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "names the environment 'plan', the GitHub environment of the read-only diff jobs" in err
    assert not (team_repo / ".github").exists()


def test_refuses_an_edited_workflow_without_force(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(capsys)[0] == 0
    target = team_repo / ".github" / "workflows" / "hyperpod-kit-deploy.yml"
    written = target.read_bytes()
    assert ours_digest(written) == hashlib.sha256(written).hexdigest()
    # Unchanged since written: a new generation replaces it (another ref here).
    code, err = generate(capsys, "--toolkit-ref", "main")
    assert code == 0, err
    assert "wrote .github/workflows/hyperpod-kit-deploy.yml" in err
    assert '"main"' in target.read_text()
    edited = target.read_text() + "# a line of the team's own\n"
    target.write_text(edited)
    other = team_repo / ".github" / "workflows" / "ci.yml"
    other.write_text("name: ci\n")
    before = {p.name: p.read_bytes() for p in target.parent.iterdir()}
    code, err = generate(capsys, "--toolkit-ref", "v0.1.0")
    assert code == 2
    assert err.count("\n") == 1
    assert "hyperpod-kit-deploy.yml: was edited after hyperpod-kit wrote it" in err
    assert "Hint: pass --force" in err
    assert {p.name: p.read_bytes() for p in target.parent.iterdir()} == before  # nothing written
    code, err = generate(capsys, "--toolkit-ref", "v0.1.0", "--force")
    assert code == 0, err
    assert target.read_text() != edited and '"v0.1.0"' in target.read_text()
    assert other.read_text() == "name: ci\n"  # a file it did not write stays


def test_refuses_a_file_of_someone_else_without_force(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = team_repo / ".github" / "workflows"
    folder.mkdir(parents=True)
    (folder / "hyperpod-kit-plan.yml").write_text("name: ours\n")
    code, err = generate(capsys)
    assert code == 2
    assert "hyperpod-kit-plan.yml: exists and would be overwritten" in err
    assert sorted(p.name for p in folder.iterdir()) == ["hyperpod-kit-plan.yml"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--env", "dev"], "--env: 'dev' is not NAME=FILE"),
        (["--env", "Dev=environments/default.yaml"], "not a GitHub environment name"),
        (["--env", "dev=environments/missing.yaml"], "names a file that does not exist"),
        (["--env", "dev=../default.yaml"], "is not a plain path inside the repository"),
        (["--env", "dev=environments/a b.yaml"], "is not a plain path inside the repository"),
        (["--env", "dev=environments/default.json"], "is not an environment file"),
        (["--env", "/etc/hosts.yaml"], "is not NAME=FILE"),
        (
            ["--env", "dev=environments/default.yaml", "--env", "dev=environments/default.yaml"],
            "names 'dev' twice",
        ),
        (["--env", "dev=environments/bad.yaml"], "does not validate (environments/bad.yaml:"),
        (
            ["--env", "dev=environments/default.yaml", "--aws-role-arn", "dev=arn:aws:s3:::x"],
            "does not end in an IAM role ARN",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--aws-role-arn", f"prod={ROLE}"],
            "names 'prod', which no --env names",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--region", "us-west-9"],
            "--region: 'us-west-9' is not a region",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--toolkit-ref", "v1..2"],
            "--toolkit-ref: 'v1..2' is not a git tag",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--toolkit-ref", "$(id)"],
            "--toolkit-ref: '$(id)' is not a git tag",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--deploy-runner", "big runner"],
            "--deploy-runner: 'big runner' is not a runner label",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--diff-role-arn", "dev=arn:aws:s3:::x"],
            "--diff-role-arn: 'dev=arn:aws:s3:::x' does not end in an IAM role ARN",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--diff-role-arn", f"prod={ROLE}"],
            "--diff-role-arn: 'prod=" + ROLE + "' names 'prod', which no --env names",
        ),
    ],
)
def test_bad_flags_one_line_exit_2_nothing_written(
    argv: list[str], expected: str, team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = yaml.safe_load((team_repo / "environments" / "default.yaml").read_text())
    bad["storage"]["lustre"]["storage_capacity_gib"] = 2000
    (team_repo / "environments" / "bad.yaml").write_text(yaml.safe_dump(bad))
    code = cli.main(["pipeline", "github", *argv, *TOOLKIT])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert expected in err and "Hint: " in err
    assert "Traceback" not in err
    assert not (team_repo / ".github").exists()


def test_bad_toolkit_repository(team_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["pipeline", "github", *ENVS, "--toolkit-repository", "not a repo"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--toolkit-repository: 'not a repo' is not a GitHub repository" in err
    assert not (team_repo / ".github").exists()


GOLDEN = REPO / "tests" / "data" / "pipeline"


def test_workflows_equal_the_reviewed_ones(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a team commits, as reviewed: tests/data/pipeline/*.yml (dev and prod, a role for
    prod). A change to a template shows up as a diff of these files; regenerate them with
    HYPERPOD_KIT_UPDATE_GOLDEN=1 and read that diff."""
    code, err = generate(capsys, "--aws-role-arn", f"prod={ROLE}", "--toolkit-ref", "v0.1.0")
    assert code == 0, err
    for name in WORKFLOWS:
        _compare(team_repo / ".github" / "workflows" / name, GOLDEN / name)
    # With `--diff`: the plan workflow with its diff jobs (the others do not change).
    before = {n: (team_repo / ".github" / "workflows" / n).read_text() for n in WORKFLOWS}
    code, err = generate(
        capsys, "--aws-role-arn", f"prod={ROLE}", "--toolkit-ref", "v0.1.0", "--diff",
        "--diff-role-arn", f"prod={PLAN_ROLE}",
    )  # fmt: skip
    assert code == 0, err
    plan = "hyperpod-kit-plan.yml"
    _compare(team_repo / ".github" / "workflows" / plan, GOLDEN / "hyperpod-kit-plan.diff.yml")
    for name in set(WORKFLOWS) - {plan}:
        after = (team_repo / ".github" / "workflows" / name).read_text()
        assert after.split("\n#\n", 1)[1] == before[name].split("\n#\n", 1)[1], name


def _compare(produced: Path, golden: Path) -> None:
    text = produced.read_text()
    if os.environ.get("HYPERPOD_KIT_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{produced.name} differs from {golden}: review, regenerate"
