"""Typed trainer configuration: YAML file plus `--set key=value` overrides.

Torch-free on purpose: a bad file must fail in well under a second with one line that names the
field (``train.micro_batch_size: must be >= 1, got 0``), before any process group exists.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from . import fileio
from .paths import CONFIG_LIMIT
from .presets import (
    ARCHITECTURES,
    PRESETS,
    ROPE_SCALING_FIELDS,
    ModelShape,
    checkpoint_bytes,
    resolve_shape,
)


class ConfigError(Exception):
    """A config problem, always tied to one dotted field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        # Picklable, so that it can cross a process boundary (prepare-data's workers).
        return (ConfigError, (self.path, self.message))


@dataclass
class ModelConfig:
    preset: str = "tiny"
    dim: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    ffn_dim: int | None = None
    vocab_size: int | None = None
    rope_theta: float | None = None
    norm_eps: float | None = None
    tie_embeddings: bool | None = None
    # RoPE frequency scaling (presets.py): default = none; llama3 = Llama 3.1/3.2's, which needs
    # the four parameters below (the llama presets set them). Same meaning as Hugging Face's
    # rope_scaling {rope_type, factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings}.
    rope_type: Literal["default", "llama3"] | None = None
    rope_factor: float | None = None
    rope_low_freq_factor: float | None = None
    rope_high_freq_factor: float | None = None
    rope_original_max_position: int | None = None
    # Biases on the q/k/v projections: Qwen2's attention (architecture qwen2 needs it).
    qkv_bias: bool | None = None
    # Mistral's sliding attention window, as import-hf read it: data.seq_len may not exceed it
    # (the trainer's attention is full causal, the same as the window's up to its length).
    sliding_window: int | None = None
    # The Hugging Face architecture export-hf writes; import-hf prints the one it read.
    architecture: Literal["llama", "qwen2", "mistral"] | None = None
    activation_checkpointing: bool = False
    # torch.compile each transformer block (FSDP's hooks stay outside the compiled region);
    # null = on for CUDA, off on CPU. Needs a C/C++ compiler on CPU.
    compile: bool | None = None
    # full: build on CPU with the seed, then shard (identical for any world size).
    # meta: build on the meta device and initialise shards in place (needed for 8B on GPUs).
    init: Literal["auto", "full", "meta"] = "auto"


@dataclass
class DataConfig:
    source: Literal["synthetic", "tokens"] = "synthetic"
    path: str | None = None
    # The dtype of the tokens: headerless .bin shards are read as it; headered .tokens shards
    # (prepare-data) must say the same.
    token_dtype: Literal["uint16", "uint32"] = "uint16"
    # tokenizer.json the headered shards must have been made with (by its SHA-256); null = the
    # tokenizer.json prepare-data left in data.path, if any, else all shards must agree.
    tokenizer: str | None = None
    seq_len: int = 32
    seed: int = 1234
    shuffle: bool = True
    num_workers: int | None = None  # DataLoader processes per rank; null = 2 on CUDA, 0 on CPU
    prefetch_factor: int = 4  # micro-batches each worker keeps ready (with num_workers > 0)
    sample_log_dir: str | None = None  # per-rank JSON lines of the sample ids of every step
    # Held-out token shards (the formats data.path takes), read in order for evaluation (eval.*)
    eval_path: str | None = None


@dataclass
class TrainConfig:
    # pretrain: next-token loss on every token of windows of data.path. sft: fine-tuning on
    # prepare-data --format chat|prompt-completion shards: loss only on the masked-in (assistant)
    # tokens, attention never across the packed examples, positions restarting at each.
    task: Literal["pretrain", "sft"] = "pretrain"
    steps: int = 100  # length of the LR schedule and of the run
    stop_at_step: int | None = None  # save and exit 0 at this step (planned stops, elastic tests)
    global_batch_size: int = 8
    micro_batch_size: int = 2
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    mixed_precision: Literal["auto", "bf16", "fp32"] = "auto"
    grad_clip: float = 1.0  # 0 disables clipping
    deterministic: bool = False
    # Shard with FSDP2; null = only when there is more than one rank (a world of one has nothing
    # to shard: a plain module, bf16 through autocast).
    fsdp: bool | None = None
    # A step whose loss or gradients are not finite is skipped (no update) and counted; this many
    # in a row stop the run (exit 3) with the last good checkpoint kept.
    max_nonfinite_steps: int = 3
    # Cross-entropy in chunks of this many tokens, each recomputed in backward, so the fp32
    # logits of the whole micro-batch never exist at once; 0 = one piece; null = auto.
    loss_chunk_tokens: int | None = None
    # With gradient accumulation, keep gradients unsharded and skip FSDP's reduce-scatter (and
    # the reshard) on all but the last micro-batch: less communication, more memory; null = auto.
    defer_grad_sync: bool | None = None
    # Free each block's unsharded parameters after its forward (and gather them again for the
    # backward): less memory, one more all-gather per block and micro-batch; null = only when
    # keeping them would take over a quarter of the GPU's memory (never on CPU).
    reshard_after_forward: bool | None = None


@dataclass
class OptimConfig:
    lr: float = 3e-4
    min_lr: float = 3e-5
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    # AdamW fused=True (one kernel per step; non-finite steps skipped on the device); null = on.
    fused: bool | None = None


@dataclass
class CheckpointConfig:
    dir: str | None = None
    every_steps: int = 0  # 0: only on stop, signal and completion
    keep_last: int = 3
    async_save: bool = False
    resume: bool = True
    # When the checkpoint's fingerprint (data, seq_len, batch, sampler, preset) differs from this
    # run's: load only the model weights and start the data order from the beginning.
    resume_weights_only: bool = False
    # One job per dir: a holder that has not renewed its lease for this long is considered gone.
    lease_timeout_s: float = 120.0


@dataclass
class EvalConfig:
    """Loss and perplexity on data.eval_path: every `every_steps` steps and at the end."""

    every_steps: int = 0  # 0: only at the end of the run (with data.eval_path)
    # The first this many sequences (windows of seq_len+1 tokens) of the held-out set; null: all
    max_sequences: int | None = None


@dataclass
class MetricsConfig:
    log_every: int = 1
    tensorboard_dir: str | None = None
    # Rank 0 also appends its JSON event lines here ("{job_id}": the job's id, see lease.py), for
    # a log shipper to pick up: the bundled sbatch job names the node's spool folder.
    events_file: str | None = None
    mlflow: bool = False
    mlflow_experiment: str = "hyperpod-trainer"


@dataclass
class FaultConfig:
    """Test-only fault injection; every field defaults to off."""

    kill_at_step: int | None = None  # rank `kill_rank` SIGKILLs itself when starting this step
    kill_rank: int = 1
    crash_in_save_at_step: int | None = None  # rank 0 SIGKILLs itself after the shards, pre-marker
    nonfinite_at_step: int | None = None  # the loss of this step (on every rank) becomes NaN
    nonfinite_steps: int = 1  # ... and of the steps after it, this many in all


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)

    def shape(self) -> ModelShape:
        overrides = {f.name: getattr(self.model, f.name) for f in dataclasses.fields(ModelShape)}
        return resolve_shape(self.model.preset, overrides)

    def checkpoint_bytes(self) -> int:
        """Bytes one checkpoint of this model writes (presets.checkpoint_bytes)."""
        return checkpoint_bytes(self.shape())

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | Path | None, overrides: list[str]) -> Config:
    """Build a Config from an optional YAML file and `key=value` overrides, then validate it."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError("--set", f"expected KEY=VALUE, got {item!r}")
        _assign(raw, key.strip(), _parse_value(key.strip(), text))
    cfg = typing.cast(Config, _build(Config, raw, ""))
    validate(cfg)
    return cfg


def _parse_value(key: str, text: str) -> Any:
    if not text.strip():
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not YAML; let the field's type decide whether a plain string is fine


def _read_yaml(path: Path) -> dict[str, Any]:
    # A regular file within its limit, UTF-8: anything else is a one-line `fileio.PathError`
    # (a FIFO or a device is refused from stat, never opened; the command exits 2).
    text = fileio.read_text(
        path, limit=CONFIG_LIMIT, what="config file", hint="give the YAML file of the job"
    )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError("--config", f"{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("--config", f"{path}: top level must be a mapping of sections")
    return data


def _assign(raw: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type[Any], raw: Any, at: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(at or "<root>", f"expected a mapping, got {_kind(raw)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            where = f"{at}.{key}" if at else str(key)
            raise ConfigError(where, f"unknown field (known: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for name in known & raw.keys():
        where = f"{at}.{name}" if at else name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            sub = raw[name] if raw[name] is not None else {}
            values[name] = _build(typing.cast(type[Any], tp), sub, where)
        else:
            values[name] = _coerce(raw[name], tp, where)
    return cls(**values)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _coerce(value: Any, tp: Any, at: str) -> Any:  # noqa: PLR0911 - one return per type
    """Check (and gently convert) one value against its annotation."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, at)
    if value is None:
        raise ConfigError(at, "must not be null")
    if origin is Literal:
        if value not in args:
            choices = ", ".join(str(a) for a in args)
            raise ConfigError(at, f"must be one of {choices}; got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(at, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(at, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        return _to_float(value, at)
    if tp is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(at, f"expected a string, got {_kind(value)}")
        return str(value)
    raise ConfigError(at, f"unsupported type {tp!r}")  # pragma: no cover - schema bug


def _to_float(value: Any, at: str) -> float:
    # YAML 1.1 reads "3e-4" as a string; accept any numeric spelling.
    if isinstance(value, bool):
        raise ConfigError(at, f"expected a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(at, f"expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ConfigError(at, f"must be finite, got {value!r}")
    return out


# ---------------------------------------------------------------------------------------------
# Validation


def _at_least(at: str, value: float | None, low: float) -> None:
    if value is not None and value < low:
        raise ConfigError(at, f"must be >= {low:g}, got {value:g}")


def validate(cfg: Config) -> None:
    """Semantic checks that a type alone cannot express; raises on the first problem."""
    _validate_model(cfg)
    _validate_data(cfg)
    _validate_train(cfg)
    _validate_optim(cfg)
    _validate_checkpoint(cfg)
    _validate_eval(cfg)
    _at_least("metrics.log_every", cfg.metrics.log_every, 1)
    _validate_events_file(cfg.metrics.events_file)


def _validate_events_file(path: str | None) -> None:
    if path is None:
        return
    rest = path.replace("{job_id}", "")
    if not path or "{" in rest or "}" in rest:
        raise ConfigError(
            "metrics.events_file",
            f"{path!r}: a file path where only {{job_id}} is substituted",
        )


def _validate_model(cfg: Config) -> None:
    m = cfg.model
    if m.preset not in PRESETS:
        raise ConfigError(
            "model.preset", f"unknown preset {m.preset!r} (known: {', '.join(PRESETS)})"
        )
    for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size"):
        _at_least(f"model.{name}", getattr(m, name), 1)
    if m.rope_theta is not None and m.rope_theta <= 0:
        raise ConfigError("model.rope_theta", f"must be > 0, got {m.rope_theta:g}")
    if m.norm_eps is not None and m.norm_eps <= 0:
        raise ConfigError("model.norm_eps", f"must be > 0, got {m.norm_eps:g}")
    _at_least("model.sliding_window", m.sliding_window, 1)
    shape = cfg.shape()
    _validate_rope_scaling(shape)
    _validate_architecture(shape)
    if shape.dim % shape.n_heads:
        raise ConfigError("model.dim", f"{shape.dim} is not divisible by n_heads {shape.n_heads}")
    if shape.head_dim % 2:
        raise ConfigError("model.dim", f"head dim {shape.head_dim} must be even for RoPE")
    if shape.n_heads % shape.n_kv_heads:
        raise ConfigError(
            "model.n_kv_heads",
            f"n_heads {shape.n_heads} is not a multiple of n_kv_heads {shape.n_kv_heads}",
        )


def _validate_architecture(shape: ModelShape) -> None:
    """The shape must be one export-hf can write as its architecture (hf.py): Qwen2's attention
    always has q/k/v biases and Llama's and Mistral's never; only Mistral has a window."""
    assert shape.architecture in ARCHITECTURES  # the Literal above
    if shape.qkv_bias != (shape.architecture == "qwen2"):
        raise ConfigError(
            "model.qkv_bias",
            f"{str(shape.qkv_bias).lower()} with model.architecture {shape.architecture}: "
            "qwen2 has biases on the q/k/v projections, llama and mistral have none",
        )
    if shape.sliding_window is not None and shape.architecture != "mistral":
        raise ConfigError(
            "model.sliding_window",
            f"set with model.architecture {shape.architecture}: only mistral has one",
        )


def _validate_rope_scaling(shape: ModelShape) -> None:
    if shape.rope_type != "llama3":
        return
    for name in ROPE_SCALING_FIELDS[1:]:
        value = getattr(shape, name)
        if value is None:
            raise ConfigError(f"model.{name}", "required when model.rope_type is llama3")
        if value <= 0:
            raise ConfigError(f"model.{name}", f"must be > 0, got {value:g}")
    assert shape.rope_low_freq_factor is not None and shape.rope_high_freq_factor is not None
    if shape.rope_high_freq_factor <= shape.rope_low_freq_factor:
        raise ConfigError(
            "model.rope_high_freq_factor",
            f"{shape.rope_high_freq_factor:g} must be greater than rope_low_freq_factor "
            f"{shape.rope_low_freq_factor:g}",
        )


def _validate_data(cfg: Config) -> None:
    d = cfg.data
    _at_least("data.seq_len", d.seq_len, 2)
    _at_least("data.num_workers", d.num_workers, 0)
    _at_least("data.prefetch_factor", d.prefetch_factor, 1)
    _at_least("data.seed", d.seed, 0)
    window = cfg.shape().sliding_window
    if window is not None and d.seq_len > window:
        raise ConfigError(
            "data.seq_len",
            f"{d.seq_len} exceeds model.sliding_window {window}: the trainer's attention is "
            "full causal, which differs from the model's sliding window beyond it; set "
            f"data.seq_len <= {window}",
        )
    # Existence of data.path is checked when the dataset opens (on the cluster), so that
    # `--check` works on a laptop for configs that name FSx paths.
    if d.source == "tokens" and not d.path:
        raise ConfigError("data.path", "required when data.source is tokens")
    if d.token_dtype == "uint16" and cfg.shape().vocab_size > 65536 and d.source == "tokens":
        raise ConfigError(
            "data.token_dtype",
            f"uint16 cannot hold ids of vocab_size {cfg.shape().vocab_size}; use uint32",
        )


def _validate_train(cfg: Config) -> None:
    t = cfg.train
    _at_least("train.steps", t.steps, 1)
    _at_least("train.global_batch_size", t.global_batch_size, 1)
    _at_least("train.micro_batch_size", t.micro_batch_size, 1)
    _at_least("train.seed", t.seed, 0)
    _at_least("train.grad_clip", t.grad_clip, 0)
    _at_least("train.max_nonfinite_steps", t.max_nonfinite_steps, 1)
    _at_least("train.loss_chunk_tokens", t.loss_chunk_tokens, 0)
    if t.global_batch_size % t.micro_batch_size:
        raise ConfigError(
            "train.global_batch_size",
            f"{t.global_batch_size} is not a multiple of micro_batch_size {t.micro_batch_size}",
        )
    if t.stop_at_step is not None and not 1 <= t.stop_at_step <= t.steps:
        raise ConfigError("train.stop_at_step", f"must be in 1..{t.steps}, got {t.stop_at_step}")
    if t.task == "sft" and cfg.data.source != "tokens":
        raise ConfigError(
            "train.task",
            "sft needs data.source=tokens and data.path with prepare-data --format chat (or "
            "prompt-completion) shards",
        )


def _validate_optim(cfg: Config) -> None:
    o = cfg.optim
    if o.lr <= 0:
        raise ConfigError("optim.lr", f"must be > 0, got {o.lr:g}")
    if not 0 <= o.min_lr <= o.lr:
        raise ConfigError("optim.min_lr", f"must be in [0, lr={o.lr:g}], got {o.min_lr:g}")
    _at_least("optim.warmup_steps", o.warmup_steps, 0)
    if o.warmup_steps > cfg.train.steps:
        raise ConfigError(
            "optim.warmup_steps", f"{o.warmup_steps} exceeds train.steps {cfg.train.steps}"
        )
    _at_least("optim.weight_decay", o.weight_decay, 0)
    for name in ("beta1", "beta2"):
        value = getattr(o, name)
        if not 0 <= value < 1:
            raise ConfigError(f"optim.{name}", f"must be in [0, 1), got {value:g}")
    if o.eps <= 0:
        raise ConfigError("optim.eps", f"must be > 0, got {o.eps:g}")


def _validate_checkpoint(cfg: Config) -> None:
    c = cfg.checkpoint
    _at_least("checkpoint.every_steps", c.every_steps, 0)
    _at_least("checkpoint.keep_last", c.keep_last, 1)
    if c.lease_timeout_s <= 0:
        raise ConfigError("checkpoint.lease_timeout_s", f"must be > 0, got {c.lease_timeout_s:g}")
    if c.every_steps and not c.dir:
        raise ConfigError("checkpoint.dir", "required when checkpoint.every_steps > 0")
    f = cfg.fault
    if f.crash_in_save_at_step is not None and not c.dir:
        raise ConfigError("fault.crash_in_save_at_step", "needs checkpoint.dir")
    _at_least("fault.nonfinite_steps", f.nonfinite_steps, 1)


def _validate_eval(cfg: Config) -> None:
    e = cfg.eval
    _at_least("eval.every_steps", e.every_steps, 0)
    _at_least("eval.max_sequences", e.max_sequences, 1)
    if e.every_steps and not cfg.data.eval_path:
        raise ConfigError("data.eval_path", "required when eval.every_steps > 0")
    if cfg.data.eval_path == "":
        raise ConfigError("data.eval_path", "must not be empty (null for no evaluation)")


def grad_accum_steps(cfg: Config, world_size: int) -> int:
    """Micro-batches per rank per step that keep the global batch constant at this world size."""
    per_pass = cfg.train.micro_batch_size * world_size
    if cfg.train.global_batch_size % per_pass:
        raise ConfigError(
            "train.global_batch_size",
            f"{cfg.train.global_batch_size} is not divisible by micro_batch_size "
            f"{cfg.train.micro_batch_size} x world_size {world_size} = {per_pass}",
        )
    return cfg.train.global_batch_size // per_pass
