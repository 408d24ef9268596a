"""`--format json` on validate, plan, estimate and status, as a pipeline runs them (a subprocess,
no terminal, no AWS credentials): stdout is one JSON document and nothing else whenever the
command answers; when bad input keeps plan, estimate or status from answering, exit 2, stdout
empty, and the reason on stderr with a hint, no traceback (README.md, "Output")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

DEFAULT = str(REPO / "environments" / "default.yaml")
BAD = str(REPO / "tests" / "data" / "bad" / "lustre-capacity.yaml")


def _empty_baseline(cwd: Path) -> None:
    (cwd / "baseline.out").mkdir()
    (cwd / "baseline.out" / "manifest.json").write_text('{"version": "1", "artifacts": {}}')


CASES = [
    # (argv, exit code, the document's type, or None: stdout empty)
    (["validate", DEFAULT], 0, list),
    (["validate", BAD], 2, list),  # validate's answer is the findings, the error among them
    (["validate", "missing.yaml"], 2, list),
    (["estimate", DEFAULT], 0, dict),
    (["estimate", DEFAULT, "--step-time", "2.5"], 0, dict),
    (["estimate", BAD], 2, None),
    (["estimate", DEFAULT, "--step-time", "fast"], 2, None),
    (["plan", DEFAULT, "--baseline", "none.out"], 2, None),
    (["plan", BAD, "--baseline", "baseline.out"], 2, None),
    (["plan", DEFAULT, "--deployed"], 2, None),  # no credentials, before the synth
    (["status", DEFAULT], 2, None),  # no credentials
    (["status", BAD], 2, None),
    (["status", DEFAULT, "--interval", "0", "--watch"], 2, None),
]


@pytest.mark.parametrize(
    ("argv", "code", "document"),
    [pytest.param(*case, id="-".join(Path(w).name for w in case[0])) for case in CASES],
)
def test_json_on_stdout_or_nothing(
    argv: list[str], code: int, document: type | None, tmp_path: Path
) -> None:
    _empty_baseline(tmp_path)
    result = run_cli(*argv, "--format", "json", cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if document is None:
        assert result.stdout == ""
        assert any("Hint:" in line for line in result.stderr.splitlines()), result.stderr
    else:
        assert isinstance(json.loads(result.stdout), document)
    assert "hyperpod-kit:" not in result.stdout, "no progress line on stdout"


@pytest.mark.synth
@pytest.mark.slow
def test_plan_json_is_one_document_with_progress_on_stderr(tmp_path: Path) -> None:
    """plan's answer (a synth against an empty baseline: everything added, nothing dangerous)
    is one JSON document on stdout; its stage lines are on stderr."""
    _empty_baseline(tmp_path)
    result = run_cli("plan", DEFAULT, "--baseline", "baseline.out", "--format", "json",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["exit_code"] == 0
    assert "hyperpod-kit: plan: compare with the baseline ... " in result.stderr
