"""Inputs through the one layer (`hyperpod_trainer.fileio`), as the issue found them: a FIFO as a
lock, a loop of links behind `extends:`, a damaged manifest for `check`, a baseline template that
is a device, a lock value the schema refuses, a lock of another environment. Each answers with
one line, exit 2, no traceback, in well under the alarm (nothing waits on a pipe)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.cli.main import main
from tests.conftest import DEFAULT_FILE, REPO


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    """A read that waits on a pipe would hang: fail it instead."""

    def late(*_: object) -> None:
        raise TimeoutError("the command waited on its input")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "env.yaml"
    shutil.copyfile(DEFAULT_FILE, path)
    return path


def _last_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if not (" info: " in line or " warning: " in line)]
    assert len(errors) == 1, err  # the file's warnings and infos may stand around it
    return errors[0]


def test_a_fifo_as_the_lock_is_refused_unopened(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(env.with_name("env.lock.json"))
    line = _last_line(capsys, ["validate", str(env), "-q"])
    assert "env.lock.json (lock): is a named pipe (FIFO), not a file" in line and "Hint:" in line


def test_a_loop_of_links_behind_extends_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (env.parent / "a").symlink_to(env.parent / "b")
    (env.parent / "b").symlink_to(env.parent / "a")
    overlay = env.with_name("overlay.yaml")
    overlay.write_text("extends: a\nname: overlay\n")
    line = _last_line(capsys, ["validate", str(overlay), "-q"])
    assert (
        line.startswith(f"{overlay}:1 extends: the base 'a'") and "loop of symbolic links" in line
    )


@pytest.mark.parametrize("manifest", ["{not json", "[]", '{"artifacts": {"s": {"type": '
                                       '"aws:cloudformation:stack"}}}'])  # fmt: skip
def test_check_of_a_damaged_assembly_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str], manifest: str
) -> None:
    (env.parent / "bad").mkdir()
    (env.parent / "bad" / "manifest.json").write_text(manifest)
    line = _last_line(capsys, ["check", "bad"])
    assert line.startswith("bad") and "Hint:" in line


def test_a_baseline_template_that_is_a_device_is_not_read(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = env.parent / "base"
    base.mkdir()
    artifact = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "t.json"}}
    (base / "manifest.json").write_text(json.dumps({"artifacts": {"s": artifact}}))
    (base / "t.json").symlink_to("/dev/zero")  # read without end before the layer
    line = _last_line(capsys, ["plan", str(env), "--baseline", "base", "-q"])
    assert "t.json" in line and "is a character device, not a file" in line


def _write_lock(env: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["lock", str(env), "-q"]) == 0
    capsys.readouterr()
    return env.with_name("env.lock.json")


def test_a_lock_of_another_environment_is_refused(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = _write_lock(env, capsys)
    data = json.loads(lock.read_text())
    data["environment"] = "someone-elses-prod"
    lock.write_text(json.dumps(data, indent=1))
    before = lock.read_bytes()
    line = _last_line(capsys, ["synth", str(env), "-q", "-o", "out"])
    assert "is the lock of environment 'someone-elses-prod', not of 'hyperpod-dev'" in line
    assert lock.read_bytes() == before and not (env.parent / "out").exists()


def test_a_lock_value_the_schema_refuses_is_not_applied(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copyfile(REPO / "environments" / "eks.yaml", env)  # an AMI release is EKS's alone
    lock = _write_lock(env, capsys)
    data = json.loads(lock.read_text())
    key = "cluster.instance_groups[workers].image_release_version"
    data["pins"][key].update(value="2025.1.1\n$(touch /tmp/hpk-pwned)", source="deployed")
    lock.write_text(json.dumps(data, indent=1))
    line = _last_line(capsys, ["validate", str(env), "-q"])
    assert line.startswith(f"{lock}:") and key in line and "the lock's value is refused" in line
