#!/bin/bash
# Studio lifecycle configuration (JupyterLab and Code Editor). Makes the space a
# client of the environment's HyperPod cluster and points ~/fsx at the mounted FSx partition.
#   Slurm: the cluster's own client commands (published by the controller, same version), each
#          run with the user's own JWT (SLURM_JWT) read from SSM; no munge key ever leaves the
#          cluster. sbatch runs in the partition's path on the nodes (/fsx/<user>/...).
#   EKS:   kubectl (conda-forge kubernetes-client, pinned) and a kubeconfig context.
# Runs at every app start, as the user: quick steps now, installs in the background (Studio stops
# a lifecycle configuration after 5 minutes); log in ~/.hyperpod-kit/lifecycle.log. Idempotent.
# hyperpod-kit prepends the HYPERPOD_KIT_* settings; HYPERPOD_KIT_ROOT is a sandbox root for tests.
# Rendered per orchestrator: lines between "# >>> slurm" and "# <<< slurm" (or eks) are kept only
# for that one, and comment lines are dropped (Studio takes 16,384 characters of base64).
set -euo pipefail

ROOT="${HYPERPOD_KIT_ROOT:-}"
: "${HYPERPOD_KIT_ENVIRONMENT:?}" "${HYPERPOD_KIT_REGION:?}" "${HYPERPOD_KIT_ORCHESTRATOR:?}"
: "${HYPERPOD_KIT_FILE_SYSTEM_ID:?}" "${HYPERPOD_KIT_STUDIO_MOUNT:=/mnt/custom-file-systems/fsx_lustre}"
: "${HYPERPOD_KIT_NODE_MOUNT:=/fsx}" "${HYPERPOD_KIT_PARTITIONS:=per_user}"
: "${HYPERPOD_KIT_SHARED_PATH:=/shared}" "${HYPERPOD_KIT_NAMESPACE:=default}"
HOME_DIR="${ROOT}${HOME:?}"
STATE="${HOME_DIR}/.hyperpod-kit"
BIN="${HOME_DIR}/.local/bin"
LOG="${STATE}/lifecycle.log"
export AWS_DEFAULT_REGION="${HYPERPOD_KIT_REGION}"

log() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >>"${LOG}"; }

# AWS calls through boto3 (in every Studio image; the aws CLI is not always there).
write_helper() {
  cat >"${STATE}/aws.py" <<'PY'
import base64, json, os, sys
import boto3
from botocore.config import Config
cfg = Config(retries={"max_attempts": 8, "mode": "adaptive"})
cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "s3get":
    bucket, key = args[0][5:].split("/", 1)
    boto3.client("s3", config=cfg).download_file(bucket, key, args[1])
if cmd == "param":
    reply = boto3.client("ssm", config=cfg).get_parameter(Name=args[0], WithDecryption=True)
    print(reply["Parameter"]["Value"])
# >>> slurm
if cmd == "owner":
    meta = json.load(open(args[0]))
    name = meta.get("UserProfileName")
    if not name:
        space = boto3.client("sagemaker", config=cfg).describe_space(
            DomainId=meta["DomainId"], SpaceName=meta["SpaceName"])
        name = space["OwnershipSettings"]["OwnerUserProfileName"]
    print(name)
# <<< slurm
# >>> eks
if cmd == "eks":
    c = boto3.client("eks", config=cfg).describe_cluster(name=args[0])["cluster"]
    print(c["endpoint"]); print(c["certificateAuthority"]["data"])
if cmd == "eks-token":
    from botocore.signers import RequestSigner
    sts = boto3.client("sts", config=cfg)
    signer = RequestSigner(sts.meta.service_model.service_id, sts.meta.region_name, "sts", "v4",
                           sts._request_signer._credentials, sts.meta.events)
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"https://sts.{sts.meta.region_name}.amazonaws.com/"
         "?Action=GetCallerIdentity&Version=2011-06-15", "body": {}, "context": {},
         "headers": {"x-k8s-aws-id": args[0]}}, region_name=sts.meta.region_name,
        expires_in=60, operation_name="")
    token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    print(json.dumps({"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1beta1",
                      "status": {"token": token}}))
# <<< eks
PY
}

aws_q() { ${HYPERPOD_KIT_AWS_HELPER:-python3 "${STATE}/aws.py"} "$@"; }

add_path() {
  local rc="${HOME_DIR}/.bashrc"
  touch "${rc}"
  grep -q '# hyperpod-kit PATH' "${rc}" || printf '%s\n' \
    "export PATH=\"\${HOME}/.local/bin:\${PATH}\"  # hyperpod-kit PATH" >>"${rc}"
}

# The toolkit and the environment file: the Studio stack's package asset (a zip), its s3:// URL
# in an SSM parameter. Downloaded when the URL moved, every file checked against its SHA256SUMS,
# then the package's own install.sh installs it (hyperpod_kit/studio_package.py). Called in an
# `||` list, where `set -e` does not apply: a failed download leaves no folder or an incomplete
# one, which the check refuses; the URL is kept only once the check passed.
install_package() {
  local u d="${STATE}/package"
  u="$(aws_q param "${HYPERPOD_KIT_PACKAGE_PARAMETER}")" || return 1
  if [[ "$(cat "${d}/.url" 2>/dev/null)" != "${u}" ]]; then
    rm -rf "${d}" && aws_q s3get "${u}" "${d}.zip" && python3 -m zipfile -e "${d}.zip" "${d}"
  fi
  (cd "${d}" && sha256sum -c --quiet SHA256SUMS) && echo "${u}" >"${d}/.url" &&
    bash "${d}/install.sh" "${STATE}" "${HOME_DIR}"
}

# --- Slurm -------------------------------------------------------------------------------------
# >>> slurm

write_slurm_wrapper() {
  local wrapper="${STATE}/bin/hyperpod-slurm" c
  local commands=(sinfo squeue sbatch scancel scontrol sacct sprio sshare sstat)
  cat >"${wrapper}" <<'SH'
#!/bin/bash
# hyperpod-kit: run a Slurm command of the cluster's client with this user's own token.
set -euo pipefail
STATE="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC1091
. "${STATE}/settings"
client="${STATE}/slurm/current"
if [[ ! -x "${client}/bin/$1" ]]; then
  echo "hyperpod-kit: the Slurm client is not installed yet (see ${STATE}/lifecycle.log)" >&2
  exit 69
fi
user="$(cat "${STATE}/user" 2>/dev/null || true)"
if [[ -z "${user}" ]]; then
  user="$(${HYPERPOD_KIT_AWS_HELPER:-python3 "${STATE}/aws.py"} owner "${HYPERPOD_KIT_METADATA}")"
  printf '%s\n' "${user}" >"${STATE}/user"
fi
token="${STATE}/slurm-jwt"
if [[ -z "$(find "${token}" -mmin -1 2>/dev/null)" ]]; then
  (umask 077
   ${HYPERPOD_KIT_AWS_HELPER:-python3 "${STATE}/aws.py"} param \
     "${HYPERPOD_KIT_TOKEN_PREFIX}/${user}" >"${token}.tmp" && mv "${token}.tmp" "${token}") || {
    echo "hyperpod-kit: cannot read your Slurm token ${HYPERPOD_KIT_TOKEN_PREFIX}/${user}" >&2
    exit 77
  }
fi
SLURM_JWT="$(cat "${token}")"
export SLURM_JWT SLURM_CONF="${client}/etc/slurm.conf"
export LD_LIBRARY_PATH="${client}/lib:${client}/lib/slurm${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
command="$1"; shift
if [[ "${command}" == sbatch ]]; then
  # Jobs start in the same folder on the nodes: ~/fsx/x (Studio) is /fsx/<user>/x there.
  has_chdir=0
  for arg in "$@"; do [[ "${arg}" == -D* || "${arg}" == --chdir* ]] && has_chdir=1; done
  here="$(pwd -P)"; mount="$(readlink -f "${HOME}/fsx" 2>/dev/null || true)"
  if (( ! has_chdir )) && [[ -n "${mount}" && "${here}/" == "${mount}/"* ]]; then
    if [[ "${HYPERPOD_KIT_PARTITIONS}" == per_user ]]; then
      base="${HYPERPOD_KIT_NODE_MOUNT}/${user}"
    else
      base="${HYPERPOD_KIT_NODE_MOUNT}${HYPERPOD_KIT_SHARED_PATH}"
    fi
    set -- "--chdir=${base}${here#"${mount}"}" "$@"
  fi
fi
exec "${client}/bin/${command}" "$@"
SH
  chmod 0755 "${wrapper}"
  for c in "${commands[@]}"; do
    printf '#!/bin/bash\nexec "%s" %s "$@"\n' "${wrapper}" "${c}" >"${BIN}/${c}"
    chmod 0755 "${BIN}/${c}"
  done
}

install_slurm() {
  local settings version bundle sha cluster host address port dir
  settings="$(aws_q param "${HYPERPOD_KIT_CLIENT_PARAMETER}")" || {
    log "no Slurm client settings at ${HYPERPOD_KIT_CLIENT_PARAMETER}: has the controller run lifecycle/studio/slurm_jwt.sh?"
    return 1
  }
  read -r version bundle sha cluster host address port < <(python3 -c '
import json, sys
s = json.loads(sys.argv[1])
print(s["version"], s["bundle"], s["sha256"], s["cluster"], s["host"], s["address"], s["port"])
' "${settings}")
  dir="${STATE}/slurm/${version}"
  if [[ "$(cat "${dir}/.sha256" 2>/dev/null || true)" != "${sha}" ]]; then
    log "installing the Slurm ${version} client from ${bundle}"
    rm -rf "${dir}.tmp" && mkdir -p "${dir}.tmp"
    aws_q s3get "${bundle}" "${dir}.tmp/bundle.tar.gz"
    echo "${sha}  ${dir}.tmp/bundle.tar.gz" | sha256sum --check --quiet
    tar -xzf "${dir}.tmp/bundle.tar.gz" -C "${dir}.tmp" && rm "${dir}.tmp/bundle.tar.gz"
    printf '%s\n' "${sha}" >"${dir}.tmp/.sha256"
    rm -rf "${dir}" && mv "${dir}.tmp" "${dir}"
  fi
  mkdir -p "${dir}/etc"
  # The client's own configuration: the controller to ask, and JWT (the token in SLURM_JWT).
  cat >"${dir}/etc/slurm.conf" <<CONF
# hyperpod-kit: Slurm client configuration for Studio (written by the lifecycle configuration)
ClusterName=${cluster}
SlurmctldHost=${host}(${address})
SlurmctldPort=${port}
AuthType=auth/jwt
PluginDir=${dir#"${ROOT}"}/lib/slurm
CONF
  ln -sfn "${version}" "${STATE}/slurm/current"
  log "Slurm ${version} client ready: controller ${host} (${address}:${port})"
}

# <<< slurm
# --- EKS ---------------------------------------------------------------------------------------
# >>> eks

install_eks() {
  local version="${HYPERPOD_KIT_KUBECTL_VERSION:?}" prefix conda endpoint ca kubeconfig
  prefix="${STATE}/kubectl/${version}"
  if [[ ! -x "${prefix}/bin/kubectl" ]]; then
    conda="$(command -v micromamba || command -v conda || true)"
    [[ -n "${conda}" ]] || { log "neither micromamba nor conda: cannot install kubectl"; return 1; }
    log "installing kubectl ${version} (conda-forge kubernetes-client)"
    rm -rf "${prefix}.tmp"
    "${conda}" create --yes --quiet --prefix "${prefix}.tmp" --channel conda-forge \
      "kubernetes-client=${version}" >>"${LOG}" 2>&1
    rm -rf "${prefix}" && mv "${prefix}.tmp" "${prefix}"
  fi
  ln -sfn "${prefix#"${ROOT}"}/bin/kubectl" "${BIN}/kubectl"
  { read -r endpoint; read -r ca; } < <(aws_q eks "${HYPERPOD_KIT_EKS_CLUSTER:?}")
  printf '#!/bin/bash\nexec python3 "%s/aws.py" eks-token "%s"\n' "${STATE#"${ROOT}"}" \
    "${HYPERPOD_KIT_EKS_CLUSTER}" >"${STATE}/bin/eks-token"
  chmod 0755 "${STATE}/bin/eks-token"
  mkdir -p "${HOME_DIR}/.kube"
  kubeconfig="${HOME_DIR}/.kube/config"
  if [[ -e "${kubeconfig}" ]] && ! grep -q '# hyperpod-kit' "${kubeconfig}"; then
    kubeconfig="${HOME_DIR}/.kube/hyperpod-${HYPERPOD_KIT_ENVIRONMENT}.yaml"
    log "${HOME}/.kube/config is yours: the cluster's context is in ${kubeconfig#"${ROOT}"}"
  fi
  cat >"${kubeconfig}.tmp" <<KUBE
# hyperpod-kit: kubeconfig for ${HYPERPOD_KIT_EKS_CLUSTER} (rewritten at each app start)
apiVersion: v1
kind: Config
clusters:
- name: ${HYPERPOD_KIT_EKS_CLUSTER}
  cluster: {server: "${endpoint}", certificate-authority-data: "${ca}"}
users:
- name: studio
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: "${STATE#"${ROOT}"}/bin/eks-token", interactiveMode: Never}
contexts:
- name: ${HYPERPOD_KIT_EKS_CLUSTER}
  context: {cluster: ${HYPERPOD_KIT_EKS_CLUSTER}, user: studio, namespace: ${HYPERPOD_KIT_NAMESPACE}}
current-context: ${HYPERPOD_KIT_EKS_CLUSTER}
KUBE
  chmod 0600 "${kubeconfig}.tmp" && mv "${kubeconfig}.tmp" "${kubeconfig}"
  log "kubectl ${version} ready, context ${HYPERPOD_KIT_EKS_CLUSTER}"
}
# <<< eks

install() {
  install_package || log "the toolkit was not installed"
  if [[ "${HYPERPOD_KIT_ORCHESTRATOR}" == slurm ]]; then install_slurm; else install_eks; fi
}

main() {
  mkdir -p "${STATE}/bin" "${STATE}/slurm" "${BIN}"
  log "lifecycle configuration started (${HYPERPOD_KIT_ORCHESTRATOR}, ${HYPERPOD_KIT_ENVIRONMENT})"
  write_helper
  # The settings, for the wrapper and the background install.
  local metadata="${ROOT}/opt/ml/metadata/resource-metadata.json"
  {
    declare -p ROOT STATE BIN LOG HOME_DIR
    printf 'HYPERPOD_KIT_METADATA=%q\n' "${metadata}"
    for v in "${!HYPERPOD_KIT_@}"; do printf '%s=%q\n' "${v}" "${!v}"; done
    printf 'export AWS_DEFAULT_REGION=%q\n' "${HYPERPOD_KIT_REGION}"
  } >"${STATE}/settings"
  ln -sfn "${HYPERPOD_KIT_STUDIO_MOUNT}/${HYPERPOD_KIT_FILE_SYSTEM_ID}" "${HOME_DIR}/fsx"
  add_path
  rm -f "${STATE}/user" "${STATE}/slurm-jwt"  # the owner may differ after a space moved
  if [[ "${HYPERPOD_KIT_ORCHESTRATOR}" == slurm ]]; then write_slurm_wrapper; fi
  # Long steps in the background, in a script of their own (this one may be gone by then).
  {
    echo '#!/bin/bash'
    echo 'set -euo pipefail'
    echo "# shellcheck disable=SC1091"
    printf '. %q\n' "${STATE}/settings"
    declare -f log aws_q install install_package
    declare -f install_slurm install_eks || true  # the rendered configuration has one of them
    echo 'install'
  } >"${STATE}/install.sh"
  chmod 0755 "${STATE}/install.sh"
  if [[ -n "${HYPERPOD_KIT_FOREGROUND:-}" ]]; then
    "${STATE}/install.sh" >>"${LOG}" 2>&1
  else
    nohup "${STATE}/install.sh" >>"${LOG}" 2>&1 &
    log "installing in the background (pid $!)"
  fi
}

main "$@"
