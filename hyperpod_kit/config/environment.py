"""`load_environment`: an environment file, the bases it extends, the schema and the semantic
validators (and, given an AWS facade, the checks that ask the account), into a
`LoadedEnvironment` or a `ConfigError` with every finding.

It sits above the pieces it puts together (`loader.py` reads one document, `extends.py` merges
the bases, `validators/` checks the result), so none of them imports it back; and outside the
package's `__init__`, so that importing any `hyperpod_kit.config` module (the schema, the facts)
does not import the loader and the validators (tests/unit/test_house.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hyperpod_kit.config.extends import read_layers
from hyperpod_kit.config.findings import ConfigError, Finding, has_errors
from hyperpod_kit.config.loader import Loc, _Document, _path_to_loc, _to_config
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators import run_validators

if TYPE_CHECKING:
    from hyperpod_kit.config.aws import AwsFacade
    from hyperpod_kit.config.pins import Pin


@dataclass(frozen=True)
class LoadedEnvironment:
    """A valid config, where it came from, and what validation said that was not an error."""

    file: str
    config: EnvironmentConfig
    findings: list[Finding]
    lines: dict[Loc, int]
    files: dict[Loc, str] = field(default_factory=dict)  # a path's file, if not `file` (extends)
    chain: tuple[str, ...] = ()  # the files merged (`extends:`), base first; `file` last
    # The version lock as resolved for this environment (hyperpod_kit/lock.py); None before.
    pins: dict[str, Pin] | None = None

    def origin(self, path: str) -> tuple[str | None, int | None]:
        """The file (None: `file` itself) and line where the value at `path` is written."""
        loc = _path_to_loc(path)
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                source = self.files.get(loc[:end], self.file)
                return (None if source == self.file else source), self.lines[loc[:end]]
        return None, None

    def at(self, path: str) -> str:
        """``FILE:LINE`` where the value at `path` is written (``FILE`` alone if no line)."""
        source, line = self.origin(path)
        file = source or self.file
        return f"{file}:{line}" if line else file

    def place(self, finding: Finding) -> Finding:
        """The finding at the file and line of its path."""
        source, line = self.origin(finding.path)
        return replace(finding, line=line, file=source)


def load_environment(
    path: str | Path, *, suppress: Sequence[str] = (), aws: AwsFacade | None = None
) -> LoadedEnvironment:
    """Parse, check the schema, run the semantic validators (and, given `aws`, the checks that
    ask the account); raise `ConfigError` on any error."""
    file = str(path)
    layered = read_layers(file)  # the file, and the bases it extends merged under it
    doc = layered.doc
    config = _to_config(file, doc).at_source(Path(file).parent, _written_elsewhere(doc))
    raw = run_validators(config, suppress=[*suppress, *config.validation.suppress])
    if aws is not None and not has_errors(raw):
        from hyperpod_kit.config.aws import run_aws_checks  # boto3: only when asked for

        raw += run_aws_checks(config, aws)
    loaded = LoadedEnvironment(
        file=file,
        config=config,
        findings=[],
        lines=doc.lines,
        files={loc: f for loc, f in doc.files.items() if f != file},
        chain=tuple(layer.file for layer in layered.layers),
    )
    findings = [f if f.line else loaded.place(f) for f in raw]
    if has_errors(findings):
        raise ConfigError(file, findings)
    return replace(loaded, findings=findings)


def _written_elsewhere(doc: _Document) -> dict[str, Path]:
    """Text values written only in bases in other folders than `doc.file`'s, and that folder:
    a relative path among them resolves from the file that writes it. A text that files in
    different folders write is left to the environment file's folder."""
    if not doc.files:
        return {}  # one file: every value is written in it
    home = Path(doc.file).parent.resolve()
    folder_of = {f: Path(f).parent.resolve() for f in {doc.file, *doc.files.values()}}
    folders: dict[str, set[Path]] = {}
    for loc, node in doc.scalars.items():
        if isinstance(node.value, str) and node.tag.endswith(":str"):
            folders.setdefault(node.value, set()).add(folder_of[doc.files.get(loc, doc.file)])
    return {
        value: next(iter(found))
        for value, found in folders.items()
        if len(found) == 1 and home not in found
    }


def peek_region(path: str | Path) -> str | None:
    """The file's `region` if it has a readable one, else None; never raises for a bad file.

    For callers that need the region before the full load (the AWS facade), with the same bounds.
    """
    try:
        data = read_layers(str(path)).doc.data  # the region may come from a base
    except ConfigError:
        return None
    region = data.get("region")
    return region if isinstance(region, str) else None
