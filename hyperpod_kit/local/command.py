"""The command lines of `make demo` and `make verify-demo`: bad arguments as one line."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line `NAME: message`, exit 2, no usage dump or traceback."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.name}: {message}\n")
