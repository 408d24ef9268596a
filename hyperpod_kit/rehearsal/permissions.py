"""What IAM checks for a recorded call: its actions and the resource ARN each is authorized on,
from the dated table `config/facts/call_actions.json`, plus the implied KMS actions that AWS
checks for encrypted S3 objects and SecureString parameters under a customer key."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from hyperpod_kit.config.facts import HERE
from hyperpod_kit.rehearsal.assembly import PARTITION, Assembly
from hyperpod_kit.rehearsal.model import Call

TABLE = HERE / "call_actions.json"


@dataclass(frozen=True)
class Requirement:
    """One action on one resource that a call needs; `why` says where an implied one comes from."""

    action: str
    resource: str
    why: str = ""


class UnknownOperationError(Exception):
    """A call the table has no row for: the rehearsal cannot say what it needs."""


@cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text())
    return data


def operations() -> frozenset[str]:
    return frozenset(_table()["operations"])


class Permissions:
    """Turns calls into requirements, for one assembly (its region, account, names)."""

    def __init__(self, assembly: Assembly, calls: Iterable[Call] = ()) -> None:
        self.assembly = assembly
        top = next((s for s in assembly.stacks.values() if s.parent is None), None)
        self.region = top.region if top else "us-east-1"
        self.account = top.account if top else "123456789012"
        self._clusters = self._cluster_arns()
        self._buckets = self._bucket_keys()
        # SecureString parameters written under a customer key: reading them needs kms:Decrypt.
        self._parameter_keys = {
            _bare(str(c.params.get("Name", ""))): str(c.params["KeyId"])
            for c in calls
            if c.operation == "PutParameter" and c.params.get("KeyId")
        }

    def required(self, call: Call) -> list[Requirement]:
        key = f"{call.service}:{call.operation}"
        row = _table()["operations"].get(key)
        if row is None:
            raise UnknownOperationError(key)
        params = dict(call.params)
        for old, new in row.get("rename", {}).items():
            if old in params:
                params[new] = params.pop(old)
        each = row.get("each")
        variants = (
            [{**params, each[:-1]: v} for v in params.get(each) or []] if each else [params]
        )  # fmt: skip
        found: list[Requirement] = []
        for values in variants:
            resource = self._resource(str(row["resource"]), values)
            found += [Requirement(action, resource) for action in row["actions"]]
            found += list(self._implied(call, values))
        return found

    def _resource(self, kind: str, params: dict[str, Any]) -> str:
        shape = _table()["resource_kinds"][kind]
        if shape is None:
            return ""
        values = {k: str(v) for k, v in params.items() if isinstance(v, str | int)}
        for name in ("Name", "Path"):
            if name in values:
                values[name] = _bare(values[name])
        values.setdefault("registryId", self.account)  # ECR: the caller's own registry
        if kind == "sagemaker-cluster":
            cluster = values.get("ClusterName", "")
            values["cluster_arn"] = (
                cluster if cluster.startswith("arn:") else self._clusters.get(cluster, cluster)
            )
        if kind == "ssm-parameter" and params.get("Name", "").startswith("arn:"):
            return str(params["Name"])
        try:
            return str(shape).format(
                partition=PARTITION, region=self.region, account=self.account, **values
            )
        except KeyError as e:
            return f"${{Unknown parameter {e} for {kind}}}"

    def _implied(self, call: Call, params: dict[str, Any]) -> Iterator[Requirement]:
        if call.service == "s3" and call.operation in ("PutObject", "CreateMultipartUpload"):
            key = self._buckets.get(str(params.get("Bucket")))
            if key:
                why = f"s3://{params.get('Bucket')} is encrypted with a customer KMS key"
                yield Requirement("kms:GenerateDataKey", key, why)
        if call.service == "s3" and call.operation in ("GetObject", "HeadObject"):
            key = self._buckets.get(str(params.get("Bucket")))
            if key:
                why = f"s3://{params.get('Bucket')} is encrypted with a customer KMS key"
                yield Requirement("kms:Decrypt", key, why)
        if call.service == "ssm" and call.operation == "PutParameter" and params.get("KeyId"):
            key = self._key_arn(str(params["KeyId"]))
            if key:
                yield Requirement("kms:Encrypt", key, "a SecureString under a customer key")
        if call.service == "ssm" and call.operation in ("GetParameter", "GetParameters"):
            written = self._parameter_keys.get(_bare(str(params.get("Name", ""))))
            key = self._key_arn(written) if written else None
            if key and params.get("WithDecryption") in (True, "true", "True"):
                yield Requirement("kms:Decrypt", key, "a SecureString under a customer key")

    def _key_arn(self, key: str) -> str | None:
        if key.startswith("alias/aws/"):
            return None  # an AWS managed key: its key policy lets the account's principals use it
        if key.startswith("arn:"):
            return key
        if key.startswith("alias/"):
            return f"arn:{PARTITION}:kms:{self.region}:{self.account}:{key}"
        return f"arn:{PARTITION}:kms:{self.region}:{self.account}:key/{key}"

    def _cluster_arns(self) -> dict[str, str]:
        found = {}
        for ref, _ in self.assembly.find("AWS::SageMaker::Cluster"):
            name = self.assembly.attribute(ref.stack, ref.logical_id, "ClusterName")
            found[name] = self.assembly.attribute(ref.stack, ref.logical_id, "ClusterArn")
        return found

    def _bucket_keys(self) -> dict[str, str]:
        """Bucket name -> ARN of the customer KMS key it encrypts with by default."""
        found = {}
        for ref, res in self.assembly.find("AWS::S3::Bucket"):
            props = self.assembly.resolve(ref.stack, res.get("Properties", {}))
            rules = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
            for rule in rules:
                default = rule.get("ServerSideEncryptionByDefault", {})
                key = default.get("KMSMasterKeyID")
                if default.get("SSEAlgorithm") in ("aws:kms", "aws:kms:dsse") and key:
                    arn = self._key_arn(str(key))
                    if arn:
                        found[self.assembly.physical_id(ref.stack, ref.logical_id)] = arn
        return found


def _bare(name: str) -> str:
    return name[1:] if name.startswith("/") else name
