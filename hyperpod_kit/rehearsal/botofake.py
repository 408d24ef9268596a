"""boto3 calls recorded and answered through botocore's event hooks, with no network.

`install()` registers two handlers on boto3's default session (so every client made after it, by
``boto3.client(...)`` anywhere in the process, has them): ``before-parameter-build`` keeps the
call's parameters as the caller gave them, ``before-call`` appends the call to ``$FAKE_STATE/
boto.jsonl`` and answers it from a small script of the services our actors use, backed by the same
files as the fake ``aws`` CLI (`fakes.py`: ``$FAKE_AWS`` for what actors wrote, ``$FAKE_SEED`` for
what the deploy made). An operation the script does not know answers an empty success; the record
says so (``"faked": false``).

Imported in a subprocess that runs an actor (a Lambda handler, Studio's boto3 helper) through
`site/sitecustomize.py`; it needs only boto3, which a Lambda runtime and a Studio image have.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

Answer = Callable[[dict[str, Any]], dict[str, Any]]
PARAMS_KEY = "hyperpod_kit_rehearsal_params"


class FakeError(Exception):
    """What the fake service answers as an error: code, message, HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class _Http:
    """The part of an HTTP response botocore reads after a ``before-call`` answer."""

    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""
        self.text = ""
        self.raw = None
        self.url = "https://rehearsal.invalid/"


def _state() -> Path:
    return Path(os.environ.get("FAKE_STATE", "."))


def _bases() -> list[Path]:
    found = [Path(os.environ.get("FAKE_AWS") or _state())]
    if os.environ.get("FAKE_SEED"):
        found.append(Path(os.environ["FAKE_SEED"]))
    return found


def _held(kind: str, name: str) -> Path | None:
    for base in _bases():
        if (base / kind / name).is_file():
            return base / kind / name
    return None


def _write(kind: str, name: str, data: bytes) -> None:
    path = _bases()[0] / kind / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _parameter(name: str) -> dict[str, Any]:
    found = _held("ssm", name.lstrip("/"))
    if found is None:
        raise FakeError("ParameterNotFound", f"{name} does not exist")
    return {"Name": name, "Value": found.read_text(), "Type": "String", "Version": 1}


def _get_parameters(p: dict[str, Any]) -> dict[str, Any]:
    found, missing = [], []
    for name in p.get("Names", []):
        try:
            found.append(_parameter(name))
        except FakeError:
            missing.append(name)
    return {"Parameters": found, "InvalidParameters": missing}


def _put_parameter(p: dict[str, Any]) -> dict[str, Any]:
    name = str(p["Name"]).lstrip("/")
    if _held("ssm", name) is not None and not p.get("Overwrite"):
        raise FakeError("ParameterAlreadyExists", p["Name"])
    _write("ssm", name, str(p["Value"]).encode())
    return {"Version": 1}


def _delete_parameter(p: dict[str, Any]) -> dict[str, Any]:
    path = _bases()[0] / "ssm" / str(p["Name"]).lstrip("/")
    if not path.is_file():
        raise FakeError("ParameterNotFound", f"{p['Name']} does not exist")
    path.unlink()
    return {}


def _object(p: dict[str, Any]) -> bytes:
    found = _held("s3", f"{p['Bucket']}/{p['Key']}")
    if found is None:
        raise FakeError("NoSuchKey", f"s3://{p['Bucket']}/{p['Key']} does not exist", 404)
    return found.read_bytes()


def _get_object(p: dict[str, Any]) -> dict[str, Any]:
    from botocore.response import StreamingBody

    data = _object(p)
    if p.get("Range"):  # bytes=START-END, as s3transfer asks
        start, _, end = str(p["Range"]).removeprefix("bytes=").partition("-")
        data = data[int(start) : int(end) + 1 if end else None]
    return {
        "Body": StreamingBody(io.BytesIO(data), len(data)),
        "ContentLength": len(data),
        "ETag": '"rehearsal"',
    }


def _head_object(p: dict[str, Any]) -> dict[str, Any]:
    return {"ContentLength": len(_object(p)), "ETag": '"rehearsal"'}


def _put_object(p: dict[str, Any]) -> dict[str, Any]:
    body = p.get("Body", b"")
    data = body.read() if hasattr(body, "read") else body
    _write(
        "s3", f"{p['Bucket']}/{p['Key']}", data if isinstance(data, bytes) else str(data).encode()
    )
    return {"ETag": '"rehearsal"'}


def _not_found(what: str) -> Answer:
    def answer(p: dict[str, Any]) -> dict[str, Any]:
        raise FakeError("ResourceNotFound", f"{what} {json.dumps(p, default=str)} does not exist")

    return answer


def _describe_file_systems(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "FileSystems": [
            {"FileSystemId": fs, "NetworkInterfaceIds": [f"eni-{i:017x}" for i in range(2)]}
            for fs in p.get("FileSystemIds", [])
        ]
    }


def _describe_network_interfaces(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "NetworkInterfaces": [
            {"NetworkInterfaceId": eni, "Groups": [{"GroupId": "sg-0rehearsal"}]}
            for eni in p.get("NetworkInterfaceIds", [])
        ]
    }


def _batch_nodes(p: dict[str, Any]) -> dict[str, Any]:
    return {"Successful": list(p.get("NodeIds", [])), "Failed": []}


def _caller(p: dict[str, Any]) -> dict[str, Any]:
    account = os.environ.get("FAKE_ACCOUNT", "123456789012")
    return {
        "Account": account,
        "Arn": f"arn:aws:sts::{account}:assumed-role/rehearsal/actor",
        "UserId": "AROAREHEARSAL:actor",
    }


def _describe_cluster(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "cluster": {
            "name": p.get("name"),
            "endpoint": "https://rehearsal.eks.invalid",
            "certificateAuthority": {"data": "UkVIRUFSU0FM"},
        }
    }


# (service, operation) -> answer. Services and operations as botocore names them.
ANSWERS: dict[tuple[str, str], Answer] = {
    ("ssm", "GetParameter"): lambda p: {"Parameter": _parameter(str(p["Name"]))},
    ("ssm", "GetParameters"): _get_parameters,
    ("ssm", "PutParameter"): _put_parameter,
    ("ssm", "DeleteParameter"): _delete_parameter,
    ("s3", "GetObject"): _get_object,
    ("s3", "HeadObject"): _head_object,
    ("s3", "PutObject"): _put_object,
    ("sagemaker", "DescribeUserProfile"): _not_found("user profile"),
    ("sagemaker", "DescribeSpace"): _not_found("space"),
    ("sagemaker", "BatchRebootClusterNodes"): _batch_nodes,
    ("sagemaker", "BatchReplaceClusterNodes"): _batch_nodes,
    ("fsx", "DescribeFileSystems"): _describe_file_systems,
    ("ec2", "DescribeNetworkInterfaces"): _describe_network_interfaces,
    ("sts", "GetCallerIdentity"): _caller,
    ("eks", "DescribeCluster"): _describe_cluster,
    ("sns", "Publish"): lambda p: {"MessageId": "rehearsal"},
}


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[PARAMS_KEY] = dict(params)


def _answer(model: Any, context: dict[str, Any], **_: Any) -> tuple[_Http, dict[str, Any]]:
    service = model.service_model.service_name
    operation = model.name
    params = context.get(PARAMS_KEY, {})
    answer = ANSWERS.get((service, operation))
    record: dict[str, Any] = {
        "service": service,
        "operation": operation,
        "params": params,
        "error": None,
        "faked": answer is not None,
    }
    try:
        reply = answer(params) if answer is not None else {}
        status = 200
    except FakeError as e:
        record["error"] = e.code
        reply = {"Error": {"Code": e.code, "Message": e.message}}
        status = e.status
    with (_state() / "boto.jsonl").open("a") as f:
        f.write(json.dumps(record, default=_printable) + "\n")
    reply.setdefault("ResponseMetadata", {"HTTPStatusCode": status, "RequestId": "rehearsal"})
    return _Http(status), reply


def _printable(value: Any) -> Any:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return f"<{type(value).__name__}>"


def install() -> None:
    """Record and answer every boto3 call this process makes from now on."""
    import boto3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "rehearsal")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "rehearsal")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    boto3.setup_default_session()
    events = boto3.DEFAULT_SESSION.events  # type: ignore[union-attr]
    events.register("before-parameter-build", _keep_params)
    events.register("before-call", _answer)  # type: ignore[arg-type]  # its answer is the reply
