"""The path matrix: every argument of `hyperpod-kit` and of the trainer's command that names a
path, run with every kind of hostile path, generated from the parsers.

Each argument declares what it names (`hyperpod_trainer.fileio.PathKind`: hyperpod-kit's in
`hyperpod_kit/cli/arguments.py`, the trainer's where its parsers are built); an argument without
one fails `test_every_argument_declares_what_it_names`, so a command added later is covered (or
refused) without editing this file. Every hostile path is made inside the test's own temporary
folder, never the machine's /dev. Each case runs the command's `main()` in a forked child with a
memory limit and an alarm (a FIFO that blocks would end in the alarm, not hang the suite), and
checks one expected outcome against a snapshot of the whole temporary tree before and after:

- inputs: a device, FIFO, socket, loop of links, or a sparse file over the limit is refused
  (exit 2, the last line names the path with a hint, no traceback, nothing read, written or
  removed); a link to a regular file elsewhere is read (shown by a finding on its line);
- outputs: a device, FIFO, socket, any link, the current folder or an ancestor, the command's
  own input, a folder containing it, a path inside it are refused; a folder holding a user's
  file is refused or the file is kept byte for byte (documented per command); a read-only
  folder is exit 2 with the OS error in one line (made read-only with a bind mount, as root
  writes through mode 555; skipped where bubblewrap is missing, except under CI=true).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperpod_kit.files import fileio
from tests.conftest import REPO

K = fileio.PathKind
INPUTS = {K.INPUT_FILE, K.INPUT_FOLDER, K.INPUT_PATH}
OUTPUTS = {K.OUTPUT_FILE, K.OUTPUT_FOLDER}
CHILD_SECONDS = 60
CHILD_MEMORY = 4 << 30
CI = os.environ.get("CI") == "true"

# An environment file with a schema error on a known line: reading it through a link proves the
# link was followed and the file parsed, and nothing more runs (no synth, no AWS).
BAD_LINE = 3
INVALID_ENV = "name: matrix\nregion: us-west-2\nnot_a_key: 1\n"


@dataclass(frozen=True)
class Program:
    """A command line program: its parser(s) and its `main(argv) -> int`."""

    name: str
    parsers: Callable[[], dict[tuple[str, ...], argparse.ArgumentParser]]
    main: Callable[[list[str]], int]
    module: str  # for `python -m`


def _kit_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from hyperpod_kit.cli.main import _parser

    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for words, parser, _ in fileio.walk(_parser()):
        found.setdefault(words, parser)
    return found


def _kit_main(argv: list[str]) -> int:
    from hyperpod_kit.cli.main import main

    return main(argv)


def _trainer_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from hyperpod_trainer.cli import parsers

    return {(name,) if name else (): parser for name, parser in parsers().items()}


def _trainer_main(argv: list[str]) -> int:
    from hyperpod_trainer.cli import main

    return main(argv)


def _demo_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from hyperpod_kit.local.demo import parser

    return {(): parser()}


def _demo_main(argv: list[str]) -> int:
    from hyperpod_kit.local.demo import main

    return main(argv)


def _verify_demo_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    from hyperpod_kit.local.verify import parser

    return {(): parser()}


def _verify_demo_main(argv: list[str]) -> int:
    from hyperpod_kit.local.verify import main

    return main(argv)


PROGRAMS = [
    Program("hyperpod-kit", _kit_parsers, _kit_main, "hyperpod_kit.cli.main"),
    Program("hyperpod_kit.local.demo", _demo_parsers, _demo_main, "hyperpod_kit.local.demo"),
    Program(
        "hyperpod_kit.local.verify",
        _verify_demo_parsers,
        _verify_demo_main,
        "hyperpod_kit.local.verify",
    ),
]
if os.environ.get("MATRIX_TRAINER", "1") == "1":
    PROGRAMS.append(
        Program("hyperpod_trainer", _trainer_parsers, _trainer_main, "hyperpod_trainer")
    )


@dataclass(frozen=True)
class Argument:
    program: Program
    words: tuple[str, ...]
    parser: argparse.ArgumentParser
    action: argparse.Action
    spec: fileio.PathSpec

    @property
    def id(self) -> str:
        flag = self.action.option_strings[-1] if self.action.option_strings else self.action.dest
        return " ".join([self.program.name, *self.words, flag])


def _arguments() -> Iterator[Argument | tuple[str, argparse.Action]]:
    for program in PROGRAMS:
        for words, parser in program.parsers().items():
            for action in parser._actions:
                if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                    continue
                if isinstance(action, argparse._SubParsersAction):
                    continue
                spec = fileio.spec_of(action)
                if spec is None:
                    yield (" ".join([program.name, *words, action.dest]), action)
                else:
                    yield Argument(program, words, parser, action, spec)


def test_every_argument_declares_what_it_names() -> None:
    undeclared = [name for name, *_ in (a for a in _arguments() if isinstance(a, tuple))]
    assert not undeclared, (
        f"arguments without a declared kind (fileio.declare / cli/arguments.py): {undeclared}"
    )


def test_the_table_of_kinds_names_only_arguments_that_exist() -> None:
    from hyperpod_kit.cli.arguments import unused_kinds
    from hyperpod_kit.cli.main import _parser

    _parser()
    assert unused_kinds() == [], "cli/arguments.py declares arguments that no longer exist"


def _path_arguments() -> list[Argument]:
    return [a for a in _arguments() if isinstance(a, Argument) and a.spec.kind in INPUTS | OUTPUTS]


# --- the temporary world ----------------------------------------------------------------------


class World:
    """The test's folder: `work` (the current folder), `inputs` (good inputs), `elsewhere`."""

    def __init__(self, root: Path, program: Program) -> None:
        self.root = root
        self.work = root / "work"
        self.inputs = self.work / "inputs"
        self.elsewhere = root / "elsewhere"
        for d in (self.work, self.inputs, self.elsewhere):
            d.mkdir(parents=True)
        self.env = self.inputs / "env.yaml"
        text = (REPO / "environments" / "default.yaml").read_text()
        self.env.write_text(text + 'account: "111122223333"\n')  # CodePipeline stages need one
        (self.elsewhere / "invalid.yaml").write_text(INVALID_ENV)
        (self.elsewhere / "user-folder").mkdir()
        (self.elsewhere / "user-folder" / "thesis.tex").write_text("years of work\n")
        trainer = program.name == "hyperpod_trainer"
        self.trainer = _trainer_inputs(self.inputs) if trainer else {}

    def good(self, argument: Argument, action: argparse.Action) -> str | None:
        """A value that works for `action` (another argument of the same command)."""
        spec = fileio.spec_of(action)
        if spec is None:
            return None
        if spec.example is not None:
            return spec.example
        name = (argument.program.name, *argument.words, action.dest)
        if argument.program.name == "hyperpod_trainer" and name in self.trainer:
            return spec.template.format(self.trainer[name])
        if spec.kind is K.INPUT_FILE and argument.program.name != "hyperpod_trainer":
            return spec.template.format(self.env)
        if spec.kind in OUTPUTS:
            return spec.template.format(self.work / f"new-{action.dest}")
        return None


def _trainer_inputs(inputs: Path) -> dict[tuple[str, ...], str]:
    """Good inputs of the trainer's commands, keyed by (program, subcommand, dest)."""
    from tests.integration.trainer.path_inputs import good_inputs

    return good_inputs(inputs)


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under `root` (never opening a FIFO, socket or device): its type and, for a
    regular file, its size and bytes (a large sparse file by size and mtime only)."""
    found: dict[str, tuple[object, ...]] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top) / name
            st = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                small = st.st_size <= 1 << 20
                found[key] = ("file", st.st_size, path.read_bytes() if small else st.st_mtime_ns)
            elif stat.S_ISLNK(st.st_mode):
                found[key] = ("link", os.readlink(path))
            else:
                found[key] = (stat.S_IFMT(st.st_mode),)
    return found


# --- hostile paths -----------------------------------------------------------------------------


def make_device(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is, made here


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    return server


def make_loop(path: Path) -> None:
    other = path.with_name(path.name + ".loop")
    path.symlink_to(other)
    other.symlink_to(path)


def make_special(path: Path, case: str, keep: list[socket.socket]) -> bool:
    """Make `path` a device, FIFO, socket or loop of links for those cases; False otherwise."""
    if case == "device":
        make_device(path)
    elif case == "fifo":
        make_fifo(path)
    elif case == "socket":
        keep.append(make_socket(path))
    elif case == "loop":
        make_loop(path)
    else:
        return False
    return True


def make_sparse(path: Path, limit: int) -> None:
    with path.open("wb") as f:
        f.truncate(limit + 1)


# --- running a command -------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    code: int
    stderr: str
    stdout: str


def run_forked(program: Program, argv: list[str], cwd: Path) -> Outcome:
    """`program.main(argv)` in a forked child: cwd, no AWS credentials, a memory limit and an
    alarm; stdout and stderr into files."""
    out, err = cwd.parent / ".matrix.out", cwd.parent / ".matrix.err"
    pid = os.fork()
    if pid == 0:  # the child
        code = 70
        try:
            resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
            signal.alarm(CHILD_SECONDS)
            os.chdir(cwd)
            for key in [k for k in os.environ if k.startswith("AWS_")]:
                del os.environ[key]
            os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = "/none"
            os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
            fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            fd_err = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            code = program.main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        except BaseException:
            traceback.print_exc()
            code = 71
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    outcome = Outcome(code, err.read_text(errors="replace"), out.read_text(errors="replace"))
    out.unlink()
    err.unlink()
    return outcome


Snapshot = dict[str, tuple[object, ...]]


def run_case(
    world: World, argument: Argument, value: str, keep: list[socket.socket]
) -> tuple[Outcome, Snapshot, Snapshot]:
    """Run the command with `value` for `argument`: the outcome, and the tree before and after
    (never a traceback, whatever the case)."""
    before = snapshot(world.root)
    outcome = run_forked(argument.program, argv_for(world, argument, value), world.work)
    after = snapshot(world.root)
    for s in keep:
        s.close()
    assert "Traceback" not in outcome.stderr, outcome.stderr
    return outcome, before, after


def argv_for(world: World, argument: Argument, value: str) -> list[str]:
    """The command line that gives `value` to `argument` and good values to what else the
    command needs (positionals, required options, options with an example)."""
    argv = list(argument.words)
    positionals: list[str] = []
    # Arguments that may not go with this one (a mutually exclusive group: `init FILE` and
    # `init --project DIR`) are left out, positionals too.
    excluded = {
        other
        for group in argument.parser._mutually_exclusive_groups
        if argument.action in group._group_actions
        for other in group._group_actions
        if other is not argument.action
    }
    for action in argument.parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction) or action in excluded:
            continue
        if action is argument.action:
            given = value
        else:
            spec = fileio.spec_of(action)
            needed = (
                not action.option_strings
                or action.required
                or (spec is not None and spec.example is not None)
            )
            if not needed:
                continue
            found = world.good(argument, action)
            if found is None:
                continue
            given = found
        if action.option_strings:
            argv += [action.option_strings[-1], given]
        else:
            positionals.append(given)
    return [*argv, *positionals]


def refused_line(outcome: Outcome, shown: str) -> str:
    assert outcome.code == 2, (outcome.code, outcome.stderr[-2000:])
    assert "Traceback" not in outcome.stderr, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert lines, "a refusal says why"
    last = lines[-1]
    said = last.split(" Hint: ")[0]
    # `PATH: ...`, or `PROG: PATH: ...` for a command that names itself (the demo, the trainer)
    assert (last.startswith(shown) or f": {shown}" in said) and "Hint: " in last, last
    return last


# --- the cases ---------------------------------------------------------------------------------

INPUT_CASES = ["device", "fifo", "socket", "loop", "sparse", "link-elsewhere"]
OUTPUT_CASES = [
    "device", "fifo", "socket", "link", "cwd", "ancestor", "own-input", "holds-input",
    "inside-input", "user-folder", "read-only",
]  # fmt: skip


def _cases() -> Iterator[object]:
    for argument in _path_arguments():
        cases = INPUT_CASES if argument.spec.kind in INPUTS else OUTPUT_CASES
        for case in cases:
            yield pytest.param(argument, case, id=f"{argument.id}-{case}")


@pytest.mark.parametrize(("argument", "case"), list(_cases()))
def test_hostile_path(tmp_path: Path, argument: Argument, case: str) -> None:
    world = World(tmp_path, argument.program)
    if argument.spec.kind in INPUTS:
        _input_case(world, argument, case)
    else:
        _output_case(world, argument, case)


def _input_case(world: World, argument: Argument, case: str) -> None:
    path = world.work / f"hostile-{case}"
    keep: list[socket.socket] = []
    folder = argument.spec.kind is K.INPUT_FOLDER
    if make_special(path, case, keep):
        pass
    elif case == "sparse":
        make_sparse(path, argument.spec.limit or (1 << 30))
    elif case == "link-elsewhere":
        if folder:
            (world.elsewhere / "a-folder").mkdir()
            path.symlink_to(world.elsewhere / "a-folder")
        elif argument.spec.limit == world_env_limit() and not folder:
            path.symlink_to(world.elsewhere / "invalid.yaml")
        else:
            found = world.good(argument, argument.action)
            assert found is not None, f"{argument.id}: no good input to link to"
            path.symlink_to(Path(found.split("=", 1)[-1]).resolve())
    outcome, before, after = run_case(world, argument, argument.spec.template.format(path), keep)
    if case == "link-elsewhere" and folder:
        # followed: whatever the command says of the (empty) folder, not that it is a link
        assert not any(
            line.startswith(f"{path}: is a") and "folder" not in line.split("Hint")[0]
            for line in outcome.stderr.splitlines()
        ), outcome.stderr
        return
    if case == "link-elsewhere" and argument.id in LINK_OUTSIDE_REFUSED:
        last = refused_line_any(outcome)
        assert "outside the current folder" in last, last
        return
    if case == "link-elsewhere":
        # read: the command did not refuse the link itself
        assert not any(
            line.startswith(f"{path}: ") or line.startswith(f"{path} (file): ")
            for line in outcome.stderr.splitlines()
        ), outcome.stderr
        if argument.spec.limit == world_env_limit() and not folder:
            assert f"{path}:{BAD_LINE} " in outcome.stderr, outcome.stderr
        return
    refused_line(outcome, str(path))
    assert after == before, "a refused input changes nothing"


# The pipelines name each environment file by its path in the repository (the workflow checks
# the repository out): a link that leads outside it is refused, as documented.
LINK_OUTSIDE_REFUSED = {
    f"hyperpod-kit pipeline {name} --env" for name in ("github", "bootstrap", "codepipeline")
}


def refused_line_any(outcome: Outcome) -> str:
    assert outcome.code == 2 and "Traceback" not in outcome.stderr, outcome.stderr
    return outcome.stderr.strip().splitlines()[-1]


def world_env_limit() -> int:
    from hyperpod_kit.config.loader import MAX_FILE_BYTES

    return MAX_FILE_BYTES


def _output_target(
    world: World, argument: Argument, case: str, keep: list[socket.socket]
) -> tuple[Path, str | None]:
    """The hostile output path of `case`, and how it is given when not as itself."""
    folder = argument.spec.kind is K.OUTPUT_FOLDER
    path = world.work / f"hostile-{case}"
    if make_special(path, case, keep):
        return path, None
    if case == "link":
        target = world.elsewhere / ("linked-folder" if folder else "linked-file")
        if folder:
            target.mkdir()
        else:
            target.write_text("mine\n")
        path.symlink_to(target)
        return path, None
    if case in ("cwd", "ancestor"):
        return (world.work, ".") if case == "cwd" else (world.root, "..")
    if case == "user-folder":
        user = world.elsewhere / "user-folder"
        return (user if folder else user / "thesis.tex"), None
    own = _own_input(world, argument)
    return {"own-input": own, "holds-input": own.parent, "inside-input": own / "inside"}[case], None


def _output_case(world: World, argument: Argument, case: str) -> None:
    if case == "read-only":
        _read_only_case(world, argument)
        return
    keep: list[socket.socket] = []
    path, shown = _output_target(world, argument, case, keep)
    value = argument.spec.template.format(shown if shown is not None else path)
    outcome, before, after = run_case(world, argument, value, keep)
    if case == "user-folder" and outcome.code == 0:
        # documented: this command adds its own files into a folder and touches nothing else
        assert argument.id in ADDS_INTO_A_FOLDER, f"{argument.id} wrote into a user's folder"
        kept = {k: v for k, v in before.items() if k in after}
        assert kept == before, "everything of the user's is kept byte for byte"
        return
    if case == "inside-input" and not _own_input(world, argument).is_dir():
        assert outcome.code == 2 and after == before, outcome.stderr
        return
    refused_line(outcome, shown if shown is not None else str(path))
    assert after == before, "a refused output changes nothing"


# Commands whose output folder takes the user's folder and adds their files to it, never
# touching the rest (docs): `jobs --force` (not given here: refused) and `pipeline github`.
ADDS_INTO_A_FOLDER = {"hyperpod-kit pipeline github --output"}


def _own_input(world: World, argument: Argument) -> Path:
    """The input the command reads in the case's command line: its first input argument."""
    for action in argument.parser._actions:
        spec = fileio.spec_of(action)
        if spec is not None and spec.kind in INPUTS:
            found = world.good(argument, action)
            if found is not None:
                return Path(found.split("=", 1)[-1])
    pytest.skip(f"{argument.id}: the command reads no input given on its command line")


def _read_only_case(world: World, argument: Argument) -> None:
    """A path in a folder mounted read-only (bubblewrap): exit 2 and the OS error in one line."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        if CI:
            pytest.fail("bubblewrap is missing under CI=true (.ci/run installs it)")
        pytest.skip("a read-only bind mount needs bubblewrap (root writes through mode 555)")
    ro = world.root / "read-only"
    ro.mkdir()
    target = ro / ("out" if argument.spec.kind is K.OUTPUT_FOLDER else "out.txt")
    value = argument.spec.template.format(target)
    module = argument.program.module
    argv = argv_for(world, argument, value)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE="/none", AWS_SHARED_CREDENTIALS_FILE="/none")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "assets" / "trainer")])
    before = snapshot(world.root)
    result = subprocess.run(
        [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(ro), str(ro), "--chdir",
         str(world.work), sys.executable, "-m", module, *argv],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    if "Operation not permitted" in result.stderr and "bwrap" in result.stderr:
        if CI:
            pytest.fail(f"bubblewrap cannot run here: {result.stderr.strip()}")
        pytest.skip(f"bubblewrap cannot run here: {result.stderr.strip()}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert str(ro) in last and "Hint: " in last, last
    assert "Read-only file system" in last or "read-only" in last.lower(), last
    assert snapshot(world.root) == before
