"""Hugging Face Llama checkpoints in and out: `import-hf SRC OUT` and `export-hf CHECKPOINT OUT`.

`import-hf` reads a Llama-family model folder (config.json and model.safetensors, or shards named
by model.safetensors.index.json) and writes a checkpoint folder the trainer resumes from:

    OUT/step_000000/   DCP shards + .metadata + COMPLETE.json ("model_only": true)
    OUT/latest

with the model's fp32 weights only: the trainer loads them into a fresh optimizer at step 0 with
its own data order (train.py, `model_only`). `export-hf` reads only the model's tensors from a
checkpoint (never the optimizer state, which is twice the model) and writes safetensors shards,
config.json and, when known, the tokenizer, for `transformers.AutoModelForCausalLM`.

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
from .presets import PRESETS, ModelShape

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
_LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)
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
    for layer in range(shape.n_layers):
        for hf, ours in _LAYER_NAMES.items():
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


def _refuse_unsupported(hf: dict[str, Any], where: str) -> None:
    archs = hf.get("architectures") or []
    if hf.get("model_type") != "llama" or not set(archs) <= set(_LLAMA_ARCHITECTURES):
        found = ", ".join(archs) or f"model_type {hf.get('model_type')!r}"
        raise ConfigError(
            f"{where} architectures",
            f"unsupported architecture {found}; import-hf reads Llama models "
            "(model_type llama, LlamaForCausalLM)",
        )
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ConfigError(f"{where} {flag}", "true: the trainer's model has no bias terms")
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
    """The ModelShape of a Llama config.json, or a ConfigError saying what cannot be represented."""
    _refuse_unsupported(hf, where)
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
    # The same validation a training config gets (even head dim, GQA divisibility, llama3 rules).
    try:
        load_config(None, model_sets(shape))
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
        if value is not None:
            out[f.name] = value
    return out


def model_sets(shape: ModelShape) -> list[str]:
    return [f"model.{k}={v}" for k, v in model_section(shape).items()]


def hf_config(shape: ModelShape, *, seq_len: int, dtype: torch.dtype) -> dict[str, Any]:
    """config.json for `shape`, in the classic keys every Llama reader knows (transformers 5
    converts rope_theta/rope_scaling to its rope_parameters itself)."""
    scaling: dict[str, Any] | None = None
    max_positions = seq_len
    if shape.rope_type == "llama3":
        scaling = {"rope_type": "llama3"}
        for key, name in _ROPE_KEYS.items():
            scaling[key] = getattr(shape, name)
        max_positions = max(seq_len, int(scaling["original_max_position_embeddings"]))
    return {
        "architectures": list(_LLAMA_ARCHITECTURES),
        "model_type": "llama",
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
        "attention_bias": False,
        "mlp_bias": False,
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
    print("\n".join(_yaml_lines(model_section(shape), out)))
