"""Supervised fine-tuning (issue #29 item 2): chat rendering against transformers, loss masks
against prefix renders, packing without attention across examples, SFT under torchrun.

The chat templates are the published ones (tests/data/chat_templates/SOURCE.md); the tokenizer
is a byte-level BPE trained here, offline, with the special tokens the templates use, saved with
transformers' `save_pretrained` so that transformers and the trainer read the same folder.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.trainer.conftest import WORDS

pytest.importorskip("hyperpod_trainer")
np = pytest.importorskip("numpy")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
torch = pytest.importorskip("torch")

from hyperpod_trainer import chat  # noqa: E402
from hyperpod_trainer.shards import open_sft, read_header  # noqa: E402

pytestmark = pytest.mark.trainer


def _ds(name: str) -> str:
    """A DeepSeek special token: its bars are FULLWIDTH VERTICAL LINE (U+FF5C)."""
    return "<\uff5c" + name + "\uff5c>"


TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "chat_templates"
# template file -> (bos, eos, pad, the end-of-turn token an assistant turn ends with)
MODELS = {
    "qwen2.5-instruct": (None, "<|im_end|>", "<|endoftext|>", "<|im_end|>"),
    "deepseek-r1-distill-qwen": (
        _ds("begin▁of▁sentence"),
        _ds("end▁of▁sentence"),
        _ds("end▁of▁sentence"),
        _ds("end▁of▁sentence"),
    ),
    "llama-3.1-instruct": ("<|begin_of_text|>", "<|eot_id|>", None, "<|eot_id|>"),
}
SPECIALS = [
    "<unk>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    _ds("begin▁of▁sentence"),
    _ds("end▁of▁sentence"),
    _ds("User"),
    _ds("Assistant"),
]

SYSTEM = {"role": "system", "content": "You are a terse helper."}
CONVERSATIONS: dict[str, list[dict[str, str]]] = {
    "one-turn": [
        {"role": "user", "content": "the quick fox"},
        {"role": "assistant", "content": "jumps over a lazy dog"},
    ],
    "system": [
        SYSTEM,
        {"role": "user", "content": "seven wizards"},
        {"role": "assistant", "content": "quietly hex the dog"},
    ],
    "multi-turn": [
        SYSTEM,
        {"role": "user", "content": "the fox"},
        {"role": "assistant", "content": "a lazy dog"},
        {"role": "user", "content": "while seven wizards?"},
        {"role": "assistant", "content": "<think>hex it</think>quietly, over the fox"},
    ],
}


def _tokenizer_folder(folder: Path, name: str, *, where: str = "jinja") -> Path:
    """A tiny BPE with the templates' special tokens, saved by transformers with the named
    published chat template (in chat_template.jinja, or in tokenizer_config.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=260 + len(SPECIALS) + 60,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, size=12)) for _ in range(200)]
    tok.train_from_iterator([*corpus, "system user assistant think Cutting Knowledge"], trainer)
    bos, eos, pad, _ = MODELS[name]
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad, unk_token="<unk>"
    )
    fast.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    if where == "config":  # as older models carry it: a named list in tokenizer_config.json
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        (folder / "chat_template.jinja").unlink()
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] = [
            {"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
            {"name": "default", "template": template},
        ]
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _encoder(folder: Path) -> chat.ChatEncoder:
    from tokenizers import Tokenizer

    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    template, _ = chat.find_template(files)
    return chat.ChatEncoder(
        Tokenizer.from_file(str(folder / "tokenizer.json")), template, chat.special_tokens(files)
    )


def _oracle_mask(hf: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token positions of the assistant turns from transformers' own prefix renders: the tokens
    of messages[:i+1] past their common prefix with messages[:i] + generation prompt, trailing
    whitespace tokens dropped."""
    full = list(hf.apply_chat_template(messages, tokenize=True)["input_ids"])
    mask = [0] * len(full)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = list(
            hf.apply_chat_template(messages[:i], tokenize=True, add_generation_prompt=True)[
                "input_ids"
            ]
        )
        upto = list(hf.apply_chat_template(messages[: i + 1], tokenize=True)["input_ids"])
        assert full[: len(upto)] == upto
        start = next(
            (n for n, (a, b) in enumerate(zip(before, upto, strict=False)) if a != b),
            min(len(before), len(upto)),
        )
        end = len(upto)
        while end > start and not hf.decode(upto[end - 1 : end]).strip():
            end -= 1
        for n in range(start, end):
            mask[n] = 1
    return mask


@pytest.mark.parametrize("where", ["jinja", "config"])
@pytest.mark.parametrize("name", list(MODELS))
def test_chat_rendering_and_masks_match_transformers(tmp_path: Path, name: str, where: str) -> None:
    from transformers import AutoTokenizer

    folder = _tokenizer_folder(tmp_path / "tok", name, where=where)
    hf: Any = AutoTokenizer.from_pretrained(str(folder))
    encoder = _encoder(folder)
    eot = MODELS[name][3]
    for label, messages in CONVERSATIONS.items():
        example = encoder.encode(messages)
        expected = list(hf.apply_chat_template(messages, tokenize=True)["input_ids"])
        assert example.ids == expected, f"{name} {label}: token ids differ from transformers"
        assert example.mask == _oracle_mask(hf, messages), f"{name} {label}: mask"
        # Independently of any prefix render: the counted spans decode to exactly the assistant
        # contents (as the template shows them), each followed by its end-of-turn token.
        runs = [
            [t for t, _ in group]
            for key, group in itertools.groupby(
                zip(example.ids, example.mask, strict=True), lambda x: x[1]
            )
            if key
        ]
        strips_thinking = name.startswith("deepseek")  # its template drops "...</think>"
        shown = [
            (m["content"].split("</think>")[-1] if strips_thinking else m["content"]).strip()
            for m in messages
            if m["role"] == "assistant"
        ]
        assert [hf.decode(run) for run in runs] == [s + eot for s in shown], f"{name} {label}"


def test_a_template_list_without_default_and_no_template_are_refused(tmp_path: Path) -> None:
    files = {"tokenizer_config.json": json.dumps({"chat_template": [{"name": "x"}]}).encode()}
    with pytest.raises(chat.ChatError, match="none called 'default'"):
        chat.find_template(files)
    with pytest.raises(chat.ChatError, match="no chat template"):
        chat.find_template({"tokenizer_config.json": b"{}"})


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _conversations(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Learnable conversations: the assistant repeats the user's words in reverse."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = list(rng.choice(WORDS, size=int(rng.integers(2, 5))))
        messages = [
            {"role": "system", "content": "hex"},
            {"role": "user", "content": " ".join(words)},
            {"role": "assistant", "content": " ".join(reversed(words))},
        ]
        out.append({"messages": messages})
    return out


def _prepare(harness: Any, tok: Path, inputs: Path, out: Path, *extra: str) -> Any:
    return harness.direct(
        [
            "prepare-data",
            "--tokenizer",
            str(tok),
            "--input",
            str(inputs),
            "--output",
            str(out),
            "--format",
            "chat",
            "--workers",
            "1",
            *extra,
        ],
        timeout=120,
    )


def _rows(folder: Path) -> list[tuple[list[int], list[int], list[int]]]:
    """(tokens, mask, document id per token) of every row of every shard in `folder`."""
    out = []
    for path in sorted(folder.glob("*.tokens")):
        tokens, mask, starts, header = open_sft(path)
        assert header.seq_len is not None
        row = header.seq_len + 1
        doc = np.searchsorted(np.asarray(starts, dtype=np.int64), np.arange(len(tokens)), "right")
        for r in range(len(tokens) // row):
            s = slice(r * row, (r + 1) * row)
            out.append((tokens[s].tolist(), mask[s].tolist(), doc[s].tolist()))
    return out


@pytest.mark.parametrize("pad", [False, True], ids=["pack", "pad"])
def test_prepare_data_chat_writes_masked_packed_shards(
    harness: Any, tmp_path: Path, pad: bool
) -> None:
    tok = _tokenizer_folder(tmp_path / "tok", "qwen2.5-instruct")
    records = _conversations(40)
    no_assistant = {"messages": [{"role": "user", "content": "the fox"}]}
    inputs = _write_jsonl(tmp_path / "in" / "chat.jsonl", [*records, no_assistant])
    out = tmp_path / "out"
    extra = ["--seq-len", "64", "--eval-fraction", "0.2", "--seed", "3"]
    result = _prepare(harness, tok, inputs, out, *extra, *(["--pad"] if pad else []))
    assert result.returncode == 0, result.explain()
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["examples"] == 40 and summary["skipped_no_assistant"] == 1
    header = read_header(next(out.glob("train-*.tokens")))
    assert (header.task, header.seq_len, header.packing) == ("sft", 64, "pad" if pad else "pack")
    template = (tok / "chat_template.jinja").read_bytes()
    import hashlib

    assert header.chat_template_sha256 == hashlib.sha256(template).hexdigest()
    assert (out / "chat_template.jinja").read_bytes() == template
    encoder = _encoder(tok)
    wanted = sorted(json.dumps(encoder.encode(r["messages"]).ids) for r in records)
    found = []
    rows = _rows(out) + _rows(out / "eval")
    assert _rows(out / "eval"), "the held-out split is empty"
    for tokens, mask, doc in rows:
        assert len(tokens) == 65
        for _, group in itertools.groupby(range(65), doc.__getitem__):
            span = list(group)
            if any(mask[i] for i in span) or tokens[span[0]] != encoder.tokenizer.token_to_id(
                "<|endoftext|>"
            ):
                found.append(json.dumps([tokens[i] for i in span]))
                assert mask[span[0]] == 0  # never a target predicted across examples
        if pad:
            assert len({d for d, m in zip(doc, mask, strict=True) if m}) <= 1
    assert sorted(found) == wanted  # every example once, whole, in one row
    assert len(rows) < 40 or pad  # packing shares rows


def test_bad_chat_lines_are_one_line_each_and_nothing_is_written(
    harness: Any, tmp_path: Path
) -> None:
    tok = _tokenizer_folder(tmp_path / "tok", "qwen2.5-instruct")
    good = _conversations(3)
    path = tmp_path / "in" / "bad.jsonl"
    path.parent.mkdir()
    long_words = " ".join(["wizards"] * 200)
    lines = [
        json.dumps(good[0]),
        json.dumps({"messages": [{"content": "no role"}]}),
        json.dumps({"messages": []}),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": long_words},
                ]
            }
        ),
        '{"messages": [',
        json.dumps(good[1]),
    ]
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"messages": "\xff"}\n')
    out = tmp_path / "out"
    result = _prepare(harness, tok, path, out, "--seq-len", "64")
    assert result.returncode == 2, result.explain()
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert [e.split("error: ", 1)[1].split(": ", 1)[0] for e in errors] == [
        f"{path}:{n}" for n in (2, 3, 4, 5, 7)
    ], result.stderr
    assert 'message 1 has no "role"' in errors[0]
    assert "empty conversation" in errors[1]
    assert "longer than the context (--seq-len 64 + 1)" in errors[2]
    assert "not a JSON line" in errors[3]
    assert "not UTF-8" in errors[4]
    assert not out.exists()


# --- the trainer ------------------------------------------------------------------------------


def _tiny_model(vocab: int, seq_len: int) -> Any:
    from hyperpod_trainer.config import Config, ModelConfig
    from hyperpod_trainer.model import Transformer

    torch.manual_seed(0)
    shape = Config(model=ModelConfig(preset="tiny", vocab_size=vocab)).shape()
    model = Transformer(shape, seq_len, activation_checkpointing=False)
    model.init_weights()
    return model.eval()


def test_a_packed_example_computes_exactly_what_it_computes_alone() -> None:
    """No attention across packed examples, positions restarting at each: the logits and the
    loss of each example in a packed row equal those of the example run alone."""
    from hyperpod_trainer.loss import IGNORE, cross_entropy_sum

    model = _tiny_model(256, 32)
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (11,), generator=gen)
    b = torch.randint(0, 256, (8,), generator=gen)
    pad = torch.zeros(33 - 19, dtype=torch.int64)
    row = torch.cat([a, b, pad])[None]
    docs = torch.tensor([0] * 11 + [1] * 8 + [2] * 14)[None]
    mask = torch.zeros(33, dtype=torch.bool)
    mask[12:19] = True  # b's targets after its first token
    with torch.no_grad():
        packed = model(row[:, :-1], docs[:, :-1])
        alone_a = model(a[None, :-1])
        alone_b = model(b[None, :-1])
        leaky = model(row[:, :-1])  # plain causal over the whole row
        torch.testing.assert_close(packed[0, :10], alone_a[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(packed[0, 11:18], alone_b[0], rtol=0, atol=1e-5)
        assert not torch.allclose(leaky[0, 11:18], alone_b[0], atol=1e-3)  # the test can fail
        targets = row[:, 1:].masked_fill(~mask[None, 1:], IGNORE)
        packed_loss = cross_entropy_sum(packed, targets, 0) / mask.sum()
        alone_loss = torch.nn.functional.cross_entropy(alone_b[0], b[1:])
        torch.testing.assert_close(packed_loss, alone_loss, rtol=1e-6, atol=1e-6)
        # And the pretraining path is untouched: no document ids, plain is_causal attention.
        torch.testing.assert_close(model(row[:, :-1]), leaky, rtol=0, atol=0)


def _sft_data(harness: Any, tmp_path: Path) -> tuple[Path, int]:
    tok = _tokenizer_folder(tmp_path / "tok", "qwen2.5-instruct")
    inputs = _write_jsonl(tmp_path / "in" / "chat.jsonl", _conversations(160, seed=5))
    out = tmp_path / "data"
    made = _prepare(harness, tok, inputs, out, "--seq-len", "48", "--eval-fraction", "0.1")
    assert made.returncode == 0, made.explain()
    from tokenizers import Tokenizer

    return out, Tokenizer.from_file(str(tok / "tokenizer.json")).get_vocab_size()


def test_sft_under_torchrun_counts_only_assistant_tokens_and_resumes_exactly(
    harness: Any, tmp_path: Path
) -> None:
    from hyperpod_trainer.config import DataConfig
    from hyperpod_trainer.data import SFTRows

    data, vocab = _sft_data(harness, tmp_path)
    sets = [
        "model.preset=tiny",
        f"model.vocab_size={vocab}",
        "train.task=sft",
        "data.source=tokens",
        f"data.path={data}",
        f"data.eval_path={data / 'eval'}",
        "data.seq_len=48",
        "train.steps=10",
        "train.global_batch_size=8",
        "train.micro_batch_size=2",
        "train.seed=3",
        "optim.lr=1e-2",
        "optim.min_lr=1e-3",
        "optim.warmup_steps=2",
        "train.device=cpu",
    ]
    straight = harness.launch(2, [*sets, f"data.sample_log_dir={tmp_path / 'samples'}"])
    assert straight.returncode == 0, straight.explain()
    losses = straight.losses()
    assert sorted(losses) == list(range(1, 11))
    assert losses[10] < 0.7 * losses[1], losses
    # The counted tokens are exactly the masked-in targets of the step's rows.
    rows = SFTRows(DataConfig(source="tokens", path=str(data), seq_len=48), vocab_size=vocab)
    samples = harness.read_samples(tmp_path / "samples")
    for event in straight.of("step"):
        wanted = sum(int(rows[i][2][1:].sum()) for i in samples[event["step"]])
        assert event["loss_tokens"] == wanted
    evaluation = straight.of("eval")[-1]
    held = SFTRows(
        DataConfig(source="tokens", path=str(data / "eval"), seq_len=48, shuffle=False),
        vocab_size=vocab,
    )
    assert evaluation["tokens"] == sum(int(held[i][2][1:].sum()) for i in range(len(held)))
    # Stopped at step 4 and resumed: the same losses, bit for bit.
    ckpt = [f"checkpoint.dir={tmp_path / 'ckpt'}"]
    first = harness.launch(2, [*sets, *ckpt, "train.stop_at_step=4"])
    assert first.returncode == 0, first.explain()
    second = harness.launch(2, [*sets, *ckpt])
    assert second.returncode == 0, second.explain()
    resumed = {**first.losses(), **second.losses()}
    assert resumed == losses


def test_task_and_shards_must_agree(harness: Any, tmp_path: Path) -> None:
    from hyperpod_trainer.config import ConfigError, DataConfig
    from hyperpod_trainer.data import build_dataset
    from hyperpod_trainer.shards import write_shard

    data, vocab = _sft_data(harness, tmp_path)
    pre = tmp_path / "pre"
    pre.mkdir()
    write_shard(
        pre / "a.tokens",
        np.arange(100),
        np.array([0]),
        dtype="uint16",
        vocab_size=vocab,
        tokenizer_sha="0" * 64,
    )
    with pytest.raises(ConfigError, match=r"^train\.task: .*a\.tokens holds pretraining tokens"):
        build_dataset(
            DataConfig(source="tokens", path=str(pre), seq_len=48), vocab_size=vocab, task="sft"
        )
    with pytest.raises(ConfigError, match=r"^train\.task: .*holds fine-tuning examples"):
        build_dataset(DataConfig(source="tokens", path=str(data), seq_len=48), vocab_size=vocab)
    with pytest.raises(ConfigError, match=r"^data\.seq_len: 32, but .* packed for seq_len 48"):
        build_dataset(
            DataConfig(source="tokens", path=str(data), seq_len=32), vocab_size=vocab, task="sft"
        )
    rows: Any = build_dataset(
        DataConfig(source="tokens", path=str(data), seq_len=48), vocab_size=vocab, task="sft"
    )
    assert len(rows) > 0
    refused = harness.direct(["--set", "train.task=sft", "--check"])
    assert refused.returncode == 2 and "train.task: sft needs data.source=tokens" in refused.stderr


def test_prompt_completion_pairs_count_the_completion_and_eos(harness: Any, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = _tokenizer_folder(tmp_path / "tok", "qwen2.5-instruct")
    tokenizer = Tokenizer.from_file(str(tok / "tokenizer.json"))
    pairs = [
        {"prompt": "the quick fox", "completion": " jumps over"},
        {"prompt": "a", "completion": " dog"},
    ]
    inputs = _write_jsonl(tmp_path / "in" / "pc.jsonl", pairs)
    args = [
        "prepare-data",
        "--tokenizer",
        str(tok / "tokenizer.json"),
        "--input",
        str(inputs),
        "--format",
        "prompt-completion",
        "--seq-len",
        "16",
        "--eos",
        "<|endoftext|>",
        "--pad",
        "--workers",
        "1",
    ]
    made = harness.direct([*args, "--output", str(tmp_path / "out")])
    assert made.returncode == 0, made.explain()
    header = read_header(tmp_path / "out" / "train-00000.tokens")
    assert header.chat_template_sha256 is None and header.packing == "pad"
    eos = tokenizer.token_to_id("<|endoftext|>")
    rows = _rows(tmp_path / "out")
    for (tokens, mask, _), pair in zip(rows, pairs, strict=True):
        prompt = tokenizer.encode(pair["prompt"], add_special_tokens=False).ids
        completion = [*tokenizer.encode(pair["completion"], add_special_tokens=False).ids, eos]
        n = len(prompt) + len(completion)
        assert tokens[:n] == prompt + completion
        assert mask == [0] * len(prompt) + [1] * len(completion) + [0] * (17 - n)
    bad = _write_jsonl(tmp_path / "bad" / "pc.jsonl", [pairs[0], {"prompt": "a"}])
    refused = harness.direct([*args[:4], str(bad), *args[5:], "--output", str(tmp_path / "out2")])
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(f'{bad}:2: no string "completion"'), refused.stderr


def test_a_hugging_face_qwen2_fine_tunes_on_conversations_and_comes_back(
    harness: Any, tmp_path: Path
) -> None:
    """Issue #29's "done when", end to end: a Hugging Face Qwen2 folder (model and tokenizer with
    Qwen2.5's published chat template) is imported, its conversations prepared with its own
    template, fine-tuned on two ranks from the imported weights, exported, and loaded back by
    transformers with the trainer's own logits and the chat template."""
    import yaml
    from torch.distributed.checkpoint import state_dict_loader
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from hyperpod_trainer.model import Transformer
    from hyperpod_trainer.presets import ModelShape

    source = _tokenizer_folder(tmp_path / "hf", "qwen2.5-instruct")
    vocab = len(AutoTokenizer.from_pretrained(source))
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(source, safe_serialization=True)
    ckpt, data = tmp_path / "ckpt", tmp_path / "data"
    imported = harness.direct(["import-hf", str(source), str(ckpt)])
    assert imported.returncode == 0, imported.explain()
    model = yaml.safe_load(imported.stdout)["model"]
    inputs = _write_jsonl(tmp_path / "chat.jsonl", _conversations(60))
    prepared = _prepare(harness, source, inputs, data, "--seq-len", "48", "--eval-fraction", "0.2")
    assert prepared.returncode == 0, prepared.explain()
    sets = [f"model.{k}={v}" for k, v in model.items()] + [
        f"checkpoint.dir={ckpt}", "train.task=sft", "data.source=tokens", f"data.path={data}",
        f"data.eval_path={data / 'eval'}", "data.seq_len=48", "train.steps=3",
        "train.global_batch_size=4", "train.micro_batch_size=2", "optim.warmup_steps=1",
        "train.device=cpu",
    ]  # fmt: skip
    trained = harness.launch(2, sets)
    assert trained.returncode == 0, trained.explain()
    assert trained.of("resume")[0]["weights_only"] is True and sorted(trained.losses()) == [1, 2, 3]
    exported = harness.direct(["export-hf", str(ckpt), str(tmp_path / "out")])
    assert exported.returncode == 0, exported.explain()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    conversation = _conversations(1, seed=9)[0]["messages"]
    ids = torch.tensor([tokenizer.apply_chat_template(conversation, tokenize=True)["input_ids"]])
    assert ids.tolist()[0] == _encoder(source).encode(conversation).ids  # the template came back
    step = ckpt / "step_000003"
    shape = ModelShape(**json.loads((step / "COMPLETE.json").read_text())["model_shape"])
    ours = Transformer(shape, 128, False).eval()
    state = {"model": ours.state_dict()}
    state_dict_loader.load(state, checkpoint_id=str(step), no_dist=True)
    ours.load_state_dict(state["model"])
    before = AutoModelForCausalLM.from_pretrained(source).eval()
    with torch.no_grad():
        theirs = loaded(ids).logits.float()
        assert (ours(ids) - theirs).abs().max().item() < 1e-4
        assert (before(ids).logits.float() - theirs).abs().max().item() > 1e-3  # it trained
