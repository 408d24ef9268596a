# shellcheck shell=bash
# Helpers that every hyperpod-kit node script sources: the ROOT prefix, logging, retries, files.
#
# ROOT stands for "/": empty on a node, a sandbox folder in the tests. Every absolute path that a
# script reads or writes is spelled "$ROOT/..." (node paths from settings.sh as "$ROOT$HPK_..."),
# so the tests run these scripts for real, twice, in a temporary folder. Commands that would touch
# the real machine (useradd, systemctl, apt-get, aws, ...) are called by name through PATH, where
# the tests put recording fakes first.
ROOT="${HYPERPOD_KIT_ROOT:-}"
export HYPERPOD_KIT_ROOT="$ROOT"
# HyperPod may start lifecycle scripts with a short PATH; append (never prepend) the usual folders.
PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export DEBIAN_FRONTEND=noninteractive

log() {
  printf '%s hyperpod-kit %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${HPK_LOG_TAG:-lifecycle}" "$*" >&2
}
warn() { log "WARNING: $*"; }
die() {
  log "ERROR: $*"
  exit 1
}

# hpk_log_to FILE...: from here on, everything this script prints also goes to each FILE (node
# paths). stdout stays what it was: HyperPod keeps a lifecycle script's output.
hpk_log_to() {
  local files=() f
  for f in "$@"; do
    mkdir -p "$ROOT$(dirname "$f")"
    files+=("$ROOT$f")
  done
  exec > >(tee -a "${files[@]}") 2>&1
  HPK_TEE_PID=$!
}

# hpk_log_flush: close our end of the log pipe and wait until tee has written everything.
hpk_log_flush() {
  exec 1>&- 2>&-
  if [[ -n ${HPK_TEE_PID:-} ]]; then
    wait "$HPK_TEE_PID" 2>/dev/null || true
  fi
}

# retry ATTEMPTS COMMAND...: run COMMAND until it succeeds, at most ATTEMPTS times, waiting 2, 4,
# 8, ... (at most 60) seconds plus jitter between attempts. For every network call and apt lock.
retry() {
  local attempts=$1 n=1 delay=2 rc wait_s
  shift
  until "$@"; do
    rc=$?
    if ((n >= attempts)); then
      log "giving up after $n attempts (exit $rc): $1"
      return "$rc"
    fi
    wait_s=$((delay + RANDOM % (delay / 2 + 1)))
    log "attempt $n/$attempts failed (exit $rc): $1; retrying in ${wait_s}s"
    sleep "$wait_s"
    n=$((n + 1))
    delay=$((delay * 2 > 60 ? 60 : delay * 2))
  done
}

# aws_cli ARGS...: the AWS CLI in the environment's region, with retries and backoff.
aws_cli() { retry "${HPK_AWS_ATTEMPTS:-6}" aws --region "$HPK_REGION" "$@"; }

# apt_get ARGS...: apt-get that waits up to 5 minutes for the dpkg lock, with retries on top.
apt_get() { retry 5 apt-get -o DPkg::Lock::Timeout=300 -y -q "$@"; }

# install_packages PACKAGE...: apt-get install of .deb files of the upload (or, with internet,
# of packages by name). With internet (HPK_INTERNET=1) the package lists are refreshed first,
# once per script, so dependencies come from the archive; without (network.internet: false)
# nothing is downloaded at all: no `apt-get update`, `--no-download`, and the upload must hold
# what the packages depend on. Returns apt-get's failure itself (`|| return`), so that a caller
# that tests it (where `set -e` is off) sees it too.
HPK_APT_UPDATED=0
install_packages() {
  (($#)) || return 1
  if ((${HPK_INTERNET:-1})); then
    if ((!HPK_APT_UPDATED)); then
      apt_get update || return
      HPK_APT_UPDATED=1
    fi
    apt_get install --no-install-recommends "$@" || return
  else
    apt_get install --no-install-recommends --no-download "$@" || return
  fi
  log "installed ${*##*/}"
}

# bundled_debs GLOB: the .deb files of the upload's node packages (cluster.node_setup.packages)
# whose name matches GLOB, one path a line, sorted; nothing when there are none.
bundled_debs() {
  local dir="${HPK_BUNDLE:?}/${HPK_NODE_PACKAGES:-}"
  if [[ -n ${HPK_NODE_PACKAGES:-} && -d $dir ]]; then
    find "$dir" -maxdepth 1 -type f -name "$1" -name '*.deb' | sort
  fi
}

# put_file SRC DEST MODE: install SRC at DEST (a path under ROOT) unless DEST already has that
# content and mode. Sets PUT_FILE_CHANGED to 1 when it wrote, 0 otherwise. The new file is written
# beside DEST under a name with a dot and renamed, so readers never see half a file (and sudo
# ignores the temporary name in sudoers.d).
# shellcheck disable=SC2034 # read by the scripts that source this file
PUT_FILE_CHANGED=0
put_file() {
  local src=$1 dest=$2 mode=$3
  PUT_FILE_CHANGED=0
  if [[ -f $dest ]] && cmp -s "$src" "$dest" && [[ $(stat -c %a "$dest") == "$mode" ]]; then
    return 0
  fi
  mkdir -p "$(dirname "$dest")"
  install -m "$mode" "$src" "$dest.hpk-new"
  mv -f "$dest.hpk-new" "$dest"
  # shellcheck disable=SC2034
  PUT_FILE_CHANGED=1
  log "wrote ${dest#"$ROOT"} (mode $mode)"
}

# put_text DEST MODE: put_file with the content read from stdin.
put_text() {
  local dest=$1 mode=$2 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  put_file "$tmp" "$dest" "$mode"
  rm -f "$tmp"
}

# is_mounted NODE_PATH: a file system is mounted there.
is_mounted() { mountpoint -q "$ROOT$1"; }
