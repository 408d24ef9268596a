#!/bin/bash
# Slurm nodes: `hyperpod-kit-verify`, the acceptance suite a user runs from the login node (or the
# controller) after a deploy (docs/verify.md): the command in /opt/hyperpod-kit/bin with a link in
# /usr/local/bin, its settings and each compute group's all-reduce job in /opt/hyperpod-kit/verify.
# Every node gets them: the command also runs inside its own jobs, on the compute nodes.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

put_file "$HPK_BUNDLE/bin/hyperpod-kit-verify" "$ROOT$HPK_HOME/bin/hyperpod-kit-verify" 755
for file in "$HPK_BUNDLE"/verify/*; do
  put_file "$file" "$ROOT$HPK_HOME/verify/${file##*/}" 644
done
# A group gone from the environment takes its job with it (the folder is this step's alone).
for file in "$ROOT$HPK_HOME"/verify/*.sbatch; do
  [[ -e $file && ! -e $HPK_BUNDLE/verify/${file##*/} ]] || continue
  rm -f -- "$file"
  log "removed ${file#"$ROOT"} (its group is no longer in the environment)"
done
mkdir -p "$ROOT/usr/local/bin"
ln -sfn "$HPK_HOME/bin/hyperpod-kit-verify" "$ROOT/usr/local/bin/hyperpod-kit-verify"
log "verify: hyperpod-kit-verify installed ($(find "$HPK_BUNDLE/verify" -name '*.sbatch' | wc -l) all-reduce job(s))"
