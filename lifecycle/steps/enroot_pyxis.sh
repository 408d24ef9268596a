#!/bin/bash
# Slurm nodes with cluster.slurm.enroot_pyxis: containers in jobs (srun --container-image).
#  - enroot and the pyxis SPANK plugin: the AMI's copy when present; otherwise the .deb packages
#    of cluster.slurm.enroot_pyxis_packages (copied into this upload); otherwise a warning.
#  - enroot's runtime, cache, data and temp on the local NVMe (/opt/dlami/nvme), else on the EBS
#    volume (/opt/sagemaker), never on the small root volume: a managed block in enroot.conf.
#  - pyxis in /opt/slurm/etc/plugstack.conf.d/pyxis.conf, only when no plugstack file loads it
#    yet; then running Slurm daemons are restarted to load it. slurm.conf is never edited.
#  - On the controller: the folder on FSx where jobs keep imported images (HPK_IMAGES_DIR, root,
#    1777; each job imports into a folder of its own uid there, docs/trainer.md).
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

PLUGSTACK="$HPK_SLURM_ETC/plugstack.conf"
PLUGSTACK_D="$HPK_SLURM_ETC/plugstack.conf.d"
TMPFILES=/etc/tmpfiles.d/hyperpod-kit-pyxis.conf
ENROOT_CONF=/etc/enroot/enroot.conf
# Where Slurm plugin packages put spank_pyxis.so (node paths).
PYXIS_DIRS=(/usr/local/lib/slurm /usr/lib/x86_64-linux-gnu/slurm /usr/lib/aarch64-linux-gnu/slurm
  /usr/lib/slurm /opt/slurm/lib/slurm /usr/lib64/slurm)

PACKAGES=()
if [[ -n $HPK_ENROOT_PACKAGES && -d $HPK_BUNDLE/$HPK_ENROOT_PACKAGES ]]; then
  mapfile -t PACKAGES < <(find "$HPK_BUNDLE/$HPK_ENROOT_PACKAGES" -maxdepth 1 -name '*.deb' | sort)
fi
enroot_packages() { printf '%s\n' "${PACKAGES[@]}" | grep '/enroot[^/]*\.deb$' || true; }
other_packages() { printf '%s\n' "${PACKAGES[@]}" | grep -v '/enroot[^/]*\.deb$' | grep . || true; }

# install_debs < LIST: the .deb files listed on stdin (none: return 1), through install_packages
# (no `apt-get update`, nothing downloaded, with network.internet: false). Bundled packages that
# do not install fail provisioning.
install_debs() {
  local debs=()
  mapfile -t debs
  ((${#debs[@]})) || return 1
  install_packages "${debs[@]}" || die "installing ${debs[*]##*/} failed"
}

# pyxis_plugin: the node path of spank_pyxis.so, if a package or the AMI installed one.
pyxis_plugin() {
  local dir
  for dir in "${PYXIS_DIRS[@]}"; do
    if [[ -f $ROOT$dir/spank_pyxis.so ]]; then
      echo "$dir/spank_pyxis.so"
      return 0
    fi
  done
  return 1
}

# pyxis_configured: plugstack.conf loads spank_pyxis.so, itself or through an include.
pyxis_configured() {
  local conf="$ROOT$PLUGSTACK" pattern file
  [[ -f $conf ]] || return 1
  grep -qs '^[^#]*spank_pyxis\.so' "$conf" && return 0
  while read -r pattern; do
    for file in $ROOT$pattern; do # an include takes a glob
      grep -qs '^[^#]*spank_pyxis\.so' "$file" && return 0
    done
  done < <(sed -n 's/^[[:space:]]*include[[:space:]]\{1,\}\([^[:space:]#]*\).*/\1/p' "$conf")
  return 1
}

# 1. enroot
ENROOT=1
if command -v enroot >/dev/null; then
  log "enroot: the AMI's $(command -v enroot)"
elif install_debs < <(enroot_packages); then
  command -v enroot >/dev/null || die "enroot is still missing after installing its packages"
else
  ENROOT=0
  warn "enroot is not on this AMI and no packages are bundled (cluster.slurm.enroot_pyxis_packages): jobs with --container-image fail on this node"
fi

# 2. pyxis
PLUGIN=""
if PLUGIN=$(pyxis_plugin); then
  log "pyxis: $PLUGIN"
elif install_debs < <(other_packages) && PLUGIN=$(pyxis_plugin); then
  log "pyxis: installed $PLUGIN"
else
  PLUGIN=""
  warn "the pyxis plugin (spank_pyxis.so) is not on this AMI and no pyxis package is bundled: srun --container-image is unavailable on this node"
fi

# 3. enroot's storage: local NVMe, else the EBS volume at /opt/sagemaker.
if ((ENROOT)); then
  STORE=""
  if retry 5 is_mounted "$HPK_NVME"; then
    STORE=$HPK_NVME/enroot
  elif is_mounted "$HPK_EBS"; then
    STORE=$HPK_EBS/enroot
    warn "$HPK_NVME is not mounted: enroot uses the EBS volume $HPK_EBS"
  else
    warn "neither $HPK_NVME nor $HPK_EBS is mounted: enroot keeps its defaults (root volume)"
  fi
  if [[ -n $STORE ]]; then
    for dir in runtime cache data tmp; do
      mkdir -p "$ROOT$STORE/$dir"
      chmod 1777 "$ROOT$STORE/$dir"
    done
    conf="$ROOT$ENROOT_CONF"
    mkdir -p "$(dirname "$conf")"
    {
      if [[ -f $conf ]]; then
        sed '/^# BEGIN hyperpod-kit/,/^# END hyperpod-kit/d' "$conf"
      fi
      echo "# BEGIN hyperpod-kit: enroot storage off the root volume (rewritten at provisioning)"
      # shellcheck disable=SC2016 # enroot expands $(id -u) per user
      printf 'ENROOT_RUNTIME_PATH %s/runtime/user-$(id -u)\nENROOT_CACHE_PATH %s/cache/user-$(id -u)\nENROOT_DATA_PATH %s/data/user-$(id -u)\nENROOT_TEMP_PATH %s/tmp\n' \
        "$STORE" "$STORE" "$STORE" "$STORE"
      echo "# END hyperpod-kit"
    } | put_text "$conf" 644
  fi
fi

# 4. pyxis in plugstack, unless something loads it already.
if [[ -n $PLUGIN ]]; then
  if pyxis_configured; then
    log "pyxis: already configured in $PLUGSTACK"
  elif [[ ! -d $ROOT$HPK_SLURM_ETC ]]; then
    warn "$HPK_SLURM_ETC does not exist: pyxis is not configured"
  else
    printf 'required %s\n' "$PLUGIN" | put_text "$ROOT$PLUGSTACK_D/pyxis.conf" 644
    # An explicit file, not a glob: configless Slurm does not expand globs in plugstack includes.
    line="include $PLUGSTACK_D/pyxis.conf"
    if ! grep -qxF "$line" "$ROOT$PLUGSTACK" 2>/dev/null; then
      printf '%s\n' "$line" >>"$ROOT$PLUGSTACK"
      log "added '$line' to $PLUGSTACK"
    fi
    # pyxis keeps its runtime state in /run/pyxis (a tmpfs): recreated at every boot.
    printf 'd /run/pyxis 0755 root root -\n' | put_text "$ROOT$TMPFILES" 644
    systemd-tmpfiles --create "$TMPFILES"
    for daemon in slurmctld slurmd; do
      if systemctl is-active --quiet "$daemon"; then
        retry 3 systemctl restart "$daemon"
        log "restarted $daemon to load pyxis"
      fi
    done
  fi
fi

# 5. The images folder on FSx (shared by every node): jobs import each image once per digest into
# <HPK_IMAGES_DIR>/<uid>/, a folder only that user can write. Made once, by the controller.
if [[ ${HPK_ROLE:?} == controller ]]; then
  if is_mounted "$HPK_FSX"; then
    if [[ ! -d $ROOT$HPK_IMAGES_DIR ]]; then
      mkdir -p "$ROOT$HPK_IMAGES_DIR"
      chmod 0755 "$(dirname "$ROOT$HPK_IMAGES_DIR")"
      chmod 1777 "$ROOT$HPK_IMAGES_DIR"
      log "made $HPK_IMAGES_DIR (1777) for the images jobs import"
    fi
  else
    warn "$HPK_FSX is not mounted: $HPK_IMAGES_DIR not made; jobs that import an image fail until it exists (or set HYPERPOD_IMAGES_DIR)"
  fi
fi
