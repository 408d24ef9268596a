"""The verify suite end to end on real Slurm daemons, two slurmd nodes on loopback, as
`make verify-demo` runs it (hyperpod_kit/local/verify.py, docs/verify.md): the node command from
the lifecycle folder submits its own jobs, the all-reduce job rendered from the bundled template
runs `bench-allreduce` under torchrun over gloo between the two nodes, the FSx test runs on a
local folder, the Studio check on partitions made here; then the report judges the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.local import LocalSlurm, unavailable_reason
from hyperpod_kit.local.verify import LocalRunResult, report_into, run_local, workspace
from tests.integration.slurm.conftest import _unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.trainer, pytest.mark.slow]

SMALL = {"max_bytes": 2**21, "fsx_mib": 8, "fsx_files": 40}


@pytest.fixture(autouse=True)
def _slurm_here() -> None:
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(reason)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _of(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


@pytest.fixture(scope="module")
def healthy() -> Iterator[tuple[LocalRunResult, Path]]:
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(reason)
    with workspace() as work:  # munged wants every folder above its socket searchable
        yield run_local(work, **SMALL), work


def test_every_check_runs_on_both_nodes_and_the_records_are_one_run(
    healthy: tuple[LocalRunResult, Path],
) -> None:
    result, work = healthy
    assert result.returncode == 0, result.output
    records = _records(result.results)
    run = records[0]["run"]
    assert all(r["run"] == run for r in records)
    assert records[0]["type"] == "run" and records[-1]["type"] == "end"
    (group,) = records[0]["groups"]
    assert records[0]["local"] is True and group["unavailable"] == []
    nodes = sorted(group["nodes"])
    assert len(nodes) == 2
    # one task on each node, and each node's hardware (none here: no GPU, no EFA)
    (scheduling,) = _of(records, "scheduling")
    assert scheduling["nodes"] == nodes and scheduling["state"] == "COMPLETED"
    assert sorted(r["node"] for r in _of(records, "node")) == nodes
    assert all(r["gpus"] == 0 and r["efa_provider"] is None for r in _of(records, "node"))
    # the all-reduce over both nodes, then the one pair; nccl-tests' formula on every row
    everyone, pair = _of(records, "allreduce")
    assert (everyone["scope"], pair["scope"]) == ("all", "pair")
    # (in the order torchrun's rendezvous ranked the nodes)
    assert sorted(everyone["nodes"]) == sorted(pair["nodes"]) == nodes
    assert everyone["backend"] == "gloo"
    for record in (everyone, pair):
        sizes = [row["size_bytes"] for row in record["rows"]]
        assert sizes == [2**20, 2**21]
        n = record["ranks"]
        for row in record["rows"]:
            algbw = row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9
            assert row["algbw_gb_s"] == pytest.approx(algbw, rel=1e-3)
            assert row["busbw_gb_s"] == pytest.approx(algbw * 2 * (n - 1) / n, rel=1e-3)
    # FSx: every node at once, each node's figures, nothing left behind but the records
    (fsx,) = _of(records, "fsx")
    assert [p["node"] for p in fsx["per_node"]] == nodes and fsx["bytes_per_node"] == 8 * 2**20
    assert fsx["write_mb_s"] > 0 and fsx["read_mb_s"] > 0 and fsx["metadata_ops_s"] > 0
    assert not Path(fsx["path"]).exists()
    studio = {r["user"]: r for r in _of(records, "studio")}
    assert set(studio) == {"alice", "bob"}
    assert all(r["exists"] and r["mode"] == r["expected_mode"] == "0700" for r in studio.values())
    assert all(r["owner_uid"] == r["expected_uid"] for r in studio.values())
    assert not _of(records, "error")
    # the same lines in the jobs' spool, for the log shipper
    assert (work / "spool" / f"{run}.jsonl").read_text() == result.results.read_text()


def _down_and_wrong(slurm: LocalSlurm, fsx: Path) -> None:
    slurm.lose_node("verify test: down", node=slurm.nodes[1])
    (fsx / "bob").chmod(0o755)


def test_the_report_judges_the_run_and_draws_its_pictures(
    healthy: tuple[LocalRunResult, Path], tmp_path: Path
) -> None:
    """A local run has no instance type: no figure is judged against a floor (no guess); the
    scheduling and Studio checks pass; report.json and both pictures are written."""
    result, _ = healthy
    said: list[str] = []
    assert report_into(tmp_path, result.results, say=said.append) == 0
    document = json.loads((tmp_path / "report.json").read_text())
    verdicts = {(r["check"], r["subject"]): r["verdict"] for r in document["rows"]}
    assert {v for (check, _), v in verdicts.items() if check.startswith(("allreduce", "fsx"))} == {
        "no-floor"
    }
    assert [v for (check, _), v in verdicts.items() if check in ("scheduling", "studio")] == [
        "pass"
    ] * 3
    for picture in ("allreduce.png", "fsx.png"):
        assert (tmp_path / picture).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (
        said[0].splitlines()[-1].startswith("verdict: PASS (3 pass, 0 below, 9 no floor, 0 error)")
    )


def test_a_node_down_is_named_the_checks_run_on_the_rest_and_the_report_says_below(
    tmp_path: Path,
) -> None:
    with workspace() as work:
        result = run_local(work, before=_down_and_wrong, **SMALL)
        records = _records(result.results)
        said: list[str] = []
        assert report_into(tmp_path, result.results, say=said.append) == 1
    assert result.returncode == 0, result.output
    (group,) = records[0]["groups"]
    ((down),) = group["unavailable"]
    assert down["state"].startswith("down") and down["reason"] == "verify test: down"
    (scheduling,) = _of(records, "scheduling")
    assert scheduling["expected"] == 2 and len(scheduling["nodes"]) == 1
    (everyone,) = _of(records, "allreduce")  # one node: no pair
    assert len(everyone["nodes"]) == 1
    studio = {r["user"]: r for r in _of(records, "studio")}
    assert studio["bob"]["mode"] == "0755" and studio["alice"]["mode"] == "0700"
    document = json.loads((tmp_path / "report.json").read_text())
    below = {(r["check"], r["subject"]) for r in document["rows"] if r["verdict"] == "below"}
    assert below == {("scheduling", "partition compute"), ("studio", "bob")}
