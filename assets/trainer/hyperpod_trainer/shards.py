"""Token shard files: the headered `.tokens` format prepare-data writes, and the headerless
`.bin` / `.npy` files the trainer has always read.

A `.tokens` file says what it holds (all integers little-endian):

    offset 0   8 bytes   magic b"HPKTOKEN"
    offset 8   u32       format version (1)
    offset 12  u32       length L of the JSON header that follows
    offset 16  L bytes   UTF-8 JSON: {"dtype": "uint16"|"uint32", "vocab_size": V,
                         "tokenizer_sha256": hex, "num_tokens": T, "num_documents": D,
                         "max_token_id": M, "documents_offset": O_d, "tokens_offset": O_t}
    O_d        D x u64   start of each document, in tokens from the first token
    O_t        T x dtype the tokens (O_d and O_t are multiples of 64)

Version 2 (fine-tuning shards, `prepare-data --format chat|prompt-completion`) adds to the
header "task": "sft", "seq_len": L, "packing": "pack"|"pad", "chat_template_sha256" (null for
prompt-completion) and "mask_offset": O_m, and a section

    O_m        T x u8    1 where the token is a target the loss counts (assistant turns), else 0

between the documents and the tokens. Such a shard is T = R x (L+1) tokens: R rows of L+1, one
training sequence each; the documents are the packed examples (and the padding runs) and never
cross a row. Version 1 files (pretraining) are still written and read as before.

A headerless `.bin` is raw tokens in `data.token_dtype`; a `.npy` says its own dtype. Torch-free:
prepare-data and the fingerprint use this module without the training runtime.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"HPKTOKEN"
VERSION = 1
SFT_VERSION = 2  # version 1 plus the loss mask section and the task fields
READABLE_VERSIONS = (VERSION, SFT_VERSION)
HEADERED_SUFFIX = ".tokens"
# Every file the trainer counts as a shard, in data.path (eval shards live in a subfolder).
SHARD_SUFFIXES = (".npy", ".bin", HEADERED_SUFFIX)
DTYPES: dict[str, np.dtype[Any]] = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_PREFIX = struct.Struct("<8sII")
_ALIGN = 64
# Tokens read at a time when a headerless shard's ids are checked at open.
_SCAN_TOKENS = 1 << 24


class ShardError(Exception):
    """A shard that cannot be used; the message names the file."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class ShardHeader:
    dtype: str
    vocab_size: int
    tokenizer_sha256: str
    num_tokens: int
    num_documents: int
    max_token_id: int
    documents_offset: int
    tokens_offset: int
    # Version 2 (fine-tuning) only; version 1 files leave them at these defaults.
    task: str = "pretrain"
    seq_len: int | None = None
    packing: str | None = None
    chat_template_sha256: str | None = None
    mask_offset: int | None = None


def tokenizer_sha256(path: Path) -> str:
    """The tokenizer's identity in shard headers: the SHA-256 of its tokenizer.json bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dtype_for_vocab(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def write_shard(
    path: Path,
    tokens: np.ndarray[Any, Any],
    doc_starts: np.ndarray[Any, Any],
    *,
    dtype: str,
    vocab_size: int,
    tokenizer_sha: str,
    loss_mask: np.ndarray[Any, Any] | None = None,
    sft: dict[str, Any] | None = None,
) -> ShardHeader:
    """Write one `.tokens` file (caller: prepare-data, into a folder it will rename). With a
    `loss_mask` (and `sft`: seq_len, packing, chat_template_sha256) a version 2 file."""
    array = np.ascontiguousarray(tokens, dtype=DTYPES[dtype])
    starts = np.ascontiguousarray(doc_starts, dtype="<u8")
    mask = None if loss_mask is None else np.ascontiguousarray(loss_mask, dtype=np.uint8)
    if mask is not None and len(mask) != len(array):
        raise ValueError("one loss mask byte per token")
    # The JSON's length decides the offsets it contains: settle them on a padded length.
    fields: dict[str, Any] = {
        "dtype": dtype,
        "vocab_size": vocab_size,
        "tokenizer_sha256": tokenizer_sha,
        "num_tokens": len(array),
        "num_documents": len(starts),
        "max_token_id": int(array.max()) if len(array) else -1,
        "documents_offset": 0,
        "tokens_offset": 0,
    }
    if mask is not None:
        fields.update(task="sft", **(sft or {}), mask_offset=0)
    json_len = len(json.dumps(fields).encode()) + 96  # room for the offsets' digits
    fields["documents_offset"] = _aligned(_PREFIX.size + json_len)
    after_docs = _aligned(fields["documents_offset"] + starts.nbytes)
    if mask is not None:
        fields["mask_offset"] = after_docs
        after_docs = _aligned(after_docs + mask.nbytes)
    fields["tokens_offset"] = after_docs
    text = json.dumps(fields).encode().ljust(json_len)
    with path.open("wb") as f:
        f.write(_PREFIX.pack(MAGIC, VERSION if mask is None else SFT_VERSION, len(text)))
        f.write(text)
        f.write(b"\0" * (fields["documents_offset"] - f.tell()))
        f.write(starts.tobytes())
        if mask is not None:
            f.write(b"\0" * (fields["mask_offset"] - f.tell()))
            f.write(mask.tobytes())
        f.write(b"\0" * (fields["tokens_offset"] - f.tell()))
        f.write(array.tobytes())
    return ShardHeader(**fields)


def read_header(path: Path) -> ShardHeader:
    """The header of a `.tokens` file, checked against the file's size."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(_PREFIX.size)
        if len(prefix) < _PREFIX.size or prefix[:8] != MAGIC:
            raise ShardError(path, "not a prepare-data shard (no HPKTOKEN header)")
        _, version, json_len = _PREFIX.unpack(prefix)
        if version not in READABLE_VERSIONS:
            raise ShardError(
                path, f"shard format version {version}; this trainer reads {READABLE_VERSIONS}"
            )
        try:
            fields = json.loads(f.read(json_len))
            header = ShardHeader(**fields)
        except (ValueError, TypeError) as exc:
            raise ShardError(path, f"damaged header ({exc})") from None
    if header.dtype not in DTYPES:
        raise ShardError(path, f"unknown dtype {header.dtype!r} in the header")
    if (version == SFT_VERSION) != (header.mask_offset is not None):
        raise ShardError(
            path, f"damaged header (version {version} with mask_offset {header.mask_offset})"
        )
    expected = header.tokens_offset + header.num_tokens * DTYPES[header.dtype].itemsize
    if size != expected:
        raise ShardError(
            path, f"{size} bytes, the header describes {expected}: truncated or damaged"
        )
    return header


def header_dict(header: ShardHeader) -> dict[str, Any]:
    return asdict(header)


def open_tokens(path: Path, *, bin_dtype: str) -> tuple[np.ndarray[Any, Any], ShardHeader | None]:
    """Memory-map a shard's tokens (copy-on-write: torch gets a writable view that never hits
    disk), with its header if it has one. Raises ShardError for files no dtype can explain."""
    if path.suffix == HEADERED_SUFFIX:
        header = read_header(path)
        if header.num_tokens == 0:
            return np.zeros(0, dtype=DTYPES[header.dtype]), header
        array: np.ndarray[Any, Any] = np.memmap(
            path,
            dtype=DTYPES[header.dtype],
            mode="c",
            offset=header.tokens_offset,
            shape=(header.num_tokens,),
        )
        return array, header
    size = path.stat().st_size
    if path.suffix == ".npy":
        try:
            array = np.load(path, mmap_mode="c")
        except ValueError as exc:
            raise ShardError(path, str(exc)) from None
        if array.ndim != 1 or array.dtype not in (np.uint16, np.uint32):
            raise ShardError(path, f"expected 1-D uint16 or uint32 tokens, got {array.dtype}")
        return array, None
    dtype = DTYPES[bin_dtype]
    if size == 0:
        raise ShardError(path, "empty file (0 bytes): no tokens")
    if size % dtype.itemsize:
        raise ShardError(
            path,
            f"{size} bytes is not a whole number of {bin_dtype} tokens: not a {bin_dtype} token "
            "file (data.token_dtype), or truncated",
        )
    return np.memmap(path, dtype=dtype, mode="c"), None


def open_sft(
    path: Path,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], ShardHeader]:
    """(tokens, loss mask, document starts, header) of a version 2 shard, memory-mapped."""
    tokens, header = open_tokens(path, bin_dtype="uint16")
    assert header is not None and header.mask_offset is not None
    n = header.num_tokens
    mask: np.ndarray[Any, Any] = (
        np.memmap(path, dtype=np.uint8, mode="r", offset=header.mask_offset, shape=(n,))
        if n
        else np.zeros(0, dtype=np.uint8)
    )
    starts: np.ndarray[Any, Any] = (
        np.memmap(
            path,
            dtype="<u8",
            mode="r",
            offset=header.documents_offset,
            shape=(header.num_documents,),
        )
        if header.num_documents
        else np.zeros(0, dtype="<u8")
    )
    return tokens, mask, starts, header


def max_token_id(array: np.ndarray[Any, Any]) -> int:
    """The largest id in a headerless shard, read in pieces (memory stays bounded)."""
    top = -1
    for start in range(0, len(array), _SCAN_TOKENS):
        top = max(top, int(array[start : start + _SCAN_TOKENS].max()))
    return top
