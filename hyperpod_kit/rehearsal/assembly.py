"""A synthesized cloud assembly as CloudFormation would deploy it, offline.

Every stack (nested ones included, found through the asset manifests as the gates find them), the
order CloudFormation creates them and their resources in, and the values their intrinsic
functions take. Physical ids that only a deploy would know (a generated bucket name, a cluster's
id, a key's id) are made up once, deterministically, and used everywhere: in the policies read
from the templates and in what the actors are given, so that a grant and a call about the same
resource meet on the same string.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from hyperpod_kit.cloud_assembly import AssemblyFileError, asset_of, file_assets, read_json
from hyperpod_kit.rehearsal.model import Moment, ResourceRef

PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"
PLACEHOLDER_ACCOUNT = "123456789012"  # an environment without `account`: any account


# A cloud assembly that cannot be read (no manifest, a missing template, bad JSON).
AssemblyError = AssemblyFileError


@dataclass
class Stack:
    """One stack's template; `parent` and `node` (its AWS::CloudFormation::Stack logical id in
    the parent) for a nested stack."""

    id: str
    template: dict[str, Any]
    region: str
    account: str
    depends_on: tuple[str, ...] = ()
    parent: str | None = None
    node: str | None = None
    name: str = ""

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        resources: dict[str, dict[str, Any]] = self.template.get("Resources", {})
        return resources


@dataclass
class Assembly:
    """The stacks of an assembly folder, keyed by id (top-level: the artifact id, which is the
    stack name hyperpod-kit gives; nested: ``parent/NestedLogicalId``)."""

    folder: Path
    stacks: dict[str, Stack] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: str | Path) -> Assembly:
        folder = Path(folder)
        manifest = _object(folder / "manifest.json", "the assembly's manifest")
        artifacts = manifest.get("artifacts", {})
        if not isinstance(artifacts, dict):
            raise AssemblyError(f"{folder / 'manifest.json'}: no artifacts")
        assembly = cls(folder)
        files = file_assets(folder, artifacts)
        for name, artifact in artifacts.items():
            if artifact.get("type") != "aws:cloudformation:stack":
                continue
            account, region = _environment(str(artifact.get("environment", "")))
            props = artifact.get("properties", {})
            stack = Stack(
                id=name,
                template=_object(
                    folder / str(props.get("templateFile", "")), f"the template of {name}"
                ),
                region=region,
                account=account,
                depends_on=tuple(
                    d
                    for d in artifact.get("dependencies", [])
                    if artifacts.get(d, {}).get("type") == "aws:cloudformation:stack"
                ),
                name=str(props.get("stackName", name)),
            )
            assembly.stacks[name] = stack
            assembly._add_nested(stack, files)
        return assembly

    def _add_nested(self, parent: Stack, files: dict[str, Path]) -> None:
        for logical, resource in parent.resources.items():
            if resource.get("Type") != "AWS::CloudFormation::Stack":
                continue
            path = asset_of(resource.get("Properties", {}).get("TemplateURL"), files)
            if path is None:
                raise AssemblyError(f"{parent.id}/{logical}: nested template not in the assembly")
            nested = Stack(
                id=f"{parent.id}/{logical}",
                template=_object(path, f"the template of {parent.id}/{logical}"),
                region=parent.region,
                account=parent.account,
                parent=parent.id,
                node=logical,
                name=f"{parent.name}-{logical}",
            )
            self.stacks[nested.id] = nested
            self._add_nested(nested, files)

    # --- order ---------------------------------------------------------------------------------

    def top(self, stack: str) -> Stack:
        """The top-level stack that deploys `stack` (itself if it is not nested)."""
        s = self.stacks[stack]
        while s.parent is not None:
            s = self.stacks[s.parent]
        return s

    @cached_property
    def _stack_closure(self) -> dict[str, frozenset[str]]:
        """Top-level stack -> every top-level stack deployed completely before it."""
        closure: dict[str, frozenset[str]] = {}

        def before(name: str) -> frozenset[str]:
            if name not in closure:
                closure[name] = frozenset()  # a cycle ends here (CDK refuses cycles anyway)
                found: set[str] = set()
                for dep in self.stacks[name].depends_on:
                    found |= {dep, *before(dep)}
                closure[name] = frozenset(found)
            return closure[name]

        for name, stack in self.stacks.items():
            if stack.parent is None:
                before(name)
        return closure

    def ancestors(self, ref: ResourceRef) -> frozenset[ResourceRef]:
        """Every resource CloudFormation must have created before it creates `ref`: the stacks
        deployed before `ref`'s top-level stack, and in its own stack (and the nested stacks on
        the way down) what `ref` depends on, by DependsOn, Ref, Fn::GetAtt and Fn::Sub."""
        found: set[ResourceRef] = set()
        for name in self._stack_closure[self.top(ref.stack).id]:
            found |= {ResourceRef(s.id, lid) for s in self._family(name) for lid in s.resources}
        stack: Stack | None = self.stacks[ref.stack]
        logical: str | None = ref.logical_id
        while stack is not None and logical is not None:
            for dep in self._depends(stack, logical):
                found.add(ResourceRef(stack.id, dep))
                found |= self._whole(stack, dep)
            logical = stack.node
            stack = self.stacks[stack.parent] if stack.parent else None
        return frozenset(found)

    def exists_at(self, ref: ResourceRef, moment: Moment) -> bool:
        """Whether `ref` exists when an actor runs at `moment`."""
        if moment.resource is None:
            return ref.stack in self.stacks
        return ref in self.ancestors(moment.resource)

    def _family(self, stack: str) -> Iterator[Stack]:
        """A stack and every stack nested in it."""
        for s in self.stacks.values():
            if s.id == stack or s.id.startswith(f"{stack}/"):
                yield s

    def _whole(self, stack: Stack, logical: str) -> set[ResourceRef]:
        """A nested stack resource stands for all of its resources."""
        if stack.resources.get(logical, {}).get("Type") != "AWS::CloudFormation::Stack":
            return set()
        nested = f"{stack.id}/{logical}"
        return {ResourceRef(s.id, lid) for s in self._family(nested) for lid in s.resources}

    def _depends(self, stack: Stack, logical: str) -> set[str]:
        """The logical ids `logical` depends on in its own template, transitively."""
        graph = self._graph(stack.id)
        seen: set[str] = set()
        todo = [logical]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    def _graph(self, stack: str) -> dict[str, frozenset[str]]:
        cache = self.__dict__.setdefault("_graphs", {})
        if stack not in cache:
            resources = self.stacks[stack].resources
            graph = {}
            for logical, res in resources.items():
                deps = res.get("DependsOn", [])
                deps = [deps] if isinstance(deps, str) else list(deps)
                refs = _refs({k: v for k, v in res.items() if k != "DependsOn"})
                graph[logical] = frozenset(d for d in [*deps, *refs] if d in resources)
            cache[stack] = graph
        graph_of: dict[str, frozenset[str]] = cache[stack]
        return graph_of

    # --- values --------------------------------------------------------------------------------

    def resolve(self, stack: str, value: Any) -> Any:
        """`value` with every intrinsic function worked out (made-up physical ids where only a
        deploy would know them; ``${Unresolved:...}`` where nothing can be said)."""
        return _Resolver(self, self.stacks[stack]).value(value)

    def physical_id(self, stack: str, logical: str) -> str:
        """What `Ref` gives for a resource: its name property where the template sets one,
        otherwise a made-up id, stable for (stack, logical id)."""
        return _Resolver(self, self.stacks[stack]).ref(logical)

    def attribute(self, stack: str, logical: str, name: str) -> str:
        return str(_Resolver(self, self.stacks[stack]).get_att(logical, name))

    def find(self, resource_type: str) -> Iterator[tuple[ResourceRef, dict[str, Any]]]:
        """Every resource of a type, in every stack."""
        for stack in self.stacks.values():
            for logical, res in stack.resources.items():
                if res.get("Type") == resource_type:
                    yield ResourceRef(stack.id, logical), res

    def resource(self, ref: ResourceRef) -> dict[str, Any]:
        return self.stacks[ref.stack].resources[ref.logical_id]

    def referenced(self, stack: str, value: Any) -> ResourceRef | None:
        """The resource a ``Ref``/``Fn::GetAtt`` (through parameters and imports) points at."""
        return _Resolver(self, self.stacks[stack]).target(value)

    def parameters(self, moment: Moment) -> dict[str, str]:
        """SSM parameters of the assembly that exist at `moment`: name -> value (resolved)."""
        found = {}
        for ref, res in self.find("AWS::SSM::Parameter"):
            if self.exists_at(ref, moment):
                props = res.get("Properties", {})
                name = str(self.resolve(ref.stack, props.get("Name", self.physical_id(*_p(ref)))))
                found[name] = str(self.resolve(ref.stack, props.get("Value", "")))
        return found


def _p(ref: ResourceRef) -> tuple[str, str]:
    return ref.stack, ref.logical_id


# Name properties: what Ref returns when the template names the resource.
_NAME_PROPERTY = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::SSM::Parameter": "Name",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": None,
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SageMaker::Cluster": "ClusterName",
    "AWS::EKS::Cluster": "Name",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::SNS::Topic": None,
    "AWS::SQS::Queue": None,
}
# ARN shapes by type, for Ref (where Ref gives an ARN) and GetAtt Arn.
_ARN = {
    "AWS::S3::Bucket": "arn:{p}:s3:::{name}",
    "AWS::IAM::Role": "arn:{p}:iam::{a}:role/{name}",
    "AWS::IAM::ManagedPolicy": "arn:{p}:iam::{a}:policy/{name}",
    "AWS::Logs::LogGroup": "arn:{p}:logs:{r}:{a}:log-group:{name}:*",
    "AWS::Lambda::Function": "arn:{p}:lambda:{r}:{a}:function:{name}",
    "AWS::SageMaker::Cluster": "arn:{p}:sagemaker:{r}:{a}:cluster/{id}",
    "AWS::EKS::Cluster": "arn:{p}:eks:{r}:{a}:cluster/{name}",
    "AWS::KMS::Key": "arn:{p}:kms:{r}:{a}:key/{id}",
    "AWS::SNS::Topic": "arn:{p}:sns:{r}:{a}:{name}",
    "AWS::SQS::Queue": "arn:{p}:sqs:{r}:{a}:{name}",
    "AWS::ECR::Repository": "arn:{p}:ecr:{r}:{a}:repository/{name}",
    "AWS::SSM::Parameter": "arn:{p}:ssm:{r}:{a}:parameter/{bare}",
    "AWS::SageMaker::Domain": "arn:{p}:sagemaker:{r}:{a}:domain/{id}",
    "AWS::FSx::FileSystem": "arn:{p}:fsx:{r}:{a}:file-system/{id}",
    "AWS::Events::Rule": "arn:{p}:events:{r}:{a}:rule/{name}",
    "AWS::StepFunctions::StateMachine": "arn:{p}:states:{r}:{a}:stateMachine:{name}",
    "AWS::SecretsManager::Secret": "arn:{p}:secretsmanager:{r}:{a}:secret:{name}-{id}",
    "AWS::APS::Workspace": "arn:{p}:aps:{r}:{a}:workspace/{id}",
    "AWS::Grafana::Workspace": "arn:{p}:grafana:{r}:{a}:/workspaces/{id}",
}
# Types whose Ref is their ARN.
_REF_IS_ARN = {
    "AWS::SNS::Topic", "AWS::IAM::ManagedPolicy", "AWS::StepFunctions::StateMachine",
    "AWS::SecretsManager::Secret", "AWS::APS::Workspace",
}  # fmt: skip
# Made-up ids in the shape AWS gives them.
_ID_SHAPE = {
    "AWS::FSx::FileSystem": "fs-{h17}",
    "AWS::KMS::Key": "{uuid}",
    "AWS::SageMaker::Cluster": "{h12}",
    "AWS::SageMaker::Domain": "d-{h12}",
    "AWS::EC2::VPC": "vpc-{h17}",
    "AWS::EC2::Subnet": "subnet-{h17}",
    "AWS::EC2::SecurityGroup": "sg-{h17}",
    "AWS::APS::Workspace": "ws-{uuid}",
    "AWS::Grafana::Workspace": "g-{h10}",
}
# A secret's ARN ends in a dash and six characters Secrets Manager picks.
_SUFFIX_TYPES = {"AWS::SecretsManager::Secret"}


class _Resolver:
    def __init__(self, assembly: Assembly, stack: Stack) -> None:
        self.assembly = assembly
        self.stack = stack

    # Ids --------------------------------------------------------------------------------------

    def _made_up(self, logical: str) -> str:
        digest = hashlib.sha256(f"{self.stack.id}/{logical}".encode()).hexdigest()
        kind = self.stack.resources.get(logical, {}).get("Type", "")
        shape = _ID_SHAPE.get(kind)
        if shape is None:  # a name CloudFormation would generate: stack-logical-suffix
            base = f"{self.stack.name}-{logical}"[:50]
            name = f"{base}-{digest[:12]}"
            return name.lower() if kind == "AWS::S3::Bucket" else name
        uuid = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        return shape.format(h17=digest[:17], h12=digest[:12], h10=digest[:10], uuid=uuid)

    def _name(self, logical: str) -> str:
        res = self.stack.resources.get(logical, {})
        prop = _NAME_PROPERTY.get(res.get("Type", ""))
        if prop and prop in res.get("Properties", {}):
            return str(self.value(res["Properties"][prop]))
        return self._made_up(logical)

    def _arn(self, logical: str) -> str:
        res = self.stack.resources.get(logical, {})
        kind = res.get("Type", "")
        name = self._name(logical)
        shape = _ARN.get(kind, "arn:{p}:unknown:{r}:{a}:" + kind.replace("::", "-") + "/{name}")
        made_up = self._made_up(logical)
        return str(shape).format(
            p=PARTITION, r=self.stack.region, a=self.stack.account, name=name,
            id=made_up[-6:] if kind in _SUFFIX_TYPES else made_up, bare=name.lstrip("/"),
        )  # fmt: skip

    def ref(self, logical: str) -> str:
        if logical in self.stack.template.get("Parameters", {}):
            return str(self._parameter(logical))
        pseudo = {
            "AWS::Partition": PARTITION,
            "AWS::Region": self.stack.region,
            "AWS::AccountId": self.stack.account,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": self.stack.name,
            "AWS::StackId": f"arn:{PARTITION}:cloudformation:{self.stack.region}:"
            f"{self.stack.account}:stack/{self.stack.name}/{self._made_up('AWS::StackId')}",
            "AWS::NoValue": "",
        }
        if logical in pseudo:
            return pseudo[logical]
        kind = self.stack.resources.get(logical, {}).get("Type", "")
        if kind in _REF_IS_ARN:
            return self._arn(logical)
        if kind in _ID_SHAPE:
            return self._made_up(logical)
        return self._name(logical)

    def get_att(self, logical: str, attribute: str) -> Any:  # noqa: PLR0911 - by attribute
        res = self.stack.resources.get(logical, {})
        kind = res.get("Type", "")
        if kind == "AWS::CloudFormation::Stack" and attribute.startswith("Outputs."):
            nested = self.assembly.stacks[f"{self.stack.id}/{logical}"]
            output = nested.template.get("Outputs", {}).get(attribute[len("Outputs.") :], {})
            return _Resolver(self.assembly, nested).value(output.get("Value"))
        if attribute in ("Arn", "ClusterArn", "DomainArn", "RoleArn") or attribute.endswith("Arn"):
            return self._arn(logical)
        if attribute in ("ClusterName", "Name"):
            return self._name(logical)
        if attribute in (
            "DomainId",
            "FileSystemId",
            "ClusterId",
            "KeyId",
            "Id",
            "RoleId",
            "GroupId",
        ):
            return self._made_up(logical)
        if attribute == "DNSName" and kind == "AWS::FSx::FileSystem":
            return f"{self._made_up(logical)}.fsx.{self.stack.region}.{URL_SUFFIX}"
        if attribute == "WorkspaceId" and kind == "AWS::APS::Workspace":
            return self._made_up(logical)
        if attribute == "PrometheusEndpoint" and kind == "AWS::APS::Workspace":
            workspace = self._made_up(logical)
            return (
                f"https://aps-workspaces.{self.stack.region}.{URL_SUFFIX}/workspaces/{workspace}/"
            )
        if attribute == "Endpoint" and kind == "AWS::Grafana::Workspace":
            return f"{self._made_up(logical)}.grafana-workspace.{self.stack.region}.{URL_SUFFIX}"
        if attribute == "LustreMountName":
            return self._made_up(logical)[3:11]
        if attribute in ("DomainName", "RegionalDomainName") and kind == "AWS::S3::Bucket":
            return f"{self._name(logical)}.s3.{self.stack.region}.{URL_SUFFIX}"
        return f"${{Unresolved:{self.stack.id}/{logical}.{attribute}}}"

    def _parameter(self, name: str) -> Any:
        """A nested stack's parameter: the value its parent passes; a top-level one: default."""
        if self.stack.parent is not None and self.stack.node is not None:
            parent = self.assembly.stacks[self.stack.parent]
            given = parent.resources[self.stack.node].get("Properties", {}).get("Parameters", {})
            if name in given:
                return _Resolver(self.assembly, parent).value(given[name])
        declared = self.stack.template.get("Parameters", {}).get(name, {})
        if "Default" in declared:
            return declared["Default"]
        return f"${{Unresolved:{self.stack.id}/{name}}}"

    def target(self, value: Any) -> ResourceRef | None:
        """The resource a Ref / GetAtt / ImportValue / parameter points at."""
        if not isinstance(value, dict) or len(value) != 1:
            return None
        ((key, inner),) = value.items()
        if key == "Ref" and isinstance(inner, str):
            if inner in self.stack.resources:
                return ResourceRef(self.stack.id, inner)
            if inner in self.stack.template.get("Parameters", {}) and self.stack.parent:
                parent = self.assembly.stacks[self.stack.parent]
                given = (
                    parent.resources[str(self.stack.node)].get("Properties", {}).get("Parameters")
                )
                if isinstance(given, dict) and inner in given:
                    return _Resolver(self.assembly, parent).target(given[inner])
        if key == "Fn::GetAtt":
            logical = inner[0] if isinstance(inner, list) else str(inner).split(".")[0]
            if logical in self.stack.resources:
                return ResourceRef(self.stack.id, str(logical))
        if key == "Fn::ImportValue":
            found = self._export(self.value(inner))
            if found is not None:
                stack, exported = found
                return _Resolver(self.assembly, stack).target(exported)
        return None

    def _export(self, name: Any) -> tuple[Stack, Any] | None:
        for stack in self.assembly.stacks.values():
            for output in stack.template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if export is not None and _Resolver(self.assembly, stack).value(export) == name:
                    return stack, output.get("Value")
        return None

    # Values -----------------------------------------------------------------------------------

    def value(self, node: Any) -> Any:  # noqa: PLR0911, PLR0912 - one branch per function
        if isinstance(node, list):
            return [self.value(v) for v in node]
        if not isinstance(node, dict):
            return node
        if len(node) != 1:
            return {k: self.value(v) for k, v in node.items()}
        ((key, inner),) = node.items()
        if key == "Ref":
            return self.ref(str(inner))
        if key == "Fn::GetAtt":
            logical, attribute = inner if isinstance(inner, list) else str(inner).split(".", 1)
            return self.get_att(str(logical), str(self.value(attribute)))
        if key == "Fn::Join":
            sep, items = inner
            return str(sep).join(str(v) for v in self.value(items))
        if key == "Fn::Sub":
            text, variables = (inner, {}) if isinstance(inner, str) else inner
            resolved = {k: self.value(v) for k, v in variables.items()}
            return _SUB.sub(lambda m: self._sub(m.group(1), resolved), str(text))
        if key == "Fn::Select":
            index, items = inner
            items = self.value(items)
            i = int(self.value(index))
            return items[i] if isinstance(items, list) and i < len(items) else ""
        if key == "Fn::Split":
            sep, text = inner
            return str(self.value(text)).split(str(sep))
        if key == "Fn::ImportValue":
            found = self._export(self.value(inner))
            if found is None:
                return f"${{Unresolved:import {self.value(inner)}}}"
            stack, exported = found
            return _Resolver(self.assembly, stack).value(exported)
        if key == "Fn::GetAZs":
            return [f"{self.stack.region}{z}" for z in "abc"]
        if key == "Fn::Base64":
            return base64.b64encode(str(self.value(inner)).encode()).decode()
        if key == "Fn::If":
            _condition, yes, _no = inner
            return self.value(yes)  # hyperpod-kit decides at synth: CDK's own conditions only
        if key in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
            return True
        return {key: self.value(inner)}

    def _sub(self, name: str, variables: dict[str, Any]) -> str:
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return str(variables[name])
        if "." in name:
            logical, attribute = name.split(".", 1)
            return str(self.get_att(logical, attribute))
        return self.ref(name)


_SUB = re.compile(r"\$\{([^}]+)\}")


def _refs(node: Any) -> set[str]:
    """Logical ids a template fragment refers to."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, inner in node.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::GetAtt":
                found.add(str(inner[0] if isinstance(inner, list) else str(inner).split(".")[0]))
            elif key == "Fn::Sub":
                text = inner if isinstance(inner, str) else inner[0]
                found |= {m.split(".")[0] for m in _SUB.findall(str(text))}
                if isinstance(inner, list):
                    found |= _refs(inner[1])
            else:
                found |= _refs(inner)
    elif isinstance(node, list):
        for item in node:
            found |= _refs(item)
    return found


def _object(path: Path, what: str) -> dict[str, Any]:
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise AssemblyError(f"{path}: {what} is not a JSON object")
    return data


def _environment(env: str) -> tuple[str, str]:
    """``aws://ACCOUNT/REGION`` -> (account, region); unknown parts get placeholders."""
    parts = env.removeprefix("aws://").split("/")
    account = parts[0] if parts and parts[0].isdigit() else PLACEHOLDER_ACCOUNT
    region = parts[1] if len(parts) > 1 and not parts[1].startswith("unknown") else "us-east-1"
    return account, region
