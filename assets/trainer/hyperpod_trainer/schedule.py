"""Learning-rate schedule: linear warmup then cosine decay to `min_lr`.

A pure function of the step, so a resumed run (any world size) continues on the same curve.
"""

from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Learning rate for the optimizer step that follows `step` completed steps (0-based)."""
    if warmup_steps and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
