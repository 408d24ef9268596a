"""`hyperpod-kit job render | submit | list | show | logs | cancel` (docs/jobs.md).

The data scientist's day without a job file: `submit` renders the job from the environment's
`trainer.job` and the options given (the same renderer as `jobs`, which stays as the alias of
`job render`), says what it will use (nodes and whether they are free, the cost per hour from the
estimate's price table, the time one checkpoint takes) and asks unless --yes; `list` and `show`
add the trainer's own progress (step, loss, tokens per second, last checkpoint, restarts,
evaluation) to the scheduler's state; `logs` copies or follows the job's output; `cancel` stops it.

Slurm through the cluster's own client on PATH (the login node, or a Studio space's wrappers, which
run each command with the user's JWT); EKS through the Kubernetes API with the caller's IAM
identity. Light: no CDK, so a Studio space runs it with the package installed `--no-deps`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperpod_kit.config.derived import group_facts, job_group, job_partition
from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.config.schema import EnvironmentConfig, JobConfig
from hyperpod_kit.operations.job_model import Capacity, JobError, JobRecord, Scheduler

if TYPE_CHECKING:
    from hyperpod_kit.jobs import RenderedJob

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# Set by the Studio lifecycle (assets/studio/client.sh): the environment the space belongs to,
# so `hyperpod-kit job ...` needs no file argument there.
ENVIRONMENT_FILE_VARIABLE = "HYPERPOD_KIT_ENVIRONMENT_FILE"
# The space's settings (written by the lifecycle): where the FSx partition is on the nodes.
STUDIO_STATE = Path("~/.hyperpod-kit")

JOB_HELP = "render, submit and follow training jobs on the environment's cluster"
ACTIONS = ("render", "submit", "list", "show", "logs", "cancel")

_EPILOG = """\
Each ACTION has its own --help. FILE defaults to $HYPERPOD_KIT_ENVIRONMENT_FILE (which a Studio
space of the environment sets) or environments/default.yaml.

  job render  [FILE] [options] [-o DIR]   the job file, as `hyperpod-kit jobs` (its alias)
  job submit  [FILE] [options] [--yes]    render, say what it uses, ask, submit; prints the id
  job list    [FILE] [--all]              your jobs, newest first, with the trainer's progress
  job show    [FILE] JOB                  one job: the scheduler's state and the trainer's progress
  job logs    [FILE] JOB [--follow]       the job's output (Slurm: its .out file; EKS: rank 0's pod)
  job cancel  [FILE] JOB                  stop it (a resubmit of the same job resumes from the
                                          newest complete checkpoint in its checkpoint folder)

Slurm: the cluster's client commands on PATH (the login node, or a Studio space of the
environment); with accounting, `list` and `show` add sacct's history. EKS: the Kubernetes API
with your IAM identity (an access entry). exit codes: 0 done; 1 a rendered job failed its
linter, or submit was declined; 2 bad input: the file, an option, an unknown job, no cluster,
no credentials (one line)."""


# --- the parser ------------------------------------------------------------------------------


def add_job_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], default_file: str
) -> None:
    job = sub.add_parser(
        "job", help=JOB_HELP, description=f"{JOB_HELP}.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    actions = job.add_subparsers(
        dest="job_action", required=True, metavar="ACTION", help="what to do (below)"
    )

    def _action(name: str, what: str) -> argparse.ArgumentParser:
        return _action_parser(actions, name, what, default_file)

    render = _action("render", "render the job file (sbatch or HyperPodPyTorchJob)")
    add_render_arguments(render, output_help=_RENDER_OUTPUT)
    submit = _action("submit", "render the job, say what it uses, ask, and submit it")
    _job_options(submit)
    submit.add_argument(
        "--folder",
        metavar="DIR",
        help="where the job file is written and the job runs (its output file goes there): "
        "a folder the nodes see, on FSx (default: ~/fsx/jobs in a Studio space, else ./jobs)",
    )
    submit.add_argument("--yes", action="store_true", help="submit without asking")
    submit.add_argument(
        "--force", action="store_true", help="replace a job file changed since it was written"
    )
    lst = _action("list", "your jobs, newest first, with the trainer's progress")
    lst.add_argument("--all", action="store_true", help="every user's jobs, not only yours")
    _format(lst)
    show = _action("show", "one job: the scheduler's state and the trainer's progress")
    _job_id(show)
    _format(show)
    logs = _action("logs", "the job's output (Slurm: its .out file; EKS: rank 0's pod)")
    _job_id(logs)
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job has ended"
    )
    cancel = _action("cancel", "stop the job")
    _job_id(cancel)


_RENDER_OUTPUT = "folder for the job files (jobs): new, empty, or one that hyperpod-kit wrote"


def add_render_arguments(parser: argparse.ArgumentParser, *, output_help: str) -> None:
    """`jobs` and `job render`: the job options, the output folder and --force."""
    _job_options(parser)
    parser.add_argument("-o", "--output", default="jobs", metavar="DIR", help=output_help)
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite job files that were changed since hyperpod-kit wrote them, or write "
        "into a folder of your own",
    )


def _action_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    what: str,
    default_file: str,
) -> argparse.ArgumentParser:
    c = actions.add_parser(name, help=what, description=f"{what}.")
    c.add_argument(
        "file",
        nargs="?",
        default=os.environ.get(ENVIRONMENT_FILE_VARIABLE) or default_file,
        help=f"environment file (${ENVIRONMENT_FILE_VARIABLE}, else {default_file})",
    )
    c.add_argument(
        "--suppress", action="append", default=[], metavar="CHECK",
        help="hide warnings and infos of this check (repeatable)",
    )  # fmt: skip
    c.add_argument(
        "-q", "--quiet", action="store_true", help="errors only: no warnings or infos of the file"
    )
    return c


# Options that change trainer.job for this job only: (flag, field, type, help).
JOB_OPTIONS: tuple[tuple[str, str, Callable[[str], Any], str], ...] = (
    ("--name", "name", str, "the job's name (trainer.job.name)"),
    ("--preset", "preset", str, "the trainer's model preset (trainer.job.preset)"),
    ("--task", "task", str, "pretrain or sft (trainer.job.task)"),
    ("--data", "data_path", str, "folder of token shards on FSx, as the nodes see it "
     "(trainer.job.data_path)"),
    ("--checkpoint-dir", "checkpoint_dir", str, "checkpoint folder on FSx; an `import-hf` "
     "folder starts from that model (trainer.job.checkpoint_dir)"),
    ("--nodes", "nodes", int, "nodes (trainer.job.nodes)"),
    ("--steps", "max_steps", int, "training steps (trainer.job.max_steps)"),
    ("--global-batch-size", "global_batch_size", int, "trainer.job.global_batch_size"),
    ("--seq-len", "seq_len", int, "trainer.job.seq_len"),
)  # fmt: skip


def _job_options(parser: argparse.ArgumentParser) -> None:
    for flag, field, kind, what in JOB_OPTIONS:
        metavar = {"data_path": "PATH", "checkpoint_dir": "DIR"}.get(
            field, "N" if kind is int else field.upper()
        )
        parser.add_argument(flag, dest=f"set_{field}", type=kind, metavar=metavar, help=what)
    parser.add_argument(
        "--image",
        metavar="URI",
        help="the job's container image (default: the trainer stack's image, whose URI is known "
        "offline; rendered into the job, never looked up at run time)",
    )


def _job_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", metavar="JOB", help="the job's id (Slurm) or name (EKS)")


def _format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default) or json"
    )


# --- the job's settings ----------------------------------------------------------------------


class OptionError(Exception):
    """An option's value that trainer.job refuses: one line."""


def with_options(loaded: LoadedEnvironment, args: argparse.Namespace) -> EnvironmentConfig:
    """The environment with trainer.job changed by the options given, validated as the file is
    (the same schema and validators, so `--preset qwen2.5-7b` on a GPU it does not fit is refused
    as the file would be); `OptionError` names the option."""
    from pydantic import ValidationError

    from hyperpod_kit.config.findings import Level
    from hyperpod_kit.config.validators import run_validators

    config = loaded.config
    given = {
        field: getattr(args, f"set_{field}")
        for _, field, _, _ in JOB_OPTIONS
        if getattr(args, f"set_{field}", None) is not None
    }
    if not given:
        return config
    flag_of = {field: flag for flag, field, _, _ in JOB_OPTIONS}
    for field in PATH_FIELDS & set(given):
        given[field] = node_path(given[field], studio_view())
    data = {**config.trainer.job.model_dump(), **given}
    try:
        job = JobConfig.model_validate(data)
    except ValidationError as e:
        error = e.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        flag = flag_of.get(field, field)
        raise OptionError(
            f"{flag}: {error['msg']} (trainer.job.{field}). Hint: see `hyperpod-kit schema "
            "--markdown` for trainer.job's values."
        ) from None
    changed = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    suppress = [*loaded_suppress(args), *config.validation.suppress]
    for finding in run_validators(changed, suppress=suppress):
        if finding.level is not Level.ERROR:
            continue
        option = flag_of.get(finding.path.removeprefix("trainer.job.").split(".")[0])
        if option is None and not finding.path.startswith("trainer.job"):
            continue  # the file's own errors were refused when it was loaded
        shown = f"{option} ({finding.path})" if option else finding.path
        raise OptionError(f"{shown}: {finding.message}. Hint: {finding.hint}")
    return changed


PATH_FIELDS = frozenset({"data_path", "checkpoint_dir"})


def node_path(value: str, view: StudioView | None) -> str:
    """A path option as the nodes see it: in a Studio space, ~/fsx/x (or its full path) is
    the partition's folder on the nodes (/fsx/<user>/x); anything else is taken as it is."""
    if view is None:
        return value
    local = Path(value).expanduser()
    for base in (view.local, view.local.resolve()):
        if local == base or base in local.parents:
            rest = local.relative_to(base).as_posix()
            return view.node if rest == "." else f"{view.node}/{rest}"
    return value


def loaded_suppress(args: argparse.Namespace) -> list[str]:
    return list(getattr(args, "suppress", []) or [])


def _image(config: EnvironmentConfig, given: str | None) -> Any:
    """The job's image: --image, else the trainer stack's (its URI computed from the asset
    offline where aws-cdk-lib is installed, else read from the Studio upload's install.json)."""
    from hyperpod_kit.jobs.image import given_image, trainer_stack_image

    if given:
        return given_image(given)
    if config.orchestrator != "slurm" or not config.trainer.build_image:
        return None
    uri = _studio_trainer_image()
    if uri is None:
        try:
            from hyperpod_kit.stacks.trainer import trainer_image_uri
        except ImportError:  # a space without aws-cdk-lib and without the upload's record
            return None
        uri = trainer_image_uri(config)
    return trainer_stack_image(uri)


def _studio_trainer_image() -> str | None:
    """The trainer image the Studio upload recorded at synth (install.json beside the
    environment file the space was given), or None outside a space."""
    file = os.environ.get(ENVIRONMENT_FILE_VARIABLE)
    if not file:
        return None
    record = Path(file).parent / "install.json"
    try:
        found = json.loads(record.read_text()).get("trainer_image")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and found else None


def render(config: EnvironmentConfig, image_uri: str | None) -> list[RenderedJob]:
    """The environment's job files; `JobError` for an image or template they cannot have."""
    from hyperpod_kit.jobs import ImageError, render_jobs
    from hyperpod_kit.jobs.slurm import TemplateError

    try:
        return render_jobs(config, image=_image(config, image_uri))
    except ImageError as e:
        raise JobError(f"jobs: {e}") from None
    except TemplateError as e:  # the user's own template (trainer.job.template)
        raise JobError(
            f"{e}. Hint: {e.hint}; `hyperpod-kit jobs` renders the bundled template when "
            "trainer.job.template is left out."
        ) from None


def lint_problems(rendered: list[RenderedJob]) -> list[str]:
    from hyperpod_kit.jobs import lint

    return [f"{job.filename}: {p}" for job in rendered for p in lint(job)]


def _print_lint(problems: list[str]) -> None:
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"jobs: {len(problems)} problem(s) in the rendered files; nothing written. Hint: a "
          "template of your own (trainer.job.template) must render a script that passes "
          "bash -n and shellcheck.", file=sys.stderr)  # fmt: skip


def render_command(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    """`jobs` and `job render`: write the job files into the output folder."""
    from hyperpod_kit.outputs import JOBS, write_error, write_files

    try:
        config = with_options(loaded, args)
        rendered = render(config, args.image)
    except (OptionError, JobError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    if problems := lint_problems(rendered):  # a job file that fails its linter fails there
        _print_lint(problems)
        return EXIT_FAILED
    files = {job.filename: job.text for job in rendered}
    try:
        writes = write_files(args.output, files, kind=JOBS, force=args.force)
    except OSError as e:
        print(write_error(e, args.output), file=sys.stderr)
        return EXIT_BAD_INPUT
    for write in writes:
        shown = Path(args.output) / write.target.name
        print(f"{'wrote' if write.changes else 'unchanged'} {shown}", file=sys.stderr)
    return EXIT_OK


# --- the scheduler -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StudioView:
    """A Studio space's view of FSx: the partition the nodes see at `node` is `local` here."""

    node: str
    local: Path


def studio_view(state: Path | None = None) -> StudioView | None:
    """From the space's settings (the lifecycle's `~/.hyperpod-kit/settings`) and the user the
    Slurm wrapper found (`user`): where the user's partition is on the nodes; None outside a
    space, or before the wrapper has run once."""
    folder = (state or STUDIO_STATE).expanduser()
    try:
        text = (folder / "settings").read_text()
    except OSError:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("HYPERPOD_KIT_"):
            values[key] = value.strip().strip("'\"")
    mount = values.get("HYPERPOD_KIT_NODE_MOUNT", "/fsx")
    if values.get("HYPERPOD_KIT_PARTITIONS", "per_user") == "per_user":
        try:
            user = (folder / "user").read_text().strip()
        except OSError:
            return None
        node = f"{mount}/{user}"
    else:
        node = mount + values.get("HYPERPOD_KIT_SHARED_PATH", "/shared")
    return StudioView(node, Path("~/fsx").expanduser())


def scheduler(loaded: LoadedEnvironment) -> Scheduler:
    """The job commands' scheduler for the environment's orchestrator (`JobError`: no cluster,
    no credentials)."""
    config = loaded.config
    if config.orchestrator == "slurm":
        from hyperpod_kit.operations.slurm_jobs import SlurmJobs

        state = STUDIO_STATE.expanduser()
        if not (state / "settings").exists():  # the login node: the caller's own jobs
            return SlurmJobs()
        if not (state / "user").exists():
            # The wrapper finds the space's owner (the Slurm user whose JWT it passes) at its
            # first command: any command does, then it is known.
            SlurmJobs().capacity(None)
        view = studio_view(state)
        user = (state / "user").read_text().strip() if (state / "user").exists() else None
        # squeue --me would name the space's own uid, not the Slurm user of the token
        return SlurmJobs(path_map=(view.node, view.local) if view else None, user=user)
    from hyperpod_kit.config.aws import AwsFacade
    from hyperpod_kit.naming import eks_cluster_name
    from hyperpod_kit.operations.eks_jobs import EksJobs

    aws = AwsFacade(config.region)
    if not aws.has_credentials():
        raise JobError(
            f"{loaded.file}: no AWS credentials found. Hint: configure them (aws configure, "
            "AWS_PROFILE, or SSO); your identity needs an access entry on the EKS cluster."
        )
    existing = config.cluster.eks.existing_cluster_name
    cluster = existing or eks_cluster_name(config)
    return EksJobs(aws.kubernetes(cluster), config.trainer.job.namespace)


# --- the commands --------------------------------------------------------------------------------


def job(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    if args.job_action == "render":
        return render_command(loaded, args)
    try:
        if args.job_action == "submit":
            return submit(loaded, args)
        jobs = scheduler(loaded)
        if args.job_action == "list":
            records = jobs.jobs(everyone=args.all)
            _emit_list(records, as_json=args.format == "json")
        elif args.job_action == "show":
            record = jobs.job(args.job_id)
            if args.format == "json":
                print(json.dumps(record.as_json(), indent=2))
            else:
                print(show_text(record))
        elif args.job_action == "logs":
            jobs.logs(args.job_id, follow=args.follow, out=sys.stdout)
        elif args.job_action == "cancel":
            jobs.cancel(args.job_id)
            print(f"job {args.job_id}: cancelled", file=sys.stderr)
    except (JobError, OptionError) as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def submit(loaded: LoadedEnvironment, args: argparse.Namespace) -> int:
    from hyperpod_kit.outputs import JOBS, check_files_folder, write_error, write_files

    config = with_options(loaded, args)
    rendered = render(config, args.image)
    if problems := lint_problems(rendered):
        _print_lint(problems)
        return EXIT_FAILED
    (job_file,) = rendered
    folder = Path(args.folder) if args.folder else _default_folder()
    try:  # a folder that is not ours is refused before the scheduler is asked anything
        check_files_folder(folder, kind=JOBS, force=args.force)
    except OSError as e:
        print(write_error(e, folder), file=sys.stderr)
        return EXIT_BAD_INPUT
    jobs = scheduler(loaded)
    where = job_partition(config) if config.orchestrator == "slurm" else None
    for line in plan_lines(config, jobs.capacity(where), folder / job_file.filename):
        print(line, file=sys.stderr)
    if not args.yes:
        if not sys.stdin.isatty():
            print("job submit: not asked (no terminal) and no --yes: nothing submitted. Hint: "
                  "add --yes to submit from a script or a notebook.", file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        answer = input("Submit? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("job submit: declined; nothing submitted.", file=sys.stderr)
            return EXIT_FAILED
    try:
        write_files(folder, {job_file.filename: job_file.text}, kind=JOBS, force=args.force)
    except OSError as e:
        print(write_error(e, folder), file=sys.stderr)
        return EXIT_BAD_INPUT
    job_id = jobs.submit(job_file.text, filename=job_file.filename, folder=folder.absolute())
    print(f"job submit: submitted {config.trainer.job.name} as job {job_id}; follow it with "
          f"`hyperpod-kit job logs {job_id} --follow`", file=sys.stderr)  # fmt: skip
    print(job_id)
    return EXIT_OK


def _default_folder() -> Path:
    fsx = Path("~/fsx").expanduser()
    return fsx / "jobs" if (STUDIO_STATE.expanduser() / "settings").exists() else Path("jobs")


def plan_lines(config: EnvironmentConfig, capacity: Capacity | None, job_file: Path) -> list[str]:
    """What `submit` says before it asks: what runs where, whether the nodes are free, what an
    hour costs, how long one checkpoint takes (the estimate's figures)."""
    from hyperpod_kit.estimate import estimate

    job = config.trainer.job
    group = job_group(config)
    facts = group_facts(group)
    kind = group.primary_type if group is not None else "(no single group)"
    where = job_partition(config) if config.orchestrator == "slurm" else job.namespace
    lines = [
        f"job submit: {job.name}: {job.task} of {job.preset}, {job.max_steps} steps, "
        f"{job.nodes} x {kind} ({'partition' if config.orchestrator == 'slurm' else 'namespace'}"
        f" {where})",
        f"  data        {job.data_path}",
    ]
    if capacity is None:
        lines.append("  nodes       free nodes not read")
    else:
        busy = " (the job waits for nodes)" if capacity.free < job.nodes else ""
        lines.append(f"  nodes       {capacity.free} of {capacity.total} free{busy}: "
                     f"{capacity.detail}")  # fmt: skip
    result = estimate(config)
    lines.append("  cost        " + _hourly(result, group, job.nodes))
    write = result.figure("checkpoint_write_s")
    size = result.figure("checkpoint_size")
    lines.append(
        f"  checkpoint  every {job.checkpoint_every} steps to {job.checkpoint_dir}: "
        f"{size.shown}, about {write.shown} to write each (estimate)"
    )
    if facts is not None and facts.accelerators:
        lines.append(f"  ranks       {job.nodes * (job.processes_per_node or facts.accelerators)}")
    lines.append(f"  job file    {job_file}")
    return lines


def _hourly(result: Any, group: Any, nodes: int) -> str:
    if group is None:
        return "unknown (no single group for the job)"
    item = f"{group.name}: "
    line = next((c for c in result.costs if c.kind == "instances" and c.item.startswith(item)),
                None)  # fmt: skip
    if line is None or line.hourly_usd is None:
        return f"not priced: {line.how if line else 'no price line'}"
    per_node = line.hourly_usd / group.instance_count
    return (f"${per_node * nodes:,.2f} per hour for {nodes} node(s) "
            f"(${per_node:,.2f} each, {result.prices})")  # fmt: skip


def _emit_list(records: list[JobRecord], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([r.as_json() for r in records], indent=2))
        return
    if not records:
        print("no jobs", file=sys.stderr)
        return
    rows = [("JOB", "NAME", "STATE", "NODES", "STEP", "LOSS", "TOK/S", "CKPT", "RESTARTS")]
    for r in records:
        p = r.progress
        rows.append((
            r.id, r.name, r.state, _text(r.nodes), _text(p.step if p else None),
            _number(p.loss if p else None), _number(p.tokens_per_s if p else None, 0),
            _text(p.last_checkpoint if p else None), _text(p.restarts if p else None),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def show_text(r: JobRecord) -> str:
    lines = [f"job {r.id} ({r.name}): {r.state}" + (f", {r.reason}" if r.reason else "")]
    for label, value in (
        ("user", r.user), ("where", r.where), ("nodes", r.nodes), ("submitted", r.submitted),
        ("started", r.started), ("ended", r.ended), ("exit code", r.exit_code),
        ("output", r.output),
    ):  # fmt: skip
        if value is not None:
            lines.append(f"  {label:<11} {value}")
    p = r.progress
    if p is None:
        lines.append("  progress    none yet (no trainer event in the output)")
    else:
        lines.append(
            f"  progress    step {_text(p.step)}, loss {_number(p.loss)}, "
            f"{_number(p.tokens_per_s, 0)} tokens/s, last checkpoint {_text(p.last_checkpoint)}, "
            f"{p.restarts} restart(s)"
        )
        if p.eval_loss is not None:
            lines.append(f"  evaluation  loss {_number(p.eval_loss)} at step {_text(p.eval_step)}")
        if p.exit is not None:
            lines.append("  trainer     exited: " + json.dumps(p.exit, sort_keys=True))
    for row in r.history:
        lines.append("  history     " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return "\n".join(lines)
