"""`LustreClaim`: the environment's FSx for Lustre file system as a volume claim on EKS.

The FSx CSI driver (EKS add-on ``aws-fsx-csi-driver``, authenticated through EKS Pod Identity, as
AWS documents for the add-on) and a statically provisioned volume: a PersistentVolume bound to
the file system (its id, DNS name and mount name, handles of the storage stack) and the claim
``fsx-claim`` in the job's namespace, which the HyperPodPyTorchJob mounts at /fsx. Both are
built as data and applied through the kubectl provider.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct, IConstruct

from hyperpod_kit.constructs.eks import EksCluster, pod_identity_role
from hyperpod_kit.constructs.lustre import LustreFileSystem
from hyperpod_kit.naming import FSX_CLAIM, fsx_volume_name

CSI_ADDON = "aws-fsx-csi-driver"
CSI_DRIVER = "fsx.csi.aws.com"
CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"


class LustreClaim(Construct):
    """The FSx CSI driver and the claim ``fsx-claim`` in ``namespace`` (created if missing).

    Handles: ``addon`` (the CSI driver), ``role`` (its Pod Identity role), ``volume_name`` (the
    PersistentVolume), ``claim_name``, ``namespace``, ``manifest`` (PV and claim, for ordering),
    ``team_claims`` (namespace -> the manifest of the claim ``claim_in`` made there).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster,
        lustre: LustreFileSystem,
        namespace: str,
        capacity_gib: int,
        environment: str,
        driver_version: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.namespace = namespace
        self.claim_name = FSX_CLAIM
        # Cluster-scoped: the environment's name keeps two environments on one cluster apart.
        self.volume_name = fsx_volume_name(environment, namespace)

        # A static volume needs no FSx API call from the driver (it mounts with the Lustre client
        # on the node); the controller only looks file systems up. Creating file systems (dynamic
        # provisioning, AmazonFSxFullAccess in AWS's guide) is not something this environment does.
        self.role = pod_identity_role(
            self, "CsiDriverRole", description="FSx CSI driver controller (static volumes)"
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["fsx:DescribeFileSystems"], resources=["*"])
        )
        policy = self.role.node.try_find_child("DefaultPolicy")
        assert policy is not None
        NagSuppressions.add_resource_suppressions(
            policy,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="fsx:DescribeFileSystems is read-only and does not support "
                    "resource-level permissions, so its resource is *.",
                    applies_to=["Resource::*"],
                )
            ],
            apply_to_children=True,
        )
        self.addon = eks_cluster.add_addon(
            CSI_ADDON,
            driver_version,
            scope=self,
            pod_identity=[(CSI_SERVICE_ACCOUNT, self.role)],
        )

        ns = eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=eks_cluster.cluster,
            manifest=[namespace_manifest(namespace)],
            # Never deleted, not even when the namespace setting changes: it holds the users'
            # jobs, and it may have existed before this environment.
            prune=False,
            removal_policy=RemovalPolicy.RETAIN,
        )
        eks_cluster.kubectl_ready(ns)
        size = f"{capacity_gib}Gi"
        self.manifest = eks.KubernetesManifest(
            self,
            "Volume",
            cluster=eks_cluster.cluster,
            manifest=[
                persistent_volume(
                    self.volume_name,
                    claim=(namespace, FSX_CLAIM),
                    size=size,
                    file_system_id=lustre.file_system_id,
                    dns_name=lustre.dns_name,
                    mount_name=lustre.mount_name,
                ),
                claim(FSX_CLAIM, namespace=namespace, volume=self.volume_name, size=size),
            ],
        )
        self.manifest.node.add_dependency(ns)
        self.manifest.node.add_dependency(self.addon)
        eks_cluster.kubectl_ready(self.manifest)
        self._eks_cluster = eks_cluster
        self._lustre = lustre
        self._size = size
        self._environment = environment
        self.team_claims: dict[str, eks.KubernetesManifest] = {}

    def claim_in(self, namespace: str, *, after: IConstruct) -> eks.KubernetesManifest:
        """The same claim ``fsx-claim`` in a namespace someone else makes (a task governance
        team's ``hyperpod-ns-<team>``, which HyperPod creates with the team's compute allocation):
        applied after ``after`` (that allocation). The namespace is applied too, with ``kubectl
        apply`` (it exists by then, or HyperPod has not made it yet), and never deleted: HyperPod
        owns it. Returns the claim's manifest (its PersistentVolume and claim)."""
        eks_cluster = self._eks_cluster
        volume = fsx_volume_name(self._environment, namespace)
        ns = eks.KubernetesManifest(
            self,
            f"Namespace-{namespace}",
            cluster=eks_cluster.cluster,
            manifest=[namespace_manifest(namespace)],
            overwrite=True,
            prune=False,
            removal_policy=RemovalPolicy.RETAIN,
        )
        ns.node.add_dependency(after)
        eks_cluster.kubectl_ready(ns)
        manifest = eks.KubernetesManifest(
            self,
            f"Volume-{namespace}",
            cluster=eks_cluster.cluster,
            manifest=[
                persistent_volume(
                    volume,
                    claim=(namespace, FSX_CLAIM),
                    size=self._size,
                    file_system_id=self._lustre.file_system_id,
                    dns_name=self._lustre.dns_name,
                    mount_name=self._lustre.mount_name,
                ),
                claim(FSX_CLAIM, namespace=namespace, volume=volume, size=self._size),
            ],
        )
        manifest.node.add_dependency(ns)
        manifest.node.add_dependency(self.addon)
        eks_cluster.kubectl_ready(manifest)
        self.team_claims[namespace] = manifest
        return manifest


def namespace_manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def persistent_volume(
    name: str,
    *,
    claim: tuple[str, str],
    size: str,
    file_system_id: str,
    dns_name: str,
    mount_name: str,
) -> dict[str, Any]:
    """A PersistentVolume on an existing FSx for Lustre file system, pre-bound to one claim.

    ``Retain``: deleting the volume object never touches the file system or its data.
    """
    namespace, claim_name = claim
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "mountOptions": ["flock"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": claim_name},
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": file_system_id,
                "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
            },
        },
    }


def claim(name: str, *, namespace: str, volume: str, size: str) -> dict[str, Any]:
    """A claim bound to one named PersistentVolume (no storage class: nothing is provisioned)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": size}},
        },
    }
