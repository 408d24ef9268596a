"""The non-tensor part of a checkpoint: step, data position, LR scheduler and RNG.

Model and optimizer tensors go through `get_state_dict`/`set_state_dict` (sharded DTensors that DCP
reshards on load); this object rides along in the same DCP save as a `Stateful`.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful
from torch.optim.lr_scheduler import LRScheduler


class Progress(Stateful):
    """Where the job is. `samples_consumed` is the whole data position (see data.py)."""

    def __init__(self, scheduler: LRScheduler) -> None:
        self.scheduler = scheduler
        self.step = 0
        self.samples_consumed = 0
        self.world_size = 0  # of the run that wrote the checkpoint
        self.rng_blob = b""

    def capture_rng(self, group: dist.ProcessGroup | None) -> None:
        """Gather every rank's RNG state (a collective: call on all ranks before saving)."""
        mine: dict[str, Any] = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            mine["cuda"] = torch.cuda.get_rng_state()
        states: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(states, mine, group=group)
        self.rng_blob = pickle.dumps(states)
        self.world_size = len(states)

    def restore_rng(self, rank: int, world_size: int, seed: int) -> bool:
        """Restore this rank's RNG; with a new world size, derive it from (seed, step, rank).

        The training step itself draws no random numbers (no dropout; data is addressed by id),
        so this only matters for extensions that do; it never changes the loss curve here.
        """
        states = pickle.loads(self.rng_blob) if self.rng_blob else []
        if len(states) == world_size:
            torch.set_rng_state(states[rank]["cpu"])
            if "cuda" in states[rank] and torch.cuda.is_available():
                torch.cuda.set_rng_state(states[rank]["cuda"])
            return True
        torch.manual_seed(seed + 1_000_003 * self.step + rank)
        return False

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "samples_consumed": self.samples_consumed,
            "world_size": self.world_size,
            "scheduler": pickle.dumps(self.scheduler.state_dict()),
            "rng": self.rng_blob,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])
        self.samples_consumed = int(state_dict["samples_consumed"])
        self.world_size = int(state_dict["world_size"])
        self.scheduler.load_state_dict(pickle.loads(state_dict["scheduler"]))
        self.rng_blob = bytes(state_dict["rng"])
