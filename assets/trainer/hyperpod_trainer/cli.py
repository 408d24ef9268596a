"""Command line: `torchrun --nproc_per_node=N -m hyperpod_trainer --config cfg.yaml [--set k=v]`.

Subcommands (the first argument; without one the command trains, as the rendered jobs call it):
`import-hf SRC OUT`, `export-hf CHECKPOINT OUT`, `prepare-data --tokenizer ... --input ...`.

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
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .config import ConfigError, grad_accum_steps, load_config

PROG = "hyperpod_trainer"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would print the usage block too; one line is what job logs need.
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"python -m {PROG}",
        description=__doc__.splitlines()[0],
        epilog="other commands: import-hf, export-hf, prepare-data (each with --help)",
    )
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


def _import_hf(argv: list[str]) -> int:
    parser = _Parser(
        prog=f"python -m {PROG} import-hf",
        description="Hugging Face Llama (config.json + safetensors) -> a checkpoint folder the "
        "trainer starts from (model weights at step 0, fresh optimizer).",
    )
    parser.add_argument("src", type=Path, help="folder with config.json and *.safetensors")
    parser.add_argument("out", type=Path, help="new checkpoint folder (use as checkpoint.dir)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    from .hf import import_hf, print_import_summary

    shape = import_hf(args.src, args.out, force=args.force)
    print_import_summary(shape, args.src, args.out)
    return 0


def _export_hf(argv: list[str]) -> int:
    parser = _Parser(
        prog=f"python -m {PROG} export-hf",
        description="A trainer checkpoint -> safetensors + config.json (+ tokenizer) that "
        "transformers' AutoModelForCausalLM.from_pretrained loads. Reads the model tensors "
        "only, never the optimizer state.",
    )
    parser.add_argument(
        "checkpoint", type=Path, help="a step_NNNNNN folder, or a checkpoint.dir (its newest)"
    )
    parser.add_argument("out", type=Path, help="new folder for the Hugging Face model")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "bf16"],
        default="fp32",
        help="weights' dtype (default fp32: the checkpoint's master weights)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenizer.json (or its folder) to ship with the model; default: the one "
        "prepare-data wrote beside the data the checkpoint was trained on, if any",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    from .hf import export_hf

    folder = export_hf(
        args.checkpoint, args.out, dtype=args.dtype, tokenizer=args.tokenizer, force=args.force
    )
    print(f"exported {folder} -> {args.out} ({args.dtype})", file=sys.stderr)
    return 0


def _prepare_data(argv: list[str]) -> int:
    from .prepare import main as prepare_main

    return prepare_main(argv, prog=f"python -m {PROG} prepare-data", parser_class=_Parser)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "import-hf": _import_hf,
    "export-hf": _export_hf,
    "prepare-data": _prepare_data,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        try:
            return COMMANDS[argv[0]](argv[1:])
        except ConfigError as exc:
            print(f"{PROG} {argv[0]}: error: {exc}", file=sys.stderr, flush=True)
            return 2
    return _train(argv)


def _train(argv: list[str]) -> int:
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
