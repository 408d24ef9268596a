"""Training FLOPs per token and peak accelerator throughput, counted the way the field counts them.

Torch-free, so the benchmark, `--check` and the tests share one formula without importing torch.

FLOPs per token of one training step (forward + backward) =

    6 x (matmul parameters)  +  12 x layers x heads x head_dim x seq_len

- matmul parameters: every weight that multiplies activations: wq, wk, wv, wo, w1, w2, w3 of each
  layer and the output projection (V x d), counted even when it is tied to the embedding, because
  the logits matmul runs either way. The embedding lookup is not a matmul; norm weights are
  elementwise. 6 = 2 (multiply + add) x 3 (forward, and two matmuls in backward).
- attention: the QK^T and PV matmuls, 2 x 2 x seq x head_dim per head per token in forward, x3
  for backward; causal masking is not discounted and recomputation is not counted, the same
  convention as torchtitan (`get_dense_model_nparams_and_flops`) and PaLM's MFU.

torchtitan 0.3.0 (`get_dense_model_nparams_and_flops` in torchtitan/models/utils.py) counts
``6 x (all parameters - embedding parameters)`` for an untied model and ``6 x all parameters``
for a tied one (the shared weight once: the output projection, which it counts since 0.3.0).
Either way that includes the norm weights, 6 x (2L + 1) x d more than ours: 0.005 % for
llama-1b, 0.004 % for llama-8b (and with Qwen2's q/k/v biases, those too). Tied or not, the two
agree up to the norms and biases.
`tests/unit/test_trainer_flops.py` computes both; the benchmark's CPU test checks ours against
torchtitan's own function (tests/integration/trainer/test_torchtitan_job.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .presets import ModelShape

# Dense (no sparsity) BF16 tensor-core peaks per accelerator, from NVIDIA's datasheets (the
# datasheets print the "with sparsity" figure; these are half of it). Table dated 2026-11; add a
# row, with its source, before trusting MFU on another accelerator (or pass --peak-tflops).
PEAKS_AS_OF = "2026-11"
PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100 SXM": 989.0,  # "NVIDIA H100 80GB HBM3" (p5); H100 NVL is a two-GPU board
    "H100 PCIe": 756.0,
    "H200": 989.0,  # same GH100 compute as H100 SXM, more and faster memory (p5e / p5en)
    "A100": 312.0,  # SXM and PCIe alike (p4d / p4de)
    "L40S": 362.0,  # (g6e)
    "L4": 121.0,  # (g6)
}


def peak_tflops(device_name: str) -> tuple[str, float] | None:
    """(table key, dense BF16 TFLOP/s) for a `torch.cuda.get_device_name()` string, if known."""
    name = device_name.upper()
    if "H100" in name:
        key = "H100 PCIe" if "PCIE" in name else "H100 SXM"
    elif "H200" in name:
        key = "H200"
    elif "A100" in name:
        key = "A100"
    elif "L40S" in name:
        key = "L40S"
    elif name.endswith(" L4") or name == "L4":
        key = "L4"
    else:
        return None
    return key, PEAK_BF16_TFLOPS[key]


@dataclass(frozen=True)
class FlopsBreakdown:
    matmul_params: int
    dense_flops: int  # 6 x matmul_params
    attention_flops: int  # 12 x L x H x head_dim x seq_len
    per_token: int


def matmul_params(shape: ModelShape) -> int:
    """Weights that multiply activations, with the output projection counted even if tied."""
    q = shape.n_heads * shape.head_dim
    kv = shape.n_kv_heads * shape.head_dim
    attention = shape.dim * q + 2 * shape.dim * kv + q * shape.dim  # wq, wk, wv, wo
    ffn = 3 * shape.dim * shape.ffn_dim  # w1, w2, w3
    output = shape.vocab_size * shape.dim
    return shape.n_layers * (attention + ffn) + output


def flops_per_token(shape: ModelShape, seq_len: int) -> FlopsBreakdown:
    params = matmul_params(shape)
    attention = 12 * shape.n_layers * shape.n_heads * shape.head_dim * seq_len
    return FlopsBreakdown(params, 6 * params, attention, 6 * params + attention)


def mfu(
    *, shape: ModelShape, seq_len: int, tokens_per_s: float, devices: int, peak: float
) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak of all devices (peak in TFLOP/s)."""
    achieved = flops_per_token(shape, seq_len).per_token * tokens_per_s
    return achieved / (peak * 1e12 * devices)
