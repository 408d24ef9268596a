"""`prepare-data`: text -> headered token shards (shards.py) with a held-out split.

    python -m hyperpod_trainer prepare-data --tokenizer tokenizer.json \\
        --input corpus.jsonl --input more/ --output DIR [--eval-fraction 0.01] [--workers 8]

writes

    DIR/train-00000.tokens ...     the training shards (data.path: DIR)
    DIR/eval/eval-00000.tokens ... the held-out documents (data.path: DIR/eval)
    DIR/tokenizer.json             the tokenizer (the trainer checks the shards against it;
                                   export-hf ships it with the model)
    DIR/prepare-data.json          what was read and written
    DIR/.hyperpod-kit              the output layer's marker (fileio): kind, every file written

Inputs: JSON lines (`.jsonl`, the `--text-field`), plain text (`.txt`, `.text`, `.md`: one
document per file), Parquet (`.parquet`, needs pyarrow) and a Hugging Face dataset saved with
`save_to_disk` (a folder with `dataset_info.json` or `state.json`, needs `datasets`); a folder
is read file by file in name order. pyarrow and datasets are imported only when such an input
is given. Tokenizing runs in `--workers` processes; the output is the same for any number of
them (documents are split and sharded in input order, the split is seeded). Progress goes to
stderr.

Every path goes through the one input and output layer (`paths`, `fileio`): the tokenizer and
every input file are checked as regular files within their limits (a FIFO, a device or a loop of
links is one line, never opened), text is decoded with a one-line error naming the file, the
line and the byte, and DIR may not be, hold or lie inside an input. Everything is written into
a sibling folder and renamed into place at the end; an existing DIR is replaced only if
prepare-data wrote it, holds nothing else, and --force is given.
"""

from __future__ import annotations

import argparse
import codecs
import itertools
import json
import multiprocessing
import os
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, fileio, paths
from .config import ConfigError
from .shards import (
    DTYPES,
    HEADERED_SUFFIX,
    dtype_for_vocab,
    write_shard,
)

MANIFEST = "prepare-data.json"
EVAL_DIR = "eval"
TEXT_SUFFIXES = (".txt", ".text", ".md")
DOCS_PER_TASK = 256


# ---------------------------------------------------------------------------------------------
# Reading documents


def _line_text(path: Path, raw: bytes, number: int, offset: int) -> str:
    """One line of a .jsonl as text, or one line naming the file, the line and the byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if number == 1 and (problem := fileio.decode_problem(raw)) and problem.line is None:
            raise fileio.InputError(path, problem.message, problem.hint) from None  # UTF-16...
        bad = raw[e.start]
        column = len(raw[: e.start].decode("utf-8", errors="replace")) + 1
        raise fileio.InputError(
            path,
            f"byte 0x{bad:02x} on line {number}, column {column} (byte {offset + e.start} of "
            "the file) is not UTF-8 text",
            "save the file as UTF-8",
        ) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of a checked input file, streamed: at most one line (of at
    most JSONL_LINE_LIMIT bytes) in memory. The file is opened without waiting (a FIFO put in
    its place since the check is refused by fstat, never read)."""
    hint = "give a .jsonl file with one JSON object per line"
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if (kind := fileio.not_regular(os.fstat(f.fileno()).st_mode)) is not None:
            raise fileio.InputError(path, f"{kind}; a .jsonl file was expected", hint)
        offset = 0
        for number in itertools.count(1):
            raw = f.readline(paths.JSONL_LINE_LIMIT + 1)
            if not raw:
                return
            if len(raw) > paths.JSONL_LINE_LIMIT and not raw.endswith(b"\n"):
                raise fileio.InputError(
                    path,
                    f"line {number} is longer than {fileio.size_text(paths.JSONL_LINE_LIMIT)}",
                    hint,
                )
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            yield number, _line_text(path, raw, number, offset)
            offset += len(raw)


def _jsonl(path: Path, field: str) -> Iterator[str]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise ConfigError(f"{path}:{number}", "not a JSON line") from None
        text = record.get(field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise ConfigError(
                f"{path}:{number}", f"no string field {field!r} (choose it with --text-field)"
            )
        yield text


def _parquet(path: Path, field: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            str(path), "reading Parquet needs pyarrow (pip install pyarrow)"
        ) from None
    table = pq.ParquetFile(path)
    if field not in table.schema_arrow.names:
        raise ConfigError(str(path), f"no column {field!r} (choose it with --text-field)")
    for batch in table.iter_batches(columns=[field]):
        for text in batch.column(0).to_pylist():
            if isinstance(text, str):
                yield text


def _saved_dataset(path: Path, field: str) -> Iterator[str]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            str(path), "reading a saved dataset needs datasets (pip install datasets)"
        ) from None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise ConfigError(str(path), f"a DatasetDict without a train split ({list(loaded)})")
        loaded = loaded["train"]
    if field not in loaded.column_names:
        raise ConfigError(str(path), f"no column {field!r} (choose it with --text-field)")
    for text in loaded[field]:
        if isinstance(text, str):
            yield text


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json")
    )


def _input_file(path: Path) -> Path:
    """Check one input file through the input layer (regular, within its type's limit)."""
    limit = paths.TEXT_LIMIT if path.suffix in TEXT_SUFFIXES else paths.DATA_FILE_LIMIT
    return fileio.input_file(
        path, limit=limit, what=f"{path.suffix} input", hint="give a .jsonl, .parquet or text file"
    )


def input_files(inputs: list[Path]) -> list[Path]:
    """Every input, folders expanded in name order, each file checked through the input layer
    (a FIFO, device or socket with a known suffix in a folder is refused, not skipped)."""
    suffixes = (".jsonl", ".parquet", *TEXT_SUFFIXES)
    out: list[Path] = []
    for item in inputs:
        if os.path.isdir(item):
            fileio.input_folder(item, what="input folder")
        if _is_saved_dataset(item):
            out.append(item)
        elif os.path.isdir(item):
            found = sorted(p for p in item.rglob("*") if p.suffix in suffixes and not p.is_dir())
            if not found:
                raise ConfigError(str(item), "no .jsonl, .parquet or text files in this folder")
            out += [_input_file(p) for p in found]
        else:
            _input_file(item)
            if item.suffix not in suffixes:
                raise ConfigError(
                    str(item),
                    "unknown input type (.jsonl, .parquet, .txt/.text/.md, or a datasets folder)",
                )
            out.append(item)
    return out


def documents(files: list[Path], field: str) -> Iterator[str]:
    for path in files:
        if _is_saved_dataset(path):
            yield from _saved_dataset(path, field)
        elif path.suffix == ".jsonl":
            yield from _jsonl(path, field)
        elif path.suffix == ".parquet":
            yield from _parquet(path, field)
        else:
            yield fileio.read_text(path, limit=paths.TEXT_LIMIT, what="text input")


def _batches(docs: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------------------------------------
# Tokenizing (worker processes)

_worker_tokenizer: Any = None
_worker_eos: int | None = None


def _load_tokenizer(text: str, shown: str) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises its own Exception subclasses
        raise ConfigError(
            "--tokenizer", f"{shown}: not a tokenizers tokenizer.json ({exc})"
        ) from None


def _init_worker(text: str, eos: int | None) -> None:
    global _worker_tokenizer, _worker_eos  # noqa: PLW0603 - one tokenizer per worker process
    _worker_tokenizer = _load_tokenizer(text, "tokenizer.json")
    _worker_eos = eos


def _encode(batch: list[str]) -> list[list[int]]:
    encoded = _worker_tokenizer.encode_batch(batch, add_special_tokens=False)
    tail = [] if _worker_eos is None else [_worker_eos]
    return [list(e.ids) + tail for e in encoded]


# ---------------------------------------------------------------------------------------------
# Writing shards


class _ShardWriter:
    """Accumulates documents and writes a shard each time `shard_tokens` is reached."""

    def __init__(self, folder: Path, prefix: str, *, shard_tokens: int, **header: Any) -> None:
        self.folder = folder
        self.prefix = prefix
        self.shard_tokens = shard_tokens
        self.header = header
        self.docs: list[list[int]] = []
        self.pending = 0
        self.written: list[dict[str, Any]] = []

    def add(self, ids: list[int]) -> None:
        self.docs.append(ids)
        self.pending += len(ids)
        if self.pending >= self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.docs:
            return
        lengths = np.fromiter((len(d) for d in self.docs), dtype=np.int64, count=len(self.docs))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64)
        tokens = np.fromiter(
            (t for d in self.docs for t in d), dtype=np.int64, count=int(lengths.sum())
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}-{len(self.written):05d}{HEADERED_SUFFIX}"
        write_shard(path, tokens, starts, **self.header)
        self.written.append({"file": path.name, "tokens": len(tokens), "documents": len(self.docs)})
        self.docs, self.pending = [], 0


def _eos_id(tokenizer: Any, eos: str | None) -> int | None:
    if eos is None:
        return None
    found = tokenizer.token_to_id(eos)
    if found is None:
        raise ConfigError("--eos", f"{eos!r} is not a token of the tokenizer")
    return int(found)


class _Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last = 0.0

    def show(self, docs: int, tokens: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < 1.0:
            return
        self.last = now
        rate = tokens / max(now - self.started, 1e-9)
        end = "\n" if final else "\r"
        print(
            f"prepare-data: {docs:,} documents, {tokens:,} tokens ({rate:,.0f} tokens/s)",
            file=sys.stderr,
            end=end,
            flush=True,
        )


def prepare(
    *,
    tokenizer_path: Path,
    inputs: list[Path],
    out: Path,
    eval_fraction: float = 0.0,
    workers: int = 1,
    text_field: str = "text",
    shard_tokens: int = 100_000_000,
    dtype: str | None = None,
    eos: str | None = None,
    seed: int = 0,
    force: bool = False,
    fmt: str = "text",
    seq_len: int | None = None,
    pad: bool = False,
) -> dict[str, Any]:
    """Tokenize `inputs` into `out`; returns the manifest it wrote.

    `out` may be missing or empty, or (with `force`) a folder an earlier prepare-data wrote that
    holds nothing else; anything else is refused before a document is read."""
    output = paths.prepare_data_paths(tokenizer_path, inputs, out, force=force)
    if not 0 <= eval_fraction < 1:
        raise ConfigError("--eval-fraction", f"must be in [0, 1), got {eval_fraction:g}")
    tok_files = paths.tokenizer_files(tokenizer_path)
    tok_text = fileio.decode(tokenizer_path, tok_files["tokenizer.json"])
    tokenizer = _load_tokenizer(tok_text, str(tokenizer_path))
    vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    dtype = dtype or dtype_for_vocab(vocab_size)
    if vocab_size > np.iinfo(DTYPES[dtype]).max + 1:
        raise ConfigError("--dtype", f"{dtype} cannot hold the ids of a {vocab_size}-token vocab")
    eos_id = _eos_id(tokenizer, eos)
    sft = None
    if fmt != "text":
        if seq_len is None or seq_len < 1:
            raise ConfigError("--seq-len", f"--format {fmt} needs --seq-len >= 1 (data.seq_len)")
        sft = _SFTSource(fmt, tokenizer, tok_files, eos_id, seq_len=seq_len, pad=pad)
    elif seq_len is not None or pad:
        raise ConfigError(
            "--seq-len", "--seq-len and --pad belong to --format chat|prompt-completion"
        )
    files = input_files(inputs)
    header = {
        "dtype": dtype,
        "vocab_size": vocab_size,
        # The tokenizer's identity in shard headers (shards.tokenizer_sha256): its file's bytes.
        "tokenizer_sha": paths.sha256(tok_files["tokenizer.json"]),
    }
    with output.staging() as tmp:
        if sft is not None:
            manifest = sft.write(
                tmp,
                files=files,
                eval_fraction=eval_fraction,
                seed=seed,
                shard_tokens=shard_tokens,
                header=header,
            )
        else:
            manifest = _tokenize_into(
                tmp,
                files=files,
                text_field=text_field,
                tokenizer_text=tok_text,
                eos_id=eos_id,
                workers=workers,
                eval_fraction=eval_fraction,
                seed=seed,
                shard_tokens=shard_tokens,
                header=header,
            )
        manifest.update(
            writer=f"hyperpod_trainer {__version__} prepare-data",
            inputs=[str(p) for p in files],
            text_field=text_field,
            tokenizer_sha256=header["tokenizer_sha"],
            vocab_size=vocab_size,
            dtype=dtype,
            eos=eos,
            eval_fraction=eval_fraction,
            seed=seed,
            format=fmt,
        )
        for name, raw in tok_files.items():
            (tmp / name).write_bytes(raw)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        output.commit(tmp)
    return manifest


def _tokenize_into(
    folder: Path,
    *,
    files: list[Path],
    text_field: str,
    tokenizer_text: str,
    eos_id: int | None,
    workers: int,
    eval_fraction: float,
    seed: int,
    shard_tokens: int,
    header: dict[str, Any],
) -> dict[str, Any]:
    train = _ShardWriter(folder, "train", shard_tokens=shard_tokens, **header)
    held = _ShardWriter(folder / EVAL_DIR, "eval", shard_tokens=shard_tokens, **header)
    split = random.Random(seed)
    progress = _Progress()
    docs = tokens = 0
    batches = _batches(documents(files, text_field), DOCS_PER_TASK)
    for batch in _encoded(batches, workers, (tokenizer_text, eos_id)):
        for ids in batch:
            if not ids:
                continue
            writer = held if split.random() < eval_fraction else train
            writer.add(ids)
            docs += 1
            tokens += len(ids)
        progress.show(docs, tokens)
    train.flush()
    held.flush()
    progress.show(docs, tokens, final=True)
    if not train.written:
        raise ConfigError("--input", "no text found: no training tokens were produced")
    return {"train": train.written, "eval": held.written, "documents": docs, "tokens": tokens}


# ---------------------------------------------------------------------------------------------
# Fine-tuning examples: chat and prompt-completion (shards.py version 2)


class BadLinesError(ConfigError):
    """Every bad line of the fine-tuning inputs, each `FILE:LINE: reason` (one printed a line)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0].split(": ", 1)[0], lines[0].split(": ", 1)[1])
        self.lines = lines

    def __reduce__(self) -> Any:
        return (BadLinesError, (self.lines,))


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line of a checked .jsonl file; an over-long line is cut at the
    limit (and then fails as JSON)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if (kind := fileio.not_regular(os.fstat(f.fileno()).st_mode)) is not None:
            raise fileio.InputError(path, f"{kind}; a .jsonl file was expected", "give a file")
        for number in itertools.count(1):
            raw = f.readline(paths.JSONL_LINE_LIMIT + 1)
            if not raw:
                return
            if len(raw) > paths.JSONL_LINE_LIMIT and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                    raw = f.readline(paths.JSONL_LINE_LIMIT + 1)
                yield number, b"\xff"  # reported as too long below
                continue
            yield number, raw.removeprefix(codecs.BOM_UTF8) if number == 1 else raw


class _RowWriter:
    """Packs examples into rows of seq_len+1 tokens (or one per row with `pad`) and writes a
    version 2 shard each time `shard_tokens` is reached."""

    def __init__(
        self,
        folder: Path,
        prefix: str,
        *,
        row: int,
        pad: bool,
        pad_id: int,
        shard_tokens: int,
        header: dict[str, Any],
        sft: dict[str, Any],
    ) -> None:
        self.folder, self.prefix, self.row, self.pad, self.pad_id = folder, prefix, row, pad, pad_id
        self.shard_rows = max(1, shard_tokens // row)
        self.header, self.sft = header, sft
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.starts: list[int] = []
        self.rows = 0
        self.written: list[dict[str, Any]] = []
        self.total_rows = 0

    def _close_row(self) -> None:
        used = len(self.tokens) - self.rows * self.row
        if used == 0:
            return
        if used < self.row:  # the padding is a document of its own: nothing attends across
            self.starts.append(len(self.tokens))
            self.tokens += [self.pad_id] * (self.row - used)
            self.mask += [0] * (self.row - used)
        self.rows += 1
        if self.rows >= self.shard_rows:
            self.flush()

    def add(self, ids: list[int], mask: list[int]) -> None:
        used = len(self.tokens) - self.rows * self.row
        if used and (self.pad or used + len(ids) > self.row):
            self._close_row()
        self.starts.append(len(self.tokens))
        self.tokens += ids
        self.mask += [0, *mask[1:]]  # the first token is never a target: it follows another
        if len(self.tokens) - self.rows * self.row == self.row:
            self._close_row()

    def flush(self) -> None:
        self._close_row()
        if not self.rows:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}-{len(self.written):05d}{HEADERED_SUFFIX}"
        write_shard(
            path,
            np.array(self.tokens, dtype=np.int64),
            np.array(self.starts, dtype=np.uint64),
            loss_mask=np.array(self.mask, dtype=np.uint8),
            sft=self.sft,
            **self.header,
        )
        self.written.append(
            {
                "file": path.name,
                "tokens": len(self.tokens),
                "rows": self.rows,
                "loss_tokens": int(sum(self.mask)),
            }
        )
        self.total_rows += self.rows
        self.tokens, self.mask, self.starts, self.rows = [], [], [], 0


class _SFTSource:
    """`--format chat|prompt-completion`: JSON lines -> masked examples -> packed rows."""

    def __init__(
        self,
        fmt: str,
        tokenizer: Any,
        tok_files: dict[str, bytes],
        eos_id: int | None,
        *,
        seq_len: int,
        pad: bool,
    ) -> None:
        from . import chat

        self.fmt, self.tokenizer, self.eos_id = fmt, tokenizer, eos_id
        self.seq_len, self.pad = seq_len, pad
        specials = chat.special_tokens(tok_files)
        self.template_sha: str | None = None
        self.encoder: Any = None
        if fmt == "chat":
            try:
                template, where = chat.find_template(tok_files)
                self.encoder = chat.ChatEncoder(tokenizer, template, specials)
            except chat.ChatError as exc:
                raise ConfigError("--tokenizer", str(exc)) from None
            self.template_sha = paths.sha256(template.encode())
            self.template_source = where
        pad_token = specials.get("pad_token") or specials.get("eos_token")
        found = tokenizer.token_to_id(pad_token) if pad_token else None
        self.pad_id = int(found) if found is not None else 0

    def _example(self, record: Any) -> tuple[list[int], list[int]] | None:
        """(ids, mask) of one record; None when no token carries the loss (no assistant)."""
        from . import chat

        if self.fmt == "chat":
            messages = chat.check_messages(record)
            if not any(m.get("role") == "assistant" for m in messages):
                return None
            example = self.encoder.encode(messages)
            ids, mask = example.ids, example.mask
        else:
            prompt, completion = chat.check_pair(record)
            head = self.tokenizer.encode(prompt, add_special_tokens=False).ids
            tail = self.tokenizer.encode(completion, add_special_tokens=False).ids
            tail += [] if self.eos_id is None else [self.eos_id]
            ids, mask = [*head, *tail], [0] * len(head) + [1] * len(tail)
        if not any(mask[1:]):
            return None
        if len(ids) > self.seq_len + 1:
            raise chat.ChatError(
                f"{len(ids)} tokens, longer than the context (--seq-len {self.seq_len} + 1)"
            )
        return ids, mask

    def write(
        self,
        folder: Path,
        *,
        files: list[Path],
        eval_fraction: float,
        seed: int,
        shard_tokens: int,
        header: dict[str, Any],
    ) -> dict[str, Any]:
        from . import chat

        sft = {
            "seq_len": self.seq_len,
            "packing": "pad" if self.pad else "pack",
            "chat_template_sha256": self.template_sha,
        }
        common: dict[str, Any] = {
            "row": self.seq_len + 1,
            "pad": self.pad,
            "pad_id": self.pad_id,
            "shard_tokens": shard_tokens,
            "header": header,
            "sft": sft,
        }
        train = _RowWriter(folder, "train", **common)
        held = _RowWriter(folder / EVAL_DIR, "eval", **common)
        split = random.Random(seed)
        bad: list[str] = []
        examples = skipped = loss_tokens = tokens = 0
        progress = _Progress()
        for path in files:
            if path.suffix != ".jsonl":
                raise ConfigError(str(path), f"--format {self.fmt} reads .jsonl files only")
            for number, raw in _raw_lines(path):
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    reason = (
                        "longer than " + fileio.size_text(paths.JSONL_LINE_LIMIT)
                        if raw == b"\xff"
                        else f"byte 0x{raw[e.start]:02x} at column {e.start + 1} is not UTF-8"
                    )
                    bad.append(f"{path}:{number}: {reason}")
                    continue
                try:
                    record = json.loads(text)
                except (ValueError, RecursionError):
                    bad.append(f"{path}:{number}: not a JSON line")
                    continue
                try:
                    made = self._example(record)
                except chat.ChatError as exc:
                    bad.append(f"{path}:{number}: {exc}")
                    continue
                if made is None:
                    skipped += 1
                    continue
                if bad:
                    continue  # nothing will be written: only look for more bad lines
                ids, mask = made
                (held if split.random() < eval_fraction else train).add(ids, mask)
                examples += 1
                tokens += len(ids)
                loss_tokens += sum(mask[1:])
                progress.show(examples, tokens)
        if bad:
            raise BadLinesError(bad)
        train.flush()
        held.flush()
        progress.show(examples, tokens, final=True)
        if not train.written:
            raise ConfigError(
                "--input", f"no training examples ({skipped} without an assistant turn)"
            )
        return {
            "train": train.written,
            "eval": held.written,
            "documents": examples,
            "examples": examples,
            "skipped_no_assistant": skipped,
            "tokens": tokens,
            "loss_tokens": loss_tokens,
            "rows": train.total_rows + held.total_rows,
            "seq_len": self.seq_len,
            "packing": sft["packing"],
            "chat_template_sha256": self.template_sha,
        }


def _encoded(
    batches: Iterator[list[str]], workers: int, init_args: tuple[str, int | None]
) -> Iterator[list[list[int]]]:
    """Token ids of each batch, in input order, computed by `workers` processes.

    The documents are read here, in this process (a bad input raises here, with its file and
    line), and at most 2 x workers batches are in flight, so memory stays bounded.
    """
    if workers == 1:
        _init_worker(*init_args)
        yield from map(_encode, batches)
        return
    ctx = multiprocessing.get_context("spawn")  # no tokenizer state inherited by a fork
    with ctx.Pool(workers, initializer=_init_worker, initargs=init_args) as pool:
        in_flight: deque[AsyncResult[list[list[int]]]] = deque()
        for batch in batches:
            in_flight.append(pool.apply_async(_encode, (batch,)))
            if len(in_flight) >= 2 * workers:
                yield in_flight.popleft().get()
        while in_flight:
            yield in_flight.popleft().get()


def run(args: argparse.Namespace) -> int:
    """`prepare-data` with the arguments `cli.parsers()["prepare-data"]` parsed."""
    if args.workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {args.workers}")
    if args.shard_tokens < 1:
        raise ConfigError("--shard-tokens", f"must be >= 1, got {args.shard_tokens}")
    manifest = prepare(
        tokenizer_path=args.tokenizer,
        inputs=args.input,
        out=args.output,
        eval_fraction=args.eval_fraction,
        workers=args.workers,
        text_field=args.text_field,
        shard_tokens=args.shard_tokens,
        dtype=args.dtype,
        eos=args.eos,
        seed=args.seed,
        force=args.force,
        fmt=args.format,
        seq_len=args.seq_len,
        pad=args.pad,
    )
    extra = {
        key: manifest[key]
        for key in ("examples", "skipped_no_assistant", "loss_tokens", "rows", "packing")
        if key in manifest
    }
    print(
        json.dumps(
            {
                **extra,
                "output": str(args.output),
                "documents": manifest["documents"],
                "tokens": manifest["tokens"],
                "train_shards": len(manifest["train"]),
                "eval_shards": len(manifest["eval"]),
                "dtype": manifest["dtype"],
                "vocab_size": manifest["vocab_size"],
            }
        )
    )
    return 0
