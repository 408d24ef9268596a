"""`HyperPodTrainingOperator`: the add-ons that run HyperPodPyTorchJob, after the HyperPod cluster.

``amazon-sagemaker-hyperpod-training-operator`` runs HyperPodPyTorchJob (the job templates'
kind). It is not Kubeflow's training operator, which HyperPod's Helm chart installs for
PyTorchJob. It needs cert-manager (EKS add-on ``cert-manager``), the ``eks-pod-identity-agent``
add-on, and a Pod Identity association for its controller's service account with a role that has
``AmazonSageMakerHyperPodTrainingOperatorAccess``. In a VPC without internet access it also needs
the ``sagemaker.api`` and ``eks-auth`` interface endpoints (the network stack's
``interface_endpoints: true``).
"""

from __future__ import annotations

import json

from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from hyperpod_kit.config.schema import EksAddonsConfig
from hyperpod_kit.constructs.eks import EksCluster, pod_identity_role
from hyperpod_kit.constructs.eks_chart_folder import HYPERPOD_HEALTH_TAINT

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-training-operator"
OPERATOR_SERVICE_ACCOUNT = "hp-training-operator-controller-manager"
OPERATOR_POLICY = "AmazonSageMakerHyperPodTrainingOperatorAccess"
CERT_MANAGER_ADDON = "cert-manager"


def cert_manager_configuration() -> str:
    """cert-manager's pods tolerate HyperPod's health-check taint: the add-on is created right
    after the HyperPod cluster, while deep health checks may still hold every node."""
    tolerations = [dict(HYPERPOD_HEALTH_TAINT)]
    return json.dumps(
        {
            "tolerations": tolerations,
            "webhook": {"tolerations": tolerations},
            "cainjector": {"tolerations": tolerations},
        },
        sort_keys=True,
    )


class HyperPodTrainingOperator(Construct):
    """cert-manager, then the HyperPod training operator with its Pod Identity role.

    Handles: ``cert_manager`` and ``operator`` (the add-ons), ``role``.
    """

    def __init__(
        self, scope: Construct, id: str, *, eks_cluster: EksCluster, versions: EksAddonsConfig
    ) -> None:
        super().__init__(scope, id)
        self.cert_manager = eks_cluster.add_addon(
            CERT_MANAGER_ADDON,
            versions.cert_manager,
            scope=self,
            configuration=cert_manager_configuration(),
        )
        self.role = pod_identity_role(
            self, "OperatorRole", description="HyperPod training operator (HyperPodPyTorchJob)"
        )
        self.role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name(OPERATOR_POLICY)
        )
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason=f"{OPERATOR_POLICY} is the policy AWS documents for the training "
                    "operator add-on and keeps in step with what the operator calls.",
                    applies_to=[f"Policy::arn:<AWS::Partition>:iam::aws:policy/{OPERATOR_POLICY}"],
                )
            ],
        )
        self.operator = eks_cluster.add_addon(
            OPERATOR_ADDON,
            versions.training_operator,
            scope=self,
            pod_identity=[(OPERATOR_SERVICE_ACCOUNT, self.role)],
        )
        self.operator.node.add_dependency(self.cert_manager)
