"""Datasets addressed by a global sample id, and the rule that hands each rank its share.

The whole data position is one integer: how many samples the job has consumed. Global step `s`
consumes ids ``[c, c + global_batch)`` where `c` is that counter; rank `r` takes the contiguous
slice ``[c + r*A*m, c + (r+1)*A*m)`` as `A` micro-batches of `m`. Nothing here depends on the
world size except that split, so a checkpoint written by 2 ranks resumes exactly on 1 or 3.

Any change to the id -> sample mapping or to the split must bump `SAMPLER_VERSION` (recorded in
every checkpoint's fingerprint), so that an old checkpoint is not resumed into a new order.

This is why the loader is a plain `DataLoader` over a deterministic batch sampler rather than a
torchdata `StatefulDataLoader`: the latter's state counts batches yielded *per rank*, which has no
meaning once the number of ranks changes, and it would still need this counter to reshard.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .config import ConfigError, DataConfig
from .fingerprint import SAMPLER_VERSION
from .shards import (
    SHARD_SUFFIXES,
    ShardError,
    max_token_id,
    open_sft,
    open_tokens,
    tokenizer_sha256,
)
from .signals import ignore_stop_signals


@dataclass(frozen=True)
class BatchPlan:
    """How one global batch is split between ranks and micro-batches."""

    global_batch_size: int
    micro_batch_size: int
    world_size: int
    rank: int

    @property
    def grad_accum(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.world_size)

    def micro_batch_ids(self, samples_consumed: int, micro: int) -> list[int]:
        """Sample ids of micro-batch `micro` on this rank for the step starting at the counter."""
        start = samples_consumed + (self.rank * self.grad_accum + micro) * self.micro_batch_size
        return list(range(start, start + self.micro_batch_size))


class RankBatchSampler(Sampler[list[int]]):
    """Endless micro-batches of ids for this rank, starting at a global sample counter."""

    version = SAMPLER_VERSION

    def __init__(self, plan: BatchPlan, start_samples: int) -> None:
        self.plan = plan
        self.start_samples = start_samples

    def __iter__(self) -> Iterator[list[int]]:
        consumed = self.start_samples
        while True:
            for micro in range(self.plan.grad_accum):
                yield self.plan.micro_batch_ids(consumed, micro)
            consumed += self.plan.global_batch_size


class SyntheticTokens(Dataset[tuple[int, torch.Tensor]]):
    """Deterministic, learnable sequences: sample `i` is an arithmetic progression mod vocab.

    The start and stride come from a RNG seeded by (seed, id), so any process can produce any
    sample without coordination, and a loss curve actually goes down.
    """

    def __init__(self, *, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.seed = seed

    def __getitem__(self, sample_id: int) -> tuple[int, torch.Tensor]:
        rng = random.Random(self.seed * 1_000_000_007 + sample_id)
        start = rng.randrange(self.vocab_size)
        stride = rng.randrange(1, 8)
        steps = torch.arange(self.seq_len + 1, dtype=torch.int64)
        return sample_id, (start + stride * steps) % self.vocab_size


def find_shards(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError("data.path", f"{directory} is not a directory")
    shards = sorted(p for p in directory.iterdir() if p.suffix in SHARD_SUFFIXES)
    if not shards:
        raise ConfigError("data.path", f"no .tokens, .npy or .bin token shards in {directory}")
    return shards


def _open_shard(path: Path, bin_dtype: str) -> np.ndarray[Any, Any]:
    try:
        return open_tokens(path, bin_dtype=bin_dtype)[0]
    except ShardError as exc:
        raise ConfigError("data.path", str(exc)) from None


def _job_tokenizer(cfg: DataConfig, directory: Path) -> tuple[str, str] | None:
    """(sha256, where it comes from) of the tokenizer the job's shards must have been made with:
    data.tokenizer, else the tokenizer.json prepare-data left in data.path, else None."""
    if cfg.tokenizer is not None:
        path = Path(cfg.tokenizer)
        if not path.is_file():
            raise ConfigError("data.tokenizer", f"{path} is not a file")
        return tokenizer_sha256(path), str(path)
    beside = directory / "tokenizer.json"
    if beside.is_file():
        return tokenizer_sha256(beside), str(beside)
    return None


def _check_task(cfg: DataConfig, path: Path, header: Any, task: str) -> None:
    """Pretraining shards for train.task=sft, or fine-tuning shards for pretraining: one line."""
    held = "pretrain" if header is None else header.task
    if task == "sft" and held != "sft":
        raise ConfigError(
            "train.task",
            f"{path} holds pretraining tokens (no loss mask); train.task=sft reads the shards "
            "of prepare-data --format chat (or prompt-completion)",
        )
    if task != "sft" and held == "sft":
        raise ConfigError(
            "train.task",
            f"{path} holds fine-tuning examples with a loss mask (prepare-data --format "
            f"chat); set train.task=sft to train on them",
        )
    if task == "sft" and header.seq_len != cfg.seq_len:
        raise ConfigError(
            "data.seq_len",
            f"{cfg.seq_len}, but {path} was packed for seq_len {header.seq_len}; set "
            f"data.seq_len={header.seq_len} or re-run prepare-data --seq-len {cfg.seq_len}",
        )


def check_shards(
    cfg: DataConfig, paths: list[Path], *, vocab_size: int, task: str = "pretrain"
) -> list[int]:
    """Open every shard once and refuse, naming the file, what this job cannot read right:
    another dtype or tokenizer than the job's, a vocabulary larger than the model's, a token id
    outside it, shards of the other task (checked here, at open, never mid-run). Returns each
    shard's token count."""
    assert cfg.path is not None
    expected = _job_tokenizer(cfg, Path(cfg.path))
    counts = []
    for path in paths:
        try:
            array, header = open_tokens(path, bin_dtype=cfg.token_dtype)
        except ShardError as exc:
            raise ConfigError("data.path", str(exc)) from None
        _check_task(cfg, path, header, task)
        if header is None:
            top = max_token_id(array)
        else:
            if header.dtype != cfg.token_dtype:
                raise ConfigError(
                    "data.token_dtype",
                    f"{path} holds {header.dtype} tokens, the job reads {cfg.token_dtype}; set "
                    f"data.token_dtype={header.dtype}",
                )
            if header.vocab_size > vocab_size:
                raise ConfigError(
                    "model.vocab_size",
                    f"{path} was made with a tokenizer of {header.vocab_size} tokens, more than "
                    f"the model's vocab_size {vocab_size}",
                )
            if expected is None:  # no tokenizer named: the first headered shard sets it
                expected = (header.tokenizer_sha256, str(path))
            elif header.tokenizer_sha256 != expected[0]:
                raise ConfigError(
                    "data.tokenizer",
                    f"{path} was made with another tokenizer (sha256 "
                    f"{header.tokenizer_sha256[:12]}) than {expected[1]} "
                    f"({expected[0][:12]}); re-run prepare-data with the job's tokenizer",
                )
            top = header.max_token_id
        if top >= vocab_size:
            raise ConfigError(
                "data.path", f"{path} holds token id {top}, >= the model's vocab_size {vocab_size}"
            )
        counts.append(len(array))
    return counts


class _Permuted:
    """Sample id `k` -> window ``perm_e[k mod N]`` of epoch ``e = k // N``, ``perm_e`` seeded by
    (seed, e) (or the identity without shuffle): shared by pretraining windows and SFT rows."""

    num_windows: int
    seed: int
    shuffle: bool
    _perm_epoch: int
    _perm: torch.Tensor
    _maps: dict[int, Any]

    def _window(self, sample_id: int) -> int:
        epoch, pos = divmod(sample_id, self.num_windows)
        if not self.shuffle:
            return pos
        if epoch != self._perm_epoch:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = torch.randperm(self.num_windows, generator=gen)
            self._perm_epoch = epoch
        return int(self._perm[pos])

    def __getstate__(self) -> dict[str, Any]:
        # Workers started with spawn get a pickled copy; they map the shards themselves.
        state = self.__dict__.copy()
        state["_maps"] = {}
        return state


class TokenShards(_Permuted, Dataset[tuple[int, torch.Tensor]]):
    """Non-overlapping windows of seq_len+1 tokens from memory-mapped shards (shards.py).

    Every shard is checked when the dataset opens (`check_shards`), so a bad one stops the job
    before step 1 with its name, never in the middle of a run when its sample comes up.

    Sample id `k` is window ``perm_e[k mod N]`` of epoch ``e = k // N`` where ``perm_e`` is a
    permutation seeded by (seed, e): ids never run out and every epoch sees every window once.
    """

    def __init__(self, cfg: DataConfig, *, vocab_size: int) -> None:
        assert cfg.path is not None
        self.seq_len = cfg.seq_len
        self.seed = cfg.seed
        self.shuffle = cfg.shuffle
        self.vocab_size = vocab_size
        self.bin_dtype = cfg.token_dtype
        self.paths = find_shards(Path(cfg.path))
        tokens = check_shards(cfg, self.paths, vocab_size=vocab_size)
        counts = [(n - 1) // self.seq_len for n in tokens]
        self.starts = [0]
        for count in counts:
            self.starts.append(self.starts[-1] + max(0, count))
        self.num_windows = self.starts[-1]
        if self.num_windows == 0:
            raise ConfigError("data.path", f"shards hold fewer than seq_len+1={self.seq_len + 1}")
        self._maps: dict[int, np.ndarray[Any, Any]] = {}
        self._perm_epoch = -1
        self._perm = torch.empty(0, dtype=torch.int64)

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, sample_id: int) -> tuple[int, torch.Tensor]:
        window = self._window(sample_id)
        index = bisect.bisect_right(self.starts, window) - 1
        if index not in self._maps:
            self._maps[index] = _open_shard(self.paths[index], self.bin_dtype)
        first = (window - self.starts[index]) * self.seq_len
        tokens = torch.from_numpy(
            self._maps[index][first : first + self.seq_len + 1].astype(np.int64)
        )
        return sample_id, tokens


class SFTRows(_Permuted, Dataset[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Fine-tuning rows (shards.py version 2): sample id -> (id, tokens, loss mask, document ids),
    each of seq_len+1 values. Rows are whole training sequences prepare-data packed; ids map to
    rows exactly as TokenShards maps them to windows (a seeded permutation per epoch), so the
    data order is a function of the sample counter and a resume is exact.

    The mask marks targets: position t counts when mask[t+1] (the token predicted there) is 1.
    Document ids number the packed examples (and padding runs) of the shard.
    """

    def __init__(self, cfg: DataConfig, *, vocab_size: int) -> None:
        assert cfg.path is not None
        self.row = cfg.seq_len + 1
        self.seed = cfg.seed
        self.shuffle = cfg.shuffle
        self.paths = find_shards(Path(cfg.path))
        tokens = check_shards(cfg, self.paths, vocab_size=vocab_size, task="sft")
        self.starts = [0]
        for count in tokens:
            self.starts.append(self.starts[-1] + count // self.row)
        self.num_windows = self.starts[-1]
        if self.num_windows == 0:
            raise ConfigError("data.path", f"no rows of seq_len+1={self.row} tokens in the shards")
        self._maps: dict[int, tuple[Any, Any, Any]] = {}
        self._perm_epoch = -1
        self._perm = torch.empty(0, dtype=torch.int64)

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, sample_id: int) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
        window = self._window(sample_id)
        index = bisect.bisect_right(self.starts, window) - 1
        if index not in self._maps:
            tokens, mask, starts, _ = open_sft(self.paths[index])
            self._maps[index] = (tokens, mask, np.asarray(starts, dtype=np.int64))
        tokens, mask, starts = self._maps[index]
        first = (window - self.starts[index]) * self.row
        span = slice(first, first + self.row)
        docs = np.searchsorted(starts, np.arange(first, first + self.row), side="right")
        return (
            sample_id,
            torch.from_numpy(tokens[span].astype(np.int64)),
            torch.from_numpy(mask[span].astype(np.bool_)),
            torch.from_numpy(docs.astype(np.int64)),
        )


def build_dataset(cfg: DataConfig, *, vocab_size: int, task: str = "pretrain") -> Dataset[Any]:
    if cfg.source == "synthetic":
        return SyntheticTokens(vocab_size=vocab_size, seq_len=cfg.seq_len, seed=cfg.seed)
    if task == "sft":
        return SFTRows(cfg, vocab_size=vocab_size)
    return TokenShards(cfg, vocab_size=vocab_size)


def build_loader(
    dataset: Dataset[Any],
    plan: BatchPlan,
    *,
    start_samples: int,
    num_workers: int,
    pin_memory: bool,
    prefetch_factor: int = 2,
) -> DataLoader[Any]:
    """Loader over this rank's micro-batches; rebuilt on every launch from the counter alone."""
    return DataLoader(
        dataset,
        batch_sampler=RankBatchSampler(plan, start_samples),
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor if num_workers else None,
        worker_init_fn=ignore_stop_signals if num_workers else None,
    )
