"""Each bad file's good neighbour: the one-key fix its `# neighbour:` line names makes it valid.

A bad file proves that `validate` rejects a mistake; its neighbour proves the rule is not simply
rejecting everything near it, and that following the finding's hint leads to a file that passes.

    # neighbour: <config path> = <YAML value>      (null removes the key)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config import ConfigError, Level
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.loader import _path_to_loc

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
_NEIGHBOUR = re.compile(r"^# neighbour: (?P<path>\S+) = (?P<value>.+)$", re.MULTILINE)
FILES = [f for f in sorted(BAD.glob("*.yaml")) if _NEIGHBOUR.search(f.read_text())]


def _apply(data: dict[str, Any], path: str, value: Any) -> None:
    loc = _path_to_loc(path)
    node: Any = data
    for part in loc[:-1]:
        node = node[part]
    last = loc[-1]
    if value is None and isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and isinstance(last, int) and last == len(node):
        node.append(value)
    else:
        node[last] = value


def test_the_corpus_has_neighbours() -> None:
    assert len(FILES) >= 20


@pytest.mark.parametrize("file", FILES, ids=lambda p: p.name)
def test_the_neighbour_of_a_bad_file_is_valid(file: Path, tmp_path: Path) -> None:
    text = file.read_text()
    with pytest.raises(ConfigError):
        load_environment(file)
    data = yaml.safe_load(text)
    for m in _NEIGHBOUR.finditer(text):
        _apply(data, m["path"], yaml.safe_load(m["value"]))
    fixed = tmp_path / file.name
    fixed.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_environment(fixed)  # raises ConfigError if the neighbour is still bad
    assert all(f.level is not Level.ERROR for f in loaded.findings)
