"""Graceful stop on SIGTERM / SIGUSR1.

HyperPod (EKS) and Slurm send SIGTERM (Slurm can be told to send SIGUSR1 ahead of time with
`--signal=USR1@120`) before they stop a job; torchrun forwards SIGTERM to its workers. The handler
only records the signal: the training loop agrees on it across ranks at the next step boundary,
announces it, saves a checkpoint and exits 0, because a collective save cannot start inside a
signal handler. Nor does the handler print: it can interrupt the main thread in the middle of a
write to the same stream (a re-entrant call into a buffered stream raises RuntimeError), or while
another thread holds the stream's lock.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    def __init__(self) -> None:
        self.received: signal.Signals | None = None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: no I/O, no locks, no allocation worth mentioning.
        if self.received is None:
            self.received = signal.Signals(signum)

    @property
    def requested(self) -> bool:
        return self.received is not None


def ignore_stop_signals(_worker_id: int = 0) -> None:
    """DataLoader `worker_init_fn`: Slurm signals every process of the step, data workers too.

    Forked workers inherit the rank's handler (harmless, but they would announce the stop too);
    spawned ones would die of the default action and crash their rank before the graceful save.
    Ignoring the signal leaves worker shutdown to the rank that owns them.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
