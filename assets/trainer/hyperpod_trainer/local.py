"""Single-machine launches of the trainer under torchrun (tests, benchmarks, a laptop).

One place that knows how to start N ranks on loopback, so the tests and the benchmark run the
trainer exactly the same way.
"""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for the c10d rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_command(nproc: int, overrides: list[str], *, max_restarts: int = 0) -> list[str]:
    """`python -m torch.distributed.run ... -m hyperpod_trainer --set K=V ...` on loopback."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--max-restarts={max_restarts}",
        "-m",
        "hyperpod_trainer",
    ]
    for item in overrides:
        cmd += ["--set", item]
    return cmd


def torchrun_node_command(
    nnodes: int, node_rank: int, nproc: int, port: int, overrides: list[str]
) -> list[str]:
    """One "node" of an `nnodes`-node job on loopback (static rendezvous on 127.0.0.1:`port`).

    Start one per node rank, each with its own overrides, to play a job whose nodes disagree.
    """
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--max-restarts=0",
        "-m",
        "hyperpod_trainer",
    ]
    for item in overrides:
        cmd += ["--set", item]
    return cmd
