"""Reading a synthesized cloud assembly folder, for every part that reads one (the gates, `plan`,
the rehearsal): JSON files with errors that name them, the file assets by their hash (from the
asset manifests), and the template a nested stack's `TemplateURL` names (CDK writes it beside the
parent as a file asset; the URL ends in the asset's hash)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ASSET_HASH = re.compile(r"([0-9a-f]{64})\.(?:json|zip)")


class AssemblyFileError(Exception):
    """A file of the assembly that is missing or not JSON; the message names it."""


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AssemblyFileError(f"{path}: {what} is missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise AssemblyFileError(f"{path}: {what} cannot be read ({error})") from None
    except json.JSONDecodeError as error:
        raise AssemblyFileError(
            f"{path}: {what} is not JSON ({error.msg}, line {error.lineno})"
        ) from None


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
