"""The resume fingerprint and the effective configuration (torch-free): each field that decides
the data order or the model shows up, by name, when it changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.config import load_config
from hyperpod_trainer.fingerprint import (
    SAMPLER_VERSION,
    config_hash,
    data_fingerprint,
    describe,
    differences,
    effective_config,
)


def _shards(directory: Path, sizes: list[int], seed: int = 0) -> None:
    directory.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, size in enumerate(sizes):
        np.save(directory / f"shard{i:02d}.npy", rng.integers(0, 256, size, dtype=np.uint16))


def _tokens_config(path: Path, *sets: str):  # type: ignore[no-untyped-def]
    return load_config(None, ["data.source=tokens", f"data.path={path}", *sets])


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [key for key, _, _ in differences(before, after)]


def test_synthetic_fingerprint_names_each_knob_of_the_data_order() -> None:
    base = data_fingerprint(load_config(None, []))
    assert base["data.sampler_version"] == str(SAMPLER_VERSION)
    cases = {
        "data.seq_len=64": ["data.seq_len"],
        "data.seed=9": ["data.seed"],
        "train.global_batch_size=16": ["train.global_batch_size"],
        "model.preset=small": ["model.preset", "data.vocab_size"],
    }
    for override, expected in cases.items():
        assert _changed(base, data_fingerprint(load_config(None, [override]))) == expected
    # Not part of the data order: the world size is elastic, micro-batching and LR are free.
    for free in ("train.micro_batch_size=4", "optim.lr=1e-3", "train.steps=500"):
        assert _changed(base, data_fingerprint(load_config(None, [free]))) == []


def test_token_fingerprint_sees_added_renamed_and_rewritten_shards(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _shards(data, [1000, 1500])
    base = data_fingerprint(_tokens_config(data))
    total = sum(p.stat().st_size for p in data.iterdir())
    assert base["data.shards"] == f"2 shards, {total} bytes"
    assert data_fingerprint(_tokens_config(data)) == base  # deterministic

    _shards(data, [1000, 1500, 800])  # a shard added
    added = _changed(base, data_fingerprint(_tokens_config(data)))
    assert added[0] == "data.shards"
    assert set(added) == {"data.shards", "data.shard_names", "data.index_sha256"}

    (data / "shard02.npy").unlink()
    (data / "shard01.npy").rename(data / "shard09.npy")  # same bytes, another position
    assert _changed(base, data_fingerprint(_tokens_config(data))) == [
        "data.shard_names",
        "data.index_sha256",
    ]
    (data / "shard09.npy").rename(data / "shard01.npy")

    _shards(data, [1000, 1500], seed=1)  # re-tokenised: same names and sizes, other tokens
    assert _changed(base, data_fingerprint(_tokens_config(data))) == ["data.index_sha256"]

    assert _changed(
        data_fingerprint(_tokens_config(data)),
        data_fingerprint(_tokens_config(data, "data.shuffle=false")),
    ) == ["data.shuffle"]


def test_differences_are_in_the_fingerprints_order_and_described() -> None:
    old = {"data.source": "tokens", "data.seq_len": "32", "data.shards": "2 shards, 10 bytes"}
    new = {"data.source": "tokens", "data.seq_len": "64", "data.shards": "3 shards, 15 bytes"}
    diffs = differences(old, new)
    assert [k for k, _, _ in diffs] == ["data.seq_len", "data.shards"]
    assert describe(diffs) == (
        "data.seq_len 32 -> 64, data.shards 2 shards, 10 bytes -> 3 shards, 15 bytes"
    )
    assert differences({"a": "1"}, {"b": "2"}) == [("b", "<absent>", "2"), ("a", "1", "<absent>")]
    stored = dict(sorted(old.items(), reverse=True))  # as read back from sorted JSON
    assert [k for k, _, _ in differences(stored, new)] == ["data.seq_len", "data.shards"]


def test_effective_config_covers_the_config_data_and_runtime() -> None:
    cfg = load_config(None, [])
    fp = data_fingerprint(cfg)
    mine = effective_config(cfg, fp, "2.13.0+cpu")
    assert mine["optim.lr"] == "0.0003"
    assert mine["fingerprint.data.seq_len"] == "32"
    assert mine["runtime.torch"] == "2.13.0+cpu"
    assert len(mine["runtime.trainer_source"]) == 16
    other = effective_config(load_config(None, ["optim.lr=1e-3"]), fp, "2.13.0+cpu")
    assert config_hash(other) != config_hash(mine)
    assert _changed(mine, other) == ["optim.lr"]
    image = effective_config(cfg, fp, "2.12.0+cu126")
    assert _changed(mine, image) == ["runtime.torch"]
