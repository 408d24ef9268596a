"""The kubectl that Studio's lifecycle configuration installs for an EKS cluster, pinned per
Kubernetes minor version. `studio_lifecycle.py` renders the pin into the configuration and the
Studio validators refuse a version without one; the table lives here, below both, because the
validators import `studio_lifecycle` (to measure the configuration) and it must not import them
back (tests/unit/test_house.py).
"""

from __future__ import annotations

# kubectl from conda-forge's `kubernetes-client`, one build per Kubernetes minor version HyperPod
# supports; kubectl talks to API servers one minor version either side of its own. Versions
# listed on anaconda.org/conda-forge/kubernetes-client, checked 2026-11-23 (no 1.26-1.28 builds:
# 1.28 clusters get 1.29).
KUBECTL_VERSIONS = {
    "1.28": "1.29.4",
    "1.29": "1.29.4",
    "1.30": "1.30.3",
    "1.31": "1.31.4",
    "1.32": "1.32.3",
    "1.33": "1.33.4",
    "1.34": "1.34.3",
}
KUBECTL_CHECKED = "2026-11-23"


def kubectl_version(kubernetes: str) -> str | None:
    """The pinned kubectl for a cluster's Kubernetes minor version, or None without one."""
    return KUBECTL_VERSIONS.get(kubernetes)
