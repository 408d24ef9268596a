#!/bin/bash
# hyperpod-kit: installs the Studio package for the space's user. The package is the Studio
# stack's asset (hyperpod_kit/studio_package.py writes it, with this script as install.sh); the
# lifecycle configuration (assets/studio/client.sh) downloads and unzips it, checks every file
# against SHA256SUMS, then runs this script at each app start:
#   - the toolkit's wheel with pip: --user, no dependencies (the Studio image has them) and no
#     index, and only when its sha256 differs from the wheel installed last;
#   - environment/ (the environment file and the files it names) and install.json into the state
#     folder, so that install.json (the trainer image) sits beside environment.yaml;
#   - HYPERPOD_KIT_ENVIRONMENT_FILE exported in ~/.bashrc, once.
# Usage: bash install.sh STATE HOME  (~/.hyperpod-kit and the home folder; a sandbox in tests).
# Idempotent: a second run with the same package changes nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${1:?usage: install.sh STATE HOME}"
home="${2:?usage: install.sh STATE HOME}"

read -r sha wheel environment < <(python3 -c '
import json, sys
record = json.load(open(sys.argv[1]))
print(record["sha256"], record["wheel"], record["environment"])
' "${here}/install.json")

# pip's --user folder: the home's (the same as pip's own default in a space; the sandbox's home
# in tests, whose HOME is not theirs).
export PYTHONUSERBASE="${home}/.local"
mkdir -p "${state}"
if [[ "$(cat "${state}/toolkit.sha256" 2>/dev/null || true)" != "${sha}" ]]; then
  python3 -m pip install --quiet --no-deps --user --no-index --force-reinstall "${here}/${wheel}"
  printf '%s\n' "${sha}" >"${state}/toolkit.sha256"
  echo "hyperpod-kit: installed ${wheel}"
fi

cp -R "${here}/$(dirname "${environment}")/." "${state}/"
cp "${here}/install.json" "${state}/install.json"

rc="${home}/.bashrc"
touch "${rc}"
grep -q '# hyperpod-kit ENV' "${rc}" || printf '%s\n' \
  "export HYPERPOD_KIT_ENVIRONMENT_FILE=\"\${HOME}/.hyperpod-kit/$(basename "${environment}")\"  # hyperpod-kit ENV" \
  >>"${rc}"
