#!/bin/bash
# Slurm nodes with cluster.node_setup.pam_slurm_adopt (compute nodes only: login nodes and the
# controller run no jobs to adopt ssh sessions into, and their users need them without one).
#  1. installs bin/hyperpod-kit-pam-adopt (the user sync runs it too, when admins change);
#  2. the module: the AMI's pam_slurm_adopt.so; otherwise the *pam*slurm*adopt*.deb packages of
#     cluster.node_setup.packages (built for the cluster's Slurm: Debian's is of another Slurm
#     release, and nothing is built on a node); otherwise a warning, and nothing changes;
#  3. runs it with the admins of the users file the sync applied (users with admin: true).
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

if [[ ${HPK_ROLE:?} != compute ]]; then
  log "pam_slurm_adopt: compute nodes only; nothing to do on this $HPK_ROLE node"
  exit 0
fi
ADOPT="$HPK_HOME/bin/hyperpod-kit-pam-adopt"
put_file "$HPK_BUNDLE/bin/hyperpod-kit-pam-adopt" "$ROOT$ADOPT" 755

if ! bash "$ROOT$ADOPT" --find-module >/dev/null; then
  mapfile -t debs < <(bundled_debs '*pam*slurm*adopt*')
  if ((${#debs[@]})); then
    install_packages "${debs[@]}" || die "installing ${debs[*]##*/} failed"
    bash "$ROOT$ADOPT" --find-module >/dev/null ||
      die "pam_slurm_adopt.so is still missing after installing ${debs[*]##*/}"
  fi
fi

ADMINS=()
USERS_FILE="$ROOT$HPK_STATE/users.json"
if [[ -f $USERS_FILE ]]; then
  while read -r kind name _ _ admin; do
    if [[ $kind == U ]] && ((admin)); then ADMINS+=("$name"); fi
  done < <(python3 "$HPK_BUNDLE/lib/node.py" users "$USERS_FILE")
fi
bash "$ROOT$ADOPT" "${ADMINS[@]}"
