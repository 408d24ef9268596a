"""`EksCluster`: the EKS cluster HyperPod orchestrates through, created here or an existing one.

A new cluster is `aws_eks_v2.Cluster` (a native `AWS::EKS::Cluster`) with EKS Auto Mode off
(HyperPod brings the nodes), authentication mode API (access entries; HyperPod rejects
CONFIG_MAP), a private endpoint unless the file lists public CIDRs, every control-plane log type,
and the core add-ons HyperPod needs before its nodes join. An existing cluster is only referred
to: its ARN is built from its name and the stack's region and account, nothing is looked up.

A new cluster's secrets are envelope-encrypted with a KMS key: the environment's (`kms_key_arn`)
or one created for it, rotated yearly and retained when the stack goes (the secrets it encrypted
are unreadable without it). An existing cluster's encryption is its owner's business.

Either way the construct carries a kubectl provider (a Lambda with kubectl and helm from
`aws-cdk.lambda-layer-kubectl-v33`), through which the Helm chart and the FSx volume manifests are
applied, in the cluster subnets and the cluster security group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import Annotations, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v33 import KubectlV33Layer
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct, IConstruct

from hyperpod_kit.config.pins import ADDONS
from hyperpod_kit.config.schema import EksAddonsConfig, EksConfig
from hyperpod_kit.constructs.functions import (
    ANSWERS_CLOUDFORMATION,
    function_log_group,
    invoked_synchronously,
    log_to,
    plain_variables,
    runs,
    skip_function_checks,
)
from hyperpod_kit.constructs.network import ClusterNetwork
from hyperpod_kit.constructs.provenance import trace, trace_values

CLUSTER_LOGICAL_ID = "EksCluster"
"""Pinned: a new logical id would replace the cluster (and everything running on it)."""
SECRETS_KEY_LOGICAL_ID = "EksSecretsKey"
"""Pinned: a new key would change the cluster's EncryptionConfig, which replaces the cluster."""

ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
CORE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")


def core_addon_versions(addons: EksAddonsConfig) -> dict[str, str | None]:
    """EKS add-on name -> pinned version (None: the default for the cluster's Kubernetes)."""
    return {
        "vpc-cni": addons.vpc_cni,
        "kube-proxy": addons.kube_proxy,
        "coredns": addons.coredns,
        "eks-pod-identity-agent": addons.pod_identity_agent,
    }


# The key under cluster.eks.addons that pins each add-on the stacks install (config/pins.py).
ADDON_KEYS = {addon: key for key, (addon, _) in ADDONS.items()}


class EksCluster(Construct):
    """The EKS cluster of a HyperPod environment.

    Handles:

    - ``cluster``: an `eks.ICluster` with a kubectl provider, for Helm charts and manifests in any
      stack deployed after this one;
    - ``cluster_name``, ``cluster_arn`` (for ``Orchestrator.Eks.ClusterArn``);
    - ``node_security_group_id``: the one security group HyperPod nodes carry (the network's
      cluster group: all traffic to itself, for EFA). A new cluster's control plane carries it too,
      so nodes and control plane reach each other through that self rule and no other rule;
    - ``control_plane_security_group_id``: a security group on the control plane: the node group
      on a new cluster, ``existing_cluster_security_group_id`` on an existing one (or None);
    - ``addons``: the core EKS add-ons (empty for an existing cluster);
    - ``kubectl_role``: the kubectl handler's role (cluster admin through an access entry);
    - ``secrets_key``: the KMS key of a new cluster's secrets (None for an existing cluster);
    - ``grant_hyperpod_nodes(scope, role)``: the HYPERPOD_LINUX access entry, when the file asks;
    - ``kubectl_ready(construct)``: order something applied through kubectl after kubectl can reach
      the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EksConfig,
        name: str,
        network: ClusterNetwork,
        secrets_key_arn: str | None = None,
    ) -> None:
        """``secrets_key_arn``: the environment's key for a new cluster's secrets; None creates
        one."""
        super().__init__(scope, id)
        self.config = config
        self.secrets_key: kms.IKey | None = None
        self.node_security_group_id: str = network.cluster_security_group_id
        # A security group on the control plane (what Studio's kubectl is let in through): a new
        # cluster carries the nodes' group; an existing one the group the file names (None when
        # it names none: validate refuses Studio then).
        self.control_plane_security_group_id: str | None = (
            network.cluster_security_group_id
            if config.existing_cluster_name is None
            else config.existing_cluster_security_group_id
        )
        self.addons: dict[str, eks.CfnAddon] = {}
        self._kubectl_barrier: list[IConstruct] = []
        if config.existing_cluster_name is not None:  # its name reaches every add-on, manifest
            trace_values(self, config, ["existing_cluster_name"])

        subnet_ids = [network.private_subnet_id, *network.control_plane_subnet_ids]
        # Imported from the network's ids: the L1 network places subnets by zone ID, which the L2
        # VPC cannot do offline. No subnets are listed on it (so none is public, and every subnet
        # selected below counts as private); the zone list must only be non-empty.
        vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=network.vpc_id, availability_zones=[network.availability_zone_id]
        )
        subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{i}", sid) for i, sid in enumerate(subnet_ids)
        ]
        for subnet in subnets:
            Annotations.of(subnet).acknowledge_warning(
                "@aws-cdk/aws-ec2:noSubnetRouteTableId",
                "Only the subnet id is used (cluster and kubectl handler placement); the route "
                "tables belong to the network stack.",
            )
        node_sg = ec2.SecurityGroup.from_security_group_id(
            self, "NodeSecurityGroup", network.cluster_security_group_id, mutable=False
        )
        kubectl = eks.KubectlProviderOptions(
            kubectl_layer=KubectlV33Layer(self, "KubectlLayer"),
            private_subnets=subnets,
            security_groups=[node_sg],
        )

        if config.existing_cluster_name is None:
            self._create(
                name,
                vpc=vpc,
                subnets=subnets,
                node_sg=node_sg,
                kubectl=kubectl,
                secrets_key_arn=secrets_key_arn,
            )
        else:
            self._import(config.existing_cluster_name, vpc, kubectl)
        provider = self.cluster.kubectl_provider
        assert provider is not None and provider.role is not None
        self.kubectl_role: iam.IRole = provider.role
        _harden_kubectl_provider(provider)
        log_to(
            [c for c in provider.node.find_all() if isinstance(c, lambda_.Function)],
            function_log_group(self, "KubectlLogs"),
        )

    # --- a new cluster -------------------------------------------------------------------------

    def _create(
        self,
        name: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        node_sg: ec2.ISecurityGroup,
        kubectl: eks.KubectlProviderOptions,
        secrets_key_arn: str | None,
    ) -> None:
        cfg = self.config
        key = self._secrets_key(name, secrets_key_arn)
        endpoint = eks.EndpointAccess.PRIVATE
        if cfg.public_access_cidrs:
            endpoint = eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(
                *(str(c) for c in cfg.public_access_cidrs)
            )
        cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=name,
            version=eks.KubernetesVersion.of(cfg.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            security_group=node_sg,
            endpoint_access=endpoint,
            cluster_logging=list(eks.ClusterLoggingTypes),
            # Auto Mode is aws_eks_v2's default; HyperPod brings its own nodes, so no capacity here.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # Only the roles the file names (and the kubectl handler) administer the cluster, not
            # whoever ran CloudFormation. Create-only: changing it replaces the cluster.
            bootstrap_cluster_creator_admin_permissions=False,
            kubectl_provider_options=kubectl,
            secrets_encryption_key=key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        resource = cluster.node.default_child
        assert isinstance(resource, eks.CfnCluster)
        resource.override_logical_id(CLUSTER_LOGICAL_ID)
        trace(resource, cfg, {
            "Version": "kubernetes_version",
            "ResourcesVpcConfig/PublicAccessCidrs": "public_access_cidrs",
        })  # fmt: skip
        # EKS creates its grant on the key with CloudFormation's credentials when it creates the
        # cluster; the control plane's own calls are covered here as well (as the Terraform EKS
        # module does), before the cluster exists.
        granted = cluster.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="EnvelopeEncryptSecrets",
                actions=["kms:Encrypt", "kms:Decrypt", "kms:DescribeKey", "kms:ListGrants"],
                resources=[key.key_arn],
            )
        )
        assert granted.policy_dependable is not None
        resource.node.add_dependency(granted.policy_dependable)
        self.cluster: eks.ICluster = cast(eks.ICluster, cluster)
        self.cluster_name: str = cluster.cluster_name
        self.cluster_arn: str = cluster.cluster_arn

        for i, arn in enumerate(cfg.admin_role_arns):
            cluster.grant_access(f"Admin{i}", arn, [_admin_policy()])
        for addon, version in core_addon_versions(cfg.addons).items():
            self.addons[addon] = self.add_addon(addon, version)
        self._suppress_cluster_findings(cluster)

    def _secrets_key(self, name: str, arn: str | None) -> kms.IKey:
        """The environment's key, or a key of the cluster's own: rotated yearly and retained when
        the stack deletes it (a deleted key is gone for good after its waiting period, and a
        cluster that still uses it, such as the old one during a replacement, loses its
        secrets)."""
        if arn is not None:
            self.secrets_key = kms.Key.from_key_arn(self, "SecretsKey", arn)
            return self.secrets_key
        key = kms.Key(
            self,
            "SecretsKey",
            description=f"Envelope encryption of the EKS cluster {name}'s secrets (hyperpod-kit)",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        resource = key.node.default_child
        assert isinstance(resource, kms.CfnKey)
        resource.override_logical_id(SECRETS_KEY_LOGICAL_ID)
        self.secrets_key = key
        return key

    def _suppress_cluster_findings(self, cluster: eks.Cluster) -> None:
        role = cluster.role
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="The EKS service role needs AmazonEKSClusterPolicy, the managed policy "
                    "EKS documents for cluster roles and keeps current with the service.",
                    applies_to=[
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy"
                    ],
                )
            ],
        )
        if self.config.public_access_cidrs:
            NagSuppressions.add_resource_suppressions(
                cluster,
                [
                    NagPackSuppression(
                        id="AwsSolutions-EKS1",
                        reason="The public endpoint is on only because the environment file "
                        "lists cluster.eks.public_access_cidrs, and only those CIDRs reach it.",
                    )
                ],
            )

    # --- an existing cluster -------------------------------------------------------------------

    def _import(self, name: str, vpc: ec2.IVpc, kubectl: eks.KubectlProviderOptions) -> None:
        # The kubectl provider needs a cluster to point at, and the imported cluster needs the
        # provider: import twice, the first only to build the provider.
        bare = eks.Cluster.from_cluster_attributes(self, "Existing", cluster_name=name, vpc=vpc)
        provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=bare,
            kubectl_layer=kubectl.kubectl_layer,
            private_subnets=kubectl.private_subnets,
            security_groups=kubectl.security_groups,
        )
        cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", cluster_name=name, vpc=vpc, kubectl_provider=provider
        )
        self.cluster = cluster
        self.cluster_name = name
        handler_role = provider.role
        assert handler_role is not None
        self.cluster_arn = cluster.cluster_arn
        # The handler acts in the cluster through its own access entry (the cluster must use
        # authentication mode API or API_AND_CONFIG_MAP, as HyperPod requires anyway).
        entry = eks.AccessEntry(
            self,
            "KubectlAccess",
            cluster=cluster,
            principal=handler_role.role_arn,
            access_policies=[_admin_policy()],
        )
        self._kubectl_barrier.append(entry)

    # --- what other constructs use -------------------------------------------------------------

    def add_addon(
        self,
        name: str,
        version: str | None,
        *,
        scope: Construct | None = None,
        pod_identity: Sequence[tuple[str, iam.IRole]] = (),
        configuration: str | None = None,
    ) -> eks.CfnAddon:
        """An EKS managed add-on at a pinned version, with Pod Identity associations
        ``(service account, role)``, in ``scope`` (default: this construct)."""
        scope = scope or self
        addon = eks.CfnAddon(
            scope,
            "".join(p.capitalize() for p in name.split("-")) + "Addon",
            addon_name=name,
            cluster_name=self.cluster_name,
            addon_version=version,
            # EKS installs self-managed vpc-cni, kube-proxy and coredns with a new cluster; the
            # managed add-on takes them over.
            resolve_conflicts="OVERWRITE",
            configuration_values=configuration,
            pod_identity_associations=[
                eks.CfnAddon.PodIdentityAssociationProperty(
                    service_account=account, role_arn=role.role_arn
                )
                for account, role in pod_identity
            ]
            or None,
        )
        addon.apply_removal_policy(RemovalPolicy.DESTROY)
        field = ADDON_KEYS.get(name)
        if field is not None:  # its version, as the file (or its lock) pins it
            trace(addon, self.config.addons, {"AddonVersion": field})
        return addon

    def kubectl_ready(self, construct: IConstruct) -> None:
        """Apply ``construct`` (a manifest, a chart) only once kubectl can act in the cluster.

        A new cluster's provider orders this itself; an existing one's waits for its access entry.
        """
        for barrier in self._kubectl_barrier:
            construct.node.add_dependency(barrier)

    def grant_hyperpod_nodes(self, scope: Construct, role: iam.IRole) -> eks.AccessEntry | None:
        """The HYPERPOD_LINUX access entry for the HyperPod execution ``role``, in ``scope`` (the
        cluster stack, which owns the role), when ``cluster.eks.hyperpod_access_entry`` is on.

        Off by default: whether HyperPod creates this entry itself is not documented, and a second
        entry for the same principal fails to create. Returns the entry, so the HyperPod cluster
        can be made to depend on it, or None.
        """
        if not self.config.hyperpod_access_entry:
            return None
        return eks.AccessEntry(
            scope,
            "HyperPodNodesAccess",
            cluster=self.cluster,
            principal=role.role_arn,
            access_policies=[],  # HYPERPOD_LINUX entries take no access policies
            access_entry_type=eks.AccessEntryType.HYPERPOD_LINUX,
        )


def _admin_policy() -> eks.IAccessPolicy:
    return eks.AccessPolicy.from_access_policy_name(
        ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
    )


def pod_identity_role(scope: Construct, id: str, *, description: str) -> iam.Role:
    """A role that EKS Pod Identity hands to a service account's pods."""
    return iam.Role(
        scope,
        id,
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
        description=description,
    )


LAMBDA_MANAGED_POLICIES = (
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
)


def _harden_kubectl_provider(provider: IConstruct) -> None:
    """Tighten CDK's kubectl provider (aws_eks_v2) and give its findings their reasons.

    - The handler gets only the Lambda basic and VPC execution policies: aws_eks_v2 also attaches
      ECR read-only and, behind a template Condition, ECR Public read-only, which helm needs only
      for charts in OCI registries; charts here come from S3 assets. This also keeps the template
      free of Conditions.
    - Each function's DependsOn keeps only the role's policy: the role is already a GetAtt
      (cfn-lint W3005).
    """
    for fn in [c for c in provider.node.find_all() if isinstance(c, lambda_.Function)]:
        role = fn.role
        assert role is not None
        policy = role.node.try_find_child("DefaultPolicy")
        resource = fn.node.default_child
        assert isinstance(resource, lambda_.CfnFunction)
        if policy is not None:
            policy_resource = policy.node.default_child
            assert isinstance(policy_resource, iam.CfnPolicy)
            resource.add_override("DependsOn", [policy_resource.logical_id])
        else:
            resource.add_deletion_override("DependsOn")
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason="CDK's kubectl provider functions run in the VPC: the Lambda basic and "
                    "VPC execution managed policies grant only their logs and ENIs.",
                    applies_to=[
                        f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"
                        for name in LAMBDA_MANAGED_POLICIES
                    ],
                )
            ],
        )
        if fn.node.id == "Handler":
            NagSuppressions.add_resource_suppressions(
                fn,
                [
                    NagPackSuppression(
                        id="AwsSolutions-L1",
                        reason="aws-cdk-lib (pinned in requirements.txt) picks the Python runtime "
                        "of its kubectl handler, to match the kubectl layer, and moves it with "
                        "each release.",
                    )
                ],
            )
            fn.node.try_remove_child("HasEcrPublic")
            role_resource = role.node.default_child
            assert isinstance(role_resource, iam.CfnRole)
            role_resource.managed_policy_arns = [
                iam.ManagedPolicy.from_aws_managed_policy_name(name).managed_policy_arn
                for name in LAMBDA_MANAGED_POLICIES
            ]
        elif policy is not None:  # the custom-resource framework in front of the handler
            NagSuppressions.add_resource_suppressions(
                policy,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason="The custom-resource framework invokes the kubectl handler, any "
                        "of its versions (<handler arn>:*), and nothing else.",
                        applies_to=[
                            RegexAppliesTo(
                                regex=r"/^Resource::<.*KubectlProviderHandler.*\.Arn>:\*$/"
                            )
                        ],
                    )
                ],
                apply_to_children=True,  # the policy's CfnPolicy
            )
        _skip_kubectl_function_checks(fn)


def _skip_kubectl_function_checks(fn: lambda_.Function) -> None:
    """checkov's Lambda checks that do not apply to the kubectl provider's functions (both run in
    the VPC, so the VPC check passes; docs/security.md)."""
    if fn.node.id == "Handler":
        skip_function_checks(
            fn,
            concurrency=runs(
                "CDK's kubectl handler applies one Helm chart or manifest per call, only while a "
                "deploy changes one"
            ),
            dead_letter=invoked_synchronously("the provider framework's function in front of it"),
            variables=plain_variables(
                "its one variable, AWS_STS_REGIONAL_ENDPOINTS=regional, is a setting"
            ),
        )
    else:
        skip_function_checks(
            fn,
            concurrency=runs(
                "CDK's provider framework in front of the kubectl handler takes one event per "
                "Kubernetes resource change"
            ),
            dead_letter=ANSWERS_CLOUDFORMATION,
            variables=plain_variables(
                "its one variable, USER_ON_EVENT_FUNCTION_ARN, is the kubectl handler's ARN"
            ),
        )
