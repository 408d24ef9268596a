"""A damaged newest checkpoint never traps a job in a restart loop.

One real 2-rank run writes checkpoints at steps 3 and 6; each case copies that folder, damages
it the way a file system or a person does, and relaunches (as auto-resume would):

- the newest damaged (a shard missing or truncated, `.metadata` or `COMPLETE.json` missing):
  moved to `damaged/`, kept byte for byte, and the job resumes from step 3;
- none intact: the final exit code (5), recorded in the folder, so that the next launch exits at
  once with the same code;
- a folder `step_000010/` the trainer did not write is left exactly as it was, with a warning.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.train import EXIT_NO_INTACT_CHECKPOINT

pytestmark = pytest.mark.trainer

DAMAGES = ["missing shard", "truncated shard", "missing metadata", "missing marker"]


def _damage(path: Path, damage: str) -> None:
    shard = sorted(path.glob("*.distcp"))[-1]
    if damage == "missing shard":
        shard.unlink()
    elif damage == "truncated shard":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "missing metadata":
        (path / ".metadata").unlink()
    else:
        (path / "COMPLETE.json").unlink()


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _user_folder(ckpt: Path) -> tuple[Path, dict[str, bytes]]:
    user = ckpt / "step_000010"
    user.mkdir()
    (user / "notes.txt").write_text("mine, not the trainer's\n")
    (user / "__0_0.distcp").write_bytes(b"\0" * 100)
    return user, _snapshot(user)


@pytest.fixture(scope="module")
def pristine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pristine") / "ckpt"


@pytest.fixture
def pristine(harness, pristine_dir: Path) -> Path:
    """A checkpoint folder with intact checkpoints at steps 3 and 6 (2 ranks), made once."""
    if not pristine_dir.exists():
        result = harness.launch(2, _sets(harness, pristine_dir, "train.stop_at_step=6"))
        assert result.returncode == 0, result.explain()
    assert sorted(p.name for p in pristine_dir.glob("step_*")) == ["step_000003", "step_000006"]
    for step in ("step_000003", "step_000006"):
        assert (pristine_dir / step / "OWNER.json").is_file()
        assert "files" in json.loads((pristine_dir / step / "COMPLETE.json").read_text())
    return pristine_dir


def _sets(harness, ckpt: Path, *more: str) -> list[str]:
    return harness.with_recipe(f"checkpoint.dir={ckpt}", "checkpoint.every_steps=3", *more)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_newest_is_kept_aside_and_the_previous_resumed(
    harness, pristine: Path, tmp_path: Path, damage: str
) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(pristine, ckpt)
    _damage(ckpt / "step_000006", damage)
    damaged = _snapshot(ckpt / "step_000006")
    user, user_files = _user_folder(ckpt)

    result = harness.launch(2, _sets(harness, ckpt, "train.stop_at_step=4"))
    assert result.returncode == 0, result.explain()
    (resume,) = result.of("resume")
    assert resume["step"] == 3
    (event,) = result.of("checkpoint_damaged")
    assert event["path"] == str(ckpt / "step_000006")
    assert "checkpoint" in result.stderr and "is damaged" in result.stderr
    # Kept, byte for byte, out of the way; the pointer names what was resumed (then saved).
    assert _snapshot(ckpt / "damaged" / "step_000006") == damaged
    assert not (ckpt / "step_000006").exists()
    assert (ckpt / "latest").read_text().strip() == "step_000004"
    assert sorted(result.losses()) == [4]
    # Someone else's folder: untouched, and said so.
    assert _snapshot(user) == user_files
    assert f"{user} was not written by the trainer" in result.stderr
    assert not (ckpt / "FAILED.json").exists()


def test_none_intact_is_final_and_stays_final(harness, pristine: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(pristine, ckpt)
    _damage(ckpt / "step_000003", "truncated shard")
    _damage(ckpt / "step_000006", "missing shard")
    user, user_files = _user_folder(ckpt)

    first = harness.launch(2, _sets(harness, ckpt))
    # torchrun reports its own failure (1); the ranks' own code is in its report and the record.
    assert first.returncode != 0, first.explain()
    assert f"exitcode  : {EXIT_NO_INTACT_CHECKPOINT}" in first.stderr, first.explain()
    assert "final: no intact checkpoint" in first.stderr
    assert not first.of("step")
    record = json.loads((ckpt / "FAILED.json").read_text())
    assert record["exit_code"] == EXIT_NO_INTACT_CHECKPOINT
    assert sorted(p.name for p in (ckpt / "damaged").iterdir()) == ["step_000003", "step_000006"]
    assert _snapshot(user) == user_files

    # The next launch (another restart) exits at once with the same code, touching nothing.
    again = harness.direct(["--set", f"checkpoint.dir={ckpt}", "--set", "train.steps=12"])
    assert again.returncode == EXIT_NO_INTACT_CHECKPOINT, again.explain()
    assert "FAILED.json" in again.stderr and "Not retrying" in again.stderr
    assert not again.events
    assert sorted(p.name for p in (ckpt / "damaged").iterdir()) == ["step_000003", "step_000006"]
    assert _snapshot(user) == user_files
