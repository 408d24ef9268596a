"""`hyperpod-kit estimate FILE`: the estimate of a valid environment, as text or JSON on stdout.

Its warnings (a checkpoint that takes more than 5% of its interval) go to stderr as findings, with
the line of the key they name. `--aws` (the Pricing API) is not built: prices come only from the
bundled table (docs/estimate.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from hyperpod_kit.config import LoadedEnvironment
from hyperpod_kit.estimate import estimate as compute
from hyperpod_kit.estimate import render_text

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def step_time(text: str | None) -> float | None:
    """`--step-time`: a positive, finite number of seconds; ValueError with the reason."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("is not a positive number of seconds")
    return value


def estimate(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    try:
        seconds = step_time(args.step_time)
    except ValueError as e:
        print(f"--step-time: {args.step_time!r} {e}. Hint: the measured time of one training "
              "step in seconds, e.g. --step-time 2.5.", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    result = compute(loaded.config, step_time_s=seconds)
    warnings = [loaded.place(w) for w in result.warnings]
    for w in warnings:
        print(w.render(loaded.file), file=sys.stderr)
    if args.format == "json":
        data = result.as_json()
        data["file"] = loaded.file
        for row, w in zip(data["warnings"], warnings, strict=True):
            row["line"] = w.line
            row["file"] = w.file or loaded.file
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(render_text(result))
    return EXIT_OK
