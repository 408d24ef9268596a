"""The trainer's commands through the one input and output layer (`fileio`, `paths`).

What issue 31 saw: `export-hf CK CK --force` deleted every checkpoint step and the optimizer state
of CK; `import-hf models/llama models --force` deleted the source model and what stood beside it;
a truncated safetensors file and non-UTF-8 text were tracebacks. Now: an output that is, holds or
lies inside an input is refused before any work; a folder the trainer did not write is never
replaced, `--force` or not; its own earlier output only with `--force`, and never when the user
added a file to it; every refusal is exit 2 and one line, and nothing is written or removed
(checked byte for byte). The Hugging Face model here is written with safetensors alone (no
transformers), so each command runs in about a second.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hyperpod_trainer")
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from hyperpod_trainer import cli, fileio, paths  # noqa: E402
from hyperpod_trainer.checkpoint import complete_checkpoints, prepare_resume  # noqa: E402
from hyperpod_trainer.presets import ModelShape  # noqa: E402
from tests.integration.trainer.path_inputs import hf_model, word_tokenizer  # noqa: E402

pytestmark = pytest.mark.trainer


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"rc={self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """The command in this process (torch is imported once, not per command: each subprocess
    would spend seconds importing it on a loaded machine); `harness.direct` where a hang or the
    process itself is what is tested."""

    def _run(args: list[Any], timeout: int = 120) -> Ran:
        def hung(signum: int, frame: Any) -> None:
            raise TimeoutError(f"the command did not answer within {timeout} s")

        capsys.readouterr()
        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(timeout)  # a command that waits on a FIFO fails the test, never hangs it
        try:
            code = cli.main([str(a) for a in args])
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return _run


SHAPE = ModelShape(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48, vocab_size=64)


def _hf_model(folder: Path) -> Path:
    return hf_model(folder, SHAPE)


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry below `root` (links not followed): kind and bytes, to compare before/after."""
    found: dict[str, Any] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            elif path.is_file():
                found[rel] = ("file", path.read_bytes())
            else:
                found[rel] = ("other",)
    return found


def _one_line(result: Any, *needles: str) -> str:
    assert result.returncode == 2, result.explain()
    lines: list[str] = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def imported(tmp_path: Path, run: Callable[..., Ran]) -> Path:
    """SRC (a Hugging Face model) imported into CK: a checkpoint folder of the trainer's."""
    _hf_model(tmp_path / "models" / "llama")
    result = run(["import-hf", str(tmp_path / "models" / "llama"), str(tmp_path / "ck")])
    assert result.returncode == 0, result.explain()
    return tmp_path / "ck"


# --- Seen: outputs that are, hold or lie inside an input -------------------------------------


def test_export_hf_into_its_own_checkpoint_is_refused_and_loses_nothing(
    imported: Path, run: Callable[..., Ran], tmp_path: Path
) -> None:
    before = _snapshot(tmp_path)
    for out in (imported, imported / "step_000000", imported / "hf", tmp_path):
        result = run(["export-hf", str(imported), str(out), "--force"])
        _one_line(result, str(out), "input of this command")
    step = imported / "step_000000"
    result = run(["export-hf", str(step), str(imported), "--force"])
    _one_line(result, "contains", "input of this command")
    assert _snapshot(tmp_path) == before


def test_import_hf_into_the_folder_holding_its_source_is_refused(
    tmp_path: Path, run: Callable[..., Ran]
) -> None:
    src = _hf_model(tmp_path / "models" / "llama")
    (tmp_path / "models" / "notes.txt").write_text("beside the model")
    before = _snapshot(tmp_path)
    for out, said in (
        (tmp_path / "models", "contains"),
        (src, "is an input"),
        (src / "ckpt", "lies inside"),
    ):
        result = run(["import-hf", str(src), str(out), "--force"])
        _one_line(result, str(out), said)
    assert _snapshot(tmp_path) == before


def test_the_current_folder_is_never_an_output(
    tmp_path: Path, run: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _hf_model(tmp_path / "models" / "llama")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = _snapshot(tmp_path)
    _one_line(run(["import-hf", src, "."]), "current folder")
    _one_line(run(["import-hf", src, tmp_path, "--force"]), "current folder")
    assert _snapshot(tmp_path) == before


# --- folders the trainer did not write, and its own earlier outputs ----------------------------


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_a_users_folder_is_never_replaced(
    tmp_path: Path, run: Callable[..., Ran], force: bool
) -> None:
    src = _hf_model(tmp_path / "models" / "llama")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("a,b\n1,2\n")
    before = _snapshot(tmp_path)
    result = run(["import-hf", str(src), str(mine), *(["--force"] if force else [])])
    _one_line(result, str(mine), "did not write", "nothing was written")
    assert _snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mine.")]


def test_our_own_output_is_replaced_only_with_force(
    imported: Path, run: Callable[..., Ran]
) -> None:
    src = imported.parent / "models" / "llama"
    marker = json.loads((imported / fileio.MARKER).read_text())
    assert marker["tool"] == paths.TOOL and marker["kind"] == paths.CHECKPOINT
    assert "step_000000/COMPLETE.json" in marker["written"]
    first = (imported / "step_000000" / "COMPLETE.json").read_text()
    again = run(["import-hf", str(src), str(imported)])
    _one_line(again, str(imported), "exists", "--force")
    assert (imported / "step_000000" / "COMPLETE.json").read_text() == first
    time.sleep(0.01)  # COMPLETE.json records the time: the replacement differs
    forced = run(["import-hf", str(src), str(imported), "--force"])
    assert forced.returncode == 0, forced.explain()
    assert (imported / "step_000000" / "COMPLETE.json").read_text() != first
    assert [p.name for p in imported.parent.iterdir() if p.name.startswith(".ck.")] == []


def test_a_file_the_user_added_to_our_output_is_kept_and_named(
    imported: Path, run: Callable[..., Ran]
) -> None:
    src = imported.parent / "models" / "llama"
    (imported / "step_000000" / "my-notes.md").write_text("why this run")
    before = _snapshot(imported.parent)
    result = run(["import-hf", str(src), str(imported), "--force"])
    _one_line(result, "step_000000/my-notes.md", "did not write")
    assert _snapshot(imported.parent) == before


def test_export_hf_replaces_its_own_output_only_with_force(
    imported: Path, run: Callable[..., Ran], tmp_path: Path
) -> None:
    out = tmp_path / "exported"
    first = run(["export-hf", str(imported), str(out)])
    assert first.returncode == 0, first.explain()
    assert (out / "model.safetensors").is_file() and (out / fileio.MARKER).is_file()
    _one_line(run(["export-hf", str(imported), str(out)]), "exists", "--force")
    forced = run(["export-hf", str(imported), str(out), "--force", "--dtype", "bf16"])
    assert forced.returncode == 0, forced.explain()
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    # An import's folder is not an export's: the kinds differ, even with --force.
    other = run(["export-hf", str(imported), str(imported.parent / "models")])
    _one_line(other, "did not write")


def test_an_os_error_while_writing_is_one_line(
    tmp_path: Path, run: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only or full file system (root writes through mode 555, so it is simulated)."""
    src = _hf_model(tmp_path / "models" / "llama")

    def refused(self: fileio.FolderOutput) -> Any:
        raise PermissionError(13, "Permission denied", str(self.target.parent / ".ck.new.1.x"))

    monkeypatch.setattr(fileio.FolderOutput, "staging", refused)
    before = _snapshot(tmp_path)
    line = _one_line(run(["import-hf", src, tmp_path / "ck"]), "cannot write", "Permission denied")
    assert line.startswith("hyperpod_trainer import-hf: error: ")
    assert _snapshot(tmp_path) == before


def test_export_hf_ships_the_tokenizer_it_is_given(
    imported: Path, run: Callable[..., Ran], tmp_path: Path
) -> None:
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "my-tokenizer.json").write_text('{"model": {}}')
    (tok / "special_tokens_map.json").write_text("{}")
    out = tmp_path / "exported"
    result = run(["export-hf", imported, out, "--tokenizer", tok / "my-tokenizer.json"])
    assert result.returncode == 0, result.explain()
    assert (out / "tokenizer.json").read_text() == '{"model": {}}'
    assert (out / "special_tokens_map.json").read_text() == "{}"
    assert (out / "tokenizer_config.json").is_file()  # the minimal one, none came with it
    (tmp_path / "empty").mkdir()
    result = run(["export-hf", imported, tmp_path / "e2", "--tokenizer", tmp_path / "empty"])
    _one_line(result, "no tokenizer.json")
    os.mkfifo(tok / "tokenizer_config.json")  # beside it: refused, not skipped, never opened
    result = run(["export-hf", imported, tmp_path / "e3", "--tokenizer", tok / "my-tokenizer.json"])
    _one_line(result, "tokenizer_config.json", "named pipe")
    assert not (tmp_path / "e2").exists() and not (tmp_path / "e3").exists()


# --- the checkpoint logic is not confused by the marker ----------------------------------------


def test_the_marker_is_neither_a_checkpoint_nor_someone_elses(imported: Path) -> None:
    found = complete_checkpoints(imported)
    assert [info.step for info in found] == [0]
    scan = prepare_resume(imported)
    assert scan.latest is not None and scan.latest.step == 0
    assert scan.foreign == [] and scan.removed == [] and scan.damaged == []
    assert (imported / fileio.MARKER).is_file()


# --- inputs: damaged, special or undecodable files -------------------------------------------


def test_a_truncated_safetensors_file_is_one_line(tmp_path: Path, run: Callable[..., Ran]) -> None:
    src = _hf_model(tmp_path / "hf")
    weights = src / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes(raw[: len(raw) - 100])
    result = run(["import-hf", str(src), str(tmp_path / "ck")])
    _one_line(result, str(weights), "truncated")
    assert not (tmp_path / "ck").exists()
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    result = run(["import-hf", str(src), str(tmp_path / "ck")])
    _one_line(result, str(weights), "header is not JSON")
    weights.write_bytes(b"\x01\x02")
    _one_line(run(["import-hf", str(src), str(tmp_path / "ck")]), "too short")


def test_special_files_in_the_source_are_refused_unopened(
    tmp_path: Path, run: Callable[..., Ran]
) -> None:
    src = _hf_model(tmp_path / "hf")
    (src / "model.safetensors").unlink()
    os.mkfifo(src / "model.safetensors")
    result = run(["import-hf", str(src), str(tmp_path / "ck")])
    _one_line(result, "model.safetensors", "named pipe")
    (src / "config.json").unlink()
    os.symlink("config.json", src / "config.json")  # a loop of one link
    result = run(["import-hf", str(src), str(tmp_path / "ck")], timeout=30)
    _one_line(result, "config.json", "loop")
    assert not (tmp_path / "ck").exists()


def test_a_fifo_as_a_checkpoints_record_is_never_opened(
    imported: Path, run: Callable[..., Ran], tmp_path: Path
) -> None:
    """COMPLETE.json and FAILED.json are read through the input layer too (checkpoint.py)."""
    from hyperpod_trainer.checkpoint import final_failure

    marker = imported / "step_000000" / "COMPLETE.json"
    marker.unlink()
    os.mkfifo(marker)
    result = run(["export-hf", imported, tmp_path / "out"], timeout=60)
    _one_line(result, "not a checkpoint")
    assert complete_checkpoints(imported) == []
    os.mkfifo(imported / "FAILED.json")
    assert final_failure(imported, unreadable_code=5) == (
        5,
        f"{imported / 'FAILED.json'} is unreadable",
    )


def test_a_fifo_as_config_is_refused_at_once(tmp_path: Path, harness: Any) -> None:
    os.mkfifo(tmp_path / "job.yaml")
    started = time.monotonic()
    result = harness.direct(["--config", str(tmp_path / "job.yaml"), "--check"], timeout=20)
    _one_line(result, "job.yaml", "named pipe")
    assert time.monotonic() - started < 15


def test_a_socket_or_a_large_sparse_config_is_refused(tmp_path: Path, harness: Any) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.yaml"))
    try:
        _one_line(harness.direct(["--config", str(tmp_path / "s.yaml")]), "socket")
    finally:
        sock.close()
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(paths.CONFIG_LIMIT + 1)
    _one_line(harness.direct(["--config", str(big), "--check"]), "big.yaml", "at most 1 MiB")


def _tokenizer(path: Path) -> Path:
    return word_tokenizer(path, ["the", "lazy", "fox", "dog"])


@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_non_utf8_text_is_one_line_naming_the_line(
    tmp_path: Path, run: Callable[..., Ran], suffix: str
) -> None:
    pytest.importorskip("tokenizers")
    tok = _tokenizer(tmp_path / "tokenizer.json")
    data = tmp_path / "in" / f"corpus{suffix}"
    data.parent.mkdir()
    good = json.dumps({"text": "the lazy fox"}) + "\n" if suffix == ".jsonl" else "the fox\n"
    bad = b'{"text": "caf\xe9"}\n' if suffix == ".jsonl" else b"caf\xe9\n"
    data.write_bytes(good.encode() * 2 + bad)
    out = tmp_path / "data"
    result = run(
        ["prepare-data", "--tokenizer", str(tok), "--input", str(data.parent), "--output",
         str(out), "--workers", "1"],
    )  # fmt: skip
    _one_line(result, str(data), "byte 0xe9 on line 3", "not UTF-8")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".data.")]


def test_prepare_data_refuses_an_output_inside_its_input_and_a_fifo_tokenizer(
    tmp_path: Path, run: Callable[..., Ran]
) -> None:
    pytest.importorskip("tokenizers")
    tok = _tokenizer(tmp_path / "tokenizer.json")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("the lazy dog\n")
    before = _snapshot(tmp_path)
    args = ["prepare-data", "--tokenizer", str(tok), "--input", str(tmp_path / "in")]
    _one_line(run([*args, "--output", str(tmp_path / "in" / "out")]), "lies inside")
    _one_line(run([*args, "--output", str(tmp_path), "--force"]), "contains")
    os.mkfifo(tmp_path / "in" / "b.txt")  # a FIFO in an input folder: refused, not skipped
    _one_line(run([*args, "--output", str(tmp_path / "d")], timeout=30), "named pipe")
    (tmp_path / "in" / "b.txt").unlink()
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    result = run(
        ["prepare-data", "--tokenizer", str(fifo), "--input", str(tmp_path / "in"), "--output",
         str(tmp_path / "d")], timeout=30,
    )  # fmt: skip
    _one_line(result, "fifo.json", "named pipe")
    fifo.unlink()
    assert _snapshot(tmp_path) == before
    ok = run([*args, "--output", str(tmp_path / "d"), "--workers", "1"])
    assert ok.returncode == 0, ok.explain()
    marker = json.loads((tmp_path / "d" / fileio.MARKER).read_text())
    assert marker["kind"] == paths.SHARDS and "tokenizer.json" in marker["written"]


# --- the parsers ------------------------------------------------------------------------------


def test_every_argument_of_every_parser_declares_its_kind() -> None:
    found = cli.parsers()
    assert set(found) == {"", "import-hf", "export-hf", "prepare-data", "bench-allreduce"}
    kinds: dict[tuple[str, str], fileio.PathKind] = {}
    for name, parser in found.items():
        for action in parser._actions:
            spec = fileio.spec_of(action)
            assert spec is not None, f"{name or 'train'} {action.dest}: no declared kind"
            kinds[(name, action.dest)] = spec.kind
            if spec.kind in (fileio.PathKind.INPUT_FILE, fileio.PathKind.INPUT_PATH):
                assert spec.limit, f"{name} {action.dest}: an input without a limit"
    assert kinds[("import-hf", "src")] is fileio.PathKind.INPUT_FOLDER
    assert kinds[("export-hf", "out")] is fileio.PathKind.OUTPUT_FOLDER
    assert kinds[("prepare-data", "input")] is fileio.PathKind.INPUT_PATH
    assert kinds[("", "config")] is fileio.PathKind.INPUT_FILE
    assert kinds[("bench-allreduce", "out")] is fileio.PathKind.OUTPUT_FILE


def test_no_subcommand_still_means_train(harness: Any) -> None:
    result = harness.direct(["--set", "train.steps=20", "--check", "--world-size", "1"])
    assert result.returncode == 0, result.explain()
    assert json.loads(result.stdout)["config"]["train"]["steps"] == 20
