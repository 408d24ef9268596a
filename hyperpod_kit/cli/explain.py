"""`validate FILE --explain KEY`: a key's final value and the file and line that set it.

For an environment that extends a base (docs/environments.md), the answer names every file of the
chain that writes the key, the last one first. Items of a named list (instance groups, users) are
addressed by name, any list item by `[index]`.
"""

from __future__ import annotations

import json
import sys

from hyperpod_kit.config.environment import LoadedEnvironment
from hyperpod_kit.config.extends import UnknownKeyError, explain, read_layers
from hyperpod_kit.config.findings import Finding, Level

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def explain_key(loaded: LoadedEnvironment, key: str, *, as_json: bool) -> int:
    """Print the explanation on stdout; an unknown key is one line on stderr and exit 2."""
    layered = read_layers(loaded.file)  # read again: the file has just loaded, so it reads
    final = loaded.config.model_dump(mode="json")
    try:
        found = explain(key, final, layered.doc, layered.layers)
    except UnknownKeyError as e:
        finding = Finding(Level.ERROR, key, e.message, e.hint, check="explain")
        print(finding.render(loaded.file), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(found.as_json(), indent=2) if as_json else found.render())
    return EXIT_OK
