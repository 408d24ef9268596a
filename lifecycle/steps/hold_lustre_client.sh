#!/bin/bash
# Every node with cluster.node_setup.hold_lustre_client: the Lustre client stays the one that
# matches the running kernel. apt-mark hold on the installed ones of
#   lustre-client-modules-aws           (the meta package: upgrading it pulls in a newer kernel's
#                                        modules, and that newer kernel)
#   lustre-client-modules-<uname -r>    (the running kernel's module)
#   lustre-client-utils                 (mount.lustre, lctl)
# so an `apt-get upgrade` or unattended upgrade cannot leave the node booting a kernel without
# its Lustre module (FSx then fails to mount). Held only once; nodes without apt (Amazon Linux)
# are left as they are. A running kernel without its module package is reported, and so is a
# hold that fails (the dpkg lock busy after all retries): neither fails the node.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

if ! command -v apt-mark >/dev/null || ! command -v dpkg-query >/dev/null; then
  log "lustre hold: no apt on this node; its Lustre client is left as the AMI has it"
  exit 0
fi
KERNEL=$(cat "$ROOT/proc/sys/kernel/osrelease" 2>/dev/null || uname -r)
WANTED=(lustre-client-modules-aws "lustre-client-modules-$KERNEL" lustre-client-utils)
# "ii"/"hi": installed (held or not); unknown names are not an error.
mapfile -t INSTALLED < <(
  dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${WANTED[@]}" 2>/dev/null |
    awk '$1 ~ /^.i/ { print $2 }' || true
)
if ((${#INSTALLED[@]} == 0)); then
  log "lustre hold: no Lustre client package is installed (dpkg): nothing to hold"
  exit 0
fi
if ! printf '%s\n' "${INSTALLED[@]}" | grep -qxF "lustre-client-modules-$KERNEL"; then
  warn "lustre hold: lustre-client-modules-$KERNEL is not installed: the running kernel $KERNEL has no Lustre module package (installed: ${INSTALLED[*]})"
fi
mapfile -t HELD < <(apt-mark showhold 2>/dev/null || true)
TODO=()
for package in "${INSTALLED[@]}"; do
  if ! printf '%s\n' "${HELD[@]}" | grep -qxF "$package"; then TODO+=("$package"); fi
done
if ((${#TODO[@]})); then
  # Waits for the dpkg lock like apt_get; a hold that still fails is a warning, not a failed node.
  if retry 5 apt-mark -o DPkg::Lock::Timeout=300 hold "${TODO[@]}" >/dev/null; then
    log "lustre hold: held ${TODO[*]} (kernel $KERNEL)"
  else
    warn "lustre hold: could not hold ${TODO[*]}: an upgrade may replace the Lustre client"
  fi
else
  log "lustre hold: ${INSTALLED[*]} already held"
fi
