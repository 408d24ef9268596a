"""Numerics: RoPE in fp32 under FSDP's bf16 policy, non-finite steps skipped and counted (and the
run stopped after too many in a row), and per-block torch.compile agreeing with eager."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hyperpod_trainer")
torch = pytest.importorskip("torch")

from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

import hyperpod_trainer.model as model_module  # noqa: E402
from hyperpod_trainer.distributed import init_distributed, shutdown  # noqa: E402
from hyperpod_trainer.presets import ModelShape  # noqa: E402

pytestmark = pytest.mark.trainer


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    yield
    shutdown()


def _rope_reference(x: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """The rotation of `x` (batch, heads, seq, head_dim) computed in fp64 from fp64 angles."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(x.shape[2], dtype=torch.float64), inv)
    angles = torch.cat([angles, angles], dim=-1)
    xd = x.double()
    half = head_dim // 2
    rotated = torch.cat([-xd[..., half:], xd[..., :half]], dim=-1)
    return xd * angles.cos() + rotated * angles.sin()


# (head_dim, rope theta, positions): the Llama presets' head dims and theta, over the sequence
# lengths of the example jobs (llama-1b at 2048, llama-8b at 8192).
ROPE_CASES = [(64, 500000.0, 2048), (128, 500000.0, 8192)]


@pytest.mark.parametrize(("head_dim", "theta", "seq"), ROPE_CASES)
def test_rope_is_fp32_in_a_bf16_fsdp_forward(
    world_of_one, monkeypatch: pytest.MonkeyPatch, head_dim: int, theta: float, seq: int
) -> None:
    """A bf16 forward through the FSDP-wrapped model rotates q and k as an fp64 reference
    would, rounded once to bf16; with cos/sin cast to bf16 a third of the values are not."""
    ctx = init_distributed("cpu")
    shape = ModelShape(
        dim=2 * head_dim,
        n_layers=1,
        n_heads=2,
        n_kv_heads=2,
        ffn_dim=64,
        vocab_size=64,
        rope_theta=theta,
    )
    model = model_module.build_model(
        shape,
        seq_len=seq,
        activation_checkpointing=False,
        mesh=ctx.mesh,
        device=ctx.device,
        bf16=True,
        meta_init=False,
        seed=0,
    )
    calls: list[tuple[torch.Tensor, torch.Tensor, torch.dtype]] = []
    rope = model_module.apply_rope

    def recording_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = rope(x, cos, sin)
        calls.append((x.detach(), out.detach(), cos.dtype))
        return out

    monkeypatch.setattr(model_module, "apply_rope", recording_rope)
    # Attention itself is not under test: skip the (seq x seq) products to keep this quick.
    monkeypatch.setattr(
        model_module.F, "scaled_dot_product_attention", lambda q, k, v, **_: v.clone()
    )
    with torch.no_grad():
        model(torch.randint(0, shape.vocab_size, (1, seq)))
    assert len(calls) == 2  # q and k of the one layer
    for x, out, table_dtype in calls:
        assert x.dtype == torch.bfloat16  # the bf16 policy is really in force
        assert table_dtype == torch.float32, "RoPE tables were cast to bf16"
        expected = _rope_reference(x, head_dim, theta).to(torch.bfloat16)
        wrong = (out != expected).float().mean().item()
        # Measured: 0 to 2.4e-5 in fp32 (ties of the final rounding); ~0.3 with bf16 tables.
        assert wrong < 1e-3, f"{wrong:.1%} of rotated values are not the rounded fp64 result"


def _tensors(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, dict):
        return {
            k: v for key, val in tree.items() for k, v in _tensors(val, f"{prefix}/{key}").items()
        }
    return {prefix: tree} if isinstance(tree, torch.Tensor) else {}


def _checkpoint_tensors(path: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    flat = tmp_path / f"{path.name}.pt"
    dcp_to_torch_save(path, flat)
    loaded = torch.load(flat, weights_only=False)
    return _tensors({"model": loaded["model"], "optim": loaded["optim"]["state"]})


@pytest.mark.parametrize("fused", [True, False], ids=["fused-adamw", "foreach-adamw"])
def test_a_non_finite_step_is_skipped_and_counted(
    harness, reference, tmp_path: Path, fused: bool
) -> None:
    ckpt = tmp_path / "ckpt"
    run = harness.launch(
        2,
        harness.with_recipe(
            f"optim.fused={str(fused).lower()}",
            f"checkpoint.dir={ckpt}",
            "checkpoint.every_steps=1",
            "checkpoint.keep_last=20",
            "fault.nonfinite_at_step=5",
            "train.stop_at_step=7",
        ),
    )
    assert run.returncode == 0, run.explain()
    steps = {e["step"]: e for e in run.of("step")}
    assert sorted(steps) == list(range(1, 8))
    if fused:  # fused is the default: the reference run's computation, bitwise
        assert {s: steps[s]["loss"] for s in range(1, 5)} == {
            s: reference.losses[s] for s in range(1, 5)
        }
    assert math.isnan(steps[5]["loss"]) and steps[5]["skipped"] is True
    assert steps[5]["nonfinite_total"] == 1
    assert all(math.isfinite(steps[s]["loss"]) and not steps[s]["skipped"] for s in (6, 7))
    assert run.of("exit")[-1] == {
        "event": "exit",
        "reason": "stop_at_step",
        "step": 7,
        "nonfinite_total": 1,
    }
    # The skipped step changed nothing: weights and optimizer state after step 5 are those
    # after step 4, bit for bit; step 6 changes them again.
    after4 = _checkpoint_tensors(ckpt / "step_000004", tmp_path)
    after5 = _checkpoint_tensors(ckpt / "step_000005", tmp_path)
    after6 = _checkpoint_tensors(ckpt / "step_000006", tmp_path)
    assert after5.keys() == after4.keys()
    for key in after4:
        assert torch.equal(after5[key], after4[key]), key
    assert not torch.equal(after6["/model/output.weight"], after5["/model/output.weight"])


def test_too_many_non_finite_steps_stop_with_the_last_good_checkpoint(
    harness, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    run = harness.launch(
        2,
        harness.with_recipe(
            f"checkpoint.dir={ckpt}",
            "checkpoint.every_steps=4",
            "fault.nonfinite_at_step=5",
            "fault.nonfinite_steps=100",
            "train.max_nonfinite_steps=3",
        ),
    )
    assert run.returncode != 0
    assert "exitcode  : 3" in run.stderr  # the ranks' own exit code, as torchrun reports it
    assert "3 steps in a row had a non-finite loss or gradient (last: step 7)" in run.stderr
    assert run.of("exit")[-1] == {
        "event": "exit",
        "reason": "non_finite",
        "step": 7,
        "nonfinite_total": 3,
    }
    assert max(e["step"] for e in run.of("step")) == 6  # step 7 is not reported as trained
    assert [e["step"] for e in run.of("checkpoint")] == [4]
    assert (ckpt / "latest").read_text().strip() == "step_000004"
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_000004"]
    # Final: recorded, so a restart (auto-resume) exits at once instead of diverging again.
    assert json.loads((ckpt / "FAILED.json").read_text())["exit_code"] == 3
    again = harness.direct(["--set", f"checkpoint.dir={ckpt}", "--set", "train.steps=12"])
    assert again.returncode == 3, again.explain()
    assert not again.events


def test_compiled_blocks_agree_with_eager_over_20_steps(harness, tmp_path: Path) -> None:
    """Per-block torch.compile (inductor, CPU) under FSDP on 2 ranks versus eager.

    Inductor fuses and reorders floating-point work, so bitwise equality is not expected; the
    measured worst case over the 20 steps is 2e-7 relative (torch 2.13, CPU). 1e-5 is ~50x that,
    while a wrong gradient or a missed update moves the loss by ~1e-2 per step here.
    """
    recipe = harness.with_recipe("train.steps=20", "train.global_batch_size=8")
    eager = harness.launch(2, [*recipe, "model.compile=false"])
    compiled = harness.launch(2, [*recipe, "model.compile=true"])
    assert eager.returncode == 0, eager.explain()
    assert compiled.returncode == 0, compiled.explain()
    assert "compile=True" in compiled.stderr and "compile=False" in eager.stderr
    a, b = eager.losses(), compiled.losses()
    assert sorted(a) == sorted(b) == list(range(1, 21))
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=1e-5), (step, a[step], b[step])
    assert a[20] < a[1] - 0.3  # the comparison covers a curve that really moved
