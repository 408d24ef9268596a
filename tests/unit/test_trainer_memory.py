"""Fine-tuning presets (issue #29): their parameter counts against the published sizes, the memory
per GPU (assets/trainer/hyperpod_trainer/memory.py) on a case checked by hand, and `validate` /
`estimate` refusing or accepting a 14B job by that estimate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.cli import main as cli
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.estimate import estimate
from hyperpod_trainer.memory import (
    ALLOWANCE_BYTES,
    AUTO_CHUNK_ELEMENTS,
    GIB,
    estimate_memory,
    keeps_unsharded,
)
from hyperpod_trainer.presets import PRESETS
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
    # tiny: d=64, L=2, 4 heads of 16, 2 kv heads (kv=32), f=160, V=256, untied: P=119,104.
    shape = PRESETS["tiny"]
    big = 80 * GIB  # keeps_unsharded: 6 x 119,104 is far under a quarter of it
    m = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=False,
        gpu_bytes=big,
    )  # fmt: skip
    assert m.states == 16 * 119_104 // 4 == 476_416
    assert m.unsharded == 6 * 119_104
    per_token_layer = 18 * 64 + 4 * 32 + 8 * 160  # 2,560
    assert m.activations == 2 * 64 * per_token_layer == 327_680
    # 64 tokens: 6d + 4V = 1,408 each; the auto chunk (2^27 // 256) exceeds 64, so 64 x 256 x 8
    assert m.head == 64 * 1408 + 8 * 64 * 256 == 221_184
    assert m.allowance == ALLOWANCE_BYTES
    assert m.total == 476_416 + 714_624 + 327_680 + 221_184 + ALLOWANCE_BYTES
    # Checkpointed: each of 2 blocks keeps its bf16 input (2d per token) and one is recomputed.
    ac = estimate_memory(
        shape, seq_len=32, micro_batch_size=2, world_size=4, activation_checkpointing=True,
        gpu_bytes=big,
    )  # fmt: skip
    assert ac.activations == 2 * 64 * 2 * 64 + 64 * per_token_layer == 180_224
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


def _job(write_env: WriteEnv, instance_type: str, count: int, **job: Any) -> Path:
    groups = [
        {"name": "controller", "role": "controller", "instance_type": "ml.m5.xlarge",
         "instance_count": 1},
        {"name": "login", "role": "login", "instance_type": "ml.m5.xlarge", "instance_count": 1},
        {"name": "compute", "role": "compute", "instance_type": instance_type,
         "instance_count": count},
    ]  # fmt: skip
    settings = {"preset": "qwen2.5-14b", "nodes": count, "micro_batch_size": 1,
                "global_batch_size": 64, "seq_len": 4096, **job}  # fmt: skip
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
    assert re.search(r"Hint: a GPU with more memory: .* alone take 2\d\.\d GiB", line)


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


def test_estimate_prints_the_memory_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["estimate", str(REPO / "environments" / "prod-slurm.yaml")]) == 0
    out, _ = capsys.readouterr()
    [line] = [x for x in out.splitlines() if x.strip().startswith("memory per GPU")]
    assert "GiB, does not fit" in line and "80 GiB of ml.p5.48xlarge" in line
