"""What a checkpoint must agree with before it is resumed, and what all ranks must agree on.

Two records, both flat ``{"dotted.key": "value"}`` maps so that a difference can be named:

- the **resume fingerprint** (stored in every checkpoint's ``COMPLETE.json``): everything that
  decides the data order and the model being continued. A resume with a different one would run
  without error into a different sample sequence (a new shard shifts every window id; another
  global batch moves the position), so it is refused unless the user asks for a weights-only
  resume;
- the **effective configuration** of a rank: the whole resolved config, the data fingerprint and
  the runtime (torch, the trainer's own source). Ranks exchange it before step 1: a node with
  another image or another copy of the config file ends the job before it trains.

Torch-free: hashing shard files and comparing maps needs none of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
from pathlib import Path
from typing import Any

from . import __version__
from .config import Config
from .shards import SHARD_SUFFIXES

# The algorithm that maps (samples consumed, rank) to sample ids and ids to token windows
# (data.py: BatchPlan, RankBatchSampler, SyntheticTokens, TokenShards). Bump it with any change
# to that mapping: a checkpoint's data position means nothing under another algorithm.
SAMPLER_VERSION = 1

# Bytes read from each end of every shard for the content hash: enough to see a re-tokenised
# or rewritten shard of the same size, cheap enough for thousands of shards on Lustre.
_EDGE_BYTES = 4096


def _sha256(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def shard_index(directory: Path) -> list[tuple[str, int]]:
    """(name, size in bytes) of every shard, in the order the dataset numbers them."""
    shards = sorted(p for p in directory.iterdir() if p.suffix in SHARD_SUFFIXES)
    return [(p.name, p.stat().st_size) for p in shards]


def _edges(path: Path, size: int) -> bytes:
    with path.open("rb") as f:
        head = f.read(_EDGE_BYTES)
        if size <= 2 * _EDGE_BYTES:
            return head + f.read()
        f.seek(size - _EDGE_BYTES)
        return head + f.read()


def data_fingerprint(cfg: Config) -> dict[str, str]:
    """The dataset and sampler as resumed: shards (names, sizes, a content hash), order knobs."""
    d = cfg.data
    out = {
        "data.source": d.source,
        "data.seq_len": str(d.seq_len),
        "data.seed": str(d.seed),
        "data.sampler_version": str(SAMPLER_VERSION),
        "train.global_batch_size": str(cfg.train.global_batch_size),
        "model.preset": cfg.model.preset,
    }
    if cfg.train.task != "pretrain":  # absent for pretraining: older checkpoints still match
        out["train.task"] = cfg.train.task
    if d.source == "synthetic":
        out["data.vocab_size"] = str(cfg.shape().vocab_size)
        return out
    assert d.path is not None
    directory = Path(d.path)
    index = shard_index(directory)
    total = sum(size for _, size in index)
    out["data.shuffle"] = str(d.shuffle)
    out["data.token_dtype"] = d.token_dtype
    out["data.shards"] = f"{len(index)} shards, {total} bytes"
    out["data.shard_names"] = _sha256([f"{name}:{size}".encode() for name, size in index])[:16]
    out["data.index_sha256"] = _sha256(
        [name.encode() + b"\0" + _edges(directory / name, size) for name, size in index]
    )[:16]
    return out


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = json.dumps(value)


def _trainer_source_sha() -> str:
    """Hash of this package's source files: two images with the same version but other code."""
    root = Path(__file__).parent
    files = sorted(root.glob("*.py"))
    return _sha256([p.name.encode() + b"\0" + p.read_bytes() for p in files])[:16]


def effective_config(cfg: Config, data: dict[str, str], torch_version: str) -> dict[str, str]:
    """Everything one rank will train with, flattened to dotted keys."""
    out: dict[str, str] = {}
    _flatten(dataclasses.asdict(cfg), "", out)
    for key, value in data.items():
        out[f"fingerprint.{key}"] = value
    out["runtime.trainer_version"] = __version__
    out["runtime.trainer_source"] = _trainer_source_sha()
    out["runtime.torch"] = torch_version
    out["runtime.python"] = platform.python_version()
    return out


def config_hash(config: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def differences(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, old value, new value) for every key whose value differs; absent reads '<absent>'.

    In the order of `new`'s keys, then `old`'s: a fingerprint lists its plainest fields first
    (a stored one may have been reordered by JSON).
    """
    keys = list(new) + [k for k in old if k not in new]
    absent = "<absent>"
    return [(k, old.get(k, absent), new.get(k, absent)) for k in keys if old.get(k) != new.get(k)]


def describe(diffs: list[tuple[str, str, str]], *, limit: int = 4) -> str:
    shown = ", ".join(f"{k} {a} -> {b}" for k, a, b in diffs[:limit])
    more = len(diffs) - limit
    return shown + (f" (and {more} more)" if more > 0 else "")
