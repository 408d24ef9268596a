"""Studio's lifecycle configuration script, rendered without CDK.

`constructs/studio.py` puts the result in each `AWS::SageMaker::StudioLifecycleConfig`, and
`validate` measures the same text the way the API counts it (base64), so both read one function
and `validate` need not load aws-cdk-lib.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from hyperpod_kit.config.derived import FSX_MOUNT
from hyperpod_kit.config.kubectl import kubectl_version
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.naming import (
    slurm_client_parameter,
    slurm_token_prefix,
    studio_package_parameter,
)
from hyperpod_kit.paths import ASSETS
from hyperpod_kit.templating import shell_word

STUDIO_SCRIPTS = ASSETS / "studio"
CLIENT_SCRIPT = STUDIO_SCRIPTS / "client.sh"
LCC_MAX = 16384  # StudioLifecycleConfigContent: base64, at most 16384 characters (botocore)
SECTION = re.compile(r"^# (>>>|<<<) (slurm|eks)$")  # per-orchestrator parts of client.sh
STUDIO_MOUNT = "/mnt/custom-file-systems/fsx_lustre"
# A CloudFormation token as CDK writes it into a string before synth resolves it.
_PLAIN = re.compile(r"[A-Za-z0-9_.,:/@%+=-]*")
_TOKEN = re.compile(r"\$\{Token\[[^\]]+\]\}")


@dataclass(frozen=True)
class StudioEks:
    """The EKS cluster HyperPod orchestrates through, for kubectl from Studio.

    ``security_group_id``: the EKS cluster security group (on the control plane's interfaces);
    Studio's apps get HTTPS to it. None: the caller opens it.
    """

    cluster_name: str
    cluster_arn: str
    security_group_id: str | None = None


@dataclass(frozen=True)
class LifecycleSettings:
    """The values `assets/studio/client.sh` reads, prepended to it as shell assignments."""

    environment: str
    region: str
    orchestrator: str
    file_system_id: str
    studio_mount: str
    node_mount: str
    partitions: str
    shared_path: str
    client_parameter: str
    token_parameter_prefix: str
    eks_cluster: str
    kubectl_version: str
    namespace: str
    # The SSM parameter that holds the s3:// URL of the Studio stack's package asset (the
    # toolkit's wheel and the environment file, `hyperpod_kit.studio_package`): a constant name,
    # so the configuration's content does not move with the toolkit.
    package_parameter: str

    def assignments(self) -> str:
        pairs = {
            "HYPERPOD_KIT_ENVIRONMENT": self.environment,
            "HYPERPOD_KIT_REGION": self.region,
            "HYPERPOD_KIT_ORCHESTRATOR": self.orchestrator,
            "HYPERPOD_KIT_FILE_SYSTEM_ID": self.file_system_id,
            "HYPERPOD_KIT_STUDIO_MOUNT": self.studio_mount,
            "HYPERPOD_KIT_NODE_MOUNT": self.node_mount,
            "HYPERPOD_KIT_PARTITIONS": self.partitions,
            "HYPERPOD_KIT_SHARED_PATH": self.shared_path,
            "HYPERPOD_KIT_CLIENT_PARAMETER": self.client_parameter,
            "HYPERPOD_KIT_TOKEN_PREFIX": self.token_parameter_prefix,
            "HYPERPOD_KIT_EKS_CLUSTER": self.eks_cluster,
            "HYPERPOD_KIT_KUBECTL_VERSION": self.kubectl_version,
            "HYPERPOD_KIT_NAMESPACE": self.namespace,
            "HYPERPOD_KIT_PACKAGE_PARAMETER": self.package_parameter,
        }
        # `K=${K:-word}`: the word is one shell word from the templates' own filter (a test's
        # environment may set K first). Unquoted on purpose: in "${K:-'v'}" bash keeps the quotes.
        return "".join(f"{key}=${{{key}:-{_word(value)}}}\n" for key, value in pairs.items())


def _word(value: str) -> str:
    """A settings value as one shell word. A CloudFormation token (the file system's id, the EKS
    cluster's name) is single-quoted as it is, so that CDK still finds it; what replaces it at
    deploy is an AWS id or name, which holds no quote. A plain word is single-quoted too, so that
    `validate`, which renders a placeholder where synth has a token, measures the same length."""
    if _TOKEN.search(value) or _PLAIN.fullmatch(value):
        return f"'{value}'"
    return shell_word(value)


def lifecycle_settings(
    config: EnvironmentConfig, *, file_system_id: str, eks: StudioEks | None
) -> LifecycleSettings:
    return LifecycleSettings(
        environment=config.name,
        region=config.region,
        orchestrator=config.orchestrator,
        file_system_id=file_system_id,
        studio_mount=STUDIO_MOUNT,
        node_mount=FSX_MOUNT,
        partitions=config.studio.partitions,
        shared_path=config.studio.shared_path,
        client_parameter=slurm_client_parameter(config.name),
        token_parameter_prefix=slurm_token_prefix(config.name),
        eks_cluster=eks.cluster_name if eks is not None else "",
        kubectl_version=(kubectl_version(config.cluster.eks.kubernetes_version) or "")
        if eks is not None
        else "",
        namespace=config.trainer.job.namespace,
        package_parameter=studio_package_parameter(config.name),
    )


def render_lifecycle_script(settings: LifecycleSettings) -> str:
    """The lifecycle configuration: the script's shebang, the settings, then the script with only
    this orchestrator's sections (between ``# >>> slurm`` / ``# <<< slurm`` or the eks markers)
    and without its comment lines, which Studio's size limit has no room for
    (`lifecycle_config_length`). Kept: shellcheck directives and lines that name hyperpod-kit
    (the markers the script looks for in files it wrote)."""
    shebang, _, body = CLIENT_SCRIPT.read_text().partition("\n")
    kept: list[str] = []
    section: str | None = None
    for line in body.splitlines():
        marker = SECTION.match(line.strip())
        if marker is not None:
            opening, name = marker.group(1) == ">>>", marker.group(2)
            if opening == (section is not None) or (not opening and name != section):
                raise ValueError(f"{CLIENT_SCRIPT.name}: unbalanced section marker {line!r}")
            section = name if opening else None
            continue
        if section not in (None, settings.orchestrator):
            continue
        if not line.lstrip().startswith("#") or "shellcheck" in line or "hyperpod-kit" in line:
            kept.append(line)
    if section is not None:
        raise ValueError(f"{CLIENT_SCRIPT.name}: section {section} is not closed")
    header = "# hyperpod-kit Studio lifecycle configuration: settings, then assets/studio/client.sh"
    return "\n".join([shebang, header, settings.assignments().rstrip("\n"), *kept]) + "\n"


def lifecycle_config_length(content: str) -> int:
    """The length the API checks against `LCC_MAX`: StudioLifecycleConfigContent is the script
    base64-encoded (CloudFormation's ``Fn::Base64`` of the resolved text)."""
    return len(base64.b64encode(content.encode("utf-8")))
