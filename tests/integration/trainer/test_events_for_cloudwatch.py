"""The trainer's events file carries what the monitoring stack's metric filters select.

A real run (one process, CPU) writes `metrics.events_file`; every line is the same JSON as on
stdout, and each training metric filter (`{ ($.event = E) && ($.field = *) }`, value `$.field`)
finds a numeric value in the lines of its event. A renamed field would leave a dashboard graph
empty without any error anywhere else, so the check is against the trainer's own output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_kit.constructs.monitoring import TRAINING_METRICS
from hyperpod_kit.paths import ASSETS

np = pytest.importorskip("numpy")

pytestmark = pytest.mark.trainer

GPU_ONLY = {"$.mfu"}  # needs the device's peak FLOPs: computed on GPUs only


def test_every_training_metric_filter_finds_its_field_in_a_real_run(
    harness, tmp_path: Path
) -> None:
    events = tmp_path / "spool"
    events.mkdir()
    held_out = tmp_path / "held"  # for the "eval" lines
    held_out.mkdir()
    np.save(held_out / "tokens.npy", (np.arange(3 * 32 + 1) % 256).astype(np.uint16))
    sets = harness.with_recipe(
        "train.steps=3",
        "train.global_batch_size=2",
        f"checkpoint.dir={tmp_path / 'ckpt'}",
        "checkpoint.every_steps=1",
        f"metrics.events_file={events}/{{job_id}}.jsonl",
        f"data.eval_path={held_out}",
    )
    result = harness.direct(
        [arg for s in sets for arg in ("--set", s)],
        timeout=120,
        env={"SLURM_JOB_ID": "5150", "HYPERPOD_TRAINER_JOB_ID": ""},
    )
    assert result.returncode == 0, result.explain()
    written = (events / "5150.jsonl").read_text().splitlines()
    on_stdout = [line for line in result.stdout.splitlines() if line.startswith('{"event"')]
    assert written == on_stdout
    lines = [json.loads(line) for line in written]
    for name, (event, field, _unit, _statistic) in TRAINING_METRICS.items():
        if field in GPU_ONLY:
            source = (ASSETS / "trainer" / "hyperpod_trainer" / "train.py").read_text()
            assert f'fields["{field[2:]}"]' in source, name
            continue
        values = [e[field[2:]] for e in lines if e["event"] == event and field[2:] in e]
        assert values, f"{name}: no {event!r} line has {field}"
        assert all(isinstance(v, int | float) for v in values), name
    exits = [e for e in lines if e["event"] == "exit"]
    assert exits and re.fullmatch(r"[a-z_]+", exits[-1]["reason"])
