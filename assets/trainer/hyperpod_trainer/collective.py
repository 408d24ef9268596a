"""All-reduce bus bandwidth: `torchrun ... -m hyperpod_trainer bench-allreduce`.

The `verify` suite runs this on every node of a group through Slurm: the same launcher, the same
process group and the same NCCL (and, on AWS, aws-ofi-nccl over EFA) path as training; gloo on
CPU. It measures, like nccl-tests' `all_reduce_perf`, one message size at a time (powers of two),
warmup operations first, then timed ones, and reports per size (nccl-tests doc/PERFORMANCE.md):

- time: each rank's mean time of one operation over the timed iterations, then the slowest
  rank's (an all-reduce MAX across the ranks): an all-reduce ends when its last rank ends;
- algbw = S / t, S the buffer's bytes, t that time (GB/s = 1e9 bytes/s);
- busbw = algbw * 2(n-1)/n, n the ranks: the share of the data each rank moves over its
  links, comparable to the hardware's bandwidth whatever the rank count.

With `--pairs` it then measures every pair of nodes in disjoint pairs run concurrently, in the
rounds of a round-robin ("circle") schedule: a slow node or link shows as the pairs it is in.
Rank 0 prints an nccl-tests-like table and appends the records (verify contract: JSON Lines,
`"type": "allreduce"`) to `--out`.

The pure functions (formulas, sizes, schedule) import nothing heavy: the command line validates
with them before torch is imported.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GB = 1e9  # nccl-tests' GB/s: 1e9 bytes per second

DTYPE = "float32"
ELEMENT_BYTES = 4
DEFAULT_MIN_BYTES = 1 * MiB
DEFAULT_MAX_BYTES = 1 * GiB
# The largest buffer: 16 GiB of float32 per rank is more than any floor is measured at (1 GiB)
# and still fits beside a model on an 80 GB GPU; larger is a typo.
MAX_BYTES = 16 * GiB
DEFAULT_ITERS = 20  # nccl-tests' -n default
DEFAULT_WARMUP = 5
# Iterations are scaled down above this size (the time per size stays about constant), but never
# below MIN_SCALED_ITERS timed operations (nccl-tests keeps -n fixed; its users lower -n by hand
# for large sweeps: this does it per size).
SCALE_BYTES = 64 * MiB
MIN_SCALED_ITERS = 5

RUN_ID = re.compile(r"verify-\d{8}T\d{6}Z")
# aws-ofi-nccl's line at plugin init: "NET/OFI Selected Provider is efa (found 4 nics)"
PROVIDER_LINE = re.compile(r"Selected Provider is (\w+)")


# --- pure functions --------------------------------------------------------------------------


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): the buffer's bytes over one operation's time."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_bytes / seconds / GB


def busbw_allreduce(algbw: float, n_ranks: int) -> float:
    """Bus bandwidth of an all-reduce over `n_ranks` ranks: algbw * 2(n-1)/n (nccl-tests
    doc/PERFORMANCE.md). One rank moves nothing: 0."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be at least 1, got {n_ranks}")
    return algbw * 2 * (n_ranks - 1) / n_ranks


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Message sizes: every power of two from `min_bytes` to `max_bytes`, both included."""
    for name, value in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if not is_power_of_two(value):
            raise ValueError(f"{name} must be a power of two, got {value}")
    if min_bytes > max_bytes:
        raise ValueError(f"min_bytes {min_bytes} is more than max_bytes {max_bytes}")
    found, size = [], min_bytes
    while size <= max_bytes:
        found.append(size)
        size *= 2
    return found


def scaled(size_bytes: int, count: int) -> int:
    """Iterations (timed or warmup) at `size_bytes`: `count` up to SCALE_BYTES, then halved with
    every doubling of the size, never below min(count, MIN_SCALED_ITERS)."""
    if size_bytes <= SCALE_BYTES:
        return count
    return max(min(count, MIN_SCALED_ITERS), count * SCALE_BYTES // size_bytes)


def pair_rounds(n_nodes: int) -> list[list[tuple[int, int]]]:
    """Every pair of `n_nodes` nodes exactly once, in rounds of disjoint pairs (round-robin
    "circle" method): node 0 stays, the others rotate one place per round. N-1 rounds for an
    even N, N rounds for an odd N (a placeholder makes it even; its partner idles that round)."""
    if n_nodes < 0:
        raise ValueError(f"n_nodes must be at least 0, got {n_nodes}")
    if n_nodes < 2:
        return []  # no pair
    slots: list[int | None] = list(range(n_nodes))
    if n_nodes % 2:
        slots.append(None)
    m = len(slots)
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = slots[i], slots[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def row(size_bytes: int, seconds: float, iterations: int, n_ranks: int) -> dict[str, Any]:
    """One row of a record (verify contract): time in microseconds, bandwidths in GB/s."""
    alg = algbw(size_bytes, seconds)
    return {
        "size_bytes": size_bytes,
        "count": size_bytes // ELEMENT_BYTES,
        "iterations": iterations,
        "time_us": round(seconds * 1e6, 3),
        "algbw_gb_s": round(alg, 6),
        "busbw_gb_s": round(busbw_allreduce(alg, n_ranks), 6),
    }


def provider(log_text: str) -> str | None:
    """The libfabric provider aws-ofi-nccl selected ("efa"), from an NCCL debug log; None when
    the log has no such line (NCCL on sockets or InfiniBand, or no plugin)."""
    found = PROVIDER_LINE.search(log_text)
    return found[1] if found else None


def table_header() -> str:
    return (
        f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'time':>8} {'algbw':>7} "
        f"{'busbw':>7}\n"
        f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'(us)':>8} {'(GB/s)':>7} "
        f"{'(GB/s)':>7}"
    )


def table_row(r: dict[str, Any]) -> str:
    return (
        f"{r['size_bytes']:>12} {r['count']:>13} {'float':>9} {'sum':>7} {r['time_us']:>8.1f} "
        f"{r['algbw_gb_s']:>7.2f} {r['busbw_gb_s']:>7.2f}"
    )


# --- the benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    sizes: list[int]
    iters: int
    warmup: int
    pairs: bool
    out: Path | None
    run: str
    group: str | None
    node_name: str | None
    append: Callable[[Path, list[dict[str, Any]]], None] | None = None  # the output layer's


@dataclass(frozen=True)
class Node:
    index: int  # the launcher's node rank (GROUP_RANK)
    name: str
    ranks: tuple[int, ...]


def node_name(given: str | None) -> str:
    """This node's name: --node-name, else Slurm's SLURMD_NODENAME, else the host name."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def nodes_of(entries: Sequence[tuple[int, int, int, str]]) -> list[Node]:
    """Nodes from every rank's (rank, group rank, local rank, node name), by group rank; a
    node is named by its local rank 0 (its lowest local rank)."""
    by_group: dict[int, list[tuple[int, int, str]]] = {}
    for rank, group_rank, local_rank, name in entries:
        by_group.setdefault(group_rank, []).append((local_rank, rank, name))
    found = []
    for group_rank in sorted(by_group):
        members = sorted(by_group[group_rank])
        ranks = tuple(sorted(rank for _, rank, _ in members))
        found.append(Node(group_rank, members[0][2], ranks))
    return found


class _NcclLog:
    """The NCCL debug file of this process: set up before NCCL starts (INIT and NET at INFO,
    into a temporary file unless the job names one), read for the provider, removed if ours."""

    def __init__(self) -> None:
        self.ours = "NCCL_DEBUG_FILE" not in os.environ
        if self.ours:
            # INFO into a file of ours even where the job asks for less on stderr (the rendered
            # jobs export NCCL_DEBUG=WARN): the provider line is an INFO line.
            os.environ["NCCL_DEBUG"] = "INFO"
            os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
            fd, path = tempfile.mkstemp(prefix="hyperpod-trainer-nccl-", suffix=".log")
            os.close(fd)
            os.environ["NCCL_DEBUG_FILE"] = path
        # NCCL substitutes %h (host name) and %p (process id) in the file name
        pattern = os.environ["NCCL_DEBUG_FILE"]
        self.path = Path(
            pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
        )

    def provider(self) -> str | None:
        try:
            with self.path.open(encoding="utf-8", errors="replace") as f:
                text = f.read(16 * MiB)
        except OSError:
            return None
        return provider(text)

    def close(self) -> None:
        if self.ours:
            self.path.unlink(missing_ok=True)


class _Bench:
    def __init__(self, device: torch.device) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def measure(self, group: dist.ProcessGroup | None, size: int, iters: int, warmup: int) -> float:
        """The slowest rank's mean seconds per all-reduce of `size` bytes in `group`."""
        import torch.distributed as dist

        buf = self.torch.zeros(size // ELEMENT_BYTES, dtype=self.torch.float32, device=self.device)
        for _ in range(warmup):
            dist.all_reduce(buf, group=group)
        flag = self.torch.zeros(1, dtype=self.torch.float32, device=self.device)
        dist.all_reduce(flag, group=group)  # all ranks start the clock together, or nearly
        self.sync()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf, group=group)
        self.sync()
        mean = (time.perf_counter() - start) / iters
        slowest = self.torch.tensor([mean], dtype=self.torch.float64, device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
        return float(slowest.item())

    def sweep(
        self,
        group: dist.ProcessGroup | None,
        n_ranks: int,
        opts: Options,
        say: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        rows = []
        for size in opts.sizes:
            iters, warmup = scaled(size, opts.iters), scaled(size, opts.warmup)
            seconds = self.measure(group, size, iters, warmup)
            rows.append(row(size, seconds, iters, n_ranks))
            if say is not None:
                say(rows[-1])
        return rows


def _device() -> torch.device:
    import torch

    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _provider_of(providers: Sequence[str | None], ranks: Sequence[int]) -> str | None:
    """One provider for a record: what its ranks agree on; ranks that disagree: all, sorted
    ("efa/none": a node without EFA shows, never hides behind another's)."""
    seen = {providers[r] for r in ranks}
    if len(seen) == 1:
        return seen.pop()
    return "/".join(sorted(p or "none" for p in seen))


def run(opts: Options) -> int:
    import torch.distributed as dist

    device = _device()
    backend = "nccl" if device.type == "cuda" else "gloo"
    nccl_log = _NcclLog() if backend == "nccl" else None
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend)
    else:  # a plain process: a world of one (no ports), like the trainer
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(backend=backend, store=store, rank=0, world_size=1)
    try:
        return _run(opts, device, backend, nccl_log)
    finally:
        if nccl_log is not None:
            nccl_log.close()
        dist.destroy_process_group()


def _run(opts: Options, device: torch.device, backend: str, nccl_log: _NcclLog | None) -> int:
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    me = (
        rank,
        int(os.environ.get("GROUP_RANK", "0")),
        int(os.environ.get("LOCAL_RANK", "0")),
        node_name(opts.node_name),
    )
    entries: list[Any] = [None] * world
    dist.all_gather_object(entries, me)
    nodes = nodes_of(entries)
    per_node = {len(n.ranks) for n in nodes}
    ranks_per_node = per_node.pop() if len(per_node) == 1 else None
    bench = _Bench(device)
    lead = rank == 0

    def say(line: str) -> None:
        if lead:
            print(line, flush=True)

    names = [n.name for n in nodes]
    say(
        f"# all-reduce, {DTYPE}, sum: {world} ranks on {len(nodes)} node(s) ({', '.join(names)}), "
        f"{backend}"
    )
    say(table_header())
    all_rows = bench.sweep(None, world, opts, lambda r: say(table_row(r)))

    # Pairs: every rank creates every pair's group, in the same order (new_group is collective)
    pair_rows: dict[tuple[int, int], list[dict[str, Any]]] = {}
    rounds = pair_rounds(len(nodes)) if opts.pairs and len(nodes) > 1 else []
    groups = {}
    for pairs in rounds:
        for i, j in pairs:
            members = sorted(nodes[i].ranks + nodes[j].ranks)
            groups[(i, j)] = (dist.new_group(ranks=members), members)
    mine = next(k for k, n in enumerate(nodes) if rank in n.ranks)
    for pairs in rounds:
        for i, j in pairs:
            if mine in (i, j):
                group, members = groups[(i, j)]
                rows = bench.sweep(group, len(members), opts)
                if rank == members[0]:
                    pair_rows[(i, j)] = rows
        # the next round starts when every pair of this one is done
        dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)

    found = nccl_log.provider() if nccl_log is not None else None
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (found, pair_rows))
    providers = [g[0] for g in gathered]
    for _, rows_by_pair in gathered:
        pair_rows.update(rows_by_pair)
    if not lead:
        return 0

    def record(scope: str, members: list[Node], rows: list[dict[str, Any]]) -> dict[str, Any]:
        ranks = [r for n in members for r in n.ranks]
        return {
            "run": opts.run,
            "type": "allreduce",
            "scope": scope,
            "group": opts.group,
            "nodes": [n.name for n in members],
            "ranks": len(ranks),
            "ranks_per_node": ranks_per_node,
            "backend": backend,
            "dtype": DTYPE,
            "net_provider": _provider_of(providers, ranks),
            "rows": rows,
        }

    records = [record("all", nodes, all_rows)]
    for number, pairs in enumerate(rounds, 1):
        for i, j in pairs:
            records.append(record("pair", [nodes[i], nodes[j]], pair_rows[(i, j)]))
            say("")
            say(f"# pair {nodes[i].name} + {nodes[j].name} (round {number} of {len(rounds)})")
            say(table_header())
            for r in pair_rows[(i, j)]:
                say(table_row(r))
    say(f"# net_provider: {records[0]['net_provider'] or 'none'}")
    if opts.out is not None and opts.append is not None:
        opts.append(opts.out, records)
        print(f"# {len(records)} record(s) appended to {opts.out}", file=sys.stderr, flush=True)
    return 0
