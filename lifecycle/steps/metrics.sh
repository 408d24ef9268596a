#!/bin/bash
# Slurm nodes with monitoring.prometheus (docs/observability.md): Ubuntu's Prometheus scrapes this
# node's exporters and remote-writes their samples to the workspace, signed with SigV4 as the
# node's role.
#  1. the workspace's remote-write URL: the environment file's (an existing workspace), else the
#     observability stack's handles in SSM (which exist before the cluster does);
#  2. prometheus (and prometheus-node-exporter): the upload's .deb files
#     (monitoring.prometheus.packages), else, with internet, Ubuntu's archive; without either, a
#     warning and no metrics from this node (metrics are not worth failing a node for);
#  3. the mode from prometheus's version: agent mode from 2.32 (--agent from 3.0), a server that
#     keeps one day of samples from 2.26, nothing before (no SigV4 in remote write);
#  4. the configuration: metrics/prometheus.yml with the scrape jobs of the exporters that run
#     here (node everywhere, DCGM on NVIDIA GPU nodes with Docker, EFA where EFA devices are, Slurm
#     on the controller), checked with promtool;
#  5. systemd: drop-ins for the packages' units (files of ours, beside them) and units for our
#     exporters; reloaded, restarted and enabled only when something changed.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"
HPK_LOG_TAG=metrics

CONF="$HPK_CONF/prometheus/prometheus.yml"
UNITS=/etc/systemd/system
DROPIN=hyperpod-kit.conf

# 1. Where to write.
URL=$HPK_METRICS_REMOTE_WRITE
if [[ -z $URL ]]; then
  handles=$(aws_cli ssm get-parameter --name "$HPK_METRICS_PARAMETER" \
    --query Parameter.Value --output text) || die "cannot read SSM $HPK_METRICS_PARAMETER"
  URL=$(printf '%s' "$handles" | python3 "$HPK_BUNDLE/lib/node.py" field remote_write_url) ||
    die "SSM $HPK_METRICS_PARAMETER has no usable remote_write_url"
fi
WRITE_URL='^https://aps-workspaces\.[a-z0-9-]+\.amazonaws\.com/workspaces/ws-[A-Za-z0-9-]+/api/v1/remote_write$'
[[ $URL =~ $WRITE_URL ]] || die "$URL is not a Prometheus workspace's remote-write URL"

# 2. The packages.
installed() { dpkg-query -W -f='${db:Status-Abbrev}\n' "$1" 2>/dev/null | grep -q '^.i'; }
metrics_debs() {
  local dir="$HPK_BUNDLE/${HPK_METRICS_PACKAGES:-}"
  if [[ -n ${HPK_METRICS_PACKAGES:-} && -d $dir ]]; then
    find "$dir" -maxdepth 1 -type f -name '*.deb' | sort
  fi
}
WANTED=(prometheus)
if ((HPK_METRICS_NODE)); then WANTED+=(prometheus-node-exporter); fi
MISSING=()
for package in "${WANTED[@]}"; do installed "$package" || MISSING+=("$package"); done
if ((${#MISSING[@]})); then
  mapfile -t debs < <(metrics_debs)
  if ((${#debs[@]})); then
    install_packages "${debs[@]}" || {
      warn "installing ${debs[*]##*/} failed: this node sends no metrics"
      exit 0
    }
  elif ((HPK_INTERNET)); then
    install_packages "${MISSING[@]}" || {
      warn "installing ${MISSING[*]} failed: this node sends no metrics"
      exit 0
    }
  else
    warn "${MISSING[*]} not installed and not in monitoring.prometheus.packages: this node sends no metrics"
    exit 0
  fi
fi

# 3. The agent's mode, from its version.
VERSION=$(prometheus --version 2>&1 | sed -n 's/^prometheus, version \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' | head -n 1)
read -r MAJOR MINOR <<<"${VERSION:-0 0}"
if ((MAJOR >= 3)); then
  MODE=agent3
elif ((MAJOR == 2 && MINOR >= 32)); then
  MODE=agent
elif ((MAJOR == 2 && MINOR >= 26)); then
  MODE=server
else
  warn "prometheus ${MAJOR}.${MINOR} cannot sign remote writes with SigV4 (2.26 or later can): this node sends no metrics; put a newer prometheus_*.deb in monitoring.prometheus.packages"
  exit 0
fi

# 4. The configuration, for the exporters that run here.
JOBS=()
if ((HPK_METRICS_NODE)); then JOBS+=(node); fi
if ((HPK_METRICS_DCGM)); then
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    log "no NVIDIA GPU here: no DCGM exporter"
  elif ! command -v docker >/dev/null; then
    warn "no Docker here: no DCGM exporter (its image runs in Docker)"
  else
    JOBS+=(dcgm)
  fi
fi
if ((HPK_METRICS_EFA)); then
  if compgen -G "$ROOT/sys/class/infiniband/*" >/dev/null; then JOBS+=(efa); else log "no EFA device here: no EFA exporter"; fi
fi
if ((HPK_METRICS_SLURM)) && [[ ${HPK_ROLE:?} == controller ]]; then JOBS+=(slurm); fi

INSTANCE_ID=$(tr -d '[:space:]' <"$ROOT/sys/devices/virtual/dmi/id/board_asset_tag" 2>/dev/null || true)
[[ $INSTANCE_ID =~ ^i-[0-9a-f]{8,17}$ ]] || INSTANCE_ID=unknown
NODE_NAME=$(hostname)
[[ $NODE_NAME =~ ^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$ ]] || NODE_NAME=unknown
[[ ${HPK_GROUP:?} =~ ^[A-Za-z0-9-]{1,63}$ && $HPK_ROLE =~ ^[a-z]+$ ]] || die "unexpected group $HPK_GROUP or role $HPK_ROLE"

TEXT=$(<"$HPK_BUNDLE/metrics/prometheus.yml")
for job in "${JOBS[@]}"; do TEXT+=$'\n'$(<"$HPK_BUNDLE/metrics/scrape-$job.yml"); done
TEXT=${TEXT//@HPK_REMOTE_WRITE_URL@/$URL}
TEXT=${TEXT//@HPK_GROUP@/$HPK_GROUP}
TEXT=${TEXT//@HPK_ROLE@/$HPK_ROLE}
TEXT=${TEXT//@HPK_INSTANCE_ID@/$INSTANCE_ID}
TEXT=${TEXT//@HPK_NODE_NAME@/$NODE_NAME}
[[ $TEXT != *@HPK_* ]] || die "metrics/prometheus.yml has a word this step does not fill"
printf '%s\n' "$TEXT" | put_text "$ROOT$CONF" 644
AGENT_CHANGED=$PUT_FILE_CHANGED
if command -v promtool >/dev/null; then
  promtool check config "$ROOT$CONF" >/dev/null || die "promtool refuses $CONF"
fi

# 5. systemd.
RELOAD=0
put_unit() { # put_unit SRC DEST: a unit file or drop-in of ours
  put_file "$1" "$ROOT$2" 644
  RELOAD=$((RELOAD | PUT_FILE_CHANGED))
}
put_unit "$HPK_BUNDLE/metrics/prometheus-$MODE.conf" "$UNITS/prometheus.service.d/$DROPIN"
AGENT_CHANGED=$((AGENT_CHANGED | PUT_FILE_CHANGED))
declare -A CHANGED=()
if ((HPK_METRICS_NODE)); then
  put_unit "$HPK_BUNDLE/metrics/node-exporter.conf" "$UNITS/prometheus-node-exporter.service.d/$DROPIN"
  CHANGED[prometheus-node-exporter]=$PUT_FILE_CHANGED
fi
for job in dcgm efa slurm; do
  unit=hyperpod-kit-metrics-$job.service
  if [[ " ${JOBS[*]} " == *" $job "* ]]; then
    changed=0
    if [[ $job != dcgm ]]; then
      put_file "$HPK_BUNDLE/$HPK_METRICS_PACKAGES/$job-exporter" "$ROOT$HPK_HOME/bin/$job-exporter" 755
      changed=$PUT_FILE_CHANGED
    fi
    put_unit "$HPK_BUNDLE/systemd/$unit" "$UNITS/$unit"
    CHANGED[${unit%.service}]=$((changed | PUT_FILE_CHANGED))
  elif [[ -e $ROOT$UNITS/$unit ]]; then # an exporter of ours that no longer runs here
    systemctl disable --now "$unit" || true
    rm -f "$ROOT$UNITS/$unit"
    RELOAD=1
    log "removed $unit (the exporter is off, or this node has nothing for it)"
  fi
done
CHANGED[prometheus]=$AGENT_CHANGED

if ((RELOAD)); then systemctl daemon-reload; fi
for service in "${!CHANGED[@]}"; do
  if ((CHANGED[$service])); then
    systemctl enable "$service.service"
    systemctl restart "$service.service"
  else
    systemctl enable --now "$service.service"
  fi
done
log "Prometheus ($MODE mode, ${MAJOR}.${MINOR}) scrapes ${JOBS[*]:-nothing but itself} every ${HPK_METRICS_SCRAPE_INTERVAL}s and remote-writes to ${URL%/api/v1/remote_write}"
