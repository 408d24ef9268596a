"""Fine-tuning presets (issue #29): their parameter counts against the published sizes, the memory
per GPU (assets/trainer/hyperpod_trainer/memory.py) on a case checked by hand, and `validate` /
`estimate` refusing or accepting a 14B job by that estimate."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.validators.trainer import job_memory
from hyperpod_kit.estimate import estimate
from hyperpod_trainer.memory import (
    ALLOWANCE_BYTES,
    AUTO_CHUNK_ELEMENTS,
    GIB,
    activation_bytes_per_token_layer,
    estimate_memory,
    head_bytes_per_token,
    keeps_unsharded,
)
from hyperpod_trainer.presets import PRESETS, ModelShape
from tests.conftest import REPO, WriteEnv

# The sizes the models' cards publish, in billions (two decimals).
PUBLISHED = {
    "qwen2.5-7b": 7.62,  # Qwen2.5-7B: "Number of Parameters: 7.61B" rounds 7,615,616,512 down
    "qwen2.5-14b": 14.77,
    "llama3.1-8b": 8.03,
    "mistral-7b": 7.25,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_count_matches_the_published_size(name: str) -> None:
    assert round(PRESETS[name].num_params() / 1e9, 2) == PUBLISHED[name]


def test_qwen_presets_have_qwen2_attention_and_mistral_no_window() -> None:
    for name in ("qwen2.5-7b", "qwen2.5-14b"):
        shape = PRESETS[name]
        assert (shape.qkv_bias, shape.architecture, shape.tie_embeddings) == (True, "qwen2", False)
        assert shape.vocab_size == 152064 and shape.rope_theta == 1e6
    assert PRESETS["llama3.1-8b"] == PRESETS["llama-8b"]
    assert PRESETS["mistral-7b"].sliding_window is None
    assert PRESETS["mistral-7b"].architecture == "mistral"


def test_auto_chunk_matches_the_loss() -> None:
    text = (REPO / "assets/trainer/hyperpod_trainer/loss.py").read_text()
    match = re.search(r"^_AUTO_CHUNK_ELEMENTS = (.+)$", text, re.MULTILINE)
    assert match is not None and eval(match.group(1)) == AUTO_CHUNK_ELEMENTS


def test_memory_of_the_tiny_preset_by_hand() -> None:
    # tiny: d=64, L=2, h=4 heads of 16, 2 kv heads (kv=32), f=160, V=256, untied: P=119,104.
    shape = PRESETS["tiny"]
    big = 80 * GIB  # keeps_unsharded: 6 x 119,104 is far under a quarter of it
    m = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=False,
        gpu_bytes=big,
    )  # fmt: skip
    assert m.states == 16 * 119_104 // 4 == 476_416
    assert m.unsharded == 6 * 119_104
    per_token_layer = 20 * 64 + 4 * 32 + 8 * 160 + 4 * 4 + 8  # 2,712
    assert m.activations == 2 * 64 * per_token_layer == 347_136
    # 64 tokens x (8d + 4V + 20 = 1,556); the auto chunk (2^27 // 256) exceeds 64 tokens, so
    # the whole micro-batch's fp32 logits and gradient: 64 x 256 x 8
    assert m.head == 64 * 1556 + 8 * 64 * 256 == 230_656
    assert m.allowance == ALLOWANCE_BYTES
    assert m.total == 476_416 + 714_624 + 347_136 + 230_656 + ALLOWANCE_BYTES
    # Checkpointed: each of 2 blocks keeps its bf16 input (2d per token) and one is recomputed.
    ac = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=True,
        gpu_bytes=big,
    )  # fmt: skip
    assert ac.activations == 2 * 64 * 2 * 64 + 64 * per_token_layer == 189_952
    # A loss chunk of 16 tokens: only 16 tokens' fp32 logits at once.
    chunked = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=False,
        gpu_bytes=big, loss_chunk_tokens=16,
    )  # fmt: skip
    assert chunked.head == 64 * 1556 + 8 * 16 * 256
    # On a GPU where 6P is over a quarter: the root unit and two blocks, 8 bytes per parameter.
    small = 4 * 6 * 119_104 - 4
    assert not keeps_unsharded(shape, small)
    root = 2 * 256 * 64 + 64  # embedding, output, final norm
    block = (119_104 - root) // 2
    resharded = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=False,
        gpu_bytes=small,
    )  # fmt: skip
    assert resharded.unsharded == 8 * (root + 2 * block)


def _saved_bytes(run: Callable[[], object], exclude: set[int]) -> int:
    """Bytes of the distinct storages autograd saves for backward while `run` runs, but those in
    `exclude` (parameters, constant buffers)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


@pytest.mark.parametrize(
    "shape",
    [
        ModelShape(dim=256, n_layers=3, n_heads=8, n_kv_heads=2, ffn_dim=704, vocab_size=1000),
        ModelShape(dim=192, n_layers=2, n_heads=6, n_kv_heads=6, ffn_dim=512, vocab_size=500,
                   qkv_bias=True, architecture="qwen2"),
    ],
    ids=["gqa", "qwen2-mha"],
)  # fmt: skip
def test_the_activation_counts_are_what_autograd_saves(shape: ModelShape) -> None:
    """The trainer's own modules in bf16 on CPU, eager: the bytes autograd keeps for backward are
    the formula's, to the byte: per block 20d + 4kv + 8f + 4h + 8 per token (checkpointed: 2d),
    and for the head the token ids, the final norm, the logits and the targets (8d + 2V + 20;
    the formula adds 2V for the logits' gradient in backward)."""
    torch = pytest.importorskip("torch")
    from hyperpod_trainer.loss import cross_entropy
    from hyperpod_trainer.model import Block, Transformer, rope_tables

    batch, seq = 2, 64
    tokens = batch * seq
    cos, sin = rope_tables(shape, seq)
    for checkpointing in (False, True):
        block = Block(shape, checkpointing).to(torch.bfloat16).train()
        x = torch.randn(batch, seq, shape.dim, dtype=torch.bfloat16, requires_grad=True)
        exclude = {p.untyped_storage().data_ptr() for p in block.parameters()}
        exclude |= {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
        saved = _saved_bytes(partial(block, x, cos, sin), exclude)
        expected = 2 * shape.dim if checkpointing else activation_bytes_per_token_layer(shape)
        assert saved == tokens * expected
    model = Transformer(shape, seq, False).to(torch.bfloat16).train()
    model.rope_cos, model.rope_sin = cos, sin  # fp32, as the trainer keeps them
    model.layers = torch.nn.ModuleList()  # the head alone
    exclude = {p.untyped_storage().data_ptr() for p in model.parameters()}
    exclude |= {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
    ids = torch.randint(0, shape.vocab_size, (batch, seq + 1))
    saved = _saved_bytes(lambda: cross_entropy(model(ids[:, :-1]), ids[:, 1:], 32), exclude)
    # the int64 ids are a view of one (batch, seq + 1) tensor: 8 x (seq + 1) / seq per token
    ids_bytes = 8 * batch * (seq + 1)
    assert saved == ids_bytes + tokens * (head_bytes_per_token(shape) - 2 * shape.vocab_size - 8)


def _job(write_env: WriteEnv, instance_type: str, count: int, **job: Any) -> Path:
    groups = [
        {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
         "instance_count": 1},
        {"name": "login", "role": "login", "instance_type": "ml.m5.xlarge", "instance_count": 1},
        {"name": "compute", "role": "compute", "instance_type": instance_type,
         "instance_count": count},
    ]  # fmt: skip
    settings = {"preset": "qwen2.5-14b", "nodes": count, "micro_batch_size": 1,
                "global_batch_size": 64, "seq_len": 4096, "activation_checkpointing": False,
                **job}  # fmt: skip
    return write_env({"cluster": {"instance_groups": groups}, "trainer": {"job": settings}})


def test_14b_on_too_few_g5_gpus_is_refused(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 x ml.g5.48xlarge = 16 A10G of 22 GiB: the training state alone is 16 x 14.77e9 / 16 bytes.
    path = _job(write_env, "ml.g5.48xlarge", 2, activation_checkpointing=True)
    assert cli.main(["validate", str(path)]) == 2
    _, err = capsys.readouterr()
    [line] = [x for x in err.splitlines() if "GiB per GPU" in x]
    assert "warning" not in line and "trainer.job.preset: qwen2.5-14b needs about" in line
    assert "on 16 GPUs of ml.g5.48xlarge, which have 22 GiB" in line
    assert "(states 13.8 + unsharded 15.7 + activations " in line
    # Sharding over more nodes cannot help: the rest alone is over 22 GiB.
    assert re.search(
        r"Hint: a GPU with more memory: all but the sharded training state take 2\d\.\d GiB "
        r"whatever the node count\.$",
        line,
    )


def test_the_same_14b_job_on_enough_p5_nodes_is_accepted(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(write_env, "ml.p5.48xlarge", 2, activation_checkpointing=True)
    assert cli.main(["validate", str(path)]) == 0
    _, err = capsys.readouterr()
    assert "GiB per GPU" not in err
    figure = estimate(load_environment(path).config).figure("memory_per_gpu")
    assert figure.shown.endswith(", fits") and figure.value is not None and figure.value < 80


def test_activations_alone_over_the_gpu_warn_with_the_switch_that_fits(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without checkpointing, 2 x 8 H100: 48 layers x 8192 tokens of activations exceed 80 GiB.
    path = _job(write_env, "ml.p5.48xlarge", 2, seq_len=8192)
    assert cli.main(["validate", str(path)]) == 0
    _, err = capsys.readouterr()
    [line] = [x for x in err.splitlines() if "GiB per GPU" in x]
    assert "warning" in line and "activation_checkpointing: true" in line


def test_estimate_prints_the_memory_line(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["estimate", str(REPO / "environments" / "prod-slurm.yaml")]) == 0
    out, _ = capsys.readouterr()
    [line] = [x for x in out.splitlines() if x.strip().startswith("memory per GPU")]
    assert "GiB, fits" in line and "fits in 80 GiB of ml.p5.48xlarge: states 0.9 + " in line
    assert "activation checkpointing on" in line
    # The warned job (activations over the GPU) is estimated as not fitting.
    path = _job(write_env, "ml.p5.48xlarge", 2, seq_len=8192)
    assert cli.main(["estimate", str(path)]) == 0
    out, _ = capsys.readouterr()
    [line] = [x for x in out.splitlines() if x.strip().startswith("memory per GPU")]
    assert "GiB, does not fit" in line and "activation checkpointing off" in line


def test_the_switch_reaches_the_trainer_only_when_on(write_env: WriteEnv) -> None:
    from hyperpod_kit.config.derived import trainer_settings

    def keys(on: bool) -> list[str]:
        config = load_environment(write_env({"trainer": {"job": {"activation_checkpointing": on}}}))
        return [f"{s.key}={s.value}" for s in trainer_settings(config.config.trainer.job)]

    assert "model.activation_checkpointing=true" in keys(True)
    assert not [k for k in keys(False) if k.startswith("model.activation_checkpointing")]


def test_an_elastic_job_must_fit_at_its_fewest_replicas(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """eks.yaml's job (llama-1b on 2 x ml.g5.12xlarge, 4 A10G each) scales down to one replica:
    its state is then sharded over 4 GPUs, not 8, and that is the size checked."""
    path = REPO / "environments" / "eks.yaml"
    found = job_memory(load_environment(path).config)
    assert found is not None and (found.nodes, found.ranks) == (1, 4) and found.fits
    assert found.memory.states == -(-16 * PRESETS["llama-1b"].num_params() // 4)
    # Without checkpointing it no longer fits, and the finding names the elastic size.
    data = yaml.safe_load(path.read_text())
    data["trainer"]["job"]["activation_checkpointing"] = False
    mine = write_env()  # a file of the test's own, with the eks example's content
    mine.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["validate", str(mine)]) == 0
    _, err = capsys.readouterr()
    [line] = [x for x in err.splitlines() if "GiB per GPU" in x]
    assert "on 4 GPUs of ml.g5.12xlarge (its smallest elastic size, 1 replica)" in line
    assert "activation_checkpointing: true" in line
