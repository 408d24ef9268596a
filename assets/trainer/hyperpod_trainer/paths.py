"""What each command of the trainer reads and writes, checked before any work (torch-free).

Every path goes through the one input and output layer (`fileio`), which `hyperpod-kit` uses too:
inputs are checked first (a regular file within a size limit, or a folder) and remembered, then
the output folder, which may not be, contain or lie inside any of them. The output folders
carry `fileio`'s marker (`.hyperpod-kit`, tool "hyperpod-trainer", with the list of what was
written): a folder the trainer did not write is never replaced, `--force` or not; its own earlier
output is replaced only with `--force`; a file the user added into it makes it refuse, naming it.

The limits below are what one file of each kind may hold; a file over its limit is refused from
`stat`, before a byte of it is read (a sparse file of a terabyte included).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, fileio
from .fileio import GiB, MiB, TiB

TOOL = (
    "hyperpod-trainer"  # the marker's tool: never "hyperpod-kit", so neither replaces the other's
)

CHECKPOINT = "checkpoint"  # import-hf: a checkpoint folder the trainer starts from
HF_MODEL = "hf-model"  # export-hf: safetensors + config.json (+ tokenizer)
SHARDS = "shards"  # prepare-data: token shards, eval/ and the tokenizer
OWNER = fileio.Owner(
    tool=TOOL,
    version=__version__,
    kinds={
        CHECKPOINT: "an imported checkpoint",
        HF_MODEL: "an exported Hugging Face model",
        SHARDS: "token shards",
    },
    defaults={CHECKPOINT: "ckpt/run1", HF_MODEL: "run1-hf", SHARDS: "data/shards"},
)

# --- limits, one per kind of file -----------------------------------------------------------

# train --config: a YAML of a few sections is a few KiB; a MiB is already a mistake.
CONFIG_LIMIT = 1 * MiB
# A Hugging Face config.json is about 1 KiB.
HF_CONFIG_LIMIT = 1 * MiB
# model.safetensors.index.json: Llama 3.1 405B's names 1,100 tensors in about 100 KiB.
SAFETENSORS_INDEX_LIMIT = 16 * MiB
# One *.safetensors file: never read whole (tensors are read one by one), only bounded by disk.
# Llama 3.1 405B in bf16 is 810 GB in 191 files; a 70B in fp32 saved unsharded is 280 GB.
SAFETENSORS_LIMIT = 1 * TiB
# A safetensors file's JSON header; safetensors itself refuses headers over 100 MB.
SAFETENSORS_HEADER_LIMIT = 100 * MiB
# tokenizer.json (and tokenizer_config.json, special_tokens_map.json beside it): read whole and
# parsed; Llama 3's is 9 MB, the largest vocabularies in use about 30 MB.
TOKENIZER_LIMIT = 256 * MiB
# A .txt/.text/.md input is one document, read whole into memory.
TEXT_LIMIT = 1 * GiB
# A .jsonl or .parquet input is streamed (memory stays near one line or one row group): bounded
# by disk, not memory. Also the declared limit of --input (the largest any input file may be).
DATA_FILE_LIMIT = 1 * TiB
# One line of a .jsonl input (one document) is held in memory.
JSONL_LINE_LIMIT = 64 * MiB

# chat_template.jinja: where transformers 5 saves the chat template (prepare-data --format chat).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
TOKENIZER_HINT = "give a tokenizers tokenizer.json (or, for export-hf, its folder)"


# --- inputs ----------------------------------------------------------------------------------


def input_path(path: Path | str, *, limit: int, what: str, hint: str) -> Path:
    """An input that may be a file (within `limit`) or a folder; checked and remembered."""
    if os.path.isdir(path):  # False for a loop of links: input_file names it
        return fileio.input_folder(path, what=what, hint=hint)
    return fileio.input_file(path, limit=limit, what=what, hint=hint)


def tokenizer_files(path: Path, *, what: str = "tokenizer") -> dict[str, bytes]:
    """tokenizer.json (the file `path`, or the one in the folder `path`) and the files
    transformers reads beside it, when present; each read through the input layer."""
    if os.path.isdir(path):
        folder, main = path, path / TOKENIZER_FILES[0]
    else:
        folder, main = path.parent, path
    found = {
        TOKENIZER_FILES[0]: fileio.read_bytes(
            main, limit=TOKENIZER_LIMIT, what="tokenizer.json", hint=TOKENIZER_HINT
        )
    }
    for name in TOKENIZER_FILES[1:]:
        extra = folder / name
        if os.path.lexists(extra):  # present: read it, or say why not (never skipped silently)
            found[name] = fileio.read_bytes(
                extra, limit=TOKENIZER_LIMIT, what=f"{what} file", hint="remove it or fix it"
            )
    return found


@dataclass(frozen=True)
class Safetensors:
    """A safetensors file whose header and size agree: its tensors' names and the bytes."""

    path: Path
    tensors: dict[str, Any]  # name -> {"dtype", "shape", "data_offsets"}
    size: int


def safetensors(path: Path) -> Safetensors:
    """Check `path` as a whole safetensors file before any tensor is mapped: a regular file
    within its limit, an 8-byte header length, a JSON header within safetensors' own limit,
    and a size equal to what the header describes (a truncated file is refused here, in one
    line, rather than failing deep in safetensors or with SIGBUS on a mapped page)."""
    hint = "download or copy that file again"
    st = os.stat(fileio.input_file(path, limit=SAFETENSORS_LIMIT, what="safetensors file"))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise fileio.InputError(path, f"cannot be read ({e.strerror})", hint) from None
    with os.fdopen(fd, "rb") as f:
        if (kind := fileio.not_regular(os.fstat(f.fileno()).st_mode)) is not None:
            raise fileio.InputError(path, f"{kind}; a safetensors file was expected", hint)
        head = f.read(8)
        if len(head) < 8:
            raise fileio.InputError(
                path, f"is {st.st_size} bytes: too short for a safetensors file", hint
            )
        (length,) = struct.unpack("<Q", head)
        if length > SAFETENSORS_HEADER_LIMIT or 8 + length > st.st_size:
            raise fileio.InputError(
                path,
                f"is truncated or not safetensors: its header claims {length} bytes, the file "
                f"has {st.st_size}",
                hint,
            )
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fileio.InputError(path, "is not safetensors: its header is not JSON", hint) from None
    if not isinstance(header, dict):
        raise fileio.InputError(path, "is not safetensors: its header is not an object", hint)
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = 0
    for name, entry in tensors.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise fileio.InputError(
                path, f"is not safetensors: tensor {name!r} has no valid data_offsets", hint
            )
        end = max(end, offsets[1])
    expected = 8 + length + end
    if st.st_size != expected:
        said = "is truncated" if st.st_size < expected else "has bytes after its tensors"
        raise fileio.InputError(
            path,
            f"{said}: {fileio.size_text(st.st_size)} ({st.st_size} bytes), its header "
            f"describes {expected} bytes",
            hint,
        )
    return Safetensors(Path(path), tensors, st.st_size)


def _folder(out: Path | str, kind: str, force: bool) -> fileio.FolderOutput:
    """An output folder: missing, empty, or (with --force) one the trainer wrote for `kind`
    holding nothing else."""
    return fileio.FolderOutput.checked(out, kind, OWNER, replace_own=force, force_flag="--force")


# --- each command's paths, in the order they are checked -------------------------------------


def import_hf_paths(src: Path | str, out: Path | str, *, force: bool) -> fileio.FolderOutput:
    fileio.input_folder(
        src,
        what="Hugging Face model folder",
        hint="give the folder that holds config.json and *.safetensors",
    )
    return _folder(out, CHECKPOINT, force)


def export_hf_paths(
    checkpoint: Path | str, out: Path | str, *, tokenizer: Path | str | None, force: bool
) -> fileio.FolderOutput:
    fileio.input_folder(
        checkpoint,
        what="checkpoint folder",
        hint="give a step_NNNNNN folder or a checkpoint.dir",
    )
    if tokenizer is not None:
        input_path(tokenizer, limit=TOKENIZER_LIMIT, what="tokenizer", hint=TOKENIZER_HINT)
    return _folder(out, HF_MODEL, force)


def prepare_data_paths(
    tokenizer: Path | str, inputs: list[Path], out: Path | str, *, force: bool
) -> fileio.FolderOutput:
    input_path(tokenizer, limit=TOKENIZER_LIMIT, what="tokenizer", hint=TOKENIZER_HINT)
    for item in inputs:
        input_path(
            item,
            limit=DATA_FILE_LIMIT,
            what="input",
            hint="give a .jsonl, .parquet or text file, or a folder of them",
        )
    return _folder(out, SHARDS, force)


def sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def is_regular(path: Path) -> bool:
    """Whether `path` (links followed) is a regular file; never opens it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


# --- records: JSON Lines that commands append to (the `verify` suite's results) ---------------

# A run's records are a few KiB per node; a file of 64 MiB is not one of them.
RECORDS_LIMIT = 64 * MiB
RECORDS_HINT = (
    'give a new file, or a records file of the run (JSON Lines, each line an object with "run" '
    'and "type")'
)


def records_problem(raw: bytes) -> str | None:
    """None when `raw` is a records file (empty, or JSON Lines whose every line is an object
    with "run" and "type"), else what it is instead: the only files records are appended to."""
    if (problem := fileio.decode_problem(raw)) is not None:
        return f"is not a records file: {problem.message}"
    text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            return f"is not a records file: line {number} is not JSON"
        if not (isinstance(item, dict) and "run" in item and "type" in item):
            return f'is not a records file: line {number} is not an object with "run" and "type"'
    return None


def records_paths(out: Path | str) -> Path:
    """An output file records are appended to: missing, or a records file (`records_problem`)."""
    return fileio.appendable(out, accepts=records_problem, limit=RECORDS_LIMIT, hint=RECORDS_HINT)


def append_records(out: Path | str, records: list[dict[str, Any]]) -> None:
    """Append `records` as JSON Lines to `out`, checked again as `records_paths` checks it."""
    text = "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in records)
    fileio.append_text(out, text, accepts=records_problem, limit=RECORDS_LIMIT, hint=RECORDS_HINT)
