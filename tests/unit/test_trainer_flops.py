"""The benchmark's FLOPs per token against torchtitan's formula, computed both ways on every preset.

torchtitan 0.3.0 (`get_dense_model_nparams_and_flops` in torchtitan/models/utils.py, Llama 3):
6 x (all parameters of the module, minus those of its nn.Embedding children unless the
embedding is tied to the output projection) + 6 x layers x heads x (2 x head_dim) x seq_len, the
parameters counted on the real module (a shared weight once). Until 0.2.2 it subtracted the
embedding even when tied, dropping the output projection; 0.3.0 counts it. Ours (flops.py)
counts matmul weights from the shape. torchtitan's own function, on its own model, is checked
against ours by tests/integration/trainer/test_torchtitan_job.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("hyperpod_trainer")
torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from hyperpod_trainer.flops import (  # noqa: E402
    PEAK_BF16_TFLOPS,
    flops_per_token,
    matmul_params,
    mfu,
    peak_tflops,
)
from hyperpod_trainer.model import Transformer  # noqa: E402
from hyperpod_trainer.presets import PRESETS, ModelShape  # noqa: E402

SEQ_LENS = [128, 2048, 8192]


def _meta_model(shape: ModelShape) -> nn.Module:
    with torch.device("meta"):
        return Transformer(shape, seq_len=16, activation_checkpointing=False)


def torchtitan_flops_per_token(model: nn.Module, shape: ModelShape, seq_len: int) -> int:
    """torchtitan 0.3.0's count, on a module, as torchtitan computes it."""
    nparams = sum(p.numel() for p in model.parameters())
    nparams_embedding = sum(
        sum(p.numel() for p in m.parameters())
        for m in model.children()
        if isinstance(m, nn.Embedding)
    )
    head_dims = 2 * (shape.dim // shape.n_heads)  # qk + v head dims
    attention = 6 * shape.n_layers * shape.n_heads * head_dims * seq_len
    matmul = nparams if shape.tie_embeddings else nparams - nparams_embedding
    return 6 * matmul + attention


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_flops_match_torchtitan_tied_or_not(preset: str, tied: bool) -> None:
    shape = replace(PRESETS[preset], tie_embeddings=tied)
    model = _meta_model(shape)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    output = shape.vocab_size * shape.dim  # the logits matmul, on the embedding when tied
    assert matmul_params(shape) == linear + (output if tied else 0)
    norms = (2 * shape.n_layers + 1) * shape.dim  # elementwise weights torchtitan includes
    if shape.qkv_bias:  # and the q/k/v biases (Qwen2): added, not multiplied
        norms += shape.n_layers * (shape.dim + 2 * shape.n_kv_heads * shape.head_dim)
    for seq in SEQ_LENS:
        ours = flops_per_token(shape, seq)
        theirs = torchtitan_flops_per_token(model, shape, seq)
        assert ours.attention_flops == 12 * shape.n_layers * shape.n_heads * shape.head_dim * seq
        assert theirs - ours.per_token == 6 * norms
        if preset.startswith("llama"):
            assert abs(theirs - ours.per_token) / theirs < 1e-4  # 0.005 % for llama-1b


@pytest.mark.parametrize("preset", ["llama-1b"])
def test_a_tied_output_projection_is_counted(preset: str) -> None:
    """Tying saves parameters, not work: the logits matmul runs either way, and both counts
    (ours, and torchtitan's since 0.3.0) are the same for the tied and the untied model."""
    tied = PRESETS[preset]
    assert tied.tie_embeddings
    untied = replace(tied, tie_embeddings=False)
    assert flops_per_token(tied, 2048) == flops_per_token(untied, 2048)
    theirs_tied = torchtitan_flops_per_token(_meta_model(tied), tied, 2048)
    theirs_untied = torchtitan_flops_per_token(_meta_model(untied), untied, 2048)
    assert theirs_tied == theirs_untied
    # The benchmark compares with torchtitan on the preset as it is, tied here.


def test_llama_1b_at_2048_tokens() -> None:
    f = flops_per_token(PRESETS["llama-1b"], 2048)
    assert f.matmul_params == 16 * 60_817_408 + 262_668_288  # layers + output (V x d)
    assert f.per_token == 6 * f.matmul_params + 12 * 16 * 32 * 64 * 2048
    assert round(f.per_token / 1e9, 2) == 8.22


def test_peak_table_and_mfu() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989.0)
    assert peak_tflops("NVIDIA H100 PCIe") == ("H100 PCIe", 756.0)
    assert peak_tflops("NVIDIA H200") == ("H200", 989.0)
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == ("A100", 312.0)
    assert peak_tflops("NVIDIA L4") == ("L4", 121.0)
    assert peak_tflops("Tesla T4") is None
    assert set(PEAK_BF16_TFLOPS) >= {"H100 SXM", "H200", "A100"}
    shape = PRESETS["llama-1b"]
    per_token = flops_per_token(shape, 2048).per_token
    tokens_per_s = 0.45 * 989e12 * 8 / per_token  # what 45 % MFU on 8 H100s would be
    assert mfu(shape=shape, seq_len=2048, tokens_per_s=tokens_per_s, devices=8, peak=989.0) == (
        pytest.approx(0.45)
    )
