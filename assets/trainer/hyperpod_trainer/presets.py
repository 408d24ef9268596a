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

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self) -> int:
        """Exact parameter count, used for MFU (6·N·tokens) and for the logs."""
        kv = self.n_kv_heads * self.head_dim
        attn = self.dim * self.dim * 2 + self.dim * kv * 2  # wq, wo, wk, wv
        ffn = 3 * self.dim * self.ffn_dim
        norms = 2 * self.dim
        per_layer = attn + ffn + norms
        embed = self.vocab_size * self.dim
        output = 0 if self.tie_embeddings else self.vocab_size * self.dim
        return embed + self.n_layers * per_layer + self.dim + output

    def num_param_tensors(self) -> int:
        """Parameter tensors: the embedding, 9 per layer (wq wk wv wo, w1 w2 w3, two norms), the
        final norm, and the output projection unless it is tied to the embedding."""
        return 1 + 9 * self.n_layers + 1 + (0 if self.tie_embeddings else 1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, ModelShape] = {
    # 119k parameters: fast enough for multi-process tests on two CPU cores.
    "tiny": ModelShape(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=160, vocab_size=256),
    # 5.0M parameters: large enough that checkpoint I/O is measurable in the CPU benchmark.
    "small": ModelShape(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=704, vocab_size=4096),
    # Llama 3.2 1B shape (tied embeddings, GQA 32/8, rope theta 500k).
    "llama-1b": ModelShape(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim=8192,
        vocab_size=128256,
        rope_theta=500000.0,
        tie_embeddings=True,
    ),
    # Llama 3.1 8B shape.
    "llama-8b": ModelShape(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        ffn_dim=14336,
        vocab_size=128256,
        rope_theta=500000.0,
    ),
}


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
    """The preset with any non-None override applied (caller has validated the preset name)."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[preset], **changes)
