"""Node set-up and networks without internet (docs/lifecycle.md, "Node set-up"; docs/network
sections of README): what `cluster.node_setup` does on which orchestrator, what pam_slurm_adopt
needs from HyperPod's Slurm, and what `network.internet: false` needs from the VPC, Studio
included."""

from __future__ import annotations

from collections.abc import Iterator

from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.config.validators.registry import validator

SETUP = "cluster.node_setup"


@validator("node-setup", area="cluster")
def check_node_setup(config: EnvironmentConfig) -> Iterator[Finding]:
    """Each node set-up on the orchestrator it is for; what pam_slurm_adopt depends on; a
    packages folder that some step installs from."""
    setup = config.cluster.node_setup
    slurm = config.orchestrator == "slurm"
    if not slurm and setup.pam_slurm_adopt:
        yield Finding(
            Level.WARNING,
            f"{SETUP}.pam_slurm_adopt",
            "pam_slurm_adopt is Slurm's PAM module; EKS nodes run no Slurm: ignored",
            "remove it",
        )
    if slurm and setup.container_storage != "none":
        yield Finding(
            Level.WARNING,
            f"{SETUP}.container_storage",
            "container_storage moves containerd's and kubelet's data on EKS nodes only; Slurm "
            "nodes keep enroot's data on the NVMe or EBS volume already "
            "(cluster.slurm.enroot_pyxis): ignored",
            "remove it",
        )
    if slurm and setup.pam_slurm_adopt:
        source = (
            "the AMI or cluster.node_setup.packages"
            if setup.packages is not None
            else "the AMI (no cluster.node_setup.packages is named)"
        )
        yield Finding(
            Level.INFO,
            f"{SETUP}.pam_slurm_adopt",
            "compute nodes configure it only where Slurm runs with PrologFlags=Contain, "
            "ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup (HyperPod's slurm.conf: "
            f"the API cannot set them, hyperpod-kit does not edit it) and the module comes from "
            f"{source}; other nodes say why in their lifecycle log and change nothing",
            "check with `scontrol show config | grep -Ei 'prologflags|proctracktype|taskplugin'` "
            "on a node; put a *pam*slurm*adopt*.deb built for the cluster's Slurm in "
            "cluster.node_setup.packages",
        )
    uses_packages = setup.logrotate or (slurm and setup.pam_slurm_adopt)
    if setup.packages is not None and not uses_packages:
        yield Finding(
            Level.WARNING,
            f"{SETUP}.packages",
            "not used: no node step installs from it (logrotate and pam_slurm_adopt are off)",
            "remove it",
        )


@validator("no-internet", area="network")
def check_no_internet(config: EnvironmentConfig) -> Iterator[Finding]:
    """`network.internet: false` describes an existing VPC without a NAT: the nodes then reach
    AWS only through the interface endpoints and S3's gateway endpoint."""
    network = config.network
    if network.internet:
        return
    existing = network.existing_vpc
    if existing is None:
        yield Finding(
            Level.ERROR,
            "network.internet",
            "the VPC hyperpod-kit creates has a NAT gateway; internet: false describes an "
            "existing VPC without one",
            "use network.existing_vpc for a VPC without a NAT, or remove internet",
        )
        return
    if not network.interface_endpoints:
        yield Finding(
            Level.ERROR,
            "network.interface_endpoints",
            "without a NAT the nodes reach SSM, CloudWatch, ECR, STS and SageMaker only through "
            "interface endpoints",
            "set interface_endpoints: true",
        )
    if not existing.route_table_ids:
        yield Finding(
            Level.WARNING,
            "network.existing_vpc.route_table_ids",
            "without a NAT the nodes fetch their lifecycle scripts and users file from S3 "
            "through an S3 gateway endpoint, and none is created without route tables",
            "list the private subnet's route tables here, or suppress no-internet if the VPC "
            "has an S3 gateway endpoint already",
        )


@validator("studio-without-nat", area="studio")
def check_studio_without_nat(config: EnvironmentConfig) -> Iterator[Finding]:
    """Studio's apps in a VPC without a NAT (`network.internet: false`)."""
    if not config.studio.enabled or config.network.internet:
        return
    eks = (
        "; the EKS client's kubectl comes from conda-forge" if config.orchestrator == "eks" else ""
    )
    yield Finding(
        Level.WARNING,
        "studio.enabled",
        "the VPC has no NAT (network.internet: false): JupyterLab and Code Editor need a "
        "SageMaker runtime endpoint besides the API one (hyperpod-kit creates sagemaker.api "
        f"only), and pip or conda installs in the apps fail{eks}",
        "add a com.amazonaws.<region>.sagemaker.runtime interface endpoint and a package "
        "mirror (CodeArtifact, or a conda channel in S3) to the VPC, or give the subnet a NAT "
        "route; then suppress studio-without-nat",
    )
