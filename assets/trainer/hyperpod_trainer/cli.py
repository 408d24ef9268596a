"""Command line: `torchrun --nproc_per_node=N -m hyperpod_trainer --config cfg.yaml [--set k=v]`.

Subcommands (the first argument; without one the command trains, as the rendered jobs call it):
`import-hf SRC OUT`, `export-hf CHECKPOINT OUT`, `prepare-data --tokenizer ... --input ...`,
`bench-allreduce [--pairs] [--out FILE]` (under torchrun: the `verify` suite's all-reduce).

Exit codes: 0 success (including a graceful stop on SIGTERM/SIGUSR1), 2 bad configuration or
command line (one line on stderr naming the field, no traceback), 3, 4, 5 final failures
(train.FINAL_EXIT_CODES: no launcher should retry them), anything else is a crash.
Validation runs before torch is imported, so `--check` and bad configs answer in a moment.

`parsers()` returns every parser by subcommand ("" is train); each argument declares what it names
(`fileio.declare`). Every path goes through the one input and output layer (`fileio`, `paths`):
inputs first, then the output folder, all before torch is imported; a refusal is one line
`PATH: message. Hint: ...` and exit 2, as is an OS error while writing the output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from . import fileio, paths
from .config import ConfigError, grad_accum_steps, load_config
from .fileio import PathKind, declare

PROG = "hyperpod_trainer"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would print the usage block too; one line is what job logs need.
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


# Every argument of every parser declares what it names (`fileio.declare`): an input file or
# folder with its size limit, an output folder, or not a path (flags and `choices` are not paths
# by nature). The matrix test walks `parsers()` and runs each path argument with hostile paths.
IN_FILE, IN_FOLDER, IN_PATH = PathKind.INPUT_FILE, PathKind.INPUT_FOLDER, PathKind.INPUT_PATH
OUT_FOLDER, OUT_FILE = PathKind.OUTPUT_FOLDER, PathKind.OUTPUT_FILE
NOT_A_PATH = PathKind.NOT_A_PATH


def _train_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"python -m {PROG}",
        description=__doc__.splitlines()[0],
        epilog="other commands: import-hf, export-hf, prepare-data, bench-allreduce (each with "
        "--help)",
    )
    add = parser.add_argument
    declare(
        add("--config", help="YAML file (sections: model, data, train, optim, ...)"),
        IN_FILE,
        limit=paths.CONFIG_LIMIT,
    )
    # KEY=VALUE: the folders a value may name (checkpoint.dir, data.path) are the job's, on the
    # cluster; the config validates them and the checkpointer never touches what it did not write.
    declare(
        add(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one field, e.g. --set train.steps=50 (repeatable; applied after "
            "--config)",
        ),
        NOT_A_PATH,
    )
    add(
        "--check",
        action="store_true",
        help="validate, print the resolved config as JSON and exit (no torch import)",
    )
    declare(
        add(
            "--world-size",
            type=int,
            help="with --check: world size to validate the batch split for (default: $WORLD_SIZE)",
        ),
        NOT_A_PATH,
    )
    return parser


def _import_hf_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"python -m {PROG} import-hf",
        description="Hugging Face Llama (config.json + safetensors) -> a checkpoint folder the "
        "trainer starts from (model weights at step 0, fresh optimizer).",
    )
    add = parser.add_argument
    declare(add("src", type=Path, help="folder with config.json and *.safetensors"), IN_FOLDER)
    declare(add("out", type=Path, help="new checkpoint folder (use as checkpoint.dir)"), OUT_FOLDER)
    add(
        "--force",
        action="store_true",
        help="replace OUT if an earlier import-hf wrote it (never a folder holding anything else)",
    )
    return parser


def _export_hf_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"python -m {PROG} export-hf",
        description="A trainer checkpoint -> safetensors + config.json (+ tokenizer) that "
        "transformers' AutoModelForCausalLM.from_pretrained loads. Reads the model tensors "
        "only, never the optimizer state.",
    )
    add = parser.add_argument
    declare(
        add("checkpoint", type=Path, help="a step_NNNNNN folder, or a checkpoint.dir (its newest)"),
        IN_FOLDER,
    )
    declare(add("out", type=Path, help="new folder for the Hugging Face model"), OUT_FOLDER)
    add(
        "--dtype",
        choices=["fp32", "bf16"],
        default="fp32",
        help="weights' dtype (default fp32: the checkpoint's master weights)",
    )
    declare(
        add(
            "--tokenizer",
            type=Path,
            help="tokenizer.json (or its folder) to ship with the model; default: the one "
            "prepare-data wrote beside the data the checkpoint was trained on, if any",
        ),
        IN_PATH,
        limit=paths.TOKENIZER_LIMIT,
    )
    add(
        "--force",
        action="store_true",
        help="replace OUT if an earlier export-hf wrote it (never a folder holding anything else)",
    )
    return parser


def _prepare_data_parser() -> argparse.ArgumentParser:
    from .shards import DTYPES

    parser = _Parser(
        prog=f"python -m {PROG} prepare-data",
        description="Tokenize text into the trainer's headered .tokens shards, with a held-out "
        "split (DIR/eval/).",
    )
    add = parser.add_argument
    declare(
        add(
            "--tokenizer",
            type=Path,
            required=True,
            help="a Hugging Face tokenizers tokenizer.json, or its folder (with --format chat: "
            "the chat template is read beside it)",
        ),
        IN_PATH,
        limit=paths.TOKENIZER_LIMIT,
    )
    declare(
        add(
            "--input",
            type=Path,
            action="append",
            required=True,
            help="a .jsonl, .parquet or text file, a folder of them, or a datasets "
            "save_to_disk folder (repeatable)",
        ),
        IN_PATH,
        limit=paths.DATA_FILE_LIMIT,
    )
    declare(add("--output", type=Path, required=True, help="new folder for the shards"), OUT_FOLDER)
    declare(
        add(
            "--eval-fraction",
            type=float,
            default=0.0,
            help="share of documents held out into DIR/eval/ (default 0)",
        ),
        NOT_A_PATH,
    )
    declare(
        add(
            "--workers",
            type=int,
            default=max(1, (os.cpu_count() or 2) - 1),
            help="tokenizing processes (default: CPUs - 1)",
        ),
        NOT_A_PATH,
    )
    declare(add("--text-field", default="text", help="JSON/Parquet/datasets field"), NOT_A_PATH)
    declare(
        add("--eos", help="token appended after every document (e.g. '<|end_of_text|>')"),
        NOT_A_PATH,
    )
    declare(
        add("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (about)"),
        NOT_A_PATH,
    )
    add("--dtype", choices=list(DTYPES), help="token dtype (default: the smallest that fits)")
    declare(
        add(
            "--format",
            choices=["text", "chat", "prompt-completion"],
            default="text",
            help='text: documents for pretraining (default); chat: {"messages": [...]} '
            "lines rendered with the tokenizer's chat template, loss on assistant turns; "
            'prompt-completion: {"prompt", "completion"} lines, loss on the completion',
        ),
        NOT_A_PATH,
    )
    declare(
        add(
            "--seq-len",
            type=int,
            help="chat/prompt-completion: training sequence length (data.seq_len); examples "
            "are packed into rows of seq-len + 1 tokens",
        ),
        NOT_A_PATH,
    )
    add(
        "--pad",
        action="store_true",
        help="chat/prompt-completion: one example per row, padded (default: pack several)",
    )
    declare(add("--seed", type=int, default=0, help="seed of the held-out split"), NOT_A_PATH)
    add(
        "--force",
        action="store_true",
        help="replace DIR if an earlier prepare-data wrote it (never a folder holding anything "
        "else)",
    )
    return parser


_SIZE = re.compile(r"(\d+)([KMG]?)", re.IGNORECASE)


def _byte_size(value: str) -> int:
    """1048576, 1M, 64K, 1G (K, M, G: powers of 1024, as nccl-tests' -b/-e)."""
    found = _SIZE.fullmatch(value.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"not a size: {value!r} (e.g. 1048576, 64K, 1M, 1G)")
    return int(found[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[found[2].upper()]


def _bench_allreduce_parser() -> argparse.ArgumentParser:
    from . import collective as c

    parser = _Parser(
        prog=f"torchrun ... -m {PROG} bench-allreduce",
        description="All-reduce bus bandwidth over the job's ranks (NCCL on GPUs, gloo on CPU), "
        "then, with --pairs, over every pair of nodes; prints an nccl-tests-like table and "
        "appends `allreduce` records (JSON Lines) to --out.",
    )
    add = parser.add_argument
    # `hyperpod-kit-verify` gives the run, the records file and the sizes through the job's
    # environment (HPK_VERIFY_*): its job file is rendered once, at synth (docs/verify.md).
    env = os.environ.get
    for flag, default, what in (
        ("--min-bytes", env("HPK_VERIFY_MIN_BYTES", c.DEFAULT_MIN_BYTES), "smallest"),
        ("--max-bytes", env("HPK_VERIFY_MAX_BYTES", c.DEFAULT_MAX_BYTES), "largest"),
    ):
        declare(
            add(
                flag,
                type=_byte_size,
                default=default,
                metavar="BYTES",
                help=f"{what} message size, a power of two (default {default}; 64K, 1M, 1G; "
                f"$HPK_VERIFY_{flag[2:5].upper()}_BYTES)",
            ),
            NOT_A_PATH,
        )
    declare(
        add(
            "--iters",
            type=int,
            default=c.DEFAULT_ITERS,
            help=f"timed all-reduces per size (default {c.DEFAULT_ITERS}; fewer above "
            f"{c.SCALE_BYTES >> 20} MiB, halved per doubling, at least {c.MIN_SCALED_ITERS})",
        ),
        NOT_A_PATH,
    )
    declare(
        add(
            "--warmup",
            type=int,
            default=c.DEFAULT_WARMUP,
            help=f"untimed all-reduces before them (default {c.DEFAULT_WARMUP}, scaled alike)",
        ),
        NOT_A_PATH,
    )
    add("--pairs", action="store_true", help="also every pair of nodes, disjoint pairs at once")
    declare(
        add(
            "--out",
            type=Path,
            metavar="FILE",
            default=env("HPK_VERIFY_OUT"),
            help="records file to append to (rank 0): new, or JSON Lines of records "
            "(default $HPK_VERIFY_OUT)",
        ),
        OUT_FILE,
    )
    # --run-id, not --run: torchrun's own parser reads abbreviations of its options anywhere
    # on the command line, and "--run" is one of --run-path's (torchrun refuses to start).
    declare(
        add(
            "--run-id",
            default=env("HPK_VERIFY_RUN"),
            help="the run id, verify-YYYYMMDDTHHMMSSZ (default: $HPK_VERIFY_RUN, else now, UTC)",
        ),
        NOT_A_PATH,
    )
    declare(add("--group", help="the instance group, for the records"), NOT_A_PATH)
    declare(
        add(
            "--node-name",
            help="this node's name in the records (default: $SLURMD_NODENAME, else the host name)",
        ),
        NOT_A_PATH,
    )
    return parser


_PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "": _train_parser,  # no subcommand: train (as the rendered jobs call it)
    "import-hf": _import_hf_parser,
    "export-hf": _export_hf_parser,
    "prepare-data": _prepare_data_parser,
    "bench-allreduce": _bench_allreduce_parser,
}


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command, by subcommand ("" is train, the command without one); the
    handlers parse with these same parsers."""
    return {name: build() for name, build in _PARSERS.items()}


def _import_hf(args: argparse.Namespace) -> int:
    # Paths first, before torch is imported or anything is read.
    paths.import_hf_paths(args.src, args.out, force=args.force)
    from .hf import import_hf, print_import_summary

    shape = import_hf(args.src, args.out, force=args.force)
    print_import_summary(shape, args.src, args.out)
    return 0


def _export_hf(args: argparse.Namespace) -> int:
    paths.export_hf_paths(args.checkpoint, args.out, tokenizer=args.tokenizer, force=args.force)
    from .hf import export_hf

    folder = export_hf(
        args.checkpoint, args.out, dtype=args.dtype, tokenizer=args.tokenizer, force=args.force
    )
    print(f"exported {folder} -> {args.out} ({args.dtype})", file=sys.stderr)
    return 0


def _prepare_data(args: argparse.Namespace) -> int:
    paths.prepare_data_paths(args.tokenizer, args.input, args.output, force=args.force)
    from .prepare import run as prepare_run

    return prepare_run(args)


def _bench_allreduce(args: argparse.Namespace) -> int:
    from . import collective as c

    for flag, value in (("--min-bytes", args.min_bytes), ("--max-bytes", args.max_bytes)):
        if not c.is_power_of_two(value):
            raise ConfigError(flag, f"{value} is not a power of two (e.g. 1048576, 1M, 1G)")
        if not c.ELEMENT_BYTES <= value <= c.MAX_BYTES:
            raise ConfigError(
                flag,
                f"{value} is outside {c.ELEMENT_BYTES} bytes (one float32) .. "
                f"{fileio.size_text(c.MAX_BYTES)}",
            )
    if args.min_bytes > args.max_bytes:
        raise ConfigError(
            "--min-bytes", f"{args.min_bytes} is more than --max-bytes {args.max_bytes}"
        )
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError("--iters/--warmup", "at least 1 timed and 0 warmup iterations")
    run_id = args.run_id or datetime.now(UTC).strftime("verify-%Y%m%dT%H%M%SZ")
    if not c.RUN_ID.fullmatch(run_id):
        raise ConfigError("--run-id", f"{run_id!r} is not a run id verify-YYYYMMDDTHHMMSSZ (UTC)")
    for flag, value in (("--group", args.group), ("--node-name", args.node_name)):
        if value is not None and not (value.strip() and value.isprintable()):
            raise ConfigError(flag, f"{value!r} is not a name")
    if args.out is not None:
        paths.records_paths(args.out)  # before torch: a refusal costs no job time
    options = c.Options(
        sizes=c.sizes(args.min_bytes, args.max_bytes),
        iters=args.iters,
        warmup=args.warmup,
        pairs=args.pairs,
        out=args.out,
        run=run_id,
        group=args.group,
        node_name=args.node_name,
        append=paths.append_records,
    )
    return c.run(options)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "import-hf": _import_hf,
    "export-hf": _export_hf,
    "prepare-data": _prepare_data,
    "bench-allreduce": _bench_allreduce,
}
_OUTPUT_OF = {
    "import-hf": "out",
    "export-hf": "out",
    "prepare-data": "output",
    "bench-allreduce": "out",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fileio.reset_inputs()  # a command's inputs are its own (tests run several in one process)
    if not (argv and argv[0] in COMMANDS):
        return _train(argv)
    name = argv[0]
    args = _PARSERS[name]().parse_args(argv[1:])
    try:
        return COMMANDS[name](args)
    except ConfigError as exc:
        for line in getattr(exc, "lines", None) or [str(exc)]:  # prepare-data's bad lines
            print(f"{PROG} {name}: error: {line}", file=sys.stderr, flush=True)
        return 2
    except fileio.PathError as exc:
        print(f"{PROG} {name}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:  # writing the output: permissions, a full disk, a read-only folder
        line = fileio.os_error_line(exc, getattr(args, _OUTPUT_OF[name]), writing=_writing(exc))
        print(f"{PROG} {name}: error: {line}", file=sys.stderr, flush=True)
        return 2


def _writing(exc: OSError) -> bool:
    """Whether an OSError is about the output (not about a file inside one of the inputs)."""
    if exc.filename is None:
        return True
    real = Path(os.path.realpath(exc.filename))
    return not any(real == src or src in real.parents for src in fileio.inputs_read())


def _train(argv: list[str]) -> int:
    args = _train_parser().parse_args(argv)
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
    except fileio.PathError as exc:  # --config: a FIFO, a device, too large, not UTF-8, ...
        print(f"{PROG}: config error: {exc}", file=sys.stderr, flush=True)
        return 2
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
