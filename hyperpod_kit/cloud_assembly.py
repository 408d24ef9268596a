"""Reading a synthesized cloud assembly folder, for every part that reads one (the gates, `plan`,
the rehearsal): JSON files with errors that name them, the stacks of the assembly and of the
assemblies nested in it (a CDK `Stage`, as CDK Pipelines deploys one, writes its stacks into a
folder `assembly-<stage>/` that the manifest lists as a `cdk:cloud-assembly` artifact), the file
assets by their hash (from the asset manifests), and the template a nested stack's `TemplateURL`
names (CDK writes it beside the parent as a file asset; the URL ends in the asset's hash)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperpod_kit.files import fileio

ASSET_HASH = re.compile(r"([0-9a-f]{64})\.(?:json|zip)")


class AssemblyFileError(Exception):
    """A file of the assembly that is missing or not JSON; the message names it."""


# The largest file of an assembly is a template (CloudFormation takes at most 1 MB from S3) or
# an asset manifest; 64 MiB is far above any real one and bounds a link to /dev/zero or a
# sparse file.
MAX_ASSEMBLY_FILE = 64 << 20


def read_json(path: Path, what: str) -> Any:
    """A JSON file of the assembly, through the one input layer (regular file, bounded, UTF-8)."""
    if not path.exists() and not path.is_symlink():
        raise AssemblyFileError(f"{path}: {what} is missing")
    try:
        text = fileio.read_text(path, limit=MAX_ASSEMBLY_FILE, what=what)
    except fileio.InputError as error:
        raise AssemblyFileError(f"{path}: {what} {error.message}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise AssemblyFileError(
            f"{path}: {what} is not JSON ({error.msg}, line {error.lineno})"
        ) from None
    except RecursionError:
        raise AssemblyFileError(f"{path}: {what} is not JSON (nested too deeply)") from None


STACK = "aws:cloudformation:stack"
NESTED_ASSEMBLY = "cdk:cloud-assembly"
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class StackArtifact:
    """A stack of an assembly: its label (the artifact id at the top; `displayName`, the stage's
    path and the stack's id, in a nested assembly: ``dev/team-dev-network``), the folder of the
    assembly that holds it (its template, metadata and asset paths are relative to that folder),
    its manifest entry, and that assembly's artifacts (for its asset manifests)."""

    label: str
    folder: Path
    name: str
    artifact: dict[str, Any]
    artifacts: dict[str, Any]
    stage: str = ""  # the path of the stage that holds it ("" at the top)

    @property
    def stack_name(self) -> str:
        """The CloudFormation stack's name (what a deploy creates or updates)."""
        found = (self.artifact.get("properties") or {}).get("stackName")
        return found if isinstance(found, str) and found else self.name


def stack_artifacts(
    folder: Path, artifacts: dict[str, Any], prefix: str = ""
) -> Iterator[StackArtifact]:
    """Every stack of the assembly in `folder` (whose manifest's `artifacts` are given), in the
    manifest's order, the stacks of a nested assembly where that assembly is listed. A nested
    assembly whose manifest is missing or not JSON raises AssemblyFileError naming it."""
    for name, artifact in artifacts.items():
        if not isinstance(artifact, dict):
            continue
        if artifact.get("type") == STACK:
            shown = artifact.get("displayName")
            label = name if not prefix else (
                shown if isinstance(shown, str) and shown else f"{prefix}/{name}"
            )  # fmt: skip
            yield StackArtifact(label, folder, name, artifact, artifacts, prefix)
        elif artifact.get("type") == NESTED_ASSEMBLY:
            properties = artifact.get("properties") or {}
            directory = properties.get("directoryName")
            if not isinstance(directory, str) or not _PLAIN_NAME.match(directory):
                raise AssemblyFileError(
                    f"{folder / 'manifest.json'}: nested assembly {name} names no folder of its "
                    f"own ({directory!r})"
                )
            shown = properties.get("displayName")
            label = shown if isinstance(shown, str) and shown else directory
            nested = folder / directory
            manifest = read_json(nested / "manifest.json", f"the manifest of stage {label}")
            inner = manifest.get("artifacts", {}) if isinstance(manifest, dict) else None
            if not isinstance(inner, dict):
                raise AssemblyFileError(f"{nested / 'manifest.json'}: no artifacts")
            yield from stack_artifacts(nested, inner, f"{prefix}/{label}" if prefix else label)


def file_assets(folder: Path, artifacts: dict[str, Any]) -> dict[str, Path]:
    """Every file asset (a template, a folder, a zip) by its hash, from the asset manifests."""
    found: dict[str, Path] = {}
    for artifact in artifacts.values():
        if not isinstance(artifact, dict) or artifact.get("type") != "cdk:asset-manifest":
            continue
        path = folder / str(artifact.get("properties", {}).get("file", ""))
        manifest = read_json(path, "an asset manifest")
        files = manifest.get("files", {}) if isinstance(manifest, dict) else {}
        for digest, asset in files.items():
            source = asset.get("source", {}).get("path") if isinstance(asset, dict) else None
            if isinstance(source, str):
                found[digest] = folder / source
    return found


def asset_of(value: Any, assets: dict[str, Path]) -> Path | None:
    """The asset a template value (a nested stack's TemplateURL, an S3 key) names by its hash."""
    digest = ASSET_HASH.search(json.dumps(value))
    return assets.get(digest.group(1)) if digest else None
