"""Two syntheses of one commit are byte-identical, whatever caches the tools left lying around.

An asset's hash covers the files of its folder; a `.ruff_cache` that `make test` writes next to
`assets/trainer/pyproject.toml` used to change the trainer image's hash, so `plan` reported an
image update that nobody made. Caches are planted in a copy of the trainer folder (the real
source tree is never written to), and the whole default environment is synthesized twice, by
two processes with different hash seeds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest

from hyperpod_kit.constructs.assets import ASSET_EXCLUDES
from hyperpod_kit.constructs.trainer_image import TRAINER_DIR, TrainerImage
from tests.conftest import EXAMPLE_HASH_SEED, NO_CREDENTIALS, REPO, ExampleSynthFn

pytestmark = pytest.mark.synth

# What linters, tests, builds, editors and operating systems leave in a source folder.
CACHES = [
    ".ruff_cache/0.17.6/12345678901234567890",
    ".ruff_cache/CACHEDIR.TAG",
    ".mypy_cache/3.11/hyperpod_trainer/train.data.json",
    ".pytest_cache/v/cache/lastfailed",
    ".hypothesis/examples/abc/def",
    "hyperpod_trainer/__pycache__/train.cpython-311.pyc",
    "hyperpod_trainer/train.pyc",
    "hyperpod_trainer.egg-info/PKG-INFO",
    "build/lib/hyperpod_trainer/__init__.py",
    "dist/hyperpod_trainer-0.1.0-py3-none-any.whl",
    ".venv/bin/python",
    ".tox/py311/log.txt",
    ".coverage",
    "htmlcov/index.html",
    ".ipynb_checkpoints/notebook-checkpoint.ipynb",
    "hyperpod_trainer/.train.py.swp",
    "hyperpod_trainer/train.py~",
    ".DS_Store",
    ".idea/workspace.xml",
    ".vscode/settings.json",
]


def synthesize_trainer(directory: Path, outdir: Path) -> dict[str, bytes]:
    """The trainer image alone in a stack: its template and asset manifest, by file name."""
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(
        app, "Trainer", env=cdk.Environment(account="111122223333", region="us-west-2")
    )
    TrainerImage(stack, "Trainer", environment="dev", directory=directory)
    app.synth()
    return {p.name: p.read_bytes() for p in sorted(outdir.glob("Trainer.*.json"))}


def test_caches_in_the_asset_folder_change_nothing(tmp_path: Path) -> None:
    source = tmp_path / "trainer"
    shutil.copytree(TRAINER_DIR, source, ignore=shutil.ignore_patterns(*_top_level_names()))
    before = synthesize_trainer(source, tmp_path / "before")
    assert {"Trainer.template.json", "Trainer.assets.json"} <= set(before)

    for cache in CACHES:
        path = source / cache
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(64))
    after = synthesize_trainer(source, tmp_path / "after")
    assert after == before

    staged = [p for p in (tmp_path / "after").iterdir() if p.name.startswith("asset.")]
    (image,) = staged
    copied = {str(p.relative_to(image)) for p in image.rglob("*")}
    assert "Dockerfile" in copied
    assert [cache for cache in CACHES if cache in copied] == [], "nor do they reach the image"

    (source / "Dockerfile").write_text((source / "Dockerfile").read_text() + "# a real change\n")
    changed = synthesize_trainer(source, tmp_path / "changed")
    assert changed["Trainer.assets.json"] != before["Trainer.assets.json"], (
        "control: a change to a file the image is built from does change the hash"
    )


def _top_level_names() -> list[str]:
    """Excluded names (caches already in the real folder) are not copied: a clean checkout."""
    return [pattern.removeprefix("**/") for pattern in ASSET_EXCLUDES]


def test_every_planted_cache_is_excluded() -> None:
    """Each cache above is matched by one of ASSET_EXCLUDES (so the list is what is tested)."""
    import fnmatch

    for cache in CACHES:
        parts = Path(cache).parts
        assert any(
            fnmatch.fnmatch(part, pattern.removeprefix("**/"))
            for part in parts
            for pattern in ASSET_EXCLUDES
        ), cache


def _synth_in_a_new_process(out: Path, seed: str) -> None:
    env = NO_CREDENTIALS | {"PYTHONHASHSEED": seed}
    result = subprocess.run(
        [sys.executable, "-m", "hyperpod_kit.cli.main", "synth", "-q",
         str(REPO / "environments/default.yaml"), "-o", str(out)],
        cwd=out.parent, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.slow
def test_two_syntheses_of_the_default_are_byte_identical(
    tmp_path: Path, example_synth: ExampleSynthFn
) -> None:
    """Every file of the assembly: templates, manifests, asset manifests, the staged trainer
    folder, the tree, the nag reports, our marker. The first synthesis is the run's shared one
    of the default (tests/conftest.py's `example_synth`: its own process and hash seed)."""
    first_synth = example_synth(REPO / "environments/default.yaml")
    assert first_synth.returncode == 0, first_synth.stderr
    assert EXAMPLE_HASH_SEED != "2"
    _synth_in_a_new_process(tmp_path / "second", seed="2")
    first, second = _tree(first_synth.out), _tree(tmp_path / "second")
    assert {name for name in first if name.endswith(".template.json")} == {
        f"hyperpod-dev-{area}.template.json"
        for area in ("network", "storage", "trainer", "cluster", "monitoring")
    }
    assert sorted(first) == sorted(second)
    different = [name for name in first if first[name] != second[name]]
    assert different == []
