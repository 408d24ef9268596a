"""The command lines of `make demo` and `make verify-demo`: bad arguments, and what stops a run,
as one line."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from hyperpod_kit.local.slurm import SlurmError, SlurmUnavailableError
from hyperpod_kit.outputs import OutputError, write_error


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line `NAME: message`, exit 2, no usage dump or traceback."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.name}: {message}\n")


# What stops a local run (`make demo`, `make verify-demo`): each is one line on stderr.
STOPS: tuple[type[BaseException], ...] = (OutputError, SlurmUnavailableError, SlurmError, OSError)


def stopped(name: str, e: BaseException, out: str) -> int:
    """One line for `e` (one of `STOPS`, or the run's own error) and the exit code: 2 for an
    output folder it may not write, 1 for anything that stopped the run."""
    if isinstance(e, OutputError):
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    if isinstance(e, SlurmUnavailableError):
        print(f"{name}: no local Slurm: {str(e).splitlines()[0]}", file=sys.stderr)
    elif isinstance(e, OSError):
        print(f"{name}: {write_error(e, out)}", file=sys.stderr)
    else:
        print(f"{name}: {e}", file=sys.stderr)
    return 1
