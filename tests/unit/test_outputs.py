"""`hyperpod_kit.outputs`: the rules every write of the CLI follows, without any synth.

A folder is replaced only if it is missing, empty or ours (marker) of the same kind; a file is
overwritten only with `force` (or when nothing would change); writes are staged and renamed; what
killed runs left is cleaned up, and only that.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_kit import __version__
from hyperpod_kit.outputs import (
    ASSEMBLY,
    JOBS,
    MARKER,
    FolderOutput,
    OutputError,
    check_file,
    check_folder,
    read_marker,
    recover,
    write_file,
    write_files,
    write_marker,
)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder): what 'untouched' means."""
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_marker_says_tool_version_and_kind(tmp_path: Path) -> None:
    write_marker(tmp_path, ASSEMBLY)
    data = json.loads((tmp_path / MARKER).read_text())
    assert data == {"tool": "hyperpod-kit", "version": __version__, "kind": ASSEMBLY, "written": []}
    assert read_marker(tmp_path) == data


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"tool": "other-tool", "kind": "cloud-assembly"}',
        '{"tool": "hyperpod-kit"}',
    ],
    ids=["garbage", "list", "other-tool", "no-kind"],
)
def test_a_marker_that_is_not_ours_does_not_count(tmp_path: Path, content: str) -> None:
    (tmp_path / MARKER).write_text(content)
    assert read_marker(tmp_path) is None


# --- folders -----------------------------------------------------------------------------------


def test_missing_empty_and_our_folders_may_be_replaced(tmp_path: Path) -> None:
    assert check_folder(tmp_path / "new", ASSEMBLY) == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert check_folder("empty", ASSEMBLY) == tmp_path / "empty"
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "manifest.json").write_text("{}")
    write_marker(tmp_path / "ours", ASSEMBLY)
    assert check_folder("ours", ASSEMBLY) == tmp_path / "ours"


def test_a_file_the_user_added_to_our_folder_is_named_and_kept(tmp_path: Path) -> None:
    """`logs --save DIR` twice with a note of the user's in DIR: refused, the note named."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "manifest.json").write_text("{}")
    write_marker(tmp_path / "ours", ASSEMBLY)
    (tmp_path / "ours" / "notes.md").write_text("mine")
    (tmp_path / "ours" / "sub").mkdir()
    message = _refusal("ours")
    assert (
        "did not write (notes.md, sub)" in message and "nothing was written or removed" in message
    )
    assert (tmp_path / "ours" / "notes.md").read_text() == "mine"


def test_a_marker_without_a_list_of_what_it_wrote_claims_nothing(tmp_path: Path) -> None:
    """A marker of an older hyperpod-kit (no `written` list): every file counts as the user's."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}")
    marker = {"tool": "hyperpod-kit", "version": "0.0.1", "kind": ASSEMBLY}
    (tmp_path / "old" / MARKER).write_text(json.dumps(marker))
    assert "did not write (manifest.json)" in _refusal("old")


def _refusal(target: str, kind: str = ASSEMBLY) -> str:
    with pytest.raises(OutputError) as e:
        check_folder(target, kind)
    message = str(e.value)
    assert message.startswith(f"{target}: ") and ". Hint: " in message, message
    assert "\n" not in message
    return message


def test_a_folder_with_user_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    assert "did not write" in _refusal("mine")


def test_another_cdk_apps_assembly_is_refused(tmp_path: Path) -> None:
    """A cdk.out without our marker came from some other CDK app: not ours to replace."""
    (tmp_path / "cdk.out").mkdir()
    (tmp_path / "cdk.out" / "manifest.json").write_text('{"version": "48.0.0"}')
    message = _refusal("cdk.out")
    assert "is a cloud assembly without the .hyperpod-kit marker" in message
    assert "remove it yourself" in message


def test_the_current_folder_and_its_parents_are_refused(tmp_path: Path) -> None:
    """`-o .` would put the assembly where the project is: refused even when the folder is empty."""
    assert "current folder" in _refusal(".")
    assert "current folder" in _refusal("..")
    assert "current folder" in _refusal(str(tmp_path))
    assert "current folder" in _refusal("/")


def test_a_file_a_link_and_a_missing_parent_are_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert "is a file" in _refusal("notes.txt")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert "symbolic link" in _refusal("link")
    assert "does not exist" in _refusal("no/such/cdk.out")
    assert not (tmp_path / "no").exists()


def test_our_folder_of_another_kind_is_refused(tmp_path: Path) -> None:
    """Job files (which a user may have edited) are never replaced by a cloud assembly."""
    (tmp_path / "jobs").mkdir()
    write_marker(tmp_path / "jobs", JOBS)
    (tmp_path / "jobs" / "pretrain.sbatch").write_text("#!/bin/bash\n")
    assert "job files written by hyperpod-kit" in _refusal("jobs", ASSEMBLY)


def test_no_folder_output_replaces_a_folder_of_someone_else(tmp_path: Path) -> None:
    """`--force` (`pipeline codepipeline`) no longer replaces a folder of someone else's: no
    folder output takes a force, and the refusal never suggests one."""
    (tmp_path / "pipeline.out").mkdir()
    (tmp_path / "pipeline.out" / "notes.txt").write_text("mine")
    message = _refusal("pipeline.out")
    assert "--force" not in message
    assert snapshot(tmp_path / "pipeline.out") == {"notes.txt": b"mine"}


def test_staging_is_a_marked_sibling_removed_on_failure(tmp_path: Path) -> None:
    out = FolderOutput.checked("cdk.out", ASSEMBLY)
    with pytest.raises(RuntimeError), out.staging() as staging:
        assert staging.parent == tmp_path
        assert staging.name.startswith(f".cdk.out.new.{os.getpid()}.")
        assert read_marker(staging) is not None
        (staging / "manifest.json").write_text("{}")
        raise RuntimeError("synth failed")
    assert sorted(os.listdir(tmp_path)) == []


def test_commit_replaces_our_previous_output(tmp_path: Path) -> None:
    for version in ("first", "second"):
        out = FolderOutput.checked("cdk.out", ASSEMBLY)
        with out.staging() as staging:
            (staging / "manifest.json").write_text(version)
            out.commit(staging)
    assert (tmp_path / "cdk.out" / "manifest.json").read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == ["cdk.out"], "no staging or old folder is left"
    assert read_marker(tmp_path / "cdk.out") == {
        "tool": "hyperpod-kit", "version": __version__, "kind": ASSEMBLY,
        "written": ["manifest.json"],
    }  # fmt: skip


def test_commit_checks_again(tmp_path: Path) -> None:
    """A user folder that appears while we synthesize is not replaced either."""
    out = FolderOutput.checked("cdk.out", ASSEMBLY)
    with out.staging() as staging:
        (tmp_path / "cdk.out").mkdir()
        (tmp_path / "cdk.out" / "mine.txt").write_text("mine")
        with pytest.raises(OutputError):
            out.commit(staging)
    assert snapshot(tmp_path) == {"cdk.out": None, "cdk.out/mine.txt": b"mine"}


def test_leftovers_of_killed_runs_are_cleaned_and_only_ours(tmp_path: Path) -> None:
    pid = dead_pid()
    ours = tmp_path / f".cdk.out.new.{pid}.abc123"
    ours.mkdir()
    write_marker(ours, ASSEMBLY)
    unmarked = tmp_path / f".cdk.out.new.{pid}.zzz999"  # our name, no marker: not provably ours
    unmarked.mkdir()
    (unmarked / "x").write_text("x")
    running = tmp_path / f".cdk.out.new.{os.getpid()}.def456"  # a run still in progress
    running.mkdir()
    write_marker(running, ASSEMBLY)
    other = tmp_path / ".cdk.out.backup"
    other.mkdir()
    write_marker(other, ASSEMBLY)
    recover(tmp_path / "cdk.out")
    assert not ours.exists()
    assert unmarked.exists() and running.exists() and other.exists()


def test_a_run_killed_between_the_renames_is_undone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed after moving the old output aside: the next run puts it back first."""
    aside = tmp_path / f".cdk.out.old.{dead_pid()}.abc123"
    aside.mkdir()
    write_marker(aside, ASSEMBLY)
    (aside / "manifest.json").write_text("previous")
    recover(tmp_path / "cdk.out")
    assert (tmp_path / "cdk.out" / "manifest.json").read_text() == "previous"
    assert not aside.exists()
    assert "restored from" in capsys.readouterr().err


# --- files -------------------------------------------------------------------------------------


def test_a_new_file_is_written_through_a_temporary_file(tmp_path: Path) -> None:
    write_file(check_file("schema.json", "{}\n", force=False))
    assert (tmp_path / "schema.json").read_text() == "{}\n"
    assert os.listdir(tmp_path) == ["schema.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "schema.json").stat().st_mode) == 0o666 & ~umask


def test_an_existing_file_needs_force(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    target.write_text("mine")
    target.chmod(0o640)
    with pytest.raises(OutputError) as e:
        check_file("schema.json", "new", force=False)
    assert str(e.value).startswith("schema.json: exists and would be overwritten")
    assert "Hint: pass --force" in str(e.value)
    assert target.read_text() == "mine"
    write_file(check_file("schema.json", "new", force=True))
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640, "the file keeps its permissions"


def test_the_same_bytes_are_not_an_overwrite(tmp_path: Path) -> None:
    (tmp_path / "schema.json").write_text("same")
    write = check_file("schema.json", "same", force=False)
    assert not write.changes


def test_file_refusals(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "real.txt").write_text("mine")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    for target, expected in (
        ("/nonexistent/x.json", "/nonexistent/x.json: the folder /nonexistent does not exist"),
        ("folder", "folder: is a folder, not a file"),
        ("link.txt", "link.txt: is a symbolic link"),
    ):
        with pytest.raises(OutputError) as e:
            check_file(target, "text", force=True)
        assert str(e.value).startswith(expected)
    assert (tmp_path / "real.txt").read_text() == "mine"


# --- a folder of files (jobs) ------------------------------------------------------------------


def test_jobs_folder_is_created_whole_and_marked(tmp_path: Path) -> None:
    writes = write_files("jobs", {"a.sbatch": "A"}, kind=JOBS, force=False)
    assert [w.target.name for w in writes] == ["a.sbatch"]
    marker = read_marker(tmp_path / "jobs")
    assert marker is not None and marker["kind"] == JOBS and set(marker["files"]) == {"a.sbatch"}
    assert sorted(os.listdir(tmp_path)) == ["jobs"]


def test_jobs_rewrites_its_own_files_but_not_a_users_edit(tmp_path: Path) -> None:
    write_files("jobs", {"a.sbatch": "A1"}, kind=JOBS, force=False)
    (tmp_path / "jobs" / "notes.md").write_text("mine")
    write_files("jobs", {"a.sbatch": "A2"}, kind=JOBS, force=False)  # unchanged since: ours
    assert (tmp_path / "jobs" / "a.sbatch").read_text() == "A2"
    (tmp_path / "jobs" / "a.sbatch").write_text("A2 + my edit")
    with pytest.raises(OutputError) as e:
        write_files("jobs", {"a.sbatch": "A3", "b.yaml": "B"}, kind=JOBS, force=False)
    assert "was edited after hyperpod-kit wrote it" in str(e.value)
    assert (tmp_path / "jobs" / "a.sbatch").read_text() == "A2 + my edit"
    assert not (tmp_path / "jobs" / "b.yaml").exists(), "all checked before any is written"
    write_files("jobs", {"a.sbatch": "A3"}, kind=JOBS, force=True)
    assert (tmp_path / "jobs" / "a.sbatch").read_text() == "A3"
    assert (tmp_path / "jobs" / "notes.md").read_text() == "mine", "never removed"


def test_jobs_into_a_users_folder_needs_force_and_adds_only_its_files(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "run.sh").write_text("mine")
    with pytest.raises(OutputError) as e:
        write_files("mine", {"a.sbatch": "A"}, kind=JOBS, force=False)
    assert "Hint:" in str(e.value) and "--force" in str(e.value)
    assert snapshot(tmp_path / "mine") == {"run.sh": b"mine"}
    write_files("mine", {"a.sbatch": "A"}, kind=JOBS, force=True)
    assert snapshot(tmp_path / "mine") == {"a.sbatch": b"A", "run.sh": b"mine"}
    assert read_marker(tmp_path / "mine") is None, "a user's folder is never marked as ours"


def test_jobs_never_writes_into_a_cloud_assembly(tmp_path: Path) -> None:
    (tmp_path / "cdk.out").mkdir()
    write_marker(tmp_path / "cdk.out", ASSEMBLY)
    with pytest.raises(OutputError):
        write_files("cdk.out", {"a.sbatch": "A"}, kind=JOBS, force=True)
