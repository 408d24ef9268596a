"""The one AWS facade of the command line (`validate --aws`, `status`, `logs`, `estimate --aws`),
and the checks that need an AWS account.

`AwsFacade` resolves credentials and the region in one place (`resolve_session`: boto3's chain,
the environment file's region; AWS_ENDPOINT_URL reaches a local moto server in tests), gives every
client the same retries (botocore's standard mode) and timeouts, reads every page (`pages`), and
turns a failed call into `AwsUnavailableError` (or None, for the error codes that mean "not
there"). Offline validation stays the default: the `--aws` checks add what only the account knows
(whether the AZ ID exists for it, whether its HyperPod instance quotas cover the instance groups,
whether it offers the Kubernetes, EKS add-on, Aurora MySQL and Grafana versions the file and the
tables pin: the lists the dated tables under `facts/` can only snapshot),
and missing credentials or a denied call never fail validation: they become one warning that
says which check was skipped and why.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

# the error of every call here, in a module of its own (the Kubernetes client raises it too),
# and still importable from here: the explicit re-export
from hyperpod_kit.config.aws_errors import AwsUnavailableError as AwsUnavailableError  # noqa: PLC0414
from hyperpod_kit.config.derived import (
    accounting_engine_version,
    prometheus_enabled,
    slurm_accounting,
)
from hyperpod_kit.config.facts import accounting_facts
from hyperpod_kit.config.findings import Finding, Level
from hyperpod_kit.config.pins import addons_of, resolved_pins
from hyperpod_kit.config.schema import EnvironmentConfig

if TYPE_CHECKING:
    from hyperpod_kit.config.kubernetes_api import KubernetesApi

DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnrecognizedClient",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
}


# Every client retries throttling and transient errors the same way (botocore's "standard" mode:
# exponential backoff with jitter), and no call waits on a dead network for long.
CLIENT_CONFIG = Config(
    retries={"max_attempts": 6, "mode": "standard"}, connect_timeout=10, read_timeout=30
)


def resolve_session(region: str, *, profile: str | None = None) -> boto3.Session:
    """The one place where credentials and the region are resolved: boto3's own chain (the
    environment, AWS_PROFILE or `profile`, SSO, the instance role) for credentials; the region is
    the environment file's, never AWS_REGION's. AWS_ENDPOINT_URL (a local moto server in tests)
    is honoured by botocore itself."""
    return boto3.Session(region_name=region, profile_name=profile)


class AwsFacade:
    """The only place that calls AWS from the command line (`validate --aws`, `status`, `logs`);
    tests give it a moto server (AWS_ENDPOINT_URL) or stub its clients (`client()` returns the
    same client each time, so a botocore Stubber attached to it sees every call)."""

    def __init__(self, region: str, *, session: boto3.Session | None = None) -> None:
        self.region = region
        self._session = session or resolve_session(region)
        self._clients: dict[str, Any] = {}

    def has_credentials(self) -> bool:
        """Whether boto3's chain finds credentials (without calling AWS)."""
        try:
            return self._session.get_credentials() is not None
        except BotoCoreError:
            return False

    def account_id(self) -> str:
        """The account of the credentials (sts:GetCallerIdentity, which no policy can deny)."""
        sts = self.client("sts")
        return str(self.call("sts:GetCallerIdentity", sts.get_caller_identity)["Account"])

    def client(self, service: str, *, region: str | None = None) -> Any:
        """The service's client in the environment's region, or in `region` (a service with
        endpoints in a few regions only, such as the Pricing API); one per service and region."""
        region = region or self.region
        key = service if region == self.region else f"{service}@{region}"
        if key not in self._clients:
            self._clients[key] = self._session.client(  # type: ignore[call-overload]
                service, region_name=region, config=CLIENT_CONFIG
            )
        return self._clients[key]

    def call(
        self,
        what: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        missing: Collection[str] = (),
        **kwargs: Any,
    ) -> Any:
        """`fn(*args, **kwargs)`; None when the error code is one of `missing` (the thing asked
        for does not exist); any other failure is `AwsUnavailableError` naming `what`."""
        try:
            return fn(*args, **kwargs)
        except NoCredentialsError:
            raise AwsUnavailableError(f"{what}: no AWS credentials", "NoCredentials") from None
        except ClientError as e:
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in missing:
                return None
            if code in DENIED:
                raise AwsUnavailableError(f"{what}: {code}", code) from None
            detail = f"{code}: {error.get('Message', '')}".strip(": ") if code else str(e)
            raise AwsUnavailableError(f"{what}: {detail}", code) from None
        except BotoCoreError as e:
            raise AwsUnavailableError(f"{what}: {e}") from None

    def pages(
        self,
        service: str,
        operation: str,
        key: str,
        *,
        limit: int | None = None,
        missing: Collection[str] = (),
        region: str | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Every item under `key` of every page of `operation` (botocore's paginator where the
        service model has one, NextToken otherwise), at most `limit` of them; [] when the error
        code is one of `missing`."""
        client = self.client(service, region=region)
        what = f"{service}:{''.join(w.capitalize() for w in operation.split('_'))}"

        def fetch() -> list[Any]:
            items: list[Any] = []
            if client.can_paginate(operation):
                pages = client.get_paginator(operation).paginate(**kwargs)
            else:
                pages = _next_token_pages(getattr(client, operation), kwargs)
            for page in pages:
                items += page.get(key, [])
                if limit is not None and len(items) >= limit:
                    return items[:limit]
            return items

        result: list[Any] | None = self.call(what, fetch, missing=missing)
        return [] if result is None else result

    def price_list(
        self, service_code: str, *, term_match: dict[str, str], contains: dict[str, str],
        endpoint_region: str,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The AWS Price List's products that match (pricing:GetProducts, every page, served from
        `endpoint_region`), each PriceList item (a JSON string in the API) parsed."""
        filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in term_match.items()]
        filters += [{"Type": "CONTAINS", "Field": k, "Value": v} for k, v in contains.items()]
        items = self.pages(
            "pricing", "get_products", "PriceList", region=endpoint_region,
            ServiceCode=service_code, Filters=filters, FormatVersion="aws_v1",
        )  # fmt: skip
        products: list[dict[str, Any]] = []
        for item in items:
            try:
                row = json.loads(item) if isinstance(item, str) else item
            except ValueError:
                raise AwsUnavailableError(
                    f"pricing:GetProducts {service_code}: a PriceList item is not JSON"
                ) from None
            if isinstance(row, dict):
                products.append(row)
        return products

    def kubernetes(self, cluster_name: str) -> KubernetesApi:
        """The Kubernetes API of an EKS cluster as the caller's IAM identity: the endpoint and
        CA from eks:DescribeCluster, a bearer token as `aws eks get-token` makes it (a presigned
        sts:GetCallerIdentity for the cluster) for each request. A refusal (HTTP 401/403: no
        access entry for the identity) or no route is `AwsUnavailableError` (its `code` the
        HTTP status)."""
        from hyperpod_kit.config.kubernetes_api import KubernetesApi

        eks = self.client("eks")
        found = self.call("eks:DescribeCluster", eks.describe_cluster, name=cluster_name)
        cluster = found.get("cluster", {})
        endpoint, ca = cluster.get("endpoint"), cluster.get("certificateAuthority", {}).get("data")
        if not endpoint:
            raise AwsUnavailableError(f"eks:DescribeCluster {cluster_name}: no endpoint yet")
        return KubernetesApi(endpoint, lambda: self._eks_token(cluster_name), ca, name=cluster_name)

    def kubernetes_get(self, cluster_name: str, path: str) -> Any:
        """GET `path` of an EKS cluster's Kubernetes API (its JSON answer): `kubernetes`."""
        return self.kubernetes(cluster_name).get(path)

    def _eks_token(self, cluster_name: str) -> str:
        """EKS's bearer token: "k8s-aws-v1." and the base64url of a presigned
        sts:GetCallerIdentity URL signed with the header x-k8s-aws-id: <cluster> (its own STS
        client, so the header reaches no other call)."""
        sts = self._session.client("sts", region_name=self.region, config=CLIENT_CONFIG)

        def cluster_header(request: Any, **_: Any) -> None:
            request.headers["x-k8s-aws-id"] = cluster_name

        sts.meta.events.register("before-sign.sts.GetCallerIdentity", cluster_header)
        url = self.call("sts:GetCallerIdentity (presigned)", sts.generate_presigned_url,
                        "get_caller_identity", Params={}, ExpiresIn=60,
                        HttpMethod="GET")  # fmt: skip
        return "k8s-aws-v1." + base64.urlsafe_b64encode(str(url).encode()).decode().rstrip("=")

    def deployed_versions(
        self, cluster_name: str, eks_cluster: str | None, addons: Collection[str]
    ) -> tuple[dict[str, Any] | None, dict[str, str]]:
        """The cluster as DescribeCluster has it (None: no such cluster) and, on EKS, the
        version of each add-on installed (eks:DescribeAddon; missing ones left out), for
        `hyperpod-kit lock --from-deployed`."""
        sm = self.client("sagemaker")
        cluster = self.call(
            "sagemaker:DescribeCluster",
            sm.describe_cluster,
            ClusterName=cluster_name,
            missing=("ResourceNotFound", "ValidationException"),
        )
        versions: dict[str, str] = {}
        if eks_cluster is not None:
            client = self.client("eks")
            for addon in addons:
                found = self.call(
                    "eks:DescribeAddon",
                    client.describe_addon,
                    clusterName=eks_cluster,
                    addonName=addon,
                    missing=("ResourceNotFoundException",),
                )
                if found is not None and found.get("addon", {}).get("addonVersion"):
                    versions[addon] = str(found["addon"]["addonVersion"])
        return cluster, versions

    def availability_zone_ids(self) -> set[str]:
        ec2 = self.client("ec2")
        zones = self.call("ec2:DescribeAvailabilityZones", ec2.describe_availability_zones)
        return {z["ZoneId"] for z in zones["AvailabilityZones"]}

    def cluster_instance_quotas(self) -> dict[str, float]:
        """HyperPod quotas by instance type (quota names are '<type> for cluster usage')."""
        quotas = self.client("service-quotas")

        def fetch() -> dict[str, float]:
            found: dict[str, float] = {}
            for page in quotas.get_paginator("list_service_quotas").paginate(
                ServiceCode="sagemaker"
            ):
                for q in page["Quotas"]:
                    name = q.get("QuotaName", "")
                    if name.endswith(" for cluster usage"):
                        found[name.removesuffix(" for cluster usage")] = float(q["Value"])
            return found

        result: dict[str, float] = self.call("service-quotas:ListServiceQuotas", fetch)
        return result

    # --- the values of finite sets AWS changes (the account's lists beside the dated tables) ---

    def addon_versions(self, addon: str, kubernetes_version: str) -> list[str]:
        """The versions of an EKS add-on EKS offers for a Kubernetes version
        (eks:DescribeAddonVersions), newest first as EKS lists them."""
        found: list[str] = []
        for row in self.pages(
            "eks",
            "describe_addon_versions",
            "addons",
            addonName=addon,
            kubernetesVersion=kubernetes_version,
        ):
            for v in row.get("addonVersions", []):
                compatible = {c.get("clusterVersion") for c in v.get("compatibilities", [])}
                if v.get("addonVersion") and (not compatible or kubernetes_version in compatible):
                    found.append(str(v["addonVersion"]))
        return found

    def kubernetes_versions(self) -> dict[str, str]:
        """EKS's Kubernetes versions with their status (STANDARD_SUPPORT, EXTENDED_SUPPORT,
        UNSUPPORTED), from eks:DescribeClusterVersions with every version included."""
        rows = self.pages("eks", "describe_cluster_versions", "clusterVersions", includeAll=True)
        return {
            str(r["clusterVersion"]): str(r.get("versionStatus") or r.get("status") or "")
            for r in rows
            if r.get("clusterVersion")
        }

    def engine_versions(self, engine: str) -> list[str]:
        """The engine versions RDS offers in the region (rds:DescribeDBEngineVersions)."""
        rows = self.pages("rds", "describe_db_engine_versions", "DBEngineVersions", Engine=engine)
        return [str(r["EngineVersion"]) for r in rows if r.get("EngineVersion")]

    def grafana_versions(self) -> list[str]:
        """The Grafana versions a new Managed Grafana workspace takes (grafana:ListVersions)."""
        return [str(v) for v in self.pages("grafana", "list_versions", "grafanaVersions")]


def _next_token_pages(operation: Callable[..., Any], kwargs: dict[str, Any]) -> Iterator[Any]:
    token: str | None = None
    while True:
        page = operation(**kwargs, **({"NextToken": token} if token else {}))
        yield page
        token = page.get("NextToken")
        if not token:
            return


AwsCheck = Callable[[EnvironmentConfig, AwsFacade], Iterator[Finding]]


def check_availability_zone(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    zones = aws.availability_zone_ids()
    if config.availability_zone_id not in zones:
        yield Finding(
            Level.ERROR,
            "availability_zone_id",
            f"{config.availability_zone_id} is not an availability zone of this account in "
            f"{config.region}",
            f"use one of {', '.join(sorted(zones))}",
        )


def check_instance_quotas(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    quotas = aws.cluster_instance_quotas()
    wanted = Counter[str]()
    first: dict[str, int] = {}
    for i, group in enumerate(config.cluster.instance_groups):
        # a flexible group asks for its first type first: its quota is the one that counts
        wanted[group.primary_type] += group.instance_count
        first.setdefault(group.primary_type, i)
    for instance_type, count in sorted(wanted.items()):
        at = f"cluster.instance_groups[{first[instance_type]}].instance_count"
        quota = quotas.get(instance_type)
        if quota is None:
            yield Finding(
                Level.WARNING,
                at,
                f"no HyperPod quota found for {instance_type}",
                "check Service Quotas > Amazon SageMaker > '<type> for cluster usage'",
            )
        elif count > quota:
            yield Finding(
                Level.ERROR,
                at,
                f"{count} x {instance_type} exceeds this account's HyperPod quota of {quota:g}",
                "request a quota increase in Service Quotas, or lower instance_count",
            )


def _new_eks_version(config: EnvironmentConfig) -> str | None:
    """The Kubernetes version of a new EKS cluster (None: Slurm, or an existing cluster)."""
    eks = config.cluster.eks
    if config.orchestrator != "eks" or eks.existing_cluster_name is not None:
        return None
    return eks.kubernetes_version


def _listed(values: list[str], newest: int = 3) -> str:
    return ", ".join(values[:newest]) + (" ..." if len(values) > newest else "")


def check_kubernetes_version(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    version = _new_eks_version(config)
    if version is None:
        return
    known = aws.kubernetes_versions()
    status = known.get(version)
    if status is None or status == "UNSUPPORTED":
        offered = sorted((v for v, s in known.items() if s != "UNSUPPORTED"), reverse=True)
        yield Finding(
            Level.ERROR,
            "cluster.eks.kubernetes_version",
            f"EKS creates no cluster on Kubernetes {version} in {config.region}"
            + (" (unsupported)" if status else "")
            + " (eks:DescribeClusterVersions)",
            f"use one of {_listed(offered)}" if offered else "ask EKS which versions it offers",
        )


def check_addon_versions(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    version = _new_eks_version(config)
    if version is None:
        return
    pins = resolved_pins(config)
    for key, (addon, _) in addons_of(config).items():
        pin = pins.get(f"cluster.eks.addons.{key}")
        if pin is None or pin.value is None:
            continue  # left to EKS: it picks a version of the cluster's
        offered = aws.addon_versions(addon, version)
        if pin.value not in offered:
            yield Finding(
                Level.ERROR,
                f"cluster.eks.addons.{key}",
                f"EKS offers no {addon} {pin.value} for Kubernetes {version} "
                "(eks:DescribeAddonVersions)",
                f"use one of {_listed(offered)}"
                if offered
                else f"EKS offers no {addon} for Kubernetes {version}: choose another version",
            )


def check_engine_version(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    if not slurm_accounting(config):
        return
    version = accounting_engine_version(config)
    engine = str(accounting_facts()["engine"])
    offered = aws.engine_versions(engine)
    if version not in offered:
        yield Finding(
            Level.ERROR,
            "cluster.slurm.accounting.engine_version",
            f"RDS offers no {engine} {version} in {config.region} (rds:DescribeDBEngineVersions)",
            f"use one of {_listed(sorted(offered, reverse=True))}"
            if offered
            else f"RDS offers no {engine} in this region",
        )


def check_grafana_version(config: EnvironmentConfig, aws: AwsFacade) -> Iterator[Finding]:
    grafana = config.monitoring.prometheus.grafana
    if not (prometheus_enabled(config) and grafana.enabled):
        return
    offered = aws.grafana_versions()
    if grafana.version not in offered:
        yield Finding(
            Level.ERROR,
            "monitoring.prometheus.grafana.version",
            f"Amazon Managed Grafana offers no Grafana {grafana.version} for a new workspace "
            "(grafana:ListVersions)",
            f"use one of {', '.join(offered)}" if offered else "ask the service which it offers",
        )


AWS_CHECKS: dict[str, AwsCheck] = {
    "aws-availability-zone": check_availability_zone,
    "aws-instance-quotas": check_instance_quotas,
    "aws-kubernetes-version": check_kubernetes_version,
    "aws-addon-versions": check_addon_versions,
    "aws-engine-version": check_engine_version,
    "aws-grafana-version": check_grafana_version,
}


def run_aws_checks(config: EnvironmentConfig, aws: AwsFacade) -> list[Finding]:
    findings: list[Finding] = []
    for name, check in AWS_CHECKS.items():
        try:
            findings += [
                Finding(f.level, f.path, f.message, f.hint, f.line, check=name)
                for f in check(config, aws)
            ]
        except AwsUnavailableError as e:
            findings.append(
                Finding(
                    Level.WARNING,
                    "(aws)",
                    f"check {name} skipped: {e}",
                    "run with credentials that may call it, or leave out --aws",
                    check=name,
                )
            )
    return findings
