"""`bench-allreduce` under real torchrun launches on CPU (gloo), several "nodes" on loopback.

Each node is its own torchrun launch (static rendezvous on 127.0.0.1, --node-rank), as Slurm
starts one per node; each names itself with --node-name (they share one host name here). The
records rank 0 appends are checked against the verify contract and the nccl-tests formulas, and
the bad values of the command line are refused in one line before torch is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hyperpod_trainer import cli, collective
from hyperpod_trainer.local import free_port
from tests.integration.trainer.conftest import trainer_env

pytestmark = pytest.mark.trainer

RUN = "verify-20261129T080000Z"
SMALL = ["--min-bytes", "1M", "--max-bytes", "4M", "--iters", "3", "--warmup", "1"]
ROW_KEYS = {"size_bytes", "count", "iterations", "time_us", "algbw_gb_s", "busbw_gb_s"}
RECORD_KEYS = {
    "run", "type", "scope", "group", "nodes", "ranks", "ranks_per_node", "backend", "dtype",
    "net_provider", "rows",
}  # fmt: skip


def launch_nodes(
    workdir: Path, nnodes: int, nproc: int, args: list[str], timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """`nnodes` torchrun launches of `bench-allreduce ARGS`, node i named node-i."""
    port = free_port()
    procs = []
    for node in range(nnodes):
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            f"--nnodes={nnodes}", f"--node-rank={node}", "--master-addr=127.0.0.1",
            f"--master-port={port}", "--max-restarts=0",
            "-m", "hyperpod_trainer", "bench-allreduce", *args, "--node-name", f"node-{node}",
        ]  # fmt: skip
        err = (workdir / f"node-{node}.err").open("w")
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=trainer_env())
        )
    done = []
    for node, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, _ = proc.communicate()
        err_text = (workdir / f"node-{node}.err").read_text()
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err_text))
    return done


def explain(done: list[subprocess.CompletedProcess[str]]) -> str:
    return "\n".join(
        f"--- node {i}: rc={p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        for i, p in enumerate(done)
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_record(record: dict[str, Any], *, ranks: int, sizes: list[int]) -> None:
    assert set(record) == RECORD_KEYS, record
    assert record["run"] == RUN and record["type"] == "allreduce" and record["group"] == "cpu"
    assert record["backend"] == "gloo" and record["dtype"] == "float32"
    assert record["net_provider"] is None  # gloo: no NCCL, no provider
    assert record["ranks"] == ranks
    assert record["ranks_per_node"] * len(record["nodes"]) == ranks
    assert [r["size_bytes"] for r in record["rows"]] == sizes
    for r in record["rows"]:
        assert set(r) == ROW_KEYS, r
        assert r["count"] * 4 == r["size_bytes"]
        assert r["time_us"] > 0 and r["iterations"] == 3
        # the nccl-tests formulas, from the record's own time (rounding: 6 decimals)
        alg = r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9
        assert r["algbw_gb_s"] == pytest.approx(alg, rel=1e-4, abs=1e-6)
        bus = r["algbw_gb_s"] * 2 * (ranks - 1) / ranks
        assert r["busbw_gb_s"] == pytest.approx(bus, rel=1e-6, abs=2e-6)


def test_two_nodes_of_two_ranks_with_pairs(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    earlier = {"run": RUN, "type": "run", "started": "2026-11-29T08:00:00Z"}
    out.write_text(json.dumps(earlier) + "\n")  # the node command's lines come first
    started = time.monotonic()
    args = [*SMALL, "--pairs", "--out", str(out), "--run-id", RUN, "--group", "cpu"]
    done = launch_nodes(tmp_path, nnodes=2, nproc=2, args=args)
    assert all(p.returncode == 0 for p in done), explain(done)
    records = read_records(out)
    assert records[0] == earlier, "appended after what was there, which is kept"
    assert [(r["type"], r.get("scope")) for r in records[1:]] == [
        ("allreduce", "all"),
        ("allreduce", "pair"),
    ]
    whole, pair = records[1:]
    sizes = [1 << 20, 2 << 20, 4 << 20]
    check_record(whole, ranks=4, sizes=sizes)
    check_record(pair, ranks=4, sizes=sizes)
    assert whole["nodes"] == pair["nodes"] == ["node-0", "node-1"]
    assert whole["ranks_per_node"] == 2
    # rank 0 (node 0) prints the table; node 1 prints nothing
    table = done[0].stdout
    assert "#       size         count      type   redop     time   algbw   busbw" in table
    for r in whole["rows"]:
        assert f"{r['size_bytes']:>12} {r['count']:>13}     float     sum" in table
    assert "# pair node-0 + node-1 (round 1 of 1)" in table
    assert done[1].stdout == ""
    print(f"2 nodes x 2 ranks: {time.monotonic() - started:.1f} s")


def test_four_nodes_run_three_rounds_of_two_disjoint_pairs(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    started = time.monotonic()
    args = [*SMALL[:2], "--max-bytes", "1M", *SMALL[4:], "--pairs", "--out", str(out)]
    args += ["--run-id", RUN, "--group", "cpu"]
    done = launch_nodes(tmp_path, nnodes=4, nproc=1, args=args)
    assert all(p.returncode == 0 for p in done), explain(done)
    records = read_records(out)
    assert [r["scope"] for r in records] == ["all"] + ["pair"] * 6
    check_record(records[0], ranks=4, sizes=[1 << 20])
    assert records[0]["nodes"] == [f"node-{i}" for i in range(4)]
    pairs = [tuple(r["nodes"]) for r in records[1:]]
    for r in records[1:]:
        check_record(r, ranks=2, sizes=[1 << 20])
    expected = [(f"node-{i}", f"node-{j}") for rnd in collective.pair_rounds(4) for i, j in rnd]
    assert pairs == expected  # in the schedule's order: rounds of disjoint pairs
    assert len(set(pairs)) == 6  # every pair of 4 nodes, once
    for number in (1, 2, 3):
        assert done[0].stdout.count(f"(round {number} of 3)") == 2
    print(f"4 nodes x 1 rank: {time.monotonic() - started:.1f} s")


def test_one_node_has_no_pairs(tmp_path: Path) -> None:
    """A world of one (no torchrun): the 'all' record only, busbw 0 (2(n-1)/n with n = 1)."""
    out = tmp_path / "results.jsonl"
    args = [*SMALL[:2], "--max-bytes", "2M", *SMALL[4:], "--pairs", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "hyperpod_trainer", "bench-allreduce", *args, "--run-id", RUN,
         "--group", "cpu", "--node-name", "solo"],
        capture_output=True, text=True, env=trainer_env(), timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (record,) = read_records(out)
    check_record(record, ranks=1, sizes=[1 << 20, 2 << 20])
    assert record["scope"] == "all" and record["nodes"] == ["solo"]
    assert all(r["busbw_gb_s"] == 0 for r in record["rows"])
    assert "# pair" not in proc.stdout


# --- refusals: one line, exit 2, before torch (each beside a value that is accepted) -----------


def refuse(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = cli.main(["bench-allreduce", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--min-bytes", "3M"], "--min-bytes: 3145728 is not a power of two"),
        (["--max-bytes", "1000"], "--max-bytes: 1000 is not a power of two"),
        (["--min-bytes", "4M", "--max-bytes", "1M"], "--min-bytes: 4194304 is more than"),
        (["--min-bytes", "2"], "--min-bytes: 2 is outside 4 bytes"),
        (["--max-bytes", "32G"], "--max-bytes: 34359738368 is outside"),
        (["--iters", "0"], "--iters/--warmup"),
        (["--warmup", "-1"], "--iters/--warmup"),
        (["--run-id", "verify-2026-11-29"], "--run-id: 'verify-2026-11-29' is not a run id"),
        (["--group", " "], "--group: ' ' is not a name"),
    ],
)
def test_bad_values_are_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refuse(argv, capsys)
    assert line.startswith("hyperpod_trainer bench-allreduce: error: "), line
    assert said in line, line


def test_bad_values_are_refused_before_torch() -> None:
    """The refusals come before torch is imported (a fresh interpreter shows it)."""
    code = (
        "import sys\nfrom hyperpod_trainer import cli\n"
        "rc = cli.main(['bench-allreduce', '--min-bytes', '3M'])\n"
        "assert rc == 2 and 'torch' not in sys.modules, (rc, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_size_with_a_suffix_is_read_as_nccl_tests_does() -> None:
    parser = cli.parsers()["bench-allreduce"]
    args = parser.parse_args(["--min-bytes", "64K", "--max-bytes", "1G"])
    assert (args.min_bytes, args.max_bytes) == (64 << 10, 1 << 30)
    args = parser.parse_args(["--min-bytes", "1048576"])
    assert args.min_bytes == 1 << 20


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("years of work\n", "is not a records file: line 1 is not JSON"),
        (
            '{"run": "x", "type": "run"}\n{"note": 1}\n',
            "is not a records file: line 2 is not an object",
        ),
        ("[1, 2]\n", 'is not a records file: line 1 is not an object with "run" and "type"'),
    ],
)
def test_out_is_never_a_users_file(
    tmp_path: Path, content: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine.txt"
    out.write_text(content)
    line = refuse(["--out", str(out)], capsys)
    assert f"{out}: {said}" in line and "nothing was written. Hint: " in line, line
    assert out.read_text() == content


def test_records_append_to_a_new_or_records_file(tmp_path: Path) -> None:
    """The output layer's append: a new file is created, a records file keeps its lines, a last
    line without its newline is ended first; a link or a folder is refused."""
    from hyperpod_trainer import fileio, paths

    new = tmp_path / "new.jsonl"
    paths.append_records(new, [{"run": RUN, "type": "end"}])
    assert read_records(new) == [{"run": RUN, "type": "end"}]
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"run": "r", "type": "node"}')  # no newline at the end
    paths.append_records(cut, [{"run": RUN, "type": "end"}])
    assert [r["type"] for r in read_records(cut)] == ["node", "end"]
    link = tmp_path / "link.jsonl"
    link.symlink_to(new)
    with pytest.raises(fileio.OutputError, match="symbolic link"):
        paths.append_records(link, [{"run": RUN, "type": "end"}])
    with pytest.raises(fileio.OutputError, match="is a folder"):
        paths.append_records(tmp_path, [{"run": RUN, "type": "end"}])
    assert len(read_records(new)) == 1
