"""`hyperpod-kit init [FILE]`: a commented environment file that passes `validate` as written
(`init --project DIR`: a repository around it, hyperpod_kit/cli/project.py).

The choices come from flags; on a terminal, the ones not given are asked for; otherwise they are
the embedded default's (environments/default.yaml), printed so the user sees what was chosen. A
bad flag is one line `--flag: 'value' message. Hint: ...` with exit 2 and nothing written. The file
is rendered from `templates/environment.yaml.j2`, every value through the `yaml` filter, then
loaded like `validate` would before it is written (through `outputs`: an existing file only with
--force).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from hyperpod_kit.config.facts import instance_type, instance_types, regions, regions_checked
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import USER_NAME, EnvironmentConfig
from hyperpod_kit.paths import DEFAULT_ENVIRONMENT

if TYPE_CHECKING:
    from hyperpod_kit.config.environment import LoadedEnvironment

T = TypeVar("T")

EXIT_OK, EXIT_BAD_INPUT = 0, 2
DEFAULT_OUTPUT = "environment.yaml"
TEMPLATES = Path(__file__).resolve().parent / "templates"
EMBEDDED_DEFAULT = DEFAULT_ENVIRONMENT
FIRST_UID = 10001
MICRO_BATCH = 4
MIN_GLOBAL_BATCH = 32
NAME = r"^[a-z][a-z0-9-]{1,22}[a-z0-9]$"  # EnvironmentConfig.name


class ChoiceError(ValueError):
    """One flag's value that init refuses: rendered as `--flag: 'value' message. Hint: ...`."""

    def __init__(self, flag: str, value: object, message: str, hint: str) -> None:
        super().__init__(f"{flag}: {str(value)!r} {message}. Hint: {hint}.")


class CombinationError(ValueError):
    """Choices each fine that make a file validation refuses (`combination_error`'s line)."""


@dataclass(frozen=True)
class Choices:
    """What `init` asks: everything else in the file follows from these."""

    name: str
    orchestrator: str
    region: str
    az_id: str
    instance_type: str
    count: int
    users: tuple[str, ...] = field(default=())
    studio: bool = False


def default_choices() -> Choices:
    """The embedded default environment's choices (environments/default.yaml)."""
    config = EnvironmentConfig.model_validate(yaml.safe_load(EMBEDDED_DEFAULT.read_text()))
    role = "compute" if config.orchestrator == "slurm" else "worker"
    group = next(g for g in config.cluster.instance_groups if g.role == role)
    return Choices(
        name=config.name,
        orchestrator=config.orchestrator,
        region=config.region,
        az_id=config.availability_zone_id,
        instance_type=group.primary_type,
        count=group.instance_count,
        users=tuple(u.name for u in config.users),
        studio=config.studio.enabled,
    )


# --- checking each choice ----------------------------------------------------------------------


def _close(value: str, choices: list[str]) -> str:
    found = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f"did you mean {found[0]!r}? " if found else ""  # a sentence, or nothing


def check_name(value: str) -> str:
    if not re.match(NAME, value):
        raise ChoiceError(
            "--name",
            value,
            "is not an environment name",
            "3-24 lowercase letters, digits and hyphens, starting with a letter",
        )
    return value


def check_orchestrator(value: str) -> str:
    if value not in ("slurm", "eks"):
        raise ChoiceError("--orchestrator", value, "is not an orchestrator", "slurm or eks")
    return value


def check_region(value: str) -> str:
    table = regions()
    known = table.get(value)
    if known is None:
        raise ChoiceError(
            "--region",
            value,
            f"is not a region in hyperpod-kit's table (checked {regions_checked()})",
            _close(value, sorted(table)) or "e.g. us-west-2",
        )
    if not known.hyperpod_offered:
        offered = sorted(r for r, row in table.items() if row.hyperpod_offered)
        raise ChoiceError(
            "--region",
            value,
            f"does not offer SageMaker HyperPod (table checked {regions_checked()})",
            f"use one of {', '.join(offered)}",
        )
    return value


def check_az_id(value: str, region: str) -> str:
    zones = regions()[region].az_ids
    if value not in zones:
        other = next((r for r, row in regions().items() if value in row.az_ids), None)
        where = f"is a zone of {other}, not of {region}" if other else f"is not a zone of {region}"
        raise ChoiceError(
            "--az-id",
            value,
            where,
            f"use one of {', '.join(zones)} (an AZ ID, not a name like {region}a)",
        )
    return value


def check_instance_type(value: str) -> str:
    if instance_type(value) is None:
        raise ChoiceError(
            "--instance-type",
            value,
            "is not an instance type HyperPod takes",
            _close(value, sorted(instance_types()))
            + "every ml.* type of HyperPod's ClusterInstanceType list works, e.g. "
            "ml.g5.8xlarge or ml.p5.48xlarge",
        )
    facts = instance_type(value)
    if facts is not None and facts.accelerator_kind != "gpu":
        what = "Trainium chips" if facts.accelerator_kind == "trainium" else "no GPU"
        raise ChoiceError(
            "--instance-type",
            value,
            f"has {what}; the job init writes runs the bundled trainer, which needs NVIDIA GPUs",
            "pick a GPU type, e.g. ml.g5.8xlarge or ml.p5.48xlarge",
        )
    return value


def check_count(value: str | int) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ChoiceError("--count", value, "is not a number of nodes", "a whole number, 1 or more")
    return count


def check_users(value: str) -> tuple[str, ...]:
    """Comma-separated login names, each given once; an empty name (`,,`, a trailing comma, an
    empty value) is refused rather than dropped: `--users ',,'` must not mean "nobody"."""
    names = tuple(n.strip() for n in value.split(","))
    if not all(names):
        raise ChoiceError(
            "--users",
            value,
            "has an empty name" if any(names) else "names nobody",
            "comma-separated login names without empty ones, e.g. --users alice,bob; "
            "leave --users out for nobody",
        )
    for name in names:
        if not re.match(USER_NAME, name):
            raise ChoiceError(
                "--users",
                name,
                "is not a login name",
                "1-32 lowercase letters, digits and hyphens, starting with a letter; "
                "several: --users alice,bob",
            )
    if len(set(names)) != len(names):
        raise ChoiceError("--users", value, "names someone twice", "give each name once")
    return names


def check_studio(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    answer = value.strip().lower()
    if answer not in ("y", "yes", "on", "true", "n", "no", "off", "false"):
        raise ChoiceError("--studio", value, "is not yes or no", "answer yes or no")
    return answer in ("y", "yes", "on", "true")


# --- flags, questions, defaults ----------------------------------------------------------------


def add_init_parser(sub: Any) -> None:
    what = "write a commented environment file that passes `validate`"
    p = sub.add_parser(
        "init",
        help=what,
        description=f"{what}, from flags or, on a terminal, a few questions (the rest: the "
        "embedded default's choices). An existing FILE is overwritten only with --force. With "
        "--project DIR, a repository for a team's environments around that file, whose "
        "`npx cdk` works in a fresh clone.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "file", nargs="?", default=DEFAULT_OUTPUT, help=f"the file to write ({DEFAULT_OUTPUT})"
    )
    where.add_argument(
        "--project",
        metavar="DIR",
        help="write a repository for a team's environments into DIR instead: the environment "
        "file and its version lock under environments/, package.json and package-lock.json "
        "pinning the CDK CLI, cdk.json with its launcher bin/cdk-app, app.py, README.md, "
        ".gitignore; DIR must be new, empty or a project hyperpod-kit wrote (else --force)",
    )
    p.add_argument("--name", help="environment name, the prefix of every stack (hyperpod-dev)")
    p.add_argument("--orchestrator", help="slurm or eks (slurm)")
    p.add_argument("--region", help="AWS region that offers HyperPod (us-west-2)")
    p.add_argument("--az-id", help="availability zone ID in that region, like usw2-az2")
    p.add_argument("--instance-type", help="the compute nodes' HyperPod type (ml.g5.8xlarge)")
    p.add_argument("--count", help="how many compute nodes (2)")
    p.add_argument(
        "--users",
        metavar="NAMES",
        help="the people, comma-separated login names, e.g. alice,bob (none)",
    )
    p.add_argument(
        "--studio",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a SageMaker Studio domain with a profile per person (off)",
    )
    p.add_argument(
        "--no-input",
        action="store_true",
        help="never ask, even on a terminal: flags, else the default's choices",
    )
    p.add_argument(
        "--github",
        action="store_true",
        help="with --project: also the GitHub Actions workflows of `pipeline github` for its "
        "environment (.github/workflows; needs --toolkit-repository unless the installed "
        "hyperpod-kit names its GitHub source)",
    )
    from hyperpod_kit.cli.pipeline_flags import add_toolkit_arguments

    add_toolkit_arguments(
        p, "the --github workflows install", "checked out (--github) and installed (README.md)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite FILE if it exists; with --project, write the project's files into a "
        "folder hyperpod-kit did not write, or over files of its own edited since (files of the "
        "same names are overwritten, nothing else is touched)",
    )


FLAGS = ("name", "orchestrator", "region", "az_id", "instance_type", "count", "users", "studio")


def _from_flags(args: argparse.Namespace, base: Choices, *, check: bool = True) -> Choices:
    """The choices the flags give, each checked, over `base`; `check`: also their combination
    (off when questions follow, which ask for what is missing)."""
    c = base
    if args.name is not None:
        c = replace(c, name=check_name(args.name))
    if args.orchestrator is not None:
        c = replace(c, orchestrator=check_orchestrator(args.orchestrator))
    if args.region is not None:
        region = check_region(args.region)
        zones = regions()[region].az_ids
        keep = c.az_id if c.az_id in zones else zones[0]
        c = replace(c, region=region, az_id=keep)
    if args.az_id is not None:
        c = replace(c, az_id=check_az_id(args.az_id, c.region))
    if args.instance_type is not None:
        c = replace(c, instance_type=check_instance_type(args.instance_type))
    if args.count is not None:
        c = replace(c, count=check_count(args.count))
    if args.users is not None:
        c = replace(c, users=check_users(args.users))
    if args.studio is not None:
        c = replace(c, studio=args.studio)
    return check_studio_people(c) if check else c


def check_studio_people(c: Choices) -> Choices:
    """Studio opens through a person's profile: on, it needs at least one person."""
    if c.studio and not c.users:
        raise ChoiceError(
            "--studio",
            "on",
            "needs people to give profiles to, and there are none",
            "name them with --users alice,bob, or leave Studio off",
        )
    return c


def _ask(question: str, default: str, check: Any) -> Any:
    """Ask until the answer passes `check`; an empty answer takes the default."""
    while True:
        answer = input(f"{question} [{default}]: ").strip() or default
        try:
            return check(answer)
        except ChoiceError as e:
            print(e, file=sys.stderr)


def _questions(args: argparse.Namespace, c: Choices) -> Choices:
    """Ask for what the flags did not give."""
    if args.orchestrator is None:
        c = replace(
            c, orchestrator=_ask("orchestrator (slurm or eks)", c.orchestrator, check_orchestrator)
        )
    if args.region is None:
        region = _ask("region", c.region, check_region)
        zones = regions()[region].az_ids
        c = replace(c, region=region, az_id=c.az_id if c.az_id in zones else zones[0])
    if args.az_id is None:
        listing = ", ".join(regions()[c.region].az_ids)
        c = replace(
            c,
            az_id=_ask(
                f"availability zone ID ({listing})", c.az_id, lambda v: check_az_id(v, c.region)
            ),
        )
    if args.instance_type is None:
        c = replace(
            c, instance_type=_ask("compute instance type", c.instance_type, check_instance_type)
        )
    if args.count is None:
        c = replace(c, count=_ask("compute nodes", str(c.count), check_count))
    if args.users is None:
        c = replace(
            c,
            users=_ask(
                "people (login names, comma-separated; none: -)",
                ",".join(c.users) or "-",
                lambda v: () if v == "-" else check_users(v),
            ),
        )
    if args.studio is None:
        c = replace(
            c,
            studio=_ask("SageMaker Studio (yes or no)", "yes" if c.studio else "no", check_studio),
        )
    while c.studio and not c.users:
        print(
            ChoiceError("--studio", "on", "needs people to give profiles to", "name at least one"),
            file=sys.stderr,
        )
        c = replace(
            c,
            users=_ask(
                "people (login names, comma-separated)",
                "-",
                lambda v: () if v == "-" else check_users(v),
            ),
        )
    return c


def describe(c: Choices) -> list[str]:
    return [
        f"  name: {c.name}",
        f"  orchestrator: {c.orchestrator}",
        f"  region: {c.region}",
        f"  availability zone ID: {c.az_id}",
        f"  compute: {c.count} x {c.instance_type}",
        f"  people: {', '.join(c.users) or 'none'}",
        f"  Studio: {'on' if c.studio else 'off'}",
    ]


# --- the file ----------------------------------------------------------------------------------


def _job(c: Choices) -> dict[str, Any]:
    """A job the trainer and `validate` accept on the compute group: one rank per accelerator,
    a global batch that splits into micro batches of 4 on every rank; activation checkpointing,
    then micro batches of 1, where the job's memory per GPU needs them (`_fitted`)."""
    facts = instance_type(c.instance_type)
    ranks = facts.processes_per_node if facts is not None and facts.processes_per_node else 1
    world = c.count * ranks
    unit = MICRO_BATCH * world
    job = {
        "preset": "llama-1b",
        "nodes": c.count,
        "processes_per_node": ranks if c.orchestrator == "eks" else None,
        "global_batch_size": unit * max(1, -(-MIN_GLOBAL_BATCH // unit)),
        "micro_batch_size": MICRO_BATCH,
        "seq_len": 2048,
        "activation_checkpointing": False,
        "user": c.users[0] if c.orchestrator == "eks" and c.studio and c.users else None,
    }
    gib = facts.accelerator_memory_gib if facts is not None else None
    return _fitted(job, world, gib) if gib else job


def _fitted(job: dict[str, Any], world: int, gpu_gib: float) -> dict[str, Any]:
    """The job with activation checkpointing on, and then micro batches of 1, as far as its
    memory per GPU (hyperpod_trainer.memory, the estimate `validate` checks) needs them. The
    global batch stays a multiple of micro batch x ranks. A job that fits neither way is left
    for `validate` to refuse, named after --count."""
    from hyperpod_trainer.memory import GIB, estimate_memory
    from hyperpod_trainer.presets import PRESETS

    def fits(candidate: dict[str, Any]) -> bool:
        memory = estimate_memory(
            PRESETS[candidate["preset"]],
            seq_len=candidate["seq_len"],
            micro_batch_size=candidate["micro_batch_size"],
            world_size=world,
            activation_checkpointing=candidate["activation_checkpointing"],
            gpu_bytes=int(gpu_gib * GIB),
        )
        return memory.total <= gpu_gib * GIB

    for change in ({}, {"activation_checkpointing": True}, {"micro_batch_size": 1}):  # in turn
        job = {**job, **change}
        if fits(job):
            break
    return job


def render(c: Choices, file: str) -> str:
    from hyperpod_kit.templating import environment

    env = environment(TEMPLATES, trim_blocks=True)
    slurm = c.orchestrator == "slurm"
    groups = (
        [
            {
                "name": "controller",
                "role": "controller",
                "instance_type": "ml.m5.xlarge",
                "instance_count": 1,
            },
            {
                "name": "login",
                "role": "login",
                "instance_type": "ml.m5.xlarge",
                "instance_count": 1,
            },
        ]
        if slurm
        else []
    ) + [
        {
            "name": "compute" if slurm else "workers",
            "role": "compute" if slurm else "worker",
            "instance_type": c.instance_type,
            "instance_count": c.count,
        }
    ]
    zones = regions()[c.region].az_ids
    control_plane = None if slurm else next(z for z in zones if z != c.az_id)
    text = env.get_template("environment.yaml.j2").render(
        file=file,
        name=c.name,
        orchestrator=c.orchestrator,
        region=c.region,
        az_id=c.az_id,
        control_plane_az_id=control_plane,
        users=[{"name": n, "uid": FIRST_UID + i} for i, n in enumerate(c.users)],
        groups=groups,
        studio=c.studio,
        job=_job(c),
    )
    return text.rstrip("\n") + "\n"


# Where a finding about the rendered file points, the choice (flag) that decides it.
_FLAG_OF = (
    ("network.vpc.private_subnet_cidr", "--count"),
    ("cluster.instance_groups", "--count"),
    ("trainer.job", "--count"),
    ("users", "--users"),
    ("studio", "--studio"),
    ("region", "--region"),
    ("availability_zone_id", "--az-id"),
    ("network.control_plane_availability_zone_id", "--az-id"),
    ("name", "--name"),
)


def combination_error(findings: list[Finding]) -> str:
    """One line for the first error of a rendered file that validation refuses, named after the
    choice that decides it (instance types have their own check before this one)."""
    first = next(f for f in findings if f.level is Level.ERROR)
    flag = next((flag for start, flag in _FLAG_OF if first.path.startswith(start)), "init")
    if "instance_type" in first.path:
        flag = "--instance-type"
    hint = f" {first.hint.rstrip('.')}" if first.hint else ""
    return (
        f"{flag}: these choices make a file that does not validate ({first.path}: "
        f"{first.message.rstrip('.')}); nothing written. Hint:{hint or ' change that choice'}."
    )


def choose(args: argparse.Namespace) -> Choices:
    """The choices: the flags', and on a terminal (unless --no-input) answers for the rest; else
    the embedded default's for what the flags leave. `ChoiceError` for a bad flag; `EOFError` or
    `KeyboardInterrupt` when a question gets no answer."""
    defaults = default_choices()
    if sys.stdin.isatty() and not args.no_input:
        return _questions(args, _from_flags(args, defaults, check=False))
    return _from_flags(args, defaults)


def validated(text: str, then: Callable[[LoadedEnvironment], T]) -> T:
    """Load the rendered file as `validate` would, from a temporary copy (nothing else beside
    it), and return `then(loaded)`, computed while the copy exists; `CombinationError` for a
    combination of choices that the flags' own checks let through."""
    from hyperpod_kit.config import ConfigError
    from hyperpod_kit.config.environment import load_environment

    with tempfile.TemporaryDirectory(prefix="hyperpod-kit-init.") as tmp:
        trial = Path(tmp) / "environment.yaml"
        trial.write_text(text, encoding="utf-8")
        try:
            return then(load_environment(trial))
        except ConfigError as e:
            raise CombinationError(combination_error(e.findings)) from None


def say_choices(args: argparse.Namespace, choices: Choices) -> None:
    given = any(getattr(args, f) is not None for f in FLAGS)
    if not given and not sys.stdin.isatty():
        print(
            "no flags and no terminal: the embedded default's choices (environments/default.yaml):",
            file=sys.stderr,
        )
    else:
        print("choices:", file=sys.stderr)
    for line in describe(choices):
        print(line, file=sys.stderr)


def _only_with_project(args: argparse.Namespace) -> None:
    """`CombinationError` for a flag of --project's given without it."""
    from hyperpod_kit.cli.pipeline_flags import DEFAULT_TOOLKIT_REF

    for flag, given in (
        ("--github", args.github),
        ("--toolkit-repository", args.toolkit_repository is not None),
        ("--toolkit-ref", args.toolkit_ref != DEFAULT_TOOLKIT_REF),
    ):
        if given and args.project is None:
            raise CombinationError(
                f"{flag}: only with --project, a project's workflows and README name it; "
                "nothing written. Hint: hyperpod-kit init --project DIR --github "
                "--toolkit-repository OWNER/NAME"
            )


def written(write: Callable[[], T], target: str) -> T | None:
    """`write()`'s result; None once a refusal or the system's error is said in one line."""
    from hyperpod_kit.outputs import OutputError, write_error

    try:
        return write()
    except OutputError as e:
        print(e, file=sys.stderr)
    except OSError as e:
        print(write_error(e, target), file=sys.stderr)
    return None


def init(args: argparse.Namespace) -> int:
    """`init FILE` (`init --project DIR` is cli/project.py's, which builds on this module)."""
    from hyperpod_kit.outputs import OutputError, check_file, write_file

    try:
        _only_with_project(args)
        # Refuse an existing file before asking anything (checked again with the real text).
        check_file(args.file, "", force=args.force, other="give another FILE")
        choices = choose(args)
        text = render(choices, args.file)
        # The file must pass `validate` as written: load it from a temporary copy first.
        validated(text, lambda loaded: None)
    except (ChoiceError, CombinationError, OutputError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except (EOFError, KeyboardInterrupt):
        print(f"{args.file}: nothing written (no answer)", file=sys.stderr)
        return EXIT_BAD_INPUT
    other = "give another FILE"
    done = written(  # True once written (write_file returns None)
        lambda: write_file(check_file(args.file, text, force=args.force, other=other)) or True,
        args.file,
    )
    if done is None:
        return EXIT_BAD_INPUT
    say_choices(args, choices)
    print(f"wrote {args.file}; next: hyperpod-kit validate {args.file}", file=sys.stderr)
    return EXIT_OK
