"""The security baseline a reviewer checks first, on every template of every example environment,
nested templates included (docs/security.md):

- a new EKS cluster's secrets are envelope-encrypted with a KMS key: the environment's
  (`kms_key_arn`), else a key of the template's own with rotation on and `Retain`;
- every CloudWatch log group is encrypted with the environment's key where the file names one, and
  uses CloudWatch Logs' default encryption where it does not;
- every S3 bucket that holds more than access logs writes server access logs to an access-log
  bucket of its template;
- every Lambda function logs to a log group of its template (so the two rules above reach its
  logs), and has a row in docs/security.md whose concurrency, dead-letter and VPC cells say what
  the template does.

Each example is synthesized once per session (in-process, no gates: test_synth_examples runs
those), plus two variants for what no example has: a given key on a new EKS cluster, and the
remediation Lambda.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.naming import accounting_cluster_identifier
from tests.conftest import REPO, merge

pytestmark = pytest.mark.synth

ENVIRONMENTS = REPO / "environments"
SECURITY_MD = REPO / "docs" / "security.md"
KEY = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    p.stem: (p.name, {}) for p in sorted(ENVIRONMENTS.glob("*.yaml"))
}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "eks+key": ("eks.yaml", {"account": "111122223333", "kms_key_arn": KEY}),
    "remediation+key": (
        "default.yaml",
        {
            "account": "111122223333",
            "kms_key_arn": KEY,
            "cluster": {"node_recovery": "None"},
            "trainer": {"job": {"auto_resume": False}},
        },
    ),
}
CASES = EXAMPLES | VARIANTS

Template = dict[str, Any]


@dataclass(frozen=True)
class Assembly:
    name: str
    key_arn: str | None
    templates: dict[str, Template]  # stack name (nested: "parent/child") -> template


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Assembly]:
    """Synthesize a case once per session: an example as it is, or a variant of one."""
    from hyperpod_kit.app import build_environment, create_app
    from hyperpod_kit.gates import check_assembly

    @cache
    def build(case: str) -> Assembly:
        file, overrides = CASES[case]
        work = tmp_path_factory.mktemp(case.replace("+", "-"))
        source = ENVIRONMENTS / file
        if overrides:  # relative paths resolve from the example's folder all the same (at_source)
            data = merge(yaml.safe_load(source.read_text()), overrides)
            source = work / file
            source.write_text(yaml.safe_dump(data, sort_keys=False))
        config = load_environment(source).config.at_source(ENVIRONMENTS)
        app = create_app(outdir=str(work / "cdk.out"))
        build_environment(app, config)
        out = app.synth().directory
        report = check_assembly(out, lint=False)
        templates = {s.name: json.loads(s.template.read_text()) for s in report.stacks}
        return Assembly(config.name, config.kms_key_arn, templates)

    return build


# --- the baseline -------------------------------------------------------------------------------


def _of_type(template: Template, kind: str) -> dict[str, Any]:
    return {k: r for k, r in template.get("Resources", {}).items() if r.get("Type") == kind}


def _ref(value: Any) -> str | None:
    return value.get("Ref") if isinstance(value, dict) else None


def baseline_violations(
    templates: dict[str, Template], key_arn: str | None, name: str = "env"
) -> list[str]:
    """What breaks the baseline in the templates of environment `name`, one line each,
    ``<stack> <logical id>: <what>``."""
    out: list[str] = []
    for stack, template in templates.items():
        out += [f"{stack} {v}" for v in _eks_secrets(template, key_arn)]
        out += [f"{stack} {v}" for v in _log_groups(template, key_arn, name)]
        out += [f"{stack} {v}" for v in _access_logs(template)]
        out += [f"{stack} {v}" for v in _function_logs(template)]
    return out


def _eks_secrets(template: Template, key_arn: str | None) -> Iterator[str]:
    resources = template.get("Resources", {})
    for lid, cluster in _of_type(template, "AWS::EKS::Cluster").items():
        configs = cluster.get("Properties", {}).get("EncryptionConfig") or []
        if len(configs) != 1 or configs[0].get("Resources") != ["secrets"]:
            yield f"{lid}: secrets are not envelope-encrypted with a KMS key"
            continue
        key = configs[0].get("Provider", {}).get("KeyArn")
        if key_arn is not None:
            if key != key_arn:
                yield f"{lid}: secrets key {key!r} is not the environment's {key_arn}"
            continue
        target = key.get("Fn::GetAtt", [None])[0] if isinstance(key, dict) else None
        created = resources.get(target) if isinstance(target, str) else None
        if created is None or created.get("Type") != "AWS::KMS::Key":
            yield f"{lid}: secrets key {key!r} is not a key of this template"
        elif created.get("Properties", {}).get("EnableKeyRotation") is not True:
            yield f"{target}: the secrets key does not rotate"
        elif created.get("DeletionPolicy") != "Retain" or (
            created.get("UpdateReplacePolicy") != "Retain"
        ):
            yield f"{target}: the secrets key is not retained"


def _log_groups(template: Template, key_arn: str | None, name: str) -> Iterator[str]:
    for lid, group in _of_type(template, "AWS::Logs::LogGroup").items():
        props = group.get("Properties", {})
        key = props.get("KmsKeyId")
        if key != key_arn:
            want = "CloudWatch Logs' default encryption" if key_arn is None else key_arn
            yield f"{lid}: log group key {key!r}, expected {want}"
        # The key policy in docs/security.md may narrow Logs to log-group:<name>-* (and, with
        # Slurm accounting, to the log groups RDS names after the database: the doc says so).
        group_name = props.get("LogGroupName")
        rds = f"/aws/rds/cluster/{accounting_cluster_identifier(name)}/"
        if group_name is not None and not str(group_name).startswith((f"{name}-", rds)):
            yield f"{lid}: log group name {group_name!r} does not start with '{name}-'"


def _access_logs(template: Template) -> Iterator[str]:
    buckets = _of_type(template, "AWS::S3::Bucket")
    targets: dict[str, str | None] = {
        lid: _ref(
            b.get("Properties", {}).get("LoggingConfiguration", {}).get("DestinationBucketName")
        )
        for lid, b in buckets.items()
    }
    access_log_buckets = {t for t in targets.values() if t is not None}
    for lid, target in targets.items():
        if target == lid:
            yield f"{lid}: the bucket writes its access logs into itself"
        elif target is None and lid not in access_log_buckets:
            yield f"{lid}: no server access logs (into an access-log bucket of the template)"
        elif target is not None and target not in buckets:
            yield f"{lid}: access logs go to {target}, not a bucket of this template"


def _function_logs(template: Template) -> Iterator[str]:
    groups = _of_type(template, "AWS::Logs::LogGroup")
    for lid, fn in _of_type(template, "AWS::Lambda::Function").items():
        group = _ref(fn.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup"))
        if group not in groups:
            yield (
                f"{lid}: logs to {group or '/aws/lambda/<name>'}, not a log group of this "
                "template (neither its key nor a retention would apply)"
            )


@pytest.mark.parametrize("case", list(CASES))
def test_every_template_meets_the_baseline(case: str, assembly: Callable[[str], Assembly]) -> None:
    built = assembly(case)
    assert baseline_violations(built.templates, built.key_arn, built.name) == []


def test_the_baseline_is_not_vacuous(assembly: Callable[[str], Assembly]) -> None:
    """Each rule meets what it is about: a created and a given secrets key, default-encrypted and
    key-encrypted log groups, logged buckets and the access-log buckets they write to."""

    def count(case: str, kind: str, where: Callable[[Any], bool] = lambda _: True) -> int:
        templates = assembly(case).templates.values()
        return sum(1 for t in templates for r in _of_type(t, kind).values() if where(r))

    def props(r: Any) -> dict[str, Any]:
        return dict(r.get("Properties", {}))

    assert count("eks", "AWS::KMS::Key", lambda r: props(r).get("EnableKeyRotation")) >= 1
    assert count("eks+key", "AWS::EKS::Cluster") == 1
    assert count("prod-slurm", "AWS::Logs::LogGroup", lambda r: "KmsKeyId" in props(r)) >= 2
    assert count("default", "AWS::Logs::LogGroup", lambda r: "KmsKeyId" not in props(r)) >= 2
    logged = count("default", "AWS::S3::Bucket", lambda r: "LoggingConfiguration" in props(r))
    assert logged == 2  # the data bucket and the lifecycle-scripts bucket


@pytest.mark.parametrize("case", ["eks", "eks+key"])
def test_the_eks_cluster_is_created_after_its_role_may_use_the_key(
    case: str, assembly: Callable[[str], Assembly]
) -> None:
    """The cluster role's policy on the secrets key exists before the cluster (DependsOn)."""
    built = assembly(case)
    (template,) = [t for t in built.templates.values() if _of_type(t, "AWS::EKS::Cluster")]
    (cluster,) = _of_type(template, "AWS::EKS::Cluster").values()
    key = cluster["Properties"]["EncryptionConfig"][0]["Provider"]["KeyArn"]
    policies = _of_type(template, "AWS::IAM::Policy")
    granting = [
        lid
        for lid, p in policies.items()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if st.get("Resource") == key and "kms:Decrypt" in st.get("Action", [])
    ]
    assert len(granting) == 1
    assert granting[0] in cluster.get("DependsOn", [])


def test_an_existing_eks_cluster_is_left_alone(assembly: Callable[[str], Assembly]) -> None:
    """eks-existing.yaml refers to a cluster that is not ours: no cluster, no secrets key."""
    templates = assembly("eks-existing").templates.values()
    assert not [r for t in templates for r in _of_type(t, "AWS::EKS::Cluster").values()]
    assert not [r for t in templates for r in _of_type(t, "AWS::KMS::Key").values()
                if "EKS" in str(r.get("Properties", {}).get("Description"))]  # fmt: skip


def _eks_with_key(key: dict[str, Any]) -> Template:
    """An EKS cluster whose secrets key is `key`, a key resource `K` of the same template."""
    encryption = {"Provider": {"KeyArn": {"Fn::GetAtt": ["K", "Arn"]}}, "Resources": ["secrets"]}
    return {
        "EksCluster": {
            "Type": "AWS::EKS::Cluster",
            "Properties": {"EncryptionConfig": [encryption]},
        },
        "K": {"Type": "AWS::KMS::Key", **key},
    }


def _one(kind: str, **props: Any) -> Template:
    return {"R": {"Type": kind, "Properties": props}}


RETAINED = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}


@pytest.mark.parametrize(
    ("template", "key_arn", "expected"),
    [
        pytest.param(
            _one("AWS::EKS::Cluster"),
            None,
            "R: secrets are not envelope-encrypted",
            id="eks-without-encryption",
        ),
        pytest.param(
            _eks_with_key({"Properties": {"EnableKeyRotation": True}}),
            None,
            "K: the secrets key is not retained",
            id="eks-key-deleted-with-the-stack",
        ),
        pytest.param(
            _eks_with_key({"Properties": {}, **RETAINED}),
            None,
            "K: the secrets key does not rotate",
            id="eks-key-without-rotation",
        ),
        pytest.param(
            _eks_with_key({"Properties": {"EnableKeyRotation": True}, **RETAINED}),
            KEY,
            "is not the environment's",
            id="eks-own-key-where-one-is-given",
        ),
        pytest.param(
            _one("AWS::Logs::LogGroup"),
            KEY,
            "R: log group key None, expected " + KEY,
            id="log-group-without-the-given-key",
        ),
        pytest.param(
            _one("AWS::Logs::LogGroup", KmsKeyId=KEY),
            None,
            "expected CloudWatch Logs' default encryption",
            id="log-group-with-a-key-the-file-does-not-name",
        ),
        pytest.param(
            _one("AWS::Logs::LogGroup", LogGroupName="/aws/x"),
            None,
            "R: log group name '/aws/x' does not start with 'env-'",
            id="log-group-named-outside-the-environment",
        ),
        pytest.param(
            _one("AWS::S3::Bucket"),
            None,
            "R: no server access logs",
            id="bucket-without-access-logs",
        ),
        pytest.param(
            _one("AWS::S3::Bucket", LoggingConfiguration={"DestinationBucketName": {"Ref": "R"}}),
            None,
            "R: the bucket writes its access logs into itself",
            id="bucket-logging-into-itself",
        ),
        pytest.param(
            _one("AWS::S3::Bucket", LoggingConfiguration={"DestinationBucketName": "theirs"}),
            None,
            "R: no server access logs",
            id="bucket-logging-outside-the-template",
        ),
        pytest.param(
            _one("AWS::Lambda::Function"),
            None,
            "R: logs to /aws/lambda/<name>",
            id="function-with-lambdas-own-log-group",
        ),
    ],
)
def test_each_rule_catches_its_violation(
    template: dict[str, Any], key_arn: str | None, expected: str
) -> None:
    found = baseline_violations({"s": {"Resources": template}}, key_arn)
    assert len(found) == 1 and expected in found[0], found


# --- Lambda functions and docs/security.md ------------------------------------------------------

_CDK_HASH = re.compile(r"[0-9A-F]{8}$")
_SINGLETON_UUID = re.compile(r"[0-9A-F]{32}")


def function_key(logical_id: str) -> str:
    """A function's name in docs/security.md: its logical id without CDK's path hash and without
    the UUID of a CDK singleton (``CustomCDKBucketDeployment<uuid>512MiB<hash>`` ->
    ``CustomCDKBucketDeployment512MiB``). Stable while the logical id is (a new one would replace
    the function anyway)."""
    return _SINGLETON_UUID.sub("", _CDK_HASH.sub("", logical_id))


@dataclass(frozen=True)
class Row:
    keys: tuple[str, ...]
    concurrency: str
    dead_letter: str
    vpc: str


def lambda_rows() -> list[Row]:
    """The rows of the table under '## Lambda functions' in docs/security.md."""
    text = SECURITY_MD.read_text()
    section = text.split("\n## Lambda functions\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith("`"):
            continue
        keys = tuple(re.findall(r"`([^`]+)`", cells[0]))
        rows.append(Row(keys, cells[3], cells[4], cells[5]))
    return rows


def _functions(built: Assembly) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for stack, template in built.templates.items():
        for lid, fn in _of_type(template, "AWS::Lambda::Function").items():
            yield stack, lid, fn.get("Properties", {})


def _lead(cell: str) -> str:
    """A cell's verdict: its leading bold words (``**none**: because ...`` -> ``none``)."""
    m = re.match(r"\*\*([^*]+)\*\*", cell)
    return m[1].lower() if m else ""


def _disagreements(row: Row, props: dict[str, Any]) -> Iterator[str]:
    reserved = props.get("ReservedConcurrentExecutions")
    if _lead(row.concurrency) != ("none" if reserved is None else str(reserved)):
        yield f"reserved concurrency {reserved}, the row says {_lead(row.concurrency)!r}"
    dlq = "DeadLetterConfig" in props
    if (_lead(row.dead_letter) == "none") == dlq:
        said = _lead(row.dead_letter)
        yield f"dead-letter queue {'set' if dlq else 'none'}, the row says {said!r}"
    vpc = "in the vpc" if "VpcConfig" in props else "outside the vpc"
    if _lead(row.vpc) != vpc:
        yield f"{vpc}, the row says {_lead(row.vpc)!r}"


def test_every_lambda_function_has_a_row_that_says_what_it_does(
    assembly: Callable[[str], Assembly],
) -> None:
    """Every function of every example (ours and CDK's) has a row in docs/security.md, and the
    row's concurrency, dead-letter and VPC cells agree with the template."""
    rows = {key: row for row in lambda_rows() for key in row.keys}
    problems = []
    for case in CASES:
        for stack, lid, props in _functions(assembly(case)):
            key = function_key(lid)
            row = rows.get(key)
            if row is None:
                problems.append(f"{case}: {stack} {lid}: no row for `{key}` in docs/security.md")
                continue
            problems += [f"{case}: {stack} {lid}: {d}" for d in _disagreements(row, props)]
    assert problems == []


def test_every_row_names_a_function_that_exists(assembly: Callable[[str], Assembly]) -> None:
    """No stale rows: each key in the table is a function of some example or variant."""
    seen = {function_key(lid) for case in CASES for _, lid, _ in _functions(assembly(case))}
    named = {key for row in lambda_rows() for key in row.keys}
    assert named - seen == set()


@pytest.mark.parametrize(
    ("logical_id", "key"),
    [
        ("CustomCDKBucketDeployment8693BB64968944B69AAFB0CC9EB8756C512MiB6723FB92",
         "CustomCDKBucketDeployment512MiB"),
        ("EksClusterKubectlProviderHandlerDA75FB7A", "EksClusterKubectlProviderHandler"),
        ("PartitionsProviderframeworkonEventA058C525", "PartitionsProviderframeworkonEvent"),
        ("PinnedFunction", "PinnedFunction"),
    ],
)  # fmt: skip
def test_function_keys_drop_cdk_hashes(logical_id: str, key: str) -> None:
    assert function_key(logical_id) == key


def test_the_security_doc_is_linked_from_the_readme() -> None:
    assert "(docs/security.md)" in (REPO / "README.md").read_text()
    assert Path(SECURITY_MD).is_file()
