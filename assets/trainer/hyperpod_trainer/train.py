"""The training loop: agree, lease, resume, step, checkpoint, stop.

One global step = `grad_accum` micro-batches per rank, with grad_accum recomputed from the world
size so that the global batch (and therefore the loss curve and the data order) does not depend
on how many ranks run it.

The loop does only training. Checkpoint finalisation and retention run in a thread of rank 0
(checkpoint.py), the lease is renewed by another (lease.py), signal handlers only set a flag
(signals.py). The host reads the loss back every `metrics.log_every` steps, not every step; the
per-step stop vote is a host-side gloo all-reduce that never waits for the GPU.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR

from .checkpoint import (
    DAMAGED,
    FAILED,
    OWNER,
    Checkpointer,
    CheckpointInfo,
    build_stager,
    final_failure,
    prepare_resume,
    record_final_failure,
)
from .config import Config, ConfigError, grad_accum_steps
from .data import BatchPlan, build_dataset, build_loader
from .distributed import DistContext, init_distributed, shutdown
from .evaluate import Evaluator, build_eval_dataset
from .faults import Faults
from .fingerprint import (
    config_hash,
    data_fingerprint,
    describe,
    differences,
    effective_config,
)
from .flops import flops_per_token, peak_tflops
from .lease import Lease, LeaseHeldError, job_identity
from .loss import IGNORE, auto_chunk_tokens, cross_entropy, cross_entropy_sum
from .metrics import Metrics, SampleLog, info
from .model import build_model
from .schedule import lr_at
from .signals import StopRequest
from .state import Progress

# Final exit codes: a relaunch would fail the same way, so no launcher should retry them.
EXIT_NONFINITE = 3  # too many non-finite steps in a row; the last good checkpoint is kept
EXIT_LEASE_LOST = 4  # another job took over the checkpoint folder; nothing more was written
EXIT_NO_INTACT_CHECKPOINT = 5  # every complete checkpoint failed verification (all kept aside)
FINAL_EXIT_CODES = (EXIT_NONFINITE, EXIT_LEASE_LOST, EXIT_NO_INTACT_CHECKPOINT)


class FinalExitError(Exception):
    """Stop this launch with a final exit code and one line on stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def run(cfg: Config) -> int:
    """Entry point for one launch; returns the process exit code."""
    stop = StopRequest()
    stop.install()  # before the (slow) setup: a SIGTERM during start-up is honoured too
    if cfg.train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    ctx = init_distributed(cfg.train.device)
    try:
        check_recorded_failure(cfg, ctx)  # before building anything: a final failure is final
        return Trainer(cfg, ctx, stop).fit()
    except FinalExitError as failure:
        # Every rank prints, as for a config error (cli.py): torchrun may stop the slower ones.
        print(f"hyperpod_trainer: final: {failure}", file=sys.stderr, flush=True)
        return failure.code
    finally:
        shutdown()


def check_recorded_failure(cfg: Config, ctx: DistContext) -> None:
    """Exit at once with the code a previous launch recorded as final in checkpoint.dir.

    Under torchrun (and so under Slurm's auto-resume and the HyperPod job's retries) the
    launcher reports its own exit code, not the rank's: the record is what stops the loop.
    """
    if not cfg.checkpoint.dir:
        return
    found: list[tuple[int, str] | None] = [None]
    if ctx.rank == 0:
        root = Path(cfg.checkpoint.dir)
        found[0] = final_failure(root, unreadable_code=EXIT_NO_INTACT_CHECKPOINT)
    dist.broadcast_object_list(found, src=0, group=ctx.ctrl_group)
    if found[0] is not None:
        code, reason = found[0]
        raise FinalExitError(
            code,
            f"exit {code} recorded in {Path(cfg.checkpoint.dir) / FAILED}: {reason}. Not "
            "retrying; fix the cause, then delete that file to start again",
        )


def _memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _ranks(ranks: list[int]) -> str:
    """[1, 2, 3, 5] -> 'ranks 1-3, 5'."""
    spans: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


class Trainer:
    def __init__(self, cfg: Config, ctx: DistContext, stop: StopRequest) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.stop = stop
        self.grad_accum = grad_accum_steps(cfg, ctx.world_size)
        self.shape = cfg.shape()
        # First, so that a wrong data.path fails before any model is built.
        self.sft = cfg.train.task == "sft"
        self.dataset = build_dataset(
            cfg.data, vocab_size=self.shape.vocab_size, task=cfg.train.task
        )
        held_out = build_eval_dataset(cfg)
        self.evaluator = (
            Evaluator(
                held_out,
                max_sequences=cfg.eval.max_sequences,
                micro_batch_size=cfg.train.micro_batch_size,
                world_size=ctx.world_size,
                rank=ctx.rank,
                device=ctx.device,
            )
            if held_out is not None
            else None
        )
        self.fingerprint = data_fingerprint(cfg)
        self.metrics = Metrics(cfg.metrics, rank=ctx.rank)
        self.faults = Faults(cfg.fault, ctx.rank)
        on_gpu = ctx.device.type == "cuda"
        self.on_gpu = on_gpu
        bf16 = cfg.train.mixed_precision == "bf16" or (
            cfg.train.mixed_precision == "auto" and on_gpu
        )
        meta_init = cfg.model.init == "meta" or (cfg.model.init == "auto" and on_gpu)
        # A world of one has nothing to shard: a plain module, bf16 through autocast.
        self.fsdp = ctx.world_size > 1 if cfg.train.fsdp is None else cfg.train.fsdp
        if not self.fsdp and ctx.world_size > 1:
            raise ConfigError(
                "train.fsdp",
                f"false needs a world of one; with {ctx.world_size} ranks nothing would "
                "synchronise their gradients",
            )
        self.autocast = bf16 and not self.fsdp
        compile_blocks = on_gpu if cfg.model.compile is None else cfg.model.compile
        t = cfg.train
        fits = self._unsharded_fits(bf16)
        reshard = not fits if t.reshard_after_forward is None else t.reshard_after_forward
        self.model = build_model(
            self.shape,
            seq_len=cfg.data.seq_len,
            activation_checkpointing=cfg.model.activation_checkpointing,
            mesh=ctx.mesh,
            device=ctx.device,
            bf16=bf16,
            meta_init=meta_init,
            seed=cfg.train.seed,
            fsdp=self.fsdp,
            compile_blocks=compile_blocks,
            reshard_after_forward=reshard,
        )
        # Fused AdamW on CUDA and on CPU (measured: 1.9 ms instead of 11.8 ms of CPU time per
        # step for a 2.5M-parameter shard), and the same device-side skip of non-finite steps.
        self.fused = True if cfg.optim.fused is None else cfg.optim.fused
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
        self.loss_chunk = (
            auto_chunk_tokens(self.shape.vocab_size)
            if t.loss_chunk_tokens is None
            else t.loss_chunk_tokens
        )
        defer = fits if t.defer_grad_sync is None else t.defer_grad_sync
        self.defer_grad_sync = defer and self.fsdp and self.grad_accum > 1
        # Non-finite steps, counted on the device so that counting needs no host sync.
        zero = torch.zeros((), device=ctx.device)
        self.loss_tokens = zero.clone()  # sft: the targets the last step's loss counted (global)
        self.bad_run, self.bad_max, self.bad_total = zero.clone(), zero.clone(), zero.clone()
        self._window = (time.perf_counter(), 0)  # start of the logging window, steps in it
        self._window_cpu = _cpu_seconds()
        self.lease: Lease | None = None
        self.lease_generation = 0
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
                stager=build_stager(on_gpu=on_gpu) if cfg.checkpoint.async_save else None,
                still_holder=self._still_holder,
            )
        self.samples = SampleLog(cfg.data.sample_log_dir, rank=ctx.rank, world_size=ctx.world_size)
        self.flops_per_token = flops_per_token(self.shape, cfg.data.seq_len).per_token
        self.peak = peak_tflops(torch.cuda.get_device_name(ctx.device)) if on_gpu else None
        self.info(
            f"model {cfg.model.preset}: {self.shape.num_params():,} params; "
            f"world {ctx.world_size} on {ctx.device.type}, bf16={bf16}, fsdp={self.fsdp}, "
            f"compile={compile_blocks}, fused_adamw={self.fused}, reshard_after_forward="
            f"{reshard}, defer_grad_sync={self.defer_grad_sync}, "
            f"global batch {cfg.train.global_batch_size} = micro {cfg.train.micro_batch_size}"
            f" x world {ctx.world_size} x accum {self.grad_accum}"
        )

    def info(self, message: str) -> None:
        info(message, rank=self.ctx.rank)

    def _unsharded_fits(self, bf16: bool) -> bool:
        """Auto for train.defer_grad_sync and reshard_after_forward: may the whole model's
        unsharded parameters and fp32 gradients stay on every rank through a step? On GPUs only
        if that takes at most a quarter of the memory (llama-1b on 80 GB: 7.4 GB, yes; llama-8b:
        48 GB, no); on CPU, yes."""
        if self.ctx.device.type != "cuda":
            return True
        held = self.shape.num_params() * ((2 if bf16 else 4) + 4)
        return held <= torch.cuda.get_device_properties(self.ctx.device).total_memory // 4

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
            fused=self.fused,
        )

    def _still_holder(self) -> bool:
        return self.lease is None or self.lease.check()

    # -- before step 1 --------------------------------------------------------------------------

    def agree(self) -> None:
        """Every rank must run the same configuration, data and code: compare, or stop (exit 2)."""
        mine = effective_config(self.cfg, self.fingerprint, torch.__version__)
        gathered: list[Any] = [None] * self.ctx.world_size
        dist.all_gather_object(gathered, (config_hash(mine), mine), group=self.ctx.ctrl_group)
        reference_hash, reference = gathered[0]
        by_hash: dict[str, list[int]] = {}
        for rank, (digest, _) in enumerate(gathered):
            if digest != reference_hash:
                by_hash.setdefault(digest, []).append(rank)
        if not by_hash:
            return
        parts, first_key = [], ""
        for ranks in by_hash.values():
            diffs = differences(reference, gathered[ranks[0]][1])
            first_key = first_key or diffs[0][0]
            verb = "differs" if len(ranks) == 1 else "differ"
            parts.append(f"{_ranks(ranks)} {verb} from rank 0 in {describe(diffs)}")
        raise ConfigError(
            first_key,
            "ranks disagree before step 1: "
            + "; ".join(parts)
            + ". Every node must run the same image, config and data",
        )

    def take_lease(self) -> None:
        """Rank 0 takes the checkpoint folder's lease (lease.py) or the job stops (exit 2)."""
        if self.checkpointer is None:
            return
        root = self.checkpointer.root
        outcome: list[Any] = [None]
        if self.ctx.rank == 0:
            job_id = job_identity()
            lease = Lease(root, job_id=job_id, timeout_s=self.cfg.checkpoint.lease_timeout_s)
            try:
                record = lease.acquire()
            except LeaseHeldError as held:
                outcome[0] = ("held", str(held))
            else:
                self.lease = lease
                lease.start_heartbeat()
                outcome[0] = ("ok", record.generation, job_id)
        dist.broadcast_object_list(outcome, src=0, group=self.ctx.ctrl_group)
        timeout = self.cfg.checkpoint.lease_timeout_s
        if outcome[0][0] == "held":
            raise ConfigError(
                "checkpoint.dir",
                f"{root} is in use by {outcome[0][1]}: one job per checkpoint folder. Stop that "
                "job or give this one another checkpoint.dir (a holder that stops renewing is "
                f"taken over after checkpoint.lease_timeout_s={timeout:g})",
            )
        self.lease_generation = int(outcome[0][1])
        self.info(f"checkpoint folder lease: generation {outcome[0][1]} for {outcome[0][2]}")

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
            "fingerprint": self.fingerprint,
            # export-hf ships the tokenizer prepare-data left beside the data (hf.py).
            "data_path": self.cfg.data.path,
            "lease_generation": self.lease_generation,
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

    def _check_fingerprint(self, ckpt: CheckpointInfo) -> list[tuple[str, str, str]]:
        """Differences that make an exact resume impossible; raises unless weights-only."""
        saved = ckpt.meta.get("fingerprint")
        if saved is None:
            self.info(
                f"WARNING: {ckpt.path.name} has no fingerprint (written by an older trainer); "
                "resuming without checking its data order"
            )
            return []
        diffs = differences(saved, self.fingerprint)
        if diffs and not self.cfg.checkpoint.resume_weights_only:
            raise ConfigError(
                diffs[0][0],
                f"changed since {ckpt.path} was written ({describe(diffs)}); resuming would "
                "continue a different data order. To keep only the weights and start the data "
                "order from the beginning, set checkpoint.resume_weights_only=true; to start "
                "afresh, use another checkpoint.dir",
            )
        return diffs

    def _scan_checkpoints(self) -> tuple[CheckpointInfo | None, str | None]:
        """Rank 0: clean, verify, move damaged checkpoints aside (checkpoint.prepare_resume).
        Returns (newest intact checkpoint, reason for a final failure)."""
        assert self.checkpointer is not None
        root = self.checkpointer.root
        scan = prepare_resume(root)
        for path in scan.removed:
            self.info(f"removed incomplete checkpoint {path} (an interrupted save)")
        for path in scan.foreign:
            self.info(f"WARNING: {path} was not written by the trainer (no {OWNER}): left alone")
        for was, now, why in scan.damaged:
            self.info(f"WARNING: checkpoint {was} is damaged ({why}): moved to {now}")
            self.metrics.event("checkpoint_damaged", path=str(was), moved_to=str(now), why=why)
        if not scan.none_intact:
            return scan.latest, None
        reason = (
            f"no intact checkpoint in {root}: all {len(scan.damaged)} complete ones are "
            f"damaged and kept in {root / DAMAGED}"
        )
        record_final_failure(root, EXIT_NO_INTACT_CHECKPOINT, reason)
        return None, reason

    def resume(self) -> None:
        """Load the newest intact checkpoint, if any (or stop: exit 5 when none is intact)."""
        if self.checkpointer is None or not self.cfg.checkpoint.resume:
            return
        # One decision for all ranks, even if a shared file system is slow to show a rename.
        found: list[tuple[CheckpointInfo | None, str | None]] = [(None, None)]
        if self.ctx.rank == 0:
            found[0] = self._scan_checkpoints()
        dist.broadcast_object_list(found, src=0, group=self.ctx.ckpt_group)
        ckpt, failure = found[0]
        if failure is not None:
            raise FinalExitError(EXIT_NO_INTACT_CHECKPOINT, failure)
        if ckpt is None:
            return
        if ckpt.meta.get("model_shape") != self.shape.as_dict():
            raise ConfigError(
                "model",
                f"{ckpt.path} holds a different model shape {ckpt.meta.get('model_shape')}; "
                "use the same model settings or a new checkpoint.dir",
            )
        # import-hf writes model weights only (hf.py): no optimizer, no data position to check.
        model_only = bool(ckpt.meta.get("model_only"))
        changed = [("model_only", "", "true")] if model_only else self._check_fingerprint(ckpt)
        started = time.monotonic()
        if changed:
            partial: dict[str, Any] = {"model": get_state_dict(self.model, self.optimizer)[0]}
            if not model_only:
                partial["progress"] = self.progress
            self.checkpointer.load(ckpt, partial)
            set_model_state_dict(self.model, partial["model"])
            # A fresh optimizer still holds the LR of step 0; continue the loaded schedule.
            for group, lr in zip(
                self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True
            ):
                group["lr"] = lr
            # The step (and with it the LR schedule and the checkpoint numbering) goes on; the
            # optimizer starts fresh and the data order starts again from its first sample.
            self.progress.samples_consumed = 0
            for line in (
                "=" * 78,
                f"WEIGHTS-ONLY RESUME from {ckpt.path}: {describe(changed, limit=10)}",
                "model weights loaded; optimizer state dropped; data order RESTARTED at sample 0",
                (
                    "(an import-hf checkpoint)"
                    if model_only
                    else "(checkpoint.resume_weights_only=true)"
                )
                + f"; steps continue from {self.progress.step}",
                "=" * 78,
            ):
                self.info(line)
        else:
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
            weights_only=bool(changed),
            changed=[key for key, _, _ in changed],
        )

    # -- training -------------------------------------------------------------------------------

    def _grad_norm(self) -> torch.Tensor:
        """The global gradient norm (clipping to train.grad_clip if set), on the device."""
        params = list(self.model.parameters())
        if self.cfg.train.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.train.grad_clip, foreach=True)
        else:
            grads = [p.grad for p in params if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def _logits(self, inputs: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        autocast = torch.autocast(self.ctx.device.type, dtype=torch.bfloat16)
        with autocast if self.autocast else contextlib.nullcontext():
            logits: torch.Tensor = self.model(inputs, doc_ids)
        return logits

    def evaluate(self, step: int) -> None:
        """Held-out loss and perplexity (evaluate.py), on every rank at the same step."""
        if self.evaluator is None:
            return
        self.model.eval()
        result = self.evaluator.run(self._logits, self.loss_chunk)
        self.model.train()
        self.metrics.evaluation(
            step,
            {
                "loss": result.loss,
                "perplexity": result.perplexity,
                "tokens": result.tokens,
                "sequences": result.sequences,
                "seconds": round(result.seconds, 4),
            },
        )
        self.info(f"eval at step {step}: loss {result.loss:.6f}, perplexity {result.perplexity:g}")
        # Not training time: keep it out of the logging window's step time and tokens/s.
        self._window = (self._window[0] + result.seconds, self._window[1])

    def train_step(
        self, batches: Iterator[Any], step: int
    ) -> tuple[torch.Tensor, list[int], float, torch.Tensor]:
        """One optimizer step: (summed local micro-batch losses, sample ids, lr, grad norm).

        Non-finite gradients (from a non-finite loss anywhere) skip the update on every rank;
        with fused AdamW the skip happens on the device (no host sync), otherwise the host
        checks the norm. Either way the step is counted in `bad_*`.
        """
        loss_sum = torch.zeros((), device=self.ctx.device)
        ids: list[int] = []
        poison = self.faults.nonfinite(step)
        if self.sft:
            return self._sft_step(batches, poison)
        for micro in range(self.grad_accum):
            if self.defer_grad_sync:
                # Accumulate unsharded gradients locally; reduce-scatter once, on the last one.
                last = micro == self.grad_accum - 1
                fsdp_model = cast(FSDPModule, self.model)
                fsdp_model.set_requires_gradient_sync(last)
                fsdp_model.set_reshard_after_backward(last)
            sample_ids, tokens = next(batches)
            ids.extend(int(i) for i in sample_ids)
            tokens = tokens.to(self.ctx.device, non_blocking=True)
            logits = self._logits(tokens[:, :-1])
            loss = cross_entropy(logits, tokens[:, 1:], self.loss_chunk)
            if poison:
                loss = loss * float("nan")
            torch.autograd.backward(loss / self.grad_accum)
            loss_sum += loss.detach()
        return self._update(loss_sum, ids)

    def _sft_step(
        self, batches: Iterator[Any], poison: bool
    ) -> tuple[torch.Tensor, list[int], float, torch.Tensor]:
        """One fine-tuning step: the loss is the sum of the masked-in targets' cross-entropies
        over the whole global batch divided by their number, whatever the world size and the
        accumulation (the counts vary between micro-batches and ranks). One all-reduce of the
        count per step, then each micro-batch's summed loss is scaled by world / count (FSDP
        averages the ranks' gradients)."""
        device = self.ctx.device
        micro = [next(batches) for _ in range(self.grad_accum)]
        ids = [int(i) for batch in micro for i in batch[0]]
        count = torch.tensor(
            float(sum(int(batch[2][:, 1:].sum()) for batch in micro)), device=device
        )
        dist.all_reduce(count)
        self.loss_tokens = count
        scale = self.ctx.world_size / count.clamp(min=1.0)
        loss_sum = torch.zeros((), device=device)
        for index, (_, row_tokens, row_mask, row_docs) in enumerate(micro):
            if self.defer_grad_sync:
                last = index == self.grad_accum - 1
                fsdp_model = cast(FSDPModule, self.model)
                fsdp_model.set_requires_gradient_sync(last)
                fsdp_model.set_reshard_after_backward(last)
            tokens = row_tokens.to(device, non_blocking=True)
            mask = row_mask.to(device, non_blocking=True)
            docs = row_docs.to(device, non_blocking=True)
            logits = self._logits(tokens[:, :-1], docs[:, :-1])
            targets = tokens[:, 1:].masked_fill(~mask[:, 1:], IGNORE)
            loss = cross_entropy_sum(logits, targets, self.loss_chunk) * scale
            if poison:
                loss = loss * float("nan")
            torch.autograd.backward(loss)
            # Reported as pretraining's: the readback divides by grad_accum x world.
            loss_sum += loss.detach() * self.grad_accum
        return self._update(loss_sum, ids)

    def _update(
        self, loss_sum: torch.Tensor, ids: list[int]
    ) -> tuple[torch.Tensor, list[int], float, torch.Tensor]:
        """Clip, step the optimizer (or skip a non-finite step), advance the schedule."""
        norm = self._grad_norm()
        bad = (~torch.isfinite(norm)).float()
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self.checkpointer is not None:
            # An async save may still be copying these tensors (checkpoint.build_stager).
            self.checkpointer.wait_for_staging()
        if self.fused:
            self.optimizer.found_inf = bad  # type: ignore[attr-defined]  # read by fused AdamW
            self.optimizer.step()
        elif not bool(bad):
            self.optimizer.step()
        self.bad_run = (self.bad_run + 1) * bad
        self.bad_max = torch.maximum(self.bad_max, self.bad_run)
        self.bad_total += bad
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, ids, lr, norm

    def _loader(self) -> Iterator[Any]:
        cfg, ctx = self.cfg, self.ctx
        plan = BatchPlan(
            cfg.train.global_batch_size, cfg.train.micro_batch_size, ctx.world_size, ctx.rank
        )
        workers = cfg.data.num_workers
        if workers is None:
            workers = 2 if self.on_gpu else 0
        loader = build_loader(
            self.dataset,
            plan,
            start_samples=self.progress.samples_consumed,
            num_workers=workers,
            pin_memory=self.on_gpu,
            prefetch_factor=cfg.data.prefetch_factor,
        )
        return iter(loader)

    def fit(self) -> int:
        self.agree()
        self.take_lease()
        try:
            self.resume()
        except BaseException:
            # Hand the folder back (a refused resume is not a crash of a holder) and stop.
            if self.checkpointer is not None:
                self.checkpointer.close()
            if self.lease is not None:
                self.lease.release()
            raise
        cfg = self.cfg
        last_step = cfg.train.stop_at_step or cfg.train.steps
        reason = "completed" if last_step == cfg.train.steps else "stop_at_step"
        reason, code = self._loop(self._loader(), last_step, reason)
        if code == 0:
            if self.checkpointer is None and reason not in ("completed", "stop_at_step"):
                self.info(f"{reason}: no checkpoint.dir, stopping without a checkpoint")
            self.save(blocking=True)
            if reason in ("completed", "stop_at_step"):
                self.evaluate(self.progress.step)  # after the save: it cannot cost the step
        if self.checkpointer is not None:
            self.checkpointer.close()
            if code == EXIT_NONFINITE and self.ctx.rank == 0:
                # Final: a relaunch would resume the same checkpoint and diverge again.
                record_final_failure(
                    self.checkpointer.root,
                    code,
                    f"{cfg.train.max_nonfinite_steps} non-finite steps in a row up to step "
                    f"{self.progress.step}; the newest checkpoint is the last good one",
                )
        if self.lease is not None and code != EXIT_LEASE_LOST:
            self.lease.release()
        self.samples.close()
        self.metrics.event(
            "exit",
            reason=reason,
            step=self.progress.step,
            nonfinite_total=int(self.bad_total.item()),
        )
        self.metrics.close()
        return code

    def _loop(self, batches: Iterator[Any], last_step: int, reason: str) -> tuple[str, int]:
        """Train until `last_step`, a stop vote, a lost lease or too many non-finite steps."""
        cfg, ctx = self.cfg, self.ctx
        every = cfg.checkpoint.every_steps
        self.model.train()
        self._window = (time.perf_counter(), 0)
        self._window_cpu = _cpu_seconds()
        while self.progress.step < last_step:
            step = self.progress.step + 1
            self.faults.before_step(step)
            loss_sum, ids, lr, norm = self.train_step(batches, step)
            self.progress.step = step
            self.progress.samples_consumed += cfg.train.global_batch_size
            self.samples.record(step, ids)
            self._window = (self._window[0], self._window[1] + 1)
            save_now = bool(every) and step % every == 0 and step != last_step
            readback = step % cfg.metrics.log_every == 0 or step == last_step or save_now
            lease_lost = self.lease is not None and self.lease.lost is not None
            flags = [float(self.stop.requested), float(lease_lost)]
            if readback:
                stop_votes, lost_votes, worst = self._readback(step, loss_sum, norm, lr, flags)
                if worst >= cfg.train.max_nonfinite_steps:
                    self.info(
                        f"{int(worst)} steps in a row had a non-finite loss or gradient (last: "
                        f"step {step}); stopping without saving, the last good checkpoint is kept"
                    )
                    return "non_finite", EXIT_NONFINITE
            else:
                votes = torch.tensor(flags)
                dist.all_reduce(votes, group=ctx.ctrl_group)  # host only: no GPU sync
                stop_votes, lost_votes = votes.tolist()
            if self.checkpointer is not None:
                self.checkpointer.poll()
            if lost_votes > 0:
                lost = self.lease.lost if self.lease is not None else "on rank 0"
                self.info(f"stopping without saving: {lost}")
                return "lease_lost", EXIT_LEASE_LOST
            if stop_votes > 0:
                sig = self.stop.received
                reason = sig.name if sig is not None else "signal on another rank"
                self.info(f"{reason}: saving a checkpoint at step {step} and exiting")
                return reason, 0
            if save_now:
                self.save(blocking=False)
            if cfg.eval.every_steps and step % cfg.eval.every_steps == 0 and step != last_step:
                self.evaluate(step)
        return reason, 0

    def _readback(
        self, step: int, loss_sum: torch.Tensor, norm: torch.Tensor, lr: float, flags: list[float]
    ) -> tuple[float, float, float]:
        """The one device->host sync of a logging window: global loss, votes, counters, metrics.

        Returns (stop votes, lease-lost votes, longest run of non-finite steps in the window).
        """
        cfg, ctx = self.cfg, self.ctx
        # Built on the device: stack/cat do not mix a CUDA tensor with CPU ones.
        votes = torch.tensor(flags, device=ctx.device)
        summed = torch.cat([loss_sum.float().reshape(1), votes])
        dist.all_reduce(summed)
        local = torch.stack(
            [norm.float(), self.bad_run, self.bad_max, self.bad_total, self.loss_tokens.float()]
        )
        loss_total, stop_votes, lost_votes, grad_norm, run, worst, total, loss_tokens = torch.cat(
            [summed, local]
        ).tolist()
        if worst >= cfg.train.max_nonfinite_steps:
            return stop_votes, lost_votes, worst
        self.bad_max = self.bad_run.clone()
        started, steps = self._window
        elapsed = (time.perf_counter() - started) / steps
        cpu = _cpu_seconds()
        tokens_per_step = cfg.train.global_batch_size * cfg.data.seq_len
        fields: dict[str, Any] = {
            "loss": loss_total / (self.grad_accum * ctx.world_size),
            "lr": lr,
            "grad_norm": grad_norm if cfg.train.grad_clip > 0 else float("nan"),
            "tokens_per_s": tokens_per_step / elapsed,
            "step_time_s": elapsed,
            "memory_mb": round(_memory_mb(ctx.device), 1),
            # CPU seconds this rank's process (all its threads) used per step: on a shared
            # machine a measure of work that other people's load does not inflate.
            "cpu_s": (cpu - self._window_cpu) / steps,
            "world_size": ctx.world_size,
            "grad_accum": self.grad_accum,
            "samples_consumed": self.progress.samples_consumed,
        }
        if self.sft:
            fields["loss_tokens"] = int(loss_tokens)  # the masked-in targets of the last step
        if run > 0 or total > 0:
            fields["skipped"] = run > 0
            fields["nonfinite_total"] = int(total)
        if self.peak is not None:
            achieved = self.flops_per_token * tokens_per_step / elapsed
            fields["mfu"] = round(achieved / (self.peak[1] * 1e12 * ctx.world_size), 4)
        self.metrics.step(step, fields)
        self._window = (time.perf_counter(), 0)
        self._window_cpu = _cpu_seconds()
        return stop_votes, lost_votes, worst
