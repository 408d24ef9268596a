"""A rehearsal that cannot hurt: a user's own lifecycle script, played by the rehearsal, reaches
neither the network, nor this machine's files (home, repository, the rest of the temporary
folder), nor the invoking user's AWS variables, and runs as uid 65534; where there is no
isolation, it is not run at all and the report says so in one line
(hyperpod_kit/rehearsal/sandbox.py, actors.py).

The probe only reads outside its sandbox, and writes in this test's own temporary folder."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.config import EnvironmentConfig
from hyperpod_kit.rehearsal import rehearse_assembly, sandbox
from hyperpod_kit.rehearsal.actors import record_calls
from hyperpod_kit.rehearsal.assembly import Assembly
from hyperpod_kit.rehearsal.sandbox import Node
from tests.conftest import REPO, default_data, merge

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
PROBES = ("network", "home", "repository", "temporary-folder", "write", "aws-environment", "uid")
SECRET = "the-users-secret"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAREHEARSALLEAK",
    "AWS_SECRET_ACCESS_KEY": "leaked-secret",
    "AWS_PROFILE": "admin",
}


def _need_isolation() -> None:
    problem = sandbox.isolation_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the rehearsal must isolate under CI (.ci/run installs bubblewrap): {problem}")
    pytest.skip(f"no isolation here: {problem}")


class Listener:
    """A TCP server on loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def _probe(tmp: Path, port: int) -> str:
    """A user's script that tries each way out and prints `blocked: X` or `LEAKED: X`."""
    secret = tmp / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    outside = tmp / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # even `nobody` could write here, were it visible
    q = {k: shlex.quote(str(v)) for k, v in {
        "home": Path.home(), "repo": REPO / "pyproject.toml", "secret": secret,
        "outside": outside / "written",
    }.items()}  # fmt: skip
    return f"""#!/bin/bash
verdict() {{ if [[ $2 == 0 ]]; then echo "LEAKED: $1"; else echo "blocked: $1"; fi; }}
timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; verdict network $?
ls {q["home"]} >/dev/null 2>&1; verdict home $?
cat {q["repo"]} >/dev/null 2>&1; verdict repository $?
cat {q["secret"]} 2>/dev/null; verdict temporary-folder $?
(echo written >{q["outside"]}) 2>/dev/null; verdict write $?
env | grep '^AWS_' | grep -qv '^AWS_\\(DEFAULT_\\)\\?REGION='; verdict aws-environment $?
[[ $(id -u) != 65534 ]]; verdict uid $?
"""


def _assert_held(output: str, tmp: Path, listener: Listener) -> None:
    verdicts = [line for line in output.splitlines() if line.startswith(("blocked:", "LEAKED:"))]
    assert verdicts == [f"blocked: {p}" for p in PROBES], output
    assert SECRET not in output
    assert listener.accepted == 0
    assert not (tmp / "outside" / "written").exists()


def test_a_node_script_reaches_nothing_outside_its_sandbox(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    _need_isolation()
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bundle = tmp_path / "node" / "lifecycle"
    bundle.mkdir(parents=True)
    (bundle / "on_create.sh").write_text(_probe(tmp_path, listener.port))
    node = Node(tmp_path / "node", bundle=bundle, isolate=True)
    result = node.run(env={"AWS_SESSION_TOKEN": "leaked-token", "AWS_DEFAULT_REGION": "us-west-2"})
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_held(result.stdout, tmp_path, listener)


# --- the rehearsal, with a user's lifecycle script on the compute group ------------------------

END = "probe ended"  # the probe fails on purpose, so that its output is kept in the recording


@pytest.fixture
def hostile(tmp_path: Path, listener: Listener) -> tuple[EnvironmentConfig, Assembly]:
    from hyperpod_kit.app import build_environment, create_app
    from hyperpod_kit.jobs.slurm import BUNDLED

    source = tmp_path / "env"
    source.mkdir()
    probe = _probe(tmp_path, listener.port) + f'echo "{END}"\nexit 3\n'
    (source / "probe.sh").write_text(probe)
    shutil.copyfile(BUNDLED, source / "job.sbatch.j2")  # a job template of the user's own
    groups = default_data()["cluster"]["instance_groups"]
    for group in groups:
        if group["name"] == "compute":
            group["lifecycle"] = {"scripts": ["probe.sh"]}
    data = merge(
        default_data(),
        {"cluster": {"instance_groups": groups}, "trainer": {"job": {"template": "job.sbatch.j2"}}},
    )
    config = EnvironmentConfig.model_validate(data).at_source(source)
    app = create_app(outdir=str(tmp_path / "cdk.out"))
    build_environment(app, config)
    app.synth()
    return config, Assembly.load(tmp_path / "cdk.out")


@pytest.mark.synth
def test_the_rehearsal_runs_a_users_script_isolated(
    hostile: tuple[EnvironmentConfig, Assembly],
    tmp_path: Path,
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _need_isolation()
    for name, value in CREDENTIALS.items():
        if name != "AWS_PROFILE":  # botocore in this process would look it up
            monkeypatch.setenv(name, value)
    config, assembly = hostile
    recording = record_calls(assembly, config, workdir=tmp_path / "actors")
    probed = [f for f in recording.failures if f.actor.startswith("lifecycle compute")]
    assert probed, [f.actor for f in recording.failures]  # first provisioning, replaced node
    assert {f.actor for f in recording.failures} == {f.actor for f in probed}
    for failure in probed:
        assert END in failure.output_tail
        _assert_held(failure.output_tail, tmp_path, listener)
    assert not any("user's own scripts" in s.name for s in recording.skipped)
    assert any(c.actor.startswith("job ") for c in recording)  # the user's job template ran


@pytest.mark.synth
def test_without_isolation_the_users_script_is_not_run_and_one_line_says_so(
    hostile: tuple[EnvironmentConfig, Assembly],
    tmp_path: Path,
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox, "BWRAP", "no-such-bwrap-on-this-machine")
    config, assembly = hostile
    report = rehearse_assembly(assembly.folder, config, workdir=tmp_path / "actors")
    # hyperpod-kit's own scripts still ran, and passed; the probe never did.
    assert report.ok, report.render()
    assert any(c.actor.startswith("lifecycle compute") for c in report.calls)
    said = [line for line in report.render().splitlines() if "user's own scripts" in line]
    assert len(said) == 1, report.render()
    assert "lifecycle.scripts of group compute" in said[0]
    assert "trainer.job.template job.sbatch.j2" in said[0]
    assert not any(c.actor.startswith("job ") for c in report.calls)
    assert "not run" in said[0] and "no-such-bwrap-on-this-machine not found" in said[0]
    assert listener.accepted == 0 and not (tmp_path / "outside" / "written").exists()
