"""`hyperpod-kit estimate FILE`: the estimate of a valid environment, as text or JSON on stdout.

Its warnings (a checkpoint that takes more than 5% of its interval) go to stderr as findings, with
the line of the key they name. Prices come from the bundled table, or with `--aws` from the AWS
Pricing API through the one AWS facade (without credentials: one line, exit 2; docs/estimate.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.estimate import Estimate, render_text
from hyperpod_kit.estimate import estimate as compute

EXIT_OK, EXIT_BAD_INPUT = 0, 2
# What a training step can take: refused outside (1e300 s printed a 300-digit interval, and 1e-300
# a 300-digit share). A step of a real job takes milliseconds to minutes.
MIN_STEP_S, MAX_STEP_S = 0.001, 86_400.0


def step_time(text: str | None) -> float | None:
    """`--step-time`: a finite number of seconds from 1 ms to one day; ValueError with the
    reason (checked before the estimate is computed)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("is not a positive number of seconds")
    if not MIN_STEP_S <= value <= MAX_STEP_S:
        raise ValueError(
            f"is outside {MIN_STEP_S:g}-{MAX_STEP_S:,.0f} s (1 ms to one day) that a training "
            "step takes"
        )
    return value


def _from_pricing_api(loaded: LoadedEnvironment, seconds: float | None) -> Estimate | None:
    """The estimate priced from the AWS Pricing API, or None after one line: no credentials,
    or the API could not be read (denied, no network)."""
    from hyperpod_kit.config.aws import AwsFacade, AwsUnavailableError
    from hyperpod_kit.operations.pricing import PricingApi

    aws = AwsFacade(loaded.config.region)
    if not aws.has_credentials():
        print(f"{loaded.file}: no AWS credentials found for --aws. Hint: configure them (aws "
              "configure, AWS_PROFILE, or SSO) with pricing:GetProducts, or leave out --aws for "
              "the bundled price table.", file=sys.stderr)  # fmt: skip
        return None
    try:
        return compute(loaded.config, step_time_s=seconds, prices=PricingApi(aws))
    except AwsUnavailableError as e:
        print(f"{loaded.file}: cannot read the AWS Pricing API ({e}). Hint: the credentials need "
              "pricing:GetProducts and a network path to api.pricing.us-east-1.amazonaws.com; "
              "or leave out --aws.", file=sys.stderr)  # fmt: skip
        return None


ESTIMATE_HELP = (
    "what FILE brings and costs: accelerators, EFA, Lustre throughput, checkpoint times, "
    "hourly and monthly cost from a dated price table (or the AWS Pricing API with --aws)"
)


def add_estimate_arguments(est: argparse.ArgumentParser) -> None:
    est.add_argument(
        "--step-time",
        metavar="SECONDS",
        help="seconds one training step takes (0.001 to 86400): then the share of the "
        "checkpoint interval spent writing a checkpoint (a warning above 5%%)",
    )
    est.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text or JSON, on stdout (text)",
    )
    est.add_argument(
        "--aws",
        action="store_true",
        help="prices from the AWS Pricing API (pricing:GetProducts, with credentials) instead of "
        "the bundled table",
    )


def estimate(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    try:
        seconds = step_time(args.step_time)
    except ValueError as e:
        print(f"--step-time: {args.step_time!r} {e}. Hint: the measured time of one training "
              "step in seconds, e.g. --step-time 2.5.", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    result = (
        _from_pricing_api(loaded, seconds)
        if args.aws
        else compute(loaded.config, step_time_s=seconds)
    )
    if result is None:
        return EXIT_BAD_INPUT
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
