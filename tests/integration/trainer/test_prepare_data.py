"""prepare-data and headered shards: text -> `.tokens` files that say what they hold, and a
trainer that refuses, when it opens them and naming the file, shards it would misread."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.trainer.conftest import WORDS

pytest.importorskip("hyperpod_trainer")
np = pytest.importorskip("numpy")
# Offline, whatever the shell says: every model and tokenizer here is made by the test.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("torch")

from hyperpod_trainer.config import ConfigError, DataConfig  # noqa: E402
from hyperpod_trainer.data import TokenShards  # noqa: E402
from hyperpod_trainer.shards import read_header, tokenizer_sha256, write_shard  # noqa: E402

pytestmark = pytest.mark.trainer


def _corpus(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(5, 40)))) for _ in range(n)]


def _train_tokenizer(path: Path, *, vocab: int = 120) -> Any:
    """A byte-level BPE trained here, offline, on the test corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<unk>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(300), trainer=trainer)
    tok.save(str(path))
    return tok


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    docs = _corpus(200)
    jsonl = tmp_path / "in" / "a.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    (tmp_path / "in" / "b.txt").write_text("a lazy dog\nover the fox\n")
    tokenizer = tmp_path / "tok" / "tokenizer.json"
    tokenizer.parent.mkdir()
    _train_tokenizer(tokenizer)
    return {"input": tmp_path / "in", "tokenizer": tokenizer, "jsonl": jsonl}


def _prepare(harness: Any, corpus: dict[str, Path], out: Path, *extra: str) -> Any:
    return harness.direct(
        [
            "prepare-data",
            "--tokenizer",
            str(corpus["tokenizer"]),
            "--input",
            str(corpus["input"]),
            "--output",
            str(out),
            "--eos",
            "<eos>",
            "--shard-tokens",
            "1500",
            *extra,
        ],
        timeout=120,
    )


def _documents(path: Path) -> list[list[int]]:
    header = read_header(path)
    raw = path.read_bytes()
    starts = np.frombuffer(
        raw, dtype="<u8", count=header.num_documents, offset=header.documents_offset
    )
    tokens = np.frombuffer(
        raw, dtype=header.dtype, count=header.num_tokens, offset=header.tokens_offset
    )
    bounds = [*starts.tolist(), header.num_tokens]
    return [tokens[a:b].tolist() for a, b in itertools.pairwise(bounds)]


def test_prepare_data_writes_headered_shards_and_a_held_out_split(
    harness: Any, corpus: dict[str, Path], tmp_path: Path
) -> None:
    result = _prepare(
        harness, corpus, tmp_path / "data", "--eval-fraction", "0.1", "--workers", "2"
    )
    assert result.returncode == 0, result.explain()
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["documents"] == 201 and summary["train_shards"] > 1
    assert "prepare-data: 201 documents" in result.stderr  # progress on stderr
    out = tmp_path / "data"
    tok = tokenizers.Tokenizer.from_file(str(corpus["tokenizer"]))
    eos = tok.token_to_id("<eos>")
    sha = tokenizer_sha256(corpus["tokenizer"])
    assert tokenizer_sha256(out / "tokenizer.json") == sha
    train = sorted(out.glob("train-*.tokens"))
    held = sorted((out / "eval").glob("eval-*.tokens"))
    assert train and held
    texts = {*(json.loads(line)["text"] for line in corpus["jsonl"].read_text().splitlines())}
    texts.add("a lazy dog\nover the fox\n")
    expected = {tuple([*tok.encode(t, add_special_tokens=False).ids, eos]) for t in texts}
    seen: list[tuple[int, ...]] = []
    for path in train + held:
        header = read_header(path)
        assert (header.dtype, header.vocab_size, header.tokenizer_sha256) == (
            "uint16",
            tok.get_vocab_size(with_added_tokens=True),
            sha,
        )
        docs = _documents(path)
        assert header.max_token_id == max(max(d) for d in docs)
        seen += [tuple(d) for d in docs]
    # Every document once, whole, in one of the two splits; about a tenth held out.
    assert len(seen) == 201 and set(seen) <= expected
    eval_docs = sum(read_header(p).num_documents for p in held)
    assert 5 <= eval_docs <= 40

    # The same bytes with one worker: the output does not depend on the parallelism.
    again = _prepare(harness, corpus, tmp_path / "one", "--eval-fraction", "0.1", "--workers", "1")
    assert again.returncode == 0, again.explain()
    for path in train + held:
        twin = tmp_path / "one" / path.relative_to(out)
        assert twin.read_bytes() == path.read_bytes()


def test_the_trainer_trains_on_prepared_shards_and_export_ships_the_tokenizer(
    harness: Any, corpus: dict[str, Path], tmp_path: Path
) -> None:
    assert _prepare(harness, corpus, tmp_path / "data", "--workers", "1").returncode == 0
    vocab = tokenizers.Tokenizer.from_file(str(corpus["tokenizer"])).get_vocab_size()
    run = harness.direct(
        [
            "--set",
            "data.source=tokens",
            "--set",
            f"data.path={tmp_path / 'data'}",
            "--set",
            "data.seq_len=16",
            "--set",
            f"model.vocab_size={vocab}",
            "--set",
            "train.steps=3",
            "--set",
            "train.global_batch_size=4",
            "--set",
            "optim.warmup_steps=1",
            "--set",
            "train.device=cpu",
            "--set",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
        ],
        timeout=240,
    )
    assert run.returncode == 0, run.explain()
    assert sorted(run.losses()) == [1, 2, 3]
    exported = harness.direct(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf")])
    assert exported.returncode == 0, exported.explain()
    shipped = tmp_path / "hf" / "tokenizer.json"
    assert shipped.read_bytes() == corpus["tokenizer"].read_bytes()
    transformers = pytest.importorskip("transformers")
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert loaded("the lazy fox")["input_ids"] == (
        tokenizers.Tokenizer.from_file(str(corpus["tokenizer"])).encode("the lazy fox").ids
    )


def test_bad_input_is_one_line_and_writes_nothing(
    harness: Any, corpus: dict[str, Path], tmp_path: Path
) -> None:
    """Also with worker processes: the error comes from the reader, which runs in the main
    process, and the workers are stopped (no hang, no traceback from a worker)."""
    with corpus["jsonl"].open("a") as f:
        f.write("{not json\n")
    result = _prepare(harness, corpus, tmp_path / "data", "--workers", "2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert (
        lines[-1] == f"hyperpod_trainer prepare-data: error: {corpus['jsonl']}:201: not a JSON line"
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()
    assert not list(tmp_path.glob(".data.*"))


def test_a_folder_prepare_data_did_not_write_is_never_replaced(
    harness: Any, corpus: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    result = _prepare(harness, corpus, tmp_path / "data", "--force")
    assert result.returncode == 2 and "hyperpod-trainer did not write" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "data" / "notes.txt").read_text() == "mine"


def test_prepare_data_help_needs_no_optional_reader() -> None:
    """--help answers without pyarrow or datasets (they are imported only for such inputs)."""
    import subprocess

    code = (
        "import sys\n"
        "for name in ('pyarrow', 'datasets'):\n"
        "    sys.modules[name] = None  # importing them now fails\n"
        "from hyperpod_trainer.cli import main\n"
        "sys.exit(main(['prepare-data', '--help']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--eval-fraction" in proc.stdout


# -- the trainer's checks at open ------------------------------------------------------------


def _shard(
    path: Path, ids: list[int], *, dtype: str = "uint16", vocab: int = 256, sha: str = "a" * 64
) -> None:
    write_shard(
        path, np.array(ids), np.array([0]), dtype=dtype, vocab_size=vocab, tokenizer_sha=sha
    )


def _open(folder: Path, **cfg: Any) -> TokenShards:
    data = DataConfig(source="tokens", path=str(folder), seq_len=4, **cfg)
    return TokenShards(data, vocab_size=256)


def test_headered_shards_are_read_with_their_own_layout(tmp_path: Path) -> None:
    _shard(tmp_path / "a.tokens", list(range(9)))
    ds = _open(tmp_path)
    assert len(ds) == 2
    assert sorted(ds[i][1].tolist()[0] for i in range(2)) == [0, 4]


@pytest.mark.parametrize(
    ("write", "field", "message"),
    [
        (
            lambda d: _shard(d / "w.tokens", list(range(9)), dtype="uint32"),
            "data.token_dtype",
            r"w\.tokens holds uint32 tokens, the job reads uint16; set data.token_dtype=uint32",
        ),
        (
            lambda d: _shard(d / "v.tokens", list(range(9)), vocab=300),
            "model.vocab_size",
            r"v\.tokens was made with a tokenizer of 300 tokens, more than the model's",
        ),
        (
            lambda d: (
                _shard(d / "a.tokens", list(range(9))),
                _shard(d / "b.tokens", [1] * 9, sha="b" * 64),
            ),
            "data.tokenizer",
            r"b\.tokens was made with another tokenizer \(sha256 bbbbbbbbbbbb\) than .*a\.tokens",
        ),
        (
            lambda d: _shard(d / "x.tokens", [1, 2, 300, 4, 5]),
            "data.path",
            r"x\.tokens holds token id 300, >= the model's vocab_size 256",
        ),
        (
            lambda d: (d / "e.bin").write_bytes(b""),
            "data.path",
            r"e\.bin: empty file \(0 bytes\): no tokens",
        ),
        (
            lambda d: (d / "o.bin").write_bytes(b"\x01\x00\x02"),
            "data.path",
            r"o\.bin: 3 bytes is not a whole number of uint16 tokens",
        ),
        (
            lambda d: (_shard(d / "t.tokens", list(range(9))), _truncate(d / "t.tokens")),
            "data.path",
            r"t\.tokens: \d+ bytes, the header describes \d+: truncated or damaged",
        ),
    ],
    ids=["dtype", "vocab", "tokenizer", "id-out-of-range", "empty", "odd-size", "truncated"],
)
def test_shards_the_job_would_misread_are_refused_at_open(
    tmp_path: Path, write: Any, field: str, message: str
) -> None:
    write(tmp_path)
    with pytest.raises(ConfigError, match=message) as caught:
        _open(tmp_path)
    assert caught.value.path == field


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-2])


def test_the_tokenizer_beside_the_data_or_named_by_the_job_decides(tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer.json"
    tok.write_text('{"model": "one"}')
    _shard(tmp_path / "a.tokens", list(range(9)), sha=tokenizer_sha256(tok))
    assert len(_open(tmp_path)) == 2
    other = tmp_path / "other" / "tokenizer.json"
    other.parent.mkdir()
    other.write_text('{"model": "two"}')
    with pytest.raises(ConfigError, match=r"a\.tokens was made with another tokenizer"):
        _open(tmp_path, tokenizer=str(other))
