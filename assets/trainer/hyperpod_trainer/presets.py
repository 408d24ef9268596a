"""Model shapes by name.

Kept free of torch so that config validation (and `--check`) can name a bad preset or an
inconsistent override without paying for the torch import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """Everything that decides parameter shapes; two runs can share a checkpoint only if equal."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    # RoPE frequency scaling: "default" (none) or "llama3" (Llama 3.1/3.2), whose four
    # parameters are Hugging Face's rope_scaling fields of the same names; None unless llama3.
    rope_type: str = "default"
    rope_factor: float | None = None
    rope_low_freq_factor: float | None = None
    rope_high_freq_factor: float | None = None
    rope_original_max_position: int | None = None
    # Biases on the query, key and value projections (Qwen2's attention; never on the output
    # projection).
    qkv_bias: bool = False
    # The source model's sliding attention window (Mistral's `sliding_window`). The trainer's
    # attention is full causal, which equals the window's only while a sequence fits in it:
    # config validation refuses a data.seq_len above it. Kept so that export-hf writes it back.
    sliding_window: int | None = None
    # The Hugging Face architecture export-hf writes (import-hf records the one it read):
    # one of ARCHITECTURES.
    architecture: str = "llama"

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self) -> int:
        """Exact parameter count, used for MFU (6·N·tokens) and for the logs."""
        kv = self.n_kv_heads * self.head_dim
        attn = self.dim * self.dim * 2 + self.dim * kv * 2  # wq, wo, wk, wv
        if self.qkv_bias:
            attn += self.dim + 2 * kv
        ffn = 3 * self.dim * self.ffn_dim
        norms = 2 * self.dim
        per_layer = attn + ffn + norms
        embed = self.vocab_size * self.dim
        output = 0 if self.tie_embeddings else self.vocab_size * self.dim
        return embed + self.n_layers * per_layer + self.dim + output

    def num_param_tensors(self) -> int:
        """Parameter tensors: the embedding, 9 per layer (wq wk wv wo, w1 w2 w3, two norms) and 3
        more with q/k/v biases, the final norm, and the output projection unless it is tied to
        the embedding."""
        per_layer = 9 + (3 if self.qkv_bias else 0)
        return 1 + per_layer * self.n_layers + 1 + (0 if self.tie_embeddings else 1)

    def as_dict(self) -> dict[str, Any]:
        """The shape as a checkpoint records it (COMPLETE.json's `model_shape`). The RoPE scaling
        fields appear only when scaling is on, and qkv_bias, sliding_window and architecture only
        when not their defaults, so a checkpoint written before they existed still matches the
        same model."""
        out = asdict(self)
        if self.rope_type == "default":
            for name in ROPE_SCALING_FIELDS:
                del out[name]
        for name, default in OPTIONAL_DEFAULTS.items():
            if out[name] == default:
                del out[name]
        return out


# The ModelShape fields that only exist for rope_type llama3, in Hugging Face's order.
ROPE_SCALING_FIELDS = (
    "rope_type",
    "rope_factor",
    "rope_low_freq_factor",
    "rope_high_freq_factor",
    "rope_original_max_position",
)
ROPE_TYPES = ("default", "llama3")
# The Hugging Face model families import-hf reads and export-hf writes (hf.py).
ARCHITECTURES = ("llama", "qwen2", "mistral")
# ModelShape fields a checkpoint records only when they differ from these (as_dict).
OPTIONAL_DEFAULTS: dict[str, Any] = {
    "qkv_bias": False,
    "sliding_window": None,
    "architecture": "llama",
}

# Llama 3.1 and 3.2 ship their RoPE with this scaling (their config.json's rope_scaling); the
# 3.2 1B/3B models with factor 32, the 3.1 models with factor 8.
_LLAMA31_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "rope_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_position": 8192,
}
_LLAMA32_ROPE: dict[str, Any] = {**_LLAMA31_ROPE, "rope_factor": 32.0}

PRESETS: dict[str, ModelShape] = {
    # 119k parameters: fast enough for multi-process tests on two CPU cores.
    "tiny": ModelShape(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=160, vocab_size=256),
    # 5.0M parameters: large enough that checkpoint I/O is measurable in the CPU benchmark.
    "small": ModelShape(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=704, vocab_size=4096),
    # Llama 3.2 1B (tied embeddings, GQA 32/8, rope theta 500k, its RoPE scaling).
    "llama-1b": ModelShape(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim=8192,
        vocab_size=128256,
        rope_theta=500000.0,
        tie_embeddings=True,
        **_LLAMA32_ROPE,
    ),
    # Llama 3.1 8B (and its RoPE scaling).
    "llama-8b": ModelShape(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim=14336,
        vocab_size=128256,
        rope_theta=500000.0,
        **_LLAMA31_ROPE,
    ),
}

# Models to fine-tune (docs/trainer.md, "Presets"): each shape as the model's published
# config.json gives it (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# intermediate_size, vocab_size, rope_theta, rms_norm_eps, tie_word_embeddings, rope_scaling),
# and tests/unit/test_trainer_memory.py checks num_params() against the published sizes.
# - Qwen/Qwen2.5-7B(-Instruct), 7.62B: config.json as quoted in github.com/citsjtu2020/LLM-Prof
#   sglang/Model_Config.md (Qwen2ForCausalLM: attention q/k/v biases, untied, rope 1e6, eps 1e-6).
# - Qwen/Qwen2.5-14B(-Instruct) and deepseek-ai/DeepSeek-R1-Distill-Qwen-14B (the same
#   Qwen2 shape), 14.77B: the same file (eps 1e-5).
# - meta-llama/Llama-3.1-8B(-Instruct), 8.03B: the same file (llama3 rope_scaling factor 8).
# - mistralai/Mistral-7B-Instruct-v0.3, 7.25B: the v0.2 shape as params.json gives it
#   (github.com/edadaltocg/mistral-src-finetune finetune/config.py: dim 4096, 32 layers, hidden
#   14336, 32/8 heads, rope_theta 1e6, norm_eps 1e-5; v0.2 and later have no sliding window,
#   Azure/azureml-assets Mistral-7B-Instruct-v0-2/description.md) with v0.3's vocabulary of 32768
#   (the model card: "Extended vocabulary to 32768").
_QWEN25: dict[str, Any] = {
    "rope_theta": 1000000.0,
    "qkv_bias": True,
    "architecture": "qwen2",
    "vocab_size": 152064,
}
PRESETS.update(
    {
        "qwen2.5-7b": ModelShape(
            dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_dim=18944, norm_eps=1e-6, **_QWEN25
        ),
        "qwen2.5-14b": ModelShape(
            dim=5120, n_layers=48, n_heads=40, n_kv_heads=8, ffn_dim=13824, norm_eps=1e-5, **_QWEN25
        ),
        # The llama-8b shape under the model's name.
        "llama3.1-8b": PRESETS["llama-8b"],
        "mistral-7b": ModelShape(
            dim=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            ffn_dim=14336,
            vocab_size=32768,
            rope_theta=1000000.0,
            architecture="mistral",
        ),
    }
)


# What one checkpoint holds per parameter (checkpoint.py saves `get_state_dict(model, AdamW)`):
# the fp32 sharded parameter and AdamW's two fp32 moments, exp_avg and exp_avg_sq.
CHECKPOINT_BYTES_PER_PARAM = 4 + 4 + 4
# AdamW keeps one fp32 `step` tensor per parameter tensor; it is saved with the moments.
CHECKPOINT_BYTES_PER_TENSOR = 4


def checkpoint_bytes(shape: ModelShape) -> int:
    """Bytes of the tensors one checkpoint writes, summed over all ranks: 12 per parameter plus
    AdamW's step counters. The small state that rides along (step, data position, LR scheduler,
    every rank's RNG state: a few KB per rank, see state.py), DCP's `.metadata` and the
    serialisation of each tensor chunk are not counted: about 1% of the `small` preset's files,
    less for larger models (tests/integration/trainer/test_checkpoint_size.py). Torch-free, so
    `hyperpod-kit estimate` reads it without the trainer's runtime."""
    return (
        CHECKPOINT_BYTES_PER_PARAM * shape.num_params()
        + CHECKPOINT_BYTES_PER_TENSOR * shape.num_param_tensors()
    )


def resolve_shape(preset: str, overrides: dict[str, Any]) -> ModelShape:
    """The preset with any non-None override applied (caller has validated the preset name).

    `rope_type: default` turns a preset's scaling off: its parameters are then dropped."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    shape = replace(PRESETS[preset], **changes)
    if shape.rope_type == "default":
        unscaled: dict[str, Any] = dict.fromkeys(ROPE_SCALING_FIELDS[1:])
        shape = replace(shape, **unscaled)
    return shape
