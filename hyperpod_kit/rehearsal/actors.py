"""Every actor that calls AWS, played in a sandbox at its moment of the deploy and as its role,
with its calls recorded.

The actors, from the assembly (never from a list per example):
  1. each instance group's lifecycle upload (``on_create.sh``, hooks, steps: the very files the
     cluster stack uploads, taken from the assembly) on first provisioning, while the cluster
     resource is created, and on a replaced node after the deploy; HyperPod's own download of
     the upload is recorded as a call of the group's role too;
  2. the timers those scripts installed (every ``hyperpod-kit-*.service`` the node has), on the
     node the first provisioning left: once while each of our custom resources created after the
     cluster is created (they run every few minutes), and once after the deploy;
  3. the rendered Slurm job (`hyperpod_kit.jobs.render_jobs`), with fake ``srun``/``enroot``, as
     the compute group's role;
  4. Studio's lifecycle configurations (their content from the assembly), for each user profile,
     as the profile's execution role, then one Slurm command through the installed wrapper;
  5. each Lambda function whose code is one of ours (``assets/functions``): a custom resource's
     handlers while that resource is created (Create event, then is_complete), others after the
     deploy with the event they exist for (see `DRIVERS`); CDK's own functions are skipped;
  6. HyperPod's Karpenter autoscaling, where a cluster enables it: after the deploy it adds and
     deletes nodes as the cluster's `ClusterRole`, and asks KMS for grants on the groups' volume
     keys (the calls the HyperPod autoscaling guide's policy allows);
  7. HyperPod's slurmdbd set-up, where a Slurm cluster names an accounting database: while the
     cluster is created, the controller reads the database's secret (`SecretArn`) as the
     controller group's role (which principal reads it is not documented: the node's role is the
     one hyperpod-kit grants, so that is the one checked);
  8. the metrics writers (monitoring.prometheus): each node's Prometheus agent, from the moment
     its provisioning installed it (the remote-write URL read from the node's own
     /etc/hyperpod-kit/prometheus/prometheus.yml), remote-writes as the group's role; HyperPod's
     observability add-on's collector, while the add-on is created, remote-writes to the
     workspace of its configuration and writes the cluster's log group as its Pod Identity role.
     Both are played as the calls they make (`aps:RemoteWrite`), as HyperPod's own download of the
     upload is: Prometheus itself does not run in a sandbox;
  9. the operator, where the cluster stack creates the operator's policy
     (`cluster.operator_policy`): after the deploy, a person holding that policy alone runs
     `hyperpod-kit nodes`: finds the cluster (its discovery parameter), lists its nodes, and
     replaces, reboots and deletes one (`operator_calls`: the calls of
     `hyperpod_kit.operations.nodes`, recorded, not run).

One fake AWS (`fakes.py` for the CLI, `botofake.py` for boto3) is shared by all actors, in deploy
order: at each moment it holds the SSM parameters and S3 objects the deploy has made by then
(`Assembly.parameters`, the bucket deployments) plus what earlier actors wrote. A read of what does
not exist yet fails as AWS would, and the call says so (`Call.error`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore import xform_name

from hyperpod_kit.cloud_assembly import file_assets, read_json
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.lifecycle import GROUP_SCRIPTS_DIR
from hyperpod_kit.naming import parameter_name
from hyperpod_kit.operator_policy import node_operations
from hyperpod_kit.paths import FUNCTIONS_DIR
from hyperpod_kit.rehearsal.assembly import PARTITION, Assembly
from hyperpod_kit.rehearsal.cli_words import CliWordsError, parse
from hyperpod_kit.rehearsal.fakes import NODE_FAKES
from hyperpod_kit.rehearsal.model import (
    AFTER_DEPLOY,
    ActorFailure,
    Call,
    Moment,
    ResourceRef,
    SkippedActor,
)
from hyperpod_kit.rehearsal.policies import operator_policies
from hyperpod_kit.rehearsal.sandbox import (
    SYSTEM_PYTHON,
    Isolation,
    Node,
    find_isolation,
    isolation_problem,
)

SITE_DIR = Path(__file__).parent / "site"
# Where hyperpod_kit (and hyperpod_trainer beside it) is imported from: a checkout or site-packages.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
TAIL = 3000  # characters of an actor's output kept in a failure
UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "hyperpod-kit-"
# A timer's program that needs more than its unit's command line to run in a sandbox root: the
# health runner takes the root and its state and log files as options ({root}: the sandbox).
UNIT_EXTRA_ARGS = {
    "runner.py": (
        "--root",
        "{root}",
        "--state-file",
        "{root}/var/lib/hyperpod-kit/health-state.json",
        "--log-file",
        "{root}/var/log/hyperpod-kit/health.jsonl",
    ),
}
STUDIO_HOME = "/home/sagemaker-user"
# Slurm's client commands on a HyperPod node (the JWT issuer packs them for Studio).
SLURM_COMMANDS = ("sinfo", "squeue", "sbatch", "scancel", "sacct", "sprio", "sshare", "sstat")
NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
IS_COMPLETE_POLLS = 3
METRICS_CONFIG = "/etc/hyperpod-kit/prometheus/prometheus.yml"  # lifecycle/steps/metrics.sh
_REMOTE_WRITE = re.compile(
    r'url: "(https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com/workspaces/(ws-[A-Za-z0-9-]+)'
    r'/api/v1/remote_write)"'
)
OBSERVABILITY_ADDON = "amazon-sagemaker-hyperpod-observability"
TRAINER_IMAGE_AREA = "trainer-image"  # the trainer stack's parameter with the image's URI


class Recording(list[Call]):
    """The calls the actors made (a list of `Call`), with the actors that failed in their
    sandbox (`failures`) and what was not played (`skipped`)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[ActorFailure] = []
        self.skipped: list[SkippedActor] = []


def record_calls(assembly: Assembly, config: EnvironmentConfig, *, workdir: Path) -> Recording:
    """Play every actor of the environment's assembly in deploy order; see the module doc."""
    workdir.mkdir(parents=True, exist_ok=True)
    isolation = find_isolation()
    if isolation is None and os.geteuid() == 0 and not _traversable(workdir):
        workdir = Path(tempfile.gettempdir())  # the node scripts run as nobody: they must reach it
    base = Path(tempfile.mkdtemp(prefix="rehearsal-", dir=workdir))
    base.chmod(0o755)  # the node scripts run as nobody when this runs as root
    stage = _Stage(assembly, config, base, isolation)
    try:
        stage.play()
    finally:
        shutil.rmtree(stage.base, ignore_errors=True)
    return stage.recording


def _traversable(folder: Path) -> bool:
    """Whether anyone may reach into `folder` (every folder on its path has o+x)."""
    return all(p.stat().st_mode & 0o001 for p in (folder.resolve(), *folder.resolve().parents))


# --- the shared fake AWS ---------------------------------------------------------------------


@dataclass
class _World:
    """What AWS holds: `aws` (what actors wrote) and `seed` (what the deploy made by `moment`)."""

    base: Path
    isolated: bool
    aws: Path = field(init=False)
    seed: Path = field(init=False)
    # CDK's file assets at their destinations, made once (`_published_assets`).
    _assets: dict[tuple[str, str], Path] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.aws, self.seed = self.base / "aws", self.base / "seed"
        self.aws.mkdir(parents=True)

    def at(self, assembly: Assembly, moment: Moment) -> None:
        shutil.rmtree(self.seed, ignore_errors=True)
        if self._assets is None:
            self._assets = _published_assets(assembly, self.base / "assets")
        for (bucket, key), source in self._assets.items():  # published before any stack deploys
            path = self.seed / "s3" / bucket / key
            path.parent.mkdir(parents=True, exist_ok=True)
            _link(source, path)
        for name, value in assembly.parameters(moment).items():
            path = self.seed / "ssm" / name.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value)
        for (bucket, key), data in _deployed_objects(assembly, moment).items():
            path = self.seed / "s3" / bucket / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self.seed.mkdir(exist_ok=True)
        if os.geteuid() == 0 and not self.isolated:  # sandboxes run as nobody: let them read it
            subprocess.run(["chmod", "-R", "a+rwX", str(self.base)], check=True)

    def object(self, bucket: str, key: str) -> bytes | None:
        for base in (self.aws, self.seed):
            if (base / "s3" / bucket / key).is_file():
                return (base / "s3" / bucket / key).read_bytes()
        return None

    def objects(self, bucket: str, prefix: str) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for base in (self.seed, self.aws):
            root = base / "s3" / bucket
            for path in sorted(root.rglob("*")) if root.is_dir() else []:
                key = path.relative_to(root).as_posix()
                if path.is_file() and key.startswith(prefix):
                    found[key] = path.read_bytes()
        return found


def _asset_sources(assembly: Assembly) -> dict[str, Path]:
    """Asset hash -> its source in the assembly folder (a folder, or a file)."""
    manifest = read_json(assembly.folder / "manifest.json", "the assembly's manifest")
    return file_assets(assembly.folder, manifest.get("artifacts", {}))


def _asset_files(source: Path) -> dict[str, bytes]:
    """The files of an asset as they land in S3 when extracted (a folder or a zip)."""
    if source.is_dir():
        return {
            p.relative_to(source).as_posix(): p.read_bytes()
            for p in sorted(source.rglob("*"))
            if p.is_file()
        }
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as z:
            return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    return {}


def _published_assets(assembly: Assembly, cache: Path) -> dict[tuple[str, str], Path]:
    """The S3 objects `cdk deploy` publishes before it deploys a stack: every file asset of the
    asset manifests (*.assets.json) at each of its destinations (the bootstrap bucket
    ``cdk-hnb659fds-assets-<account>-<region>``, key ``<hash>.zip`` or ``<hash><ext>``), with
    the account and region of the stack the manifest belongs to. (bucket, key) -> a file with the
    object's bytes: the asset's own file, or a folder asset zipped into `cache` (once)."""
    manifest = read_json(assembly.folder / "manifest.json", "the assembly's manifest")
    artifacts: dict[str, Any] = manifest.get("artifacts", {})
    owner = {  # asset manifest artifact -> the stack that depends on it
        dep: name
        for name, artifact in artifacts.items()
        if isinstance(artifact, dict) and artifact.get("type") == "aws:cloudformation:stack"
        for dep in artifact.get("dependencies", [])
    }
    default = next(iter(assembly.stacks.values()), None)
    found: dict[tuple[str, str], Path] = {}
    for name, artifact in artifacts.items():
        if not isinstance(artifact, dict) or artifact.get("type") != "cdk:asset-manifest":
            continue
        stack = assembly.stacks.get(owner.get(name, ""), default)
        if stack is None:
            continue
        path = assembly.folder / str(artifact.get("properties", {}).get("file", ""))
        files = read_json(path, "an asset manifest").get("files", {})
        for digest, asset in files.items():
            source = assembly.folder / str(asset.get("source", {}).get("path", ""))
            if asset.get("source", {}).get("packaging") == "zip" and source.is_dir():
                source = _zipped(source, cache / f"{digest}.zip")
            if not source.is_file():
                continue
            places = {"AWS::AccountId": stack.account, "AWS::Region": stack.region,
                      "AWS::Partition": PARTITION}  # fmt: skip
            for destination in asset.get("destinations", {}).values():
                bucket = _placed(str(destination.get("bucketName", "")), places)
                found[(bucket, _placed(str(destination.get("objectKey", "")), places))] = source
    return found


def _placed(text: str, places: dict[str, str]) -> str:
    """An asset manifest's ``${AWS::AccountId}``-style placeholders filled in."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: places.get(m[1], m[0]), text)


def _zipped(folder: Path, target: Path) -> Path:
    """A folder asset as CDK uploads it: a zip of its files (paths relative to the folder),
    stored uncompressed (what an actor reads is the files; every rehearsal makes these)."""
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(folder).as_posix())
    return target


def _link(source: Path, target: Path) -> None:
    """`target` with `source`'s bytes: a hard link where one can be made, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _deployed_objects(assembly: Assembly, moment: Moment) -> dict[tuple[str, str], bytes]:
    """S3 objects that CDK's bucket deployments have put by `moment`."""
    sources = _asset_sources(assembly)
    found: dict[tuple[str, str], bytes] = {}
    for ref, res in assembly.find("Custom::CDKBucketDeployment"):
        if not assembly.exists_at(ref, moment):
            continue
        props = assembly.resolve(ref.stack, res.get("Properties", {}))
        bucket = str(props.get("DestinationBucketName", ""))
        prefix = str(props.get("DestinationBucketKeyPrefix", ""))
        for key in props.get("SourceObjectKeys", []):
            source = sources.get(str(key).removesuffix(".zip"))
            for name, data in _asset_files(source).items() if source else ():
                found[(bucket, prefix + name)] = data
    return found


# --- what the actors recorded, as calls --------------------------------------------------------


def _cli_calls(
    records: list[dict[str, Any]],
    actor: str,
    role: ResourceRef,
    moment: Moment,
    failures: list[ActorFailure],
) -> list[Call]:
    calls = []
    for record in records:
        words = [str(w) for w in record.get("args", [])]
        source = shlex.join(["aws", *words])
        try:
            operations = parse(words)
        except CliWordsError as e:
            failures.append(ActorFailure(actor, role, moment, 0, f"{source}: {e}"))
            continue
        error = record.get("error")
        calls += [
            Call(actor, role, moment, o.service, o.operation, o.params, source, error)
            for o in operations
        ]
    return calls


def _boto_calls(path: Path, actor: str, role: ResourceRef, moment: Moment) -> list[Call]:
    lines = path.read_text().splitlines() if path.is_file() else []
    calls = []
    for line in lines:
        r = json.loads(line)
        source = f"boto3 {r['service']}.{xform_name(r['operation'])}"
        if not r.get("faked", True):
            source += " (answered with an empty success: not scripted in botofake.ANSWERS)"
        calls.append(
            Call(
                actor,
                role,
                moment,
                r["service"],
                r["operation"],
                r.get("params", {}),
                source,
                r.get("error"),
            )
        )
    return calls


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    return ((result.stdout or "") + (result.stderr or ""))[-TAIL:]


# --- the stage -------------------------------------------------------------------------------


@dataclass
class _Group:
    """One instance group of a cluster resource, as the assembly says."""

    cluster: ResourceRef
    name: str
    instance_type: str
    role: ResourceRef
    source_uri: str
    on_create: str
    node_type: str  # Slurm's NodeType (Controller, Login, Compute) or "" on EKS
    mounts: tuple[str, ...]
    index: int

    @property
    def ip(self) -> str:
        return f"10.1.{self.index}.10"

    @property
    def instance_id(self) -> str:
        digest = hashlib.sha256(f"{self.cluster}/{self.name}".encode()).hexdigest()
        return f"i-0{digest[:16]}"


class _Stage:
    def __init__(
        self, assembly: Assembly, config: EnvironmentConfig, base: Path, isolation: Isolation | None
    ) -> None:
        self.assembly, self.config, self.base = assembly, config, base
        self.isolated = isolation is not None
        self.not_run: list[str] = []  # the user's own scripts, where there is no isolation
        self.world = _World(base / "world", self.isolated)
        self.recording = Recording()
        self.nodes: dict[str, tuple[_Group, Node]] = {}  # group -> its first-provisioned node
        self.python = SYSTEM_PYTHON if Path(SYSTEM_PYTHON).exists() else sys.executable
        self._runs = 0
        self._played: set[ResourceRef] = set()  # functions a custom resource ran
        self.account = next((s.account for s in assembly.stacks.values()), "")

    def play(self) -> None:
        groups = list(self._groups())
        for cluster in dict.fromkeys(g.cluster for g in groups):
            moment = Moment(f"first provisioning, while {cluster} is created", cluster)
            self.world.at(self.assembly, moment)
            self._slurmdbd(cluster, groups, moment)
            for group in (g for g in groups if g.cluster == cluster):
                node = self._provision(group, moment, "first provisioning")
                if node is not None:
                    self.nodes[group.name] = (group, node)
        self._lambdas_during_deploy()
        self._observability_addons()
        after = Moment.after_deploy()
        self.world.at(self.assembly, after)
        for group, node in self.nodes.values():
            self._timers(group, node, after)
        for group in groups:
            self._provision(group, after, "replaced node")
        self._job(groups, after)
        self._studio(after)
        self._lambdas_after_deploy(after)
        self._autoscaler(after)
        self.recording += operator_calls(self.assembly, self.config, after)
        if self.not_run:  # one line, however many
            self.recording.skipped.append(
                SkippedActor(
                    f"the user's own scripts ({', '.join(dict.fromkeys(self.not_run))})",
                    f"not run: no isolation here: {isolation_problem()}; hyperpod-kit's own "
                    "scripts ran",
                )
            )

    def _dir(self, name: str) -> Path:
        self._runs += 1
        path = self.base / f"{self._runs:03d}-{''.join(c if c.isalnum() else '-' for c in name)}"
        path.mkdir(parents=True)
        path.chmod(0o755)
        return path

    def _fail(
        self, actor: str, role: ResourceRef | None, moment: Moment, code: int, out: str
    ) -> None:
        self.recording.failures.append(ActorFailure(actor, role, moment, code, out[-TAIL:]))

    def _collect(self, actor: str, role: ResourceRef, moment: Moment, state: Path) -> None:
        aws = state / "aws.jsonl"
        records = [json.loads(x) for x in aws.read_text().splitlines()] if aws.is_file() else []
        self.recording += _cli_calls(records, actor, role, moment, self.recording.failures)
        self.recording += _boto_calls(state / "boto.jsonl", actor, role, moment)
        for path in (aws, state / "boto.jsonl"):
            path.unlink(missing_ok=True)

    # 7. HyperPod's slurmdbd set-up -----------------------------------------------------------

    def _slurmdbd(self, cluster: ResourceRef, groups: list[_Group], moment: Moment) -> None:
        """HyperPod configures slurmdbd on the controller from the accounting database's
        secret, when the cluster names one."""
        res = self.assembly.resource(cluster)
        slurm = (res.get("Properties", {}).get("Orchestrator") or {}).get("Slurm") or {}
        database = slurm.get("AccountingDatabase")
        if not database:
            return
        secret = str(self.assembly.resolve(cluster.stack, database.get("SecretArn")))
        actor = f"HyperPod slurmdbd set-up ({cluster.logical_id})"
        controller = next(
            (g for g in groups if g.cluster == cluster and g.node_type == "Controller"), None
        )
        if controller is None:
            self._fail(actor, None, moment, 1, "AccountingDatabase is set and no group is the "
                       "Slurm controller")  # fmt: skip
            return
        self.recording.append(
            Call(
                actor, controller.role, moment, "secretsmanager", "GetSecretValue",
                {"SecretId": secret},
                "HyperPod writes slurmdbd's database login on the controller from "
                "AccountingDatabase.SecretArn (the node's role is assumed to read it)",
            )
        )  # fmt: skip

    # 6. HyperPod's autoscaling --------------------------------------------------------------

    def _autoscaler(self, moment: Moment) -> None:
        """HyperPod scales a cluster with autoscaling on through the cluster's role."""
        for ref, res in self.assembly.find("AWS::SageMaker::Cluster"):
            props = self.assembly.resolve(ref.stack, res.get("Properties", {}))
            if (props.get("AutoScaling") or {}).get("Mode") != "Enable":
                continue
            actor = f"HyperPod autoscaling ({ref.logical_id})"
            role = self.assembly.referenced(ref.stack, res["Properties"].get("ClusterRole"))
            if role is None:
                self._fail(actor, None, moment, 1, "AutoScaling is on, and no ClusterRole is set")
                continue
            name = str(props.get("ClusterName"))
            source = "HyperPod adds and deletes nodes for Karpenter with the cluster's ClusterRole"
            self.recording += [
                Call(actor, role, moment, "sagemaker", op, {"ClusterName": name}, source)
                for op in ("BatchAddClusterNodes", "BatchDeleteClusterNodes")
            ]
            keys = {
                str(ebs["VolumeKmsKeyId"])
                for g in props.get("InstanceGroups", [])
                for storage in g.get("InstanceStorageConfigs", [])
                if (ebs := storage.get("EbsVolumeConfig") or {}).get("VolumeKmsKeyId")
            }
            self.recording += [
                Call(actor, role, moment, "kms", op, {"KeyId": key},
                     "a new node's volumes are encrypted with the group's key")
                for key in sorted(keys)
                for op in ("CreateGrant", "DescribeKey")
            ]  # fmt: skip

    # 1. lifecycle ----------------------------------------------------------------------------

    def _groups(self) -> Iterator[_Group]:
        for ref, res in self.assembly.find("AWS::SageMaker::Cluster"):
            props = res.get("Properties", {})
            for index, g in enumerate(props.get("InstanceGroups", [])):
                role = self.assembly.referenced(ref.stack, g.get("ExecutionRole"))
                lcc = self.assembly.resolve(ref.stack, g.get("LifeCycleConfig", {}))
                storage = self.assembly.resolve(ref.stack, g.get("InstanceStorageConfigs", []))
                mounts = [
                    s["FsxLustreConfig"].get("MountPath", "/fsx")
                    for s in storage
                    if "FsxLustreConfig" in s
                ]
                yield _Group(
                    cluster=ref,
                    name=str(g.get("InstanceGroupName")),
                    # a flexible group (InstanceRequirements) is played on its first type
                    instance_type=str(
                        g.get("InstanceType")
                        or g.get("InstanceRequirements", {}).get("InstanceTypes", ["?"])[0]
                    ),
                    role=role or ResourceRef(ref.stack, "?ExecutionRole"),
                    source_uri=str(lcc.get("SourceS3Uri", "")),
                    # the script HyperPod runs, at either stage (OnCreate or OnInitComplete)
                    on_create=str(
                        lcc.get("OnCreate") or lcc.get("OnInitComplete") or "on_create.sh"
                    ),
                    node_type=str(g.get("SlurmConfig", {}).get("NodeType", "")),
                    mounts=("/opt/dlami/nvme", "/opt/sagemaker", *mounts),
                    index=index,
                )

    def _resource_config(self, cluster: ResourceRef) -> dict[str, Any]:
        """What HyperPod writes to /opt/ml/config/resource_config.json on the cluster's nodes."""
        groups = [g for g in self._groups() if g.cluster == cluster]
        props = self.assembly.resource(cluster).get("Properties", {})
        return {
            "ClusterConfig": {
                "ClusterArn": self.assembly.attribute(
                    cluster.stack, cluster.logical_id, "ClusterArn"
                ),
                "ClusterName": str(self.assembly.resolve(cluster.stack, props.get("ClusterName"))),
            },
            "InstanceGroups": [
                {
                    "Name": g.name,
                    "InstanceType": g.instance_type,
                    "Instances": [
                        {
                            "InstanceName": f"{g.name}-1",
                            "InstanceId": g.instance_id,
                            "CustomerIpAddress": g.ip,
                        }
                    ],
                }
                for g in groups
            ],
        }

    def _provision(self, group: _Group, moment: Moment, kind: str) -> Node | None:
        """HyperPod fetches the group's upload with the group's role and runs OnCreate."""
        actor = f"lifecycle {group.name} ({kind})"
        bucket, _, prefix = group.source_uri.removeprefix("s3://").partition("/")
        source = f"HyperPod downloads LifeCycleConfig.SourceS3Uri {group.source_uri}"
        files = self.world.objects(bucket, prefix)
        self.recording += [
            Call(
                actor,
                group.role,
                moment,
                "s3",
                "ListObjectsV2",
                {"Bucket": bucket, "Prefix": prefix},
                source,
            ),
            Call(
                actor,
                group.role,
                moment,
                "s3",
                "GetObject",
                {"Bucket": bucket, "Key": f"{prefix}*"},
                source,
                None if files else "NoSuchKey",
            ),
        ]
        if not files:
            self._fail(
                actor, group.role, moment, 1, f"{group.source_uri}: nothing there ({source})"
            )
            return None
        base = self._dir(f"{group.name}-{kind}")
        bundle = base / "lifecycle"
        for key, data in files.items():
            name = key[len(prefix) :]
            users = not self.isolated and name.startswith(f"{GROUP_SCRIPTS_DIR}/")
            if users:
                self.not_run.append(f"lifecycle.scripts of group {group.name}")
            path = bundle / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_NOT_RUN.format(name=name).encode() if users else data)
            path.chmod(0o755)
        node = self._node(base, group, bundle)
        result = node.run(str(bundle / group.on_create), env=self._node_env(node))
        self._collect(actor, group.role, moment, node.state)
        if result.returncode != 0:
            self._fail(actor, group.role, moment, result.returncode, _tail(result))
        else:
            self._metrics_agent(group, node, moment)
        return node

    # 8. the metrics writers ------------------------------------------------------------------

    def _workspace_arn(self, region: str, workspace_id: str) -> str:
        """A workspace's ARN: the file's own (an existing workspace), else this account's."""
        existing = self.config.monitoring.prometheus.workspace_arn
        if existing is not None and existing.endswith(f"/{workspace_id}"):
            return existing
        return f"arn:aws:aps:{region}:{self.account}:workspace/{workspace_id}"

    def _metrics_agent(self, group: _Group, node: Node, moment: Moment) -> None:
        """The node's Prometheus agent, installed and started by its provisioning, remote-writes
        from then on as the group's role."""
        config = node.path(METRICS_CONFIG)
        found = _REMOTE_WRITE.search(config.read_text()) if config.is_file() else None
        if found is None:
            return
        url, region, workspace = found.groups()
        self.recording.append(
            Call(
                f"Prometheus agent on {group.name}",
                group.role,
                moment,
                "aps",
                "RemoteWrite",
                {"WorkspaceArn": self._workspace_arn(region, workspace)},
                f"Prometheus remote-writes to {url} with SigV4 as the node's role "
                f"({METRICS_CONFIG})",
            )
        )

    def _observability_addons(self) -> None:
        """HyperPod's observability add-on: its collector remote-writes to the workspace of the
        add-on's configuration and writes the HyperPod cluster's log group, as the role of its
        Pod Identity association, from the add-on's creation on."""
        clusters = [ref for ref, _ in self.assembly.find("AWS::SageMaker::Cluster")]
        for ref, res in self.assembly.find("AWS::EKS::Addon"):
            props = res.get("Properties", {})
            if self.assembly.resolve(ref.stack, props.get("AddonName")) != OBSERVABILITY_ADDON:
                continue
            actor = f"HyperPod observability collector ({ref.logical_id})"
            moment = Moment(f"while {ref} is created", ref)
            role = None
            for association in props.get("PodIdentityAssociations") or []:
                role = self.assembly.referenced(ref.stack, association.get("RoleArn"))
            if role is None:
                self._fail(actor, None, moment, 1, "the add-on has no Pod Identity association")
                continue
            values = json.loads(
                str(self.assembly.resolve(ref.stack, props.get("ConfigurationValues") or "{}"))
            )
            arn = str((values.get("ampWorkspace") or {}).get("arn", ""))
            source = "the add-on's collector remote-writes to ampWorkspace.arn"
            self.recording.append(
                Call(actor, role, moment, "aps", "RemoteWrite", {"WorkspaceArn": arn}, source)
            )
            for cluster in clusters:
                name = self.assembly.attribute(cluster.stack, cluster.logical_id, "ClusterName")
                cid = self.assembly.attribute(cluster.stack, cluster.logical_id, "ClusterId")
                group = f"/aws/sagemaker/Clusters/{name}/{cid}"
                params = {"logGroupName": group, "logStreamName": "hyperpod-observability"}
                why = "the collector's logs (logging.enabled) in the cluster's log group (assumed)"
                self.recording += [
                    Call(actor, role, moment, "logs", op, params, why)
                    for op in ("CreateLogStream", "PutLogEvents")
                ]

    def _node(self, base: Path, group: _Group, bundle: Path) -> Node:
        node = Node(
            base,
            bundle=bundle,
            resource_config=self._resource_config(group.cluster),
            ip=group.ip,
            world=self.world.aws,
            seed=self.world.seed,
            python=self.python,
            extra_fakes=NODE_FAKES,
            isolate=self.isolated,
        )
        node.knob("mounts", " ".join(group.mounts))
        daemon = {"Controller": "slurmctld", "": ""}.get(group.node_type, "slurmd")
        node.knob("active", daemon)
        node.write("/sys/devices/virtual/dmi/id/board_asset_tag", f"{group.instance_id}\n")
        # What HyperPod's Slurm brings: the configuration, the state folder, the client commands.
        node.write("/opt/slurm/etc/slurm.conf", f"ClusterName={self.config.cluster_name}\n")
        node.path("/var/spool/slurmctld").mkdir(parents=True, exist_ok=True)
        for command in SLURM_COMMANDS:
            node.write(f"/opt/slurm/bin/{command}", '#!/bin/bash\necho "$0 $*"\n').chmod(0o755)
        node.write("/opt/slurm/lib/slurm/auth_jwt.so", "plugin\n")
        if os.geteuid() == 0 and not self.isolated:
            subprocess.run(["chmod", "-R", "a+rX", str(node.root)], check=True)
        return node

    def _node_env(self, node: Node) -> dict[str, str]:
        """HyperPod's Slurm commands on PATH after the fakes; no grace period after a failure."""
        path = node.env()["PATH"].replace(f"{node.bin}:", f"{node.bin}:{node.root}/opt/slurm/bin:")
        return {"PATH": path, "HYPERPOD_KIT_FAIL_GRACE_SECONDS": "0", "FAKE_ACCOUNT": self.account}

    # 2. timers -------------------------------------------------------------------------------

    def _timers(self, group: _Group, node: Node, moment: Moment) -> None:
        units = node.path(UNIT_DIR)
        for unit in sorted(units.glob(f"{UNIT_PREFIX}*.service")) if units.is_dir() else []:
            if not (units / unit.name.replace(".service", ".timer")).exists():
                continue
            parsed = _unit_command(unit.read_text(), node)
            command = parsed.command
            if command is None:
                continue
            actor = f"timer {unit.stem} on {group.name}"
            extra = next(
                (v for k, v in UNIT_EXTRA_ARGS.items() if any(a.endswith(k) for a in command[:2])),
                (),
            )
            command += [a.format(root=node.root) for a in extra]
            result = node.run(
                "-c",
                'exec "$@"',
                unit.stem,
                *command,
                env={**self._node_env(node), **parsed.env, "INVOCATION_ID": "rehearsal"},
            )
            self._collect(actor, group.role, moment, node.state)
            if result.returncode not in parsed.success:
                self._fail(actor, group.role, moment, result.returncode, _tail(result))

    # 3. the job ------------------------------------------------------------------------------

    def _job(self, groups: list[_Group], moment: Moment) -> None:
        from hyperpod_kit.jobs import render_jobs

        try:  # what `hyperpod-kit jobs` renders by default
            rendered = render_jobs(self.config)
        except ValueError:  # a job rendered only with its image: the trainer stack's one
            image = self.assembly.parameters(moment).get(
                parameter_name(self.config.name, TRAINER_IMAGE_AREA)
            )
            if image is None:
                self.recording.skipped.append(
                    SkippedActor("the rendered job", "no image to render it with")
                )
                return
            rendered = render_jobs(self.config, image=image)
        jobs = [j for j in rendered if j.kind == "sbatch"]
        own = self.config.trainer.job.template
        if jobs and own is not None and not self.isolated:
            self.not_run.append(f"trainer.job.template {own}")
            return
        if not jobs:
            self.recording.skipped.append(
                SkippedActor(
                    "the rendered job",
                    "not a script (EKS: a HyperPodPyTorchJob manifest; its pods "
                    "pull the image with the nodes' role, outside any script)",
                )
            )
            return
        compute = [g for g in groups if g.node_type == "Compute"] or groups[-1:]
        if not compute:
            return
        group = compute[0]
        for job in jobs:
            actor = f"job {job.filename}"
            base = self._dir(actor)
            node = self._node(base, group, base / "job")
            script = base / "job" / job.filename
            script.parent.mkdir(parents=True)
            script.write_text(job.text)
            job_env = {
                # The documented override of where images are imported: a folder of the sandbox
                # (under the node's FSx it would be outside it).
                "HYPERPOD_IMAGES_DIR": f"{node.root}/fsx/.hyperpod-kit-images/rehearsal",
                "SLURM_JOB_ID": "1",
                "SLURM_JOB_NAME": job.filename,
                "SLURM_JOB_NODELIST": f"{group.name}-1",
                "SLURM_JOB_NUM_NODES": "1",
                "AWS_DEFAULT_REGION": self.config.region,
            }
            result = node.run(str(script), env={**self._node_env(node), **job_env})
            self._collect(actor, group.role, moment, node.state)
            if result.returncode != 0:
                self._fail(actor, group.role, moment, result.returncode, _tail(result))
            elif not node.calls("srun"):
                self._fail(actor, group.role, moment, 0, "the job ended without reaching srun")

    # 4. Studio -------------------------------------------------------------------------------

    def _studio(self, moment: Moment) -> None:
        configs = [
            (ref, res) for ref, res in self.assembly.find("AWS::SageMaker::StudioLifecycleConfig")
        ]
        if not configs:
            return
        for profile_ref, profile in self.assembly.find("AWS::SageMaker::UserProfile"):
            props = profile.get("Properties", {})
            user = str(self.assembly.resolve(profile_ref.stack, props.get("UserProfileName")))
            role = self._profile_role(profile_ref, props)
            domain = str(self.assembly.resolve(profile_ref.stack, props.get("DomainId")))
            for ref, res in configs:
                lcc = res.get("Properties", {})
                app = str(lcc.get("StudioLifecycleConfigAppType"))
                content = self.assembly.resolve(ref.stack, lcc.get("StudioLifecycleConfigContent"))
                import base64

                script = base64.b64decode(str(content)).decode()
                self._space(
                    f"studio {app} lifecycle of {user}",
                    role,
                    moment,
                    script,
                    user=user,
                    domain=domain,
                )

    def _profile_role(self, ref: ResourceRef, props: dict[str, Any]) -> ResourceRef:
        own = props.get("UserSettings", {}).get("ExecutionRole")
        if own is not None:
            return self.assembly.referenced(ref.stack, own) or ResourceRef(
                ref.stack, "?ExecutionRole"
            )
        domain = self.assembly.referenced(ref.stack, props.get("DomainId"))
        if domain is not None:
            default = (
                self.assembly.resource(domain).get("Properties", {}).get("DefaultUserSettings", {})
            )
            found = self.assembly.referenced(domain.stack, default.get("ExecutionRole"))
            if found is not None:
                return found
        return ResourceRef(ref.stack, "?ExecutionRole")

    def _space(
        self, actor: str, role: ResourceRef, moment: Moment, script: str, *, user: str, domain: str
    ) -> None:
        base = self._dir(actor)
        root, state, bin_dir = base / "root", base / "fake", base / "bin"
        for d in (root / STUDIO_HOME.lstrip("/"), state, bin_dir, base / "mnt"):
            d.mkdir(parents=True)
        metadata = root / "opt/ml/metadata/resource-metadata.json"
        metadata.parent.mkdir(parents=True)
        metadata.write_text(
            json.dumps({"UserProfileName": user, "DomainId": domain, "SpaceName": f"{user}-space"})
        )
        _executable(bin_dir / "python3", _SPACE_PYTHON.format(python=shlex.quote(sys.executable)))
        _executable(bin_dir / "micromamba", _MICROMAMBA)
        (base / "lcc.sh").write_text(script)
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": STUDIO_HOME,
            "HYPERPOD_KIT_ROOT": str(root),
            "HYPERPOD_KIT_FOREGROUND": "1",
            "HYPERPOD_KIT_STUDIO_MOUNT": str(base / "mnt"),
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{SITE_DIR}:{PACKAGE_PARENT}",
            "FAKE_STATE": str(state),
            "FAKE_AWS": str(self.world.aws),
            "FAKE_SEED": str(self.world.seed),
            "AWS_DEFAULT_REGION": self.config.region,
            "TMPDIR": str(base),
        }
        result = _run(["bash", str(base / "lcc.sh")], env, base)
        if result.returncode == 0:  # the user's first Slurm command reads their token
            for wrapper in sorted((root / STUDIO_HOME.lstrip("/") / ".local/bin").glob("sinfo")):
                result = _run([str(wrapper)], env | {"HOME": str(wrapper.parents[2])}, base)
        self._collect(actor, role, moment, state)
        if result.returncode != 0:
            log = next(root.rglob("lifecycle.log"), None)
            out = _tail(result) + (log.read_text()[-TAIL:] if log else "")
            self._fail(actor, role, moment, result.returncode, out)

    # 5. Lambda functions ---------------------------------------------------------------------

    def _ours(self) -> Iterator[tuple[ResourceRef, dict[str, Any], str, Path]]:
        """Our functions: (ref, resource, asset folder name under assets/functions, code)."""
        sources = _asset_sources(self.assembly)
        for ref, res in self.assembly.find("AWS::Lambda::Function"):
            props = res.get("Properties", {})
            key = str(self.assembly.resolve(ref.stack, props.get("Code", {}).get("S3Key", "")))
            code = sources.get(key.removesuffix(".zip"))
            module = str(props.get("Handler", "")).rpartition(".")[0]
            name = _our_function(code, module)
            if code is None or name is None:
                skipped = SkippedActor(
                    f"Lambda {ref}", f"not one of ours ({props.get('Handler')}: CDK's own code)"
                )
                if skipped not in self.recording.skipped:
                    self.recording.skipped.append(skipped)
                continue
            yield ref, res, name, code

    def _lambdas_during_deploy(self) -> None:
        ours = {ref: (res, name, code) for ref, res, name, code in self._ours()}
        for custom, res in self._custom_resources():
            token = self.assembly.referenced(
                custom.stack, res.get("Properties", {}).get("ServiceToken")
            )
            if token is None:
                continue
            steps = self._provider_steps(token, ours)
            if not steps:
                continue
            moment = Moment(f"while {custom} is created", custom)
            self.world.at(self.assembly, moment)
            # The nodes' timers run every few minutes from their first provisioning on: a custom
            # resource created after the cluster meets what they did (a partition status).
            for group, node in self.nodes.values():
                if self.assembly.exists_at(group.cluster, moment):
                    self._timers(group, node, moment)
            event = self._create_event(custom, res)
            for step, function in steps:
                self._played.add(function)
                resource, name, code = ours[function]
                actor = f"Lambda {name} {step} ({custom.logical_id})"
                polls = IS_COMPLETE_POLLS if step == "is_complete" else 1
                for _ in range(polls):
                    reply = self._invoke(
                        actor, function, resource, code, event=event, moment=moment
                    )
                    if reply is None or step != "is_complete" or reply.get("IsComplete"):
                        break
                else:
                    self._fail(
                        actor,
                        self._role(function, resource),
                        moment,
                        0,
                        f"not complete after {polls} polls: {reply}",
                    )
                if reply is None:
                    break
                if step == "on_event":
                    event = {**event, **reply}

    def _custom_resources(self) -> Iterator[tuple[ResourceRef, dict[str, Any]]]:
        for stack in self.assembly.stacks.values():
            for logical, res in stack.resources.items():
                kind = str(res.get("Type", ""))
                if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
                    yield ResourceRef(stack.id, logical), res

    def _provider_steps(
        self, token: ResourceRef, ours: dict[ResourceRef, Any]
    ) -> list[tuple[str, ResourceRef]]:
        """The functions a custom resource's service token runs: ours directly, or through CDK's
        provider framework (its USER_ON_EVENT / USER_IS_COMPLETE functions)."""
        if token in ours:
            return [("on_event", token)]
        variables = (
            self.assembly.resource(token)
            .get("Properties", {})
            .get("Environment", {})
            .get("Variables", {})
        )
        steps = []
        for step, key in (
            ("on_event", "USER_ON_EVENT_FUNCTION_ARN"),
            ("is_complete", "USER_IS_COMPLETE_FUNCTION_ARN"),
        ):
            target = self.assembly.referenced(token.stack, variables.get(key))
            if target in ours:
                steps.append((step, target))
        return steps

    def _create_event(self, custom: ResourceRef, res: dict[str, Any]) -> dict[str, Any]:
        stack = self.assembly.stacks[custom.stack]
        props = self.assembly.resolve(custom.stack, res.get("Properties", {}))
        return {
            "RequestType": "Create",
            "ServiceToken": props.get("ServiceToken"),
            "ResponseURL": "https://rehearsal.invalid/response",
            "RequestId": "rehearsal",
            "StackId": f"arn:aws:cloudformation:{stack.region}:{stack.account}:stack/"
            f"{stack.name}/rehearsal",
            "LogicalResourceId": custom.logical_id,
            "ResourceType": res.get("Type"),
            "ResourceProperties": _as_cloudformation_sends(props),
        }

    def _lambdas_after_deploy(self, moment: Moment) -> None:
        for ref, res, name, code in self._ours():
            if ref in self._played:
                continue
            driver = DRIVERS.get(name)
            if driver is None:
                self.recording.skipped.append(
                    SkippedActor(
                        f"Lambda {ref} ({name})", "no event to drive it with (add one to DRIVERS)"
                    )
                )
                continue
            role = self._role(ref, res)
            queue = self._event_source(ref)
            if queue is not None:  # Lambda polls the queue with the function's own role
                arn = self.assembly.attribute(queue.stack, queue.logical_id, "Arn")
                source = f"Lambda event source mapping polls {queue}"
                self.recording += [
                    Call(f"Lambda {name}", role, moment, "sqs", op, {"QueueArn": arn}, source)
                    for op in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")
                ]
            env = self._environment(ref, res)
            event = driver(env, self._resource_configs())
            if queue is not None:
                event = {
                    "Records": [
                        {
                            "messageId": "rehearsal-1",
                            "body": json.dumps(event),
                            "eventSource": "aws:sqs",
                        }
                    ]
                }
            self._invoke(f"Lambda {name}", ref, res, code, event=event, moment=moment)

    def _resource_configs(self) -> list[dict[str, Any]]:
        clusters = dict.fromkeys(g.cluster for g in self._groups())
        return [self._resource_config(c) for c in clusters]

    def _event_source(self, function: ResourceRef) -> ResourceRef | None:
        for ref, res in self.assembly.find("AWS::Lambda::EventSourceMapping"):
            props = res.get("Properties", {})
            if self.assembly.referenced(ref.stack, props.get("FunctionName")) == function:
                return self.assembly.referenced(ref.stack, props.get("EventSourceArn"))
        return None

    def _role(self, ref: ResourceRef, res: dict[str, Any]) -> ResourceRef:
        role = self.assembly.referenced(ref.stack, res.get("Properties", {}).get("Role"))
        return role or ResourceRef(ref.stack, "?Role")

    def _environment(self, ref: ResourceRef, res: dict[str, Any]) -> dict[str, str]:
        variables = res.get("Properties", {}).get("Environment", {}).get("Variables", {})
        resolved = self.assembly.resolve(ref.stack, variables)
        return {str(k): str(v) for k, v in resolved.items()}

    def _invoke(
        self,
        actor: str,
        ref: ResourceRef,
        res: dict[str, Any],
        code: Path,
        *,
        event: dict[str, Any],
        moment: Moment,
    ) -> dict[str, Any] | None:
        """Run the function's handler on `event` in a fresh process, its boto3 calls recorded."""
        role = self._role(ref, res)
        base = self._dir(actor)
        stack = self.assembly.stacks[ref.stack]
        module, _, function = str(res.get("Properties", {}).get("Handler", "")).rpartition(".")
        (base / "event.json").write_text(json.dumps(event))
        env = {
            **self._environment(ref, res),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(base),
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{SITE_DIR}:{PACKAGE_PARENT}",
            "FAKE_STATE": str(base),
            "FAKE_AWS": str(self.world.aws),
            "FAKE_SEED": str(self.world.seed),
            "FAKE_ACCOUNT": stack.account,
            "AWS_REGION": stack.region,
            "AWS_DEFAULT_REGION": stack.region,
            "AWS_LAMBDA_FUNCTION_NAME": ref.logical_id,
        }
        argv = [
            sys.executable,
            "-c",
            _LAMBDA_DRIVER,
            str(code),
            module,
            function,
            str(base / "event.json"),
            str(base / "reply.json"),
        ]
        result = _run(argv, env, base)
        self._collect(actor, role, moment, base)
        if result.returncode != 0:
            self._fail(actor, role, moment, result.returncode, _tail(result))
            return None
        reply = json.loads((base / "reply.json").read_text())
        return reply if isinstance(reply, dict) else {}


# 9. The operator ---------------------------------------------------------------------------------

OPERATOR_NODE = "i-0123456789abcdef0"  # a node of the cluster, as `nodes` names one


def operator_calls(assembly: Assembly, config: EnvironmentConfig, moment: Moment) -> list[Call]:
    """The calls of `hyperpod-kit nodes` (list, then replace, reboot and delete of one node), made
    as each operator's policy of the assembly (`policies.operator_policies`) on the clusters of
    its stack, as `hyperpod_kit.operations.nodes` makes them."""
    calls: list[Call] = []
    for policy in operator_policies(assembly):
        for ref, res in assembly.find("AWS::SageMaker::Cluster"):
            if assembly.top(ref.stack).id != assembly.top(policy.stack).id:
                continue
            name = str(assembly.resolve(ref.stack, res.get("Properties", {}).get("ClusterName")))
            actor = f"the operator ({policy.logical_id}: hyperpod-kit nodes on cluster {name})"
            one = {"ClusterName": name, "NodeIds": [OPERATOR_NODE]}
            words: list[tuple[str, str, dict[str, Any], str]] = [
                ("ssm", "GetParameter", {"Name": parameter_name(config.name, "cluster")}, "list"),
                ("sagemaker", "DescribeCluster", {"ClusterName": name}, "list"),
                ("sagemaker", "ListClusterNodes", {"ClusterName": name}, "list"),
                *(("sagemaker", op, one, action) for action, op in node_operations(config).items()),
            ]
            calls += [
                Call(actor, policy, moment, service, op, params, f"hyperpod-kit nodes {action}")
                for service, op, params, action in words
            ]
    return calls


def _our_function(code: Path | None, module: str) -> str | None:
    """The folder under assets/functions whose handler module the asset carries, byte for byte."""
    if code is None or not module:
        return None
    files = _asset_files(code)
    wanted = f"{module.replace('.', '/')}.py"
    for folder in sorted(p for p in FUNCTIONS_DIR.iterdir() if p.is_dir()):
        ours = folder / wanted
        if ours.is_file() and files.get(wanted) == ours.read_bytes():
            return folder.name
    return None


def _as_cloudformation_sends(value: Any) -> Any:
    """Custom resource properties as CloudFormation sends them: every scalar a string."""
    if isinstance(value, dict):
        return {k: _as_cloudformation_sends(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_cloudformation_sends(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


@dataclass
class _Unit:
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    success: set[int] = field(default_factory=lambda: {0})  # SuccessExitStatus= and 0


def _unit_command(text: str, node: Node) -> _Unit:
    """A systemd unit's ExecStart with its program (and a script an interpreter runs) as sandbox
    paths, the variables of its EnvironmentFile, the exit codes that count as success."""
    command: list[str] | None = None
    env: dict[str, str] = {}
    unit = _Unit()
    for line in text.splitlines():
        if line.startswith("SuccessExitStatus="):
            words = line.removeprefix("SuccessExitStatus=").split()
            unit.success |= {int(w) for w in words if w.isdigit()}
        elif line.startswith("ExecStart="):
            command = shlex.split(line.removeprefix("ExecStart="))
        elif line.startswith("EnvironmentFile="):
            path = node.path(line.removeprefix("EnvironmentFile=").lstrip("-"))
            for row in path.read_text().splitlines() if path.is_file() else []:
                key, eq, value = row.partition("=")
                if eq and not key.startswith("#"):
                    env[key.strip()] = value.strip().strip('"')
    if command:
        for i, word in enumerate(command):
            if word.startswith("/") and node.path(word).is_file() and not word.startswith("/usr/"):
                command[i] = str(node.path(word))
    unit.command, unit.env = command, env
    return unit


def _node_health_event(env: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The EventBridge event the remediation function exists for: a node of the cluster it
    serves, HyperPod asking for its replacement."""
    arn = env.get("CLUSTER_ARN", "")
    config = next((c for c in configs if c["ClusterConfig"]["ClusterArn"] == arn), None)
    config = config or (configs[0] if configs else None)
    group: dict[str, Any] = config["InstanceGroups"][-1] if config else {"Name": "?"}
    instances = group.get("Instances") or [{}]
    instance = str(instances[0].get("InstanceId", "i-0123456789abcdef0"))
    region, account = [*arn.split(":"), "", "", "", "", ""][3:5]
    return {
        "version": "0",
        "id": "rehearsal",
        "detail-type": NODE_HEALTH,
        "source": "aws.sagemaker",
        "account": account,
        "time": "2026-01-01T00:00:00Z",
        "region": region,
        "resources": [arn],
        "detail": {
            "ClusterArn": arn,
            "ClusterName": env.get("CLUSTER_NAME", ""),
            "InstanceId": instance,
            "InstanceGroupName": group["Name"],
            "HealthSummary": {
                "HealthStatus": "UnschedulablePendingReplacement",
                "HealthStatusReason": "rehearsal",
                "RepairAction": "Replace",
            },
        },
    }


# Our functions that no custom resource runs, by folder under assets/functions: the event each
# exists for, from the function's environment and the clusters' resource configs.
DRIVERS: dict[str, Callable[[dict[str, str], list[dict[str, Any]]], dict[str, Any]]] = {
    "remediation": _node_health_event,
}

# Runs one handler in the Lambda's place: argv = code folder, module, function, event, reply.
_LAMBDA_DRIVER = """
import importlib, json, sys
code, module, function, event, reply = sys.argv[1:6]
sys.path.insert(0, code)
handler = getattr(importlib.import_module(module), function)
result = handler(json.load(open(event)), None)
json.dump(result if result is not None else {}, open(reply, "w"), default=str)
"""

# What stands for a script of the user's own where the rehearsal has no isolation to run it in.
_NOT_RUN = """#!/bin/bash
# hyperpod-kit's rehearsal: {name} is a script of the user's own; without isolation it is not run.
exit 0
"""

_SPACE_PYTHON = """#!/bin/bash
# The rehearsal's python3 in a Studio space: `-m pip` (the toolkit's install, which calls no AWS)
# succeeds without installing anything; the rest is the real Python.
if [[ "$1 $2" == "-m pip" ]]; then exit 0; fi
exec {python} "$@"
"""

_MICROMAMBA = """#!/bin/bash
# The rehearsal's micromamba: `create --prefix P ... kubernetes-client=V` leaves a kubectl there.
prefix=""
while (($#)); do [[ $1 == --prefix ]] && prefix=$2; shift; done
mkdir -p "$prefix/bin" && printf '#!/bin/sh\\nexit 0\\n' >"$prefix/bin/kubectl"
chmod 0755 "$prefix/bin/kubectl"
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _run(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(argv, 124, out, f"timed out after {timeout} s")


__all__ = ["AFTER_DEPLOY", "DRIVERS", "Recording", "record_calls"]
