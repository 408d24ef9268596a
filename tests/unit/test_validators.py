"""Semantic validators, one table of good and bad values per registered check.

Each bad row names every finding that its validator must give (level, path, a piece of the message,
the exact hint); each good row must give no error and no warning. Configs are the default
environment with overrides, so a row says only what it changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.config import ConfigError, EnvironmentConfig, Finding, Level
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.facts import api_constraints
from hyperpod_kit.config.validators import REGISTRY, run_validators, validator
from tests.conftest import WriteEnv, default_data, merge

# --- building configs ---------------------------------------------------------------------------

EXISTING_VPC = {
    "vpc_id": "vpc-0123456789abcdef0",
    "private_subnet_id": "subnet-0123456789abcdef0",
    "cidr": "10.0.0.0/16",
}
EXISTING_FS = {
    "file_system_id": "fs-0123456789abcdef0",
    "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    "mount_name": "abcdefgh",
}
DRAS = "storage.lustre.data_repository_associations"
KMS_KEY = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
GROUPS = "cluster.instance_groups"


def config_with(overrides: dict[str, Any]) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(merge(default_data(), overrides))


def lustre(**kw: Any) -> dict[str, Any]:
    return {"storage": {"lustre": kw}}


def metadata(mode: str, iops: int | None = None) -> dict[str, Any]:
    return lustre(metadata={"mode": mode, "iops": iops} if iops is not None else {"mode": mode})


def dras(*pairs: tuple[str, str]) -> dict[str, Any]:
    items = [{"file_system_path": p, "s3_prefix": s} for p, s in pairs]
    return lustre(data_repository_associations=items)


def bucket(**kw: Any) -> dict[str, Any]:
    return {"storage": {"bucket": kw}}


def vpc(**kw: Any) -> dict[str, Any]:
    return {"network": {"vpc": kw}}


def existing_vpc(*, endpoints: bool = False) -> dict[str, Any]:
    return {
        "network": {"vpc": None, "existing_vpc": EXISTING_VPC, "interface_endpoints": endpoints}
    }


def group(name: str, role: str, count: int = 1, itype: str = "ml.m5.xlarge") -> dict[str, Any]:
    return {"name": name, "role": role, "instance_type": itype, "instance_count": count}


def groups(*items: dict[str, Any], orchestrator: str = "slurm") -> dict[str, Any]:
    return {"orchestrator": orchestrator, "cluster": {"instance_groups": list(items)}}


CONTROLLER = group("controller", "controller")
LOGIN = group("login", "login")
COMPUTE = group("compute", "compute", 2, "ml.g5.8xlarge")


def job(**kw: Any) -> dict[str, Any]:
    return {"trainer": {"job": kw}}


def elastic(job_kw: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """An elastic job on EKS (4 workers) with one rank per node unless `job_kw` says otherwise."""
    return merge(eks_network(), job(**({"processes_per_node": 1} | (job_kw or {})), elastic=kw))


def region(name: str, az: str | None = None) -> dict[str, Any]:
    return {"region": name, "availability_zone_id": az} if az else {"region": name}


def allow(**kw: list[str]) -> dict[str, Any]:
    return {"validation": {f"allow_{k}": v for k, v in kw.items()}}


USW2 = ["usw2-az1", "usw2-az2", "usw2-az3", "usw2-az4"]
USW1 = ["usw1-az1", "usw1-az2", "usw1-az3"]
CAC1 = ["cac1-az1", "cac1-az2", "cac1-az4"]
WORKERS = {
    "name": "workers",
    "role": "worker",
    "instance_type": "ml.g5.12xlarge",
    "instance_count": 4,
}


CHART = Path(__file__).resolve().parents[1] / "data" / "hyperpod-helm-chart"
NODE_PACKAGES = Path(__file__).resolve().parents[1] / "data" / "node-packages"


def node_setup(**kw: Any) -> dict[str, Any]:
    return {"cluster": {"node_setup": kw}}


# An existing VPC without a NAT: its route tables (the S3 gateway endpoint), interface endpoints.
OFFLINE = {
    "network": {
        "vpc": None,
        "existing_vpc": {**EXISTING_VPC, "route_table_ids": ["rtb-0123456789abcdef0"]},
        "interface_endpoints": True,
        "internet": False,
    }
}


# monitoring.prometheus
METRICS_PACKAGES = Path(__file__).resolve().parents[1] / "data" / "metrics-packages"
AMP_ARN = "arn:aws:aps:us-west-2:111122223333:workspace/ws-0123abcd"
GPU_COMPUTE = group("gpu", "compute", 2, "ml.p5.48xlarge")
CPU_ONLY = groups(CONTROLLER, group("cpu", "compute", 2, "ml.m5.xlarge"))


def prometheus(**kw: Any) -> dict[str, Any]:
    return {"monitoring": {"prometheus": {"enabled": True, **kw}}}


def grafana(**kw: Any) -> dict[str, Any]:
    return prometheus(grafana={"enabled": True, **kw})


def user(name: str, uid: int, gid: int = 1001) -> dict[str, Any]:
    return {"name": name, "uid": uid, "gid": gid}


def plan(region_name: str) -> dict[str, Any]:
    arn = f"arn:aws:sagemaker:{region_name}:111122223333:training-plan/p5-reserved"
    return {"cluster": {"training_plan_arn": arn}}


def eks(**kw: Any) -> dict[str, Any]:
    return {"cluster": {"eks": kw}}


PLUGIN_CHARTS = {
    "nvidia_chart": str(CHART / "charts" / "nvidia-device-plugin"),
    "efa_chart": str(CHART / "charts" / "aws-efa-k8s-device-plugin"),
}
NO_NAT = {
    "network": {
        "vpc": None,
        "existing_vpc": {
            "vpc_id": "vpc-0123456789abcdef0",
            "private_subnet_id": "subnet-0123456789abcdef0",
            "cidr": "10.1.0.0/16",
            "control_plane_subnet_ids": ["subnet-0123456789abcdef1"],
        },
        "interface_endpoints": True,
    }
}


def eks_workers(instance_type: str) -> dict[str, Any]:
    return {"cluster": {"instance_groups": [dict(WORKERS, instance_type=instance_type)]}}


def lifecycle_script(path: str) -> dict[str, Any]:
    items = [CONTROLLER, LOGIN, dict(COMPUTE, lifecycle={"scripts": [path]})]
    return {"cluster": {"instance_groups": items}}


def eks_network(az: str = "usw2-az1", cidr: str | None = "10.0.1.0/24") -> dict[str, Any]:
    """An EKS environment (default VPC) with its control-plane subnet and second zone."""
    return {
        "orchestrator": "eks",
        "network": {
            "vpc": {"control_plane_subnet_cidr": cidr},
            "control_plane_availability_zone_id": az,
        },
        "cluster": {"instance_groups": [WORKERS]},
    }


# --- the 2026 platform's helpers ----------------------------------------------------------------

CONTINUOUS = {"cluster": {"node_provisioning": "continuous"}}
DB_NETWORK = {
    "network": {"database_availability_zone_id": "usw2-az1",
                "vpc": {"database_subnet_cidr": "10.0.1.0/28"}},
}  # fmt: skip
ACCOUNTING = merge(
    merge(CONTINUOUS, {"cluster": {"slurm": {"accounting": {"enabled": True}}}}), DB_NETWORK
)
TEAM_PEOPLE = {"users": [{"name": "alice", "uid": 10001}, {"name": "bob", "uid": 10002}]}


def accounting(**kw: Any) -> dict[str, Any]:
    return merge(ACCOUNTING, {"cluster": {"slurm": {"accounting": kw}}})


def teams(*items: dict[str, Any], with_accounting: bool = True) -> dict[str, Any]:
    return merge(ACCOUNTING if with_accounting else {}, {**TEAM_PEOPLE, "teams": list(items)})


def team(name: str, *members: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "members": list(members), **kw}


# --- task governance (EKS) ----------------------------------------------------------------------

TG = "cluster.eks.task_governance"
G5 = "ml.g5.12xlarge"  # WORKERS: 4 of them, 4 GPUs each
CLASSES = [{"name": "training", "weight": 70}, {"name": "inference", "weight": 90}]


def quota(itype: str = G5, **kw: Any) -> dict[str, Any]:
    return {"instance_type": itype, **kw}


def governed(*items: dict[str, Any], **tg: Any) -> dict[str, Any]:
    """EKS in us-east-1 (where the gate's cfn-lint knows task governance's types) with task
    governance on (two priority classes), alice and bob, and these teams."""
    settings = {"enabled": True, "priority_classes": CLASSES, **tg}
    return merge(
        merge(eks_network("use1-az4"), region("us-east-1", "use1-az6")),
        {**TEAM_PEOPLE, "teams": list(items), "cluster": {"eks": {"task_governance": settings}}},
    )


TWO_TEAMS = governed(
    team("pretraining", "alice", quota=[quota(instances=2)], priority="training"),
    team("research", "bob", quota=[quota(accelerators=8)], borrow_limit_percent=100),
)


PLAN = "arn:aws:sagemaker:us-west-2:111122223333:training-plan/p5-reserved"
TAINT = {"key": "example.com/dedicated", "value": "train", "effect": "NoSchedule"}


def flex(name: str, types: list[str], count: int = 1) -> dict[str, Any]:
    return {"name": name, "role": "compute", "instance_types": types, "instance_count": count}


def spot(g: dict[str, Any]) -> dict[str, Any]:
    return dict(g, capacity="spot")


def eks_group(**kw: Any) -> dict[str, Any]:
    """An EKS environment whose workers carry `kw`."""
    return merge(eks_network(), {"cluster": {"instance_groups": [dict(WORKERS, **kw)]}})


def updates(schedule: str, **deployment: Any) -> dict[str, Any]:
    """Scheduled AMI updates of the EKS workers (batches are for EKS clusters only)."""
    return eks_group(ami_updates={"schedule": schedule, "deployment": deployment})


# An AMI release and updates in batches: AWS offers both on EKS clusters only.
AMI_RELEASE_AND_BATCHES: dict[str, Any] = {
    "image_release_version": "1.2.3",
    "ami_updates": {"schedule": "cron(0 3 ? * SUN *)", "deployment": {"batch_size": 2}},
    "auto_patch": {"strategy": "when_idle", "deployment": {"batch_size": 1}},
}


def patches(strategy: str, **deployment: Any) -> dict[str, Any]:
    patch: dict[str, Any] = {"strategy": strategy}
    if deployment:
        patch["deployment"] = deployment
    compute = dict(COMPUTE, auto_patch=patch)
    return {"cluster": {"instance_groups": [CONTROLLER, LOGIN, compute]}}


# A DNS-1123 subdomain of 253 characters: three labels of 63, one of 61, and their dots.
PREFIX_253 = ".".join(["p" * 63] * 3 + ["p" * 61])
K8S_HINT = "follow Kubernetes' syntax (docs/platform.md, Kubernetes names)"


def k8s(labels: dict[str, str], taints: list[dict[str, Any]]) -> dict[str, Any]:
    workers = dict(WORKERS, kubernetes={"labels": labels, "taints": taints})
    return merge(eks_network(), {"cluster": {"instance_groups": [workers]}})


def efa_compute() -> dict[str, Any]:
    return dict(group("compute", "compute", 2, "ml.p5.48xlarge"), network={"interface_type": "efa"})


def own_subnets(
    subnets: list[str] | None,
    security_groups: list[str] | None,
    itype: str = "ml.g5.8xlarge",
    **network: Any,
) -> dict[str, Any]:
    net = dict(network, subnet_ids=subnets, security_group_ids=security_groups)
    compute = dict(
        COMPUTE, instance_type=itype, network={k: v for k, v in net.items() if v is not None}
    )
    return {"cluster": {"instance_groups": [CONTROLLER, LOGIN, compute]}}


AUTOSCALING = merge(
    eks_network(),
    {
        "cluster": {
            "node_provisioning": "continuous",
            "autoscaling": {"enabled": True},
            "eks": {"helm_chart": str(CHART)},
        }
    },
)


def topics(n: int) -> list[str]:
    """`n` SNS topic ARNs in the default environment's region."""
    return [f"arn:aws:sns:us-west-2:111122223333:pager-{i}" for i in range(n)]


REPAIRED_BY_LAMBDA = {"node_recovery": "None"}  # with auto_repair (default): the queue target


# --- expected findings --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    level: Level
    path: str
    message: str  # a piece of the message
    hint: str | None  # the whole hint


def err(path: str, message: str, hint: str | None) -> Expect:
    return Expect(Level.ERROR, path, message, hint)


def warn(path: str, message: str, hint: str | None) -> Expect:
    return Expect(Level.WARNING, path, message, hint)


def info(path: str, message: str, hint: str | None) -> Expect:
    return Expect(Level.INFO, path, message, hint)


AGENT_INFO = info(
    "monitoring.prometheus",
    "each node runs Ubuntu's `prometheus` as its agent",
    "on an older AMI, put a prometheus_*.deb of 2.26 or later in monitoring.prometheus.packages",
)


def _show(findings: list[Finding]) -> str:
    return "\n".join(f"{f.level.name} {f.path}: {f.message} | hint={f.hint!r}" for f in findings)


def assert_findings(found: list[Finding], expected: list[Expect], name: str) -> None:
    assert len(found) == len(expected), _show(found)
    for f, e in zip(found, expected, strict=True):
        assert f.check == name
        assert (f.level, f.path) == (e.level, e.path), _show(found)
        assert e.message in f.message, _show(found)
        assert f.hint == e.hint, _show(found)


# --- studio -------------------------------------------------------------------------------------

PEOPLE = [user("alice", 10001), user("bob", 10002, gid=2000), user("carol", 10003)]


def studio(**kw: Any) -> dict[str, Any]:
    """Studio enabled for alice, bob and carol (Merge, so the Slurm client check passes)."""
    return {
        "users": PEOPLE,
        "cluster": {"slurm": {"config_strategy": "Merge"}},
        "studio": {"enabled": True, **kw},
    }


STUDIO_EKS = merge(eks_network(), {"users": PEOPLE, "studio": {"enabled": True}})
CONTROL_PLANE_SG = "sg-0c0ffee0c0ffee000"


# --- the tables ---------------------------------------------------------------------------------

CAPACITY = "storage.lustre.storage_capacity_gib"
TIER = "storage.lustre.throughput_per_unit_storage"
IOPS = "storage.lustre.metadata.iops"
BUCKET_HINT = (
    "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
)
NEST_HINT = "associations cannot share, or nest inside, each other's directories"
PATH_HINT = "start with / and end without /, e.g. /data"
SUBNET_HINT = "use a /24 for the public subnet and a /17 to /20 for the private one"
PRIVATE = "network.vpc.private_subnet_cidr"
PUBLIC = "network.vpc.public_subnet_cidr"
BATCH = "trainer.job.global_batch_size"
ELASTIC_BATCH_HINT = "choose a global batch divisible by micro_batch_size x ranks at every size"
IOPS_MSG = "is not 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000"


BOTOCORE = api_constraints()["botocore"]
ROUTE_TABLES = ["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"]
ROLE_A = "arn:aws:iam::111122223333:role/platform-admins"
ROLE_B = "arn:aws:iam::111122223333:role/ml-admins"


def _public_cidrs(n: int) -> list[str]:
    return [f"52.{i}.0.0/16" for i in range(n)]


def _eight_dras() -> list[tuple[str, str]]:
    return [(f"/d{i}", f"d{i}/") for i in range(8)]


def _nine_dras() -> list[tuple[str, str]]:
    return [(f"/d{i}", f"d{i}/") for i in range(9)]


GOOD: list[Any] = [
    # lustre-capacity
    pytest.param("lustre-capacity", lustre(storage_capacity_gib=1200), id="capacity-1200"),
    pytest.param("lustre-capacity", lustre(storage_capacity_gib=2400), id="capacity-2400"),
    pytest.param("lustre-capacity", lustre(storage_capacity_gib=4800), id="capacity-4800"),
    pytest.param("lustre-capacity", lustre(storage_capacity_gib=24000), id="capacity-24000"),
    pytest.param(
        "lustre-capacity",
        lustre(storage_capacity_gib=2000, existing=EXISTING_FS),
        id="capacity-ignored-for-existing-fs",
    ),
    # lustre-throughput-tier
    *[
        pytest.param(
            "lustre-throughput-tier", lustre(throughput_per_unit_storage=t), id=f"tier-{t}"
        )
        for t in (125, 250, 500, 1000)
    ],
    # lustre-metadata
    pytest.param("lustre-metadata", metadata("AUTOMATIC"), id="metadata-automatic"),
    *[
        pytest.param("lustre-metadata", metadata("USER_PROVISIONED", i), id=f"iops-{i}")
        for i in (1500, 3000, 6000, 12000, 24000, 192000)
    ],
    # bucket-name
    pytest.param("bucket-name", {}, id="bucket-generated-name"),
    pytest.param("bucket-name", bucket(name="sagemaker-hyperpod-data"), id="bucket-name"),
    pytest.param("bucket-name", bucket(name="my.bucket.1"), id="bucket-dots"),
    pytest.param("bucket-name", bucket(name="abc"), id="bucket-3-chars"),
    pytest.param("bucket-name", bucket(name="a" * 63), id="bucket-63-chars"),
    pytest.param("bucket-name", bucket(existing_name="team-datasets"), id="bucket-existing"),
    # dra-paths
    pytest.param("dra-paths", {}, id="dra-default"),
    pytest.param("dra-paths", dras(*_eight_dras()), id="dra-8"),
    pytest.param("dra-paths", dras(("/", "")), id="dra-root-whole-bucket-alone"),
    pytest.param(
        "dra-paths", dras(("/data", "data/"), ("/datasets", "datasets/")), id="dra-string-siblings"
    ),
    pytest.param("dra-paths", dras(("/a/b", "a/b/"), ("/a/c", "a/c/")), id="dra-same-parent"),
    pytest.param("dra-paths", dras(("/data", "x/data/")), id="dra-nested-prefix-alone"),
    pytest.param(
        "dra-paths",
        lustre(existing=EXISTING_FS, data_repository_associations=None),
        id="dra-existing-fs-without-dras",
    ),
    # vpc-source
    pytest.param("vpc-source", {}, id="vpc-new"),
    pytest.param("vpc-source", existing_vpc(), id="vpc-existing"),
    # vpc-cidr
    pytest.param("vpc-cidr", {}, id="cidr-default-16"),
    pytest.param(
        "vpc-cidr",
        vpc(
            cidr="10.0.0.0/19", public_subnet_cidr="10.0.0.0/24", private_subnet_cidr="10.0.16.0/20"
        ),
        id="cidr-private-20-boundary",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(
            cidr="172.16.0.0/16",
            public_subnet_cidr="172.16.255.0/24",
            private_subnet_cidr="172.16.0.0/17",
        ),
        id="cidr-172",
    ),
    pytest.param("vpc-cidr", existing_vpc(), id="cidr-existing-vpc-not-checked"),
    # endpoints-without-nat
    pytest.param("endpoints-without-nat", {}, id="endpoints-new-vpc"),
    pytest.param("endpoints-without-nat", existing_vpc(endpoints=True), id="endpoints-existing-on"),
    # region-known
    *[
        pytest.param("region-known", region(r), id=f"region-{r}")
        for r in ("us-west-2", "us-gov-west-1", "ap-northeast-1", "eu-south-2", "ap-southeast-4")
    ],
    # az-id-in-region
    *[
        pytest.param("az-id-in-region", region(r, az), id=f"az-{az}")
        for r, az in [
            ("us-west-2", "usw2-az2"),
            ("us-gov-west-1", "usgw1-az1"),
            ("us-gov-east-1", "usge1-az2"),
            ("ap-northeast-1", "apne1-az4"),
            ("eu-central-1", "euc1-az2"),
            ("ap-southeast-2", "apse2-az3"),
            ("us-east-1", "use1-az6"),
        ]
    ],
    pytest.param("az-id-in-region", region("us-foo-1"), id="az-region-of-unknown-shape-skipped"),
    pytest.param(
        "az-id-in-region",
        merge(region("us-west-2", "usw2-az9"), allow(availability_zone_ids=["usw2-az9"])),
        id="az-newer-than-table-allowed",
    ),
    pytest.param("az-id-in-region", eks_network(), id="az-control-plane-zone"),
    pytest.param(
        "region-known",
        merge(region("xx-new-1", "xxn1-az1"), allow(regions=["xx-new-1"])),
        id="region-newer-than-table-allowed",
    ),
    # tags
    pytest.param("tags", {}, id="tags-none"),
    pytest.param(
        "tags",
        {"tags": {"team": "ml", "cost-center": "a/b:c=d+e@f", "Ünïcode key": "välue"}},
        id="tags-allowed-characters",
    ),
    pytest.param("tags", {"tags": {f"k{i}": "v" for i in range(47)}}, id="tags-47"),
    pytest.param("tags", {"tags": {"team": "aws-ml", "rds:owner": "rds:x"}}, id="tags-rds-no-db"),
    # kms-key
    pytest.param("kms-key", {}, id="kms-key-none"),
    pytest.param("kms-key", {"kms_key_arn": KMS_KEY}, id="kms-key-of-the-region"),
    pytest.param(
        "kms-key",
        {"kms_key_arn": KMS_KEY, "account": "111122223333"},
        id="kms-key-of-the-account",
    ),
    pytest.param(
        "kms-key",
        {"kms_key_arn": KMS_KEY.replace("1234abcd-12ab-34cd-56ef-1234567890ab", "mrk-" + "0" * 32)},
        id="kms-key-multi-region",
    ),
    # control-characters
    pytest.param("control-characters", {}, id="control-default"),
    pytest.param(
        "control-characters",
        {
            "tags": {"team": "ml platform", "note": "\u00e9t\u00e9 \u6f22\u5b57"},
            "trainer": {"job": {"checkpoint_dir": "/fsx/my ckpt/$(id)'\"#%;&|*"}},
        },
        id="control-printable-text-of-any-kind",
    ),
    # instance-group-names
    pytest.param("instance-group-names", {}, id="names-default"),
    # instance-group-roles
    pytest.param("instance-group-roles", {}, id="roles-slurm-default"),
    pytest.param("instance-group-roles", groups(CONTROLLER, COMPUTE), id="roles-slurm-no-login"),
    pytest.param(
        "instance-group-roles",
        groups(group("a", "worker"), group("b", "worker", 4), orchestrator="eks"),
        id="roles-eks-workers",
    ),
    # job-global-batch
    pytest.param("job-global-batch", {}, id="batch-default"),
    pytest.param("job-global-batch", job(global_batch_size=8), id="batch-one-micro-per-rank"),
    pytest.param("job-global-batch", job(global_batch_size=64), id="batch-64"),
    pytest.param(
        "job-global-batch",
        job(nodes=4, processes_per_node=8, micro_batch_size=1, global_batch_size=32),
        id="batch-32-ranks",
    ),
    # job-elastic
    pytest.param("job-elastic", {}, id="elastic-off"),
    pytest.param("job-elastic", elastic(min_replicas=1, max_replicas=2), id="elastic-1-2"),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=1, max_replicas=4, replica_discrete_values=[1, 2, 4]),
        id="elastic-discrete",
    ),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=2, max_replicas=4, replica_increment_step=2),
        id="elastic-step",
    ),
    pytest.param(
        "job-elastic",
        elastic({"processes_per_node": 2}, min_replicas=1, max_replicas=2),
        id="elastic-2-ranks-per-node",
    ),
    # instance-type
    pytest.param("instance-type", {}, id="type-default"),
    *[
        pytest.param(
            "instance-type", groups(CONTROLLER, group("g", "compute", 1, t)), id=f"type-{t}"
        )
        for t in ("ml.p5.48xlarge", "ml.p6e-gb200.36xlarge", "ml.trn2.48xlarge", "ml.c5n.18xlarge")
    ],
    pytest.param(
        "instance-type",
        merge(
            groups(CONTROLLER, group("g", "compute", 1, "ml.p7.48xlarge")),
            allow(instance_types=["ml.p7.48xlarge"]),
        ),
        id="type-newer-than-table-allowed",
    ),
    # deep-health-checks
    pytest.param("deep-health-checks", {}, id="dhc-default"),
    pytest.param(
        "deep-health-checks",
        groups(CONTROLLER, dict(COMPUTE, deep_health_checks=["InstanceStress"])),
        id="dhc-one-check-on-gpu",
    ),
    pytest.param(
        "deep-health-checks",
        groups(dict(CONTROLLER, deep_health_checks=[]), COMPUTE),
        id="dhc-none-on-cpu",
    ),
    # slurm-partitions
    pytest.param("slurm-partitions", {}, id="partition-default"),
    pytest.param(
        "slurm-partitions",
        groups(
            CONTROLLER, dict(COMPUTE, partition="gpu"), group("cpu", "compute", 2, "ml.c5.4xlarge")
        ),
        id="partition-on-compute",
    ),
    # training-plan
    pytest.param("training-plan", {}, id="plan-none"),
    pytest.param("training-plan", plan("us-west-2"), id="plan-same-region"),
    # users
    pytest.param("users", {}, id="users-none"),
    pytest.param(
        "users",
        {"users": [user("alice", 10001), user("bob", 10002), user("carol", 4000000, gid=4000000)]},
        id="users-shared-gid-and-range-ends",
    ),
    # files
    pytest.param("files", {}, id="files-none"),
    pytest.param("files", lifecycle_script(str(Path(__file__))), id="files-absolute-script"),
    # enroot-pyxis-source
    pytest.param(
        "enroot-pyxis-source", {"cluster": {"slurm": {"enroot_pyxis": False}}}, id="pyxis-off"
    ),
    pytest.param("enroot-pyxis-source", eks_network(), id="pyxis-not-on-eks"),
    # eks
    pytest.param("eks", {}, id="eks-not-used-on-slurm"),
    pytest.param(
        "eks",
        merge(
            eks_network(),
            eks(
                existing_cluster_name="ml-platform",
                existing_cluster_security_group_id=CONTROL_PLANE_SG,
            ),
        ),
        id="eks-existing-cluster-security-group",
    ),
    pytest.param(
        "eks", merge(eks_network(), eks(helm_chart=str(CHART))), id="eks-default-versions"
    ),
    pytest.param(
        "eks",
        merge(
            merge(eks_network(), eks(kubernetes_version="1.40", helm_chart=str(CHART))),
            allow(kubernetes_versions=["1.40"]),
        ),
        id="eks-version-newer-than-list-allowed",
    ),
    # eks-device-plugins
    pytest.param("eks-device-plugins", {}, id="plugins-not-on-slurm"),
    pytest.param("eks-device-plugins", eks_network(), id="plugins-from-their-repositories"),
    pytest.param(
        "eks-device-plugins",
        merge(merge(eks_network(), NO_NAT), eks(device_plugins=PLUGIN_CHARTS)),
        id="plugins-from-local-folders-without-nat",
    ),
    pytest.param(
        "eks-device-plugins",
        merge(eks_network(), eks(helm_chart=str(CHART))),
        id="plugins-off-beside-hyperpods-chart",
    ),
    pytest.param(
        "eks-device-plugins",
        merge(eks_network(), eks(existing_cluster_name="ml", device_plugins={"enabled": True})),
        id="plugins-on-an-existing-cluster-when-asked",
    ),
    pytest.param(
        "files",
        merge(eks_network(), eks(device_plugins=PLUGIN_CHARTS)),
        id="files-plugin-charts-at-the-pinned-versions",
    ),
    # subnet-capacity
    pytest.param("subnet-capacity", {}, id="capacity-default"),
    pytest.param(
        "subnet-capacity",
        merge(
            vpc(private_subnet_cidr="10.0.128.0/20"),
            groups(CONTROLLER, group("gpu", "compute", 90, "ml.p5.48xlarge")),
        ),
        id="capacity-90-p5-in-a-20",
    ),
    pytest.param("subnet-capacity", existing_vpc(), id="capacity-existing-vpc-unknown"),
    # eks-control-plane-subnets
    pytest.param("eks-control-plane-subnets", {}, id="cp-slurm"),
    pytest.param("eks-control-plane-subnets", eks_network(), id="cp-new-vpc"),
    pytest.param(
        "eks-control-plane-subnets",
        merge(
            {"orchestrator": "eks", "cluster": {"instance_groups": [WORKERS]}},
            {
                "network": {
                    "vpc": None,
                    "existing_vpc": dict(
                        EXISTING_VPC, control_plane_subnet_ids=["subnet-0123456789abcdef1"]
                    ),
                }
            },
        ),
        id="cp-existing-vpc",
    ),
    pytest.param(
        "eks-control-plane-subnets",
        merge(
            {"orchestrator": "eks", "cluster": {"instance_groups": [WORKERS]}},
            eks(existing_cluster_name="team-eks"),
        ),
        id="cp-existing-cluster-needs-none",
    ),
    # job-instance-group
    pytest.param("job-instance-group", {}, id="job-group-the-only-compute-group"),
    pytest.param(
        "job-instance-group",
        merge(
            groups(CONTROLLER, COMPUTE, group("big", "compute", 4, "ml.p5.48xlarge")),
            job(instance_group="big", nodes=4),
        ),
        id="job-group-named",
    ),
    # job-processes-per-node
    pytest.param("job-processes-per-node", {}, id="ppn-derived"),
    pytest.param(
        "job-processes-per-node",
        merge(
            groups(CONTROLLER, group("gpu", "compute", 2, "ml.p5.48xlarge")),
            job(processes_per_node=8),
        ),
        id="ppn-8-on-p5",
    ),
    # job-memory
    pytest.param("job-memory", {}, id="memory-default-checkpointed"),
    pytest.param(
        "job-memory",
        merge(
            groups(CONTROLLER, group("gpu", "compute", 2, "ml.p5.48xlarge")),
            job(preset="qwen2.5-14b", nodes=2, micro_batch_size=1, global_batch_size=64),
        ),
        id="memory-14b-on-16-h100",
    ),
    pytest.param(  # Trainium: no GPU memory to judge (job-processes-per-node refuses it)
        "job-memory",
        groups(CONTROLLER, group("trn", "compute", 2, "ml.trn1.32xlarge")),
        id="memory-not-a-gpu",
    ),
    # job-paths
    pytest.param("job-paths", {}, id="paths-default"),
    pytest.param(
        "job-paths", job(checkpoint_dir="/fsx/ckpt/run-1", data_path="/fsx"), id="paths-on-fsx"
    ),
    # job-auto-resume
    pytest.param("job-auto-resume", {}, id="auto-resume-with-recovery"),
    pytest.param(
        "job-auto-resume",
        merge({"cluster": {"node_recovery": "None"}}, job(auto_resume=False)),
        id="no-recovery-no-auto-resume",
    ),
    # job-orchestrator
    pytest.param("job-orchestrator", job(partition="dev"), id="orch-slurm-partition-dev"),
    pytest.param(
        "job-orchestrator",
        merge(
            merge(eks_network(), {"users": [user("alice", 10001)]}),
            job(user="alice", namespace="team-a"),
        ),
        id="orch-eks-user",
    ),
    # job-trainer-config
    pytest.param("job-trainer-config", {}, id="trainer-default"),
    pytest.param(
        "job-trainer-config", job(preset="tiny", token_dtype="uint16"), id="trainer-tiny-uint16"
    ),
    # studio
    pytest.param("studio-users", {}, id="studio-off"),
    pytest.param("studio-users", studio(), id="studio-every-user"),
    pytest.param("studio-users", studio(include=["alice", "bob"]), id="studio-include"),
    pytest.param("studio-users", studio(exclude=["carol"]), id="studio-exclude"),
    pytest.param("studio-profile-names", studio(), id="studio-names"),
    pytest.param(
        "studio-profile-names",
        merge(studio(exclude=["dave-"]), {"users": [*PEOPLE, user("dave-", 10004)]}),
        id="studio-bad-name-excluded",
    ),
    pytest.param("studio-partition-paths", studio(), id="studio-per-user-paths"),
    pytest.param(
        "studio-partition-paths",
        studio(partitions="shared", shared_path="/team/shared"),
        id="studio-shared-nested-path",
    ),
    pytest.param("studio-file-system", studio(), id="studio-created-file-system"),
    pytest.param(
        "studio-file-system",
        merge(studio(), merge(existing_vpc(), lustre(existing=EXISTING_FS))),
        id="studio-existing-file-system-in-existing-vpc",
    ),
    pytest.param("studio-cluster-client", studio(), id="studio-slurm-merge"),
    pytest.param("studio-cluster-client", STUDIO_EKS, id="studio-eks-pinned-kubectl"),
    pytest.param(
        "studio-cluster-client",
        merge(
            STUDIO_EKS,
            eks(
                existing_cluster_name="ml-platform",
                existing_cluster_security_group_id=CONTROL_PLANE_SG,
            ),
        ),
        id="studio-eks-existing-cluster-with-its-security-group",
    ),
    pytest.param(
        "studio-cluster-client",
        merge(eks_network(), eks(existing_cluster_name="ml-platform")),
        id="studio-off-existing-cluster-needs-no-security-group",
    ),
    pytest.param("studio-instance-types", studio(), id="studio-default-instance-type"),
    pytest.param(
        "studio-instance-types",
        studio(default_instance_type="ml.g5.xlarge", instance_types=["ml.g5.xlarge"]),
        id="studio-gpu-instance-type",
    ),
    # monitoring ---------------------------------------------------------------------------------
    # monitoring-subscribers
    pytest.param("monitoring-subscribers", {}, id="subscribers-none"),
    pytest.param(
        "monitoring-subscribers",
        {
            "monitoring": {
                "alarm_email": "ml-oncall@example.com",
                "subscribers": {
                    "emails": ["alice@example.com", "bob+gpu@ml.example.co.uk"],
                    "sns_topic_arns": ["arn:aws:sns:us-west-2:111122223333:oncall-pager"],
                },
            }
        },
        id="subscribers-emails-and-topic",
    ),
    pytest.param(
        "monitoring-subscribers",
        {
            "account": "111122223333",
            "monitoring": {
                "subscribers": {"sns_topic_arns": ["arn:aws:sns:us-west-2:111122223333:pager"]}
            },
        },
        id="subscribers-topic-same-account",
    ),
    pytest.param(
        "monitoring-subscribers", {"monitoring": {"enabled": False}}, id="subscribers-off-empty"
    ),
    # monitoring-targets
    pytest.param("monitoring-targets", {}, id="targets-own-topic-only"),
    pytest.param(
        "monitoring-targets",
        {"monitoring": {"subscribers": {"sns_topic_arns": topics(4)}}},
        id="targets-four-topics-make-five",
    ),
    pytest.param(
        "monitoring-targets",
        {
            "cluster": REPAIRED_BY_LAMBDA,
            "monitoring": {"subscribers": {"sns_topic_arns": topics(3)}},
        },
        id="targets-three-topics-and-the-queue-make-five",
    ),
    pytest.param(
        "monitoring-targets",
        {
            "cluster": REPAIRED_BY_LAMBDA,
            "monitoring": {"auto_repair": False, "subscribers": {"sns_topic_arns": topics(4)}},
        },
        id="targets-no-queue-without-auto-repair",
    ),
    pytest.param(
        "monitoring-targets",
        {"monitoring": {"enabled": False, "subscribers": {"sns_topic_arns": topics(9)}}},
        id="targets-monitoring-off",
    ),
    # monitoring-node-checks
    pytest.param("monitoring-node-checks", {}, id="node-checks-default"),
    pytest.param(
        "monitoring-node-checks",
        {
            "monitoring": {
                "node_checks": {
                    "checks": ["fsx-mount", "disk-space"],
                    "interval_seconds": 60,
                    "fsx_timeout_seconds": 30,
                    "volumes": ["/", "/var/lib/containerd"],
                }
            }
        },
        id="node-checks-subset-fast",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"interval_seconds": 3600, "fsx_timeout_seconds": 5}}},
        id="node-checks-hourly",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"enabled": False, "node_checks": {"checks": ["nope"]}}},
        id="node-checks-ignored-when-off",
    ),
    # monitoring-remediation
    pytest.param("monitoring-remediation", {}, id="remediation-defaults"),
    pytest.param(
        "monitoring-remediation",
        {
            "monitoring": {
                "node_checks": {
                    "remediation": {
                        "efa": "reboot",
                        "fsx-mount": "replace",
                        "disk-space": "replace",
                        "gpu-count": "none",
                        "gpu-errors": "none",
                    }
                }
            }
        },
        id="remediation-all-set",
    ),
    pytest.param(
        "monitoring-remediation",
        {
            "cluster": {"node_recovery": "None"},
            "monitoring": {"node_checks": {"remediation": {"efa": "none", "fsx-mount": "none"}}},
        },
        id="remediation-none-without-recovery",
    ),
    pytest.param(
        "monitoring-remediation",
        {"cluster": {"node_recovery": "None"}, "monitoring": {"auto_repair": False}},
        id="remediation-auto-repair-off-is-info",
    ),
    # monitoring-alarms
    pytest.param("monitoring-alarms", {}, id="alarms-default"),
    pytest.param(
        "monitoring-alarms",
        {"monitoring": {"alarms": {"lifecycle_failures": 4, "node_health_events": 4}}},
        id="alarms-at-cluster-size",
    ),
    pytest.param(
        "monitoring-alarms", lustre(existing=EXISTING_FS), id="alarms-existing-fs-is-info"
    ),
    # api-constraints
    pytest.param("api-constraints", {}, id="api-default"),
    pytest.param("registry-schema", {}, id="registry-default"),
    pytest.param(
        "registry-schema",
        merge(governed(team("a1")), region("us-east-1", "use1-az6")),
        id="registry-governance-where-the-registry-has-it",
    ),
    pytest.param("api-constraints", studio(), id="api-studio-slurm"),
    pytest.param("api-constraints", STUDIO_EKS, id="api-studio-eks"),
    pytest.param(
        "api-constraints",
        {"tags": {"team": "ml", "cost-center": "a/b:c=d+e@f", "Ünïcode key": "välue"}},
        id="api-tags-allowed-characters",
    ),
    pytest.param(
        "api-constraints",
        {"tags": {"k" * 128: "v" * 256}},
        id="api-tags-longest-key-and-value",
    ),
    pytest.param(
        "api-constraints",
        merge(
            vpc(cidr="10.0.0.0/16", private_subnet_cidr="10.0.128.0/17"),
            groups(CONTROLLER, *[group(f"c{i}", "compute", 1, "ml.m5.large") for i in range(99)]),
        ),
        id="api-100-groups",
    ),
    pytest.param(
        "api-constraints",
        studio(instance_types=["ml.t3.medium", "ml.g5.xlarge", "ml.p5.48xlarge"]),
        id="api-studio-instance-types",
    ),
    pytest.param(
        "api-constraints",
        merge(existing_vpc(), {"network": {"existing_vpc": {"route_table_ids": ROUTE_TABLES}}}),
        id="api-route-tables-distinct",
    ),
    pytest.param(
        "api-constraints",
        merge(eks_network(), eks(admin_role_arns=[ROLE_A, ROLE_B])),
        id="api-admin-roles-distinct",
    ),
    pytest.param(
        "api-constraints",
        merge(
            eks_network(),
            {
                "cluster": {
                    "eks": {"admin_role_arns": [ROLE_A, ROLE_A], "existing_cluster_name": "c"}
                }
            },
        ),
        id="api-admin-roles-unused-with-existing-cluster",
    ),
    pytest.param(
        "api-constraints",
        {"cluster": {"name": "c" * 63}},
        id="api-cluster-name-63",
    ),
    # ami-accounts
    pytest.param("ami-accounts", {}, id="ami-no-users"),
    pytest.param(
        "ami-accounts",
        {"users": [user("alice", 10001), user("bob", 65533), user("carol", 65536, gid=65536)]},
        id="ami-uids-around-nobody",
    ),
    pytest.param("ami-accounts", {"users": [user("ubuntu2", 10001)]}, id="ami-name-like-ubuntu"),
    # threads-per-core
    pytest.param("threads-per-core", {}, id="threads-default"),
    pytest.param(
        "threads-per-core",
        groups(CONTROLLER, dict(group("cpu", "compute", 2, "ml.m5.xlarge"), threads_per_core=2)),
        id="threads-2-on-x86",
    ),
    pytest.param(
        "threads-per-core",
        groups(CONTROLLER, dict(group("cpu", "compute", 2, "ml.m7g.xlarge"), threads_per_core=1)),
        id="threads-1-on-graviton",
    ),
    pytest.param(
        "threads-per-core",
        groups(CONTROLLER, dict(group("cpu", "compute", 2, "ml.m8a.16xlarge"), threads_per_core=2)),
        id="threads-unknown-family-not-judged",
    ),
    pytest.param(
        "threads-per-core",
        merge(
            groups(
                CONTROLLER, dict(group("new", "compute", 1, "ml.zz9.xlarge"), threads_per_core=2)
            ),
            allow(instance_types=["ml.zz9.xlarge"]),
        ),
        id="threads-type-newer-than-table",
    ),
    # training-plan-types
    pytest.param("training-plan-types", {}, id="plan-types-no-plan"),
    pytest.param(
        "training-plan-types",
        merge(
            plan("us-west-2"),
            groups(
                CONTROLLER,
                group("a", "compute", 2, "ml.p5.48xlarge"),
                group("b", "compute", 2, "ml.p5.48xlarge"),
                group("cpu", "compute", 2, "ml.m5.xlarge"),
            ),
        ),
        id="plan-types-one-accelerated-type-and-a-cpu-group",
    ),
    # eks-version-calendar
    pytest.param("eks-version-calendar", {}, id="calendar-slurm"),
    pytest.param(
        "eks-version-calendar",
        merge(eks_network(), eks(kubernetes_version="1.34")),
        id="calendar-standard-support",
    ),
    pytest.param(
        "eks-version-calendar",
        merge(eks_network(), eks(kubernetes_version="1.28", existing_cluster_name="c")),
        id="calendar-existing-cluster-not-judged",
    ),
    pytest.param(
        "eks-version-calendar",
        merge(eks_network(), eks(kubernetes_version="1.40")),
        id="calendar-version-not-in-table",
    ),
    # eks-public-access-cidrs
    pytest.param("eks-public-access-cidrs", merge(eks_network(), {}), id="cidrs-private-only"),
    pytest.param(
        "eks-public-access-cidrs",
        merge(eks_network(), eks(public_access_cidrs=_public_cidrs(40))),
        id="cidrs-40",
    ),
    pytest.param(
        "eks-public-access-cidrs",
        merge(eks_network(), eks(public_access_cidrs=["0.0.0.0/0"])),
        id="cidrs-everyone",
    ),
    pytest.param(
        "eks-public-access-cidrs",
        merge(
            eks_network(),
            eks(public_access_cidrs=_public_cidrs(41), existing_cluster_name="c"),
        ),
        id="cidrs-unused-with-existing-cluster",
    ),
    # user-homes
    pytest.param("user-homes", {"users": PEOPLE}, id="homes-beside-data"),
    pytest.param(
        "user-homes",
        merge(lustre(existing=EXISTING_FS), {"users": [user("data", 10001)]}),
        id="homes-existing-file-system-has-no-associations-here",
    ),
    pytest.param(
        "user-homes",
        merge(dras(("/datasets", "datasets/")), {"users": [user("data", 10001)]}),
        id="homes-name-is-a-prefix-of-an-association",
    ),
    # studio-shared-path-home
    pytest.param(
        "studio-shared-path-home", studio(partitions="shared"), id="shared-path-nobodys-home"
    ),
    pytest.param(
        "studio-shared-path-home",
        studio(partitions="per_user", shared_path="/alice"),
        id="shared-path-unused-per-user",
    ),
    pytest.param(
        "studio-shared-path-home",
        studio(partitions="shared", shared_path="/alicebob"),
        id="shared-path-name-prefix-only",
    ),
    # studio-lifecycle-size: the script it measures is a bundled asset; see the tests below
    pytest.param("studio-lifecycle-size", {}, id="lifecycle-size-studio-off"),
    pytest.param("studio-lifecycle-size", studio(apps=[]), id="lifecycle-size-no-apps"),
    # --- the 2026 platform (validators/platform.py) ---
    # group-instance-types
    pytest.param("group-instance-types", {}, id="types-fixed"),
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, COMPUTE, flex("burst", ["ml.g5.8xlarge", "ml.g5.16xlarge"])),
        id="types-flexible-alike",
    ),
    # slurm-accounting
    pytest.param("slurm-accounting", {}, id="accounting-off"),
    pytest.param("slurm-accounting", ACCOUNTING, id="accounting-continuous"),
    pytest.param(
        "slurm-accounting",
        accounting(engine_version="8.0.mysql_aurora.3.04.6", min_capacity=1, max_capacity=4.5),
        id="accounting-version-and-capacity",
    ),
    pytest.param("slurm-accounting", accounting(removal_policy="snapshot"), id="accounting-snap"),
    # accounting-subnets
    pytest.param("accounting-subnets", {}, id="db-subnets-unused"),
    pytest.param("accounting-subnets", ACCOUNTING, id="db-subnet-second-zone"),
    pytest.param(
        "accounting-subnets",
        merge(
            merge(ACCOUNTING, existing_vpc()),
            {
                "network": {
                    "database_availability_zone_id": None,
                    "existing_vpc": {"database_subnet_ids": ["subnet-0123456789abcdef1"]},
                }
            },
        ),
        id="db-subnets-existing-vpc",
    ),
    # teams
    pytest.param("teams", {}, id="no-teams"),
    pytest.param(
        "teams",
        teams(team("pretraining", "alice", fairshare=3, gpu_limit=16), team("research", "bob")),
        id="teams-everyone-in-one",
    ),
    pytest.param("teams", teams(team("ml_ops-2", "alice", "bob")), id="teams-name-chars"),
    pytest.param("teams", TWO_TEAMS, id="teams-eks-task-governance"),
    # task-governance
    pytest.param("task-governance", {}, id="governance-off"),
    pytest.param("task-governance", TWO_TEAMS, id="governance-two-teams"),
    pytest.param("task-governance", governed(), id="governance-no-teams-info"),
    pytest.param(
        "task-governance",
        merge(governed(team("a1")), eks(existing_cluster_name="ml-platform")),
        id="governance-existing-cluster-info",
    ),
    # team-quotas
    # team-fair-share
    pytest.param("team-fair-share", TWO_TEAMS, id="fair-share-on-default-weights"),
    pytest.param(
        "team-fair-share",
        governed(team("pretraining", "alice", quota=[quota(instances=2)], fairshare=5)),
        id="fair-share-on-with-a-weight",
    ),
    pytest.param(
        "team-fair-share",
        governed(team("pretraining", "alice", quota=[quota(instances=2)]), fair_share=False),
        id="fair-share-off-no-weight",
    ),
    pytest.param(
        "team-fair-share",
        merge(
            teams(team("research", "alice", fairshare=5)),
            {"cluster": {"eks": {"task_governance": {"fair_share": False}}}},
        ),
        id="fair-share-slurm-weight-is-slurms",
    ),
    pytest.param("team-quotas", {}, id="quotas-off"),
    pytest.param("team-quotas", TWO_TEAMS, id="quotas-within-the-groups"),
    pytest.param(
        "team-quotas",
        governed(team("borrowers"), team("owners", quota=[quota(instances=4)], sharing="lend")),
        id="quotas-borrow-only-team",
    ),
    # job-team
    pytest.param("job-team", {}, id="job-team-off"),
    pytest.param("job-team", merge(TWO_TEAMS, job(team="pretraining")), id="job-team-named"),
    pytest.param(
        "job-team",
        merge(TWO_TEAMS, job(user="bob", priority="inference")),
        id="job-team-of-its-user",
    ),
    pytest.param(
        "job-team",
        merge(TWO_TEAMS, job(team="pretraining", nodes=4)),
        id="job-team-borrows-info",
    ),
    # node-provisioning
    pytest.param("node-provisioning", CONTINUOUS, id="continuous-slurm-no-strategy"),
    pytest.param(
        "node-provisioning", {"cluster": {"slurm": {"config_strategy": "Merge"}}}, id="on-create"
    ),
    # autoscaling
    pytest.param("autoscaling", {}, id="autoscaling-off"),
    pytest.param("autoscaling", AUTOSCALING, id="autoscaling-eks-continuous-chart"),
    # tiered-checkpointing
    pytest.param("tiered-checkpointing", {}, id="tiered-off"),
    # group-capacity
    pytest.param("group-capacity", groups(CONTROLLER, LOGIN, spot(COMPUTE)), id="spot-compute"),
    pytest.param(
        "group-capacity",
        groups(CONTROLLER, LOGIN, dict(COMPUTE, min_instance_count=2)),
        id="min-equal-count",
    ),
    # ami-pinning
    pytest.param("ami-pinning", eks_group(image_release_version="1.2.3"), id="release-pinned"),
    pytest.param(
        "ami-pinning",
        eks_group(image_id="default", image_release_version="1.2.3"),
        id="release-with-default-image",
    ),
    # ami-updates-eks-only: the settings Slurm refuses, on EKS; Slurm's own schedule and patches
    pytest.param(
        "ami-updates-eks-only", eks_group(**AMI_RELEASE_AND_BATCHES), id="eks-release-batches"
    ),
    pytest.param(
        "ami-updates-eks-only",
        groups(
            CONTROLLER,
            LOGIN,
            dict(
                COMPUTE,
                ami_updates={"schedule": "cron(0 4 1 * ? *)"},
                auto_patch={"strategy": "when_all_idle"},
            ),
        ),
        id="slurm-schedule-and-patches-whole-group",
    ),
    # ami-updates
    pytest.param("ami-updates", updates("cron(0 3 ? * SUN *)"), id="updates-weekly"),
    pytest.param(
        "ami-updates",
        updates("cron(0 3 ? * SUN *)", batch_size=100, batch_unit="percent"),
        id="updates-whole-group",
    ),
    # auto-patch-deployment
    pytest.param("auto-patch-deployment", patches("when_all_idle"), id="patch-all-idle-plain"),
    pytest.param(
        "auto-patch-deployment",
        patches("when_idle", batch_size=1, wait_seconds=300),
        id="patch-node-by-node-in-batches",
    ),
    # kubernetes-labels
    pytest.param("kubernetes-labels", k8s({"example.com/pool": "a"}, []), id="labels-own-prefix"),
    pytest.param(
        "kubernetes-labels",
        k8s({}, [TAINT, dict(TAINT, effect="NoExecute")]),
        id="taints-same-key-two-effects",
    ),
    # kubernetes-names
    pytest.param("kubernetes-names", {}, id="k8s-names-slurm"),
    pytest.param(
        "kubernetes-names",
        k8s(
            {
                f"{PREFIX_253}/{'n' * 63}": "v" * 63,  # the longest prefix and name: 317
                "n" * 63: "",  # no prefix; an empty value is a label value
                "example.com/a_b.c-d": "A_b.c-9",
            },
            [dict(TAINT, key="n" * 63, value="v" * 63), dict(TAINT, value=None)],
        ),
        id="k8s-names-at-the-limits",
    ),
    pytest.param(
        "kubernetes-names",
        merge(eks_network(), job(namespace="1team", name="a" * 40)),
        id="k8s-namespace-may-start-with-a-digit",
    ),
    # deep-health-checks-api
    pytest.param("deep-health-checks-api", {}, id="checks-default"),
    # group-network
    pytest.param(
        "group-network",
        {"cluster": {"instance_groups": [CONTROLLER, LOGIN, efa_compute()]}},
        id="efa-on-efa-type",
    ),
    pytest.param(
        "group-network",
        merge(existing_vpc(), own_subnets(["subnet-0123456789abcdef1"], ["sg-0123456789abcdef0"])),
        id="own-subnets-existing-vpc",
    ),
    # version-compatibility
    pytest.param("version-compatibility", {}, id="compat-slurm"),
    pytest.param(
        "version-compatibility",
        merge(eks_network(), eks(addons={"training_operator": "v1.2.2-eksbuild.1"})),
        id="compat-operator-other-version",
    ),
    pytest.param(
        "version-compatibility",
        merge(governed(), eks(addons={"task_governance": "v1.5.0-eksbuild.1"})),
        id="compat-task-governance-v1-5",
    ),
    # version-tables
    pytest.param("version-tables", eks_network(), id="versions-eks-defaults"),
    pytest.param(
        "version-tables",
        merge(
            eks_network(),
            eks(
                kubernetes_version="1.33",
                addons={
                    "vpc_cni": "v1.20.1-eksbuild.3",  # the table's latest for 1.33
                    "kube_proxy": "v1.33.10-eksbuild.2",  # the cluster's own minor
                    "coredns": "v1.11.4-eksbuild.24",  # older than the latest: not refused
                },
            ),
        ),
        id="versions-addons-for-the-minor",
    ),
    pytest.param(
        "version-tables",
        merge(
            eks_network(),
            eks(existing_cluster_name="prod", addons={"kube_proxy": "v1.99.0-eksbuild.1"}),
        ),
        id="versions-existing-cluster-unknown-minor",
    ),
    pytest.param("version-tables", grafana(version="10.4"), id="versions-grafana-10"),
    pytest.param("version-tables", grafana(version="12.4"), id="versions-grafana-12"),
    # volume-keys
    pytest.param(
        "volume-keys",
        groups(CONTROLLER, LOGIN, dict(COMPUTE, ebs_kms_key_arn=KMS_KEY)),
        id="key-same-region",
    ),
    # node-setup
    pytest.param("node-setup", {}, id="setup-defaults"),
    pytest.param(
        "node-setup",
        merge(eks_network(), node_setup(container_storage="nvme", ssh_keys=True)),
        id="setup-eks-container-storage",
    ),
    pytest.param(
        "node-setup", node_setup(packages=str(NODE_PACKAGES)), id="setup-packages-for-logrotate"
    ),
    pytest.param(
        "node-setup",
        node_setup(ssh_keys=False, logrotate=False, hold_lustre_client=False),
        id="setup-all-off",
    ),
    # prometheus-workspace
    pytest.param("prometheus-workspace", {}, id="prometheus-off"),
    pytest.param("prometheus-workspace", prometheus(), id="prometheus-created"),
    pytest.param(
        "prometheus-workspace", prometheus(workspace_arn=AMP_ARN), id="prometheus-existing"
    ),
    pytest.param(
        "prometheus-workspace",
        merge({"account": "111122223333"}, prometheus(workspace_arn=AMP_ARN, retention_days=None)),
        id="prometheus-existing-same-account",
    ),
    # prometheus-exporters
    pytest.param("prometheus-exporters", prometheus(), id="exporters-default"),
    pytest.param(
        "prometheus-exporters",
        merge(
            groups(CONTROLLER, GPU_COMPUTE),
            prometheus(exporters={"dcgm": True, "efa": True}, packages=str(METRICS_PACKAGES)),
        ),
        id="exporters-gpu-efa-with-packages",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(OFFLINE, prometheus(packages=str(METRICS_PACKAGES))),
        id="exporters-offline-with-packages",
    ),
    pytest.param("prometheus-exporters", merge(eks_network(), prometheus()), id="exporters-eks"),
    # grafana
    pytest.param("grafana", grafana(), id="grafana-identity-center"),
    pytest.param(
        "grafana",
        grafana(
            authentication="saml",
            saml_metadata_url="https://idp.example.com/metadata",
            saml_admin_values=["admins"],
        ),
        id="grafana-saml",
    ),
    pytest.param("grafana", {}, id="grafana-off"),
    # no-internet
    pytest.param("no-internet", {}, id="internet-default"),
    pytest.param("no-internet", OFFLINE, id="internet-off-existing-vpc-with-endpoints"),
    pytest.param("no-internet", merge(eks_network(), OFFLINE), id="internet-off-on-eks"),
    # studio-without-nat
    pytest.param("studio-without-nat", studio(), id="studio-with-nat"),
    pytest.param("studio-without-nat", OFFLINE, id="no-studio-without-nat"),
    # files: the node packages
    pytest.param("files", node_setup(packages=str(NODE_PACKAGES)), id="files-node-packages"),
]

PAM_HINT = (
    "check with `scontrol show config | grep -Ei 'prologflags|proctracktype|taskplugin'` on a "
    "node; put a *pam*slurm*adopt*.deb built for the cluster's Slurm in "
    "cluster.node_setup.packages"
)
STUDIO_NAT_HINT = (
    "add a com.amazonaws.<region>.sagemaker.runtime interface endpoint and a package mirror "
    "(CodeArtifact, or a conda channel in S3) to the VPC, or give the subnet a NAT route; then "
    "suppress studio-without-nat"
)
CONTROL_HINT = (
    "a value is one line of printable text: remove the character; in a double-quoted YAML value, "
    "\\n \\r \\t \\0 \\e \\L \\P write control characters"
)
BAD: list[Any] = [
    # lustre-capacity: 1200, or a multiple of 2400; the hint rounds up to the next legal size.
    *[
        pytest.param(
            "lustre-capacity",
            lustre(storage_capacity_gib=gib),
            [err(CAPACITY, f"{gib} is not 1200 or a multiple of 2400 (PERSISTENT_2)", hint)],
            id=f"capacity-{gib}",
        )
        for gib, hint in [
            (1, "use 1200"),
            (100, "use 1200"),
            (1199, "use 1200"),
            (1201, "use 2400"),
            (2000, "use 2400"),
            (2401, "use 4800"),
            (3000, "use 4800"),
            (3600, "use 4800"),
            (4799, "use 4800"),
        ]
    ],
    # lustre-throughput-tier: the nearest tier, the lower one on a tie.
    *[
        pytest.param(
            "lustre-throughput-tier",
            lustre(throughput_per_unit_storage=tier),
            [err(TIER, f"{tier} MB/s/TiB is not a PERSISTENT_2 tier", hint)],
            id=f"tier-{tier}",
        )
        for tier, hint in [
            (0, "use 125"),
            (100, "use 125"),
            (200, "use 250"),
            (300, "use 250"),
            (750, "use 500"),
            (2000, "use 1000"),
        ]
    ],
    pytest.param(
        "lustre-throughput-tier",
        lustre(throughput_per_unit_storage=300, existing=EXISTING_FS),
        [err(TIER, "300 MB/s/TiB is not a PERSISTENT_2 tier", "use 250")],
        id="tier-checked-for-existing-fs",
    ),
    # lustre-metadata
    *[
        pytest.param(
            "lustre-metadata",
            metadata("USER_PROVISIONED", iops),
            [err(IOPS, f"{iops} {IOPS_MSG}", "use 12000")],
            id=f"iops-{iops}",
        )
        for iops in (0, 1000, 13000, 18000, 204000, -12000)
    ],
    pytest.param(
        "lustre-metadata",
        metadata("USER_PROVISIONED"),
        [err(IOPS, "mode USER_PROVISIONED needs iops", "add iops: 12000")],
        id="iops-missing-with-user-provisioned",
    ),
    pytest.param(
        "lustre-metadata",
        metadata("AUTOMATIC", 12000),
        [err(IOPS, "iops is set but mode is AUTOMATIC", "set mode: USER_PROVISIONED")],
        id="iops-with-automatic",
    ),
    # bucket-name
    *[
        pytest.param(
            "bucket-name",
            bucket(name=name),
            [err("storage.bucket.name", f"{name!r} is not a valid S3 bucket name", BUCKET_HINT)],
            id=f"bucket-{label}",
        )
        for label, name in [
            ("2-chars", "ab"),
            ("64-chars", "a" * 64),
            ("uppercase", "My-Bucket"),
            ("leading-hyphen", "-bucket"),
            ("trailing-hyphen", "bucket-"),
            ("trailing-dot", "bucket."),
            ("double-dot", "bucket..name"),
            ("underscore", "bucket_name"),
        ]
    ],
    pytest.param(
        "bucket-name",
        bucket(existing_name="Team_Data"),
        [err("storage.bucket.existing_name", "'Team_Data' is not a valid", BUCKET_HINT)],
        id="bucket-existing-invalid",
    ),
    pytest.param(
        "bucket-name",
        bucket(name="new-bucket", existing_name="old-bucket"),
        [
            err(
                "storage.bucket.existing_name",
                "both name (create) and existing_name (use) are set",
                "keep one",
            )
        ],
        id="bucket-both",
    ),
    # dra-paths
    pytest.param(
        "dra-paths",
        dras(*_nine_dras()),
        [
            err(
                DRAS,
                "9 associations; a file system takes at most 8",
                "merge prefixes under a common directory",
            )
        ],
        id="dra-9",
    ),
    pytest.param(
        "dra-paths",
        dras(("/data", "data/"), ("/data/sub", "sub/")),
        [
            err(
                f"{DRAS}[1].file_system_path",
                "'/data/sub' overlaps '/data' of association 0",
                NEST_HINT,
            )
        ],
        id="dra-nested-path",
    ),
    pytest.param(
        "dra-paths",
        dras(("/data/sub", "sub/"), ("/data", "data/")),
        [
            err(
                f"{DRAS}[1].file_system_path",
                "'/data' overlaps '/data/sub' of association 0",
                NEST_HINT,
            )
        ],
        id="dra-nested-path-parent-second",
    ),
    pytest.param(
        "dra-paths",
        dras(("/a", "a/"), ("/data", "data/"), ("/data", "other/")),
        [
            err(
                f"{DRAS}[2].file_system_path",
                "'/data' overlaps '/data' of association 1",
                NEST_HINT,
            )
        ],
        id="dra-equal-paths",
    ),
    pytest.param(
        "dra-paths",
        dras(("/", "a/"), ("/data", "b/")),
        [err(f"{DRAS}[1].file_system_path", "'/data' overlaps '/' of association 0", NEST_HINT)],
        id="dra-root-path-overlaps-anything",
    ),
    pytest.param(
        "dra-paths",
        dras(("/a", "a/"), ("/b", "a/")),
        [
            err(
                f"{DRAS}[1].s3_prefix",
                "'a/' overlaps 'a/' of association 0",
                "give each association its own prefix",
            )
        ],
        id="dra-equal-prefixes",
    ),
    pytest.param(
        "dra-paths",
        dras(("/a", "data/"), ("/b", "data/sub/")),
        [
            err(
                f"{DRAS}[1].s3_prefix",
                "'data/sub/' overlaps 'data/'",
                "give each association its own prefix",
            )
        ],
        id="dra-nested-prefixes",
    ),
    pytest.param(
        "dra-paths",
        dras(("/a", ""), ("/b", "data/")),
        [
            err(
                f"{DRAS}[1].s3_prefix",
                "'data/' overlaps '' of association 0",
                "give each association its own prefix",
            )
        ],
        id="dra-whole-bucket-overlaps-anything",
    ),
    pytest.param(
        "dra-paths",
        dras(("/a", "data/"), ("/b", "")),
        [
            err(
                f"{DRAS}[1].s3_prefix",
                "'' overlaps 'data/' of association 0",
                "give each association its own prefix",
            )
        ],
        id="dra-whole-bucket-second",
    ),
    *[
        pytest.param(
            "dra-paths",
            dras((path, "data/")),
            [
                err(
                    f"{DRAS}[0].file_system_path",
                    f"{path!r} is not an absolute directory path",
                    PATH_HINT,
                )
            ],
            id=f"dra-path-{label}",
        )
        for label, path in [
            ("relative", "data"),
            ("trailing-slash", "/data/"),
            ("double-slash", "/a//b"),
            ("empty", ""),
        ]
    ],
    *[
        pytest.param(
            "dra-paths",
            dras(("/data", prefix)),
            [err(f"{DRAS}[0].s3_prefix", f"{prefix!r} is not a bucket prefix", hint)],
            id=f"dra-prefix-{label}",
        )
        for label, prefix, hint in [
            ("leading-slash", "/data/", "no leading /, end with /, e.g. data/"),
            ("no-trailing-slash", "data", "no leading /, end with /, e.g. data/"),
            ("only-slash", "/", "no leading /, end with /, e.g. data/"),
        ]
    ],
    pytest.param(
        "dra-paths",
        lustre(existing=EXISTING_FS),
        [
            warn(
                DRAS,
                "associations are created only on a file system this environment creates",
                "link the existing file system to S3 in its own stack",
            )
        ],
        id="dra-with-existing-fs-warns",
    ),
    # vpc-source
    pytest.param(
        "vpc-source",
        {"network": {"existing_vpc": EXISTING_VPC}},
        [
            err(
                "network.existing_vpc",
                "both network.vpc and network.existing_vpc are set",
                "keep vpc to create a VPC, or existing_vpc to use one",
            )
        ],
        id="vpc-both",
    ),
    # vpc-cidr
    pytest.param(
        "vpc-cidr",
        vpc(cidr="10.0.0.0/8"),
        [
            err(
                "network.vpc.cidr",
                "10.0.0.0/8 has a /8 prefix; a VPC CIDR is /16 to /28",
                "use a /16 such as 10.0.0.0/16",
            )
        ],
        id="cidr-vpc-8",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(public_subnet_cidr="10.0.0.0/29"),
        [err(PUBLIC, "10.0.0.0/29 has a /29 prefix; a subnet is /16 to /28", SUBNET_HINT)],
        id="cidr-public-29",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(private_subnet_cidr="10.0.128.0/29"),
        [err(PRIVATE, "10.0.128.0/29 has a /29 prefix; a subnet is /16 to /28", SUBNET_HINT)],
        id="cidr-private-29",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(private_subnet_cidr="10.1.0.0/17"),
        [
            err(
                PRIVATE,
                "10.1.0.0/17 is not inside the VPC CIDR 10.0.0.0/16",
                "pick a block inside 10.0.0.0/16",
            )
        ],
        id="cidr-private-outside-vpc",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(public_subnet_cidr="192.168.0.0/24"),
        [
            err(
                PUBLIC,
                "192.168.0.0/24 is not inside the VPC CIDR 10.0.0.0/16",
                "pick a block inside 10.0.0.0/16",
            )
        ],
        id="cidr-public-outside-vpc",
    ),
    pytest.param(
        "vpc-cidr",
        vpc(private_subnet_cidr="10.0.0.0/17"),
        [
            err(
                PRIVATE,
                "10.0.0.0/17 overlaps the public subnet 10.0.0.0/24",
                "give the subnets disjoint blocks, e.g. 10.0.0.0/24 and 10.0.128.0/17",
            )
        ],
        id="cidr-subnets-overlap",
    ),
    # endpoints-without-nat
    pytest.param(
        "endpoints-without-nat",
        existing_vpc(endpoints=False),
        [
            info(
                "network.interface_endpoints",
                "needs a route to the internet (NAT) or interface endpoints",
                "set interface_endpoints: true (and internet: false) if the subnet has no NAT "
                "route",
            )
        ],
        id="endpoints-existing-off",
    ),
    # region-known: a region missing from the dated table is an error with a way past it.
    *[
        pytest.param(
            "region-known",
            region(name),
            [
                err(
                    "region",
                    f"{name!r} is not a region in hyperpod-kit's table (checked 2026-11-23)",
                    f"{close}if {name} is a region newer than the table, add it to "
                    "validation.allow_regions",
                )
            ],
            id=f"region-unknown-{name}",
        )
        for name, close in [
            ("us-north-9", "did you mean 'eu-north-1'? "),
            ("eu-wset-1", "did you mean 'eu-west-1'? "),
            ("xx-yyyyyy-7", ""),
        ]
    ],
    pytest.param(
        "region-known",
        region("ca-west-1", "caw1-az1"),
        [
            warn(
                "region",
                "SageMaker HyperPod is not listed in ca-west-1",
                "pick a HyperPod region such as us-west-2, or suppress region-known if it is "
                "offered there now",
            )
        ],
        id="region-without-hyperpod-warns",
    ),
    # az-id-in-region: from the table where it lists the region, else from the ID's prefix.
    *[
        pytest.param(
            "az-id-in-region",
            region(name, az),
            [
                err(
                    "availability_zone_id",
                    f"{az!r} is {where}: {name} has {', '.join(ids)} (table checked 2026-11-23)",
                    f"use one of them, e.g. {close}; a zone newer than the table goes in "
                    "validation.allow_availability_zone_ids",
                )
            ],
            id=f"az-{az}-not-in-{name}",
        )
        for name, az, where, ids, close in [
            ("us-west-2", "use1-az1", "a zone of another region", USW2, "usw2-az1"),
            ("us-west-2", "usw1-az1", "a zone of another region", USW2, "usw2-az1"),
            ("us-west-2", "usw2-az9", "not a zone of the region", USW2, "usw2-az1"),
            ("us-west-1", "usgw1-az1", "a zone of another region", USW1, "usw1-az1"),
            ("ca-central-1", "cac1-az3", "not a zone of the region", CAC1, "cac1-az1"),
            ("us-west-2", "usw2-az0", "not a zone of the region", USW2, "usw2-az1"),
        ]
    ],
    *[
        pytest.param(
            "az-id-in-region",
            region(name, az),
            [
                err(
                    "availability_zone_id",
                    f"{az!r} is not in region {name} (its zones are {prefix}-az1, {prefix}-az2",
                    f"use an AZ ID of {name}, like {prefix}-az1",
                )
            ],
            id=f"az-{az}-not-in-{name}",
        )
        for name, az, prefix in [
            ("us-gov-west-1", "usw1-az1", "usgw1"),
            ("us-north-9", "usw2-az2", "usn9"),
        ]
    ],
    pytest.param(
        "az-id-in-region",
        eks_network(az="usw2-az7"),
        [
            err(
                "network.control_plane_availability_zone_id",
                "'usw2-az7' is not a zone of the region",
                "use one of them, e.g. usw2-az1; a zone newer than the table goes in "
                "validation.allow_availability_zone_ids",
            )
        ],
        id="az-control-plane-zone-checked-too",
    ),
    # tags
    pytest.param(
        "tags",
        {"tags": {"aws:cost": "x"}},
        [
            err(
                "tags.aws:cost",
                "tag keys starting with 'aws:' are reserved",
                "use another prefix, e.g. 'hyperpod-dev:cost'",
            )
        ],
        id="tags-aws-prefix",
    ),
    pytest.param(
        "tags",
        {"tags": {f"k{i}": "v" for i in range(48)}},
        [
            err(
                "tags",
                "48 tags; a resource takes 50 and hyperpod-kit puts up to 3 of its own on some",
                "keep at most 47",
            )
        ],
        id="tags-48",
    ),
    pytest.param(
        "tags",
        {"tags": {"hyperpod-kit:environment": "other"}},
        [
            err(
                "tags.hyperpod-kit:environment",
                "hyperpod-kit:environment is hyperpod-kit's own tag",
                "remove it; every resource already carries it",
            )
        ],
        id="tags-kit-key",
    ),
    pytest.param(
        "tags",
        {"tags": {"team": "aws:ml"}},
        [
            err(
                "tags.team",
                "tag values starting with 'aws:' are reserved for AWS ('aws:ml')",
                "drop the aws: prefix from the value",
            )
        ],
        id="tags-aws-value",
    ),
    pytest.param(
        "tags",
        merge(ACCOUNTING, {"tags": {"rds:owner": "ml", "team": "rds:ml"}}),
        [
            err(
                "tags.rds:owner",
                "tag keys starting with 'rds:' are reserved by RDS ('rds:owner')",
                "use another prefix, e.g. 'hyperpod-dev:owner'",
            ),
            err(
                "tags.team",
                "tag values starting with 'rds:' are reserved by RDS ('rds:ml')",
                "drop the rds: prefix from the value",
            ),
        ],
        id="tags-rds-prefix-with-accounting",
    ),
    # kms-key
    pytest.param(
        "kms-key",
        {"kms_key_arn": KMS_KEY.replace("us-west-2", "us-east-1")},
        [
            err(
                "kms_key_arn",
                "the key is in us-east-1 (aws); EKS and CloudWatch Logs use only a key of the "
                "environment's region, us-west-2",
                f"name a key of us-west-2, like {KMS_KEY}; a multi-Region key's replica there "
                "has its own ARN",
            )
        ],
        id="kms-key-other-region",
    ),
    pytest.param(
        "kms-key",
        {"kms_key_arn": KMS_KEY.replace("arn:aws:", "arn:aws-cn:")},
        [
            err(
                "kms_key_arn",
                "the key is in us-west-2 (aws-cn)",
                f"name a key of us-west-2, like {KMS_KEY}; a multi-Region key's replica there "
                "has its own ARN",
            )
        ],
        id="kms-key-other-partition",
    ),
    pytest.param(
        "kms-key",
        {"kms_key_arn": KMS_KEY, "account": "444455556666"},
        [
            warn(
                "kms_key_arn",
                "the key belongs to account 111122223333, the environment deploys to 444455556666",
                "its key policy must let this account's principals and "
                "logs.us-west-2.amazonaws.com use it (docs/security.md); suppress kms-key if it "
                "does",
            )
        ],
        id="kms-key-other-account",
    ),
    # control-characters
    pytest.param(
        "control-characters",
        {"trainer": {"job": {"checkpoint_dir": "/fsx/checkpoints\nrm -rf /fsx"}}},
        [
            err(
                "trainer.job.checkpoint_dir",
                "'/fsx/checkpoints\\nrm -rf /fsx' holds a line break",
                CONTROL_HINT,
            )
        ],
        id="control-line-break-issue-14",
    ),
    pytest.param(
        "control-characters",
        {"trainer": {"job": {"data_path": "/fsx/data/tokens\n"}}},
        [
            err(
                "trainer.job.data_path",
                "holds a line break",
                "a value is one line of printable "
                "text: remove the character; a YAML block scalar (| or >) keeps its last line "
                "break: write |- or >-",
            )
        ],
        id="control-block-scalar-line-break",
    ),
    pytest.param(
        "control-characters",
        {"tags": {"team\r": "ml", "owner": "a\u2028b"}},
        [
            err("tags", "the key 'team\\r' holds a carriage return", CONTROL_HINT),
            err("tags.owner", "holds a line separator (U+2028)", CONTROL_HINT),
        ],
        id="control-tag-key-and-value",
    ),
    pytest.param(
        "control-characters",
        {"monitoring": {"node_checks": {"volumes": ["/", "/opt/x\x00"]}}},
        [err("monitoring.node_checks.volumes[1]", "holds a NUL byte", CONTROL_HINT)],
        id="control-nul-in-a-list",
    ),
    # instance-group-names
    pytest.param(
        "instance-group-names",
        groups(CONTROLLER, LOGIN, COMPUTE, COMPUTE),
        [
            err(
                f"{GROUPS}[3].name",
                "'compute' is used by another group",
                "give each instance group its own name",
            )
        ],
        id="names-identical-duplicate",
    ),
    # instance-group-roles
    pytest.param(
        "instance-group-roles",
        groups(LOGIN, COMPUTE),
        [
            err(
                GROUPS,
                "a Slurm cluster has exactly one controller group, not 0",
                "add one group with role: controller and instance_count: 1",
            )
        ],
        id="roles-slurm-no-controller",
    ),
    pytest.param(
        "instance-group-roles",
        groups(CONTROLLER, group("controller-b", "controller"), COMPUTE),
        [
            err(
                GROUPS,
                "a Slurm cluster has exactly one controller group, not 2",
                "add one group with role: controller and instance_count: 1",
            )
        ],
        id="roles-slurm-two-controllers",
    ),
    pytest.param(
        "instance-group-roles",
        groups(group("controller", "controller", 2), COMPUTE),
        [err(f"{GROUPS}[0].instance_count", "the controller group has 2 instances", "use 1")],
        id="roles-controller-with-2-instances",
    ),
    pytest.param(
        "instance-group-roles",
        groups(CONTROLLER, COMPUTE, group("gpu", "worker", 2)),
        [err(f"{GROUPS}[2].role", "role worker is for EKS clusters", "use compute")],
        id="roles-slurm-worker",
    ),
    pytest.param(
        "instance-group-roles",
        groups(CONTROLLER, LOGIN, group("login-b", "login"), COMPUTE),
        [
            err(
                GROUPS,
                "a Slurm cluster has at most one login group, not 2",
                "merge the login groups into one (raise its instance_count)",
            )
        ],
        id="roles-slurm-two-logins",
    ),
    pytest.param(
        "instance-group-roles",
        groups(CONTROLLER, LOGIN),
        [
            err(
                GROUPS,
                "a Slurm cluster needs at least one compute group",
                "add a group with role: compute, e.g. ml.p5.48xlarge",
            )
        ],
        id="roles-slurm-no-compute",
    ),
    pytest.param(
        "instance-group-roles",
        groups(orchestrator="eks"),
        [
            err(
                GROUPS,
                "an EKS cluster needs at least one worker group",
                "add a group with role: worker",
            )
        ],
        id="roles-eks-no-worker",
    ),
    pytest.param(
        "job-elastic",
        job(elastic={"min_replicas": 1, "max_replicas": 2}),
        [
            err(
                "trainer.job.elastic",
                "elastic replicas are a HyperPodPyTorchJob feature (EKS)",
                "remove elastic, or use orchestrator: eks",
            )
        ],
        id="elastic-on-slurm",
    ),
    pytest.param(
        "instance-group-roles",
        groups(CONTROLLER, group("gpu", "worker", 2), orchestrator="eks"),
        [err(f"{GROUPS}[0].role", "role controller is for Slurm clusters", "use worker on EKS")],
        id="roles-eks-controller",
    ),
    pytest.param(
        "instance-group-roles",
        groups(group("gpu", "worker", 2), COMPUTE, orchestrator="eks"),
        [err(f"{GROUPS}[1].role", "role compute is for Slurm clusters", "use worker on EKS")],
        id="roles-eks-compute",
    ),
    # job-global-batch: default job is 2 nodes x 1 process, micro batch 4, global batch 32.
    *[
        pytest.param(
            "job-global-batch",
            job(**kw),
            [err(BATCH, message, hint)],
            id=f"batch-{label}",
        )
        for label, kw, message, hint in [
            (
                "30",
                {"global_batch_size": 30},
                "30 is not a multiple of micro_batch_size x ranks (4 x 2)",
                "use 32",
            ),
            ("below-one-step", {"global_batch_size": 4}, "(4 x 2)", "use 8"),
            (
                "3-nodes",
                {"nodes": 3},
                "32 is not a multiple of micro_batch_size x ranks (4 x 3)",
                "use 36",
            ),
            ("8-per-node", {"processes_per_node": 8}, "(4 x 16)", "use 64"),
        ]
    ],
    # job-elastic
    pytest.param(
        "job-elastic",
        elastic(min_replicas=4, max_replicas=2),
        [
            err(
                "trainer.job.elastic.min_replicas",
                "min_replicas 4 is above max_replicas 2",
                "swap them",
            ),
            err(
                "trainer.job.nodes",
                "2 nodes is outside the elastic range [4, 2]",
                "start within the range",
            ),
        ],
        id="elastic-min-above-max",
    ),
    pytest.param(
        "job-elastic",
        elastic(
            min_replicas=1, max_replicas=2, replica_increment_step=1, replica_discrete_values=[1, 2]
        ),
        [
            err(
                "trainer.job.elastic.replica_discrete_values",
                "replica_increment_step and replica_discrete_values are exclusive",
                "keep one",
            )
        ],
        id="elastic-step-and-discrete",
    ),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=1, max_replicas=3),
        [
            err(
                BATCH,
                "with 3 replicas (1 rank per replica) the global batch 32 does not split",
                ELASTIC_BATCH_HINT,
            )
        ],
        id="elastic-batch-not-divisible-at-3",
    ),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=2, max_replicas=6, replica_increment_step=2),
        [err(BATCH, "with 6 replicas (1 rank per replica)", ELASTIC_BATCH_HINT)],
        id="elastic-step-reaches-bad-size",
    ),
    pytest.param(
        "job-elastic",
        elastic(
            {"processes_per_node": 2},
            min_replicas=1,
            max_replicas=4,
            replica_discrete_values=[1, 2, 3],
        ),
        [err(BATCH, "with 3 replicas (2 ranks per replica)", ELASTIC_BATCH_HINT)],
        id="elastic-discrete-bad-size-2-per-node",
    ),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=1, max_replicas=4, replica_discrete_values=[2, 8]),
        [
            err(
                "trainer.job.elastic.replica_discrete_values",
                "8 is outside [1, 4]",
                "keep every value within min_replicas..max_replicas",
            )
        ],
        id="elastic-discrete-outside-range",
    ),
    pytest.param(
        "job-elastic",
        elastic({"global_batch_size": 96}, min_replicas=3, max_replicas=4),
        [
            err(
                "trainer.job.nodes",
                "2 nodes is outside the elastic range [3, 4]",
                "start within the range",
            )
        ],
        id="elastic-nodes-outside-range",
    ),
    pytest.param(
        "job-elastic",
        elastic(min_replicas=1, max_replicas=2, graceful_shutdown_timeout_seconds=60),
        [
            err(
                "trainer.job.elastic.graceful_shutdown_timeout_seconds",
                "60 s is shorter than stop_grace_seconds (180 s)",
                "use at least 180",
            )
        ],
        id="elastic-shutdown-shorter-than-the-final-save",
    ),
    # instance-type
    *[
        pytest.param(
            "instance-type",
            groups(CONTROLLER, group("g", "compute", 1, t)),
            [
                err(
                    f"{GROUPS}[1].instance_type",
                    f"{t} is not a HyperPod instance type (table of 209 types, checked 2026-11-23)",
                    hint + "a type newer than the table goes in validation.allow_instance_types",
                )
            ],
            id=f"type-{t}",
        )
        for t, hint in [
            ("ml.p5.48xlage", "did you mean ml.p5.48xlarge? "),
            ("ml.t2.micro", ""),
            ("ml.inf2.48xlarge", ""),
        ]
    ],
    # deep-health-checks
    pytest.param(
        "deep-health-checks",
        groups(dict(CONTROLLER, deep_health_checks=["InstanceStress"]), COMPUTE),
        [
            err(
                f"{GROUPS}[0].deep_health_checks",
                "ml.m5.xlarge has no GPU or Trainium chip",
                "remove deep_health_checks from this group",
            )
        ],
        id="dhc-on-cpu",
    ),
    pytest.param(
        "deep-health-checks",
        groups(CONTROLLER, dict(COMPUTE, deep_health_checks=[])),
        [
            warn(
                f"{GROUPS}[1].deep_health_checks",
                "deep health checks are off on ml.g5.8xlarge",
                "leave deep_health_checks out (both checks run by default)",
            )
        ],
        id="dhc-off-on-gpu",
    ),
    pytest.param(
        "deep-health-checks",
        groups(CONTROLLER, dict(COMPUTE, deep_health_checks=["InstanceStress", "InstanceStress"])),
        [err(f"{GROUPS}[1].deep_health_checks", "a check is listed twice", "list each check once")],
        id="dhc-twice",
    ),
    # slurm-partitions
    pytest.param(
        "slurm-partitions",
        groups(dict(CONTROLLER, partition="ctl"), COMPUTE),
        [
            err(
                f"{GROUPS}[0].partition",
                "a controller group takes no partition",
                "remove partition here",
            )
        ],
        id="partition-on-controller",
    ),
    pytest.param(
        "slurm-partitions",
        groups(CONTROLLER, dict(COMPUTE, partition="dev")),
        [
            warn(
                f"{GROUPS}[1].partition",
                "every node is already in the dev partition",
                "give the group its own partition name, e.g. 'compute'",
            )
        ],
        id="partition-dev",
    ),
    pytest.param(
        "slurm-partitions",
        merge(eks_network(), {"cluster": {"instance_groups": [dict(WORKERS, partition="gpu")]}}),
        [
            err(
                f"{GROUPS}[0].partition",
                "partitions are for Slurm clusters",
                "remove partition on EKS",
            )
        ],
        id="partition-on-eks",
    ),
    # training-plan
    pytest.param(
        "training-plan",
        plan("us-east-1"),
        [
            err(
                "cluster.training_plan_arn",
                "the training plan is in us-east-1, the environment in us-west-2",
                "use a training plan of the environment's region",
            )
        ],
        id="plan-other-region",
    ),
    pytest.param(
        "training-plan",
        merge(plan("us-west-2"), {"account": "444455556666"}),
        [
            err(
                "cluster.training_plan_arn",
                "belongs to account 111122223333, the environment to 444455556666",
                "use a training plan of the environment's account",
            )
        ],
        id="plan-other-account",
    ),
    # users
    pytest.param(
        "users",
        {"users": [user("alice", 10001), user("alice", 10002)]},
        [err("users[1].name", "'alice' is also users[0]", "list each person once")],
        id="users-same-name",
    ),
    pytest.param(
        "users",
        {"users": [user("alice", 10001), user("bob", 10001)]},
        [
            err(
                "users[1].uid",
                "uid 10001 is also alice's",
                "give each user their own uid, e.g. 10002",
            )
        ],
        id="users-same-uid",
    ),
    # files
    pytest.param(
        "files",
        lifecycle_script("no-such-script.sh"),
        [
            err(
                f"{GROUPS}[2].lifecycle.scripts[0]",
                "'no-such-script.sh' is not a file",
                "give the file's path, relative to the environment file",
            )
        ],
        id="files-missing-script",
    ),
    pytest.param(
        "files",
        {"cluster": {"slurm": {"enroot_pyxis_packages": str(Path(__file__).parent)}}},
        [
            err(
                "cluster.slurm.enroot_pyxis_packages",
                "holds no .deb packages",
                "put the enroot, enroot+caps and pyxis .deb files built for the cluster's "
                "Slurm here",
            )
        ],
        id="files-pyxis-folder-without-debs",
    ),
    pytest.param(
        "files",
        merge(eks_network(), eks(helm_chart=str(Path(__file__).parent))),
        [
            err(
                "cluster.eks.helm_chart",
                "has no Chart.yaml",
                "give the HyperPodHelmChart folder of sagemaker-hyperpod-cli",
            )
        ],
        id="files-chart-without-chart-yaml",
    ),
    pytest.param(
        "files",
        job(template="missing.sbatch.j2"),
        [
            err(
                "trainer.job.template",
                "'missing.sbatch.j2' is not a file",
                "give the file's path, relative to the environment file",
            )
        ],
        id="files-missing-template",
    ),
    # enroot-pyxis-source
    pytest.param(
        "enroot-pyxis-source",
        {},
        [
            warn(
                "cluster.slurm.enroot_pyxis",
                "enroot and pyxis come from the AMI only",
                "name a folder of packages in cluster.slurm.enroot_pyxis_packages, or suppress "
                "enroot-pyxis-source if your AMI has them",
            )
        ],
        id="pyxis-from-ami-only",
    ),
    # eks
    pytest.param(
        "eks",
        merge(
            eks_network(),
            eks(helm_chart=str(CHART), existing_cluster_security_group_id=CONTROL_PLANE_SG),
        ),
        [
            err(
                "cluster.eks.existing_cluster_security_group_id",
                "is only for an existing cluster (existing_cluster_name)",
                "remove it, or set cluster.eks.existing_cluster_name",
            )
        ],
        id="eks-security-group-of-a-new-cluster",
    ),
    pytest.param(
        "eks",
        merge(eks_network(), eks(kubernetes_version="1.27", helm_chart=str(CHART))),
        [
            err(
                "cluster.eks.kubernetes_version",
                "HyperPod supports Kubernetes 1.28 to 1.34 (list checked 2026-11-23), not 1.27",
                'use "1.33"; a newer supported version goes in '
                "validation.allow_kubernetes_versions",
            )
        ],
        id="eks-version-too-old",
    ),
    pytest.param(
        "eks",
        merge(eks_network(), eks(helm_chart=str(CHART), addons={"vpc_cni": "v1.18.2-eksbuild.1"})),
        [
            err(
                "cluster.eks.addons.vpc_cni",
                "HyperPod needs the VPC CNI 1.18.3 or newer",
                "use v1.20.1-eksbuild.3",
            )
        ],
        id="eks-old-vpc-cni",
    ),
    pytest.param(
        "eks",
        eks_network(),
        [
            warn(
                "cluster.eks.helm_chart",
                "without the HyperPod Helm chart the cluster has no health-monitoring agent",
                "give a pinned copy of sagemaker-hyperpod-cli's helm_chart/HyperPodHelmChart in "
                "cluster.eks.helm_chart",
            )
        ],
        id="eks-no-helm-chart",
    ),
    pytest.param(
        "eks",
        merge(eks_network(), eks(device_plugins={"enabled": False})),
        [
            warn(
                "cluster.eks.helm_chart",
                "with cluster.eks.device_plugins.enabled false no NVIDIA or EFA device plugin is "
                "deployed: nothing advertises nvidia.com/gpu or vpc.amazonaws.com/efa, and GPU "
                "jobs stay Pending",
                "give a pinned copy of sagemaker-hyperpod-cli's helm_chart/HyperPodHelmChart in "
                "cluster.eks.helm_chart",
            )
        ],
        id="eks-no-helm-chart-and-no-device-plugins",
    ),
    pytest.param(
        "eks",
        merge(eks_network(), eks(existing_cluster_name="ml")),
        [
            info(
                "cluster.eks.helm_chart",
                "(unless it is already installed on the existing cluster); no NVIDIA or EFA "
                "device plugin is deployed on an existing cluster unless "
                "cluster.eks.device_plugins.enabled is true",
                "give a pinned copy of sagemaker-hyperpod-cli's helm_chart/HyperPodHelmChart in "
                "cluster.eks.helm_chart",
            )
        ],
        id="eks-existing-without-chart-says-no-device-plugins",
    ),
    # eks-device-plugins
    pytest.param(
        "eks-device-plugins",
        merge(eks_network(), eks(helm_chart=str(CHART), device_plugins={"enabled": True})),
        [
            err(
                "cluster.eks.device_plugins.enabled",
                "HyperPod's Helm chart (cluster.eks.helm_chart) already ships the NVIDIA and EFA "
                "device plugins; a second copy conflicts",
                "leave cluster.eks.device_plugins.enabled out",
            )
        ],
        id="plugins-beside-hyperpods-chart",
    ),
    pytest.param(
        "eks-device-plugins",
        merge(
            merge(eks_network(), eks_workers("ml.g5.xlarge")),
            eks(device_plugins={"efa_chart": PLUGIN_CHARTS["efa_chart"]}),
        ),
        [
            warn(
                "cluster.eks.device_plugins.efa_chart",
                "not used: no instance group has a type for aws-efa-k8s-device-plugin",
                "remove it",
            )
        ],
        id="plugins-efa-chart-without-an-efa-type",
    ),
    pytest.param(
        "eks-device-plugins",
        merge(
            merge(eks_network(), eks_workers("ml.m5.xlarge")), eks(device_plugins={"enabled": True})
        ),
        [
            info(
                "cluster.eks.device_plugins.enabled",
                "no instance group has a type with NVIDIA GPUs or EFA",
                None,
            )
        ],
        id="plugins-asked-for-on-cpu-only-groups",
    ),
    pytest.param(
        "eks-device-plugins",
        merge(eks_network(), NO_NAT),
        [
            warn(
                "cluster.eks.device_plugins.nvidia_chart",
                "the kubectl handler fetches nvidia-device-plugin from "
                "https://nvidia.github.io/k8s-device-plugin at deploy; a VPC with interface "
                "endpoints instead of NAT has no route there",
                "give a local copy of the chart in cluster.eks.device_plugins.nvidia_chart (and "
                "mirror its image)",
            ),
            warn(
                "cluster.eks.device_plugins.efa_chart",
                "the kubectl handler fetches aws-efa-k8s-device-plugin from "
                "https://aws.github.io/eks-charts/ at deploy",
                "give a local copy of the chart in cluster.eks.device_plugins.efa_chart (and "
                "mirror its image)",
            ),
        ],
        id="plugins-from-repositories-without-nat",
    ),
    pytest.param(
        "files",
        merge(
            eks_network(),
            eks(device_plugins={"nvidia_chart": str(CHART / "charts" / "training-operators")}),
        ),
        [
            err(
                "cluster.eks.device_plugins.nvidia_chart",
                "holds the chart training-operators 0.1.0, not nvidia-device-plugin 0.16.1 (the "
                "version HyperPod's own chart pins; table checked 2026-11-25)",
                "fetch it once: helm pull nvidia-device-plugin --repo "
                "https://nvidia.github.io/k8s-device-plugin --version 0.16.1 --untar",
            )
        ],
        id="files-plugin-folder-with-another-chart",
    ),
    pytest.param(
        "files",
        merge(eks_network(), eks(device_plugins={"efa_chart": str(Path(__file__).parent)})),
        [
            err(
                "cluster.eks.device_plugins.efa_chart",
                "has no Chart.yaml",
                "fetch it once: helm pull aws-efa-k8s-device-plugin --repo "
                "https://aws.github.io/eks-charts/ --version 0.5.20 --untar",
            )
        ],
        id="files-plugin-folder-without-chart-yaml",
    ),
    # subnet-capacity
    pytest.param(
        "subnet-capacity",
        merge(
            vpc(private_subnet_cidr="10.0.128.0/22"),
            groups(CONTROLLER, group("gpu", "compute", 64, "ml.p5.48xlarge")),
        ),
        [
            err(
                PRIVATE,
                "10.0.128.0/22 has 1019 usable addresses; the instance groups need about 2177",
                "use a /20 or larger",
            )
        ],
        id="capacity-64-p5-in-a-22",
    ),
    pytest.param(
        "subnet-capacity",
        merge(
            vpc(private_subnet_cidr="10.0.128.0/22"),
            groups(CONTROLLER, group("gpu", "compute", 28, "ml.p5.48xlarge")),
        ),
        [
            warn(
                PRIVATE,
                "the instance groups need about 989 of 1019 usable addresses",
                "use a larger private subnet",
            )
        ],
        id="capacity-nearly-full",
    ),
    # eks-control-plane-subnets
    pytest.param(
        "eks-control-plane-subnets",
        eks_network(cidr=None),
        [
            err(
                "network.vpc.control_plane_subnet_cidr",
                "a new EKS cluster needs a second private subnet for its control plane",
                "add control_plane_subnet_cidr: 10.0.1.0/24",
            )
        ],
        id="cp-no-subnet",
    ),
    pytest.param(
        "eks-control-plane-subnets",
        eks_network(az="usw2-az2"),
        [
            err(
                "network.control_plane_availability_zone_id",
                "usw2-az2 is the environment's own zone",
                "use another AZ ID of the region",
            )
        ],
        id="cp-same-zone",
    ),
    pytest.param(
        "eks-control-plane-subnets",
        eks_network(cidr="10.0.128.0/24"),
        [
            err(
                "network.vpc.control_plane_subnet_cidr",
                "10.0.128.0/24 overlaps private_subnet_cidr 10.0.128.0/17",
                "use a free block such as 10.0.1.0/24",
            )
        ],
        id="cp-overlaps-private",
    ),
    pytest.param(
        "eks-control-plane-subnets",
        vpc(control_plane_subnet_cidr="10.0.1.0/24"),
        [
            warn(
                "network",
                "control-plane subnet settings are used only when hyperpod-kit creates an EKS "
                "cluster",
                "remove them",
            )
        ],
        id="cp-on-slurm-ignored",
    ),
    # job-instance-group
    pytest.param(
        "job-instance-group",
        groups(CONTROLLER, COMPUTE, group("big", "compute", 4, "ml.p5.48xlarge")),
        [
            err(
                "trainer.job.instance_group",
                "the cluster has 2 compute groups (compute, big); the job must name one",
                "add instance_group: compute",
            )
        ],
        id="job-group-ambiguous",
    ),
    pytest.param(
        "job-instance-group",
        job(instance_group="compte"),
        [
            err(
                "trainer.job.instance_group",
                "'compte' is not a compute group",
                "did you mean 'compute'?",
            )
        ],
        id="job-group-typo",
    ),
    pytest.param(
        "job-instance-group",
        job(nodes=3, global_batch_size=36),
        [
            err(
                "trainer.job.nodes",
                "3 nodes, but group 'compute' has 2",
                "use at most 2 nodes, or raise that group's instance_count",
            )
        ],
        id="job-nodes-above-count",
    ),
    pytest.param(
        "job-instance-group",
        merge(eks_network(), elastic(min_replicas=1, max_replicas=8)),
        [
            err(
                "trainer.job.elastic.max_replicas",
                "8 replicas, but group 'workers' has 4 nodes",
                "use at most 4",
            )
        ],
        id="job-elastic-above-count",
    ),
    # job-memory
    pytest.param(
        "job-memory",
        merge(
            groups(CONTROLLER, group("gpu", "compute", 2, "ml.g5.48xlarge")),
            job(preset="qwen2.5-14b", nodes=2, micro_batch_size=1, global_batch_size=64),
        ),
        [
            err(
                "trainer.job.preset",
                "qwen2.5-14b needs about 36.0 GiB per GPU (states 13.8 + unsharded 15.7 + "
                "activations 1.4 + head 2.2 + allowance 3.0 GiB) on 16 GPUs of ml.g5.48xlarge, "
                "which have 22 GiB each",
                "a GPU with more memory: all but the sharded training state take 22.3 GiB "
                "whatever the node count",
            )
        ],
        id="memory-14b-on-16-a10g",
    ),
    pytest.param(
        "job-memory",
        job(activation_checkpointing=False),
        [
            warn(
                "trainer.job.preset",
                "llama-1b needs about 33.4 GiB per GPU (states 9.2 + unsharded 2.9 + activations "
                "13.3 + head 5.0 + allowance 3.0 GiB) on 2 GPUs of ml.g5.8xlarge",
                "any of: activation_checkpointing: true; micro_batch_size: 1",
            )
        ],
        id="memory-activations-over-two-a10g",
    ),
    pytest.param(  # 7B on one node of 8 A10G: four nodes, with both switches
        "job-memory",
        merge(
            groups(CONTROLLER, group("gpu", "compute", 2, "ml.g5.48xlarge")),
            job(preset="qwen2.5-7b", nodes=1, micro_batch_size=4, activation_checkpointing=False),
        ),
        [
            err(
                "trainer.job.preset",
                "qwen2.5-7b needs about 82.8 GiB per GPU (states 14.2 + unsharded 11.6 + "
                "activations 48.2 + head 5.9 + allowance 3.0 GiB) on 8 GPUs of ml.g5.48xlarge",
                "nodes: 4 or more (and the group's instance_count) with "
                "activation_checkpointing: true and micro_batch_size: 1",
            )
        ],
        id="memory-7b-on-8-a10g",
    ),
    # job-processes-per-node
    pytest.param(
        "job-processes-per-node",
        job(processes_per_node=8),
        [
            err(
                "trainer.job.processes_per_node",
                "8 processes per node, but ml.g5.8xlarge has 1 GPU",
                "use 1 (or leave processes_per_node out: one rank per GPU)",
            )
        ],
        id="ppn-8-on-one-gpu",
    ),
    pytest.param(
        "job-processes-per-node",
        merge(
            groups(CONTROLLER, group("gpu", "compute", 2, "ml.p5.48xlarge")),
            job(processes_per_node=4),
        ),
        [
            warn(
                "trainer.job.processes_per_node",
                "4 processes per node leave 4 of 8 GPUs of ml.p5.48xlarge idle",
                "use 8",
            )
        ],
        id="ppn-idle-gpus",
    ),
    pytest.param(
        "job-processes-per-node",
        groups(CONTROLLER, group("cpu", "compute", 2, "ml.c5.4xlarge")),
        [
            err(
                "trainer.job.processes_per_node",
                "the job's group 'cpu' is ml.c5.4xlarge, with no GPU",
                "run the job on a GPU group (e.g. ml.p5.48xlarge)",
            )
        ],
        id="ppn-cpu-group",
    ),
    pytest.param(
        "job-processes-per-node",
        groups(CONTROLLER, group("trn", "compute", 2, "ml.trn1.32xlarge")),
        [
            err(
                "trainer.job.processes_per_node",
                "with Trainium chips; the bundled trainer runs on NVIDIA GPUs",
                "run the job on a GPU group (e.g. ml.p5.48xlarge)",
            )
        ],
        id="ppn-trainium-group",
    ),
    # job-paths
    pytest.param(
        "job-paths",
        job(data_path="data/tokens"),
        [
            err(
                "trainer.job.data_path",
                "'data/tokens' is a relative path",
                "use an absolute path on the shared file system, like /fsx/data/tokens",
            )
        ],
        id="paths-relative-data",
    ),
    pytest.param(
        "job-paths",
        job(checkpoint_dir="/tmp/ckpt"),
        [
            err(
                "trainer.job.checkpoint_dir",
                "'/tmp/ckpt' is node-local (/tmp): a node HyperPod replaces comes back without it",
                "use a folder under /fsx, like /fsx/checkpoints/pretrain",
            )
        ],
        id="paths-checkpoint-in-tmp",
    ),
    pytest.param(
        "job-paths",
        job(checkpoint_dir="/data/ckpt"),
        [
            err(
                "trainer.job.checkpoint_dir",
                "'/data/ckpt' is outside the shared /fsx",
                "use a folder under /fsx, like /fsx/checkpoints/pretrain",
            )
        ],
        id="paths-checkpoint-elsewhere",
    ),
    pytest.param(
        "job-paths",
        job(data_path="/opt/data"),
        [
            warn(
                "trainer.job.data_path",
                "'/opt/data' is outside the shared /fsx",
                "put the token shards under /fsx",
            )
        ],
        id="paths-data-off-fsx-warns",
    ),
    # job-auto-resume
    pytest.param(
        "job-auto-resume",
        {"cluster": {"node_recovery": "None"}},
        [
            err(
                "trainer.job.auto_resume",
                "auto_resume needs cluster.node_recovery: Automatic",
                "set cluster.node_recovery: Automatic, or auto_resume: false",
            )
        ],
        id="auto-resume-without-recovery",
    ),
    # job-orchestrator
    pytest.param(
        "job-orchestrator",
        job(namespace="team-a"),
        [
            warn(
                "trainer.job.namespace",
                "namespace is used only by the EKS job template; it is ignored here",
                "remove namespace",
            )
        ],
        id="orch-namespace-on-slurm",
    ),
    pytest.param(
        "job-orchestrator",
        merge(eks_network(), job(user="alice")),
        [
            err(
                "trainer.job.user",
                "'alice' is not in users",
                "add the person to users, or name one who is",
            )
        ],
        id="orch-eks-unknown-user",
    ),
    pytest.param(
        "job-orchestrator",
        job(partition="gpu"),
        [
            err(
                "trainer.job.partition",
                "no compute group forms partition 'gpu'",
                "use one of compute, dev",
            )
        ],
        id="orch-unknown-partition",
    ),
    # job-trainer-config
    pytest.param(
        "job-trainer-config",
        job(preset="llama-1B"),
        [
            err(
                "trainer.job.preset",
                "the trainer rejects it: unknown preset 'llama-1B'",
                "did you mean 'llama-1b'? presets: llama-1b, llama-8b, llama3.1-8b, mistral-7b, "
                "qwen2.5-14b, qwen2.5-7b, small, tiny",
            )
        ],
        id="trainer-preset-typo",
    ),
    pytest.param(
        "job-trainer-config",
        job(token_dtype="uint16"),
        [
            err(
                "trainer.job.token_dtype",
                "the trainer rejects it: uint16 cannot hold ids of vocab_size 128256",
                "the bundled trainer's rule; see docs/trainer.md",
            )
        ],
        id="trainer-uint16-with-llama-vocab",
    ),
    # studio
    pytest.param(
        "studio-users",
        studio(users=["alice", "bob"]),
        [
            warn(
                "studio.users",
                "studio.users is deprecated",
                "rename it to studio.include: [alice, bob], or remove it to give every user a "
                "profile",
            )
        ],
        id="studio-deprecated-users",
    ),
    pytest.param(
        "studio-users",
        studio(users=["alice"], include=["alice"]),
        [
            warn(
                "studio.users",
                "deprecated",
                "rename it to studio.include: [alice], or remove it to give every user a profile",
            ),
            err("studio.users", "are both set", "keep only studio.include"),
        ],
        id="studio-users-and-include",
    ),
    pytest.param(
        "studio-users",
        studio(include=["alice", "carl"]),
        [
            err(
                "studio.include[1]",
                "'carl' is not one of the environment's users",
                "did you mean carol? add the person to the top-level users (name, uid, gid)",
            )
        ],
        id="studio-include-unknown",
    ),
    pytest.param(
        "studio-users",
        studio(exclude=["zed"]),
        [
            warn(
                "studio.exclude[0]",
                "excluding it does nothing",
                "remove it from studio.exclude",
            )
        ],
        id="studio-exclude-unknown",
    ),
    pytest.param(
        "studio-users",
        {"studio": {"enabled": True}},
        [
            err(
                "studio.enabled",
                "selects no user",
                "list people in the top-level users (name, uid, gid); every one gets a profile "
                "unless studio.include or studio.exclude say otherwise",
            )
        ],
        id="studio-no-users",
    ),
    pytest.param(
        "studio-profile-names",
        merge(studio(), {"users": [*PEOPLE, user("dave-", 10004)]}),
        [
            err(
                "users[3].name",
                "'dave-' cannot be a Studio profile name",
                "rename the user (e.g. 'dave'), or add it to studio.exclude",
            )
        ],
        id="studio-trailing-hyphen",
    ),
    pytest.param(
        "studio-partition-paths",
        studio(partitions="shared", shared_path="/my shared"),
        [
            err(
                "studio.shared_path",
                "'/my shared' is not a directory Studio can mount",
                "use a path such as /shared",
            )
        ],
        id="studio-shared-path-space",
    ),
    pytest.param(
        "studio-partition-paths",
        studio(partitions="shared", shared_path="/"),
        [err("studio.shared_path", "not / itself", "use a path such as /shared")],
        id="studio-shared-path-root",
    ),
    pytest.param(
        "studio-partition-paths",
        studio(partitions="shared", shared_path="/" + "s" * 256),
        [err("studio.shared_path", "at most 256 characters", "use a path such as /shared")],
        id="studio-shared-path-too-long",
    ),
    pytest.param(
        "studio-partition-paths",
        studio(partitions="shared", shared_path="/data/shared"),
        [
            err(
                "studio.shared_path",
                "/data/shared overlaps /data, a directory linked to S3",
                "use a path outside the data repository associations, such as /shared",
            )
        ],
        id="studio-shared-path-in-association",
    ),
    pytest.param(
        "studio-file-system",
        merge(studio(), lustre(existing=EXISTING_FS)),
        [
            err(
                "storage.lustre.existing",
                "from the environment's VPC, which this deploy creates",
                "use network.existing_vpc (the file system's VPC), or leave "
                "storage.lustre.existing out so the storage stack creates the file system",
            )
        ],
        id="studio-existing-file-system-new-vpc",
    ),
    pytest.param(
        "studio-cluster-client",
        merge(studio(), {"cluster": {"slurm": {"config_strategy": "Managed"}}}),
        [
            err(
                "cluster.slurm.config_strategy",
                "under Managed that edit is drift",
                "set cluster.slurm.config_strategy: Merge",
            )
        ],
        id="studio-slurm-managed",
    ),
    pytest.param(
        "studio-cluster-client",
        merge(studio(), {"cluster": {"slurm": {"config_strategy": "Overwrite"}}}),
        [warn("cluster.slurm.config_strategy", "drops the auth/jwt lines", "use Merge")],
        id="studio-slurm-overwrite",
    ),
    pytest.param(
        "studio-cluster-client",
        merge(STUDIO_EKS, eks(kubernetes_version="1.40")),
        [
            err(
                "cluster.eks.kubernetes_version",
                "no pinned kubectl for Kubernetes 1.40",
                "use a version of the table, or add the conda-forge kubernetes-client build for "
                "it to KUBECTL_VERSIONS in hyperpod_kit/config/kubectl.py",
            )
        ],
        id="studio-eks-no-kubectl",
    ),
    pytest.param(
        "studio-cluster-client",
        merge(STUDIO_EKS, eks(existing_cluster_name="ml-platform")),
        [
            err(
                "cluster.eks.existing_cluster_security_group_id",
                "Studio's kubectl needs HTTPS to the API endpoint of 'ml-platform'",
                "set cluster.eks.existing_cluster_security_group_id to the cluster's security "
                "group (aws eks describe-cluster --name ml-platform --query "
                "cluster.resourcesVpcConfig.clusterSecurityGroupId), or leave Studio off",
            )
        ],
        id="studio-eks-existing-cluster-without-its-security-group",
    ),
    pytest.param(
        "studio-instance-types",
        studio(default_instance_type="ml.g5.xlarge"),
        [
            err(
                "studio.default_instance_type",
                "ml.g5.xlarge is not in studio.instance_types",
                "add ml.g5.xlarge to studio.instance_types",
            )
        ],
        id="studio-default-type-not-allowed",
    ),
    # monitoring ---------------------------------------------------------------------------------
    # monitoring-subscribers
    *[
        pytest.param(
            "monitoring-subscribers",
            {"monitoring": {"subscribers": {"emails": [email]}}},
            [
                err(
                    "monitoring.subscribers.emails[0]",
                    message,
                    "an address like ml-oncall@example.com",
                )
            ],
            id=f"email-{case}",
        )
        for case, email, message in [
            ("no-at", "oncall.example.com", "'oncall.example.com' is not an e-mail address"),
            ("no-dot", "oncall@example", "'oncall@example' is not an e-mail address"),
            ("two-at", "a@b@example.com", "is not an e-mail address"),
            ("space", "on call@example.com", "is not an e-mail address (it contains a space)"),
        ]
    ],
    pytest.param(
        "monitoring-subscribers",
        {
            "monitoring": {
                "alarm_email": "ml-oncall@example.com",
                "subscribers": {"emails": ["ML-Oncall@example.com"]},
            }
        },
        [
            info(
                "monitoring.subscribers.emails[0]",
                "ML-Oncall@example.com is listed twice",
                "remove the duplicate",
            )
        ],
        id="email-duplicate-of-alarm-email",
    ),
    pytest.param(
        "monitoring-subscribers",
        {"monitoring": {"subscribers": {"sns_topic_arns": ["oncall-pager"]}}},
        [
            err(
                "monitoring.subscribers.sns_topic_arns[0]",
                "'oncall-pager' is not an SNS topic ARN",
                "like arn:aws:sns:us-west-2:111122223333:oncall-pager",
            )
        ],
        id="topic-not-an-arn",
    ),
    pytest.param(
        "monitoring-subscribers",
        {
            "monitoring": {
                "subscribers": {"sns_topic_arns": ["arn:aws:sns:us-east-1:111122223333:pager"]}
            }
        },
        [
            err(
                "monitoring.subscribers.sns_topic_arns[0]",
                "the topic is in us-east-1, the environment in us-west-2; EventBridge rules "
                "deliver only to targets in their own region",
                "use a topic in us-west-2",
            )
        ],
        id="topic-other-region",
    ),
    pytest.param(
        "monitoring-subscribers",
        {
            "account": "111122223333",
            "monitoring": {
                "subscribers": {"sns_topic_arns": ["arn:aws:sns:us-west-2:444455556666:pager"]}
            },
        },
        [
            warn(
                "monitoring.subscribers.sns_topic_arns[0]",
                "the topic belongs to account 444455556666, not 111122223333",
                "its access policy must let this account's EventBridge rules and CloudWatch "
                "alarms publish, or alerts are dropped",
            )
        ],
        id="topic-other-account",
    ),
    pytest.param(
        "monitoring-subscribers",
        {"monitoring": {"enabled": False, "alarm_email": "ml-oncall@example.com"}},
        [
            warn(
                "monitoring.enabled",
                "monitoring is off: nothing is deployed, so the subscribers get no alerts",
                "set monitoring.enabled: true, or remove the subscribers",
            )
        ],
        id="subscribers-while-off",
    ),
    # monitoring-targets
    pytest.param(
        "monitoring-targets",
        {"monitoring": {"subscribers": {"sns_topic_arns": topics(5)}}},
        [
            err(
                "monitoring.subscribers.sns_topic_arns[4]",
                "5 topics here and monitoring's own make 6: the node-health EventBridge rule "
                "would have 6 targets (6 topics); EventBridge takes at most 5 a rule; each alarm "
                "would have 6 actions a state; CloudWatch takes at most 5 (limits checked ",
                "list at most 4 topics here; to reach more, add their subscriptions (e-mail, "
                "SQS, Lambda, HTTPS) to one of these topics, or list the people in "
                "monitoring.subscribers.emails",
            )
        ],
        id="targets-five-topics",
    ),
    pytest.param(
        "monitoring-targets",
        {
            "cluster": REPAIRED_BY_LAMBDA,
            "monitoring": {"subscribers": {"sns_topic_arns": topics(4)}},
        },
        [
            err(
                "monitoring.subscribers.sns_topic_arns[3]",
                "4 topics here and monitoring's own make 5: the node-health EventBridge rule "
                "would have 6 targets (5 topics and the remediation queue); EventBridge takes "
                "at most 5 a rule (limits checked ",
                "list at most 3 topics here (the remediation queue takes one target: "
                "cluster.node_recovery: None with auto_repair); to reach more, add their "
                "subscriptions (e-mail, SQS, Lambda, HTTPS) to one of these topics, or list the "
                "people in monitoring.subscribers.emails",
            )
        ],
        id="targets-four-topics-and-the-queue",
    ),
    # monitoring-node-checks
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"checks": ["fsx", "gpu-count", "xid"]}}},
        [
            err(
                "monitoring.node_checks.checks[0]",
                "unknown check 'fsx'",
                "did you mean 'fsx-mount'? checks: disk-space, efa, fsx-mount, gpu-count, "
                "gpu-errors",
            ),
            err(
                "monitoring.node_checks.checks[2]",
                "unknown check 'xid'",
                "checks: disk-space, efa, fsx-mount, gpu-count, gpu-errors",
            ),
        ],
        id="checks-unknown-names",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"checks": ["efa", "efa"]}}},
        [err("monitoring.node_checks.checks[1]", "efa is listed twice", "list each check once")],
        id="checks-twice",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"checks": []}}},
        [
            info(
                "monitoring.node_checks.checks",
                "no node checks run: only HyperPod's own agent watches the nodes",
                None,
            )
        ],
        id="checks-empty-is-info",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"interval_seconds": 30}}},
        [
            err(
                "monitoring.node_checks.interval_seconds",
                "30 s is shorter than a run of the checks can take (the FSx probe alone may "
                "wait 30 s)",
                "use 60 or more; 300 is usual",
            )
        ],
        id="interval-too-short",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"interval_seconds": 7200}}},
        [
            warn(
                "monitoring.node_checks.interval_seconds",
                "would go unnoticed for up to 120 minutes",
                "use at most 3600; 300 is usual",
            )
        ],
        id="interval-too-long",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"fsx_timeout_seconds": 2}}},
        [
            err(
                "monitoring.node_checks.fsx_timeout_seconds",
                "2 s is too short: a busy but healthy Lustre mount can take seconds to answer",
                "use 30",
            )
        ],
        id="fsx-timeout-too-short",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"interval_seconds": 60, "fsx_timeout_seconds": 45}}},
        [
            err(
                "monitoring.node_checks.fsx_timeout_seconds",
                "a 45 s probe could take more than half of the 60 s interval",
                "use at most 30, or a longer interval",
            )
        ],
        id="fsx-timeout-over-half-interval",
    ),
    pytest.param(
        "monitoring-node-checks",
        {"monitoring": {"node_checks": {"volumes": ["/", "opt/sagemaker"]}}},
        [
            err(
                "monitoring.node_checks.volumes[1]",
                "'opt/sagemaker' is not an absolute path",
                "a mount point such as /opt/sagemaker",
            )
        ],
        id="volume-relative",
    ),
    # monitoring-remediation
    pytest.param(
        "monitoring-remediation",
        {"monitoring": {"node_checks": {"remediation": {"fsx_mount": "reboot"}}}},
        [
            err(
                "monitoring.node_checks.remediation.fsx_mount",
                "unknown check 'fsx_mount'",
                "did you mean 'fsx-mount'? checks: disk-space, efa, fsx-mount, gpu-count, "
                "gpu-errors",
            )
        ],
        id="remediation-unknown-check",
    ),
    *[
        pytest.param(
            "monitoring-remediation",
            {"monitoring": {"node_checks": {"remediation": {check: action}}}},
            [
                err(
                    f"monitoring.node_checks.remediation.{check}",
                    f"{check} only logs and alerts: HyperPod's health-monitoring agent watches "
                    "GPU count, nvidia-smi and XID errors itself",
                    "use none",
                )
            ],
            id=f"remediation-{check}-{action}",
        )
        for check, action in [("gpu-count", "reboot"), ("gpu-errors", "replace")]
    ],
    pytest.param(
        "monitoring-remediation",
        {
            "monitoring": {
                "node_checks": {"checks": ["efa"], "remediation": {"disk-space": "replace"}}
            }
        },
        [
            warn(
                "monitoring.node_checks.remediation.disk-space",
                "disk-space is not in monitoring.node_checks.checks, so this never applies",
                "add disk-space to the checks, or remove this line",
            )
        ],
        id="remediation-for-check-not-run",
    ),
    pytest.param(
        "monitoring-remediation",
        {"cluster": {"node_recovery": "None"}},
        [
            warn(
                "cluster.node_recovery",
                "node checks ask HyperPod to repair a failing node (efa: replace, fsx-mount: "
                "reboot), but with node_recovery: None HyperPod's recovery is off",
                "set cluster.node_recovery: Automatic, or the remediation to none",
            )
        ],
        id="replace-without-node-recovery",
    ),
    pytest.param(
        "monitoring-remediation",
        {"monitoring": {"auto_repair": False, "node_checks": {"remediation": {"efa": "none"}}}},
        [
            info(
                "monitoring.auto_repair",
                "auto_repair is off: failing checks (fsx-mount: reboot) log and alert but ask "
                "HyperPod for nothing",
                None,
            )
        ],
        id="remediation-with-auto-repair-off",
    ),
    # monitoring-alarms
    pytest.param(
        "monitoring-alarms",
        {"monitoring": {"alarms": {"lifecycle_failures": 5, "node_health_events": 10}}},
        [
            warn(
                "monitoring.alarms.lifecycle_failures",
                "5 lifecycle-script failures within 15 minutes needs more nodes than the "
                "cluster's 4",
                "use at most 4",
            ),
            warn(
                "monitoring.alarms.node_health_events",
                "10 node health events within 15 minutes needs more nodes than the cluster's 4",
                "use at most 4",
            ),
        ],
        id="alarms-above-cluster-size",
    ),
    pytest.param(
        "monitoring-alarms",
        lustre(existing=EXISTING_FS),
        [
            info(
                "monitoring.alarms",
                "the file system exists already and its capacity is unknown offline",
                None,
            )
        ],
        id="alarms-existing-fs",
    ),
    # api-constraints: the first request field that refuses the value, named with botocore's
    # version; one finding per value.
    pytest.param(
        "api-constraints",
        {"tags": {"k" * 129: "v"}},
        [
            err(
                f"tags.{'k' * 129}",
                "has 129 characters; cloudformation CreateStack Tags[].Key takes at most 128 "
                f"(botocore {BOTOCORE})",
                "shorten it to 128 characters or fewer",
            )
        ],
        id="api-tag-key-too-long",
    ),
    pytest.param(
        "api-constraints",
        {"tags": {"team": "v" * 257}},
        [
            err(
                "tags.team",
                "has 257 characters; cloudformation CreateStack Tags[].Value takes at most 256",
                "shorten it to 256 characters or fewer",
            )
        ],
        id="api-tag-value-too-long",
    ),
    pytest.param(
        "api-constraints",
        {"tags": {"team": "a;b"}},
        [
            err(
                "tags.team",
                "'a;b' does not match sagemaker CreateCluster Tags[].Value's pattern",
                "use letters, digits, spaces and _ . : / = + - @",
            )
        ],
        id="api-tag-value-character",
    ),
    pytest.param(
        "api-constraints",
        {"tags": {"team": ""}},
        [
            err(
                "tags.team",
                "'' has 0 characters; cloudformation CreateStack Tags[].Value takes at least 1",
                "give the tag a value (CloudFormation refuses an empty one), or remove it",
            )
        ],
        id="api-tag-value-empty",
    ),
    pytest.param(
        "api-constraints",
        merge(
            vpc(cidr="10.0.0.0/16", private_subnet_cidr="10.0.128.0/17"),
            groups(CONTROLLER, *[group(f"c{i}", "compute", 1, "ml.m5.large") for i in range(100)]),
        ),
        [
            err(
                GROUPS,
                "101 items; sagemaker CreateCluster InstanceGroups takes at most 100",
                "keep at most 100",
            )
        ],
        id="api-101-groups",
    ),
    pytest.param(
        "api-constraints",
        studio(instance_types=["ml.t3.medium", "ml.t3.mediun"]),
        [
            err(
                "studio.instance_types[1]",
                "'ml.t3.mediun' is not one of the values sagemaker CreateApp "
                "ResourceSpec.InstanceType takes (176 values)",
                "did you mean ml.t3.medium or ml.t3.micro or ml.t3.small?",
            )
        ],
        id="api-studio-instance-type-typo",
    ),
    pytest.param(
        "api-constraints",
        studio(apps=["JupyterLab", "JupyterLab"]),
        [
            err(
                "studio.apps[1]",
                "'JupyterLab' is also item 0 (one lifecycle configuration and one space per app",
                "list each item once",
            )
        ],
        id="api-studio-app-twice",
    ),
    pytest.param(
        "api-constraints",
        lustre(
            data_repository_associations=[
                {"file_system_path": "/data", "s3_prefix": "data/", "import_policy": ["NEW", "NEW"]}
            ]
        ),
        [
            err(
                f"{DRAS}[0].import_policy[1]",
                "'NEW' is also item 0 (CloudFormation's AWS::FSx::DataRepositoryAssociation:"
                "S3.AutoImportPolicy.Events wants unique items (cfn-lint E3037))",
                "list each item once",
            )
        ],
        id="api-import-event-twice",
    ),
    pytest.param(
        "api-constraints",
        merge(
            existing_vpc(),
            {"network": {"existing_vpc": {"route_table_ids": [ROUTE_TABLES[0]] * 2}}},
        ),
        [
            err(
                "network.existing_vpc.route_table_ids[1]",
                "is also item 0 (CloudFormation's AWS::EC2::VPCEndpoint:RouteTableIds wants",
                "list each item once",
            )
        ],
        id="api-route-table-twice",
    ),
    pytest.param(
        "api-constraints",
        merge(eks_network(), eks(admin_role_arns=[ROLE_A, ROLE_A])),
        [
            err(
                "cluster.eks.admin_role_arns[1]",
                "is also item 0 (CDK merges the grants of one role into one access entry",
                "list each item once",
            )
        ],
        id="api-admin-role-twice",
    ),
    pytest.param(
        "api-constraints",
        dras(("/data", "p/" * 2200)),
        [
            err(
                f"{DRAS}[0].s3_prefix",
                "the data repository path 's3://bbbb",
                "shorten it to 4357 characters or fewer",
            )
        ],
        id="api-data-repository-path-too-long",
    ),
    # ami-accounts
    *[
        pytest.param(
            "ami-accounts",
            {"users": [user(name, 10001)]},
            [
                err(
                    "users[0].name",
                    f"{name!r} is an account the nodes' AMI already has ({source}; table "
                    "checked 2026-11-25, not read from a HyperPod AMI)",
                    "choose another login name",
                )
            ],
            id=f"ami-name-{name}",
        )
        for name, source in [
            ("ubuntu", "ubuntu"),
            ("root", "base-passwd"),
            ("nobody", "base-passwd"),
            ("slurm", "cluster"),
            ("ssm-user", "cluster"),
            ("systemd-network", "ubuntu"),
        ]
    ],
    pytest.param(
        "ami-accounts",
        {"users": [user("alice", 65534)]},
        [
            err(
                "users[0].uid",
                "uid 65534 belongs to the AMI's own accounts (nobody / nogroup",
                "use a uid no account has, e.g. 10000",
            )
        ],
        id="ami-uid-nobody",
    ),
    pytest.param(
        "ami-accounts",
        {"users": [user("alice", 10000), user("bob", 65535)]},
        [
            err(
                "users[1].uid",
                "uid 65535 belongs to the AMI's own accounts ((uid_t)-1 of 16-bit ids",
                "use a uid no account has, e.g. 10001",
            )
        ],
        id="ami-uid-16-bit-minus-one",
    ),
    pytest.param(
        "ami-accounts",
        {"users": [user("alice", 10001, gid=65534)]},
        [
            err(
                "users[0].gid",
                "gid 65534 belongs to the AMI's own groups (nobody / nogroup",
                "use a gid of your own, e.g. 1001 (the default)",
            )
        ],
        id="ami-gid-nogroup",
    ),
    # threads-per-core
    *[
        pytest.param(
            "threads-per-core",
            groups(CONTROLLER, dict(group("g", "compute", 2, itype), threads_per_core=2)),
            [
                err(
                    f"{GROUPS}[1].threads_per_core",
                    f"{itype} runs 1 thread per core ({processor}, a 64-bit Arm platform: each "
                    "vCPU is a core); HyperPod refuses threads_per_core 2",
                    "use threads_per_core: 1, or leave it out",
                )
            ],
            id=f"threads-2-on-{itype}",
        )
        for itype, processor in [
            ("ml.m6g.xlarge", "AWS Graviton2"),
            ("ml.c7g.4xlarge", "AWS Graviton3"),
            ("ml.m8g.48xlarge", "AWS Graviton4"),
            ("ml.p6e-gb200.36xlarge", "NVIDIA Grace"),
        ]
    ],
    # training-plan-types
    pytest.param(
        "training-plan-types",
        merge(
            plan("us-west-2"),
            groups(
                CONTROLLER,
                group("a", "compute", 2, "ml.p5.48xlarge"),
                group("b", "compute", 2, "ml.g5.8xlarge"),
            ),
        ),
        [
            err(
                "cluster.training_plan_arn",
                "a training plan reserves one instance type, and this one would apply to groups "
                "of 2: a (ml.p5.48xlarge), b (ml.g5.8xlarge)",
                "give every accelerated compute group the plan's instance type (e.g. "
                "ml.p5.48xlarge), or leave training_plan_arn out",
            )
        ],
        id="plan-types-two-accelerated-types",
    ),
    # eks-version-calendar: as of the calendar's own date (2026-11-25), never the clock
    pytest.param(
        "eks-version-calendar",
        merge(eks_network(), eks(kubernetes_version="1.28")),
        [
            err(
                "cluster.eks.kubernetes_version",
                "Kubernetes 1.28's extended support ended on 2025-11-26 (EKS calendar checked "
                "2026-11-25): EKS creates no new cluster on it",
                'use "1.34" (standard support until 2026-12-02)',
            )
        ],
        id="calendar-past-extended-support",
    ),
    *[
        pytest.param(
            "eks-version-calendar",
            merge(eks_network(), eks(kubernetes_version=version)),
            [
                warn(
                    "cluster.eks.kubernetes_version",
                    f"Kubernetes {version} is in extended support until {until} (EKS calendar "
                    "checked 2026-11-25): EKS charges more per cluster hour",
                    'use "1.34" (standard support until 2026-12-02)',
                )
            ],
            id=f"calendar-extended-{version}",
        )
        for version, until in [
            ("1.31", "2026-11-26"),
            ("1.32", "2027-03-23"),
            ("1.33", "2027-07-29"),
        ]
    ],
    # eks-public-access-cidrs
    pytest.param(
        "eks-public-access-cidrs",
        merge(eks_network(), eks(public_access_cidrs=_public_cidrs(41))),
        [
            err(
                "cluster.eks.public_access_cidrs",
                "41 CIDRs; EKS takes at most 40 public access CIDR ranges per cluster, a quota "
                "that cannot be raised",
                "merge neighbouring blocks into larger ones",
            )
        ],
        id="cidrs-41",
    ),
    pytest.param(
        "eks-public-access-cidrs",
        merge(
            eks_network(),
            eks(public_access_cidrs=["52.94.0.0/22", "10.0.0.0/8", "100.64.0.0/16"]),
        ),
        [
            err(
                f"cluster.eks.public_access_cidrs[{i}]",
                f"{cidr} is a private or reserved range; the public endpoint takes public "
                "addresses only",
                "reach the private endpoint from the VPC instead; list here the public "
                "addresses you connect from (your NAT's, as a /32)",
            )
            for i, cidr in [(1, "10.0.0.0/8"), (2, "100.64.0.0/16")]
        ],
        id="cidrs-private-and-shared",
    ),
    # user-homes
    *[
        pytest.param(
            "user-homes",
            merge(dras((dra, "linked/")), {"users": [user("alice", 10001)]}),
            [
                err(
                    "users[0].name",
                    f"alice's home /fsx/alice overlaps {shown}, linked to S3 by "
                    f"{DRAS}[0]: a private home would be exported to the bucket",
                    f"rename the user, or move {DRAS}[0].file_system_path to a directory no "
                    "user is named after",
                )
            ],
            id=f"homes-{label}",
        )
        for dra, shown, label in [
            ("/alice", "/fsx/alice", "same-directory"),
            ("/", "/fsx", "whole-file-system"),
            ("/alice/datasets", "/fsx/alice/datasets", "association-inside-home"),
        ]
    ],
    # studio-shared-path-home
    *[
        pytest.param(
            "studio-shared-path-home",
            studio(partitions="shared", shared_path=path),
            [
                err(
                    "studio.shared_path",
                    f"{path} overlaps {owner}'s home (/fsx/{owner} on the nodes, private to them)",
                    "use a path no user is named after, such as /shared",
                )
            ],
            id=f"shared-path-{label}",
        )
        for path, owner, label in [
            ("/alice", "alice", "is-a-home"),
            ("/bob/team", "bob", "in-a-home"),
        ]
    ],
    # --- the 2026 platform (validators/platform.py) ---
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, {"name": "compute", "role": "compute", "instance_count": 1}),
        [
            err(
                f"{GROUPS}[2]",
                "group 'compute' names no instance type",
                "add instance_type (like ml.p5.48xlarge), or instance_types for a flexible group",
            )
        ],
        id="types-none",
    ),
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, dict(COMPUTE, instance_types=["ml.g5.8xlarge"])),
        [
            err(
                f"{GROUPS}[2].instance_types",
                "instance_type and instance_types are exclusive",
                "keep instance_types for a flexible group, or instance_type for one type",
            )
        ],
        id="types-both",
    ),
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, COMPUTE, flex("burst", ["ml.g5.8xlarge"])),
        [
            warn(
                f"{GROUPS}[3].instance_types",
                "a flexible group of one type",
                "write instance_type: ml.g5.8xlarge",
            )
        ],
        id="types-flexible-of-one",
    ),
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, COMPUTE, flex("burst", ["ml.g5.8xlarge", "ml.m5.2xlarge"])),
        [
            err(
                f"{GROUPS}[3].instance_types",
                "mixes accelerated types with CPU types (ml.m5.2xlarge)",
                "keep a flexible group's types all accelerated or all CPU",
            )
        ],
        id="types-flexible-mixed",
    ),
    pytest.param(
        "group-instance-types",
        groups(CONTROLLER, LOGIN, flex("compute", ["ml.g5.12xlarge", "ml.g5.48xlarge"])),
        [
            err(
                f"{GROUPS}[2].instance_types",
                "the job runs on this group, whose types differ in GPUs or EFA "
                "(ml.g5.12xlarge (4 GPUs, 1 EFA interfaces), ml.g5.48xlarge (8 GPUs, 1 EFA "
                "interfaces))",
                "keep the job's group to types of the same GPU count and EFA, or run the job on "
                "another group (trainer.job.instance_group)",
            )
        ],
        id="types-job-group-differ",
    ),
    # slurm-accounting
    pytest.param(
        "slurm-accounting",
        merge(ACCOUNTING, {"cluster": {"node_provisioning": "on_create"}}),
        [
            err(
                "cluster.slurm.accounting.enabled",
                "HyperPod takes an accounting database only on clusters with continuous "
                "provisioning",
                "set cluster.node_provisioning: continuous",
            )
        ],
        id="accounting-without-continuous",
    ),
    pytest.param(
        "slurm-accounting",
        merge(eks_network(), {"cluster": {"slurm": {"accounting": {"enabled": True}}}}),
        [
            err(
                "cluster.slurm.accounting.enabled",
                "a Slurm accounting database is for Slurm clusters",
                "remove cluster.slurm.accounting, or use orchestrator: slurm",
            )
        ],
        id="accounting-on-eks",
    ),
    pytest.param(
        "slurm-accounting",
        accounting(engine_version="8.0.mysql_aurora.3.01.0", min_capacity=0.75, max_capacity=1),
        [
            err(
                "cluster.slurm.accounting.engine_version",
                "8.0.mysql_aurora.3.01.0 is not an Aurora MySQL 3 version CloudFormation takes",
                "use 8.0.mysql_aurora.3.10.6, or leave engine_version out",
            ),
            err(
                "cluster.slurm.accounting.min_capacity",
                "0.75 ACUs is not a multiple of 0.5",
                "use 0.5 or 1",
            ),
        ],
        id="accounting-deprecated-version-quarter-acu",
    ),
    pytest.param(
        "slurm-accounting",
        accounting(min_capacity=4, max_capacity=2),
        [
            err(
                "cluster.slurm.accounting.min_capacity",
                "4 ACUs is more than max_capacity (2)",
                "use at most 2",
            )
        ],
        id="accounting-min-above-max",
    ),
    pytest.param(
        "slurm-accounting",
        accounting(rotation=True, removal_policy="destroy"),
        [
            warn(
                "cluster.slurm.accounting.rotation",
                "whether HyperPod's slurmdbd reads the password again after Secrets Manager "
                "rotates it is not verified",
                "keep rotation off unless you have checked it on a cluster (then suppress "
                "slurm-accounting)",
            ),
            warn(
                "cluster.slurm.accounting.removal_policy",
                "`cdk destroy` deletes the accounting database without a final snapshot",
                "use retain (the default) or snapshot",
            ),
        ],
        id="accounting-rotation-destroy",
    ),
    pytest.param(
        "slurm-accounting",
        {"cluster": {"slurm": {"accounting": {"enabled": False, "rotation": True}}}},
        [
            warn(
                "cluster.slurm.accounting",
                "accounting settings are written (rotation) while accounting is off",
                "set enabled: true, or remove them",
            )
        ],
        id="accounting-settings-while-off",
    ),
    pytest.param(
        "slurm-accounting",
        merge(ACCOUNTING, {"name": "ml--dev"}),
        [
            err(
                "name",
                "the accounting database is named ml--dev-slurm-accounting, and RDS refuses an "
                "identifier with two hyphens in a row",
                "use single hyphens in the environment's name",
            )
        ],
        id="accounting-double-hyphen-name",
    ),
    # accounting-subnets
    pytest.param(
        "accounting-subnets",
        merge(CONTINUOUS, {"cluster": {"slurm": {"accounting": {"enabled": True}}}}),
        [
            err(
                "network.database_availability_zone_id",
                "the accounting database's subnet group needs a second availability zone",
                "add database_availability_zone_id: another AZ ID of the region",
            ),
            err(
                "network.vpc.database_subnet_cidr",
                "the accounting database needs a small private subnet in the second zone",
                "add database_subnet_cidr: 10.0.1.0/28",
            ),
        ],
        id="db-subnet-missing",
    ),
    pytest.param(
        "accounting-subnets",
        merge(
            ACCOUNTING,
            {
                "network": {
                    "database_availability_zone_id": "usw2-az2",
                    "vpc": {"database_subnet_cidr": "10.0.0.0/28"},
                }
            },
        ),
        [
            err(
                "network.database_availability_zone_id",
                "usw2-az2 is the environment's own zone; a DB subnet group needs subnets in two "
                "zones",
                "use another AZ ID of the region",
            ),
            err(
                "network.vpc.database_subnet_cidr",
                "10.0.0.0/28 overlaps public_subnet_cidr 10.0.0.0/24",
                "use a free block such as 10.0.1.0/28",
            ),
        ],
        id="db-subnet-same-zone-overlapping",
    ),
    pytest.param(
        "accounting-subnets",
        merge(ACCOUNTING, {"network": {"vpc": {"database_subnet_cidr": "10.1.0.0/28"}}}),
        [
            err(
                "network.vpc.database_subnet_cidr",
                "10.1.0.0/28 is not inside the VPC CIDR 10.0.0.0/16",
                "use a free block such as 10.0.1.0/28",
            )
        ],
        id="db-subnet-outside-vpc",
    ),
    pytest.param(
        "accounting-subnets",
        merge(
            merge(ACCOUNTING, existing_vpc()), {"network": {"database_availability_zone_id": None}}
        ),
        [
            err(
                "network.existing_vpc.database_subnet_ids",
                "the accounting database's subnet group needs a private subnet in a second zone",
                "add database_subnet_ids: [subnet-...] in another availability zone",
            )
        ],
        id="db-subnets-existing-vpc-missing",
    ),
    pytest.param(
        "accounting-subnets",
        DB_NETWORK,
        [
            warn(
                "network",
                "database subnet settings are used only with a Slurm accounting database",
                "remove them",
            )
        ],
        id="db-subnet-without-accounting",
    ),
    # teams
    pytest.param(
        "teams",
        merge(eks_network(), teams(team("research", "alice"), with_accounting=False)),
        [
            err(
                "teams",
                "on EKS, teams are task governance's compute allocations, and it is off",
                "turn on cluster.eks.task_governance (docs/governance.md), or remove teams",
            )
        ],
        id="teams-on-eks-without-governance",
    ),
    pytest.param(
        "teams",
        teams(team("research", "alice", "bob", quota=[quota(instances=1)], priority="training")),
        [
            warn(
                "teams[0].quota",
                "quota, priority are for EKS task governance: a Slurm account has none",
                "remove them (fairshare and gpu_limit are the Slurm account's)",
            )
        ],
        id="teams-eks-keys-on-slurm",
    ),
    pytest.param(
        "teams",
        governed(team("a1", "alice"), team("b1", "alice")),
        [
            err(
                "teams[1].members[0]",
                "'alice' is also in team 'a1': a person is in one team, the team their jobs run",
                "keep them in one team",
            )
        ],
        id="teams-eks-person-in-two",
    ),
    # task-governance
    pytest.param(
        "task-governance",
        merge(
            eks_network(),
            eks(
                task_governance={"fair_share": False},
                addons={"task_governance": "v1.6.0-eksbuild.1"},
            ),
        ),
        [
            warn(
                TG,
                "task governance settings are written (fair_share, the add-on's version "
                "(cluster.eks.addons.task_governance)) while task governance is off",
                "set cluster.eks.task_governance.enabled: true, or remove them",
            )
        ],
        id="governance-settings-while-off",
    ),
    pytest.param(
        "task-governance",
        eks(task_governance={"enabled": True}),
        [
            err(
                f"{TG}.enabled",
                "task governance is HyperPod's for EKS clusters",
                "remove cluster.eks.task_governance, or use orchestrator: eks",
            )
        ],
        id="governance-on-slurm",
    ),
    pytest.param(
        "registry-schema",
        merge(governed(team("a1")), region("us-west-2", "usw2-az2")),
        [
            err(
                f"{TG}.enabled",
                "AWS::SageMaker::ClusterSchedulerConfig is not in us-west-2's CloudFormation "
                "registry (cfn-lint 1.58.0's schemas, what the synth gate checks against: E3006); "
                "this environment creates one",
                "use a HyperPod region whose registry has it (ap-northeast-1, ap-south-1, "
                "eu-central-1, eu-north-1, eu-south-2, us-east-1, us-west-1), or leave this "
                "feature out until a cfn-lint that has it is pinned",
            )
        ],
        id="governance-region-the-gate-lacks",
    ),
    pytest.param(
        "task-governance",
        merge(governed(team("a1")), eks(kubernetes_version="1.29")),
        [
            err(
                "cluster.eks.kubernetes_version",
                "task governance needs Kubernetes 1.30 or newer; the cluster runs 1.29",
                'use kubernetes_version: "1.30" or newer',
            )
        ],
        id="governance-kubernetes-too-old",
    ),
    pytest.param(
        "task-governance",
        governed(
            team("ml_ops", priority="urgent"),
            priority_classes=[
                {"name": "training", "weight": 70},
                {"name": "training", "weight": 1},
            ],
        ),
        [
            err(
                f"{TG}.priority_classes[1].name",
                "priority class 'training' is also priority_classes[0]",
                "name each class once",
            ),
            err(
                "teams[0].priority",
                "'urgent' is not a priority class of cluster.eks.task_governance.priority_classes",
                "use one of training, training",
            ),
            err(
                "teams[0].name",
                "'ml_ops' cannot name the team's namespace 'hyperpod-ns-ml_ops'",
                "rename the team with hyphens instead of underscores",
            ),
        ],
        id="governance-classes-and-names",
    ),
    pytest.param(
        "task-governance",
        merge(governed(team("ab"), team("research")), {"cluster": {"name": "c" * 60}}),
        [
            err(
                "cluster.name",
                f"the cluster policy is named '{'c' * 60}-policy', 67 characters",
                "use a shorter cluster name",
            ),
            err(
                "teams[1].name",
                "the team's compute allocation is named",
                "use a shorter team or cluster name",
            ),
        ],
        id="governance-names-too-long",
    ),
    # team-quotas
    pytest.param(
        "team-fair-share",
        governed(
            team("pretraining", "alice", quota=[quota(instances=2)], fairshare=5),
            team("research", "bob", quota=[quota(accelerators=8)]),
            fair_share=False,
        ),
        [
            warn(
                "teams[0].fairshare",
                "team 'pretraining' has a fair-share weight (5), and "
                "cluster.eks.task_governance.fair_share is off",
                "set cluster.eks.task_governance.fair_share: true, or remove fairshare",
            )
        ],
        id="fair-share-off-with-a-weight",
    ),
    pytest.param(
        "team-quotas",
        governed(
            team(
                "a1",
                quota=[
                    quota("ml.p5.48xlarge", instances=1),
                    quota(instances=5),
                    quota(instances=1),
                ],
                gpu_limit=8,
            ),
            team("b1", quota=[quota(accelerators=17)]),
            team("c1", quota=[quota(instances=1, accelerators=4)]),
        ),
        [
            warn(
                "teams[0].gpu_limit",
                "gpu_limit is a Slurm account's GrpTRES: on EKS it is ignored",
                "give the team a quota (accelerators of a worker type), and remove gpu_limit",
            ),
            err(
                "teams[0].quota[0].instance_type",
                "ml.p5.48xlarge is not the type of a worker group (the cluster has ml.g5.12xlarge)",
                "use one of ml.g5.12xlarge",
            ),
            err(
                "teams[0].quota[1].instances",
                "5 ml.g5.12xlarge instances: the worker groups hold 4",
                "use at most 4",
            ),
            err(
                "teams[0].quota[2].instance_type",
                "ml.g5.12xlarge is also quota[1] of team 'a1'",
                "give each type once",
            ),
            err(
                "teams[1].quota[0].accelerators",
                "17 accelerators of ml.g5.12xlarge: the worker groups hold 16 (4 x 4)",
                "use at most 16",
            ),
            err(
                "teams[2].quota[0]",
                "a quota item gives instances or accelerators, one of the two",
                "keep instances (whole nodes) or accelerators (GPUs of them)",
            ),
        ],
        id="quotas-each-rule",
    ),
    pytest.param(
        "team-quotas",
        merge(
            governed(team("cpu", quota=[quota("ml.m5.xlarge", accelerators=1)])),
            {
                "cluster": {
                    "instance_groups": [
                        WORKERS,
                        dict(WORKERS, name="cpu", instance_type="ml.m5.xlarge"),
                    ]
                }
            },
        ),
        [
            err(
                "teams[0].quota[0].accelerators",
                "ml.m5.xlarge has no accelerators",
                "give the quota in instances",
            )
        ],
        id="quotas-accelerators-of-a-cpu-type",
    ),
    pytest.param(
        "team-quotas",
        governed(
            team("a1", quota=[quota(instances=3)]),
            team("b1", quota=[quota(accelerators=8)], sharing="dont_lend", borrow_limit_percent=50),
            team("c1", sharing="lend"),
        ),
        [
            warn(
                "teams[1].borrow_limit_percent",
                "a borrow limit with sharing: dont_lend is ignored (the team does not borrow)",
                "set sharing: lend_and_borrow, or remove borrow_limit_percent",
            ),
            warn(
                "teams[2].sharing",
                "team 'c1' has no quota and does not borrow: its jobs are never admitted",
                "give it a quota, or set sharing: lend_and_borrow",
            ),
            warn(
                "teams",
                "the teams are guaranteed 5 ml.g5.12xlarge instances together; the worker groups "
                "hold 4",
                "lower a team's quota, or add instances to the groups",
            ),
        ],
        id="quotas-sharing-and-total",
    ),
    # job-team
    pytest.param(
        "job-team",
        merge(eks_network(), job(team="research", priority="training")),
        [
            warn(
                "trainer.job.team",
                "trainer.job.team and priority are for EKS task governance: ignored here",
                "turn on cluster.eks.task_governance, or remove them",
            )
        ],
        id="job-team-without-governance",
    ),
    pytest.param(
        "job-team",
        merge(TWO_TEAMS, job(team="ops")),
        [
            err(
                "trainer.job.team",
                "'ops' is not one of the environment's teams",
                "use one of pretraining, research",
            )
        ],
        id="job-team-unknown",
    ),
    pytest.param(
        "job-team",
        merge(TWO_TEAMS, job(team="research", user="alice", priority="urgent")),
        [
            err(
                "trainer.job.priority",
                "'urgent' is not a priority class",
                "use one of training, inference",
            ),
            warn(
                "trainer.job.team",
                "the job runs as 'alice', a member of team 'pretraining', in team 'research'",
                "set team: pretraining, or run it as a member of research",
            ),
        ],
        id="job-team-other-than-its-users-and-unknown-priority",
    ),
    pytest.param(
        "job-team",
        TWO_TEAMS,
        [
            warn(
                "trainer.job",
                "the job belongs to no team: it runs in 'training' outside task governance",
                "set trainer.job.team, or trainer.job.user to a team's member",
            )
        ],
        id="job-of-no-team",
    ),
    pytest.param(
        "job-team",
        merge(
            governed(team("a1", quota=[quota(instances=1)], sharing="lend")),
            job(team="a1", nodes=2),
        ),
        [
            err(
                "trainer.job.nodes",
                "the job asks for 2 ml.g5.12xlarge nodes; team 'a1' is guaranteed 1 and does not "
                "borrow: Kueue never admits the job",
                "use at most 1 nodes, or raise the team's quota",
            )
        ],
        id="job-team-never-admitted",
    ),
    pytest.param(
        "api-constraints",
        governed(team("a1", fairshare=150)),
        [
            err(
                "teams[0].fairshare",
                "150 is outside 0-100, what sagemaker CreateComputeQuota "
                "ComputeQuotaTarget.FairShareWeight takes",
                "use a value from 0 to 100",
            )
        ],
        id="api-team-fair-share-weight",
    ),
    pytest.param(
        "teams",
        teams(team("root", "alice"), team("research", "bob", "carol", "bob"), team("research")),
        [
            err(
                "teams[0].name",
                "root is Slurm's own account, the parent of every team",
                "name the team after the people in it",
            ),
            err(
                "teams[1].members[1]",
                "'carol' is not one of the environment's users",
                "add them to users (with their uid), or remove them from the team",
            ),
            err("teams[1].members[2]", "'bob' is listed twice", "list each member once"),
            err(
                "teams[2].name",
                "team 'research' is also teams[1]",
                "give each team its own name, or merge the two",
            ),
        ],
        id="teams-root-unknown-twice",
    ),
    pytest.param(
        "teams",
        teams(team("pretraining", "alice"), team("research", "alice")),
        [
            err(
                "teams[1].members[0]",
                "'alice' is also in team 'pretraining': a person is in one team",
                "keep them in one team",
            ),
            warn(
                "users",
                "bob is in no team: no Slurm association is made for them",
                "add them to a team",
            ),
        ],
        id="teams-person-in-two",
    ),
    pytest.param(
        "teams",
        teams(team("research", "alice", "bob"), with_accounting=False),
        [
            warn(
                "teams",
                "without cluster.slurm.accounting the teams' accounts live in HyperPod's "
                "database on the controller",
                "turn on cluster.slurm.accounting (continuous provisioning), or suppress teams",
            )
        ],
        id="teams-without-accounting-database",
    ),
    pytest.param(
        "node-provisioning",
        merge(CONTINUOUS, {"cluster": {"slurm": {"config_strategy": "Managed"}}}),
        [
            err(
                "cluster.slurm.config_strategy",
                "with continuous provisioning HyperPod refuses SlurmConfigStrategy (Managed)",
                "leave config_strategy out",
            )
        ],
        id="continuous-with-strategy",
    ),
    pytest.param(
        "autoscaling",
        {"cluster": {"autoscaling": {"enabled": True}}},
        [
            err(
                "cluster.autoscaling.enabled",
                "autoscaling (Karpenter) is for EKS clusters",
                "remove autoscaling",
            )
        ],
        id="autoscaling-slurm",
    ),
    pytest.param(
        "autoscaling",
        merge(
            eks_network(), {"cluster": {"autoscaling": {"enabled": True}, "node_recovery": "None"}}
        ),
        [
            err(
                "cluster.autoscaling.enabled",
                "autoscaling needs continuous provisioning",
                "set cluster.node_provisioning: continuous",
            ),
            err(
                "cluster.autoscaling.enabled",
                "autoscaling needs automatic node recovery",
                "set cluster.node_recovery: Automatic",
            ),
            err(
                "cluster.autoscaling.enabled",
                "autoscaling needs HyperPod's health-monitoring agent",
                "set cluster.eks.helm_chart to a folder with the chart (docs/eks.md)",
            ),
            info(
                f"{GROUPS}[0].instance_count",
                "Karpenter scales the groups its HyperpodNodeClass names down to 0",
                "start the groups Karpenter manages at instance_count: 0",
            ),
        ],
        id="autoscaling-missing-everything",
    ),
    pytest.param(
        "tiered-checkpointing",
        {"cluster": {"tiered_checkpointing": {"enabled": True, "memory_percent": 10}}},
        [
            err(
                "cluster.tiered_checkpointing.enabled",
                "managed tiered checkpointing is for EKS clusters",
                "remove tiered_checkpointing, or use orchestrator: eks",
            ),
            err(
                "cluster.tiered_checkpointing.memory_percent",
                "10% is below the 20% HyperPod allocates at least",
                "use 20 to 100",
            ),
            warn(
                "cluster.tiered_checkpointing.enabled",
                "the bundled trainer writes its checkpoints with PyTorch DCP to FSx",
                "keep it for jobs of your own that use amzn-sagemaker-checkpointing, or turn it "
                "off",
            ),
        ],
        id="tiered-slurm-too-little",
    ),
    pytest.param(
        "tiered-checkpointing",
        {"cluster": {"tiered_checkpointing": {"memory_percent": 30}}},
        [
            warn(
                "cluster.tiered_checkpointing.memory_percent",
                "memory_percent is set, but tiered checkpointing is off",
                "set enabled: true, or remove memory_percent",
            )
        ],
        id="tiered-percent-while-off",
    ),
    pytest.param(
        "group-capacity",
        groups(
            spot(CONTROLLER),
            spot(LOGIN),
            dict(spot(COMPUTE), training_plan_arn=PLAN, min_instance_count=3),
        ),
        [
            err(
                f"{GROUPS}[0].capacity",
                "a controller node on spot capacity can be reclaimed at any time: slurmctld",
                "keep controller and login groups on on-demand capacity",
            ),
            warn(
                f"{GROUPS}[1].capacity",
                "a login node on spot capacity can be reclaimed at any time",
                "keep controller and login groups on on-demand capacity",
            ),
            err(
                f"{GROUPS}[2].min_instance_count",
                "3 is more than the group's 2 instances",
                "use at most 2",
            ),
            err(
                f"{GROUPS}[2].capacity",
                "spot capacity and a training plan are exclusive",
                "remove capacity: spot, or the group's training_plan_arn",
            ),
        ],
        id="capacity-spot-everywhere",
    ),
    pytest.param(
        "ami-pinning",
        eks_group(image_id="ami-0123456789abcdef0", image_release_version="1.2.3"),
        [
            err(
                f"{GROUPS}[0].image_release_version",
                "image_release_version pins HyperPod's AMI, and the group runs its own "
                "(ami-0123456789abcdef0)",
                "keep one: image_release_version, or image_id",
            )
        ],
        id="release-with-own-ami",
    ),
    pytest.param(
        "auto-patch-deployment",
        patches("when_all_idle", batch_size=2),
        [
            warn(
                f"{GROUPS}[2].auto_patch.deployment",
                "when_all_idle patches the whole group at once, once no node runs a job; a "
                "deployment (batches, waits, rollback) applies only to rolling patches",
                "remove auto_patch.deployment, or use strategy: when_idle",
            )
        ],
        id="patch-all-idle-with-batches",
    ),
    pytest.param(
        "ami-updates",
        merge(
            updates("cron(0 3 * *)", batch_size=150, batch_unit="percent"),
            {"monitoring": {"enabled": False}},
        ),
        [
            err(
                f"{GROUPS}[0].ami_updates.schedule",
                "'cron(0 3 * *)' is not a cron expression of six fields",
                "like cron(0 3 ? * SUN *): 03:00 UTC every Sunday",
            ),
            err(
                f"{GROUPS}[0].ami_updates.deployment.batch_size",
                "150% is more than the whole group",
                "use 1-100",
            ),
            err(
                f"{GROUPS}[0].ami_updates.deployment.rollback_on_alarms",
                "the update rolls back on the monitoring stack's health alarms, and monitoring is "
                "off",
                "set monitoring.enabled: true, or rollback_on_alarms: false",
            ),
        ],
        id="updates-bad-cron-batch-alarms",
    ),
    pytest.param(
        "ami-updates",
        merge(
            groups(
                CONTROLLER,
                LOGIN,
                dict(
                    COMPUTE,
                    ami_updates={
                        "schedule": "cron(0 3 * *)",
                        "deployment": {"batch_size": 150, "batch_unit": "percent"},
                    },
                ),
            ),
            {"monitoring": {"enabled": False}},
        ),
        [
            err(
                f"{GROUPS}[2].ami_updates.schedule",
                "'cron(0 3 * *)' is not a cron expression of six fields",
                "like cron(0 3 ? * SUN *): 03:00 UTC every Sunday",
            ),
        ],  # the batches are ami-updates-eks-only's to refuse on Slurm, not to size
        id="updates-slurm-cron-only",
    ),
    pytest.param(
        "ami-updates-eks-only",
        groups(CONTROLLER, LOGIN, dict(COMPUTE, **AMI_RELEASE_AND_BATCHES)),
        [
            err(
                f"{GROUPS}[2].image_release_version",
                'a Slurm cluster takes no AMI release: ImageReleaseVersion is "Supported only '
                "for EKS-orchestrated clusters\" (CloudFormation's schema of "
                "AWS::SageMaker::Cluster, as cfn-lint 1.58.0 ships it; table checked 2026-11-28)",
                "remove it: HyperPod gives a Slurm group its latest AMI when the group is "
                "created, and `aws sagemaker update-cluster-software` moves it to a newer one "
                "(docs/platform.md, AMI pinning and patching)",
            ),
            err(
                f"{GROUPS}[2].ami_updates.deployment",
                "a Slurm cluster updates a group's AMI all at once, not in batches: \"Updating "
                "your cluster in batches is available only for HyperPod clusters integrated with "
                "Amazon EKS\" (HyperPod's developer guide, sagemaker-hyperpod-ami-update",
                "remove ami_updates.deployment: the schedule alone updates the whole group",
            ),
            err(
                f"{GROUPS}[2].auto_patch.deployment",
                "a Slurm cluster updates a group's AMI all at once, not in batches",
                "remove auto_patch.deployment: the strategy alone decides when nodes are patched",
            ),
        ],
        id="slurm-release-and-batches",
    ),
    pytest.param(
        "kubernetes-labels",
        {
            "cluster": {
                "instance_groups": [
                    CONTROLLER,
                    LOGIN,
                    dict(COMPUTE, kubernetes={"labels": {"a": "b"}}),
                ]
            }
        },
        [
            err(
                f"{GROUPS}[2].kubernetes",
                "labels and taints are for EKS clusters",
                "remove kubernetes",
            )
        ],
        id="labels-on-slurm",
    ),
    pytest.param(
        "kubernetes-labels",
        k8s(
            {"kubernetes.io/role": "x"},
            [dict(TAINT, key="sagemaker.amazonaws.com/node-health-status"), TAINT, TAINT],
        ),
        [
            err(
                f"{GROUPS}[0].kubernetes.labels[kubernetes.io/role]",
                "'kubernetes.io/role' is in a prefix Kubernetes or HyperPod keeps for itself",
                "use a prefix of your own, like example.com/",
            ),
            err(
                f"{GROUPS}[0].kubernetes.taints[0].key",
                "'sagemaker.amazonaws.com/node-health-status' is in a prefix",
                "use a prefix of your own, like example.com/",
            ),
            err(
                f"{GROUPS}[0].kubernetes.taints[2]",
                "taint example.com/dedicated:NoSchedule is also taints[1]",
                "set each key and effect once",
            ),
        ],
        id="labels-reserved-and-repeated",
    ),
    pytest.param(
        "kubernetes-names",
        k8s(
            {
                "example.com/" + "n" * 64: "a",  # a name of 64
                "n" * 64: "a",  # no prefix, a name of 64
                f"a{PREFIX_253}/n": "a",  # a prefix of 254
            },
            [dict(TAINT, key="example.com/" + "t" * 64)],
        ),
        [
            err(
                f"{GROUPS}[0].kubernetes.labels[example.com/{'n' * 64}]",
                f"its name '{'n' * 64}' has 64 characters; Kubernetes takes at most 63",
                K8S_HINT,
            ),
            err(
                f"{GROUPS}[0].kubernetes.labels[{'n' * 64}]",
                "has 64 characters; Kubernetes takes at most 63",
                K8S_HINT,
            ),
            err(
                f"{GROUPS}[0].kubernetes.labels[a{PREFIX_253}/n]",
                "a DNS-1123 subdomain has 254 characters; Kubernetes takes at most 253",
                K8S_HINT,
            ),
            err(
                f"{GROUPS}[0].kubernetes.taints[0].key",
                f"taint key 'example.com/{'t' * 64}' is not a Kubernetes name",
                K8S_HINT,
            ),
        ],
        id="k8s-names-past-the-limits",
    ),
    pytest.param(
        "version-tables",
        merge(
            eks_network(),
            eks(
                kubernetes_version="1.32",
                addons={"kube_proxy": "v1.33.10-eksbuild.2", "coredns": "v1.12.4-eksbuild.1"},
            ),
        ),
        [
            warn(
                "cluster.eks.addons.coredns",
                "coredns v1.12.4-eksbuild.1 is newer than the latest EKS listed for Kubernetes "
                "1.32 (v1.11.4-eksbuild.24",
                "check with `hyperpod-kit validate --aws` (eks:DescribeAddonVersions), or use "
                "v1.11.4-eksbuild.24",
            ),
            err(
                "cluster.eks.addons.kube_proxy",
                "kube-proxy v1.33.10-eksbuild.2 is for Kubernetes 1.33, newer than the cluster's "
                "1.32",
                "use v1.32.13-eksbuild.5",
            ),
        ],
        id="versions-addons-newer-than-the-minor",
    ),
    pytest.param(
        "version-tables",
        merge(
            merge(eks_network(), eks(addons={"kube_proxy": "v1.32.13-eksbuild.5"})),
            grafana(version="11.1"),
        ),
        [
            warn(
                "cluster.eks.addons.kube_proxy",
                "kube-proxy v1.32.13-eksbuild.5 is for Kubernetes 1.32; EKS pairs a 1.33 cluster",
                "use v1.33.10-eksbuild.2",
            ),
            warn(
                "monitoring.prometheus.grafana.version",
                "Amazon Managed Grafana documents Grafana 9, 10, 12, 13 (majors; table checked "
                "2026-11-29), not 11.1",
                "check with `hyperpod-kit validate --aws` (grafana:ListVersions), or use a "
                "documented version",
            ),
        ],
        id="versions-kube-proxy-older-grafana-undocumented",
    ),
    pytest.param(
        "deep-health-checks-api",
        groups(
            CONTROLLER,
            LOGIN,
            dict(COMPUTE, deep_health_checks=["InstanceStress", "MultiNodeTrainingValidation"]),
        ),
        [
            err(
                f"{GROUPS}[2].deep_health_checks[1]",
                "CloudFormation cannot set MultiNodeTrainingValidation",
                "remove it here; run it after deploy with aws sagemaker update-cluster "
                "(docs/platform.md)",
            )
        ],
        id="checks-multi-node",
    ),
    pytest.param(
        "group-network",
        own_subnets(None, ["sg-0123456789abcdef0"], "ml.m5.2xlarge", interface_type="efa-only"),
        [
            err(
                f"{GROUPS}[2].network.interface_type",
                "ml.m5.2xlarge has no EFA, so no EFA interface type",
                "remove interface_type, or use an EFA type",
            ),
            err(
                f"{GROUPS}[2].network.security_group_ids",
                "a group's own security groups come with its own subnets",
                "add subnet_ids, or remove security_group_ids",
            ),
        ],
        id="network-efa-on-plain-sg-alone",
    ),
    pytest.param(
        "group-network",
        own_subnets(["subnet-0123456789abcdef1"], None),
        [
            err(
                f"{GROUPS}[2].network.subnet_ids",
                "the new VPC hyperpod-kit creates has one private subnet",
                "remove subnet_ids, or use network.existing_vpc",
            )
        ],
        id="network-own-subnets-new-vpc",
    ),
    pytest.param(
        "version-compatibility",
        merge(eks_network(), eks(addons={"training_operator": "v1.2.1-eksbuild.1"})),
        [
            err(
                "cluster.eks.addons.training_operator",
                "v1.2.1-eksbuild.1 dropped Pod Identity support",
                "pin another version (aws eks describe-addon-versions --addon-name "
                "amazon-sagemaker-hyperpod-training-operator)",
            )
        ],
        id="compat-operator-without-pod-identity",
    ),
    pytest.param(
        "version-compatibility",
        merge(governed(), eks(addons={"task_governance": "v1.3.2-eksbuild.1"})),
        [
            warn(
                "cluster.eks.addons.task_governance",
                "amazon-sagemaker-hyperpod-taskgovernance v1.3.x keeps Kueue's CRDs under v1alpha1",
                "upgrade the add-on with HyperPod's console (it migrates the CRDs) before you pin "
                "v1.5 or later here",
            )
        ],
        id="compat-task-governance-v1-3",
    ),
    pytest.param(
        "version-compatibility",
        merge(
            merge(eks_network(), eks(helm_chart=str(CHART))),
            eks_workers("ml.g5.xlarge"),
        ),
        [
            warn(
                "cluster.eks.helm_chart",
                "the EFA device plugin of HyperPod's Helm chart crash-loops on a worker type "
                "without EFA (hyperpod-cli-367",
                "turn the chart's aws-efa-k8s-device-plugin off in its values for those nodes, "
                "or use EFA types only",
            )
        ],
        id="compat-chart-efa-plugin-on-plain-type",
    ),
    pytest.param(
        "volume-keys",
        groups(
            CONTROLLER,
            LOGIN,
            dict(COMPUTE, root_volume_kms_key_arn=KMS_KEY.replace("us-west-2", "us-east-1")),
        ),
        [
            err(
                f"{GROUPS}[2].root_volume_kms_key_arn",
                "the key is in 111122223333/us-east-1, the environment in its account/us-west-2",
                "use a key of the environment's region and account",
            )
        ],
        id="key-other-region",
    ),
    # node-setup
    pytest.param(
        "node-setup",
        merge(eks_network(), node_setup(pam_slurm_adopt=True)),
        [
            warn(
                "cluster.node_setup.pam_slurm_adopt",
                "pam_slurm_adopt is Slurm's PAM module; EKS nodes run no Slurm: ignored",
                "remove it",
            )
        ],
        id="setup-pam-on-eks",
    ),
    pytest.param(
        "node-setup",
        node_setup(container_storage="ebs"),
        [
            warn(
                "cluster.node_setup.container_storage",
                "moves containerd's and kubelet's data on EKS nodes only",
                "remove it",
            )
        ],
        id="setup-container-storage-on-slurm",
    ),
    pytest.param(
        "node-setup",
        node_setup(pam_slurm_adopt=True),
        [
            info(
                "cluster.node_setup.pam_slurm_adopt",
                "Slurm runs with PrologFlags=Contain, ProctrackType=proctrack/cgroup and "
                "TaskPlugin=task/cgroup (HyperPod's slurm.conf: the API cannot set them, "
                "hyperpod-kit does not edit it) and the module comes from the AMI (no "
                "cluster.node_setup.packages is named)",
                PAM_HINT,
            )
        ],
        id="setup-pam-needs",
    ),
    pytest.param(
        "node-setup",
        node_setup(logrotate=False, packages=str(NODE_PACKAGES)),
        [
            warn(
                "cluster.node_setup.packages",
                "not used: no node step installs from it",
                "remove it",
            )
        ],
        id="setup-packages-unused",
    ),
    # prometheus-workspace
    pytest.param(
        "prometheus-workspace",
        prometheus(workspace_arn=AMP_ARN.replace("us-west-2", "us-east-1")),
        [
            err(
                "monitoring.prometheus.workspace_arn",
                "the workspace is in us-east-1; the environment is in us-west-2",
                "use a workspace of us-west-2, or leave workspace_arn out to create one",
            )
        ],
        id="prometheus-workspace-other-region",
    ),
    pytest.param(
        "prometheus-workspace",
        merge({"account": "444455556666"}, prometheus(workspace_arn=AMP_ARN)),
        [
            warn(
                "monitoring.prometheus.workspace_arn",
                "the workspace belongs to account 111122223333",
                "use a workspace of account 444455556666, or leave workspace_arn out to create one",
            )
        ],
        id="prometheus-workspace-other-account",
    ),
    pytest.param(
        "prometheus-workspace",
        prometheus(workspace_arn=AMP_ARN, retention_days=30),
        [
            warn(
                "monitoring.prometheus.retention_days",
                "applies only to a workspace hyperpod-kit creates",
                "remove it, or set the retention on the workspace itself",
            )
        ],
        id="prometheus-retention-of-existing",
    ),
    pytest.param(
        "prometheus-workspace",
        {"monitoring": {"prometheus": {"workspace_arn": AMP_ARN}}},
        [
            warn(
                "monitoring.prometheus.workspace_arn",
                "monitoring.prometheus.enabled is false",
                "set monitoring.prometheus.enabled: true, or remove it",
            )
        ],
        id="prometheus-settings-while-off",
    ),
    # prometheus-exporters
    pytest.param(
        "prometheus-exporters",
        merge(CPU_ONLY, prometheus(exporters={"dcgm": True})),
        [
            warn(
                "monitoring.prometheus.exporters.dcgm",
                "no instance group has NVIDIA GPUs",
                "turn it off",
            ),
            AGENT_INFO,
        ],
        id="exporters-dcgm-without-gpus",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(
            merge(OFFLINE, groups(CONTROLLER, GPU_COMPUTE)),
            prometheus(exporters={"dcgm": True}, packages=str(METRICS_PACKAGES)),
        ),
        [
            err(
                "monitoring.prometheus.exporters.dcgm",
                "nodes without internet cannot pull it",
                "turn exporters.dcgm off (GPU health still reaches CloudWatch through the node "
                "checks), or give the cluster subnet a route out",
            ),
            AGENT_INFO,
        ],
        id="exporters-dcgm-offline",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(CPU_ONLY, prometheus(exporters={"efa": True}, packages=str(METRICS_PACKAGES))),
        [
            warn(
                "monitoring.prometheus.exporters.efa",
                "no instance group has EFA",
                "turn it off",
            ),
            AGENT_INFO,
        ],
        id="exporters-efa-without-efa",
    ),
    pytest.param(
        "prometheus-exporters",
        prometheus(exporters={"slurm": True}),
        [
            err(
                "monitoring.prometheus.exporters.slurm",
                "Ubuntu's archive has no Slurm exporter",
                "name a folder holding the `slurm-exporter` binary in "
                "monitoring.prometheus.packages, or turn the exporter off",
            ),
            AGENT_INFO,
        ],
        id="exporters-slurm-without-packages",
    ),
    pytest.param(
        "prometheus-exporters",
        prometheus(exporters={"slurm": True}, packages=str(NODE_PACKAGES)),
        [
            err(
                "monitoring.prometheus.packages",
                "has no executable file `slurm-exporter`",
                "put the `slurm-exporter` binary (built for the nodes, linux/amd64) there, "
                "mode 755",
            ),
            AGENT_INFO,
        ],
        id="exporters-slurm-binary-missing",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(OFFLINE, prometheus()),
        [
            err(
                "monitoring.prometheus.packages",
                "without internet the nodes install prometheus and prometheus-node-exporter",
                "name a folder with prometheus_*.deb and prometheus-node-exporter_*.deb (and the "
                "packages they depend on) built for the AMI's Ubuntu",
            ),
            AGENT_INFO,
        ],
        id="exporters-offline-without-packages",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(OFFLINE, prometheus(packages=str(NODE_PACKAGES))),
        [
            err(
                "monitoring.prometheus.packages",
                "has no prometheus_*.deb or prometheus-node-exporter_*.deb",
                "add prometheus_*.deb and prometheus-node-exporter_*.deb (and the packages they "
                "depend on) built for the AMI's Ubuntu",
            ),
            AGENT_INFO,
        ],
        id="exporters-offline-packages-without-debs",
    ),
    pytest.param(
        "prometheus-exporters",
        prometheus(packages=str(Path(__file__).parent / "missing-folder")),
        [
            err(
                "monitoring.prometheus.packages",
                "is not a folder",
                "name a folder relative to the environment file",
            ),
            AGENT_INFO,
        ],
        id="exporters-packages-not-a-folder",
    ),
    pytest.param(
        "prometheus-exporters",
        prometheus(exporters={"node": False}),
        [
            warn(
                "monitoring.prometheus.exporters", "every exporter is off", "turn exporters.node on"
            ),
            AGENT_INFO,
        ],
        id="exporters-all-off",
    ),
    pytest.param(
        "prometheus-exporters",
        merge(eks_network(), prometheus(scrape_interval_seconds=30)),
        [
            warn(
                "monitoring.prometheus.scrape_interval_seconds",
                "on EKS HyperPod's observability add-on runs",
                "remove it",
            )
        ],
        id="exporters-on-eks",
    ),
    # grafana
    pytest.param(
        "grafana",
        grafana(authentication="saml", saml_admin_values=["admins"]),
        [
            err(
                "monitoring.prometheus.grafana.saml_metadata_url",
                "SAML sign-in needs the identity provider's metadata",
                "give the metadata URL your identity provider publishes, or use "
                "authentication: iam_identity_center",
            )
        ],
        id="grafana-saml-without-metadata",
    ),
    pytest.param(
        "grafana",
        grafana(authentication="saml", saml_metadata_url="https://idp.example.com/metadata"),
        [
            warn(
                "monitoring.prometheus.grafana.saml_admin_values",
                "nobody signs in as a Grafana admin",
                "list the values of the 'role' attribute that make an admin",
            )
        ],
        id="grafana-saml-without-admins",
    ),
    pytest.param(
        "grafana",
        grafana(saml_admin_values=["admins"]),
        [
            warn(
                "monitoring.prometheus.grafana.saml_admin_values",
                "SAML settings with authentication: iam_identity_center: ignored",
                "remove them, or set authentication: saml",
            )
        ],
        id="grafana-saml-settings-with-identity-center",
    ),
    # no-internet
    pytest.param(
        "no-internet",
        {"network": {"internet": False}},
        [
            err(
                "network.internet",
                "the VPC hyperpod-kit creates has a NAT gateway",
                "use network.existing_vpc for a VPC without a NAT, or remove internet",
            )
        ],
        id="internet-off-new-vpc",
    ),
    pytest.param(
        "no-internet",
        merge(OFFLINE, {"network": {"interface_endpoints": False}}),
        [
            err(
                "network.interface_endpoints",
                "without a NAT the nodes reach SSM, CloudWatch, ECR, STS and SageMaker only "
                "through interface endpoints",
                "set interface_endpoints: true",
            )
        ],
        id="internet-off-without-endpoints",
    ),
    pytest.param(
        "no-internet",
        merge(OFFLINE, {"network": {"existing_vpc": {"route_table_ids": []}}}),
        [
            warn(
                "network.existing_vpc.route_table_ids",
                "none is created without route tables",
                "list the private subnet's route tables here, or suppress no-internet if the "
                "VPC has an S3 gateway endpoint already",
            )
        ],
        id="internet-off-without-route-tables",
    ),
    # studio-without-nat
    *[
        pytest.param(
            "studio-without-nat",
            merge(base, OFFLINE),
            [warn("studio.enabled", message, STUDIO_NAT_HINT)],
            id=f"studio-without-nat-{name}",
        )
        for name, base, message in [
            ("slurm", studio(), "pip or conda installs in the apps fail"),
            ("eks", STUDIO_EKS, "the EKS client's kubectl comes from conda-forge"),
        ]
    ],
    # files: the node packages
    pytest.param(
        "files",
        node_setup(packages=str(Path(__file__).parent)),
        [
            err(
                "cluster.node_setup.packages",
                "holds no .deb packages",
                "put the .deb files the node steps install here (a *pam*slurm*adopt*.deb built "
                "for the cluster's Slurm, logrotate_*.deb)",
            )
        ],
        id="files-node-packages-without-debs",
    ),
]


def _names(table: list[Any]) -> set[str]:
    return {p.values[0] for p in table}


# studio-lifecycle-size measures a bundled script (assets/studio/client.sh), whose size other
# changes move: its bad values are stand-in scripts, in test_lifecycle_size_* below.
MEASURES_ASSETS = {"studio-lifecycle-size"}


def test_every_registered_validator_has_good_and_bad_rows() -> None:
    """A new validator cannot be registered without a table of values here."""
    assert _names(GOOD) == set(REGISTRY)
    assert _names(BAD) == set(REGISTRY) - MEASURES_ASSETS


@pytest.mark.parametrize(("name", "overrides"), GOOD)
def test_good_values_give_no_error_or_warning(name: str, overrides: dict[str, Any]) -> None:
    """Legal settings pass their validator (an INFO, such as aggregate throughput, is allowed)."""
    found = run_validators(config_with(overrides), only=[name])
    assert all(f.level is Level.INFO for f in found), _show(found)
    assert all(f.check == name for f in found)


@pytest.mark.parametrize(("name", "overrides", "expected"), BAD)
def test_bad_values_give_exactly_the_expected_findings(
    name: str, overrides: dict[str, Any], expected: list[Expect]
) -> None:
    """Each rule violation is reported once, at the value's path, with a hint that fixes it."""
    assert_findings(run_validators(config_with(overrides), only=[name]), expected, name)


@pytest.mark.parametrize(
    ("gib", "tier", "aggregate"),
    [
        pytest.param(
            1200, 250, "aggregate throughput 300 MB/s (1.20 TiB x 250 MB/s/TiB)", id="1200x250"
        ),
        pytest.param(
            2400, 1000, "aggregate throughput 2,400 MB/s (2.40 TiB x 1000 MB/s/TiB)", id="2400x1000"
        ),
        pytest.param(
            24000, 125, "aggregate throughput 3,000 MB/s (24.00 TiB x 125 MB/s/TiB)", id="24000x125"
        ),
    ],
)
def test_legal_tier_reports_aggregate_throughput(gib: int, tier: int, aggregate: str) -> None:
    """A legal tier says what it buys: capacity (1200 GiB = 1.2 TiB, as FSx counts) x tier."""
    found = run_validators(
        config_with(lustre(storage_capacity_gib=gib, throughput_per_unit_storage=tier)),
        only=["lustre-throughput-tier"],
    )
    assert_findings(found, [info(TIER, aggregate, None)], "lustre-throughput-tier")


# --- studio-lifecycle-size, with stand-in scripts -------------------------------------------------

LCC = "sagemaker CreateStudioLifecycleConfig StudioLifecycleConfigContent"
LCC_FIX = (
    "shorten assets/studio/client.sh (its comment lines are left out already), or the values it "
    "carries (name, studio.shared_path, trainer.job.namespace)"
)


def _script_rendering_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: EnvironmentConfig, encoded: int
) -> None:
    """Stand in for assets/studio/client.sh a script whose lifecycle configuration is `encoded`
    characters in base64 (a multiple of 4) for `config`."""
    import hyperpod_kit.studio_lifecycle as lifecycle
    from hyperpod_kit.config.validators.studio import lifecycle_config_size

    script = tmp_path / "client.sh"
    monkeypatch.setattr(lifecycle, "CLIENT_SCRIPT", script)
    script.write_text("#!/bin/bash\n")
    overhead = lifecycle_config_size(config) * 3 // 4  # bytes with an empty body (a multiple of 3)
    script.write_text("#!/bin/bash\n" + "x" * (encoded * 3 // 4 - overhead - 1) + "\n")
    assert lifecycle_config_size(config) == encoded


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        pytest.param(
            16388,
            [
                err(
                    "studio.apps",
                    "the Studio lifecycle configuration (JupyterLab, CodeEditor) is 16,388 "
                    f"characters in base64; {LCC} takes at most 16,384 (botocore {BOTOCORE})",
                    LCC_FIX,
                )
            ],
            id="over-the-limit",
        ),
        pytest.param(
            16384,
            [
                warn(
                    "studio.apps",
                    f"is 16,384 characters in base64, 100% of the 16,384 {LCC}",
                    LCC_FIX,
                )
            ],
            id="at-the-limit",
        ),
        pytest.param(
            14748,
            [
                warn(
                    "studio.apps",
                    f"is 14,748 characters in base64, 90% of the 16,384 {LCC}",
                    LCC_FIX,
                )
            ],
            id="just-above-90-percent",
        ),
        pytest.param(14744, [], id="just-below-90-percent"),
        pytest.param(4000, [], id="small"),
    ],
)
@pytest.mark.parametrize("overrides", [studio(), STUDIO_EKS], ids=["slurm", "eks"])
def test_lifecycle_size_against_the_apis_limit(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    overrides: dict[str, Any],
    encoded: int,
    expected: list[Expect],
) -> None:
    """The rendered lifecycle configuration, counted in base64 as the API counts it: above the
    16,384 botocore's StudioLifecycleConfigContent takes an error, above 90% of it a warning."""
    config = config_with(overrides)
    _script_rendering_to(monkeypatch, tmp_path, config, encoded)
    found = run_validators(config, only=["studio-lifecycle-size"])
    assert_findings(found, expected, "studio-lifecycle-size")


def test_lifecycle_size_counts_the_values_the_file_gives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The settings the script carries come from the file: a long shared path adds to the size."""
    from hyperpod_kit.config.validators.studio import lifecycle_config_size

    short = config_with(studio(partitions="shared", shared_path="/s"))
    long = config_with(studio(partitions="shared", shared_path="/" + "s" * 200))
    assert lifecycle_config_size(long) - lifecycle_config_size(short) in range(264, 272)


# --- regressions of bugs these tables found ------------------------------------------------------


def test_duplicate_group_names_with_different_settings_are_reported() -> None:
    """Two groups named 'compute' are a clash even when their instance types differ."""
    overrides = groups(CONTROLLER, COMPUTE, group("compute", "compute", 1, "ml.p5.48xlarge"))
    found = run_validators(config_with(overrides), only=["instance-group-names"])
    assert [f.path for f in found] == [f"{GROUPS}[2].name"]


@pytest.mark.parametrize("name", ["192.168.5.4", "xn--bucket"], ids=["ip-address", "xn-prefix"])
def test_bucket_names_that_s3_reserves_are_rejected(name: str) -> None:
    """A name S3 refuses should fail validation, not `cdk deploy`."""
    found = run_validators(config_with(bucket(name=name)), only=["bucket-name"])
    assert [f.path for f in found] == ["storage.bucket.name"]


def test_prefix_hint_is_itself_a_valid_prefix() -> None:
    """Following the hint must give a prefix that passes the same check."""
    found = run_validators(config_with(dras(("/data", "a//b/"))), only=["dra-paths"])
    assert len(found) == 1
    assert found[0].hint is not None
    assert "//" not in found[0].hint


def test_elastic_range_reports_a_bad_global_batch_once() -> None:
    """A wide elastic range gives one finding for the batch, not one per replica count."""
    found = run_validators(
        config_with(elastic(min_replicas=1, max_replicas=1000)), only=["job-elastic"]
    )
    assert len([f for f in found if f.path == BATCH]) == 1


# --- the registry --------------------------------------------------------------------------------

# Trips an error and a warning in job-paths and the info of lustre-throughput-tier.
NOISY = job(checkpoint_dir="/tmp/ckpt", data_path="/opt/data")


def test_default_environment_is_clean() -> None:
    """The shipped default has no error, and one warning: where enroot and pyxis come from is
    something only the user can answer (see the enroot-pyxis-source check)."""
    found = run_validators(config_with({}))
    assert [f.check for f in found if f.level is not Level.INFO] == ["enroot-pyxis-source"]
    assert run_validators(config_with({}), suppress=["enroot-pyxis-source"]) == [
        f for f in found if f.level is Level.INFO
    ]


def test_suppress_hides_warnings_and_infos_but_never_errors() -> None:
    """Suppression is for advice; an error means AWS would reject the stack, so it always shows."""
    config = config_with(NOISY)
    before = run_validators(config)
    assert {(f.check, f.level) for f in before} >= {
        ("job-paths", Level.ERROR),
        ("job-paths", Level.WARNING),
        ("lustre-throughput-tier", Level.INFO),
    }
    after = run_validators(
        config, suppress=["job-paths", "lustre-throughput-tier", "enroot-pyxis-source"]
    )
    assert [(f.check, f.level, f.path) for f in after] == [
        ("job-paths", Level.ERROR, "trainer.job.checkpoint_dir")
    ]


def test_suppress_leaves_other_validators_alone() -> None:
    """Muting one check keeps every other check's warnings."""
    config = config_with(merge(NOISY, region("us-north-9", "usn9-az1")))
    found = run_validators(config, suppress=["job-paths"])
    assert ("enroot-pyxis-source", Level.WARNING) in {(f.check, f.level) for f in found}
    assert ("job-paths", Level.WARNING) not in {(f.check, f.level) for f in found}


def test_unknown_suppress_name_is_a_warning() -> None:
    """A misspelt name in suppress would silently mute nothing, so it is reported."""
    found = run_validators(config_with({}), suppress=["vpc-cidrs", "lustre-capacity"])
    unknown = [f for f in found if f.path == "validation.suppress"]
    assert len(unknown) == 1
    (f,) = unknown
    assert (f.level, f.check) == (Level.WARNING, "validation")
    assert "no check is named 'vpc-cidrs'" in f.message
    assert f.hint == f"names: {', '.join(sorted(REGISTRY))}"


def test_only_restricts_to_the_named_validators() -> None:
    """`only=` runs just those checks, so a test or `--only` sees nothing else."""
    config = config_with(merge(NOISY, lustre(storage_capacity_gib=2000)))
    assert {f.check for f in run_validators(config)} > {"job-paths", "lustre-capacity"}
    found = run_validators(config, only=["lustre-capacity", "vpc-source"])
    assert {f.check for f in found} == {"lustre-capacity"}
    assert run_validators(config, only=[]) == []


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_finding_carries_its_validator_name(name: str) -> None:
    """`check` is the name to suppress: it must be the registered name, whatever the check set."""
    bad = [p.values[1] for p in BAD if p.values[0] == name]
    for overrides in bad:
        found = run_validators(config_with(overrides), only=[name])
        assert found
        assert {f.check for f in found} == {name}


def test_registering_a_name_twice_raises() -> None:
    """Names are what users suppress; two checks under one name would mute each other."""

    def check(config: EnvironmentConfig) -> Iterator[Finding]:
        yield from ()

    name = "test-duplicate-registration"
    assert name not in REGISTRY
    try:
        validator(name, area="test")(check)
        assert REGISTRY[name].check is check
        with pytest.raises(ValueError, match="registered twice"):
            validator(name, area="test")(check)
        with pytest.raises(ValueError, match="registered twice"):
            validator("lustre-capacity", area="test")(check)
        assert REGISTRY["lustre-capacity"].check is not check
    finally:
        REGISTRY.pop(name, None)
    assert name not in REGISTRY


# --- findings through the loader carry the YAML line ---------------------------------------------


def _line(path: Path, key: str, nth: int = 0) -> int:
    """1-based line of the `nth` occurrence of `key:` in the written file."""
    pattern = re.compile(rf"^\s*(- )?{re.escape(key)}:")
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if pattern.match(text)]
    return hits[nth]


def _error_of(path: Path, check: str) -> Finding:
    with pytest.raises(ConfigError) as info_:
        load_environment(path)
    found = [f for f in info_.value.findings if f.check == check]
    assert len(found) == 1, str(info_.value)
    return found[0]


@pytest.mark.parametrize(
    ("overrides", "check", "key", "nth"),
    [
        pytest.param(
            lustre(storage_capacity_gib=2000),
            "lustre-capacity",
            "storage_capacity_gib",
            0,
            id="capacity",
        ),
        pytest.param(
            dras(("/data", "data/"), ("/data/sub", "sub/")),
            "dra-paths",
            "file_system_path",
            1,
            id="dra-item-1",
        ),
        pytest.param(
            groups(LOGIN, COMPUTE), "instance-group-roles", "instance_groups", 0, id="groups-list"
        ),
        pytest.param(
            groups(CONTROLLER, COMPUTE, group("gpu", "worker", 2)),
            "instance-group-roles",
            "role",
            2,
            id="group-item-role",
        ),
        pytest.param(
            region("us-west-2", "use1-az1"), "az-id-in-region", "availability_zone_id", 0, id="az"
        ),
        pytest.param(
            job(global_batch_size=30), "job-global-batch", "global_batch_size", 0, id="batch"
        ),
    ],
)
def test_semantic_error_carries_the_yaml_line(
    write_env: WriteEnv, overrides: dict[str, Any], check: str, key: str, nth: int
) -> None:
    """`FILE:LINE` of a semantic error points at the offending key, list items included."""
    path = write_env(overrides)
    f = _error_of(path, check)
    assert f.line == _line(path, key, nth)
    assert f.render(str(path)).startswith(f"{path}:{f.line} ")


def test_warnings_and_infos_carry_lines_on_a_valid_file(write_env: WriteEnv) -> None:
    """A file that loads still reports its advice at the right lines."""
    path = write_env(merge(job(data_path="/opt/data"), {"validation": {"suppress": ["nope"]}}))
    loaded = load_environment(path)
    lines = {(f.check, f.path): f.line for f in loaded.findings}
    assert lines == {
        ("job-paths", "trainer.job.data_path"): _line(path, "data_path"),
        ("lustre-throughput-tier", TIER): _line(path, "throughput_per_unit_storage"),
        ("validation", "validation.suppress"): _line(path, "suppress"),
        ("enroot-pyxis-source", "cluster.slurm.enroot_pyxis"): _line(path, "cluster"),
    }


def test_finding_for_a_key_not_in_the_file_points_at_its_parent(write_env: WriteEnv) -> None:
    """A default-valued key has no line of its own; the nearest written parent stands in."""
    overrides = {
        "network": {"vpc": None, "interface_endpoints": None, "existing_vpc": EXISTING_VPC}
    }
    path = write_env(overrides)
    assert "interface_endpoints" not in path.read_text()
    loaded = load_environment(path)
    (f,) = [f for f in loaded.findings if f.check == "endpoints-without-nat"]
    assert f.path == "network.interface_endpoints"
    assert f.line == _line(path, "network")


def test_cli_suppress_and_file_suppress_both_apply(write_env: WriteEnv) -> None:
    """`--suppress` on the command line adds to `validation.suppress` in the file."""
    path = write_env(
        merge(
            job(data_path="/opt/data"),
            {"validation": {"suppress": ["lustre-throughput-tier", "enroot-pyxis-source"]}},
        )
    )
    assert {f.check for f in load_environment(path).findings} == {"job-paths"}
    assert load_environment(path, suppress=["job-paths"]).findings == []


def test_semantic_errors_are_sorted_worst_first_then_by_line(write_env: WriteEnv) -> None:
    """With errors and warnings together, errors come first, each group in file order."""
    path = write_env(
        merge(
            lustre(storage_capacity_gib=2000),
            merge(
                job(global_batch_size=30, data_path="/opt/data"),
                {"validation": {"suppress": ["nope"]}},
            ),
        )
    )
    with pytest.raises(ConfigError) as info_:
        load_environment(path)
    found = info_.value.findings
    levels = [f.level for f in found]
    assert levels == sorted(levels, reverse=True)
    assert [f.check for f in found] == [
        "lustre-capacity",
        "job-global-batch",
        "enroot-pyxis-source",
        "job-paths",
        "validation",
        "lustre-throughput-tier",
    ]
    for level in Level:
        lines = [f.line or 0 for f in found if f.level is level]
        assert lines == sorted(lines)
