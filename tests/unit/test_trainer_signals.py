"""The stop-signal handler only sets a flag: no printing, no I/O (torch-free)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

pytest.importorskip("hyperpod_trainer")

from hyperpod_trainer.signals import STOP_SIGNALS, StopRequest


class _NoIO:
    """A stream that fails the test if anything writes to it (as a busy stream would)."""

    def write(self, text: str) -> int:
        raise AssertionError(f"I/O inside the signal handler: {text!r}")

    def flush(self) -> None:
        raise AssertionError("I/O inside the signal handler: flush")


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_handler_only_records_the_signal(
    monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    stop = StopRequest()
    try:
        stop.install()
        monkeypatch.setattr(sys, "stderr", _NoIO())
        monkeypatch.setattr(sys, "stdout", _NoIO())
        os.kill(os.getpid(), sig)  # the handler runs before the next bytecode of this thread
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal changes nothing
        monkeypatch.undo()
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert stop.requested
    assert stop.received is sig
