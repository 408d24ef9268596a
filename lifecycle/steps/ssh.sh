#!/bin/bash
# Slurm nodes with cluster.node_setup.ssh_keys: `ssh` from node to node as the environment's users
# (multi-node launchers such as mpirun start their ranks this way).
#  - The key pairs live in the users' homes on FSx, which every node shares: the controller's user
#    sync makes each one once (bin/hyperpod-kit-ssh-key, run as the user; an existing key is never
#    replaced) and authorizes it in ~/.ssh/authorized_keys. Nothing to do for them here.
#  - Here, on every node, the client side: /etc/ssh/ssh_config.d/hyperpod-kit.conf lets ssh reach
#    the cluster's nodes (HyperPod's node names and the VPC's addresses, HPK_SSH_HOSTS) without
#    asking about their host keys and without remembering them. A replaced node comes back under
#    the same name with a new host key, and the users' known_hosts on FSx would refuse it.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

CONF=/etc/ssh/ssh_config.d/hyperpod-kit.conf
{
  echo "# Written by hyperpod-kit (cluster.node_setup.ssh_keys), rewritten at provisioning: the"
  echo "# cluster's nodes, reached with the users' own keys (~/.ssh/id_ed25519 on FSx). Host keys"
  echo "# are neither asked about nor kept: replaced nodes come back with new ones."
  printf 'Host %s\n' "$HPK_SSH_HOSTS"
  printf '    %s\n' "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "LogLevel ERROR"
} | put_text "$ROOT$CONF" 644

# Ubuntu's /etc/ssh/ssh_config includes ssh_config.d first; one that does not never reads ours.
MAIN="$ROOT/etc/ssh/ssh_config"
if [[ -f $MAIN ]] && ! grep -Eqs '^[[:space:]]*Include[[:space:]]+/etc/ssh/ssh_config\.d/\*\.conf' "$MAIN"; then
  warn "ssh: /etc/ssh/ssh_config does not include /etc/ssh/ssh_config.d/*.conf, so $CONF is not read: ssh between nodes asks about host keys"
fi
log "ssh: nodes matching '$HPK_SSH_HOSTS' are reached without host-key prompts; users' keys are made by the controller's user sync"
