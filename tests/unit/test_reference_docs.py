"""The construct library's reference (pdoc, from the docstrings) builds with no warning, and
documents every public name (`make reference` writes it to build/reference)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hyperpod_kit.api_snapshot import SNAPSHOT
from tests.conftest import REPO


def pdoc(module: str, out: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """pdoc on `module`, as `make reference` runs it: it imports the module it documents
    (PDOC_ALLOW_EXEC: jsii runs code at import); -W error makes any warning, pdoc's about a
    docstring or an annotation included, an error."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "pdoc", module, "-o", str(out)],
        cwd=cwd, env={**os.environ, "PDOC_ALLOW_EXEC": "1"}, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_the_reference_builds_without_a_warning_and_names_every_public_name(
    tmp_path: Path,
) -> None:
    done = pdoc("hyperpod_kit.cdk", tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "warn" not in done.stderr.lower(), done.stderr[-4000:]
    page = (tmp_path / "hyperpod_kit" / "cdk.html").read_text()
    names = json.loads(SNAPSHOT.read_text())["names"]
    missing = [name for name in names if f'id="{name}"' not in page]
    assert not missing, f"not in the reference: {missing}"


def test_a_warning_fails_the_reference(tmp_path: Path) -> None:
    (tmp_path / "unresolved.py").write_text(
        "from __future__ import annotations\n\n\ndef f(x: NoSuchType) -> None:\n    pass\n"
    )
    done = pdoc("unresolved", tmp_path / "out", cwd=tmp_path)
    assert done.returncode != 0 and "NoSuchType" in done.stderr
