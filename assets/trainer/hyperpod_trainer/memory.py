"""Accelerator memory per GPU of a training job, estimated before it runs (torch-free).

`hyperpod-kit validate` compares it with the job's instance type's GPU memory (an error when
the part beside the activations exceeds it, a warning when the activations push it over) and
`hyperpod-kit estimate` prints it; docs/trainer.md ("Presets and memory per GPU") states the
formula and its sources. All figures in bytes. P = parameters, N = ranks (FSDP2 shards over all
of them), L = layers, d = dim, kv = n_kv_heads x head_dim, f = ffn_dim, V = vocab_size, T =
micro_batch_size x seq_len tokens per micro-batch.

1. Sharded training state, 16 P / N: what the trainer keeps per parameter (model.py, train.py):
   the fp32 sharded parameter (FSDP2 casts to bf16 only for compute: MixedPrecisionPolicy
   param_dtype), its fp32 sharded gradient (reduce_dtype fp32), and AdamW's two fp32 moments.
2. Unsharded working set: every FSDP2 unit is all-gathered in bf16 for its forward and backward.
   With `reshard_after_forward` (the trainer's choice when 6 P > a quarter of the GPU, see
   `keeps_unsharded`) that is the root unit (embedding, final norm and output projection: FSDP2
   keeps the root unsharded between forward and backward) and two blocks (the one computing and
   the one prefetched), each with 8 bytes per parameter: bf16 parameter, bf16 gradient, and the
   fp32 copy the reduce-scatter sends. Otherwise the whole model's 6 P (bf16 parameters and fp32
   gradients), the trainer's own figure.
3. Activations, counted as Korthikanti et al. 2022 count them (the tensors each operation saves
   for backward, in bytes per token and layer), for this trainer's block in eager mode, h =
   n_heads: each RMSNorm saves its fp32 input, the fp32 rsqrt, its bf16 normalised value and its
   bf16 output (8d + 4, twice); attention saves q, k, v, the output of
   scaled_dot_product_attention (also wo's input: a view) and the fp32 log-sum-exp per head
   (4d + 4kv + 4h; flash attention saves no seq x seq matrix); SwiGLU saves w1 x, w3 x, silu(w1 x)
   and their product (8f): 20d + 4kv + 8f + 4h + 8. Without activation checkpointing: L x T x
   that. With it (`model.activation_checkpointing`: torch.utils.checkpoint per block,
   non-reentrant): each block keeps only its bf16 input, 2d per token, and one block's
   activations exist again while it is recomputed: L x T x 2d + T x (20d + 4kv + 8f + 4h + 8).
   tests/unit/test_trainer_memory.py measures both on CPU with the trainer's own Block
   (saved_tensors_hooks): equal to the byte. torch.compile can save less; this is the eager count.
4. The output head: the token ids (8), the final norm (8d + 4), the bf16 logits the loss keeps
   (2V) and the targets (8) per token, measured the same way, plus the logits' bf16 gradient (2V)
   in backward, and one chunk of the chunked loss in fp32 with its gradient (loss.py: 8 bytes x
   chunk tokens x V): T x (8d + 4V + 20) + 8 x chunk x V.
5. A fixed allowance, ALLOWANCE_BYTES, for what no formula here counts: the CUDA context, NCCL's
   and cuBLAS's buffers and workspaces, and the caching allocator's fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from .presets import ModelShape

GIB = 2**30
# CUDA context, NCCL and cuBLAS buffers, allocator fragmentation: a stated allowance, not a count.
ALLOWANCE_BYTES = 3 * GIB
# loss.py's `_AUTO_CHUNK_ELEMENTS`: the chunked loss's auto chunk holds at most this many logits
# (tests/unit/test_trainer_memory.py checks the two agree).
AUTO_CHUNK_ELEMENTS = 2**27
# Bytes per parameter of the sharded training state: fp32 parameter, fp32 gradient, two fp32
# AdamW moments.
STATE_BYTES_PER_PARAM = 4 + 4 + 4 + 4
# Per parameter of an all-gathered unit: bf16 parameter, bf16 gradient, fp32 gradient to reduce.
UNSHARDED_BYTES_PER_PARAM = 2 + 2 + 4


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU by part; `total` is what the job needs on each GPU."""

    states: int
    unsharded: int
    activations: int
    head: int
    allowance: int

    @property
    def total(self) -> int:
        return self.states + self.unsharded + self.activations + self.head + self.allowance

    def parts(self) -> str:
        """ "states 30.5 + unsharded 3.1 + ... GiB" for a one-line message."""
        names = ("states", "unsharded", "activations", "head", "allowance")
        shown = " + ".join(f"{name} {getattr(self, name) / GIB:.1f}" for name in names)
        return f"{shown} GiB"


def root_params(shape: ModelShape) -> int:
    """Parameters of the root FSDP2 unit: the embedding, the final norm, the output projection."""
    output = 0 if shape.tie_embeddings else shape.vocab_size * shape.dim
    return shape.vocab_size * shape.dim + shape.dim + output


def block_params(shape: ModelShape) -> int:
    return (shape.num_params() - root_params(shape)) // shape.n_layers


def activation_bytes_per_token_layer(shape: ModelShape) -> int:
    """20d + 4kv + 8f + 4h + 8: what one block saves for backward per token (module docstring,
    3)."""
    kv = shape.n_kv_heads * shape.head_dim
    return 20 * shape.dim + 4 * kv + 8 * shape.ffn_dim + 4 * shape.n_heads + 8


def head_bytes_per_token(shape: ModelShape) -> int:
    """8d + 4V + 20: the output head's activations and the logits' gradient per token (module
    docstring, 4), without the loss chunk."""
    return 8 * shape.dim + 4 * shape.vocab_size + 20


def keeps_unsharded(shape: ModelShape, gpu_bytes: int) -> bool:
    """The trainer's auto choice (train.py `_unsharded_fits`): the unsharded bf16 parameters and
    fp32 gradients stay on every rank when they take at most a quarter of the GPU."""
    return shape.num_params() * (2 + 4) <= gpu_bytes // 4


def estimate_memory(
    shape: ModelShape,
    *,
    seq_len: int,
    micro_batch_size: int,
    world_size: int,
    activation_checkpointing: bool,
    gpu_bytes: int,
    loss_chunk_tokens: int | None = None,
) -> MemoryEstimate:
    """Bytes per GPU of one training step of `shape` over `world_size` ranks (module docstring).

    `gpu_bytes` is the GPU's memory: the trainer's auto resharding depends on it."""
    params = shape.num_params()
    states = -(-STATE_BYTES_PER_PARAM * params // world_size)
    if keeps_unsharded(shape, gpu_bytes):
        unsharded = params * (2 + 4)
    else:
        unsharded = UNSHARDED_BYTES_PER_PARAM * (root_params(shape) + 2 * block_params(shape))
    tokens = micro_batch_size * seq_len
    per_layer = tokens * activation_bytes_per_token_layer(shape)
    if activation_checkpointing:
        activations = shape.n_layers * tokens * 2 * shape.dim + per_layer
    else:
        activations = shape.n_layers * per_layer
    if loss_chunk_tokens is None:
        chunk = max(256, AUTO_CHUNK_ELEMENTS // shape.vocab_size)
    else:
        chunk = loss_chunk_tokens if loss_chunk_tokens > 0 else tokens
    head = tokens * head_bytes_per_token(shape) + 8 * min(chunk, tokens) * shape.vocab_size
    return MemoryEstimate(states, unsharded, activations, head, ALLOWANCE_BYTES)
