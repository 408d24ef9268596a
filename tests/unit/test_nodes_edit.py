"""`nodes delete --edit-file`: the one number changed in place at the loader's line, every other
byte kept (comments, quotes, CRLF, a byte-order mark, a base reached through `extends:`), and a
line that does not hold the count as a plain number refused before anything is done."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperpod_kit.cli.main import main
from hyperpod_kit.config import aws as aws_module
from hyperpod_kit.config.aws import AwsFacade
from hyperpod_kit.config.file_edit import CountEdit, EditRefusedError, apply
from tests.conftest import REPO
from tests.unit.test_nodes import FILE, batch, deployed
from tests.unit.test_status import NODE, Stubs

DEFAULT = (REPO / FILE).read_bytes()
COMPUTE = b"    - {name: compute, role: compute, instance_type: ml.g5.8xlarge, instance_count: 2}"


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubs]:
    """The command's facade is the stubbed one (as tests/unit/test_nodes.py's)."""
    s = Stubs(AwsFacade("us-west-2"))
    monkeypatch.setattr(aws_module, "AwsFacade", lambda region, **_: s.facade)
    yield s
    s.done()


def edit(line: int, before: int = 2, after: int = 1, group: str = "compute") -> CountEdit:
    return CountEdit("env.yaml", line, "instance_count", group, before, after)


def only_that_number_changed(
    old: bytes, new: bytes, line: int, before: bytes, after: bytes
) -> None:
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    assert len(old_lines) == len(new_lines)
    changed = [i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert changed == [line]
    assert old_lines[line - 1].replace(before, after) == new_lines[line - 1]


GROUPS = """\
cluster:  # the cluster
  instance_groups:
    - name: controller
      role: controller
      instance_count: 1   # one
    - name: compute
      role: compute
      instance_count: {count}   # two, for now
"""


@pytest.mark.parametrize(("count", "written"), [("2", "1"), ('"2"', '"1"'), ("'2'", "'1'")])
def test_block_style_keeps_the_comment_and_the_quotes(count: str, written: str) -> None:
    text = GROUPS.format(count=count)
    new = apply(edit(8), text)
    only_that_number_changed(text.encode(), new.encode(), 8, count.encode(), written.encode())


def test_a_flow_mapping_with_crlf_changes_one_number() -> None:
    text = "cluster:\r\n  instance_groups:\r\n    - {name: compute, instance_count: 2}  # x\r\n"
    new = apply(edit(3), text)
    assert new == text.replace("instance_count: 2}", "instance_count: 1}")


@pytest.mark.parametrize(("text", "line", "said"), [
    (GROUPS.format(count="3"), 8, "the line holds '3', not 2"),
    (GROUPS.format(count="0x2"), 8, "the line holds '0x2', not 2"),
    (GROUPS.format(count="2"), 7, "the line does not hold it"),
    ("n: &n 2\n" + GROUPS.format(count="*n"), 9, "an anchor or alias shares the value"),
    (GROUPS.format(count="\n        2"), 8, "the value is on another line"),
    ("d: &d {instance_count: 2}\ncluster:\n  instance_groups:\n"
     "    - {<<: *d, name: compute}\n    - {<<: *d, name: other}\n", 1,
     "is reached by 3 paths"),
    (GROUPS.format(count="2").replace("name: compute", "name: gpu"), 8,
     "the line is group 'gpu''s, not 'compute''s"),
])  # fmt: skip
def test_a_line_that_does_not_hold_the_plain_count_is_refused(
    text: str, line: int, said: str
) -> None:
    with pytest.raises(EditRefusedError, match="nothing was written") as e:
        apply(edit(line), text)
    assert said in str(e.value)
    assert str(e.value).startswith(f"env.yaml:{line} instance_count: ")
    assert "Hint: edit it by hand: 2 -> 1." in str(e.value)


def test_a_single_merge_source_is_refused_as_more_than_this_value() -> None:
    """One group merging the anchored mapping: the anchor's line is edited only if nothing else
    reads it; here `d` itself is a key of the file, so the edit would change it too."""
    text = (
        "d: &d {instance_count: 2}\ncluster:\n  instance_groups:\n    - {<<: *d, name: compute}\n"
    )
    with pytest.raises(EditRefusedError, match=r"paths|more than this value"):
        apply(edit(1), text)


# --- the command -------------------------------------------------------------------------------


def _delete(tmp: Path, file: Path, stubs: Stubs, *, called: bool = True) -> int:
    deployed(stubs)
    if called:
        batch(stubs, "batch_delete_cluster_nodes", [NODE])
    return main(["nodes", str(file.relative_to(tmp)), "delete", NODE, "--edit-file", "-q"])


def test_the_command_edits_the_file_in_place_crlf_and_bom_kept(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "env.yaml"
    old = codecs.BOM_UTF8 + DEFAULT.replace(b"\n", b"\r\n")
    file.write_bytes(old)
    file.chmod(0o640)
    assert _delete(tmp_path, file, stubs) == 0
    assert "edited env.yaml:36 cluster.instance_groups[compute].instance_count: 2 -> 1" in (
        capsys.readouterr().out
    )
    only_that_number_changed(old, file.read_bytes(), 36, b"instance_count: 2}",
                             b"instance_count: 1}")  # fmt: skip
    assert file.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["env.yaml"]  # no temporary file left


def test_the_edit_goes_to_the_base_file_through_extends(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    base = tmp_path / "base" / "default.yaml"
    base.write_bytes(DEFAULT)
    child = tmp_path / "dev.yaml"
    child_bytes = b"# the team's dev\nextends: base/default.yaml\nregion: us-west-2\n"
    child.write_bytes(child_bytes)
    assert _delete(tmp_path, child, stubs) == 0
    assert child.read_bytes() == child_bytes
    only_that_number_changed(DEFAULT, base.read_bytes(), 36, b"instance_count: 2}",
                             b"instance_count: 1}")  # fmt: skip


def test_a_count_through_an_alias_is_refused_before_anything_is_done(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "env.yaml"
    old = DEFAULT.replace(COMPUTE, COMPUTE.replace(b": 2}", b": &two 2}"))
    old = old.replace(b"    nodes: 2\n", b"    nodes: *two  # as many as compute\n")
    file.write_bytes(old)
    assert _delete(tmp_path, file, stubs, called=False) == 2  # no delete call: the stub has none
    out, err = capsys.readouterr()
    assert "env.yaml:36 cluster.instance_groups[compute].instance_count: 2 -> 1" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("nodes delete --edit-file: env.yaml:36 instance_count: ")
    assert "an anchor or alias shares the value" in line and line.endswith("Nothing done.")
    assert file.read_bytes() == old


def test_edit_file_goes_with_delete_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", str(REPO / FILE), "reboot", NODE, "--edit-file", "-q"]) == 2
    assert "--edit-file goes with delete" in capsys.readouterr().err


def test_a_dry_run_with_edit_file_writes_nothing(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "env.yaml"
    file.write_bytes(DEFAULT)
    deployed(stubs)
    assert main(["nodes", "env.yaml", "delete", NODE, "--dry-run", "--edit-file", "-q"]) == 0
    out, err = capsys.readouterr()
    assert "env.yaml:36 cluster.instance_groups[compute].instance_count: 2 -> 1" in out
    assert "dry run: nothing done" in err and "edited" not in out
    assert file.read_bytes() == DEFAULT


def test_a_file_given_through_a_link_is_refused_by_the_output_layer(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.yaml").write_bytes(DEFAULT)
    (tmp_path / "env.yaml").symlink_to("real.yaml")
    assert _delete(tmp_path, tmp_path / "env.yaml", stubs, called=False) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "env.yaml: is a symbolic link" in line and line.endswith("Nothing done.")
    assert (tmp_path / "real.yaml").read_bytes() == DEFAULT
