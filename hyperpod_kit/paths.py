"""Where the toolkit's own files are: everything it reads at run time, inside the package.

`hyperpod_kit/_bundled` holds them, found through `importlib.resources`:

- in the repository, links to the top-level layout the design fixes (`lifecycle/`, `assets/`,
  `environments/default.yaml`, `package.json`), so a checkout's editable install (`make setup`)
  reads the files people edit;
- in the wheel (and so from `pip install` of the repository or of an sdist), the files
  themselves: the build follows the links (pyproject.toml's package-data).

Both ways run this same code, and nothing here knows where a repository is. The CDK and the
processes the toolkit starts need real paths: a wheel that pip installed is unpacked, so the
resources are files already; `as_file` keeps that true for a zipped import too (copies that
live as long as the process).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from importlib.resources import as_file, files
from pathlib import Path

BUNDLE = files("hyperpod_kit") / "_bundled"
_COPIES = contextlib.ExitStack()
atexit.register(_COPIES.close)


def bundled(*parts: str) -> Path:
    """The real path of a bundled file or folder (which must exist)."""
    resource = BUNDLE.joinpath(*parts)
    if not resource.is_file() and not resource.is_dir():
        raise FileNotFoundError(f"hyperpod-kit's package lacks {'/'.join(parts)}: reinstall it")
    return Path(os.path.realpath(_COPIES.enter_context(as_file(resource))))


ASSETS = bundled("assets")
TRAINER_DIR = ASSETS / "trainer"  # the trainer image's build context (its Dockerfile)
FUNCTIONS_DIR = ASSETS / "functions"  # the Lambda handlers' code
LIFECYCLE_DIR = bundled("lifecycle")
DEFAULT_ENVIRONMENT = bundled("environments", "default.yaml")
# The CDK CLI the toolkit is tested with: package.json pins it, package-lock.json locks its tree.
PACKAGE_JSON = bundled("package.json")
PACKAGE_LOCK = bundled("package-lock.json")
