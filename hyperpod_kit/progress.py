"""What stage a long command is in, and how long each took: for people and for pipelines.

    with progress.stage("cfn-lint"):
        report = check_assembly(outdir)

On a terminal (stderr is a tty, `TERM` is not `dumb`, `CI` is not set) a `rich` display: a
spinner, the stage and its elapsed time, left as a finished line (`✓`, or `✗` when the stage
raised). Otherwise one plain line per finished stage, for logs and CI:

    hyperpod-kit: synth: cfn-lint ... 1.2 s
    hyperpod-kit: synth: cfn-lint ... stopped after 1.2 s     (the stage raised)

Both go to stderr, never stdout: stdout may carry `--format json`. `quiet` prints nothing (errors
are the commands' own lines and still show). `NO_COLOR` (set, not empty) turns colours off.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich is imported only for a terminal
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

PREFIX = "hyperpod-kit"


def is_terminal(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether `stream` is a terminal a live display may draw on."""
    if environ.get("TERM", "") == "dumb" or environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


def seconds(elapsed: float) -> str:
    return f"{elapsed:.1f} s"


class Progress:
    """The stages of one command (`command`, as the plain lines name it)."""

    def __init__(
        self,
        command: str,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.command = command
        self.quiet = quiet
        self._stream = stream  # None: sys.stderr as it is when a stage starts
        self._environ = os.environ if environ is None else environ

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def live(self) -> bool:
        """A rich display (True), plain lines or nothing (False)."""
        return not self.quiet and is_terminal(self.stream, self._environ)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show `name` while the block runs, then how long it took."""
        if self.quiet:
            yield
        elif self.live:
            with self._live_stage(name):
                yield
        else:
            started = time.perf_counter()
            try:
                yield
            except BaseException:
                self.line(f"{name} ... stopped after {seconds(time.perf_counter() - started)}")
                raise
            self.line(f"{name} ... {seconds(time.perf_counter() - started)}")

    def line(self, text: str) -> None:
        """One line of the command's progress (`hyperpod-kit: COMMAND: text`), unless quiet."""
        if not self.quiet:
            print(f"{PREFIX}: {self.command}: {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def _live_stage(self, name: str) -> Iterator[None]:
        bar, task = self._bar(name)
        with bar:
            try:
                yield
            except BaseException:
                bar.update(task, failed=True)
                bar.stop_task(task)
                raise
            bar.update(task, completed=1)
            bar.stop_task(task)

    def _bar(self, name: str) -> tuple[RichProgress, TaskID]:
        from rich.console import Console
        from rich.progress import Progress as RichProgress
        from rich.progress import ProgressColumn, SpinnerColumn, Task, TextColumn
        from rich.text import Text

        class State(SpinnerColumn):
            def render(self, task: Task) -> Text:
                if task.fields.get("failed"):
                    return Text("✗", style="red")
                if task.finished:
                    return Text("✓", style="green")
                return super().render(task)  # type: ignore[return-value]

        class Elapsed(ProgressColumn):
            def render(self, task: Task) -> Text:
                return Text(seconds(task.elapsed or 0.0), style="progress.elapsed")

        no_color = self._environ.get("NO_COLOR", "") != ""
        console = Console(file=self.stream, force_terminal=True, no_color=no_color, highlight=False)
        bar = RichProgress(
            State(),
            TextColumn("{task.description}", markup=False),
            Elapsed(),
            console=console,
            redirect_stdout=False,  # stdout stays the command's (JSON); stderr prints above
        )
        task = bar.add_task(f"{self.command}: {name}", total=1, failed=False)
        return bar, task


SILENT = Progress("", quiet=True)
"""For callers that report no progress (tests, library use)."""
