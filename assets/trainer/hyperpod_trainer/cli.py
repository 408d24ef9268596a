"""Command line: `torchrun --nproc_per_node=N -m hyperpod_trainer --config cfg.yaml [--set k=v]`.

Exit codes: 0 success (including a graceful stop on SIGTERM/SIGUSR1), 2 bad configuration or
command line (one line on stderr naming the field, no traceback), 3, 4, 5 final failures
(train.FINAL_EXIT_CODES: no launcher should retry them), anything else is a crash.
Validation runs before torch is imported, so `--check` and bad configs answer in a moment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

from .config import ConfigError, grad_accum_steps, load_config

PROG = "hyperpod_trainer"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would print the usage block too; one line is what job logs need.
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML file (sections: model, data, train, optim, ...)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one field, e.g. --set train.steps=50 (repeatable; applied after --config)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate, print the resolved config as JSON and exit (no torch import)",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        help="with --check: world size to validate the batch split for (default: $WORLD_SIZE)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
        accum = grad_accum_steps(cfg, world_size)
        if args.check:
            resolved = {
                "config": cfg.as_dict(),
                "world_size": world_size,
                "grad_accum": accum,
                "params": cfg.shape().num_params(),
            }
            print(json.dumps(resolved, indent=1))
            return 0
        from .train import run  # torch import deferred until the config is known to be good

        return run(cfg)
    except ConfigError as exc:
        # Every rank prints: when the ranks of a torchrun job all fail at once, torchrun stops
        # the slower ones, so "rank 0 only" could print nothing at all.
        print(f"{PROG}: config error: {exc}", file=sys.stderr, flush=True)
        return 2


def run() -> NoReturn:
    """The process entry point (`python -m hyperpod_trainer`, the `hyperpod-trainer` script).

    Ends the process without interpreter finalisation once `main` has returned, when everything
    the run writes is already closed (checkpoints finalised, metrics and sample logs closed).
    The process groups the model and the checkpointer still hold are only freed by the
    collector during finalisation, while gloo's worker threads may still be releasing the
    tensors of the last collective; such a thread then needs the GIL, which a finalising
    interpreter no longer hands out, and the process dies of SIGABRT ("terminate called
    without an active exception") after a clean run, so torchrun reports a crash instead of the
    rank's own exit code (seen in CI, and in 4 of 35 two-rank exits on two loaded cores).
    An exception still takes the normal path: traceback, finalisation.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
