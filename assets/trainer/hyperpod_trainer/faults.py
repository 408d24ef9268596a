"""Test-only fault injection: die the way a node or a process really dies (SIGKILL).

SIGKILL rather than an exception: nothing in the process gets to clean up, which is exactly what
the crash-safety of checkpoints and auto-resume must survive. A NaN loss is injected the way a
divergence shows up: in the loss, on every rank. Off unless `fault.*` is set.
"""

from __future__ import annotations

import os
import signal
import sys

from .config import FaultConfig


class Faults:
    def __init__(self, cfg: FaultConfig, rank: int) -> None:
        self.cfg = cfg
        self.rank = rank

    def _die(self, why: str) -> None:
        print(f"hyperpod_trainer: fault injection: rank {self.rank} {why}", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def before_step(self, step: int) -> None:
        if self.cfg.kill_at_step == step and self.rank == self.cfg.kill_rank:
            self._die(f"SIGKILL at the start of step {step}")

    def nonfinite(self, step: int) -> bool:
        """Whether this step's loss is to be made NaN (on every rank, like a real divergence)."""
        first = self.cfg.nonfinite_at_step
        return first is not None and first <= step < first + self.cfg.nonfinite_steps

    def before_marker(self, step: int) -> None:
        """Called by rank 0 after every shard and DCP metadata are written, before the marker."""
        if self.cfg.crash_in_save_at_step == step:
            self._die(f"SIGKILL while saving step {step} (shards written, no marker)")
