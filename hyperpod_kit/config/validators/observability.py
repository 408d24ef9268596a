"""Amazon Managed Service for Prometheus and Grafana (`monitoring.prometheus`, docs/
observability.md): where the workspace is, what the nodes' agents need on Slurm (exporters that
are not in Ubuntu's archive come from the upload; without internet everything does), and how
people sign in to Grafana."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hyperpod_kit.config.derived import account_of_arn, region_of_arn
from hyperpod_kit.config.facts import instance_type
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator

AT = "monitoring.prometheus"
# Files of monitoring.prometheus.packages each exporter (and, without internet, the agent) needs.
EFA_EXPORTER = "efa-exporter"
SLURM_EXPORTER = "slurm-exporter"
AGENT_DEBS = ("prometheus_*.deb", "prometheus-node-exporter_*.deb")


@validator("prometheus-workspace", area="monitoring")
def check_workspace(config: EnvironmentConfig) -> Iterator[Finding]:
    """An existing workspace in the environment's region and account; settings that only apply
    to a workspace hyperpod-kit creates; settings written while Prometheus is off."""
    prometheus = config.monitoring.prometheus
    if not prometheus.enabled:
        written = [k for k in ("workspace_arn", "grafana") if k in prometheus.model_fields_set]
        if written or prometheus.grafana.enabled:
            yield Finding(
                Level.WARNING,
                f"{AT}.{written[0] if written else 'grafana'}",
                f"{AT}.enabled is false: nothing of it is created or used",
                f"set {AT}.enabled: true, or remove it",
            )
        return
    arn = prometheus.workspace_arn
    if arn is None:
        return
    if region_of_arn(arn) != config.region:
        yield Finding(
            Level.ERROR,
            f"{AT}.workspace_arn",
            f"the workspace is in {region_of_arn(arn)}; the environment is in {config.region} "
            "(the nodes, the interface endpoint and HyperPod's add-on write to their own region)",
            f"use a workspace of {config.region}, or leave workspace_arn out to create one",
        )
    if config.account is not None and account_of_arn(arn) != config.account:
        yield Finding(
            Level.WARNING,
            f"{AT}.workspace_arn",
            f"the workspace belongs to account {account_of_arn(arn)}, the environment to "
            f"{config.account}: the nodes sign with their own role, which another account's "
            "workspace refuses unless its policy allows that role aps:RemoteWrite",
            f"use a workspace of account {config.account}, or leave workspace_arn out to "
            "create one",
        )
    if prometheus.retention_days is not None:
        yield Finding(
            Level.WARNING,
            f"{AT}.retention_days",
            "applies only to a workspace hyperpod-kit creates; an existing workspace keeps its "
            "own retention: ignored",
            "remove it, or set the retention on the workspace itself",
        )


@validator("prometheus-exporters", area="monitoring")
def check_exporters(config: EnvironmentConfig) -> Iterator[Finding]:
    """What the nodes' agent and exporters need: an orchestrator that runs them (Slurm), a GPU
    or EFA group to watch, a route to nvcr.io for the DCGM image, and the packages folder for
    what is not in Ubuntu's archive (and, without internet, for everything)."""
    prometheus = config.monitoring.prometheus
    if not prometheus.enabled:
        return
    exporters = prometheus.exporters
    if config.orchestrator == "eks":
        written = [
            k for k in ("exporters", "scrape_interval_seconds", "packages")
            if k in prometheus.model_fields_set
        ]  # fmt: skip
        if written:
            yield Finding(
                Level.WARNING,
                f"{AT}.{written[0]}",
                "on EKS HyperPod's observability add-on runs the node, GPU and EFA exporters "
                "and the collector itself; this applies to Slurm nodes only: ignored",
                "remove it",
            )
        return
    facts = [f for g in config.cluster.instance_groups for t in g.types if (f := instance_type(t))]
    if exporters.dcgm and not any(f.gpus for f in facts):
        yield Finding(
            Level.WARNING,
            f"{AT}.exporters.dcgm",
            "no instance group has NVIDIA GPUs: the DCGM exporter runs on none of the nodes",
            "turn it off",
        )
    if exporters.dcgm and not config.network.internet:
        yield Finding(
            Level.ERROR,
            f"{AT}.exporters.dcgm",
            "the DCGM exporter is NVIDIA's image on nvcr.io (pinned by digest); nodes without "
            "internet cannot pull it",
            "turn exporters.dcgm off (GPU health still reaches CloudWatch through the node "
            "checks), or give the cluster subnet a route out",
        )
    if exporters.efa and not any(f.efa_interfaces for f in facts):
        yield Finding(
            Level.WARNING,
            f"{AT}.exporters.efa",
            "no instance group has EFA: the EFA exporter runs on none of the nodes",
            "turn it off",
        )
    if not any((exporters.node, exporters.dcgm, exporters.efa, exporters.slurm)):
        yield Finding(
            Level.WARNING,
            f"{AT}.exporters",
            "every exporter is off: the nodes' agents send only their own health",
            "turn exporters.node on",
        )
    yield from _packages(config)
    yield Finding(
        Level.INFO,
        AT,
        "each node runs Ubuntu's `prometheus` as its agent, remote-writing with SigV4 as the "
        "node's role: 2.32 and later (Ubuntu 24.04's 2.45) in agent mode, 2.26 to 2.31 (Ubuntu "
        "22.04's 2.31) as a server keeping one day of samples on the node; an older one cannot "
        "sign with SigV4, and such a node says so in its lifecycle log and sends nothing",
        f"on an older AMI, put a prometheus_*.deb of 2.26 or later in {AT}.packages",
    )


def _packages(config: EnvironmentConfig) -> Iterator[Finding]:
    prometheus = config.monitoring.prometheus
    exporters = prometheus.exporters
    wanted = [
        name
        for name, on in ((EFA_EXPORTER, exporters.efa), (SLURM_EXPORTER, exporters.slurm))
        if on
    ]
    offline = not config.network.internet
    if prometheus.packages is None:
        if wanted:
            which = "efa" if exporters.efa else "slurm"
            yield Finding(
                Level.ERROR,
                f"{AT}.exporters.{which}",
                f"Ubuntu's archive has no {which.upper() if which == 'efa' else 'Slurm'} "
                f"exporter and nothing is fetched from GitHub at boot: `{wanted[0]}` must come "
                "with the lifecycle upload",
                f"name a folder holding the `{wanted[0]}` binary in {AT}.packages, or turn the "
                "exporter off",
            )
        if offline:
            yield Finding(
                Level.ERROR,
                f"{AT}.packages",
                "without internet the nodes install prometheus and prometheus-node-exporter "
                "only from the lifecycle upload",
                f"name a folder with {' and '.join(AGENT_DEBS)} (and the packages they depend "
                "on) built for the AMI's Ubuntu",
            )
        return
    folder = config.resolve_path(prometheus.packages)
    if not folder.is_dir():
        yield Finding(
            Level.ERROR,
            f"{AT}.packages",
            f"{folder} is not a folder",
            "name a folder relative to the environment file",
        )
        return
    for name in wanted:
        if not _executable_file(folder / name):
            yield Finding(
                Level.ERROR,
                f"{AT}.packages",
                f"{folder} has no executable file `{name}`",
                f"put the `{name}` binary (built for the nodes, linux/amd64) there, mode 755",
            )
    if offline:
        missing = [glob for glob in AGENT_DEBS if not any(folder.glob(glob))]
        if missing:
            yield Finding(
                Level.ERROR,
                f"{AT}.packages",
                f"{folder} has no {' or '.join(missing)}: without internet the nodes install "
                "the agent and the node exporter only from it",
                f"add {' and '.join(missing)} (and the packages they depend on) built for the "
                "AMI's Ubuntu",
            )


def _executable(path: Path) -> bool:
    return path.stat().st_mode & 0o111 != 0


def _executable_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and _executable(path)


@validator("grafana", area="monitoring")
def check_grafana(config: EnvironmentConfig) -> Iterator[Finding]:
    """How people sign in to the Grafana workspace, and what that needs outside the file."""
    grafana = config.monitoring.prometheus.grafana
    at = f"{AT}.grafana"
    if not grafana.enabled or not config.monitoring.prometheus.enabled:
        return
    saml_keys = [
        k
        for k in ("saml_metadata_url", "saml_role_attribute", "saml_admin_values")
        if k in grafana.model_fields_set
    ]
    if grafana.authentication == "saml":
        if grafana.saml_metadata_url is None:
            yield Finding(
                Level.ERROR,
                f"{at}.saml_metadata_url",
                "SAML sign-in needs the identity provider's metadata",
                "give the metadata URL your identity provider publishes, or use "
                "authentication: iam_identity_center",
            )
        if not grafana.saml_admin_values:
            yield Finding(
                Level.WARNING,
                f"{at}.saml_admin_values",
                "nobody signs in as a Grafana admin: nobody can import the dashboards",
                f"list the values of the '{grafana.saml_role_attribute}' attribute that make "
                "an admin",
            )
    elif saml_keys:
        yield Finding(
            Level.WARNING,
            f"{at}.{saml_keys[0]}",
            "SAML settings with authentication: iam_identity_center: ignored",
            "remove them, or set authentication: saml",
        )
    else:
        yield Finding(
            Level.INFO,
            f"{at}.authentication",
            "IAM Identity Center must be enabled in the account or its organization (not "
            "checked offline); people are assigned to the workspace in its console, and each "
            "active user is billed",
            "enable IAM Identity Center before the deploy, or use authentication: saml",
        )
