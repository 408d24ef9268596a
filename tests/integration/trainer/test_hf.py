"""Hugging Face Llama in and out: `import-hf` and `export-hf` against `transformers` itself.

A tiny random Llama is made locally (`LlamaConfig` + `save_pretrained`, offline), with and without
Llama 3.1's `llama3` RoPE scaling, imported, and its logits compared with transformers' on the
same tokens; exported back and loaded with `AutoModelForCausalLM.from_pretrained`; imported,
trained for a few steps by the real trainer (2 ranks under FSDP) and exported again.
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
        ({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "architectures"),
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


def test_rope_type_default_turns_a_presets_scaling_off() -> None:
    from hyperpod_trainer.config import load_config

    shape = load_config(None, ["model.preset=llama-8b", "model.rope_type=default"]).shape()
    assert shape.rope_type == "default" and shape.rope_factor is None
