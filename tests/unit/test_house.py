"""The house stays one-way (docs/architecture.md, "The house"), checked on the source, by `ast`:

1. `cli/` is the top floor: no module outside `hyperpod_kit/cli/` imports `hyperpod_kit.cli`
   (the package, `app.py`, the Lambda handlers, the node scripts; tests and benchmarks may).
2. What runs or renders for nodes, jobs and people's tools knows no CDK: the modules below
   import neither `aws_cdk`, `constructs` nor `cdk_nag`, directly or through any module of the
   package they import (every import counts: at the top, in a function, or for type checking).
3. Floors: constructs do not import stacks, the app or the job renderers (a name both need lives
   below both, in `naming.py`); stacks do not import the app; job renderers import no construct.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
    "hyperpod_kit.outputs",
    "hyperpod_kit.process",
    "hyperpod_kit.progress",
    "hyperpod_kit.estimate",
    "hyperpod_kit.cdk_cli",
)


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _package_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, root: Path = REPO) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in `path`; `from a import b` yields `a` and also `a.b`
    when that is a module of the package; a relative import is resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = _package_modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved from the file's own package
                package = _module_name(path, root).split(".")
                if path.name != "__init__.py":
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield node.lineno, f"{base}.{alias.name}"


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _ours(name: str) -> str | None:
    """The package module `name` loads (itself, or the package that holds a name of it)."""
    modules = _package_modules()
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@cache
def _edges(module: str) -> tuple[tuple[int, str], ...]:
    return tuple(_imports(_package_modules()[module]))


def _path_to_cdk(start: str) -> list[str] | None:
    """The chain of imports from `start` to a CDK package, or None (breadth first: shortest)."""
    seen = {start}
    queue: list[list[str]] = [[start]]
    while queue:
        chain = queue.pop(0)
        for line, name in _edges(chain[-1]):
            if name.split(".")[0] in CDK:
                return [*chain[:-1], f"{chain[-1]}:{line}", name]
            target = _ours(name) if _within(name, "hyperpod_kit") else None
            if target is not None and target not in seen:
                seen.add(target)
                queue.append([*chain[:-1], f"{chain[-1]}:{line}", target])
    return None


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
FLOORS = {
    "hyperpod_kit.constructs": ("hyperpod_kit.stacks", "hyperpod_kit.app", "hyperpod_kit.jobs"),
    "hyperpod_kit.stacks": ("hyperpod_kit.app",),
    "hyperpod_kit.jobs": ("hyperpod_kit.constructs", "hyperpod_kit.stacks", "hyperpod_kit.app"),
}


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
        "hyperpod_kit",
        "hyperpod_kit.cli",
    ]
    assert list(_imports(bad)) == [
        (1, "hyperpod_kit.cli.outputs"),
        (3, "hyperpod_kit.constructs"),
        (3, "hyperpod_kit.constructs.monitoring"),
    ]
