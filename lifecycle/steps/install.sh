#!/bin/bash
# Installs hyperpod-kit's node files where later tools (the user sync timer, hooks) find them:
# the shared library and settings under /opt/hyperpod-kit/lib, and this node's instance group and
# role in /etc/hyperpod-kit/node.env. HyperPod may delete the lifecycle folder after provisioning.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$HPK_BUNDLE/lib/common.sh"
# shellcheck source=lib/settings.sh
source "$HPK_BUNDLE/lib/settings.sh"

for file in common.sh settings.sh node.py; do
  put_file "$HPK_BUNDLE/lib/$file" "$ROOT$HPK_HOME/lib/$file" 644
done
# Plain names (checked by node.py and the rendered table), so no quoting is needed; %q anyway.
printf 'HPK_GROUP=%q\nHPK_ROLE=%q\n' "${HPK_GROUP:?}" "${HPK_ROLE:?}" | put_text "$ROOT$HPK_CONF/node.env" 644
