#!/bin/bash
# Slurm nodes: the environment's users, now and later.
#  1. installs the user sync (bin/hyperpod-kit-user-sync), its systemd timer and, on Slurm, the
#     teams' accounts script the sync runs on the controller (bin/hyperpod-kit-slurm-accounts);
#  2. waits a little for FSx at /fsx (HyperPod mounts it from InstanceStorageConfigs);
#  3. runs the sync once: the users file the pointer parameter names today (users, homes,
#     sudoers, status); the file travels beside the scripts, so people change without the
#     cluster changing;
#  4. enables the timer, which applies the newest users file every few minutes from then on.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

UNITS_CHANGED=0
put_file "$HPK_BUNDLE/bin/hyperpod-kit-user-sync" "$ROOT$HPK_HOME/bin/hyperpod-kit-user-sync" 755
# The users' SSH keys (cluster.node_setup.ssh_keys): the sync runs it as each user.
if [[ -f $HPK_BUNDLE/bin/hyperpod-kit-ssh-key ]]; then
  put_file "$HPK_BUNDLE/bin/hyperpod-kit-ssh-key" "$ROOT$HPK_HOME/bin/hyperpod-kit-ssh-key" 755
fi
# Slurm: the teams' accounts, which the sync applies on the controller (docs/accounting.md).
if [[ -f $HPK_BUNDLE/bin/hyperpod-kit-slurm-accounts ]]; then
  put_file "$HPK_BUNDLE/bin/hyperpod-kit-slurm-accounts" \
    "$ROOT$HPK_HOME/bin/hyperpod-kit-slurm-accounts" 755
fi
for unit in hyperpod-kit-user-sync.service hyperpod-kit-user-sync.timer; do
  put_file "$HPK_BUNDLE/systemd/$unit" "$ROOT/etc/systemd/system/$unit" 644
  UNITS_CHANGED=$((UNITS_CHANGED | PUT_FILE_CHANGED))
done

if ! retry 6 is_mounted "$HPK_FSX"; then
  warn "$HPK_FSX is not mounted: users are created now, their homes when the sync finds $HPK_FSX"
fi

# A users file that cannot be fetched (exit 75) does not stop the node: the timer applies it a
# few minutes later. Any other failure (a uid taken by another account...) fails provisioning.
rc=0
bash "$ROOT$HPK_HOME/bin/hyperpod-kit-user-sync" || rc=$?
if ((rc == 75)); then
  warn "the users file could not be fetched now; the user-sync timer applies it later"
elif ((rc != 0)); then
  exit "$rc"
fi

if ((UNITS_CHANGED)); then
  systemctl daemon-reload
fi
systemctl enable --now hyperpod-kit-user-sync.timer
