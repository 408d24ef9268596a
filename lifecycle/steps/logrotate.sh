#!/bin/bash
# Every node with cluster.node_setup.logrotate: logs that stop growing before the root volume
# fills.
#  - /etc/logrotate.d/hyperpod-kit: hyperpod-kit's own logs (/var/log/hyperpod-kit/*.log);
#  - Slurm nodes, /etc/logrotate.d/hyperpod-kit-slurm: the Slurm daemons' logs
#    (/var/log/slurm/*.log), unless a file of the AMI (or of anyone) already names /var/log/slurm:
#    logrotate refuses a log that two files rotate;
#  - logrotate itself when the AMI lacks it: logrotate_*.deb of cluster.node_setup.packages, else
#    (with internet) from the distribution's archive, else a warning (a failed install too: log
#    rotation is not worth failing a node for);
#  - `logrotate -d` on the installed files: a file logrotate refuses is a warning.
# The distribution's logrotate timer (or cron job) does the rotating, daily.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

DIR=/etc/logrotate.d
INSTALLED=("$DIR/hyperpod-kit")
put_file "$HPK_BUNDLE/logrotate/hyperpod-kit" "$ROOT$DIR/hyperpod-kit" 644

if [[ -f $HPK_BUNDLE/logrotate/hyperpod-kit-slurm ]]; then
  OURS="$ROOT$DIR/hyperpod-kit-slurm"
  others=()
  for file in "$ROOT/etc/logrotate.conf" "$ROOT$DIR"/*; do
    [[ -f $file && $file != "$OURS" ]] || continue
    if grep -qs '/var/log/slurm' "$file"; then others+=("${file#"$ROOT"}"); fi
  done
  if ((${#others[@]})); then
    log "logrotate: ${others[*]} rotates Slurm's logs already; left to it"
  else
    put_file "$HPK_BUNDLE/logrotate/hyperpod-kit-slurm" "$OURS" 644
    INSTALLED+=("$DIR/hyperpod-kit-slurm")
  fi
fi

# Installed: the package on dpkg-based nodes (Ubuntu's is in the base system), else the command.
logrotate_installed() {
  if command -v dpkg-query >/dev/null; then
    dpkg-query -W -f='${db:Status-Abbrev}\n' logrotate 2>/dev/null | grep -q '^.i'
  else
    command -v logrotate >/dev/null
  fi
}
if ! logrotate_installed; then
  mapfile -t debs < <(bundled_debs 'logrotate_*')
  if ((${#debs[@]})); then
    installed=0
    install_packages "${debs[@]}" && installed=1
  elif ((HPK_INTERNET)) && command -v apt-get >/dev/null; then
    installed=0
    install_packages logrotate && installed=1
  else
    warn "logrotate is not on this node (nor in cluster.node_setup.packages): logs are not rotated"
    exit 0
  fi
  if ((!installed)); then
    warn "logrotate could not be installed: logs are not rotated"
    exit 0
  fi
fi
# logrotate -d reads the file and changes nothing; it reports some refusals (a file's owner or
# mode) only on its output, with exit status 0.
for file in "${INSTALLED[@]}"; do
  if ! out=$(logrotate -d "$ROOT$file" 2>&1) || grep -q '^error:' <<<"$out"; then
    warn "logrotate -d does not accept $file: those logs may not be rotated: $(grep -m1 '^error:' <<<"$out" || true)"
  fi
done
log "logrotate: ${INSTALLED[*]}"
