"""The training loop: resume, step, checkpoint, stop.

One global step = `grad_accum` micro-batches per rank, with grad_accum recomputed from the world
size so that the global batch (and therefore the loss curve and the data order) does not depend
on how many ranks run it.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the torch convention
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR

from .checkpoint import Checkpointer, CheckpointInfo, clean_incomplete, find_latest
from .config import Config, ConfigError, grad_accum_steps
from .data import BatchPlan, build_dataset, build_loader
from .distributed import DistContext, init_distributed, shutdown
from .faults import Faults
from .metrics import Metrics, SampleLog, info
from .model import build_model
from .schedule import lr_at
from .signals import StopRequest
from .state import Progress


def run(cfg: Config) -> int:
    """Entry point for one launch; returns the process exit code."""
    stop = StopRequest()
    stop.install()  # before the (slow) setup: a SIGTERM during start-up is honoured too
    if cfg.train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    ctx = init_distributed(cfg.train.device)
    try:
        return Trainer(cfg, ctx, stop).fit()
    finally:
        shutdown()


def _memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Trainer:
    def __init__(self, cfg: Config, ctx: DistContext, stop: StopRequest) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.stop = stop
        self.grad_accum = grad_accum_steps(cfg, ctx.world_size)
        self.shape = cfg.shape()
        # First, so that a wrong data.path fails before any model is built.
        self.dataset = build_dataset(cfg.data, vocab_size=self.shape.vocab_size)
        self.metrics = Metrics(cfg.metrics, rank=ctx.rank)
        self.faults = Faults(cfg.fault, ctx.rank)
        on_gpu = ctx.device.type == "cuda"
        bf16 = cfg.train.mixed_precision == "bf16" or (
            cfg.train.mixed_precision == "auto" and on_gpu
        )
        meta_init = cfg.model.init == "meta" or (cfg.model.init == "auto" and on_gpu)
        self.model = build_model(
            self.shape,
            seq_len=cfg.data.seq_len,
            activation_checkpointing=cfg.model.activation_checkpointing,
            mesh=ctx.mesh,
            device=ctx.device,
            bf16=bf16,
            meta_init=meta_init,
            seed=cfg.train.seed,
        )
        self.optimizer = self._build_optimizer()
        o = cfg.optim
        self.scheduler = LambdaLR(
            self.optimizer,
            lambda step: (
                lr_at(
                    step,
                    lr=o.lr,
                    min_lr=o.min_lr,
                    warmup_steps=o.warmup_steps,
                    total_steps=cfg.train.steps,
                )
                / o.lr
            ),
        )
        self.progress = Progress(self.scheduler)
        self.checkpointer: Checkpointer | None = None
        if cfg.checkpoint.dir:
            self.checkpointer = Checkpointer(
                Path(cfg.checkpoint.dir),
                keep_last=cfg.checkpoint.keep_last,
                async_save=cfg.checkpoint.async_save,
                group=ctx.ckpt_group,
                rank=ctx.rank,
                emit=self.metrics.event,
                before_marker=self.faults.before_marker,
            )
        self.samples = SampleLog(cfg.data.sample_log_dir, rank=ctx.rank, world_size=ctx.world_size)
        self.info(
            f"model {cfg.model.preset}: {self.shape.num_params():,} params; "
            f"world {ctx.world_size} on {ctx.device.type}, bf16={bf16}, "
            f"global batch {cfg.train.global_batch_size} = micro {cfg.train.micro_batch_size}"
            f" x world {ctx.world_size} x accum {self.grad_accum}"
        )

    def info(self, message: str) -> None:
        info(message, rank=self.ctx.rank)

    def _build_optimizer(self) -> torch.optim.AdamW:
        """AdamW; norms (1-D) are not decayed, matrices and embeddings are."""
        o = self.cfg.optim
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        return torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": o.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=o.lr,
            betas=(o.beta1, o.beta2),
            eps=o.eps,
        )

    # -- checkpoint state -----------------------------------------------------------------------

    def _state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "progress": self.progress}

    def _checkpoint_meta(self) -> dict[str, Any]:
        return {
            "samples_consumed": self.progress.samples_consumed,
            "world_size": self.ctx.world_size,
            "global_batch_size": self.cfg.train.global_batch_size,
            "model_shape": self.shape.as_dict(),
            "seq_len": self.cfg.data.seq_len,
            "torch": torch.__version__,
        }

    def save(self, *, blocking: bool) -> None:
        if self.checkpointer is None:
            return
        # Finish an in-flight async save first: its collectives run on ckpt_group from a
        # background thread, and capture_rng is a collective on the same group.
        self.checkpointer.wait()
        self.progress.capture_rng(self.ctx.ckpt_group)
        self.checkpointer.save(
            self.progress.step, self._state_dict(), self._checkpoint_meta(), blocking=blocking
        )

    def resume(self) -> None:
        """Load the newest complete checkpoint, if any; delete what crashes left behind."""
        if self.checkpointer is None or not self.cfg.checkpoint.resume:
            return
        root = self.checkpointer.root
        found: list[CheckpointInfo | None] = [None]
        if self.ctx.rank == 0:
            for path in clean_incomplete(root):
                self.info(f"removed incomplete checkpoint {path}")
            found[0] = find_latest(root)
        # One decision for all ranks, even if a shared file system is slow to show a rename.
        dist.broadcast_object_list(found, src=0, group=self.ctx.ckpt_group)
        ckpt = found[0]
        if ckpt is None:
            return
        if ckpt.meta.get("model_shape") != self.shape.as_dict():
            raise ConfigError(
                "model",
                f"{ckpt.path} holds a different model shape {ckpt.meta.get('model_shape')}; "
                "use the same model settings or a new checkpoint.dir",
            )
        started = time.monotonic()
        state = self._state_dict()
        self.checkpointer.load(ckpt, state)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        same_rng = self.progress.restore_rng(
            self.ctx.rank, self.ctx.world_size, self.cfg.train.seed
        )
        self.metrics.event(
            "resume",
            step=self.progress.step,
            samples_consumed=self.progress.samples_consumed,
            path=str(ckpt.path),
            bytes=int(ckpt.meta.get("bytes", 0)),
            seconds=round(time.monotonic() - started, 4),
            from_world_size=self.progress.world_size,
            world_size=self.ctx.world_size,
            grad_accum=self.grad_accum,
            rng_restored=same_rng,
        )

    # -- training -------------------------------------------------------------------------------

    def train_step(self, batches: Iterator[Any]) -> tuple[torch.Tensor, list[int], float, float]:
        """One optimizer step: (summed local micro-batch losses, sample ids, lr, grad norm)."""
        loss_sum = torch.zeros((), device=self.ctx.device)
        ids: list[int] = []
        for _ in range(self.grad_accum):
            sample_ids, tokens = next(batches)
            ids.extend(int(i) for i in sample_ids)
            tokens = tokens.to(self.ctx.device, non_blocking=True)
            logits = self.model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
            torch.autograd.backward(loss / self.grad_accum)
            loss_sum += loss.detach()
        grad_norm = float("nan")
        if self.cfg.train.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
            norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
            grad_norm = float(norm)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, ids, lr, grad_norm

    def fit(self) -> int:
        self.resume()
        cfg, ctx = self.cfg, self.ctx
        plan = BatchPlan(
            cfg.train.global_batch_size, cfg.train.micro_batch_size, ctx.world_size, ctx.rank
        )
        loader = build_loader(
            self.dataset,
            plan,
            start_samples=self.progress.samples_consumed,
            num_workers=cfg.data.num_workers,
            pin_memory=ctx.device.type == "cuda",
        )
        batches = iter(loader)
        last_step = cfg.train.stop_at_step or cfg.train.steps
        every = cfg.checkpoint.every_steps
        reason = "completed" if last_step == cfg.train.steps else "stop_at_step"
        tokens_per_step = cfg.train.global_batch_size * cfg.data.seq_len
        self.model.train()
        while self.progress.step < last_step:
            step = self.progress.step + 1
            self.faults.before_step(step)
            started = time.perf_counter()
            loss_sum, ids, lr, grad_norm = self.train_step(batches)
            self.progress.step = step
            self.progress.samples_consumed += cfg.train.global_batch_size
            # One collective for both: the global mean loss and "did any rank get a signal".
            votes = torch.stack(
                [loss_sum.float(), torch.tensor(float(self.stop.requested), device=ctx.device)]
            )
            dist.all_reduce(votes)
            loss = float(votes[0]) / (self.grad_accum * ctx.world_size)
            stop_now = float(votes[1]) > 0
            elapsed = time.perf_counter() - started
            self.samples.record(step, ids)
            self.metrics.step(
                step,
                {
                    "loss": loss,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "tokens_per_s": tokens_per_step / elapsed,
                    "step_time_s": elapsed,
                    "memory_mb": round(_memory_mb(ctx.device), 1),
                    "world_size": ctx.world_size,
                    "grad_accum": self.grad_accum,
                    "samples_consumed": self.progress.samples_consumed,
                },
            )
            if self.checkpointer is not None:
                self.checkpointer.poll()
            if stop_now:
                sig = self.stop.received
                reason = sig.name if sig is not None else "signal on another rank"
                break
            if every and step % every == 0 and step != last_step:
                self.save(blocking=False)
        if self.checkpointer is None and reason not in ("completed", "stop_at_step"):
            self.info(f"{reason}: no checkpoint.dir, stopping without a checkpoint")
        self.save(blocking=True)
        self.samples.close()
        self.metrics.event("exit", reason=reason, step=self.progress.step)
        self.metrics.close()
        return 0
