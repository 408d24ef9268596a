"""Token cross-entropy that never holds the fp32 logits of a whole micro-batch.

With bf16 compute the logits come out of the output projection in bf16; upcasting all of them at
once for a stable log-softmax costs 4 bytes x tokens x vocab (4.2 GB for 4 x 2048 tokens of a
128k vocabulary), plus the same again for the saved log-softmax. Here the tokens are split into
chunks; each chunk is upcast, reduced to its summed loss and freed, and recomputed in backward
(`torch.utils.checkpoint`), so at most one chunk's fp32 logits exist at any time. The result is
the mean over all tokens, as `F.cross_entropy` gives, up to summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the torch convention
from torch.utils.checkpoint import checkpoint

# Auto chunking: at most this many fp32 logits (512 MiB) per chunk.
_AUTO_CHUNK_ELEMENTS = 2**27
# The target that counts for nothing (F.cross_entropy's default ignore_index).
IGNORE = -100


def auto_chunk_tokens(vocab_size: int) -> int:
    return max(256, _AUTO_CHUNK_ELEMENTS // vocab_size)


def _summed(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), targets, reduction="sum")


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    """Mean cross-entropy of (batch, seq, vocab) logits against (batch, seq) targets, in fp32."""
    flat = logits.flatten(0, 1)
    count = flat.shape[0]
    if chunk_tokens <= 0 or count <= chunk_tokens:
        return F.cross_entropy(flat.float(), targets.flatten())
    return cross_entropy_sum(logits, targets, chunk_tokens) / count


def cross_entropy_sum(
    logits: torch.Tensor, targets: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """Summed fp32 cross-entropy, chunked as `cross_entropy`; targets IGNORE (-100) count for
    nothing (fine-tuning: the tokens outside the loss mask)."""
    flat = logits.flatten(0, 1)
    flat_targets = targets.flatten()
    count = flat.shape[0]
    if chunk_tokens <= 0 or count <= chunk_tokens:
        return _summed(flat, flat_targets)
    total = torch.zeros((), device=flat.device, dtype=torch.float32)
    # split (not slicing) so that backward concatenates the chunks' gradients once.
    for part, part_targets in zip(
        torch.split(flat, chunk_tokens), torch.split(flat_targets, chunk_tokens), strict=True
    ):
        piece = checkpoint(_summed, part, part_targets, use_reentrant=False)
        assert isinstance(piece, torch.Tensor)
        total = total + piece
    return total


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    """Sum of the fp32 per-token cross-entropies, added up in fp64 (for evaluation, no grad).

    Each token's loss is the same fp32 number whichever rank and batch computes it; summing in
    fp64 makes the total independent of how the tokens were split, to about 1e-16 relative.
    """
    flat = logits.flatten(0, 1)
    flat_targets = targets.flatten()
    piece = max(1, chunk_tokens if chunk_tokens > 0 else flat.shape[0])
    total = torch.zeros((), device=flat.device, dtype=torch.float64)
    for part, part_targets in zip(
        torch.split(flat, piece), torch.split(flat_targets, piece), strict=True
    ):
        losses = F.cross_entropy(part.float(), part_targets, reduction="none")
        total += losses.double().sum()
    return total
