#!/bin/sh
# The CDK app of this project, as cdk.json runs it (`sh bin/cdk-app`): app.py, with a Python
# that has hyperpod-kit. Written by `hyperpod-kit init --project`; it names no path of the
# machine that wrote it. The first Python that imports hyperpod_kit, in this order:
#   1. .venv/bin/python: this project's virtual environment (or a link to any that has it)
#   2. the Python of the `hyperpod-kit` command, on PATH or in ~/.local/bin (pipx, pip --user):
#      the one beside it (a virtual environment's bin/), else the one its #! line names
#   3. python3 on PATH
set -eu
cd "$(dirname "$0")/.."

has_toolkit() {
  [ -n "$1" ] && [ -x "$1" ] && "$1" -c 'import hyperpod_kit' >/dev/null 2>&1
}

if has_toolkit .venv/bin/python; then
  exec .venv/bin/python app.py
fi
for command in "$(command -v hyperpod-kit 2>/dev/null || true)" "${HOME:-/nonexistent}/.local/bin/hyperpod-kit"; do
  if [ -z "$command" ] || [ ! -f "$command" ]; then continue; fi
  real=$(realpath "$command" 2>/dev/null || printf '%s\n' "$command")
  for python in "$(dirname "$real")/python" "$(sed -n '1s/^#!\([^ ]*\)$/\1/p' "$real" 2>/dev/null)"; do
    if has_toolkit "$python"; then
      exec "$python" app.py
    fi
  done
done
python=$(command -v python3 2>/dev/null || true)
if has_toolkit "$python"; then
  exec "$python" app.py
fi
echo "bin/cdk-app: no Python with hyperpod-kit (.venv/bin/python, the hyperpod-kit command on PATH or in ~/.local/bin, python3). Hint: pipx install hyperpod-kit, or python3 -m venv .venv && .venv/bin/pip install hyperpod-kit (README.md)." >&2
exit 2
