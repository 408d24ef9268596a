"""The house stays one-way (docs/architecture.md, "The house"), checked on the source, by `ast`:

1. `cli/` is the top floor: no module outside `hyperpod_kit/cli/` imports `hyperpod_kit.cli`
   (the package, `app.py`, the Lambda handlers, the node scripts; tests and benchmarks may).
2. What runs or renders for nodes, jobs and people's tools knows no CDK: the modules below
   import neither `aws_cdk`, `constructs` nor `cdk_nag`, directly or through any module of the
   package they import (every import counts: at the top, in a function, or for type checking).
3. Floors: constructs do not import stacks, the app or the job renderers (a name both need lives
   below both, in `naming.py`); stacks do not import the app; job renderers import no construct.
4. No circles: the modules of `hyperpod_kit` import each other without a loop. A package counts as
   its `__init__`, and importing `a.b.c` imports `a` and `a.b` first, so an `__init__` that
   imports a module which imports the package back (a name of its `__init__`) is a circle. An
   import in a function counts (it runs when called); one under `if TYPE_CHECKING:` does not
   (it never runs). The packages a module sits in are already loading when it runs, so importing
   a sibling (`a.b.x` from `a.b.y`) is no edge to `a.b` itself; naming a name of `a.b` is.
5. `config/` imports no CDK, no jsii and no construct or stack code, through any import.
6. The light commands, `status` and `logs`, import no CDK, jsii, cdk-nag or cfn-lint, so a Studio
   space or a node runs them with a small set of dependencies: checked on the source, and by
   running the real CLI with those imports refused.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "hyperpod_kit"
CDK = ("aws_cdk", "constructs", "cdk_nag")
# Module name prefixes (a package covers its submodules) that must not reach CDK.
CDK_FREE = (
    "hyperpod_kit.lifecycle",
    "hyperpod_kit.studio_lifecycle",
    "hyperpod_kit.health_settings",
    "hyperpod_kit.jobs",
    "hyperpod_kit.local",
    "hyperpod_kit.config",
    "hyperpod_kit.operations",
    "hyperpod_kit.naming",
    "hyperpod_kit.operator_policy",
    "hyperpod_kit.outputs",
    "hyperpod_kit.process",
    "hyperpod_kit.progress",
    "hyperpod_kit.estimate",
    "hyperpod_kit.cdk_cli",
    "hyperpod_kit.verify",
)
# What config/ may not reach: top-level modules of other distributions, and our floors above it.
CONFIG_REFUSES = ("aws_cdk", "constructs", "jsii", "cdk_nag")
CONFIG_REFUSES_OURS = ("hyperpod_kit.constructs", "hyperpod_kit.stacks")
# What the light commands may not import, and the modules they run.
HEAVY = ("aws_cdk", "constructs", "jsii", "cdk_nag", "cfnlint")
LIGHT_PREFIXES = ("hyperpod_kit.cli.status", "hyperpod_kit.cli.job", "hyperpod_kit.operations")

Edges = dict[str, dict[str, int]]  # module -> {module it imports: line of the first import}


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path, package: str) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


@cache
def _package_modules() -> dict[str, Path]:
    return _modules(REPO, "hyperpod_kit")


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST, typing: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under `node`, in source order; without `typing`, none of those in
    the body of an `if TYPE_CHECKING:` (its `else:` runs, so it is searched)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif not typing and isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.orelse:
                yield from _import_nodes(ast.Module(body=[statement], type_ignores=[]), typing)
        else:
            yield from _import_nodes(child, typing)


def _imports(
    path: Path,
    root: Path = REPO,
    *,
    modules: dict[str, Path] | None = None,
    typing: bool = True,
) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in `path`. `from a import b` yields `a.b` when that is a
    module (of `modules`: the package's, by default), and `a` when some name it takes is not a
    module (a name of `a`'s `__init__`); a relative import is resolved. `typing=False` leaves
    out the imports under `if TYPE_CHECKING:`."""
    modules = _package_modules() if modules is None else modules
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in _import_nodes(tree, typing):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
            continue
        base = node.module or ""
        if node.level:  # relative: resolved from the file's own package
            package = _module_name(path, root).split(".")
            if path.name != "__init__.py":
                package.pop()
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
        if len(submodules) < len(node.names):
            yield node.lineno, base
        for name in submodules:
            yield node.lineno, name


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _ours(name: str, modules: dict[str, Path] | None = None) -> str | None:
    """The module of `modules` that `name` loads (itself, or the package that holds a name of
    it); None for a module of another distribution."""
    modules = _package_modules() if modules is None else modules
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _packages_of(module: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: the packages Python imports before the module."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@cache
def _edges(module: str) -> tuple[tuple[int, str], ...]:
    return tuple(_imports(_package_modules()[module]))


def _graph(modules: dict[str, Path], root: Path = REPO) -> Edges:
    """The import graph of `modules` as Python runs it: an edge for each module a module
    imports (in a function too; not for type checking only), and for each package that import
    loads first, except the packages the importer sits in (already loading when it runs)."""
    graph: Edges = {}
    for module, path in modules.items():
        own = {module, *_packages_of(module)}
        edges: dict[str, int] = {}
        for line, name in _imports(path, root, modules=modules, typing=False):
            target = _ours(name, modules)
            if target is None:
                continue
            if target != module:
                edges.setdefault(target, line)
            for package in _packages_of(target):
                if package in modules and package not in own:
                    edges.setdefault(package, line)
        graph[module] = edges
    return graph


def _circles(graph: Edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, with an
    explicit stack): each is a set of modules that import each other round a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def enter(node: str) -> tuple[str, Iterator[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        return node, iter(sorted(t for t in graph[node] if t in graph))

    def leave(node: str) -> None:
        if low[node] == index[node]:  # the root of a component: it is the stack down to it
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for start in sorted(graph):
        if start in index:
            continue
        work = [enter(start)]
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                leave(node)
            elif target not in index:
                work.append(enter(target))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return sorted(found)


def _describe(circle: list[str], graph: Edges) -> str:
    members = set(circle)
    lines = [
        f"  {module}:{line} imports {target}"
        for module in circle
        for target, line in sorted(graph[module].items())
        if target in members
    ]
    return f"a circle of {len(circle)} modules: {', '.join(circle)}\n" + "\n".join(lines)


def _chain(start: str, bad: Callable[[str], bool]) -> list[str] | None:
    """The chain of imports from `start` to a module `bad` refuses, or None (breadth first:
    the shortest). Every import counts, for type checking too, and each package an import
    loads first."""
    seen = {start}
    queue: list[list[str]] = [[start]]
    while queue:
        chain = queue.pop(0)
        for line, name in _edges(chain[-1]):
            if bad(name):
                return [*chain[:-1], f"{chain[-1]}:{line}", name]
            target = _ours(name) if _within(name, "hyperpod_kit") else None
            if target is None:
                continue
            for step in [*_packages_of(target)[1:], target]:
                if step in _package_modules() and step not in seen:
                    seen.add(step)
                    if bad(step):
                        return [*chain[:-1], f"{chain[-1]}:{line}", step]
                    queue.append([*chain[:-1], f"{chain[-1]}:{line}", step])
    return None


def _path_to_cdk(start: str) -> list[str] | None:
    """The chain of imports from `start` to a CDK package, or None."""
    return _chain(start, lambda name: name.split(".")[0] in CDK)


def _outside_cli() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts[:1]]
    for folder in ("assets", "lifecycle"):
        files += (REPO / folder).rglob("*.py")
    return sorted([*files, REPO / "app.py"])


def test_nothing_outside_cli_imports_the_cli() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in _outside_cli()
        for line, name in _imports(path)
        if _within(name, "hyperpod_kit.cli")
    ]
    assert found == [], "cli/ is the top floor; move what they share below it:\n" + "\n".join(found)


# floor -> what it must not import
# `hyperpod_kit.cdk`, the construct library's public API, is a top floor beside cli/: what it
# re-exports lives below it, so nothing below imports it.
FLOORS = {
    "hyperpod_kit.constructs": (
        "hyperpod_kit.stacks", "hyperpod_kit.app", "hyperpod_kit.jobs", "hyperpod_kit.cdk",
    ),
    "hyperpod_kit.stacks": ("hyperpod_kit.app", "hyperpod_kit.cdk"),
    "hyperpod_kit.app": ("hyperpod_kit.cdk",),
    "hyperpod_kit.gates": ("hyperpod_kit.cdk",),
    "hyperpod_kit.config": ("hyperpod_kit.cdk",),
    "hyperpod_kit.jobs": ("hyperpod_kit.constructs", "hyperpod_kit.stacks", "hyperpod_kit.app"),
}  # fmt: skip


def test_floors_import_only_downwards() -> None:
    found = [
        f"{module}:{line} imports {name}"
        for module in _package_modules()
        for floor, above in FLOORS.items()
        if _within(module, floor)
        for line, name in _edges(module)
        if any(_within(name, a) for a in above)
    ]
    assert found == [], "\n".join(found)


CDK_FREE_MODULES = sorted(
    m for m in _package_modules() if any(_within(m, prefix) for prefix in CDK_FREE)
)


@pytest.mark.parametrize("module", CDK_FREE_MODULES)
def test_node_side_modules_know_no_cdk(module: str) -> None:
    chain = _path_to_cdk(module)
    assert chain is None, "imports CDK: " + " -> ".join(chain or [])


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The checks above are not vacuous: they find the imports that used to break the house."""
    assert _path_to_cdk("hyperpod_kit.app") is not None  # app composes stacks: CDK, directly
    assert _path_to_cdk("hyperpod_kit.stacks.monitoring") is not None
    assert len(CDK_FREE_MODULES) > 20
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from hyperpod_kit.cli.outputs import ASSEMBLY\n"
        "def f():\n    from hyperpod_kit.constructs import monitoring\n"
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("from . import x\nfrom ..hyperpod_kit import cli\n")
    assert [name for _, name in _imports(tmp_path / "pkg" / "mod.py", tmp_path)] == [
        "pkg",
        "hyperpod_kit.cli",
    ]
    assert list(_imports(bad)) == [
        (1, "hyperpod_kit.cli.outputs"),
        (3, "hyperpod_kit.constructs.monitoring"),
    ]


# --- no circles --------------------------------------------------------------------------------


def test_the_package_has_no_import_circles() -> None:
    graph = _graph(_package_modules())
    circles = _circles(graph)
    assert circles == [], (
        "modules that import each other, directly or round a loop; move what both sides need "
        "into a module both import (an import inside a function is still an edge):\n"
        + "\n".join(_describe(c, graph) for c in circles)
    )


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return _modules(root, "pkg")


def test_the_circle_finder_sees_each_kind_of_circle(tmp_path: Path) -> None:
    """Each circle the package had is found, by name, and what is no circle is not."""
    modules = _tree(
        tmp_path,
        {
            # A package's __init__ imports an area that imports a name of the package back.
            "pkg/__init__.py": "",
            "pkg/checks/__init__.py": "from pkg.checks import area\ndef register(): pass\n",
            "pkg/checks/area.py": "from pkg.checks import register\n",
            # The fix: the areas import a registry module; the package imports the areas.
            "pkg/fixed/__init__.py": "from pkg.fixed import area\nfrom .registry import rule\n",
            "pkg/fixed/area.py": "from pkg.fixed.registry import rule\n",
            "pkg/fixed/registry.py": "def rule(): pass\n",
            # Two modules, one importing the other inside a function.
            "pkg/reader.py": "def read():\n    from pkg import merger\n",
            "pkg/merger.py": "from pkg.reader import read\n",
            # Importing a submodule loads its package, whose __init__ imports back round a loop.
            "pkg/facts/__init__.py": "from pkg.facts.loader import load\n",
            "pkg/facts/loader.py": "from pkg import naming\ndef load(): pass\n",
            "pkg/facts/table.py": "",
            "pkg/naming.py": "import pkg.facts.table\n",
            # Only for type checking: never runs, so no circle.
            "pkg/typed_a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.typed_b import B\nelse:\n    B = None\n",
            "pkg/typed_b.py": "from pkg.typed_a import B\nclass C: pass\n",
        },
    )
    graph = _graph(modules, tmp_path)
    assert graph["pkg.checks.area"] == {"pkg.checks": 1}  # a name of the package
    assert graph["pkg.fixed.area"] == {"pkg.fixed.registry": 1}  # its own package: no edge
    assert graph["pkg.naming"] == {"pkg.facts.table": 1, "pkg.facts": 1}  # and the package
    assert graph["pkg.typed_a"] == {}
    assert _circles(graph) == [
        ["pkg.checks", "pkg.checks.area"],
        ["pkg.facts", "pkg.facts.loader", "pkg.naming"],
        ["pkg.merger", "pkg.reader"],
    ]
    described = _describe(["pkg.merger", "pkg.reader"], graph)
    assert "pkg.reader:2 imports pkg.merger" in described
    assert "pkg.merger:1 imports pkg.reader" in described


def test_the_package_graph_is_the_real_one() -> None:
    """The graph the circle test walks holds the package's imports: a top-level one, one in a
    function, and the package a module's import loads; not one for type checking only."""
    graph = _graph(_package_modules())
    assert len(graph) == len(_package_modules()) > 100
    assert sum(len(e) for e in graph.values()) > 400
    assert "hyperpod_kit.cli.codepipeline" in graph["hyperpod_kit.cli.pipeline"]
    assert "hyperpod_kit.config.validators" in graph["hyperpod_kit.config.environment"]
    assert "hyperpod_kit.config.validators.studio" in graph["hyperpod_kit.config.validators"]
    assert "hyperpod_kit.studio_lifecycle" in graph["hyperpod_kit.config.validators.studio"]
    assert "hyperpod_kit.config" in graph["hyperpod_kit.naming"]  # through config.facts
    typed = dict(_imports(PACKAGE / "config" / "environment.py", typing=True))
    assert "hyperpod_kit.config.pins" in typed.values()  # for type checking only:
    assert "hyperpod_kit.config.pins" not in graph["hyperpod_kit.config.environment"]
    assert "hyperpod_kit.config.aws" in graph["hyperpod_kit.config.environment"]  # in a function


# --- config/ knows no CDK and no constructs ----------------------------------------------------


def _config_refuses(name: str) -> bool:
    return name.split(".", maxsplit=1)[0] in CONFIG_REFUSES or any(
        _within(name, ours) for ours in CONFIG_REFUSES_OURS
    )


CONFIG_MODULES = sorted(m for m in _package_modules() if _within(m, "hyperpod_kit.config"))


def test_config_imports_no_cdk_and_no_construct_code() -> None:
    found = {m: _chain(m, _config_refuses) for m in CONFIG_MODULES}
    bad = [" -> ".join(chain) for chain in found.values() if chain is not None]
    assert bad == [], (
        "config/ must import no aws_cdk, constructs, jsii, cdk_nag, hyperpod_kit.constructs or "
        "hyperpod_kit.stacks, through any import; move what it needs to a neutral module:\n"
        + "\n".join(bad)
    )


def test_the_config_rule_sees_a_violation() -> None:
    """The rule refuses what it names, and finds the chains that reach it."""
    assert len(CONFIG_MODULES) > 30
    assert "hyperpod_kit.config.validators.cluster" in CONFIG_MODULES
    # What config/validators/cluster.py imported before chart_identity moved out of constructs/.
    assert _config_refuses("hyperpod_kit.constructs.eks_chart_folder")
    assert _config_refuses("hyperpod_kit.stacks")
    assert _config_refuses("jsii._runtime")
    assert _config_refuses("constructs")
    assert not _config_refuses("hyperpod_kit.config.facts")
    assert not _config_refuses("hyperpod_kit.constructs_like")  # a name, not the package
    chain = _chain("hyperpod_kit.constructs.eks_chart", _config_refuses)
    assert chain is not None
    assert chain[0].startswith("hyperpod_kit.constructs.eks_chart:")
    assert _config_refuses(chain[-1])
    chain = _chain("hyperpod_kit.app", _config_refuses)
    assert chain is not None
    assert _config_refuses(chain[-1])


# --- the light commands -----------------------------------------------------------------------


LIGHT_MODULES = sorted(
    m for m in _package_modules() if any(_within(m, prefix) for prefix in LIGHT_PREFIXES)
)


def test_light_command_modules_reach_no_heavy_import() -> None:
    """What `status` and `logs` run (cli/status.py, operations/) imports none of the heavy
    packages through any import, in a function or for type checking too."""
    chains = {m: _chain(m, lambda name: name.split(".")[0] in HEAVY) for m in LIGHT_MODULES}
    bad = [" -> ".join(chain) for chain in chains.values() if chain is not None]
    assert bad == [], "a light command imports a heavy package:\n" + "\n".join(bad)
    assert "hyperpod_kit.operations.logs" in LIGHT_MODULES
    assert "hyperpod_kit.cli.status" in LIGHT_MODULES


# Runs in a fresh interpreter: refuses the heavy imports, runs the real CLI entry for each
# command line, then imports the light modules; prints what happened as JSON.
_LIGHT_RUN = r"""
import contextlib, importlib, importlib.abc, io, json, sys, traceback

HEAVY, COMMANDS, MODULES = json.loads(sys.argv[1])
refused = []


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HEAVY:
            refused.append(name)
            raise ImportError(f"{name} is refused: a light command may not import it")
        return None


sys.meta_path.insert(0, Refuse())
results = []
for argv in COMMANDS:
    out, err, error, before = io.StringIO(), io.StringIO(), None, len(refused)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            from hyperpod_kit.cli.main import main

            code = main(argv)
        except SystemExit as e:  # --help
            code = e.code
        except BaseException:
            code, error = None, traceback.format_exc()
    results.append({
        "argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
        "error": error, "refused": refused[before:], "loaded": sorted(sys.modules),
    })
imported = {}
for name in MODULES:
    try:
        importlib.import_module(name)
        imported[name] = None
    except BaseException:
        imported[name] = traceback.format_exc()
heavy_loaded = sorted(m for m in sys.modules if m.partition(".")[0] in HEAVY)
refused_by_us = list(refused)
try:  # the finder really refuses (aws_cdk is installed here)
    import aws_cdk
    probe = "imported"
except ImportError as e:
    probe = str(e)
print(json.dumps({"results": results, "imported": imported, "heavy_loaded": heavy_loaded,
                  "refused": refused_by_us, "probe": probe}))
"""


def _no_credentials(home: Path) -> dict[str, str]:
    """The environment with no way to AWS credentials: none in variables, files, SSO or IMDS."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_") or k in ("AWS_CA_BUNDLE",)
    }
    env.update(
        HOME=str(home),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-credentials"),
        AWS_CONFIG_FILE=str(home / "no-config"),
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    return env


def test_status_and_logs_run_with_cdk_jsii_cdk_nag_and_cfn_lint_refused(tmp_path: Path) -> None:
    """The real CLI entry runs `status` and `logs` (help, and the command itself up to the
    missing credentials, a clean exit 2) while every import of aws_cdk, constructs, jsii,
    cdk_nag and cfnlint raises; then the modules they dispatch to import too."""
    commands = [
        ["status", "--help"],
        ["logs", "--help"],
        ["status", "environments/default.yaml"],
        ["status", "environments/eks.yaml", "--format", "json"],
        ["logs", "environments/default.yaml"],
        ["job", "--help"],
        ["job", "list", "environments/eks.yaml"],  # the Kubernetes API: credentials first
    ]
    given = json.dumps([list(HEAVY), commands, LIGHT_MODULES])
    run = subprocess.run(
        [sys.executable, "-c", _LIGHT_RUN, given],
        cwd=REPO,
        env=_no_credentials(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert "is refused" in report["probe"], "the refusing finder did not refuse aws_cdk"
    for r in report["results"]:
        command = " ".join(r["argv"])
        said = r["stdout"] + r["stderr"]
        assert r["error"] is None, f"{command} raised:\n{r['error']}"
        assert r["refused"] == [], f"{command} tried to import {r['refused']}"
        assert "Traceback" not in said and "ImportError" not in said, f"{command}:\n{said}"
        if "--help" in r["argv"]:
            assert r["code"] == 0, f"{command} exited {r['code']}:\n{said}"
            assert r["stdout"].startswith(f"usage: hyperpod-kit {r['argv'][0]}"), said
        else:
            assert r["code"] == 2, f"{command} exited {r['code']}, not 2:\n{said}"
            assert "no AWS credentials found" in r["stderr"], f"{command}:\n{said}"
            assert ": valid" in r["stderr"], f"{command} did not load its file:\n{said}"
    status = report["results"][2]
    assert "hyperpod_kit.operations.status" in status["loaded"]  # its code path ran
    failed = {name: error for name, error in report["imported"].items() if error is not None}
    assert failed == {}, "\n".join(f"{name}:\n{error}" for name, error in failed.items())
    assert sorted(report["imported"]) == LIGHT_MODULES
    assert report["refused"] == [], f"imports refused: {report['refused']}"
    assert report["heavy_loaded"] == [], f"heavy modules loaded: {report['heavy_loaded']}"
