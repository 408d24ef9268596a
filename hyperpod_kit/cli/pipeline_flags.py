"""What both kinds of generated pipeline (`pipeline github`, `pipeline codepipeline`) share: the
flags they check (each refusal one line, `--flag: 'value' message. Hint: ...`), the environments
their --env flags name, loaded and locked like `validate`, and the gated commit of a synthesized
assembly. `cli/pipeline.py` (GitHub, bootstrap) and `cli/codepipeline.py` both import it, and
`cli/pipeline.py` imports `cli/codepipeline.py` for its parser, so nothing here imports either
(tests/unit/test_house.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from hyperpod_kit import __version__
from hyperpod_kit.config.facts import regions
from hyperpod_kit.naming import DRIFT_ENVIRONMENT, PLAN_ENVIRONMENT, RESERVED_ENVIRONMENTS

if TYPE_CHECKING:
    from hyperpod_kit.config.environment import LoadedEnvironment
    from hyperpod_kit.outputs import FolderOutput

EXIT_OK, EXIT_BAD_INPUT = 0, 2

# GitHub environment names: hyperpod-kit keeps to what is also a job id and a variable suffix.
ENV_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}$")
ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
GIT_REF = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}(?<![./])$")
SAFE_PATH = re.compile(r"^[A-Za-z0-9._/-]+$")


class PipelineError(ValueError):
    """A flag's value the generator refuses: one line, `--flag: 'value' message. Hint: ...`."""

    def __init__(self, flag: str, value: object, message: str, hint: str) -> None:
        super().__init__(f"{flag}: {str(value)!r} {message}. Hint: {hint}.")


class MissingFlagError(PipelineError):
    """A flag the command cannot do without: `--flag is needed: why. Hint: ...`."""

    def __init__(self, flag: str, why: str, hint: str) -> None:
        ValueError.__init__(self, f"{flag} is needed: {why}. Hint: {hint}.")


@dataclass(frozen=True)
class PipelineEnvironment:
    """One environment of the pipeline: its GitHub environment name, file, region, role."""

    name: str
    file: str  # relative to the repository root, forward slashes
    region: str
    role: str  # an IAM role ARN, or the `${{ vars.NAME }}` expression that holds one
    diff_role: str = ""  # the same for the read-only role of `--diff`
    read_role: str = ""  # the same for the read-only role of drift and status (bootstrap's)
    account: str | None = None  # the file's `account`, if it names one

    @property
    def variable(self) -> str:
        return "HYPERPOD_KIT_ROLE_ARN_" + self.name.upper().replace("-", "_")

    @property
    def diff_variable(self) -> str:
        return "HYPERPOD_KIT_PLAN_ROLE_ARN_" + self.name.upper().replace("-", "_")

    @property
    def read_variable(self) -> str:
        return "HYPERPOD_KIT_READ_ROLE_ARN_" + self.name.upper().replace("-", "_")

    @classmethod
    def from_variables(
        cls, name: str, file: str, region: str, account: str | None = None
    ) -> PipelineEnvironment:
        """An environment whose roles are its repository variables (`${{ vars.NAME }}`)."""
        names = cls(name, file, region, "")
        return cls(
            name, file, region, _variable(names.variable), _variable(names.diff_variable),
            _variable(names.read_variable), account,
        )  # fmt: skip


def _variable(name: str) -> str:
    return "${{ vars." + name + " }}"


DEFAULT_TOOLKIT_REF = f"v{__version__}"


def add_toolkit_arguments(p: argparse.ArgumentParser, installs: str, fetched: str) -> None:
    """--toolkit-ref and --toolkit-repository: where a generated pipeline gets hyperpod-kit."""
    p.add_argument(
        "--toolkit-ref",
        default=DEFAULT_TOOLKIT_REF,
        metavar="REF",
        help=f"the hyperpod-kit tag, branch or commit {installs} (v{__version__})",
    )
    p.add_argument(
        "--toolkit-repository",
        metavar="OWNER/NAME",
        help=f"the GitHub repository hyperpod-kit is {fetched} from (default: the GitHub "
        "repository this installed hyperpod-kit names as its source, its package's "
        "`Project-URL: Source`; needed where it names none)",
    )


def _pair(flag: str, value: str, what: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not rest:
        raise PipelineError(flag, value, f"is not NAME={what}", f"e.g. {flag} dev={_EXAMPLE[flag]}")
    if not ENV_NAME.match(name):
        raise PipelineError(
            flag,
            value,
            f"names the environment {name!r}, which is not a GitHub environment name "
            "hyperpod-kit writes",
            "1-39 lowercase letters, digits and hyphens, starting with a letter (dev, prod)",
        )
    return name, rest


_EXAMPLE = {
    "--env": "environments/dev.yaml",
    "--aws-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-deploy",
    "--diff-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-plan",
    "--read-role-arn": "arn:aws:iam::123456789012:role/hyperpod-kit-read",
}


def check_env_file(value: str, file: str) -> str:
    """The file as the workflow names it: relative to the repository root (the current folder),
    inside it, a .yaml or .yml file that exists (a regular file: the one input layer)."""
    from hyperpod_kit.config.loader import MAX_FILE_BYTES
    from hyperpod_kit.files import fileio

    if os.path.lexists(file):  # a FIFO, device, socket or loop of links: one line, unread
        fileio.input_file(
            file, limit=MAX_FILE_BYTES, what="environment file", hint="give its .yaml file"
        )
    path = Path(file)
    if path.is_absolute():
        try:
            path = Path(os.path.realpath(path)).relative_to(os.path.realpath(Path.cwd()))
        except ValueError:
            raise PipelineError(
                "--env", value, "is outside the current folder", "run it from the repository root"
            ) from None
    posix = PurePosixPath(path.as_posix())
    if ".." in posix.parts or not SAFE_PATH.match(str(posix)):
        raise PipelineError(
            "--env",
            value,
            "is not a plain path inside the repository",
            "a relative path of letters, digits, . _ - and /, from the repository root",
        )
    if posix.suffix not in (".yaml", ".yml"):
        raise PipelineError("--env", value, "is not an environment file", "give its .yaml file")
    if not path.is_file():
        raise PipelineError(
            "--env",
            value,
            "names a file that does not exist",
            "run it from the repository root, with the path of an environment file",
        )
    return str(posix)


def check_ref(value: str) -> str:
    if not GIT_REF.match(value):
        raise PipelineError(
            "--toolkit-ref",
            value,
            "is not a git tag, branch or commit",
            f"e.g. v{__version__}, main or a 40-hex commit",
        )
    return value


def check_repository(value: str, flag: str = "--toolkit-repository") -> str:
    if not REPOSITORY.match(value):
        raise PipelineError(flag, value, "is not a GitHub repository", "OWNER/NAME")
    return value


def source_url() -> str:
    """The `Project-URL: Source` of the installed hyperpod-kit's metadata; "" if it names none
    (or hyperpod-kit runs from a folder on the path, not installed)."""
    try:
        entries = metadata.metadata("hyperpod-kit").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return ""
    url = ""
    for entry in entries:
        label, _, address = entry.partition(",")
        if label.strip().lower() == "source":
            url = address.strip()
    return url


def toolkit_repository(given: str | None) -> str:
    """The repository the pipelines check hyperpod-kit out from: given, or the GitHub source
    the installed package names (its `Project-URL: Source`)."""
    if given is not None:
        return check_repository(given)
    url = source_url()
    found = re.match(r"^(?:https://github\.com/|git@github\.com:)([^/]+/[^/]+?)(?:\.git)?/?$", url)
    if found is None or not REPOSITORY.match(found[1]):
        named = f"names {url} as its source, not a GitHub repository" if url else (
            "names no source repository (its package metadata has no `Project-URL: Source`)"
        )  # fmt: skip
        raise MissingFlagError(
            "--toolkit-repository",
            f"this hyperpod-kit ({__version__}) {named}, and the pipeline checks hyperpod-kit "
            "out from GitHub at --toolkit-ref",
            "the GitHub repository that holds hyperpod-kit at that ref, e.g. "
            "--toolkit-repository OWNER/hyperpod-kit",
        )
    return found[1]


def check_region(value: str) -> str:
    if value not in regions():
        raise PipelineError(
            "--region", value, "is not a region in hyperpod-kit's table", "e.g. us-west-2"
        )
    return value


def check_role(value: str, flag: str = "--aws-role-arn") -> tuple[str, str]:
    name, arn = _pair(flag, value, "ARN")
    if not ROLE_ARN.match(arn):
        raise PipelineError(
            flag,
            value,
            "does not end in an IAM role ARN",
            "NAME=arn:aws:iam::ACCOUNT:role/ROLE",
        )
    return name, arn


def environments(
    envs: Sequence[str],
    roles_given: Sequence[str] = (),
    region_given: str | None = None,
    diff_roles_given: Sequence[str] = (),
    read_roles_given: Sequence[str] = (),
) -> list[PipelineEnvironment]:
    """The environments the flags name, each file loaded like `validate` (exit 2 on an error)."""
    found = loaded_environments(envs, roles_given, region_given, diff_roles_given, read_roles_given)
    return [env for env, _ in found]


def arn_account(arn: str) -> str:
    """The account of an ARN (its fifth field)."""
    return arn.split(":")[4]


def check_reserved(value: str, name: str) -> None:
    """An environment that deploys may not take a name the bootstrap's read-only roles trust."""
    if name in RESERVED_ENVIRONMENTS:
        what = {
            PLAN_ENVIRONMENT: "the pull requests' read-only `cdk diff` jobs (--diff)",
            DRIFT_ENVIRONMENT: "the nightly drift jobs",
        }[name]
        raise PipelineError(
            "--env",
            value,
            f"names the environment {name!r}, the GitHub environment of {what}, whose "
            "subject only a read-only role trusts",
            f"another name for this environment ({' and '.join(RESERVED_ENVIRONMENTS)} are "
            "reserved)",
        )


def _locked(loaded: LoadedEnvironment) -> LoadedEnvironment:
    """The environment with its version lock applied, as synth deploys it; a lock that refuses
    is a `ConfigError` like the file's (hyperpod_kit/lock.py)."""
    from hyperpod_kit.config import ConfigError
    from hyperpod_kit.lock import LockError, lock_environment

    try:
        return lock_environment(loaded)[0]
    except LockError as e:
        raise ConfigError(loaded.file, e.findings) from None


def loaded_environments(
    envs: Sequence[str],
    roles_given: Sequence[str] = (),
    region_given: str | None = None,
    diff_roles_given: Sequence[str] = (),
    read_roles_given: Sequence[str] = (),
) -> list[tuple[PipelineEnvironment, LoadedEnvironment]]:
    """`environments`, each with its loaded file. An environment may not take a reserved name
    (`plan`, `drift`); `--region` must be each file's region, and a role's account the file's
    `account` (where it names one) and the other roles' of that environment."""
    from hyperpod_kit.config import ConfigError, Level
    from hyperpod_kit.config.environment import load_environment

    files: dict[str, str] = {}
    for value in envs:
        name, file = _pair("--env", value, "FILE")
        check_reserved(value, name)
        if name in files:
            raise PipelineError("--env", value, f"names {name!r} twice", "give each once")
        files[name] = check_env_file(value, file)
    roles = _roles(roles_given, "--aws-role-arn", files)
    diff_roles = _roles(diff_roles_given, "--diff-role-arn", files)
    read_roles = _roles(read_roles_given, "--read-role-arn", files)
    region = check_region(region_given) if region_given is not None else None
    result = []
    for name, file in files.items():
        try:
            loaded = _locked(load_environment(file))
        except ConfigError as e:
            first = next(f for f in e.findings if f.level is Level.ERROR)
            where = f"{e.file}:{first.line}" if first.line else e.file
            raise PipelineError(
                "--env",
                f"{name}={file}",
                f"does not validate ({where} {first.path}: {first.message.rstrip('.')})",
                f"{first.hint.rstrip('.') + '; ' if first.hint else ''}"
                f"`hyperpod-kit validate {file}` shows every finding",
            ) from None
        config = loaded.config
        if region is not None and region != config.region:
            raise PipelineError(
                "--region",
                region,
                f"is not the region of {name} ({file}: {config.region}), where its stacks "
                "deploy; the workflow's credentials, status and drift would look elsewhere",
                "leave --region out (each file's region is used), or change the file's region",
            )
        account: str | None = config.account
        given = [
            (flag, f"{name}={chosen[name]}", chosen[name])
            for flag, chosen in (
                ("--aws-role-arn", roles), ("--diff-role-arn", diff_roles),
                ("--read-role-arn", read_roles),
            )
            if name in chosen
        ]  # fmt: skip
        for flag, value, arn in given:
            where = f"{file}: account {account}" if config.account else f"{given[0][0]}: {account}"
            if account is not None and arn_account(arn) != account:
                raise PipelineError(
                    flag,
                    value,
                    f"is a role of account {arn_account(arn)}, but {name} deploys to another "
                    f"({where})",
                    f"the role of `pipeline bootstrap` deployed in {name}'s account",
                )
            account = arn_account(arn)
        env = PipelineEnvironment.from_variables(name, file, config.region, config.account)
        env = replace(
            env,
            role=roles.get(name, env.role),
            diff_role=diff_roles.get(name, env.diff_role),
            read_role=read_roles.get(name, env.read_role),
        )
        result.append((env, loaded))
    return result


def _roles(given: Sequence[str], flag: str, files: dict[str, str]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for value in given:
        name, arn = check_role(value, flag)
        if name not in files:
            raise PipelineError(
                flag, value, f"names {name!r}, which no --env names", f"one of {', '.join(files)}"
            )
        roles[name] = arn
    return roles


def check_branch(value: str) -> str:
    if not GIT_REF.match(value):
        raise PipelineError("--branch", value, "is not a branch name", "e.g. main")
    return value


def gated_commit(out: FolderOutput, output: str, what: str, build: Callable[[Path], object]) -> int:
    """Build an assembly into `out`'s staging folder, run both gates on it, and put it in place
    only when they pass: 0; a gate error: 1, nothing written; a write refused: 2."""
    from hyperpod_kit.gates import check_assembly
    from hyperpod_kit.outputs import OutputError, write_error

    try:
        with out.staging() as staging:
            build(staging)
            report = check_assembly(staging)
            print(report.render(), file=sys.stderr)
            if not report.ok:
                print(f"{what} stopped by the gates: {len(report.errors)} errors; nothing "
                      "written", file=sys.stderr)  # fmt: skip
                return 1
            out.commit(staging)
    except OutputError as e:
        print(e, file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(write_error(e, output), file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK
