"""Hugging Face Llama, Qwen2 and Mistral in and out: `import-hf` and `export-hf` against
`transformers` itself.

A tiny random Llama is made locally (`LlamaConfig` + `save_pretrained`, offline), with and without
Llama 3.1's `llama3` RoPE scaling, imported, and its logits compared with transformers' on the
same tokens; exported back and loaded with `AutoModelForCausalLM.from_pretrained`; imported,
trained for a few steps by the real trainer (2 ranks under FSDP) and exported again. A tiny
Qwen2 (random q/k/v biases, GQA, tied embeddings) and a tiny Mistral (a sliding window exactly
the sequence length) go through the same import, compare and export.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("hyperpod_trainer")
torch = pytest.importorskip("torch")
# Offline, whatever the shell says: every model and tokenizer here is made by the test.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from torch.distributed.checkpoint import state_dict_loader  # noqa: E402

from hyperpod_trainer import fileio, hf  # noqa: E402
from hyperpod_trainer.config import ConfigError  # noqa: E402
from hyperpod_trainer.model import Transformer  # noqa: E402
from hyperpod_trainer.presets import ROPE_SCALING_FIELDS, ModelShape  # noqa: E402

pytestmark = pytest.mark.trainer

# fp32 on CPU, 2 layers, 40 positions, logits up to ~6: the two implementations differ only in
# the order of float operations (SDPA kernels, RoPE table precision), ~1e-5 measured.
LOGIT_TOLERANCE = 1e-4
SEQ = 40
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small, so that the scaled band covers this test's head dim and positions.
    "original_max_position_embeddings": 16,
}


def _save_llama(
    folder: Path, *, rope_scaling: dict[str, Any] | None, tie: bool = False, shards: bool = False
) -> Any:
    torch.manual_seed(0)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": 500000.0}
    if rope_scaling is not None:
        rope = {**rope_scaling, "rope_theta": 500000.0}
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_parameters=rope,
        tie_word_embeddings=tie,
        # Weights 10x Llama's init scale: logits of a few units, so that attention is peaked
        # and a wrong RoPE shows (unscaled vs llama3 differ by ~9 here, matching by ~1e-5).
        initializer_range=0.2,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so that a swapped norm would show
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    sharding = {"max_shard_size": "40KB"} if shards else {}
    model.save_pretrained(folder, safe_serialization=True, **sharding)
    return model


def _tokens() -> torch.Tensor:
    return torch.randint(0, 96, (2, SEQ), generator=torch.Generator().manual_seed(1))


def _hf_logits(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens).logits.float()


def _ours(checkpoint_root: Path) -> Transformer:
    step = checkpoint_root / "step_000000"
    marker = json.loads((step / "COMPLETE.json").read_text())
    shape = ModelShape(**marker["model_shape"])
    model = Transformer(shape, SEQ, activation_checkpointing=False).eval()
    state = {"model": model.state_dict()}
    state_dict_loader.load(state, checkpoint_id=str(step), no_dist=True)
    model.load_state_dict(state["model"])
    return model


@pytest.mark.parametrize("scaled", [False, True], ids=["rope-default", "rope-llama3"])
def test_import_forward_equals_transformers_and_export_loads_back(
    tmp_path: Path, scaled: bool
) -> None:
    hf_model = _save_llama(tmp_path / "hf", rope_scaling=LLAMA3_ROPE if scaled else None)
    shape = hf.import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert shape.rope_type == ("llama3" if scaled else "default")
    assert shape.norm_eps == 1e-6  # LlamaConfig's default, not the trainer's 1e-5
    tokens = _tokens()
    expected = _hf_logits(hf_model, tokens)
    with torch.no_grad():
        ours = _ours(tmp_path / "ckpt")(tokens)
    assert (ours - expected).abs().max().item() < LOGIT_TOLERANCE

    hf.export_hf(tmp_path / "ckpt", tmp_path / "back")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert loaded.dtype == torch.float32
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert (_hf_logits(loaded, tokens) - expected).abs().max().item() < LOGIT_TOLERANCE
    # A Llama's checkpoint records what it did before Qwen2 and Mistral existed, so checkpoints
    # written before still resume (train.py compares model_shape for equality) and export.
    marker = json.loads((tmp_path / "ckpt" / "step_000000" / "COMPLETE.json").read_text())
    assert not {"qkv_bias", "sliding_window", "architecture"} & set(marker["model_shape"])
    assert ModelShape(**marker["model_shape"]).as_dict() == marker["model_shape"]


def _save_family(folder: Path, family: str) -> Any:
    """A tiny random Qwen2 (q/k/v biases made non-zero, GQA, tied embeddings like Qwen2.5-0.5B)
    or Mistral (GQA, a sliding window exactly SEQ: no effect at SEQ tokens)."""
    torch.manual_seed(0)
    common: dict[str, Any] = {
        "vocab_size": 96,
        "hidden_size": 64,
        "intermediate_size": 112,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "initializer_range": 0.2,
    }
    if family == "qwen2":
        config = transformers.Qwen2Config(**common, tie_word_embeddings=True)
        model = transformers.Qwen2ForCausalLM(config).eval()
    else:
        config = transformers.MistralConfig(**common, sliding_window=SEQ)
        model = transformers.MistralForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):  # zero at init: make them matter
                param.uniform_(-1.0, 1.0)
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_qwen2_and_mistral_import_equal_transformers_and_export_as_themselves(
    tmp_path: Path, family: str
) -> None:
    hf_model = _save_family(tmp_path / "hf", family)
    shape = hf.import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert shape.architecture == family
    assert shape.qkv_bias is (family == "qwen2")
    assert shape.sliding_window == (SEQ if family == "mistral" else None)
    assert shape.tie_embeddings is (family == "qwen2")
    tokens = _tokens()
    expected = _hf_logits(hf_model, tokens)
    ours_model = _ours(tmp_path / "ckpt")
    # The counts MFU, the logs and checkpoint estimates use include the biases.
    assert sum(p.numel() for p in ours_model.parameters()) == shape.num_params()
    assert len(list(ours_model.parameters())) == shape.num_param_tensors()
    with torch.no_grad():
        ours = ours_model(tokens)
    assert (ours - expected).abs().max().item() < LOGIT_TOLERANCE
    if family == "qwen2":  # the biases are loaded and used: without them the logits differ
        with torch.no_grad():
            for name, param in ours_model.named_parameters():
                if name.endswith(".bias"):
                    param.zero_()
            assert (ours_model(tokens) - expected).abs().max().item() > 0.1
    else:  # the window is SEQ exactly: one token shorter and transformers' attention changes
        hf_model.config.sliding_window = SEQ - 1
        narrower = _hf_logits(hf_model, tokens)
        assert (ours - narrower).abs().max().item() > 0.1

    hf.export_hf(tmp_path / "ckpt", tmp_path / "back")
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert written["model_type"] == family
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert type(loaded).__name__ == type(hf_model).__name__
    assert loaded.config.sliding_window == (SEQ if family == "mistral" else None)
    assert (_hf_logits(loaded, tokens) - expected).abs().max().item() < LOGIT_TOLERANCE


def test_scaling_matters_at_these_positions(tmp_path: Path) -> None:
    """The llama3 case above would pass vacuously if the scaling changed nothing here."""
    hf_model = _save_llama(tmp_path / "hf", rope_scaling=LLAMA3_ROPE)
    hf.import_hf(tmp_path / "hf", tmp_path / "ckpt")
    model = _ours(tmp_path / "ckpt")
    no_scaling = dict.fromkeys(ROPE_SCALING_FIELDS[1:])
    unscaled_shape = dataclasses.replace(model.shape, rope_type="default", **no_scaling)
    unscaled = Transformer(unscaled_shape, SEQ, activation_checkpointing=False).eval()
    unscaled.load_state_dict(model.state_dict())
    tokens = _tokens()
    with torch.no_grad():
        gap = (unscaled(tokens) - _hf_logits(hf_model, tokens)).abs().max().item()
    assert gap > 1.0


def test_sharded_tied_import_and_bf16_export(tmp_path: Path) -> None:
    hf_model = _save_llama(tmp_path / "hf", rope_scaling=None, tie=True, shards=True)
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    shape = hf.import_hf(tmp_path / "hf", tmp_path / "ckpt")
    assert shape.tie_embeddings
    tokens = _tokens()
    with torch.no_grad():
        ours = _ours(tmp_path / "ckpt")(tokens)
    assert (ours - _hf_logits(hf_model, tokens)).abs().max().item() < LOGIT_TOLERANCE
    hf.export_hf(tmp_path / "ckpt", tmp_path / "back", dtype="bf16", max_shard_bytes=40_000)
    assert (tmp_path / "back" / "model.safetensors.index.json").is_file()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back")
    assert loaded.dtype == torch.bfloat16
    # Each weight is the fp32 master weight rounded once to bf16.
    original = hf_model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, original[name].to(torch.bfloat16)), name


def test_import_train_export_load(tmp_path: Path, harness: Any) -> None:
    _save_llama(tmp_path / "hf", rope_scaling=LLAMA3_ROPE)
    result = harness.direct(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ckpt")])
    assert result.returncode == 0, result.explain()
    assert "model:" in result.stdout and "rope_type" in result.stdout
    printed = yaml.safe_load(result.stdout)
    assert printed["checkpoint"]["dir"] == str(tmp_path / "ckpt")
    sets = [f"model.{k}={v}" for k, v in printed["model"].items()]
    sets += [f"checkpoint.dir={tmp_path / 'ckpt'}", "data.seq_len=16", "train.steps=3"]
    sets += ["train.global_batch_size=4", "train.micro_batch_size=2", "optim.warmup_steps=1"]
    # Two ranks: the fp32 import is loaded into FSDP's sharded parameters, and the export
    # reads a checkpoint that FSDP wrote.
    trained = harness.launch(2, sets)
    assert trained.returncode == 0, trained.explain()
    assert trained.of("resume")[0]["weights_only"] is True
    assert trained.of("resume")[0]["step"] == 0
    assert sorted(trained.losses()) == [1, 2, 3]
    exported = harness.direct(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "out")])
    assert exported.returncode == 0, exported.explain()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    imported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokens = _tokens()
    # Trained: the weights moved, and the export still runs as a Llama.
    moved = (_hf_logits(loaded, tokens) - _hf_logits(imported, tokens)).abs().max().item()
    assert 0 < moved < 100
    step3 = _ours_at(tmp_path / "ckpt" / "step_000003")
    with torch.no_grad():
        ours = step3(tokens)
    assert (ours - _hf_logits(loaded, tokens)).abs().max().item() < LOGIT_TOLERANCE


def _ours_at(step: Path) -> Transformer:
    marker = json.loads((step / "COMPLETE.json").read_text())
    model = Transformer(ModelShape(**marker["model_shape"]), SEQ, False).eval()
    state = {"model": model.state_dict()}
    state_dict_loader.load(state, checkpoint_id=str(step), no_dist=True)
    model.load_state_dict(state["model"])
    return model


def _edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"architectures": ["PhiForCausalLM"], "model_type": "phi"}, "architectures"),
        ({"model_type": "qwen2"}, "model_type"),  # LlamaForCausalLM with another model_type
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "yarn"),
        ({"attention_bias": True}, "attention_bias"),
        ({"head_dim": 32}, "head_dim"),
    ],
)
def test_unrepresentable_models_are_refused_with_the_reason(
    tmp_path: Path, harness: Any, change: dict[str, Any], named: str
) -> None:
    _save_llama(tmp_path / "hf", rope_scaling=None)
    _edit_config(tmp_path / "hf", **change)
    result = harness.direct(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ckpt")])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.json" in lines[0] and named in lines[0], result.stderr
    assert not (tmp_path / "ckpt").exists()


_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
_MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}
_DIMS = {
    "hidden_size": 64,
    "intermediate_size": 112,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 96,
}


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"architectures": [], "model_type": "gemma2"}, "model_type"),
        ({"model_type": None}, "model_type"),
        (
            {"architectures": ["LlamaForCausalLM", "Qwen2ForCausalLM"], "model_type": "llama"},
            "model_type",
        ),
        # Layer 1 of 2 slides (Qwen2Config's rule), or config.json's own layer_types say so.
        ({**_QWEN2, "use_sliding_window": True, "max_window_layers": 1}, "use_sliding_window"),
        ({**_QWEN2, "layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
        ({**_MISTRAL, "sliding_window": 0}, "sliding_window"),
        ({**_MISTRAL, "sliding_window": "4k"}, "sliding_window"),
        ({**_MISTRAL, "sliding_window": 1}, "data.seq_len"),  # no job could train it
        ({**_QWEN2, "hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_family_configs_refused_naming_the_field(config: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        hf.shape_from_hf_config({**_DIMS, **config}, "m/config.json")
    assert err.value.path.startswith("m/config.json") and named in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("config", "window"),
    [
        # use_sliding_window without a layer at or above max_window_layers: nothing slides.
        ({**_QWEN2, "use_sliding_window": True, "max_window_layers": 2}, None),
        ({**_QWEN2, "use_sliding_window": False, "max_window_layers": 0}, None),
        ({**_QWEN2, "layer_types": ["full_attention", "full_attention"]}, None),
        ({**_MISTRAL}, hf.MISTRAL_DEFAULT_WINDOW),  # MistralConfig's default when absent
        ({**_MISTRAL, "sliding_window": None}, None),
        ({**_MISTRAL, "sliding_window": 2}, 2),
    ],
)
def test_family_configs_read(config: dict[str, Any], window: int | None) -> None:
    shape = hf.shape_from_hf_config({**_DIMS, **config}, "m/config.json")
    assert shape.architecture == config["model_type"]
    assert shape.qkv_bias is (config["model_type"] == "qwen2")
    assert shape.sliding_window == window


def test_missing_config_json_is_one_line(tmp_path: Path, harness: Any) -> None:
    (tmp_path / "hf").mkdir()
    result = harness.direct(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ckpt")])
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        f"hyperpod_trainer import-hf: error: {tmp_path / 'hf' / 'config.json'}: no such file."
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ckpt").exists()


def test_existing_output_is_not_replaced_without_force(tmp_path: Path) -> None:
    _save_llama(tmp_path / "hf", rope_scaling=None)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "mine.txt").write_text("keep")
    for force in (False, True):
        with pytest.raises(fileio.OutputError, match="hyperpod-trainer did not write"):
            hf.import_hf(tmp_path / "hf", tmp_path / "ckpt", force=force)
    assert (tmp_path / "ckpt" / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("preset", ["llama-1b", "llama-8b"])
def test_llama_presets_rope_frequencies_equal_transformers(preset: str) -> None:
    """The presets claim Llama 3.2 1B / 3.1 8B: their RoPE is the llama3-scaled one that
    transformers computes from those models' published rope_scaling."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from hyperpod_trainer.model import rope_frequencies
    from hyperpod_trainer.presets import PRESETS

    shape = PRESETS[preset]
    config = transformers.LlamaConfig(**{**hf.hf_config(shape, seq_len=2048, dtype=torch.float32)})
    expected, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert attention_factor == 1.0
    torch.testing.assert_close(rope_frequencies(shape).float(), expected.float())
    assert not torch.allclose(
        rope_frequencies(dataclasses.replace(shape, rope_type="default")).float(), expected.float()
    )


def test_unscaled_shapes_record_what_they_always_did() -> None:
    """Checkpoints written before RoPE scaling existed hold model_shape without rope_* scaling
    keys; an unscaled model still records exactly that, so they still resume."""
    from hyperpod_trainer.presets import PRESETS

    assert set(PRESETS["tiny"].as_dict()) == {
        "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "rope_theta",
        "norm_eps", "tie_embeddings",
    }  # fmt: skip
    assert PRESETS["llama-8b"].as_dict()["rope_factor"] == 8.0


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["model.rope_type=llama3"], "model.rope_factor"),
        (
            ["model.preset=llama-8b", "model.rope_high_freq_factor=0.5"],
            "model.rope_high_freq_factor",
        ),
        (["model.rope_type=yarn"], "model.rope_type"),
    ],
)
def test_bad_rope_scaling_is_one_line(harness: Any, sets: list[str], field: str) -> None:
    result = harness.direct([*(a for s in sets for a in ("--set", s)), "--check"])
    assert result.returncode == 2
    assert result.stderr.startswith(f"hyperpod_trainer: config error: {field}: ")
    assert len(result.stderr.strip().splitlines()) == 1


_WINDOW_16 = hf.model_sets(
    ModelShape(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=112, vocab_size=96,
        architecture="mistral", sliding_window=16,
    )
)  # fmt: skip


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        # The window is no wider than the job's sequences, or the job is refused.
        ([*_WINDOW_16, "data.seq_len=17"], "data.seq_len"),
        ([*_WINDOW_16, "data.seq_len=16"], None),
        (["model.architecture=qwen2"], "model.qkv_bias"),
        (["model.architecture=qwen2", "model.qkv_bias=true"], None),
        (["model.qkv_bias=true"], "model.qkv_bias"),  # a Llama's biases are not only q/k/v
        (["model.sliding_window=64"], "model.sliding_window"),  # only Mistral has one
        (["model.architecture=mistral", "model.sliding_window=0"], "model.sliding_window"),
        (["model.architecture=gpt2"], "model.architecture"),
    ],
)
def test_architecture_settings_checked_in_one_line(
    harness: Any, sets: list[str], field: str | None
) -> None:
    result = harness.direct([*(a for s in sets for a in ("--set", s)), "--check"])
    if field is None:
        assert result.returncode == 0, result.explain()
        return
    assert result.returncode == 2
    assert result.stderr.startswith(f"hyperpod_trainer: config error: {field}: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_rope_type_default_turns_a_presets_scaling_off() -> None:
    from hyperpod_trainer.config import load_config

    shape = load_config(None, ["model.preset=llama-8b", "model.rope_type=default"]).shape()
    assert shape.rope_type == "default" and shape.rope_factor is None
