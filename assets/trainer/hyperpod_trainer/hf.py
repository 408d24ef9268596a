"""Hugging Face checkpoints in and out: `import-hf SRC OUT` and `export-hf CHECKPOINT OUT`.

`import-hf` reads a Llama, Qwen2 or Mistral model folder (config.json and model.safetensors, or
shards named by model.safetensors.index.json; the architecture from config.json's
`architectures` and `model_type`, any other refused) and writes a checkpoint folder the trainer
resumes from:

    OUT/step_000000/   DCP shards + .metadata + COMPLETE.json ("model_only": true)
    OUT/latest

with the model's fp32 weights only: the trainer loads them into a fresh optimizer at step 0 with
its own data order (train.py, `model_only`). `export-hf` reads only the model's tensors from a
checkpoint (never the optimizer state, which is twice the model) and writes safetensors shards,
config.json and, when known, the tokenizer, for `transformers.AutoModelForCausalLM`, as the
architecture the shape records (import-hf records the one it read).

The three differ only where the shape says so: Qwen2 has biases on the q/k/v projections
(`qkv_bias`); Mistral may have a sliding attention window (`sliding_window`, 4096 when its
config.json does not say), which the trainer does not implement: its attention is full causal,
the same as the window's while a sequence fits in it, so a job whose data.seq_len exceeds the
window is refused by config validation. A Qwen2 whose layers actually slide (use_sliding_window
with layers at or above max_window_layers) is refused at import.

Uses `safetensors` and torch's DCP only; never `transformers`. Every refusal is a `ConfigError`
naming the file (or the field) or a `fileio.PathError` naming the path, before anything is
written. Every path goes through the one input and output layer (`paths`, `fileio`): SRC and
CHECKPOINT are inputs (an output may not be, hold or lie inside them), config.json and each
safetensors file are checked as regular files within their limits (a truncated one is one line),
and OUT is written as a sibling folder renamed into place, replacing only an earlier output of
the same command, and only with --force.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from . import fileio, paths
from .checkpoint import (
    LATEST,
    MARKER,
    CheckpointInfo,
    complete_checkpoints,
    file_sizes,
    read_marker,
    step_dir_name,
    verify,
    write_owner,
)
from .checkpoint import write_atomic as _write_atomic
from .config import ConfigError, load_config
from .presets import OPTIONAL_DEFAULTS, PRESETS, ModelShape

# Hugging Face Llama parameter names -> the trainer's (model.py), per layer and global.
_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attention.wq.weight",
    "self_attn.k_proj.weight": "attention.wk.weight",
    "self_attn.v_proj.weight": "attention.wv.weight",
    "self_attn.o_proj.weight": "attention.wo.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "input_layernorm.weight": "attention_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
}
# Hugging Face's llama3 rope_scaling keys -> ModelShape fields.
_ROPE_KEYS = {
    "factor": "rope_factor",
    "low_freq_factor": "rope_low_freq_factor",
    "high_freq_factor": "rope_high_freq_factor",
    "original_max_position_embeddings": "rope_original_max_position",
}
# Bias tensors of Qwen2's q/k/v projections (ModelShape.qkv_bias).
_BIAS_NAMES = {
    "self_attn.q_proj.bias": "attention.wq.bias",
    "self_attn.k_proj.bias": "attention.wk.bias",
    "self_attn.v_proj.bias": "attention.wv.bias",
}
# config.json's model_type -> its architectures class (ModelShape.architecture is the former).
HF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}
# MistralConfig's sliding_window when config.json has no such key.
MISTRAL_DEFAULT_WINDOW = 4096
# Shard size of export-hf's safetensors files (Hugging Face's own default is 5 GB).
MAX_SHARD_BYTES = 5 * 1024**3
IMPORT_STEP = 0


def name_map(shape: ModelShape) -> dict[str, str]:
    """Hugging Face name -> trainer name for every parameter of `shape`."""
    out = {
        hf: ours
        for hf, ours in _GLOBAL_NAMES.items()
        if not (shape.tie_embeddings and ours == "output.weight")
    }
    per_layer = {**_LAYER_NAMES, **(_BIAS_NAMES if shape.qkv_bias else {})}
    for layer in range(shape.n_layers):
        for hf, ours in per_layer.items():
            out[f"model.layers.{layer}.{hf}"] = f"layers.{layer}.{ours}"
    return out


def param_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """The trainer's parameter name -> tensor shape (model.py), without building the model."""
    kv = shape.n_kv_heads * shape.head_dim
    out: dict[str, tuple[int, ...]] = {
        "tok_embeddings.weight": (shape.vocab_size, shape.dim),
        "norm.weight": (shape.dim,),
    }
    if not shape.tie_embeddings:
        out["output.weight"] = (shape.vocab_size, shape.dim)
    per_layer = {
        "attention.wq.weight": (shape.n_heads * shape.head_dim, shape.dim),
        "attention.wk.weight": (kv, shape.dim),
        "attention.wv.weight": (kv, shape.dim),
        "attention.wo.weight": (shape.dim, shape.n_heads * shape.head_dim),
        "feed_forward.w1.weight": (shape.ffn_dim, shape.dim),
        "feed_forward.w2.weight": (shape.dim, shape.ffn_dim),
        "feed_forward.w3.weight": (shape.ffn_dim, shape.dim),
        "attention_norm.weight": (shape.dim,),
        "ffn_norm.weight": (shape.dim,),
    }
    if shape.qkv_bias:
        per_layer["attention.wq.bias"] = (shape.n_heads * shape.head_dim,)
        per_layer["attention.wk.bias"] = (kv,)
        per_layer["attention.wv.bias"] = (kv,)
    for layer in range(shape.n_layers):
        for name, dims in per_layer.items():
            out[f"layers.{layer}.{name}"] = dims
    return out


# ---------------------------------------------------------------------------------------------
# config.json <-> ModelShape


def _read_json(path: Path, *, limit: int, what: str) -> dict[str, Any]:
    return fileio.read_json_object(
        path,
        limit=limit,
        what=what,
        hint="give a Hugging Face model folder, as save_pretrained writes it",
    )


def _rope_parameters(hf: dict[str, Any], where: str) -> tuple[float, dict[str, Any]]:
    """(rope_theta, scaling dict or {}) from either the classic `rope_theta` + `rope_scaling`
    keys or transformers 5's `rope_parameters`."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and params:
        if not all(isinstance(v, int | float | str | type(None)) for v in params.values()):
            raise ConfigError(
                f"{where} rope_parameters", "per-layer RoPE parameters are not supported"
            )
        theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = hf.get("rope_theta", 10000.0)
        scaling = dict(hf.get("rope_scaling") or {})
    if not isinstance(theta, int | float) or theta <= 0:
        raise ConfigError(f"{where} rope_theta", f"expected a positive number, got {theta!r}")
    return float(theta), scaling


def _architecture(hf: dict[str, Any], where: str) -> str:
    """config.json's model_type, when it and `architectures` name one family import-hf reads."""
    supported = ", ".join(f"{t} ({cls})" for t, cls in HF_ARCHITECTURES.items())
    archs = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if not isinstance(archs, list) or not set(map(str, archs)) <= set(HF_ARCHITECTURES.values()):
        found = ", ".join(map(str, archs)) if isinstance(archs, list) else repr(archs)
        raise ConfigError(
            f"{where} architectures",
            f"unsupported architecture {found} (model_type {model_type!r}); "
            f"import-hf reads {supported}",
        )
    if model_type not in HF_ARCHITECTURES:
        raise ConfigError(
            f"{where} model_type",
            f"unsupported model_type {model_type!r}; import-hf reads {supported}",
        )
    if archs and set(archs) != {HF_ARCHITECTURES[model_type]}:
        raise ConfigError(
            f"{where} model_type",
            f"{model_type!r} does not match architectures {', '.join(archs)}",
        )
    return str(model_type)


def _qwen2_sliding_layers(hf: dict[str, Any], where: str) -> None:
    """Refuse a Qwen2 whose layers slide (Qwen2Config's rule: with use_sliding_window, the layers
    from max_window_layers on; or config.json's own layer_types). Every released Qwen2/2.5 and
    DeepSeek-R1-Distill-Qwen has use_sliding_window false, so nothing slides."""
    n_layers = int(hf.get("num_hidden_layers") or 0)
    types = hf.get("layer_types")
    key = "layer_types"
    if types is None:
        key = "use_sliding_window"
        slides = bool(hf.get("use_sliding_window")) and hf.get("sliding_window", 4096) is not None
        first = int(hf.get("max_window_layers", 28))
        types = ["sliding_attention" if slides and i >= first else "full_attention"
                 for i in range(n_layers)]  # fmt: skip
    if not isinstance(types, list) or any(t != "full_attention" for t in types):
        raise ConfigError(
            f"{where} {key}",
            "layers with sliding-window attention: the trainer's attention is full causal "
            "(import Qwen2 models whose layers are all full attention)",
        )


def _sliding_window(hf: dict[str, Any], architecture: str, where: str) -> int | None:
    if architecture == "qwen2":
        _qwen2_sliding_layers(hf, where)
    if architecture != "mistral":
        return None
    window = hf.get("sliding_window", MISTRAL_DEFAULT_WINDOW)
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ConfigError(f"{where} sliding_window", f"expected null or >= 1, got {window!r}")
    return window


def _refuse_unsupported(hf: dict[str, Any], architecture: str, where: str) -> None:
    if architecture == "llama":  # Qwen2's and Mistral's configs have no such flags
        for flag in ("attention_bias", "mlp_bias"):
            if hf.get(flag):
                raise ConfigError(
                    f"{where} {flag}",
                    "true: Llama's biases include the output and MLP projections, which the "
                    "trainer's model does not have",
                )
    if hf.get("hidden_act", "silu") != "silu":
        raise ConfigError(
            f"{where} hidden_act", f"{hf['hidden_act']!r}: the trainer's MLP is SwiGLU (silu)"
        )
    if float(hf.get("partial_rotary_factor") or 1.0) != 1.0:
        raise ConfigError(f"{where} partial_rotary_factor", "only 1.0 (full RoPE) is supported")


def _rope_fields(hf: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelShape's rope_* fields from config.json."""
    theta, scaling = _rope_parameters(hf, where)
    out: dict[str, Any] = {"rope_theta": theta}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type in ("default", None):
        return out
    if rope_type != "llama3":
        raise ConfigError(
            f"{where} rope_scaling.rope_type",
            f"{rope_type!r} is not supported (supported: default, llama3)",
        )
    out["rope_type"] = "llama3"
    for key, name in _ROPE_KEYS.items():
        if key not in scaling:
            raise ConfigError(f"{where} rope_scaling.{key}", "missing (needed by llama3)")
        out[name] = float(scaling[key])
    out["rope_original_max_position"] = int(out["rope_original_max_position"])
    return out


def shape_from_hf_config(hf: dict[str, Any], where: str) -> ModelShape:
    """The ModelShape of a Llama, Qwen2 or Mistral config.json, or a ConfigError saying what
    cannot be represented."""
    architecture = _architecture(hf, where)
    _refuse_unsupported(hf, architecture, where)
    window = _sliding_window(hf, architecture, where)
    try:
        dim = int(hf["hidden_size"])
        n_heads = int(hf["num_attention_heads"])
        values: dict[str, Any] = {
            "dim": dim,
            "n_layers": int(hf["num_hidden_layers"]),
            "n_heads": n_heads,
            "n_kv_heads": int(hf.get("num_key_value_heads") or n_heads),
            "ffn_dim": int(hf["intermediate_size"]),
            "vocab_size": int(hf["vocab_size"]),
            # LlamaConfig's own default is 1e-6 (the trainer's is 1e-5): absent means 1e-6.
            "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "qkv_bias": architecture == "qwen2",
            "sliding_window": window,
            "architecture": architecture,
        }
    except KeyError as exc:
        raise ConfigError(f"{where} {exc.args[0]}", "missing") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, f"a shape field is not a number ({exc})") from None
    if hf.get("head_dim") is not None and n_heads and int(hf["head_dim"]) * n_heads != dim:
        raise ConfigError(
            f"{where} head_dim",
            f"{hf['head_dim']} x {n_heads} heads != hidden_size {dim}: the trainer's head dim "
            "is hidden_size / num_attention_heads",
        )
    values.update(_rope_fields(hf, where))
    shape = ModelShape(**values)
    # The same validation a training config gets (even head dim, GQA divisibility, llama3 rules),
    # of the shape alone: the window is checked against a job's data.seq_len when the job's
    # config is loaded, so here the shortest one.
    try:
        load_config(None, [*model_sets(shape), "data.seq_len=2"])
    except ConfigError as exc:
        raise ConfigError(where, f"the model cannot represent it: {exc}") from None
    return shape


def model_section(shape: ModelShape) -> dict[str, Any]:
    """The `model:` config section that reproduces `shape` exactly: a preset's name if one is
    equal, else the tiny preset with every shape field set."""
    for name, preset in PRESETS.items():
        if preset == shape:
            return {"preset": name}
    out: dict[str, Any] = {"preset": "tiny"}
    for f in fields(ModelShape):
        value = getattr(shape, f.name)
        if f.name in OPTIONAL_DEFAULTS and value == OPTIONAL_DEFAULTS[f.name]:
            continue  # as before these fields existed (a Llama's section is unchanged)
        if value is not None:
            out[f.name] = value
    return out


def model_sets(shape: ModelShape) -> list[str]:
    return [f"model.{k}={v}" for k, v in model_section(shape).items()]


def hf_config(shape: ModelShape, *, seq_len: int, dtype: torch.dtype) -> dict[str, Any]:
    """config.json for `shape` as its architecture, in the classic keys every reader knows
    (transformers 5 converts rope_theta/rope_scaling to its rope_parameters itself)."""
    scaling: dict[str, Any] | None = None
    max_positions = seq_len
    if shape.rope_type == "llama3":
        scaling = {"rope_type": "llama3"}
        for key, name in _ROPE_KEYS.items():
            scaling[key] = getattr(shape, name)
        max_positions = max(seq_len, int(scaling["original_max_position_embeddings"]))
    per_architecture: dict[str, dict[str, Any]] = {
        "llama": {"attention_bias": False, "mlp_bias": False},
        # Biases on q/k/v are part of Qwen2's attention; no layer slides.
        "qwen2": {
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": shape.n_layers,
        },
        # Written even when null: MistralConfig's default is a 4096-token window.
        "mistral": {"sliding_window": shape.sliding_window},
    }
    return {
        "architectures": [HF_ARCHITECTURES[shape.architecture]],
        "model_type": shape.architecture,
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.dim,
        "intermediate_size": shape.ffn_dim,
        "num_hidden_layers": shape.n_layers,
        "num_attention_heads": shape.n_heads,
        "num_key_value_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "rms_norm_eps": shape.norm_eps,
        "rope_theta": shape.rope_theta,
        "rope_scaling": scaling,
        **per_architecture[shape.architecture],
        "tie_word_embeddings": shape.tie_embeddings,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }


# ---------------------------------------------------------------------------------------------
# import-hf


def _weight_files(src: Path) -> dict[str, paths.Safetensors]:
    """Hugging Face tensor name -> the safetensors file that holds it, every file checked whole
    (regular, within its limit, its size what its header describes) before a tensor is read."""
    index = src / "model.safetensors.index.json"
    if os.path.lexists(index):
        weight_map = _read_json(
            index, limit=paths.SAFETENSORS_INDEX_LIMIT, what="safetensors index"
        ).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConfigError(str(index), "has no weight_map")
        names = sorted({str(file) for file in weight_map.values()})
        for name in names:
            if Path(name).name != name or name in ("", ".", ".."):
                raise ConfigError(str(index), f"names {name!r}, which is not a file of {src}")
            if not os.path.lexists(src / name):
                raise ConfigError(str(index), f"names {name}, which is not in {src}")
        # What the files hold, as their headers say (what is loaded), not what the index says.
        return {
            tensor: file
            for file in (paths.safetensors(src / name) for name in names)
            for tensor in file.tensors
        }
    single = src / "model.safetensors"
    if not os.path.lexists(single):
        raise ConfigError(
            str(src),
            "no model.safetensors or model.safetensors.index.json (import-hf reads safetensors "
            "only; convert .bin weights with transformers' save_pretrained first)",
        )
    checked_one = paths.safetensors(single)
    return dict.fromkeys(checked_one.tensors, checked_one)


@contextmanager
def _open_safetensors(path: Path) -> Iterator[Any]:
    """`safe_open`, its own errors (a damaged header it finds first, a dtype it does not know)
    as one line naming the file."""
    try:
        with safe_open(str(path), framework="pt") as f:
            yield f
    except (SafetensorError, OSError) as exc:
        raise fileio.InputError(
            path, f"cannot be read as safetensors ({exc})", "download or copy that file again"
        ) from None


def import_hf(src: Path, out: Path, *, force: bool = False) -> ModelShape:
    """Write `out` as a trainer checkpoint folder holding `src`'s weights in fp32 at step 0.

    `out` may be missing or empty, or (with `force`) a folder an earlier import-hf wrote that
    holds nothing else; anything else is refused before a tensor is read."""
    output = paths.import_hf_paths(src, out, force=force)
    config_path = src / "config.json"
    hf = _read_json(config_path, limit=paths.HF_CONFIG_LIMIT, what="Hugging Face config.json")
    shape = shape_from_hf_config(hf, str(config_path))
    files = _weight_files(src)
    names = name_map(shape)
    expected = param_shapes(shape)
    unknown = sorted(set(files) - set(names))
    # Non-persistent buffers some exports include are not weights.
    unknown = [n for n in unknown if not n.endswith("rotary_emb.inv_freq")]
    if unknown:
        raise ConfigError(str(src), f"tensors the model has no place for: {', '.join(unknown[:3])}")
    missing = sorted(set(names) - set(files))
    if missing:
        raise ConfigError(str(src), f"missing tensors: {', '.join(missing[:3])}")
    weights: dict[str, torch.Tensor] = {}
    for path in sorted({file.path for file in files.values()}):
        with _open_safetensors(path) as f:
            for hf_name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if hf_name not in names:
                    continue
                ours = names[hf_name]
                tensor = f.get_tensor(hf_name)
                if tuple(tensor.shape) != expected[ours]:
                    raise ConfigError(
                        f"{path} {hf_name}",
                        f"shape {tuple(tensor.shape)}, config.json implies {expected[ours]}",
                    )
                weights[ours] = tensor.to(torch.float32)
    with output.staging() as tmp:
        step = tmp / step_dir_name(IMPORT_STEP)
        step.mkdir()
        write_owner(
            step, IMPORT_STEP
        )  # ours, as every folder the trainer writes: see checkpoint.py
        state_dict_saver.save({"model": weights}, checkpoint_id=str(step), no_dist=True)
        sizes = file_sizes(step)
        marker = {
            "step": IMPORT_STEP,
            "model_only": True,
            "model_shape": shape.as_dict(),
            "source": {"import_hf": str(src.resolve())},
            "bytes": sum(sizes.values()),
            "files": sizes,  # what verify() checks before the first resume
            "time": time.time(),
        }
        _write_atomic(step / MARKER, json.dumps(marker, indent=1, sort_keys=True))
        _write_atomic(tmp / LATEST, step.name + "\n")
        output.commit(tmp)
    return shape


# ---------------------------------------------------------------------------------------------
# export-hf

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _checkpoint(path: Path) -> CheckpointInfo:
    """A step folder, or a checkpoint root whose newest intact checkpoint is taken (as a resume
    would take it: verified against its metadata and recorded sizes)."""
    meta = read_marker(path)
    if meta is not None:
        info = CheckpointInfo(path=path, step=int(meta["step"]), meta=meta)
        damage = verify(info)
        if damage is not None:
            raise ConfigError(str(path), f"damaged checkpoint: {damage}")
        return info
    for info in reversed(complete_checkpoints(path)):
        if verify(info) is None:
            return info
    raise ConfigError(
        str(path), f"not a checkpoint: no intact {MARKER} in it nor in a step_NNNNNN/ below it"
    )


def _groups(items: list[tuple[str, int]], max_bytes: int) -> Iterator[list[tuple[str, int]]]:
    group: list[tuple[str, int]] = []
    size = 0
    for name, nbytes in items:
        if group and size + nbytes > max_bytes:
            yield group
            group, size = [], 0
        group.append((name, nbytes))
        size += nbytes
    if group:
        yield group


def tokenizer_files(checkpoint_meta: dict[str, Any], explicit: Path | None) -> dict[str, bytes]:
    """The tokenizer files to ship, read through the input layer: from --tokenizer (a
    tokenizer.json or its folder), else from the prepared data folder the checkpoint was trained
    on, when prepare-data wrote one there; {} when none is known."""
    if explicit is not None:
        if os.path.isdir(explicit) and not os.path.lexists(explicit / "tokenizer.json"):
            raise ConfigError("--tokenizer", f"no tokenizer.json in {explicit}")
        return paths.tokenizer_files(explicit)
    data_path = checkpoint_meta.get("data_path")
    if data_path and os.path.lexists(Path(data_path) / "tokenizer.json"):
        return paths.tokenizer_files(Path(data_path))
    return {}


def export_hf(
    checkpoint: Path,
    out: Path,
    *,
    dtype: str = "fp32",
    tokenizer: Path | None = None,
    force: bool = False,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Write `out` (safetensors, config.json, tokenizer files if known); returns the step folder.

    Reads the model's tensors only, a shard's worth at a time, so memory stays near one shard.
    `out` may be missing or empty, or (with `force`) a folder an earlier export-hf wrote that
    holds nothing else; anything else is refused before a tensor is read.
    """
    output = paths.export_hf_paths(checkpoint, out, tokenizer=tokenizer, force=force)
    info = _checkpoint(checkpoint)
    folder = info.path
    raw_shape = info.meta.get("model_shape")
    if not isinstance(raw_shape, dict):
        raise ConfigError(str(folder / MARKER), "has no model_shape")
    shape = ModelShape(**raw_shape)
    torch_dtype = _DTYPES[dtype]
    tok_files = tokenizer_files(info.meta, tokenizer)
    reader = FileSystemReader(str(folder))
    stored = reader.read_metadata().state_dict_metadata
    ours_to_hf = {ours: hf for hf, ours in name_map(shape).items()}
    items: list[tuple[str, int]] = []
    for ours, dims in param_shapes(shape).items():
        entry = stored.get(f"model.{ours}")
        if not isinstance(entry, TensorStorageMetadata) or tuple(entry.size) != dims:
            raise ConfigError(str(folder), f"model tensor {ours} missing or of another shape")
        items.append((ours, math.prod(dims) * torch_dtype.itemsize))
    groups = list(_groups(items, max_shard_bytes))
    with output.staging() as tmp:
        weight_map: dict[str, str] = {}
        total = 0
        for number, group in enumerate(groups, start=1):
            model = {
                name: torch.empty(stored[f"model.{name}"].size, dtype=torch.float32)  # type: ignore[union-attr]
                for name, _ in group
            }
            state_dict_loader.load({"model": model}, storage_reader=reader, no_dist=True)
            file = (
                "model.safetensors"
                if len(groups) == 1
                else f"model-{number:05d}-of-{len(groups):05d}.safetensors"
            )
            tensors = {ours_to_hf[n]: t.to(torch_dtype).contiguous() for n, t in model.items()}
            save_file(tensors, str(tmp / file), metadata={"format": "pt"})
            total += sum(t.numel() * t.element_size() for t in tensors.values())
            weight_map.update(dict.fromkeys(tensors, file))
        if len(groups) > 1:
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        seq_len = int(info.meta.get("seq_len") or 2048)
        config = hf_config(shape, seq_len=seq_len, dtype=torch_dtype)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if tok_files:
            for name, raw in tok_files.items():
                (tmp / name).write_bytes(raw)
            if "tokenizer_config.json" not in tok_files:
                minimal = {"tokenizer_class": "PreTrainedTokenizerFast"}
                (tmp / "tokenizer_config.json").write_text(json.dumps(minimal, indent=2) + "\n")
        output.commit(tmp)
    return folder


def _yaml_lines(section: dict[str, Any], checkpoint_dir: Path) -> list[str]:
    lines = ["model:"]
    for key, value in section.items():
        lines.append(f"  {key}: {json.dumps(value)}")
    lines += ["checkpoint:", f"  dir: {json.dumps(str(checkpoint_dir))}"]
    return lines


def print_import_summary(shape: ModelShape, src: Path, out: Path) -> None:
    print(
        f"imported {src} -> {out}/{step_dir_name(IMPORT_STEP)} "
        f"({shape.num_params():,} params, fp32, model only). Train from it with this config "
        "(the trainer loads the weights at step 0 with a fresh optimizer):",
        file=sys.stderr,
    )
    if shape.sliding_window is not None:
        print(
            f"its sliding attention window is {shape.sliding_window} tokens: the trainer's "
            f"attention is full causal, so data.seq_len may not exceed {shape.sliding_window}",
            file=sys.stderr,
        )
    print("\n".join(_yaml_lines(model_section(shape), out)))
