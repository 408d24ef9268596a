"""The `constructs` package must be the installed one, never a folder of this repository.

A top-level `constructs/` folder would shadow the package that aws-cdk-lib imports
(aws/aws-cdk#19301); ours lives at `hyperpod_kit/constructs`.
"""

from pathlib import Path

import constructs

from tests.conftest import REPO


def test_constructs_resolves_to_installed_package() -> None:
    location = Path(constructs.__file__).resolve()
    assert "site-packages" in location.parts
    assert REPO not in location.parents or ".venv" in location.parts


def test_no_top_level_folder_shadows_a_dependency() -> None:
    for name in ("constructs", "aws_cdk", "lambda", "cdk_nag"):
        assert not (REPO / name).exists(), f"top-level {name}/ would shadow an import"
