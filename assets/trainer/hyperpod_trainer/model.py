"""Decoder-only transformer (Llama style: RMSNorm, RoPE, SwiGLU, GQA; optional q/k/v biases for
Qwen2) and its FSDP2 wrapping."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812 - the torch convention
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from .presets import ModelShape

INIT_STD = 0.02


class RMSNorm(nn.Module):
    """Normalises in fp32 whatever the compute dtype, as Llama does, for bf16 stability."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def rope_frequencies(shape: ModelShape) -> torch.Tensor:
    """The fp64 inverse frequencies of RoPE, with Llama 3.1's `llama3` scaling if the shape has it.

    llama3 scaling leaves the high frequencies (wavelength under original/high_freq_factor)
    alone, divides the low ones (wavelength over original/low_freq_factor) by `factor`, and
    blends the band between them linearly in original/wavelength: the rule of Meta's reference
    code and Hugging Face's `rope_type: llama3`.
    """
    head_dim = shape.head_dim
    arange = torch.arange(0, head_dim, 2, dtype=torch.float64)
    inv_freq = 1.0 / (shape.rope_theta ** (arange / head_dim))
    if shape.rope_type == "default":
        return inv_freq
    factor = shape.rope_factor
    low, high = shape.rope_low_freq_factor, shape.rope_high_freq_factor
    original = shape.rope_original_max_position
    assert factor is not None and low is not None and high is not None and original is not None
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, blended, scaled)


def rope_tables(shape: ModelShape, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape (seq_len, head_dim) for the rotate-half formulation."""
    inv_freq = rope_frequencies(shape)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); the rotation is computed in fp32 and rounded once.

    cos/sin must arrive in fp32: rounded to bf16 they are off by up to 2^-9 at every position,
    and about a third of the rotated values of a bf16 q or k then differ from the correctly
    rounded result (measured on the presets' head dims and positions up to 8192).
    """
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos.float() + rotated * sin.float()).type_as(x)


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq) boolean attention mask of packed examples: position i attends to j
    when j <= i and both lie in the same document (fine-tuning rows; shared by the heads)."""
    seq = doc_ids.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=doc_ids.device).tril()
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return (same & causal).unsqueeze(1)


def document_positions(doc_ids: torch.Tensor) -> torch.Tensor:
    """RoPE positions that restart at 0 at each packed example (as Hugging Face's packing with
    position_ids does), so a packed example sees exactly the positions it would alone."""
    batch, seq = doc_ids.shape
    index = torch.arange(seq, device=doc_ids.device).expand(batch, seq)
    first = torch.ones_like(doc_ids, dtype=torch.bool)
    first[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    starts = torch.where(first, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - starts


class Attention(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.n_heads = shape.n_heads
        self.n_kv_heads = shape.n_kv_heads
        self.head_dim = shape.head_dim
        bias = shape.qkv_bias  # Qwen2: q/k/v biases, none on the output projection
        self.wq = nn.Linear(shape.dim, shape.n_heads * self.head_dim, bias=bias)
        self.wk = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=bias)
        self.wv = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=bias)
        self.wo = nn.Linear(shape.n_heads * self.head_dim, shape.dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`mask` None: plain causal attention (pretraining, the fast is_causal kernels); else
        the boolean document mask of packed fine-tuning rows (document_mask)."""
        bsz, seq, _ = x.shape
        q = self.wq(x).view(bsz, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        gqa = self.n_kv_heads != self.n_heads
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        merged: torch.Tensor = self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))
        return merged


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    """One transformer layer; the FSDP2 sharding unit, the activation-checkpoint unit and the
    `torch.compile` unit.

    Checkpointing and compilation happen inside `forward`, so FSDP2's hooks (registered on this
    module) stay outside the recomputed and the compiled region, the arrangement torchtitan uses
    (checkpoint, then compile, then `fully_shard` around both).
    """

    def __init__(self, shape: ModelShape, activation_checkpointing: bool) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention = Attention(shape)
        self.ffn_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.feed_forward = FeedForward(shape.dim, shape.ffn_dim)
        self.activation_checkpointing = activation_checkpointing
        self._body: Callable[..., torch.Tensor] = self._checkpointed

    def _forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        h: torch.Tensor = x + self.attention(self.attention_norm(x), cos, sin, mask)
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out

    def _checkpointed(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            out = checkpoint(self._forward, x, cos, sin, mask, use_reentrant=False)
            assert isinstance(out, torch.Tensor)
            return out
        return self._forward(x, cos, sin, mask)

    def compile_body(self) -> None:
        """Compile this block's computation (not its module hooks) with torch.compile."""
        self._body = torch.compile(self._checkpointed)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self._body(x, cos, sin, mask)


class Transformer(nn.Module):
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, shape: ModelShape, seq_len: int, activation_checkpointing: bool) -> None:
        super().__init__()
        self.shape = shape
        self.seq_len = seq_len
        self.tok_embeddings = nn.Embedding(shape.vocab_size, shape.dim)
        self.layers = nn.ModuleList(
            [Block(shape, activation_checkpointing) for _ in range(shape.n_layers)]
        )
        self.norm = RMSNorm(shape.dim, shape.norm_eps)
        self.output = (
            None if shape.tie_embeddings else nn.Linear(shape.dim, shape.vocab_size, bias=False)
        )
        # Derived from the shape, not trained: kept out of the checkpoint (persistent=False).
        cos, sin = rope_tables(shape, seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of (batch, seq) tokens. With `doc_ids` (packed fine-tuning rows) attention stays
        within each document and RoPE positions restart at each; without, plain causal."""
        seq = tokens.shape[1]
        mask = None
        if doc_ids is None:
            cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        else:
            positions = document_positions(doc_ids)
            cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
            mask = document_mask(doc_ids)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        h = self.norm(h)
        if self.output is None:
            return F.linear(h, self.tok_embeddings.weight)
        logits: torch.Tensor = self.output(h)
        return logits

    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re)initialise every parameter and buffer; also used after meta-device construction."""
        depth_std = INIT_STD / math.sqrt(2 * self.shape.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = depth_std if name.endswith(("wo", "w2")) else INIT_STD
                nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, RMSNorm):
                module.reset_parameters()
        cos, sin = rope_tables(self.shape, self.seq_len)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)


def build_model(
    shape: ModelShape,
    *,
    seq_len: int,
    activation_checkpointing: bool,
    mesh: DeviceMesh,
    device: torch.device,
    bf16: bool,
    meta_init: bool,
    seed: int,
    fsdp: bool = True,
    compile_blocks: bool = False,
    reshard_after_forward: bool = True,
) -> Transformer:
    """Construct, shard per block and at the root with FSDP2 (if `fsdp`), and initialise.

    With full init every rank builds the same full model from `seed` and `fully_shard` keeps its
    slice, so the initial weights do not depend on the world size. With meta init only shards are
    ever materialised (needed when the full model does not fit one host's memory); the initial
    weights then depend on the world size, which matters only for a fresh start.

    Without `fsdp` (a world of one: nothing to shard) the model stays a plain module and bf16 is
    the caller's autocast; its state dict has the same keys, so checkpoints move between both.
    """
    torch.manual_seed(seed)
    build_device = torch.device("meta") if meta_init else torch.device("cpu")
    with build_device:
        model = Transformer(shape, seq_len, activation_checkpointing)
    if not meta_init:
        model.init_weights()
        model.to(device)
    if compile_blocks:
        for layer in model.layers:
            assert isinstance(layer, Block)
            layer.compile_body()
    if not fsdp:
        if meta_init:
            model.to_empty(device=device)
            model.init_weights()
        return model
    # The blocks' forward inputs are the hidden state (already bf16: it comes out of the bf16
    # embedding) and the RoPE tables, which must stay fp32: no input casting for blocks.
    block_mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 else None,
        reduce_dtype=torch.float32 if bf16 else None,
        cast_forward_inputs=False,
    )
    root_mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 else None,
        reduce_dtype=torch.float32 if bf16 else None,
    )
    for layer in model.layers:
        fully_shard(
            layer, mesh=mesh, mp_policy=block_mp, reshard_after_forward=reshard_after_forward
        )
    fully_shard(model, mesh=mesh, mp_policy=root_mp, reshard_after_forward=reshard_after_forward)
    if meta_init:
        model.to_empty(device=device)
        # Each rank fills only its shards. On CUDA meshes DTensor's RNG tracker already gives
        # every shard its own stream; on CPU it does not, so seed per rank or all shards of a
        # matrix would be copies of each other (checked with torch 2.13 on gloo).
        torch.manual_seed(seed + 7919 * (mesh.get_local_rank() + 1))
        model.init_weights()
    return model
