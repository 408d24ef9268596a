"""The AWS CLI's words as botocore operations: ``aws [global options] SERVICE OP --param value``
becomes (service, operation, parameters) through botocore's own service models, so a call recorded
from a script and one recorded from boto3 read the same.

The high-level commands that are not an operation of a model (``aws s3 cp|sync|ls|rm|mv``, ``aws
ecr get-login-password``) are mapped by hand, as data, below.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import botocore.session
from botocore import xform_name
from botocore.exceptions import UnknownServiceError
from botocore.model import OperationModel, ServiceModel

# Global options of the aws CLI: those that take a value, and flags.
GLOBAL_VALUED = frozenset({
    "--region", "--output", "--query", "--profile", "--endpoint-url", "--cli-read-timeout",
    "--cli-connect-timeout", "--color", "--ca-bundle", "--cli-binary-format",
})  # fmt: skip
GLOBAL_FLAGS = frozenset({
    "--debug", "--no-paginate", "--no-verify-ssl", "--no-sign-request", "--no-cli-pager",
    "--cli-auto-prompt", "--no-cli-auto-prompt",
})  # fmt: skip
# CLI service names that are not botocore's.
SERVICE_ALIASES = {"s3api": "s3", "configservice": "config"}

# High-level commands: (service, command) -> the operations they make. For `s3`, each operation
# takes its bucket and key from the command's S3 URIs: "src" or "dst" (the one that is s3://).
S3_URI_OPERATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    # direction (upload: local -> s3, download: s3 -> local, copy: s3 -> s3) -> operations
    "cp": {"upload": ("PutObject",), "download": ("GetObject",),
           "copy": ("GetObject", "PutObject")},
    "mv": {"upload": ("PutObject",), "download": ("GetObject", "DeleteObject"),
           "copy": ("GetObject", "PutObject", "DeleteObject")},
    "sync": {"upload": ("ListObjectsV2", "PutObject"), "download": ("ListObjectsV2", "GetObject"),
             "copy": ("ListObjectsV2", "GetObject", "PutObject")},
    "ls": {"list": ("ListObjectsV2",)},
    "rm": {"list": ("DeleteObject",)},
    "mb": {"list": ("CreateBucket",)},
    "rb": {"list": ("DeleteBucket",)},
    "presign": {"list": ("GetObject",)},
}  # fmt: skip
CUSTOM_COMMANDS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("ecr", "get-login-password"): (("ecr", "GetAuthorizationToken"),),
    ("ecr-public", "get-login-password"): (("ecr-public", "GetAuthorizationToken"),),
    ("eks", "update-kubeconfig"): (("eks", "DescribeCluster"),),
    ("eks", "get-token"): (("sts", "GetCallerIdentity"),),
    ("codeartifact", "login"): (("codeartifact", "GetAuthorizationToken"),),
}
# The parameter of a custom command that names the resource, by CLI option.
CUSTOM_PARAMETERS = {"--name": "name", "--cluster-name": "name", "--domain": "domain"}
S3_VALUED = frozenset({
    "--sse", "--sse-kms-key-id", "--storage-class", "--acl", "--content-type", "--exclude",
    "--include", "--expires-in", "--cache-control", "--metadata", "--grants", "--page-size",
})  # fmt: skip


@dataclass(frozen=True)
class CliOperation:
    """One botocore operation a CLI command makes."""

    service: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)


class CliWordsError(ValueError):
    """Words that are not an AWS CLI command botocore knows."""


@cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


@cache
def _model(service: str) -> ServiceModel:
    try:
        return _session().get_service_model(service)
    except UnknownServiceError:
        raise CliWordsError(f"aws {service}: no such service in botocore") from None


@cache
def _operations(service: str) -> dict[str, str]:
    """CLI operation name -> botocore operation name."""
    return {xform_name(op, "-"): op for op in _model(service).operation_names}


def split_globals(words: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The global options (wherever they stand) and the rest of the command, in order."""
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if name in GLOBAL_VALUED:
            if eq:
                found[name] = inline
                i += 1
            else:
                found[name] = words[i + 1] if i + 1 < len(words) else ""
                i += 2
        elif word in GLOBAL_FLAGS:
            found[word] = ""
            i += 1
        else:
            rest.append(word)
            i += 1
    return found, rest


def parse(words: Sequence[str]) -> list[CliOperation]:
    """The botocore operations of one ``aws`` command line (without the leading ``aws``)."""
    _globals, rest = split_globals(list(words))
    if len(rest) < 2:
        raise CliWordsError(f"aws {' '.join(words)}: no service and operation")
    cli_service, command, args = rest[0], rest[1], rest[2:]
    if cli_service == "s3":
        return _s3(command, args)
    if (cli_service, command) in CUSTOM_COMMANDS:
        options, _ = _options(args, set(CUSTOM_PARAMETERS))
        params = {CUSTOM_PARAMETERS[k]: v for k, v in options.items() if k in CUSTOM_PARAMETERS}
        return [CliOperation(s, op, params) for s, op in CUSTOM_COMMANDS[(cli_service, command)]]
    service = SERVICE_ALIASES.get(cli_service, cli_service)
    operation = _operations(service).get(command)
    if operation is None:
        raise CliWordsError(f"aws {cli_service} {command}: no such operation in botocore")
    return [CliOperation(service, operation, _parameters(_model(service), operation, args))]


def _parameters(model: ServiceModel, operation: str, args: list[str]) -> dict[str, Any]:
    """``--name value`` pairs as the operation's input members (``--with-decryption`` flags as
    booleans, numbers as numbers, JSON as JSON; other values as given)."""
    op: OperationModel = model.operation_model(operation)
    members = op.input_shape.members if op.input_shape is not None else {}
    by_option = {f"--{xform_name(name, '-')}": name for name in members}
    params: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        option, eq, inline = word.partition("=")
        negated = option.startswith("--no-") and f"--{option[5:]}" in by_option
        member = by_option.get(f"--{option[5:]}" if negated else option)
        if member is None:
            i += 1
            continue
        shape = members[member]
        if shape.type_name == "boolean" and not eq:
            params[member] = not negated
            i += 1
            continue
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        i += 1 if eq else 2
        params[member] = _typed(shape.type_name, value)
    return params


def _typed(kind: str, value: str) -> Any:
    if kind in ("integer", "long"):
        try:
            return int(value)
        except ValueError:
            return value
    if kind == "boolean":
        return value.lower() == "true"
    if kind in ("structure", "list", "map") and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _options(args: list[str], valued: set[str]) -> tuple[dict[str, str], list[str]]:
    found: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word in valued:
            found[word] = args[i + 1] if i + 1 < len(args) else ""
            i += 2
        elif word.startswith("--"):
            found[word.partition("=")[0]] = word.partition("=")[2]
            i += 1
        else:
            positional.append(word)
            i += 1
    return found, positional


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _s3(command: str, args: list[str]) -> list[CliOperation]:
    rules = S3_URI_OPERATIONS.get(command)
    if rules is None:
        raise CliWordsError(f"aws s3 {command}: not a command the rehearsal knows")
    _, paths = _options(args, set(S3_VALUED))
    uris = [p for p in paths if p.startswith("s3://")]
    if not uris:
        raise CliWordsError(f"aws s3 {command} {' '.join(args)}: no s3:// URI")
    if "list" in rules:
        direction = "list"
    elif len(uris) == 2:
        direction = "copy"
    else:
        direction = "upload" if paths and paths[-1].startswith("s3://") else "download"
    source, dest = (uris[0], uris[-1]) if direction == "copy" else (uris[0], uris[0])
    listing = command in ("sync", "ls") or "--recursive" in args
    found = []
    for operation in rules[direction]:
        uri = dest if operation in ("PutObject", "CreateBucket") else source
        bucket, key = _bucket_key(uri)
        if operation in ("ListObjectsV2",) or (listing and operation == "DeleteObject"):
            params: dict[str, Any] = {"Bucket": bucket, "Prefix": key}
        elif operation in ("CreateBucket", "DeleteBucket"):
            params = {"Bucket": bucket}
        else:
            local = [x for x in paths if not x.startswith("s3://")]
            if listing and (key == "" or key.endswith("/")):
                key += "*"  # every object under the prefix
            elif operation == "PutObject" and (key == "" or key.endswith("/")) and local:
                key += local[0].rstrip("/").rsplit("/", 1)[-1]  # cp FILE s3://bucket/prefix/
            params = {"Bucket": bucket, "Key": key}
        found.append(CliOperation("s3", operation, params))
    return found
