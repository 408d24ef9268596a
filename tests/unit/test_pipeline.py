"""`hyperpod-kit pipeline github`: the workflows it writes pass actionlint and zizmor's offline
audit, pin every action by commit, keep pull requests (forks too) away from credentials and write
tokens, deploy in order with OIDC, read (drift, status) with the read-only role as the GitHub
environment `drift` or the deploy's own, never in the deploy's concurrency group; the rehearsal
may use user namespaces for its own step only; it refuses to overwrite an edited workflow without
--force; a bad flag (a reserved environment name, a region or account that disagrees with a
file) is one line, exit 2, nothing written."""

from __future__ import annotations

import email.message
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit import __version__
from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.pipeline import WORKFLOWS, ours_digest
from hyperpod_kit.cli.pipeline_flags import PipelineError, toolkit_repository
from hyperpod_kit.cli.status import WATCH_LIMIT_S
from hyperpod_kit.config.facts import action_pins
from hyperpod_kit.naming import DEPLOY_SESSION_SECONDS, READ_SESSION_SECONDS

REPO = Path(__file__).resolve().parents[2]
ACTIONLINT = Path(sys.executable).parent / "actionlint"
ZIZMOR = Path(sys.executable).parent / "zizmor"  # requirements-dev.txt pins it
ENV_FILES = {"dev": "environments/team/dev.yaml", "prod": "environments/team/prod.yaml"}
ENVS = [arg for name, file in ENV_FILES.items() for arg in ("--env", f"{name}={file}")]
TOOLKIT = ["--toolkit-repository", "example-org/hyperpod-kit"]
ROLE = "arn:aws:iam::444455556666:role/hyperpod-kit-deploy"  # in prod's account (its file's)
READ_ROLE = "arn:aws:iam::444455556666:role/hyperpod-kit-read"
ARN = "arn:aws:codeconnections:us-west-2:111122223333:connection/0c4e8f2a-1b2c-4d3e-9f00-12345678"
CODEPIPELINE = ["--repository", "example-org/team-envs", "-o", "pipeline.out"]


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


@pytest.mark.parametrize("extra", [[], ["--diff"]], ids=["plan", "plan-and-diff"])
def test_workflows_pass_zizmor_offline(
    extra: list[str], team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """zizmor's offline audit, regular persona, on the files: nothing, but for the one finding
    ignored inline with its reason (the comment's `workflow_run`, docs/pipelines.md)."""
    assert generate(capsys, *extra)[0] == 0
    folder = team_repo / ".github" / "workflows"
    files = sorted(str(p) for p in folder.glob("*.yml"))
    result = subprocess.run(
        [str(ZIZMOR), "--offline", "--no-progress", "--color", "never", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr
    assert "(1 ignored" in result.stdout + result.stderr
    ignores = {
        name: [line for line in (folder / name).read_text().splitlines() if "zizmor:" in line]
        for name in WORKFLOWS
    }
    assert ignores == {
        **{name: [] for name in WORKFLOWS},
        "hyperpod-kit-plan-comment.yml": ["  workflow_run:  # zizmor: ignore[dangerous-triggers]"],
    }


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


INSTALL = (
    'python -m venv --clear "$HPK_VENV"\n'
    '"$HPK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check '
    '-r "$HPK_TOOLKIT/requirements.txt" "./$HPK_TOOLKIT"\n'
    'npm ci --prefix "$HPK_TOOLKIT" --no-audit --no-fund --loglevel=error\n'
    'echo "$GITHUB_WORKSPACE/$HPK_VENV/bin" >> "$GITHUB_PATH"\n'
)


def test_every_job_installs_the_pinned_toolkit_as_a_package(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each job that runs hyperpod-kit checks the toolkit out at the ref (no credentials kept),
    then installs it from that checkout as a package into a venv of its own, with the
    checkout's pinned requirements, and the CDK CLI from its lock (`npm ci`); later steps run
    `hyperpod-kit` from that venv, the CDK CLI from the checkout's node_modules. No `make`, and
    nothing run from the checkout's own venv. tests/integration/test_pipeline_steps.py runs this
    step for real."""
    assert generate(capsys, "--toolkit-ref", "v9.8.7", "--diff")[0] == 0
    jobs = 0
    for name, flow in workflows(team_repo).items():
        for job_id, job in flow["jobs"].items():
            runs = "\n".join(str(s.get("run", "")) for s in job["steps"])
            if "hyperpod-kit " not in runs:
                continue
            jobs += 1
            assert flow["env"]["HPK_TOOLKIT"] == ".hyperpod-kit/toolkit"
            assert flow["env"]["HPK_VENV"] == ".hyperpod-kit/venv"
            names = [str(s.get("uses", "")).split("@")[0] or s["name"] for s in job["steps"]]
            install = names.index("Install hyperpod-kit as a package (its pinned requirements) "
                                  "and the pinned CDK CLI")  # fmt: skip
            assert {"actions/setup-python", "actions/setup-node"} <= set(names[:install])
            (toolkit,) = [
                s for s in job["steps"][:install]
                if s.get("with", {}).get("path") == ".hyperpod-kit/toolkit"
            ]  # fmt: skip
            assert toolkit["with"] == {
                "repository": "example-org/hyperpod-kit",
                "ref": "v9.8.7",
                "path": ".hyperpod-kit/toolkit",
                "persist-credentials": False,
            }, f"{name} {job_id}"
            step = job["steps"][install]
            assert step["id"] == "install-toolkit" and step["run"] == INSTALL, f"{name} {job_id}"
            later = "\n".join(str(s.get("run", "")) for s in job["steps"][install + 1 :])
            assert "hyperpod-kit " in later
            assert not re.search(r"\bmake\b|\.venv/|\bnpx\b|\S+/hyperpod-kit\b", later), later
            for line in later.splitlines():  # the CDK CLI: the one `npm ci` installed
                if re.search(r"\bcdk\"? (deploy|drift|diff) --app\b", line):
                    assert line.lstrip().startswith('"$HPK_TOOLKIT/node_modules/.bin/cdk" '), line
    assert jobs == 9  # plan, diff, deploy and drift of dev and prod, and the deploy's synth


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
    code, err = generate(
        capsys, "--aws-role-arn", f"prod={ROLE}", "--read-role-arn", f"prod={READ_ROLE}",
        "--deploy-runner", "big-64gb",
    )  # fmt: skip
    assert code == 0, err
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
        assert aws["with"]["role-duration-seconds"] == DEPLOY_SESSION_SECONDS
        # status reads with the read-only role, through OIDC again (not chained: a chained
        # session ends after an hour, the watch may take two), the deploy's credentials unset.
        assert read["with"] == {
            "unset-current-credentials": True,
            "role-to-assume": (
                READ_ROLE if name == "prod" else "${{ vars.HYPERPOD_KIT_READ_ROLE_ARN_DEV }}"
            ),
            "role-session-name": f"hyperpod-kit-read-{name}",
            "role-duration-seconds": READ_SESSION_SECONDS,
            "aws-region": "us-west-2",
        }
        runs = [s.get("run", "") for s in steps]
        deploy_at = next(i for i, r in enumerate(runs) if 'cdk" deploy --app' in r)
        assert 'hyperpod-kit check "$HPK_OUT/assembly"' in runs[deploy_at]
        assert steps.index(read) == deploy_at + 1
        assert "hyperpod-kit status" in runs[deploy_at + 2]
    assert deploy["jobs"]["deploy-prod"]["steps"][-1]["run"].endswith("--watch")


def test_drift_reads_as_its_own_environment_and_never_cancels_a_deploy(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The drift jobs name the GitHub environment `drift` (whose subject only the read-only role
    trusts), assume the read-only role through OIDC and nothing else, and queue in a concurrency
    group of their own: GitHub keeps one pending run per group and cancels the older pending
    one, so a drift run in the deploy's group would cancel a deploy waiting for its reviewers."""
    assert generate(capsys, "--read-role-arn", f"prod={READ_ROLE}")[0] == 0
    flows = workflows(team_repo)
    drift, deploy = flows["hyperpod-kit-drift.yml"], flows["hyperpod-kit-deploy.yml"]
    assert set(drift["on"]) == {"schedule", "workflow_dispatch"}
    assert drift["jobs"]["report"]["permissions"] == {"issues": "write"}
    jobs = deploy["jobs"].values()
    deploy_groups = {j["concurrency"]["group"] for j in jobs if "concurrency" in j}
    assert deploy_groups == {"hyperpod-kit-dev", "hyperpod-kit-prod"}
    for name in ("dev", "prod"):
        job = drift["jobs"][f"drift-{name}"]
        assert job["environment"] == "drift"
        assert job["permissions"] == {"contents": "read", "id-token": "write"}
        assert job["concurrency"] == {
            "group": f"hyperpod-kit-drift-{name}",
            "cancel-in-progress": False,
        }
        (aws,) = [s for s in job["steps"] if "configure-aws-credentials" in s.get("uses", "")]
        assert aws["with"]["role-to-assume"] == (
            READ_ROLE if name == "prod" else "${{ vars.HYPERPOD_KIT_READ_ROLE_ARN_DEV }}"
        )
        assert "role-chaining" not in aws["with"]
        assert aws["with"]["role-duration-seconds"] == READ_SESSION_SECONDS
    text = (team_repo / ".github" / "workflows" / "hyperpod-kit-drift.yml").read_text()
    assert "HYPERPOD_KIT_ROLE_ARN_" not in text and "hyperpod-kit-deploy" not in text


def test_the_read_session_outlives_the_longest_watch() -> None:
    """`status --watch` gives up after WATCH_LIMIT_S; the read-only session it runs in (asked
    for by the workflows, allowed by the role) lasts longer, with a refresh and a margin."""
    assert READ_SESSION_SECONDS >= WATCH_LIMIT_S + 1800
    assert READ_SESSION_SECONDS <= 12 * 3600  # IAM's MaxSessionDuration limit


REHEARSE = 'hyperpod-kit check --rehearse "$HPK_FILE"'


def test_the_rehearsal_may_use_user_namespaces_for_its_step_only(
    team_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ubuntu 24.04 runners deny unprivileged user namespaces (AppArmor), which bubblewrap needs:
    every step that rehearses lifts that restriction first and puts it back when it ends (even
    on failure). Run here with fakes of sudo, sysctl and hyperpod-kit on PATH."""
    assert generate(capsys)[0] == 0
    flows = workflows(team_repo)
    runs = [
        s["run"]
        for flow in ("hyperpod-kit-plan.yml", "hyperpod-kit-deploy.yml")
        for job in flows[flow]["jobs"].values()
        for s in job["steps"]
        if REHEARSE in s.get("run", "")
    ]
    assert len(runs) == 4  # plan-dev, plan-prod, and the deploy's synth of each
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "userns"
    fakes = {
        "sudo": '[ "$1" = -n ] && shift; exec "$@"',
        "sysctl": f'case "$1" in -n) cat {state} ;; -qw) echo "${{2#*=}}" > {state} ;; esac',
        "hyperpod-kit": f'echo "rehearsed with $(cat {state})"; [ "$1" != synth ] || exit 0; '
        'exit "${HPK_FAKE_EXIT:-0}"',
        "tar": "exit 0",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    for run in runs:
        for exit_code in ("0", "1"):
            state.write_text("1\n")
            result = subprocess.run(
                ["bash", "-e", "-c", run],
                capture_output=True,
                text=True,
                check=False,
                cwd=tmp_path,
                env={
                    "PATH": f"{bin_dir}:/usr/bin:/bin",
                    "HPK_FILE": "environments/team/dev.yaml",
                    "HPK_OUT": str(tmp_path / "out"),
                    "HPK_FAKE_EXIT": exit_code,
                },
            )
            assert "rehearsed with 0" in result.stdout, result.stdout + result.stderr
            assert result.returncode == int(exit_code), result.stderr
            assert state.read_text() == "1\n"  # restored after the step, failed or not


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


@pytest.mark.parametrize("diff", [[], ["--diff"]], ids=["plain", "diff"])
@pytest.mark.parametrize("name", ["plan", "drift"])
def test_reserved_environment_names_are_refused(
    name: str, diff: list[str], team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan` and `drift` are the GitHub environments of the read-only roles: a deploying
    environment of that name would put its subject in the deploy role's trust, with or without
    --diff, in every pipeline command."""
    code = cli.main(
        ["pipeline", "github", "--env", f"{name}=environments/default.yaml", *diff, *TOOLKIT]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"--env: '{name}=environments/default.yaml' names the environment '{name}'" in err
    assert "whose subject only a read-only role trusts" in err
    assert "Hint: another name for this environment (plan and drift are reserved)" in err
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
            [*ENVS, "--region", "us-east-1"],
            "--region: 'us-east-1' is not the region of dev (environments/team/dev.yaml: "
            "us-west-2)",
        ),
        (
            [*ENVS, "--aws-role-arn", "prod=arn:aws:iam::111122223333:role/deploy"],
            "--aws-role-arn: 'prod=arn:aws:iam::111122223333:role/deploy' is a role of account "
            "111122223333, but prod deploys to another (environments/team/prod.yaml: account "
            "444455556666)",
        ),
        (
            [*ENVS, "--diff-role-arn", "dev=arn:aws:iam::444455556666:role/plan"],
            "--diff-role-arn: 'dev=arn:aws:iam::444455556666:role/plan' is a role of account "
            "444455556666, but dev deploys to another",
        ),
        (
            [*ENVS, "--read-role-arn", "dev=arn:aws:iam::444455556666:role/read"],
            "--read-role-arn: 'dev=arn:aws:iam::444455556666:role/read' is a role of account "
            "444455556666, but dev deploys to another",
        ),
        (
            # A file without `account`: its roles must still be of one account.
            [
                *("--env", "dev=environments/default.yaml"),
                *("--aws-role-arn", "dev=arn:aws:iam::111122223333:role/deploy"),
                *("--read-role-arn", "dev=arn:aws:iam::444455556666:role/read"),
            ],
            "--read-role-arn: 'dev=arn:aws:iam::444455556666:role/read' is a role of account "
            "444455556666, but dev deploys to another (--aws-role-arn: 111122223333)",
        ),
        (
            ["--env", "dev=environments/default.yaml", "--read-role-arn", "dev=arn:aws:s3:::x"],
            "--read-role-arn: 'dev=arn:aws:s3:::x' does not end in an IAM role ARN",
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


def _metadata(monkeypatch: pytest.MonkeyPatch, *project_urls: str) -> None:
    """The installed hyperpod-kit's metadata, with these `Project-URL` entries only."""
    found = email.message.Message()
    for url in project_urls:
        found["Project-URL"] = url
    monkeypatch.setattr(importlib.metadata, "metadata", lambda name: found)


@pytest.mark.parametrize(
    ("urls", "named"),
    [
        ((), "names no source repository (its package metadata has no `Project-URL: Source`)"),
        (("Homepage, https://github.com/acme/hyperpod-kit",), "names no source repository"),
        (
            ("Source, https://gitlab.com/acme/hyperpod-kit",),
            "names https://gitlab.com/acme/hyperpod-kit as its source, not a GitHub repository",
        ),
    ],
    ids=["no-project-url", "no-source", "not-github"],
)
def test_without_a_github_source_toolkit_repository_is_needed(
    team_repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    urls: tuple[str, ...],
    named: str,
) -> None:
    """Without --toolkit-repository the pipelines take the GitHub repository the installed
    package names as its source; where it names none, one line says the flag is needed, why,
    and what to give (pyproject.toml names no source today)."""
    _metadata(monkeypatch, *urls)
    for kind in (["github"], ["codepipeline", "--connection-arn", ARN, *CODEPIPELINE]):
        code = cli.main(["pipeline", kind[0], *ENVS, *kind[1:]])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(
            f"--toolkit-repository is needed: this hyperpod-kit ({__version__}) {named}"
        ), err
        assert err.rstrip().endswith(
            "Hint: the GitHub repository that holds hyperpod-kit at that ref, e.g. "
            "--toolkit-repository OWNER/hyperpod-kit."
        ), err
    assert not (team_repo / ".github").exists() and not (team_repo / "pipeline.out").exists()


def test_not_installed_toolkit_repository_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "metadata", missing)
    with pytest.raises(PipelineError, match=r"^--toolkit-repository is needed: .* names no source"):
        toolkit_repository(None)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/acme/hyperpod-kit",
        "https://github.com/acme/hyperpod-kit.git",
        "https://github.com/acme/hyperpod-kit/",
        "git@github.com:acme/hyperpod-kit.git",
    ],
)
def test_toolkit_repository_defaults_to_the_packages_github_source(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    _metadata(monkeypatch, "Documentation, https://example.org/docs", f"Source, {url}")
    assert toolkit_repository(None) == "acme/hyperpod-kit"
    assert toolkit_repository("other/fork") == "other/fork"  # the flag wins


GOLDEN = REPO / "tests" / "data" / "pipeline"


def test_workflows_equal_the_reviewed_ones(
    team_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a team commits, as reviewed: tests/data/pipeline/*.yml (dev and prod, a role for
    prod). A change to a template shows up as a diff of these files; regenerate them with
    HYPERPOD_KIT_UPDATE_GOLDEN=1 and read that diff."""
    code, err = generate(
        capsys, "--aws-role-arn", f"prod={ROLE}", "--read-role-arn", f"prod={READ_ROLE}",
        "--toolkit-ref", "v0.1.0",
    )  # fmt: skip
    assert code == 0, err
    for name in WORKFLOWS:
        _compare(team_repo / ".github" / "workflows" / name, GOLDEN / name)
    # With `--diff`: the plan workflow with its diff jobs (the others do not change).
    before = {n: (team_repo / ".github" / "workflows" / n).read_text() for n in WORKFLOWS}
    code, err = generate(
        capsys, "--aws-role-arn", f"prod={ROLE}", "--read-role-arn", f"prod={READ_ROLE}",
        "--toolkit-ref", "v0.1.0", "--diff", "--diff-role-arn", f"prod={PLAN_ROLE}",
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
