#!/bin/bash
# EKS nodes with cluster.node_setup.container_storage (nvme or ebs): containerd's and kubelet's
# data on the instance's NVMe or the group's EBS volume instead of the root volume.
#  1. installs bin/hyperpod-kit-container-storage and hyperpod-kit-container-storage.service
#     (oneshot, before containerd and kubelet, enabled) and a drop-in for each of containerd.service
#     and kubelet.service (50-hyperpod-kit-storage.conf: Wants= and After= that unit), so every
#     boot binds the data folders before either starts;
#  2. when neither runs yet (HyperPod runs the lifecycle scripts before the node joins the
#     cluster, as AWS's own EKS sample scripts assume), moves the data now; when one already runs,
#     the move waits for the next boot (a warning): data is never moved under a running daemon.
# containerd's own configuration (which the AMI writes) is left alone.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

UNIT=hyperpod-kit-container-storage
PROGRAM="$HPK_HOME/bin/$UNIT"
put_file "$HPK_BUNDLE/bin/$UNIT" "$ROOT$PROGRAM" 755
put_file "$HPK_BUNDLE/systemd/$UNIT.service" "$ROOT/etc/systemd/system/$UNIT.service" 644
CHANGED=$PUT_FILE_CHANGED
for daemon in containerd kubelet; do
  printf '%s\n' "# hyperpod-kit (cluster.node_setup.container_storage): data folders bound first." \
    "[Unit]" "Wants=$UNIT.service" "After=$UNIT.service" |
    put_text "$ROOT/etc/systemd/system/$daemon.service.d/50-hyperpod-kit-storage.conf" 644
  CHANGED=$((CHANGED | PUT_FILE_CHANGED))
done
if ((CHANGED)); then
  systemctl daemon-reload
fi
systemctl enable "$UNIT.service"

RUNNING=()
for daemon in containerd kubelet; do
  if systemctl is-active --quiet "$daemon"; then RUNNING+=("$daemon"); fi
done
if ((${#RUNNING[@]})); then
  warn "container storage: ${RUNNING[*]} already running: their data moves at the next boot ($UNIT.service runs before them)"
elif ! bash "$ROOT$PROGRAM"; then
  warn "container storage: the move failed; containerd and kubelet keep their data on the root volume"
fi
