"""The trainer benchmark's torchtitan job, for torchtitan 0.3.0 (the pinned release).

Runs only inside the torchtitan venv that benchmarks/trainer.py makes (torchtitan is not a
dependency of this project). torchtitan 0.3.0 has no TOML job files and no
`TransformerModelArgs`: a job is a Python function returning a `Trainer.Config`, named on the
command line (`--module torchtitan_job --config hyperpod_bench`) and parsed by torchtitan's own
`ConfigManager` (tyro). `hyperpod_bench` reads the job that `benchmarks/trainer.py` wrote from
its arguments (JSON) and turns it into torchtitan's config objects: a Llama 3 model of our
preset's exact shape, registered as torchtitan flavour "hyperpod" and built by torchtitan's own
layer builder and `model_registry`.

    python benchmarks/torchtitan_job.py describe JOB.json            # JSON on stdout
    torchrun --nproc-per-node=N benchmarks/torchtitan_job.py train JOB.json

`describe` parses the job through `ConfigManager` as `torchtitan.train` does, builds the model
on the meta device as `Trainer.__init__` does, and prints its shapes and torchtitan's own
parameter and FLOPs count, and, once the data exist, the tokenizer's vocabulary and one batch
from torchtitan's data loader: the benchmark checks it against our preset before it measures,
and a CPU test checks it without a GPU (tests/integration/trainer/test_torchtitan_job.py).
`train` is `python -m torchtitan.train` on the job.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

JOB_ENV = "HYPERPOD_TORCHTITAN_JOB"
FLAVOR = "hyperpod"
CONFIG_ARGS = ["--module", "torchtitan_job", "--config", "hyperpod_bench"]


def _job() -> dict[str, Any]:
    job: dict[str, Any] = json.loads(Path(os.environ[JOB_ENV]).read_text())
    return job


def _model_config(model: dict[str, Any], attn_backend: str) -> Any:
    """Llama3Model.Config of our shape, laid out as torchtitan's own flavours are (its private
    layer builder and initialisers: a drift there fails the CPU test, not a GPU run)."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _NORM_INIT,
        Llama3Model,
        _build_llama3_layers,
        _output_linear_init,
    )

    dim, vocab, eps = model["dim"], model["vocab_size"], model["norm_eps"]
    scaling = model["rope_scaling"]
    rope = ComplexRoPE.Config(
        dim=dim // model["n_heads"],
        max_seq_len=model["max_seq_len"],
        theta=model["rope_theta"],
        scaling="none" if scaling is None else "llama",
        **(
            {}
            if scaling is None
            else {
                "scaling_factor": scaling["factor"],
                "low_freq_factor": scaling["low_freq_factor"],
                "high_freq_factor": scaling["high_freq_factor"],
                "original_max_position_embeddings": scaling["original_max_position"],
            }
        ),
    )
    layers = _build_llama3_layers(
        n_layers=model["n_layers"],
        dim=dim,
        n_heads=model["n_heads"],
        n_kv_heads=model["n_kv_heads"],
        hidden_dim=model["ffn_dim"],  # 0.3.0 takes the final hidden size: no multiple_of rounding
        rope=rope,
        fuse_qkv=True,
        attn_backend=attn_backend,
    )
    for layer in layers:
        layer.attention_norm.eps = eps
        layer.ffn_norm.eps = eps
    tied = model["tie_embeddings"]
    return Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=vocab,
            embedding_dim=dim,
            param_init=_EMBEDDING_SKIP_INIT if tied else _EMBEDDING_INIT,
        ),
        norm=RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=dim, out_features=vocab, param_init=_output_linear_init(dim)
        ),
        layers=layers,
    )


def hyperpod_bench() -> Any:
    """The `--config` function torchtitan's ConfigManager calls: the benchmark's job."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.llama3 import llama3_configs, model_registry
    from torchtitan.trainer import Trainer

    job = _job()
    model = job["model"]
    llama3_configs[FLAVOR] = lambda attn_backend, tp_gemm_backend="default": _model_config(
        model, attn_backend
    )
    spec = model_registry(FLAVOR, attn_backend=job["attn_backend"])
    t, o = job["training"], job["optimizer"]
    return Trainer.Config(
        model_spec=spec,
        hf_assets_path=job["hf_assets_path"],
        dump_folder=job["dump_folder"],
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=model["vocab_size"])
        ),
        optimizer=default_adamw(
            lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"]
        ),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=o["warmup_steps"],
            decay_type="cosine",
            min_lr_factor=o["min_lr"] / o["lr"],
        ),
        training=TrainingConfig(
            local_batch_size=t["local_batch_size"],
            global_batch_size=t["global_batch_size"],
            seq_len=t["seq_len"],
            max_norm=t["max_norm"],
            steps=t["steps"],
            mixed_precision_param="bfloat16",
        ),
        dataloader=HuggingFaceTextDataLoader.Config(
            dataset="c4_test", dataset_path=job["dataset_path"]
        ),
        metrics=MetricsProcessor.Config(log_freq=job["log_freq"]),
        parallelism=ParallelismConfig(data_parallel_shard_degree=-1),
        compile=CompileConfig(enable=job["compile"], components=["model", "loss"]),
        activation_checkpoint=None,
        checkpoint=CheckpointManager.Config(enable=False),
    )


def describe() -> dict[str, Any]:
    """Parse the job through torchtitan's ConfigManager and build its model on the meta
    device, as `torchtitan.train` / `Trainer.__init__` do, without a process group; then its
    tokenizer and data loader, if the data exist."""
    import torch
    from torchtitan.config import ConfigManager

    config = ConfigManager().parse_args(CONFIG_ARGS)
    model_config = config.model_spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        model = model_config.build()
    nparams, flops = model_config.get_nparams_and_flops(model, config.training.seq_len)
    block = model.layers["0"]
    attention = block.attention
    rope = attention.rope.config
    t = config.training
    return {
        "torchtitan": _version(),
        "flavor": config.model_spec.flavor,
        "dim": model_config.dim,
        "n_layers": len(model.layers),
        "n_heads": attention.n_heads,
        "n_kv_heads": attention.n_kv_heads,
        "head_dim": attention.head_dim,
        "vocab_size": model.tok_embeddings.weight.shape[0],
        "ffn_dim": block.feed_forward.w1.weight.shape[0],
        "norm_eps": block.attention_norm.eps,
        "rope_theta": rope.theta,
        "rope_scaling": rope.scaling,
        "rope_factor": rope.scaling_factor,
        "rope_low_freq_factor": rope.low_freq_factor,
        "rope_high_freq_factor": rope.high_freq_factor,
        "rope_original_max_position": rope.original_max_position_embeddings,
        "tied": model.lm_head.weight is model.tok_embeddings.weight,
        "parameters": {name: list(p.shape) for name, p in model.named_parameters()},
        "nparams": nparams,
        "flops_per_token": flops,
        "training": {
            "local_batch_size": t.local_batch_size,
            "global_batch_size": t.global_batch_size,
            "seq_len": t.seq_len,
            "steps": t.steps,
            "max_norm": t.max_norm,
        },
        "dataset_path": config.dataloader.dataset_path,
        "compile": config.compile.enable,
        "checkpoint": config.checkpoint.enable,
        "log_freq": config.metrics.log_freq,
        "data": _describe_data(config) if Path(config.hf_assets_path).is_dir() else None,
    }


def _describe_data(config: Any) -> dict[str, Any]:
    tokenizer = config.tokenizer.build(tokenizer_path=config.hf_assets_path)
    t = config.training
    loader = config.dataloader.build(
        dp_world_size=1,
        dp_rank=0,
        tokenizer=tokenizer,
        seq_len=t.seq_len,
        local_batch_size=t.local_batch_size,
        snapshot_every_n_steps=None,
    )
    inputs, labels = next(iter(loader))
    return {
        "vocab_size": tokenizer.get_vocab_size(),
        "inputs": {name: list(value.shape) for name, value in inputs.items()},
        "labels": list(labels.shape),
        "max_token": int(inputs["input"].max()),
    }


def _version() -> str:
    from importlib.metadata import version

    return version("torchtitan")


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] not in ("describe", "train"):
        sys.exit(f"usage: {sys.argv[0]} describe|train JOB.json")
    os.environ[JOB_ENV] = str(Path(argv[1]).resolve())  # read by hyperpod_bench()
    if argv[0] == "describe":
        print(json.dumps(describe()))
        return
    from torchtitan.train import main as train

    sys.argv = [sys.argv[0], *CONFIG_ARGS]
    train()


if __name__ == "__main__":
    main(sys.argv[1:])
