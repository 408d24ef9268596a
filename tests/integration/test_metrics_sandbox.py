"""monitoring.prometheus on Slurm: the nodes' agent step (lifecycle/steps/metrics.sh), run for
real in a sandbox root, twice, with the recording fakes (docs/observability.md).

What it proves: the remote-write URL comes from the environment file or the observability stack's
handles and nothing else; Ubuntu's packages come from the upload's .deb files or, with internet,
the archive (never a download of our own); the agent's mode follows prometheus's version; each
exporter's scrape job and unit appear only where it runs; a second run changes nothing; an
exporter turned off is removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_lifecycle_sandbox import (
    Node,
    config,
    ok,
    sandbox,  # noqa: F401 - the fixture
)

ENV = "hyperpod-dev"
PARAMETER = f"ssm/hyperpod-kit/{ENV}/observability"
WS = "ws-0123abcd-4567-89ef-0123-456789abcdef"
CREATED_URL = f"https://aps-workspaces.us-west-2.amazonaws.com/workspaces/{WS}/api/v1/remote_write"
EXISTING_ARN = "arn:aws:aps:us-west-2:111122223333:workspace/ws-existing-1"
EXISTING_URL = (
    "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-existing-1/api/v1/remote_write"
)
CONF = "/etc/hyperpod-kit/prometheus/prometheus.yml"
AGENT_DROPIN = "/etc/systemd/system/prometheus.service.d/hyperpod-kit.conf"
NODE_DROPIN = "/etc/systemd/system/prometheus-node-exporter.service.d/hyperpod-kit.conf"
PACKAGES = Path(__file__).resolve().parents[1] / "data" / "metrics-packages"


def prometheus(**kw: Any) -> dict[str, Any]:
    return {"monitoring": {"prometheus": {"enabled": True, **kw}}}


def handles(node: Node, url: str = CREATED_URL) -> None:
    """The observability stack's handles, as the deploy made them before the cluster."""
    node.knob(PARAMETER, json.dumps({"workspace_arn": "x", "remote_write_url": url}))


@pytest.fixture
def metrics_node(sandbox: Any) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    def make(overrides: dict[str, Any], group: str = "controller", *, seeded: bool = True) -> Node:
        node: Node = sandbox(config(overrides, source=PACKAGES.parent), group)
        if seeded:
            handles(node)
        return node

    yield make


def mutations(node: Node) -> list[list[str]]:
    return node.mutations() + [c for c in node.calls("systemctl") if c[1] in ("enable", "disable")]


def test_created_workspace_twice_same_tree_and_no_second_change(metrics_node: Any) -> None:
    node = metrics_node(prometheus())
    first = ok(node.run())
    tree = node.snapshot()
    assert ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q", "install",
            "--no-install-recommends", "prometheus", "prometheus-node-exporter"] in node.calls(
        "apt-get"
    )  # fmt: skip
    names = [c[c.index("--name") + 1] for c in node.calls("aws") if "get-parameter" in c]
    assert f"/hyperpod-kit/{ENV}/observability" in names
    text = node.path(CONF).read_text()
    assert f'url: "{CREATED_URL}"' in text and 'region: "us-west-2"' in text
    assert 'instance_group: "controller"' in text and 'node_role: "controller"' in text
    assert "job_name: node" in text and 'instance: "fake-node"' in text
    assert "@HPK_" not in text
    # Ubuntu 22.04's 2.31: a server that keeps a day, on loopback only.
    dropin = node.path(AGENT_DROPIN).read_text()
    assert "--storage.tsdb.retention.time=1d" in dropin and "127.0.0.1:9090" in dropin
    assert "--web.listen-address=127.0.0.1:9100" in node.path(NODE_DROPIN).read_text()
    assert ["promtool", "check", "config", str(node.path(CONF))] in node.calls("promtool")
    assert ["systemctl", "restart", "prometheus.service"] in node.calls("systemctl")
    assert "server mode, 2.31" in first.stdout
    ok(node.run())
    assert node.snapshot() == tree
    assert [c for c in mutations(node) if c[1] != "enable"] == []
    assert ["systemctl", "enable", "--now", "prometheus.service"] in node.calls("systemctl")


def test_existing_workspace_is_rendered_and_nothing_is_read(metrics_node: Any) -> None:
    node = metrics_node(prometheus(workspace_arn=EXISTING_ARN), seeded=False)
    ok(node.run())
    assert not [c for c in node.calls("aws") if "get-parameter" in c and "observability" in str(c)]
    assert f'url: "{EXISTING_URL}"' in node.path(CONF).read_text()


def test_handles_missing_fails_the_node_with_the_parameter_named(metrics_node: Any) -> None:
    node = metrics_node(prometheus(), seeded=False)
    result = node.run(env={"HPK_AWS_ATTEMPTS": "1"})
    assert result.returncode != 0
    assert f"cannot read SSM /hyperpod-kit/{ENV}/observability" in result.stdout


def test_a_url_that_is_not_a_workspace_is_refused(metrics_node: Any) -> None:
    node = metrics_node(prometheus())
    handles(node, "https://example.com/api/v1/remote_write")
    result = node.run()
    assert result.returncode != 0
    assert "is not a Prometheus workspace's remote-write URL" in result.stdout


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        ("2.45.3+ds", "--enable-feature=agent --storage.agent.path="),
        ("3.1.0", "--agent --storage.agent.path="),
        ("2.26.0", "--storage.tsdb.retention.time=1d"),
    ],
)
def test_mode_follows_the_version(metrics_node: Any, version: str, flag: str) -> None:
    node = metrics_node(prometheus())
    node.knob("prometheus_version", version)
    ok(node.run())
    assert flag in node.path(AGENT_DROPIN).read_text()


def test_a_prometheus_without_sigv4_sends_nothing_and_the_node_provisions(
    metrics_node: Any,
) -> None:
    node = metrics_node(prometheus())
    node.knob("prometheus_version", "2.15.2+ds")
    result = ok(node.run())
    assert "cannot sign remote writes with SigV4" in result.stdout
    assert not node.path(CONF).exists() and not node.path(AGENT_DROPIN).exists()


def test_offline_installs_only_the_uploaded_packages(metrics_node: Any) -> None:
    offline = {
        "network": {
            "vpc": None,
            "existing_vpc": {
                "vpc_id": "vpc-0123456789abcdef0",
                "private_subnet_id": "subnet-0123456789abcdef0",
                "cidr": "10.0.0.0/16",
                "route_table_ids": ["rtb-0123456789abcdef0"],
            },
            "interface_endpoints": True,
            "internet": False,
        }
    }
    node = metrics_node({**offline, **prometheus(packages=PACKAGES.name)})
    ok(node.run())
    installs = [c for c in node.calls("apt-get") if "install" in c]
    assert installs and all("--no-download" in c for c in installs)
    assert all(a.endswith(".deb") for c in installs for a in c[c.index("--no-download") + 1 :])
    assert not [c for c in node.calls("apt-get") if "update" in c]


def test_exporters_where_they_run_and_removed_when_turned_off(metrics_node: Any) -> None:
    on = prometheus(exporters={"node": True, "efa": True, "slurm": True}, packages=PACKAGES.name)
    node = metrics_node(on)
    node.write("/sys/class/infiniband/rdmap0s6/ports/1/state", "4: ACTIVE\n")
    ok(node.run())
    text = node.path(CONF).read_text()
    assert "job_name: efa" in text and "job_name: slurm" in text
    for job in ("efa", "slurm"):
        unit = node.path(f"/etc/systemd/system/hyperpod-kit-metrics-{job}.service")
        assert f"/opt/hyperpod-kit/bin/{job}-exporter" in unit.read_text()
        assert node.path(f"/opt/hyperpod-kit/bin/{job}-exporter").stat().st_mode & 0o777 == 0o755
    assert ["systemctl", "restart", "hyperpod-kit-metrics-efa.service"] in node.calls("systemctl")
    # The same upload on a compute node: no Slurm exporter (controller only), no EFA without EFA.
    compute = metrics_node(on, group="compute")
    ok(compute.run())
    assert "job_name: slurm" not in compute.path(CONF).read_text()
    assert "job_name: efa" not in compute.path(CONF).read_text()
    assert not compute.path("/etc/systemd/system/hyperpod-kit-metrics-slurm.service").exists()
    # The exporter turned off: its unit is removed from the node that ran it.
    off = Node(node.base, config(prometheus(), source=PACKAGES.parent), "controller")
    handles(off)
    ok(off.run())
    assert not off.path("/etc/systemd/system/hyperpod-kit-metrics-efa.service").exists()
    assert ["systemctl", "disable", "--now", "hyperpod-kit-metrics-efa.service"] in off.calls(
        "systemctl"
    )


def test_dcgm_only_on_gpu_nodes_with_docker(metrics_node: Any) -> None:
    node = metrics_node(prometheus(exporters={"dcgm": True}), group="compute")
    ok(node.run())  # no nvidia-smi on this sandbox's PATH: a CPU node
    assert "job_name: dcgm" not in node.path(CONF).read_text()
    for program in ("nvidia-smi", "docker"):
        fake = node.bin / program
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    ok(node.run())
    assert "job_name: dcgm" in node.path(CONF).read_text()
    unit = node.path("/etc/systemd/system/hyperpod-kit-metrics-dcgm.service").read_text()
    assert "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" in unit
    assert "-p 127.0.0.1:9400:9400" in unit


def test_nothing_of_it_without_prometheus(sandbox: Any) -> None:  # noqa: F811
    node = sandbox(config())
    ok(node.run())
    assert not node.path(CONF).exists()
    assert not (node.bundle / "steps/metrics.sh").exists()
    assert "metrics" not in node.log()
