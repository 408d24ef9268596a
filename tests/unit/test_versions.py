"""`hyperpod-kit --version`: the toolkit's version, then aws-cdk-lib, the pinned CDK CLI, cfn-lint
and botocore, one a line; read from metadata and package.json, never by starting jsii."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperpod_kit import __version__, versions
from hyperpod_kit.cli import main as cli
from tests.conftest import REPO


def _version_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def test_version_names_each_component_one_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert _version_lines(capsys) == [
        f"hyperpod-kit {__version__}",
        f"aws-cdk-lib {importlib.metadata.version('aws-cdk-lib')}",
        f"aws-cdk {pinned} (the CDK CLI pinned in package.json)",
        f"cfn-lint {importlib.metadata.version('cfn-lint')}",
        f"botocore {importlib.metadata.version('botocore')}",
    ]


def test_a_missing_distribution_is_not_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name in ("botocore", "aws-cdk-lib"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    lines = _version_lines(capsys)
    assert lines[1] == "aws-cdk-lib not installed"
    assert lines[4] == "botocore not installed"
    assert lines[3].startswith("cfn-lint ") and "not installed" not in lines[3]


@pytest.mark.parametrize(
    ("package_json", "pin"),
    [
        ({"devDependencies": {"aws-cdk": "2.1148.1"}}, "2.1148.1"),
        ({"dependencies": {"aws-cdk": "2.1000.0"}}, "2.1000.0"),
        ({"devDependencies": {"aws-cdk-lib": "2.275.0"}}, None),
        ({"devDependencies": {"aws-cdk": 2}}, None),
        (["aws-cdk"], None),
        ("{not json", None),
        (None, None),  # no package.json (an installed wheel has none)
    ],
)
def test_the_cdk_cli_pin_comes_from_package_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package_json: object, pin: str | None
) -> None:
    monkeypatch.setattr("hyperpod_kit.paths.PACKAGE_JSON", tmp_path / "package.json")
    if isinstance(package_json, str):
        (tmp_path / "package.json").write_text(package_json)
    elif package_json is not None:
        (tmp_path / "package.json").write_text(json.dumps(package_json))
    assert versions.cdk_cli_pin() == pin


def test_no_pin_is_said(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versions, "cdk_cli_pin", lambda: None)
    assert _version_lines(capsys)[2] == "aws-cdk not pinned (no package.json)"


def test_the_pin_is_the_repositorys() -> None:
    assert (
        versions.cdk_cli_pin()
        == json.loads((REPO / "package.json").read_text())["devDependencies"]["aws-cdk"]
    )


def test_version_starts_neither_jsii_nor_the_cdk() -> None:
    """`--version` answers from metadata: aws_cdk (and with it jsii's Node process) is never
    imported."""
    code = (
        "import sys\n"
        "from hyperpod_kit.cli.main import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'jsii', 'cfnlint')]\n"
        "print('LOADED', loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


@pytest.mark.parametrize(
    ("spec", "ok"),
    [
        (f">={__version__}", True),
        (f"=={__version__}", True),
        (f"<{__version__}", False),
        (">=99", False),
        ("", None),
        ("banana", None),
        (">=0.1 <0.2", None),  # a missing comma
    ],
)
def test_ranges_are_pep_440(spec: str, ok: bool | None) -> None:
    parsed = versions.parse_specifier(spec)
    if ok is None:
        assert parsed is None
    else:
        assert parsed is not None and versions.toolkit_satisfies(parsed) is ok


def test_versions_compare_as_versions_not_text() -> None:
    assert versions.parse_version("0.10.0") > versions.parse_version("0.9.0")  # type: ignore[operator]
    assert versions.parse_version("hyperpod-kit") is None
