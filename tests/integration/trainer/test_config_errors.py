"""Bad configuration: exit code 2 and one line on stderr that names the field, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

pytestmark = pytest.mark.trainer

CASES = [
    # (yaml file content or None, --set overrides, field the message must name)
    (None, ["train.stepz=3"], "train.stepz: unknown field"),
    (None, ["train.steps=ten"], "train.steps: expected an integer, got 'ten'"),
    (None, ["train.micro_batch_size=0"], "train.micro_batch_size: must be >= 1, got 0"),
    (None, ["optim.lr=-1e-3"], "optim.lr: must be > 0"),
    (None, ["train.device=tpu"], "train.device: must be one of auto, cpu, cuda; got 'tpu'"),
    (None, ["data.source=tokens"], "data.path: required when data.source is tokens"),
    (None, ["model.n_heads=3"], "model.dim: 64 is not divisible by n_heads 3"),
    (
        None,
        ["data.source=tokens", "data.path=/nonexistent"],
        "data.path: /nonexistent is not a dir",
    ),
    (None, ["eval.every_steps=5"], "data.eval_path: required when eval.every_steps > 0"),
    (None, ["eval.max_sequences=0"], "eval.max_sequences: must be >= 1, got 0"),
    (None, ["data.eval_path=/nonexistent"], "data.eval_path: /nonexistent is not a dir"),
    (None, ["train.global_batch_size=11"], "train.global_batch_size: 11 is not a multiple"),
    (None, ["checkpoint.every_steps=5"], "checkpoint.dir: required when"),
    (None, ["train.steps"], "--set: expected KEY=VALUE"),
    (
        None,
        ["metrics.events_file=/tmp/{rank}.jsonl"],
        "metrics.events_file: '/tmp/{rank}.jsonl': a file path where only {job_id} is substituted",
    ),
    ("model:\n  preset: llama-70b\n", [], "model.preset: unknown preset 'llama-70b'"),
    ("train: [1, 2]\n", [], "train: expected a mapping, got list"),
    ("train:\n  steps: 10\n   bad: indent\n", [], "--config: "),
    ("optim:\n  warmup_steps: 500\n", [], "optim.warmup_steps: 500 exceeds train.steps 100"),
]


@pytest.mark.parametrize(("content", "sets", "expected"), CASES)
def test_bad_config_is_one_line_exit_2(
    harness, tmp_path: Path, content: str | None, sets: list[str], expected: str
) -> None:
    args: list[str] = []
    if content is not None:
        path = tmp_path / "cfg.yaml"
        path.write_text(content)
        args += ["--config", str(path)]
    for item in sets:
        args += ["--set", item]
    result = harness.direct(args)
    assert result.returncode == 2, result.explain()
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hyperpod_trainer: config error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("example", "world_size"),
    [("tiny-cpu.yaml", 2), ("llama-1b-fsx.yaml", 16), ("llama-8b-fsx.yaml", 16)],
)
def test_example_configs_are_valid(harness, example: str, world_size: int) -> None:
    path = Path(__file__).parents[3] / "assets" / "trainer" / "examples" / example
    result = harness.direct(["--config", str(path), "--check", "--world-size", str(world_size)])
    assert result.returncode == 0, result.explain()
    resolved = json.loads(result.stdout)
    train = resolved["config"]["train"]
    assert (
        resolved["grad_accum"] * train["micro_batch_size"] * world_size
        == (train["global_batch_size"])
    )


def test_missing_config_file_names_it(harness, tmp_path: Path) -> None:
    result = harness.direct(["--config", str(tmp_path / "nope.yaml")])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"hyperpod_trainer: config error: {tmp_path / 'nope.yaml'}: no such file. "
        "Hint: give the YAML file of the job."
    )


def test_unknown_flag_is_one_line_exit_2(harness) -> None:
    result = harness.direct(["--nproc", "2"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unrecognized arguments: --nproc 2" in result.stderr


def test_check_validates_the_split_for_a_world_size(harness, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("train:\n  global_batch_size: 12\n  micro_batch_size: 2\n")
    ok = harness.direct(["--config", str(cfg), "--check", "--world-size", "3"])
    assert ok.returncode == 0, ok.explain()
    resolved = json.loads(ok.stdout)
    assert resolved["grad_accum"] == 2
    assert resolved["config"]["train"]["global_batch_size"] == 12
    bad = harness.direct(["--config", str(cfg), "--check", "--world-size", "5"])
    assert bad.returncode == 2
    assert "train.global_batch_size: 12 is not divisible by micro_batch_size 2 x world_size 5" in (
        bad.stderr
    )


def test_yaml_and_overrides_combine(harness, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("optim:\n  lr: 3.0e-4\ntrain:\n  steps: 50\n")
    result = harness.direct(["--config", str(cfg), "--set", "optim.lr=1e-3", "--check"])
    assert result.returncode == 0, result.explain()
    resolved = json.loads(result.stdout)["config"]
    assert resolved["optim"]["lr"] == 1e-3  # YAML 1.1 would read "1e-3" as a string
    assert resolved["train"]["steps"] == 50


def test_resume_refuses_a_checkpoint_of_another_model_shape(harness, tmp_path: Path) -> None:
    common = ["--set", "train.steps=4", "--set", "optim.warmup_steps=1"]
    common += ["--set", f"checkpoint.dir={tmp_path / 'ckpt'}"]
    first = harness.direct([*common, "--set", "train.stop_at_step=2"], timeout=120)
    assert first.returncode == 0, first.explain()
    other = harness.direct([*common, "--set", "model.n_layers=3"], timeout=120)
    assert other.returncode == 2, other.explain()
    (line,) = [ln for ln in other.stderr.splitlines() if "config error" in ln]
    assert line.startswith("hyperpod_trainer: config error: model: ")
    assert "step_000002 holds a different model shape" in line
    assert "Traceback" not in other.stderr
    assert not other.of("step")
