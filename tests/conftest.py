"""Shared fixtures: environment files from the default with overrides, and synthesized apps."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO / "environments" / "default.yaml"

# jsii prints a Node end-of-life banner on Node 20: noise, not an error.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")


def default_data() -> dict[str, Any]:
    data = yaml.safe_load(DEFAULT_FILE.read_text())
    assert isinstance(data, dict)
    return data


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base`; a value of `None` deletes the key."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# No AWS credentials of any kind: synth must work without them.
NO_CREDENTIALS = {
    k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_DEFAULT_"))
} | {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
}


def run_cli(
    *args: str, cwd: Path, timeout: int = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `hyperpod-kit` command in a fresh process, without AWS credentials."""
    return run_command(
        [sys.executable, "-m", "hyperpod_kit.cli.main", *args], cwd=cwd, timeout=timeout, env=env
    )


def run_command(
    command: list[str], *, cwd: Path, timeout: int = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Any command without AWS credentials, this interpreter's folder first on PATH (the CDK CLI
    runs `python3 app.py`), and without a terminal on stdin (nothing may wait for an answer);
    `env` adds to (or overrides) that environment."""
    path = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        command,
        cwd=cwd,
        env=NO_CREDENTIALS | path | (env or {}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


WriteEnv = Callable[..., Path]


@pytest.fixture
def write_env(tmp_path: Path) -> WriteEnv:
    """Write the default environment with `overrides` merged in; returns the file's path."""

    def write(overrides: dict[str, Any] | None = None, *, name: str = "env.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(merge(default_data(), overrides or {}), sort_keys=False))
        return path

    return write


class Synthesized:
    """One environment synthesized in-process: its config, assembly folder and templates."""

    def __init__(self, overrides: dict[str, Any], outdir: Path) -> None:
        from aws_cdk.assertions import Template

        from hyperpod_kit.app import build_environment, create_app
        from hyperpod_kit.config import EnvironmentConfig, has_errors
        from hyperpod_kit.config.validators import run_validators

        self.config = EnvironmentConfig.model_validate(merge(default_data(), overrides))
        findings = run_validators(self.config)
        assert not has_errors(findings), findings
        app = create_app(outdir=str(outdir))
        self.stacks = build_environment(app, self.config)
        assembly = app.synth()
        self.outdir = outdir
        self.templates = {
            s.stack_name.removeprefix(f"{self.config.name}-"): Template.from_json(
                assembly.get_stack_by_name(s.stack_name).template
            )
            for s in self.stacks.all()
        }


SynthFn = Callable[..., Synthesized]


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> SynthFn:
    """Synthesize the default environment with overrides; cached per overrides for the session."""
    import json

    cache: dict[str, Synthesized] = {}

    def run(overrides: dict[str, Any] | None = None) -> Synthesized:
        key = json.dumps(overrides or {}, sort_keys=True)
        if key not in cache:
            cache[key] = Synthesized(overrides or {}, tmp_path_factory.mktemp("cdk.out"))
        return cache[key]

    return run


def shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every xdist worker sees: the run's base temp (a worker's
    is `<run's base>/popen-gwN`); without xdist, this session's own base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


# The hash seed of the shared examples' synths: test_reproducible_synth compares the default's
# with a second synth under another seed.
EXAMPLE_HASH_SEED = "1"


@dataclass(frozen=True)
class ExampleSynth:
    """`hyperpod-kit synth EXAMPLE -o FOLDER/cdk.out` as run once for the whole test run (all
    workers): the CLI in a fresh process, its exit code and output. Read-only for the tests that
    share it: one that writes to an assembly copies it first (`copy_to`)."""

    example: Path
    folder: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def out(self) -> Path:
        """The gated assembly (absent when the gates rejected the synth)."""
        return self.folder / "cdk.out"

    @property
    def assembly(self) -> Path:
        """What the synth produced: the gated assembly, or the one the gates rejected (kept for
        inspection), so that tests of what is in an assembly do not hang on a gate's verdict."""
        if self.returncode == 0:
            return self.out
        rejected = self.folder / "cdk.out.rejected"
        assert rejected.is_dir(), f"`hyperpod-kit synth {self.example.name}`: {self.stderr}"
        return rejected

    def copy_to(self, target: Path) -> Path:
        """A copy of the gated assembly that a test may change."""
        assert self.returncode == 0, self.stderr
        shutil.copytree(self.out, target, symlinks=True)
        return target


def _fingerprint(folder: Path) -> list[list[object]]:
    return [
        [str(p.relative_to(folder)), p.lstat().st_size, p.lstat().st_mtime_ns]
        for p in sorted(folder.rglob("*"))
    ]


ExampleSynthFn = Callable[[Path], ExampleSynth]


@pytest.fixture(scope="session")
def example_synth(tmp_path_factory: pytest.TempPathFactory) -> ExampleSynthFn:
    """One `hyperpod-kit synth` per example file (environments/) for the whole run, whichever
    module and worker asks first (a file lock; the others wait and read its result). Each lookup
    checks that the assembly is still as the CLI wrote it: a test that changed it fails the next
    reader."""
    from filelock import FileLock

    shared = shared_tmp(tmp_path_factory) / "example-synths"
    shared.mkdir(exist_ok=True)

    def get(example: Path) -> ExampleSynth:
        name = str(example.relative_to(REPO / "environments")).replace("/", "--")
        folder = shared / name.removesuffix(".yaml")
        result_file = folder / "result.json"
        with FileLock(str(folder) + ".lock"):
            if not result_file.exists():
                shutil.rmtree(folder, ignore_errors=True)  # a run that died half-way
                folder.mkdir()
                done = run_cli(
                    "synth", str(example), "-o", str(folder / "cdk.out"), cwd=folder,
                    env={"PYTHONHASHSEED": EXAMPLE_HASH_SEED},
                )  # fmt: skip
                produced = folder / ("cdk.out" if done.returncode == 0 else "cdk.out.rejected")
                result = {
                    "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                    "fingerprint": _fingerprint(produced) if produced.is_dir() else [],
                }  # fmt: skip
                partial = folder / "result.json.partial"
                partial.write_text(json.dumps(result))
                partial.rename(result_file)
            result = json.loads(result_file.read_text())
        synth = ExampleSynth(
            example, folder, result["returncode"], result["stdout"], result["stderr"]
        )
        if result["fingerprint"]:
            assert _fingerprint(synth.assembly) == result["fingerprint"], (
                f"a test changed the shared assembly {synth.assembly}: copy it first"
            )
        return synth

    return get


def assert_node_python(path: Path, *, local: frozenset[str] = frozenset()) -> None:
    """Code that runs on a node with the AMI's python3 (3.8 on Ubuntu 20.04 images): it parses as
    3.8, uses no newer API, and imports only the standard library (and `local` modules)."""
    import ast
    import sys

    source = path.read_text()
    ast.parse(source, feature_version=(3, 8))
    for newer in ("removeprefix", "removesuffix", "functools.cache(", "zoneinfo", "match "):
        assert newer not in source, f"{path.name} uses {newer!r}, newer than Python 3.8"
    tree = ast.parse(source)
    imports = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imports |= {
        (n.module or "").split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and not n.level
    }
    assert imports <= set(sys.stdlib_module_names) | {"__future__"} | local, imports


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty HOME for a command run under `env -i` (nothing of the machine's user)."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder
