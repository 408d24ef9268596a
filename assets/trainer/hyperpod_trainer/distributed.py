"""Process group, device and device mesh, the same way under torchrun or as a plain process.

Without torchrun's environment the trainer runs as a world of one (HashStore, no ports), which
keeps `python -m hyperpod_trainer` useful for smoke tests. On GPUs the default group carries both
NCCL (cuda tensors) and gloo (cpu tensors); checkpoints get their own gloo group because async
saves run DCP's collectives on a background thread, and the loop's per-step votes get a third
(gloo, on the host) so that they never wait for the GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .config import ConfigError


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh
    ckpt_group: dist.ProcessGroup  # DCP's collectives, also from async saves' background thread
    ctrl_group: dist.ProcessGroup  # the loop's host-side votes (stop, lease), never the device


def pick_device(preference: str) -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device", "cuda requested but no CUDA device is available")
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(preference: str) -> DistContext:
    device = pick_device(preference)
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend)
    else:
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(backend=backend, store=store, rank=0, world_size=1)
    world_size = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world_size,), mesh_dim_names=("dp",))
    ckpt_group = dist.new_group(backend="gloo")
    ctrl_group = dist.new_group(backend="gloo")
    assert ckpt_group is not None and ctrl_group is not None
    return DistContext(
        rank=dist.get_rank(),
        world_size=world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        device=device,
        mesh=mesh,
        ckpt_group=ckpt_group,
        ctrl_group=ctrl_group,
    )


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
