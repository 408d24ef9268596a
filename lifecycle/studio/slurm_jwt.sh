#!/bin/bash
# hyperpod-kit: Slurm JWT issuer for Studio users. Runs on the Slurm controller (elsewhere it exits
# at once), at provisioning and then every 10 minutes from a systemd timer it installs. The timer
# is installed on the controller even while slurmctld is not up yet (HYPERPOD_KIT_CONTROLLER=1,
# which the lifecycle hook sets): its runs do the work once slurmctld is active.
#
#  1. JWT signing key in StateSaveLocation (0400 SlurmUser), and in slurm.conf
#     AuthAltTypes=auth/jwt + AuthAltParameters=jwt_key=...; slurmctld restarts only when the
#     configuration changed. (This edits slurm.conf: the cluster needs the Merge strategy.)
#  2. For each Studio user: `scontrol token username=<user> lifespan=3600` into the SecureString
#     /hyperpod-kit/<environment>/slurm-jwt/<user>, renewed at half its lifespan (so a token in
#     SSM always has 20 minutes or more left). A user no longer listed: their parameter is deleted
#     at once, and the JWT key is rotated (slurmctld restarted), because slurmctld accepts any
#     token the key signed until it expires, whether or not the account is locked; every other
#     user gets a new token in the same run.
#  3. The cluster's own client commands (same Slurm version), packed with the libraries they load,
#     to s3://<bucket>/hyperpod-kit/slurm-client/, and /hyperpod-kit/<environment>/slurm-client
#     saying where it is and how to reach slurmctld. No munge key leaves the node.
#
# Environment: HYPERPOD_KIT_ENVIRONMENT, HYPERPOD_KIT_REGION, HYPERPOD_KIT_BUCKET (the data
# bucket), HYPERPOD_KIT_USERS_FILE (a node path: the users file the user sync keeps,
# {"users": [{"name": ..., "studio": true|false}, ...]}, or a plain list of such users; "studio"
# left out means true; a file that does not exist yet issues and revokes nothing).
# HYPERPOD_KIT_JWT_LIFESPAN: seconds a token is valid (3600). HYPERPOD_KIT_CONTROLLER=1: this node
# is the controller (install the timer even if slurmctld is not active yet).
# HYPERPOD_KIT_ROOT: a sandbox root for tests. Idempotent; safe to run again at any time.
# The lifecycle hook hooks.d/60-studio-jwt.sh installs this file as
# /opt/hyperpod-kit/studio/slurm_jwt.sh and runs it on the controller.
set -euo pipefail

ROOT="${HYPERPOD_KIT_ROOT:-}"
: "${HYPERPOD_KIT_ENVIRONMENT:?}" "${HYPERPOD_KIT_REGION:?}" "${HYPERPOD_KIT_BUCKET:?}"
: "${HYPERPOD_KIT_USERS_FILE:?}"
LIFESPAN="${HYPERPOD_KIT_JWT_LIFESPAN:-3600}"
SLURM_USER="${HYPERPOD_KIT_SLURM_USER:-slurm}"
STATE="${ROOT}/var/lib/hyperpod-kit/studio"
LOG="${ROOT}/var/log/hyperpod-kit/studio-slurm-jwt.log"
PREFIX="/hyperpod-kit/${HYPERPOD_KIT_ENVIRONMENT}"
export AWS_DEFAULT_REGION="${HYPERPOD_KIT_REGION}"
SELF="$(readlink -f "$0")"
mkdir -p "${STATE}/issued" "${STATE}/revoked" "$(dirname "${LOG}")"

log() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "${LOG}" >&2; }

retry() {  # retry N command...: exponential backoff for network calls
  local tries="$1" n=1 delay=2
  shift
  until "$@"; do
    if ((n >= tries)); then log "giving up after ${n} tries: $*"; return 1; fi
    sleep "${delay}"; n=$((n + 1)); delay=$((delay * 2))
  done
}

slurmctld_active() { systemctl is-active --quiet slurmctld; }

config_value() {  # config_value KEY: from `scontrol show config` (saved in CONFIG)
  awk -F' = ' -v key="$1" '{k = $1; sub(/[[:space:]]+$/, "", k)} k == key {print $2; exit}' \
    <<<"${CONFIG}"
}

# --- 1. JWT key and slurm.conf --------------------------------------------------------------------

jwt_key_path() { printf '%s/jwt_hs256.key' "$(config_value StateSaveLocation)"; }

new_key() {  # new_key PATH: 32 random bytes, 0400 SlurmUser, replacing PATH atomically
  (umask 077; dd if=/dev/urandom of="${ROOT}$1.new" bs=32 count=1 status=none)
  chown "${SLURM_USER}:${SLURM_USER}" "${ROOT}$1.new"
  chmod 0400 "${ROOT}$1.new"
  mv -f "${ROOT}$1.new" "${ROOT}$1"
}

# Every token the old key signed stops working at once: slurmctld reads the key when it starts.
rotate_key() {
  local key
  key="$(jwt_key_path)"
  new_key "${key}"
  log "rotated the JWT key ${key}: restarting slurmctld, every earlier token is void"
  systemctl restart slurmctld
  retry 6 scontrol ping >/dev/null  # answering again before tokens are asked for
}

ensure_jwt() {
  local key conf changed=0
  key="$(jwt_key_path)"
  conf="$(config_value SLURM_CONF)"
  if [[ ! -s "${ROOT}${key}" ]]; then
    # slurmctld reads the key when it starts: a new key needs a restart, after which no token
    # issued before (with a key deleted to void them all) is accepted.
    new_key "${key}"
    rm -f "${STATE}/issued/"*
    changed=1
    log "created the JWT key ${key}"
  fi
  chown "${SLURM_USER}:${SLURM_USER}" "${ROOT}${key}"
  chmod 0400 "${ROOT}${key}"
  if grep -q '^AuthAltTypes=' "${ROOT}${conf}"; then
    if ! grep -q '^AuthAltTypes=.*auth/jwt' "${ROOT}${conf}"; then
      sed -i 's|^AuthAltTypes=\(.*\)$|AuthAltTypes=\1,auth/jwt|' "${ROOT}${conf}"; changed=1
    fi
  else
    echo 'AuthAltTypes=auth/jwt' >>"${ROOT}${conf}"; changed=1
  fi
  if grep -q '^AuthAltParameters=' "${ROOT}${conf}"; then
    if ! grep -qx "AuthAltParameters=jwt_key=${key}" "${ROOT}${conf}"; then
      sed -i "s|^AuthAltParameters=.*$|AuthAltParameters=jwt_key=${key}|" "${ROOT}${conf}"
      changed=1
    fi
  else
    echo "AuthAltParameters=jwt_key=${key}" >>"${ROOT}${conf}"; changed=1
  fi
  if ((changed)); then
    log "slurm.conf or the JWT key changed: restarting slurmctld"
    systemctl restart slurmctld
    retry 6 scontrol ping >/dev/null
    CONFIG="$(scontrol show config)"
  fi
}

# --- 2. tokens ------------------------------------------------------------------------------------

studio_users() {
  python3 - "${ROOT}${HYPERPOD_KIT_USERS_FILE}" <<'PY'
import json, re, sys
data = json.load(open(sys.argv[1]))
for user in data["users"] if isinstance(data, dict) else data:
    if user.get("studio", True) and re.fullmatch(r"[a-z][a-z0-9-]{0,31}", user["name"]):
        print(user["name"])
PY
}

delete_parameter() {  # delete_parameter NAME: with backoff; one that is gone already is done
  local out n
  for n in 1 2 3 4 5; do
    if out="$(aws ssm delete-parameter --name "$1" 2>&1 >/dev/null)"; then return 0; fi
    [[ "${out}" == *ParameterNotFound* ]] && return 0
    ((n < 5)) && sleep $((2 ** n))
  done
  log "could not delete $1 (the next run tries again): ${out}"
  return 1
}

issue_tokens() {
  local user users now stamp token listed=" " removed=()
  if [[ ! -f "${ROOT}${HYPERPOD_KIT_USERS_FILE}" ]]; then
    # The user sync has not fetched the users yet: issue nothing, and revoke nothing either.
    log "no users file ${HYPERPOD_KIT_USERS_FILE} yet: no tokens issued this time"
    return 0
  fi
  users="$(studio_users)"  # a file that cannot be read stops here, before anything is revoked
  while read -r user; do
    [[ -n "${user}" ]] && listed+="${user} "
  done <<<"${users}"
  # Removed users: their parameters go at once (a failed delete is tried again on the next
  # run), then the key is rotated, which voids every token issued so far, theirs included.
  for stamp in "${STATE}/issued/"*; do
    [[ -e "${stamp}" ]] || continue
    user="$(basename "${stamp}")"
    [[ "${listed}" == *" ${user} "* ]] || removed+=("${user}")
  done
  for user in "${removed[@]}"; do touch "${STATE}/revoked/${user}"; done
  for stamp in "${STATE}/revoked/"*; do
    [[ -e "${stamp}" ]] || continue
    user="$(basename "${stamp}")"
    if [[ "${listed}" == *" ${user} "* ]]; then rm -f "${stamp}"; continue; fi  # re-added
    if delete_parameter "${PREFIX}/slurm-jwt/${user}"; then
      rm -f "${stamp}"
      log "${user} is no longer a Studio user: token parameter deleted"
    fi
  done
  if ((${#removed[@]})); then
    rotate_key
    rm -f "${STATE}/issued/"*  # every user's token was signed with the old key: reissue all
    log "no longer Studio users: ${removed[*]}; their tokens are void, the others are reissued"
  fi
  now="$(date +%s)"
  while read -r user; do
    [[ -n "${user}" ]] || continue
    stamp="$(cat "${STATE}/issued/${user}" 2>/dev/null || echo 0)"
    if ((now - stamp < LIFESPAN / 2)); then continue; fi
    token="$(scontrol token username="${user}" lifespan="${LIFESPAN}")"
    token="${token#SLURM_JWT=}"
    [[ -n "${token}" ]] || { log "scontrol gave no token for ${user}"; continue; }
    retry 5 aws ssm put-parameter --name "${PREFIX}/slurm-jwt/${user}" --type SecureString \
      --overwrite --value "${token}" >/dev/null
    echo "${now}" >"${STATE}/issued/${user}"
    log "issued a token for ${user} (valid ${LIFESPAN} s)"
  done <<<"${users}"
}

# --- 3. the client bundle -------------------------------------------------------------------------

publish_client() {
  local version prefix work sha bundle host address port cluster hostline
  version="$(config_value SLURM_VERSION)"
  prefix="$(dirname "$(dirname "$(command -v sinfo)")")"
  work="${STATE}/client-${version}"
  rm -rf "${work}" && mkdir -p "${work}/bin" "${work}/lib/slurm"
  local c
  for c in sinfo squeue sbatch scancel scontrol sacct sprio sshare sstat; do
    [[ -x "${prefix}/bin/${c}" ]] && cp -p "${prefix}/bin/${c}" "${work}/bin/"
  done
  cp -a "${prefix}/lib/slurm/." "${work}/lib/slurm/"
  # Shared libraries the commands and plugins load, except the C library's own (Studio has those).
  { find "${work}" -type f \( -perm -u+x -o -name '*.so*' \) -print0 \
      | xargs -0 -r ldd 2>/dev/null || true; } | awk '/=> \// {print $3}' | sort -u \
    | { grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' || true; } \
    | while read -r lib; do
        [[ -e "${work}/lib/$(basename "${lib}")" ]] || cp -L "${lib}" "${work}/lib/"
      done
  bundle="${STATE}/slurm-client-${version}.tar.gz"
  tar -C "${work}" --sort=name --mtime=@0 --owner=0 --group=0 -czf "${bundle}.tmp" .
  mv "${bundle}.tmp" "${bundle}" && rm -rf "${work}"
  sha="$(sha256sum "${bundle}" | cut -d' ' -f1)"
  hostline="$(config_value 'SlurmctldHost[0]')"   # ip-10-1-2-3(10.1.2.3)
  host="${hostline%%(*}"
  address="${hostline#*(}"; address="${address%)}"
  [[ "${address}" != "${hostline}" ]] || address="$(hostname -I | awk '{print $1}')"
  port="$(config_value SlurmctldPort)"
  cluster="$(config_value ClusterName)"
  local key="hyperpod-kit/slurm-client/${version}-${sha:0:12}.tar.gz" settings
  settings="$(printf '{"version": "%s", "bundle": "s3://%s/%s", "sha256": "%s", "cluster": "%s", "host": "%s", "address": "%s", "port": "%s"}' \
    "${version}" "${HYPERPOD_KIT_BUCKET}" "${key}" "${sha}" "${cluster}" "${host}" "${address}" "${port%%-*}")"
  if [[ "$(cat "${STATE}/client.json" 2>/dev/null || true)" == "${settings}" ]]; then return 0; fi
  retry 5 aws s3 cp --only-show-errors "${bundle}" "s3://${HYPERPOD_KIT_BUCKET}/${key}"
  retry 5 aws ssm put-parameter --name "${PREFIX}/slurm-client" --type String --overwrite \
    --value "${settings}" >/dev/null
  printf '%s' "${settings}" >"${STATE}/client.json"
  log "published the Slurm ${version} client (${key}) and ${PREFIX}/slurm-client"
}

# --- the timer -------------------------------------------------------------------------------------

install_timer() {
  local units="${ROOT}/etc/systemd/system" env="${ROOT}/etc/hyperpod-kit/studio-slurm-jwt.env"
  mkdir -p "${units}" "$(dirname "${env}")"
  {
    for v in HYPERPOD_KIT_ENVIRONMENT HYPERPOD_KIT_REGION HYPERPOD_KIT_BUCKET \
      HYPERPOD_KIT_USERS_FILE HYPERPOD_KIT_JWT_LIFESPAN HYPERPOD_KIT_CONTROLLER; do
      [[ -n "${!v:-}" ]] && printf '%s=%s\n' "${v}" "${!v}"
    done
  } >"${env}.tmp"
  mv "${env}.tmp" "${env}"
  cat >"${units}/hyperpod-kit-studio-jwt.service" <<UNIT
[Unit]
Description=hyperpod-kit: Slurm tokens and client for Studio users
After=slurmctld.service
[Service]
Type=oneshot
EnvironmentFile=${env#"${ROOT}"}
ExecStart=${SELF#"${ROOT}"}
UNIT
  cat >"${units}/hyperpod-kit-studio-jwt.timer" <<UNIT
[Unit]
Description=hyperpod-kit: renew Studio users' Slurm tokens
[Timer]
OnBootSec=2min
OnUnitActiveSec=10min
[Install]
WantedBy=timers.target
UNIT
  systemctl daemon-reload
  systemctl enable --now hyperpod-kit-studio-jwt.timer >/dev/null 2>&1 || true
}

main() {
  local controller="${HYPERPOD_KIT_CONTROLLER:-}"
  if [[ -z "${controller}" ]] && slurmctld_active; then controller=1; fi
  if [[ "${controller}" != 1 ]]; then
    echo "hyperpod-kit: not the Slurm controller; nothing to do" >&2
    return 0
  fi
  # The timer first: on a first provisioning slurmctld may not be up yet, and the timer's runs
  # are what issue the tokens then.
  [[ -n "${INVOCATION_ID:-}" ]] || install_timer  # not from the timer's own run
  if ! slurmctld_active; then
    log "slurmctld is not active yet: no tokens this time; the timer tries again in 10 minutes"
    return 0
  fi
  CONFIG="$(scontrol show config)"
  ensure_jwt
  issue_tokens
  publish_client
  log "done"
}

main "$@"
