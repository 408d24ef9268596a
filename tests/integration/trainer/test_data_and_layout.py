"""In-process checks of the pieces the launches rely on: the batch split, token shards, the
checkpoint folder rules and the LR schedule; plus one real run on token shards."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")
np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from hyperpod_trainer import checkpoint as ck  # noqa: E402
from hyperpod_trainer.config import ConfigError, DataConfig  # noqa: E402
from hyperpod_trainer.data import BatchPlan, TokenShards  # noqa: E402
from hyperpod_trainer.schedule import lr_at  # noqa: E402

pytestmark = pytest.mark.trainer


@pytest.mark.parametrize(("world_size", "micro"), [(1, 2), (2, 2), (3, 2), (2, 3), (6, 1)])
def test_every_world_size_consumes_the_same_ids_per_step(world_size: int, micro: int) -> None:
    global_batch = 12
    for consumed in (0, 12, 120):
        taken = []
        for rank in range(world_size):
            plan = BatchPlan(global_batch, micro, world_size, rank)
            for m in range(plan.grad_accum):
                taken += plan.micro_batch_ids(consumed, m)
        assert sorted(taken) == list(range(consumed, consumed + global_batch))


def _write_npy(path: Path, tokens: np.ndarray) -> None:
    np.save(path, tokens)


def test_token_shards_cover_each_window_once_per_epoch(tmp_path: Path) -> None:
    seq = 8
    a = np.arange(0, 8 * 5 + 3, dtype=np.uint16)  # 5 windows of 9 tokens (8 + 1), 2 spare
    b = np.arange(1000, 1000 + 8 * 3 + 1, dtype=np.uint32)  # 3 windows
    _write_npy(tmp_path / "00.npy", a)
    (tmp_path / "01.bin").write_bytes(b.astype("<u2").tobytes())
    cfg = DataConfig(source="tokens", path=str(tmp_path), token_dtype="uint16", seq_len=seq)
    ds = TokenShards(cfg, vocab_size=4096)
    assert len(ds) == 8
    for epoch in range(2):
        firsts = []
        for sample_id in range(epoch * 8, epoch * 8 + 8):
            got_id, tokens = ds[sample_id]
            assert got_id == sample_id
            assert tokens.shape == (seq + 1,)
            assert (tokens[1:] - tokens[:-1] == 1).all()  # a contiguous window of one shard
            firsts.append(int(tokens[0]))
        assert sorted(firsts) == [0, 8, 16, 24, 32, 1000, 1008, 1016]
    # Epochs are shuffled differently but deterministically.
    again = TokenShards(cfg, vocab_size=4096)
    assert [int(again[i][1][0]) for i in range(16)] == [int(ds[i][1][0]) for i in range(16)]


def test_token_ids_beyond_the_vocab_are_refused_at_open(tmp_path: Path) -> None:
    """When the dataset opens, naming the file: not mid-run when that sample comes up."""
    _write_npy(tmp_path / "x.npy", np.full(20, 300, dtype=np.uint16))
    with pytest.raises(ConfigError, match=r"x\.npy holds token id 300, >= the model's vocab"):
        TokenShards(DataConfig(source="tokens", path=str(tmp_path), seq_len=4), vocab_size=256)


def _fake_checkpoint(
    root: Path, step: int, *, marker: bool = True, suffix: str = "", owner: bool = True
) -> Path:
    """A real (tiny) DCP checkpoint folder as the trainer lays it out."""
    import torch.distributed.checkpoint as dcp

    path = root / (f"step_{step:06d}" + suffix)
    path.mkdir(parents=True)
    if owner:
        (path / ck.OWNER).write_text(json.dumps({"writer": "hyperpod_trainer", "step": step}))
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"w": torch.full((64,), float(step))}, checkpoint_id=str(path), no_dist=True)
    if marker:
        meta = {"step": step, "files": ck.file_sizes(path)}
        (path / ck.MARKER).write_text(json.dumps(meta))
    return path


def test_resume_scan_keeps_what_it_did_not_write(tmp_path: Path) -> None:
    assert ck.prepare_resume(tmp_path).latest is None
    _fake_checkpoint(tmp_path, 3)
    _fake_checkpoint(tmp_path, 6)
    _fake_checkpoint(tmp_path, 9, suffix=".tmp", marker=False)  # crashed while saving
    _fake_checkpoint(tmp_path, 2, suffix=".old")  # crashed while pruning
    _fake_checkpoint(tmp_path, 12, marker=False)  # renamed, then lost its marker: damaged
    user = _fake_checkpoint(tmp_path, 10, marker=False, owner=False)  # someone else's
    legacy = _fake_checkpoint(tmp_path, 1, owner=False)  # before owner files: its marker
    ck.write_atomic(tmp_path / ck.LATEST, "step_000003\n")  # lagging pointer
    before = sorted(p.name for p in user.iterdir())
    scan = ck.prepare_resume(tmp_path)
    assert scan.latest is not None
    assert scan.latest.step == 6
    assert {p.name for p in scan.removed} == {"step_000009.tmp", "step_000002.old"}
    assert scan.foreign == [user]
    assert [(was.name, now.relative_to(tmp_path).as_posix()) for was, now, _ in scan.damaged] == [
        ("step_000012", "damaged/step_000012")
    ]
    assert sorted(p.name for p in user.iterdir()) == before
    assert ck.is_ours(legacy)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "damaged",
        "latest",
        "step_000001",
        "step_000003",
        "step_000006",
        "step_000010",
    ]
    assert (tmp_path / ck.LATEST).read_text() == "step_000006\n"


@pytest.mark.parametrize("damage", ["missing shard", "truncated shard", "missing metadata"])
def test_verify_names_what_is_damaged(tmp_path: Path, damage: str) -> None:
    path = _fake_checkpoint(tmp_path, 3)
    info = ck.CheckpointInfo(path, 3, json.loads((path / ck.MARKER).read_text()))
    assert ck.verify(info) is None
    (shard,) = path.glob("*.distcp")
    if damage == "missing shard":
        shard.unlink()
    elif damage == "truncated shard":
        shard.write_bytes(shard.read_bytes()[:-8])
    else:
        (path / ck.DCP_METADATA).unlink()
    problem = ck.verify(info)
    assert problem is not None
    assert (ck.DCP_METADATA if damage == "missing metadata" else shard.name) in problem
    # Without recorded sizes (a checkpoint of an older trainer) DCP's metadata still tells.
    legacy = ck.CheckpointInfo(path, 3, {"step": 3})
    assert ck.verify(legacy) is not None


def test_write_atomic_replaces_without_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "latest"
    ck.write_atomic(target, "a")
    ck.write_atomic(target, "b")
    assert target.read_text() == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_schedule_warms_up_then_decays_to_min_lr() -> None:
    kw = {"lr": 1.0, "min_lr": 0.1, "warmup_steps": 4, "total_steps": 20}
    assert [lr_at(s, **kw) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    decay = [lr_at(s, **kw) for s in range(4, 21)]
    assert decay == sorted(decay, reverse=True)
    assert decay[-1] == pytest.approx(0.1)


def test_trains_from_token_shards(harness, tmp_path: Path) -> None:
    """Also: TensorBoard/MLflow are optional; when missing, a warning and training goes on."""
    tracking = ["--set", f"metrics.tensorboard_dir={tmp_path / 'tb'}"]
    mlflow_missing = importlib.util.find_spec("mlflow") is None
    if mlflow_missing:  # never start a real MLflow run from a test
        tracking += ["--set", "metrics.mlflow=true"]
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        _write_npy(data / f"shard{i}.npy", rng.integers(0, 256, 2000, dtype=np.uint16))
    samples = tmp_path / "samples"
    result = harness.direct(
        [
            "--set", "data.source=tokens",
            "--set", f"data.path={data}",
            "--set", "data.seq_len=16",
            "--set", "train.steps=3",
            "--set", "train.global_batch_size=4",
            "--set", "optim.warmup_steps=1",
            "--set", f"data.sample_log_dir={samples}",
            *tracking,
        ],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.explain()
    losses = result.losses()
    assert sorted(losses) == [1, 2, 3]
    assert all(4.0 < loss < 7.0 for loss in losses.values())  # ~ln(256) for random tokens
    assert harness.read_samples(samples) == {1: [0, 1, 2, 3], 2: [4, 5, 6, 7], 3: [8, 9, 10, 11]}
    if mlflow_missing:
        assert "mlflow is not installed; metrics.mlflow ignored" in result.stderr
    if importlib.util.find_spec("tensorboard") is None:
        assert "tensorboard is not installed" in result.stderr
    else:
        assert list((tmp_path / "tb").iterdir())
