"""The all-reduce benchmark's arithmetic (hyperpod_trainer.collective): nccl-tests' formulas,
the message sizes, the iterations per size, and the pairwise round-robin schedule. Torch-free."""

from __future__ import annotations

import itertools
import os
import socket
import sys
from pathlib import Path

import pytest

from hyperpod_trainer import collective as c

MiB, GiB = 1 << 20, 1 << 30


# nccl-tests doc/PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n, so the factor is 1 on two
# ranks, 1.5 on 4, 1.75 on 8, 1.875 on 16, and tends to 2; 0 for a single rank (no traffic).
@pytest.mark.parametrize(
    ("n", "factor"),
    [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875), (64, 1.96875), (128, 1.984375)],
)
def test_busbw_factor_is_nccl_tests(n: int, factor: float) -> None:
    assert c.busbw_allreduce(100.0, n) == pytest.approx(100.0 * factor, rel=1e-12)


def test_busbw_refuses_no_ranks() -> None:
    with pytest.raises(ValueError, match="n_ranks"):
        c.busbw_allreduce(1.0, 0)
    assert c.busbw_allreduce(1.0, 1) == 0.0  # its neighbour is fine


def test_algbw_is_bytes_over_seconds_in_gb_per_s() -> None:
    # 1 GiB in 10 ms: 107.374 GB/s (GB = 1e9 bytes, as nccl-tests)
    assert c.algbw(GiB, 0.010) == pytest.approx(1073741824 / 0.010 / 1e9)
    assert c.algbw(1_000_000_000, 1.0) == 1.0
    with pytest.raises(ValueError, match="positive"):
        c.algbw(MiB, 0.0)


def test_row_as_the_contract_and_nccl_tests_print_it() -> None:
    # 8 ranks, 128 MiB in 1 ms: algbw 134.2 GB/s, busbw 1.75x that = 234.9 GB/s
    r = c.row(128 * MiB, 0.001, 20, 8)
    assert r == {
        "size_bytes": 134217728,
        "count": 33554432,  # float32 elements
        "iterations": 20,
        "time_us": 1000.0,
        "algbw_gb_s": 134.217728,
        "busbw_gb_s": 234.881024,
    }
    line = c.table_row(r)
    assert line.split() == ["134217728", "33554432", "float", "sum", "1000.0", "134.22", "234.88"]
    header = c.table_header().splitlines()[0]
    assert header == "#       size         count      type   redop     time   algbw   busbw"


def test_sizes_are_the_powers_of_two_between() -> None:
    assert c.sizes(MiB, GiB) == [MiB << k for k in range(11)]
    assert c.sizes(4, 4) == [4]
    assert c.sizes(1 * MiB, 4 * MiB) == [1 * MiB, 2 * MiB, 4 * MiB]
    for low, high, said in [
        (3 * MiB, 8 * MiB, "min_bytes must be a power of two"),
        (MiB, 1000, "max_bytes must be a power of two"),
        (0, MiB, "min_bytes must be a power of two"),
        (4 * MiB, MiB, "more than max_bytes"),
    ]:
        with pytest.raises(ValueError, match=said):
            c.sizes(low, high)


def test_iterations_scale_down_above_64_mib_but_never_below_five() -> None:
    assert c.scaled(MiB, 20) == 20
    assert c.scaled(64 * MiB, 20) == 20
    assert c.scaled(128 * MiB, 20) == 10
    assert c.scaled(256 * MiB, 20) == 5
    assert c.scaled(GiB, 20) == 5  # 1.25 by the ratio, held at 5
    assert c.scaled(GiB, 3) == 3  # fewer asked for: never more than asked
    assert c.scaled(GiB, 0) == 0  # no warmup stays none
    assert c.scaled(GiB, 200) == 12


def test_provider_is_read_from_aws_ofi_nccls_line() -> None:
    log = (
        "ip-10-1-2-3:1234:1234 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1\n"
        "ip-10-1-2-3:1234:1234 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)\n"
        "ip-10-1-2-3:1234:1234 [0] NCCL INFO Using network AWS Libfabric\n"
    )
    assert c.provider(log) == "efa"
    assert c.provider("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n") is None
    assert c.provider("") is None


def test_nodes_are_grouped_by_the_launchers_node_rank() -> None:
    # (rank, group rank, local rank, name): torchrun's c10d rendezvous may number nodes in any
    # order; a node is named by its local rank 0
    entries = [(0, 1, 0, "b"), (1, 1, 1, "b"), (2, 0, 0, "a"), (3, 0, 1, "a-other")]
    nodes = c.nodes_of(entries)
    assert [(n.index, n.name, n.ranks) for n in nodes] == [(0, "a", (2, 3)), (1, "b", (0, 1))]


@pytest.mark.parametrize("n", range(1, 10))
def test_pair_rounds_cover_every_pair_once_in_disjoint_rounds(n: int) -> None:
    rounds = c.pair_rounds(n)
    expected_rounds = 0 if n == 1 else (n - 1 if n % 2 == 0 else n)
    assert len(rounds) == expected_rounds
    seen = [pair for rnd in rounds for pair in rnd]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))  # each pair exactly once
    for rnd in rounds:
        nodes = [node for pair in rnd for node in pair]
        assert len(nodes) == len(set(nodes)), f"a node twice in one round: {rnd}"
        assert all(i < j for i, j in rnd)
        # even N: every node busy every round; odd N: exactly one idle
        assert len(nodes) == (n if n % 2 == 0 else n - 1)


def test_pair_rounds_of_four_and_of_none() -> None:
    assert c.pair_rounds(4) == [[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]
    assert c.pair_rounds(2) == [[(0, 1)]]
    assert c.pair_rounds(0) == []
    with pytest.raises(ValueError, match="n_nodes"):
        c.pair_rounds(-1)


def test_the_pure_functions_need_no_torch() -> None:
    """The command line validates with them before torch is imported."""
    import subprocess

    code = (
        "import sys, hyperpod_trainer.collective as c; c.sizes(1, 4); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_nccl_log_is_ours_unless_the_job_names_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(var, raising=False)
    log = c._NcclLog()
    assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert log.ours and log.path.exists() and str(log.path) == os.environ["NCCL_DEBUG_FILE"]
    log.path.write_text("x NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n")
    assert log.provider() == "efa"
    log.close()
    assert not log.path.exists()  # ours: removed
    # the rendered jobs export NCCL_DEBUG=WARN with no file: INFO goes to a file of ours anyway
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.delenv("NCCL_DEBUG_FILE")
    log = c._NcclLog()
    assert os.environ["NCCL_DEBUG"] == "INFO" and log.ours
    log.close()
    # the job's own settings are kept; its file (NCCL's %h and %p filled in) is read, never removed
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl.%h.%p.log"))
    theirs = tmp_path / f"nccl.{socket.gethostname()}.{os.getpid()}.log"
    theirs.write_text("NCCL INFO NET/Socket : Using [0]eth0\n")
    log = c._NcclLog()
    assert os.environ["NCCL_DEBUG"] == "WARN" and not log.ours and log.path == theirs
    assert log.provider() is None
    log.close()
    assert theirs.exists()


def test_a_record_names_one_provider_or_every_one_its_ranks_saw() -> None:
    providers = ["efa", "efa", "efa", None]
    assert c._provider_of(providers, [0, 1, 2]) == "efa"
    assert c._provider_of(providers, [2, 3]) == "efa/none"  # a node without EFA shows
    assert c._provider_of([None, None], [0, 1]) is None
