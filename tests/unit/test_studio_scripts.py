"""Studio's shell scripts, run for real in a sandbox root: the lifecycle configuration
(assets/studio/client.sh, as hyperpod-kit renders it) and the controller's token issuer
(lifecycle/studio/slurm_jwt.sh). Stubs stand in only for what touches the machine or AWS:
systemctl, scontrol, the aws CLI, the boto3 helper, micromamba and the cluster's Slurm commands.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from hyperpod_kit import studio_lifecycle
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.studio import (
    CLIENT_SCRIPT,
    LCC_MAX,
    LifecycleSettings,
    StudioEks,
    lifecycle_config_length,
    lifecycle_settings,
    render_lifecycle_script,
)
from hyperpod_kit.stacks.eks import eks_cluster_name
from hyperpod_kit.studio_package import INSTALL_SCRIPT, write_studio_package
from tests.conftest import REPO

ISSUER = REPO / "lifecycle" / "studio" / "slurm_jwt.sh"
HOME = "/home/sagemaker-user"
FS = "fs-0123456789abcdef0"
needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None and os.environ.get("CI") != "true",
    reason="shellcheck not installed (.ci/run installs it)",
)


def settings(orchestrator: str = "slurm", partitions: str = "per_user") -> LifecycleSettings:
    return LifecycleSettings(
        environment="research",
        region="us-west-2",
        orchestrator=orchestrator,
        file_system_id=FS,
        studio_mount="/mnt/custom-file-systems/fsx_lustre",
        node_mount="/fsx",
        partitions=partitions,
        shared_path="/shared",
        client_parameter="/hyperpod-kit/research/slurm-client",
        token_parameter_prefix="/hyperpod-kit/research/slurm-jwt",
        eks_cluster="research-eks" if orchestrator == "eks" else "",
        kubectl_version="1.33.4" if orchestrator == "eks" else "",
        namespace="training",
        package_parameter="/hyperpod-kit/research/studio-package",
    )


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


# --- static checks --------------------------------------------------------------------------------


@needs_shellcheck
@pytest.mark.parametrize("orchestrator", ["slurm", "eks"])
def test_rendered_lifecycle_configuration_is_shellcheck_clean_and_fits(
    orchestrator: str, tmp_path: Path
) -> None:
    rendered = tmp_path / "lcc.sh"
    rendered.write_text(render_lifecycle_script(settings(orchestrator)))
    for script in (CLIENT_SCRIPT, rendered, ISSUER, INSTALL_SCRIPT):
        result = subprocess.run(
            ["shellcheck", "-x", str(script)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout
    assert len(base64.b64encode(rendered.read_bytes())) <= LCC_MAX


# What the API counts: StudioLifecycleConfigContent, base64, at most LCC_MAX characters. The
# configurations must stay well under it (Seen in issue 14: 15,004 of 16,384), so that a few more
# lines of client.sh never turn into a failed Studio deploy.
LCC_BUDGET = LCC_MAX * 3 // 4
STUDIO_EXAMPLES = [
    e for e in sorted((REPO / "environments").glob("*.yaml"))
    if load_environment(e).config.studio.enabled
]  # fmt: skip
LONGEST_FILE_SYSTEM_ID = "fs-" + "f" * 17  # FSx ids: fs- and 8 or 17 hex digits


def example_configurations(config: EnvironmentConfig) -> dict[str, str]:
    """Each app's lifecycle configuration as the API receives it: CloudFormation resolves the
    file system id (a new one: the longest id FSx gives) and the EKS cluster's name."""
    existing = config.storage.lustre.existing
    file_system_id = existing.file_system_id if existing is not None else LONGEST_FILE_SYSTEM_ID
    eks = None
    if config.orchestrator == "eks":
        name = eks_cluster_name(config)
        eks = StudioEks(cluster_name=name, cluster_arn=f"arn:aws:eks:{config.region}:1:cluster/x")
    settings = lifecycle_settings(config, file_system_id=file_system_id, eks=eks)
    return {app: render_lifecycle_script(settings) for app in config.studio.apps}


def test_every_orchestrator_has_a_studio_example() -> None:
    orchestrators = {load_environment(e).config.orchestrator for e in STUDIO_EXAMPLES}
    assert orchestrators == {"slurm", "eks"}


@pytest.mark.parametrize("example", STUDIO_EXAMPLES, ids=[e.name for e in STUDIO_EXAMPLES])
def test_example_lifecycle_configurations_are_well_under_the_api_limit(example: Path) -> None:
    config = load_environment(example).config
    for app, content in example_configurations(config).items():
        length = lifecycle_config_length(content)
        assert length == len(base64.b64encode(content.encode()))
        assert length <= LCC_BUDGET, (
            f"{example.name} {app}: {length} base64 characters, "
            f"{100 * length // LCC_MAX}% of the {LCC_MAX} the API takes (budget {LCC_BUDGET})"
        )


@pytest.mark.parametrize("orchestrator", ["slurm", "eks"])
def test_longest_settings_still_fit(orchestrator: str) -> None:
    """Every setting at its longest (names of 63, a shared path of 256, an EKS name of 100)."""
    longest = LifecycleSettings(
        environment="e" * 63,
        region="ap-southeast-5",
        orchestrator=orchestrator,
        file_system_id=LONGEST_FILE_SYSTEM_ID,
        studio_mount="/mnt/custom-file-systems/fsx_lustre",
        node_mount="/fsx",
        partitions="shared",
        shared_path="/" + "s" * 255,
        client_parameter=f"/hyperpod-kit/{'e' * 63}/slurm-client",
        token_parameter_prefix=f"/hyperpod-kit/{'e' * 63}/slurm-jwt",
        eks_cluster="c" * 100 if orchestrator == "eks" else "",
        kubectl_version="1.33.4" if orchestrator == "eks" else "",
        namespace="n" * 63,
        package_parameter=f"/hyperpod-kit/{'e' * 63}/studio-package",
    )
    assert lifecycle_config_length(render_lifecycle_script(longest)) <= LCC_BUDGET


def test_each_configuration_has_only_its_orchestrator_s_part() -> None:
    slurm = render_lifecycle_script(settings("slurm"))
    eks = render_lifecycle_script(settings("eks"))
    assert "write_slurm_wrapper() {" in slurm and "install_eks() {" not in slurm
    assert "install_eks() {" in eks and "write_slurm_wrapper() {" not in eks
    assert "eks-token" not in slurm and '"owner"' not in eks
    assert '"param"' in slurm and '"param"' in eks  # the package's parameter, on both
    assert ">>>" not in slurm + eks and "<<<" not in slurm + eks


def test_unbalanced_section_markers_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    for body in ("# >>> slurm\necho\n", "# <<< slurm\n", "# >>> slurm\n# >>> eks\n"):
        script = tmp_path / "client.sh"
        script.write_text("#!/bin/bash\n" + body)
        monkeypatch.setattr(studio_lifecycle, "CLIENT_SCRIPT", script)
        with pytest.raises(ValueError, match="section"):
            render_lifecycle_script(settings("slurm"))


def test_scripts_are_strict_and_take_a_sandbox_root() -> None:
    for script in (CLIENT_SCRIPT, ISSUER):
        text = script.read_text()
        assert "set -euo pipefail" in text
        assert 'ROOT="${HYPERPOD_KIT_ROOT:-}"' in text
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code if "munge" in line]  # no key is copied, none is used


# --- the lifecycle configuration, Slurm -----------------------------------------------------------


class Space:
    """A Studio space in a sandbox root: the user's home, the FSx mount, and AWS behind a stub."""

    def __init__(self, tmp: Path, orchestrator: str = "slurm", partitions: str = "per_user"):
        self.root = tmp / "root"
        self.home = self.root / HOME.lstrip("/")
        self.home.mkdir(parents=True)
        self.mount = tmp / "mnt"
        (self.mount / FS / "project").mkdir(parents=True)
        self.calls = tmp / "aws-calls.log"
        self.store = tmp / "aws"
        (self.store / "params").mkdir(parents=True)
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.script = tmp / "lcc.sh"
        self.script.write_text(render_lifecycle_script(settings(orchestrator, partitions)))
        # The boto3 helper's stand-in: parameters and objects from files, every call logged.
        self.helper = executable(
            tmp / "aws-helper",
            f"""#!/bin/bash
set -euo pipefail
echo "$*" >>{self.calls}
case "$1" in
  param) cat "{self.store}/params/$(echo "$2" | tr / _)" ;;
  s3get) cp "{self.store}/objects/$(basename "$2")" "$3" ;;
  owner) echo alice ;;
  eks) echo https://ABC.gr7.us-west-2.eks.amazonaws.com; echo Q0EtREFUQQ== ;;
esac
""",
        )

    def param(self, name: str, value: str) -> None:
        (self.store / "params" / name.replace("/", "_")).write_text(value)

    def bundle(self, version: str = "24.11.5") -> str:
        """The controller's client bundle: commands that print what they were run with."""
        src = self.store / "bundle"
        for command in ("sinfo", "sbatch"):
            executable(
                src / "bin" / command,
                '#!/bin/bash\necho "$(basename "$0") $* | jwt=${SLURM_JWT} conf=${SLURM_CONF}"\n',
            )
        (src / "lib" / "slurm").mkdir(parents=True)
        (src / "lib" / "slurm" / "auth_jwt.so").write_text("plugin")
        (self.store / "objects").mkdir(exist_ok=True)
        archive = self.store / "objects" / f"{version}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(src, arcname=".")
        digest = subprocess.run(
            ["sha256sum", str(archive)], capture_output=True, text=True, check=True
        ).stdout.split()[0]
        client = {"version": version, "bundle": f"s3://data-bucket/x/{version}.tar.gz",
                  "sha256": digest, "cluster": "research", "host": "ip-10-0-130-5",
                  "address": "10.0.130.5", "port": "6817"}  # fmt: skip
        self.param("/hyperpod-kit/research/slurm-client", json.dumps(client))
        return digest

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": HOME,
            "HYPERPOD_KIT_ROOT": str(self.root),
            "HYPERPOD_KIT_FOREGROUND": "1",
            "HYPERPOD_KIT_AWS_HELPER": str(self.helper),
            "HYPERPOD_KIT_STUDIO_MOUNT": str(self.mount),
        }

    def start(self) -> subprocess.CompletedProcess[str]:
        """An app start: Studio runs the lifecycle configuration."""
        return subprocess.run(
            ["bash", str(self.script)],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def run(self, command: str, *args: str, cwd: Path | None = None) -> str:
        """The user types a command in the space's terminal."""
        result = subprocess.run(
            [str(self.home / ".local" / "bin" / command), *args],
            env=self.env() | {"HOME": str(self.home)},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    @property
    def log(self) -> str:
        return (self.home / ".hyperpod-kit" / "lifecycle.log").read_text()


def test_slurm_space_becomes_a_client_with_the_users_own_token(tmp_path: Path) -> None:
    space = Space(tmp_path)
    space.bundle()
    space.param("/hyperpod-kit/research/slurm-jwt/alice", "jwt-of-alice")
    started = space.start()
    assert started.returncode == 0, started.stderr
    state = space.home / ".hyperpod-kit"
    conf = (state / "slurm" / "current" / "etc" / "slurm.conf").read_text()
    assert "SlurmctldHost=ip-10-0-130-5(10.0.130.5)" in conf
    assert "AuthType=auth/jwt" in conf and "ClusterName=research" in conf
    assert (space.home / "fsx").resolve() == (space.mount / FS).resolve()
    assert "hyperpod-kit PATH" in (space.home / ".bashrc").read_text()
    out = space.run("sinfo", "-N")
    assert out.startswith("sinfo -N | jwt=jwt-of-alice conf=")
    # sbatch from ~/fsx/project starts the job in the same folder on the nodes.
    out = space.run("sbatch", "job.sh", cwd=space.home / "fsx" / "project")
    assert out.startswith("sbatch --chdir=/fsx/alice/project job.sh | jwt=jwt-of-alice")
    assert space.run("sbatch", "-D", "/tmp", "job.sh").startswith("sbatch -D /tmp job.sh |")
    assert "Slurm 24.11.5 client ready: controller ip-10-0-130-5" in space.log


def test_slurm_lifecycle_is_idempotent_and_downloads_once(tmp_path: Path) -> None:
    space = Space(tmp_path)
    space.bundle()
    for _ in range(2):
        assert space.start().returncode == 0
    calls = space.calls.read_text().splitlines()
    assert sum(c.startswith("s3get") for c in calls) == 1
    assert (space.home / ".bashrc").read_text().count("hyperpod-kit PATH") == 1


def test_shared_partition_jobs_start_under_the_shared_path(tmp_path: Path) -> None:
    space = Space(tmp_path, partitions="shared")
    space.bundle()
    space.param("/hyperpod-kit/research/slurm-jwt/alice", "jwt-of-alice")
    assert space.start().returncode == 0
    out = space.run("sbatch", "job.sh", cwd=space.home / "fsx" / "project")
    assert out.startswith("sbatch --chdir=/fsx/shared/project job.sh")


def test_a_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    space = Space(tmp_path)
    space.bundle()
    assert space.start().returncode == 0
    result = subprocess.run(
        [str(space.home / ".local/bin/sinfo")],
        env=space.env() | {"HOME": str(space.home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 77
    assert "cannot read your Slurm token /hyperpod-kit/research/slurm-jwt/alice" in result.stderr


def test_without_the_controllers_settings_the_log_says_what_to_run(tmp_path: Path) -> None:
    space = Space(tmp_path)
    assert space.start().returncode != 0  # in the foreground (tests) the failure shows
    assert "has the controller run lifecycle/studio/slurm_jwt.sh?" in space.log


# --- the lifecycle configuration, EKS -------------------------------------------------------------


def test_eks_space_gets_pinned_kubectl_and_a_context(tmp_path: Path) -> None:
    space = Space(tmp_path, orchestrator="eks")
    executable(
        space.bin / "micromamba",
        '#!/bin/bash\nprefix="$5"; echo "$*" >>"${MAMBA_LOG}"\nmkdir -p "${prefix}/bin"\n'
        'printf "#!/bin/bash\\necho kubectl\\n" >"${prefix}/bin/kubectl"\n'
        'chmod +x "${prefix}/bin/kubectl"\n',
    )
    env = space.env() | {"MAMBA_LOG": str(tmp_path / "mamba.log")}
    for _ in range(2):
        result = subprocess.run(["bash", str(space.script)], env=env, capture_output=True,
                                text=True, timeout=60, check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr
    installs = (tmp_path / "mamba.log").read_text().splitlines()
    assert len(installs) == 1  # the second start finds it installed
    assert "--channel conda-forge kubernetes-client=1.33.4" in installs[0]
    kubeconfig = (space.home / ".kube" / "config").read_text()
    assert 'server: "https://ABC.gr7.us-west-2.eks.amazonaws.com"' in kubeconfig
    assert "current-context: research-eks" in kubeconfig
    assert "namespace: training" in kubeconfig
    assert (space.home / ".local/bin/kubectl").is_symlink()


def test_eks_keeps_a_kubeconfig_the_user_wrote(tmp_path: Path) -> None:
    space = Space(tmp_path, orchestrator="eks")
    executable(
        space.bin / "micromamba",
        '#!/bin/bash\nmkdir -p "$5/bin"; touch "$5/bin/kubectl"; chmod +x "$5/bin/kubectl"\n',
    )
    (space.home / ".kube").mkdir()
    (space.home / ".kube" / "config").write_text("apiVersion: v1\n# mine\n")
    assert space.start().returncode == 0
    assert (space.home / ".kube" / "config").read_text() == "apiVersion: v1\n# mine\n"
    assert (
        "current-context: research-eks"
        in (space.home / ".kube" / "hyperpod-research.yaml").read_text()
    )


# --- the controller's issuer ----------------------------------------------------------------------

SHOW_CONFIG = """Configuration data as of 2026-11-23T09:00:00
ClusterName             = research
SLURM_CONF              = /opt/slurm/etc/slurm.conf
SLURM_VERSION           = 24.11.5
SlurmctldHost[0]        = ip-10-0-130-5(10.0.130.5)
SlurmctldPort           = 6817
StateSaveLocation       = /var/spool/slurmctld
"""


class Controller:
    """A HyperPod controller in a sandbox root, with Slurm and AWS behind stubs."""

    def __init__(self, tmp: Path, active: bool = True) -> None:
        self.root = tmp / "root"
        (self.root / "var/spool/slurmctld").mkdir(parents=True)
        self.conf = self.root / "opt/slurm/etc/slurm.conf"
        self.conf.parent.mkdir(parents=True)
        self.conf.write_text("ClusterName=research\nAuthType=auth/munge\n")
        self.users = self.root / "opt/hyperpod-kit/users.json"
        self.users.parent.mkdir(parents=True)
        self.write_users(["alice", "bob"], ["carol"])
        self.calls = tmp / "calls.log"
        self.bin = tmp / "bin"
        stub = f'#!/bin/bash\necho "$(basename "$0") $*" >>{self.calls}\n'
        self.active = tmp / "slurmctld-active"  # exists: slurmctld is active
        if active:
            self.active.touch()
        executable(
            self.bin / "systemctl",
            stub + f'[[ "$1" != is-active ]] || [[ -e {self.active} ]] || exit 3\n',
        )
        executable(self.bin / "sleep", "#!/bin/bash\n")  # backoff without the wait
        executable(self.bin / "scontrol", stub + f"""case "$1" in
  show) cat <<'EOF'
{SHOW_CONFIG}EOF
  ;;
  token) echo "SLURM_JWT=token-for-${{2#username=}}" ;;
esac
""")  # fmt: skip
        # Knobs, as files: delete-fails (every delete fails), delete-gone (ParameterNotFound).
        executable(
            self.bin / "aws",
            stub
            + f"""if [[ "$2" == delete-parameter ]]; then
  [[ ! -e {tmp}/delete-fails ]] || {{ echo "Could not connect" >&2; exit 255; }}
  [[ ! -e {tmp}/delete-gone ]] || {{ echo "(ParameterNotFound) when calling" >&2; exit 254; }}
fi
""",
        )
        slurm = tmp / "slurm"
        for command in ("sinfo", "sbatch", "squeue", "scancel", "scontrol"):
            executable(slurm / "bin" / command, "#!/bin/bash\n")
        (slurm / "lib" / "slurm").mkdir(parents=True)
        (slurm / "lib" / "slurm" / "auth_jwt.so").write_text("plugin")
        self.path = f"{self.bin}:{slurm / 'bin'}:{os.environ['PATH']}"

    def write_users(self, studio: list[str], others: list[str]) -> None:
        users = [{"name": n, "uid": 10001 + i} for i, n in enumerate(studio)]
        users += [{"name": n, "uid": 20001, "studio": False} for n in others]
        self.users.write_text(json.dumps(users))

    def key(self) -> bytes:
        return (self.root / "var/spool/slurmctld/jwt_hs256.key").read_bytes()

    def run(self, **env: str) -> subprocess.CompletedProcess[str]:
        self.calls.write_text("")
        return subprocess.run(
            ["bash", str(ISSUER)],
            check=False,
            env={
                "PATH": self.path,
                "HOME": str(self.root),
                "HYPERPOD_KIT_ROOT": str(self.root),
                "HYPERPOD_KIT_ENVIRONMENT": "research",
                "HYPERPOD_KIT_REGION": "us-west-2",
                "HYPERPOD_KIT_BUCKET": "data-bucket",
                "HYPERPOD_KIT_USERS_FILE": "/opt/hyperpod-kit/users.json",
                "HYPERPOD_KIT_SLURM_USER": subprocess.run(
                    ["id", "-un"], capture_output=True, text=True, check=True
                ).stdout.strip(),
            }
            | env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def called(self, prefix: str) -> list[str]:
        return [c for c in self.calls.read_text().splitlines() if c.startswith(prefix)]


def test_issuer_enables_jwt_issues_tokens_and_publishes_the_client(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    result = node.run()
    assert result.returncode == 0, result.stderr
    conf = node.conf.read_text()
    assert "AuthAltTypes=auth/jwt\n" in conf
    assert "AuthAltParameters=jwt_key=/var/spool/slurmctld/jwt_hs256.key\n" in conf
    key = node.root / "var/spool/slurmctld/jwt_hs256.key"
    assert key.stat().st_size == 32 and stat.S_IMODE(key.stat().st_mode) == 0o400
    assert node.called("systemctl restart") == ["systemctl restart slurmctld"]
    puts = node.called("aws ssm put-parameter")
    tokens = [c for c in puts if "/slurm-jwt/" in c]
    assert len(tokens) == 2  # alice and bob; carol has no Studio profile
    assert (
        "--name /hyperpod-kit/research/slurm-jwt/alice --type SecureString --overwrite "
        "--value token-for-alice" in tokens[0]
    )
    client = next(c for c in puts if "/slurm-client " in c)
    settings = json.loads(client.split("--value ", 1)[1])
    assert settings["version"] == "24.11.5"
    assert (settings["host"], settings["address"], settings["port"]) == (
        "ip-10-0-130-5", "10.0.130.5", "6817"
    )  # fmt: skip
    assert settings["bundle"].startswith("s3://data-bucket/hyperpod-kit/slurm-client/24.11.5-")
    assert len(node.called("aws s3 cp")) == 1
    bundle = next((node.root / "var/lib/hyperpod-kit/studio").glob("slurm-client-*.tar.gz"))
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert "./bin/sinfo" in names and "./lib/slurm/auth_jwt.so" in names
    timer = (node.root / "etc/systemd/system/hyperpod-kit-studio-jwt.timer").read_text()
    assert "OnUnitActiveSec=10min" in timer


def test_issuer_run_again_changes_nothing(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    again = node.run(INVOCATION_ID="from-the-timer")
    assert again.returncode == 0, again.stderr
    assert node.called("systemctl restart") == []
    assert node.called("aws") == []  # tokens are fresh, the client is unchanged
    assert node.conf.read_text().count("auth/jwt") == 1


def test_issuer_keeps_other_alt_auth_types_and_drops_removed_users(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    node.conf.write_text("AuthType=auth/munge\nAuthAltTypes=auth/other\n")
    assert node.run().returncode == 0
    assert "AuthAltTypes=auth/other,auth/jwt\n" in node.conf.read_text()
    node.write_users(["alice"], [])
    assert node.run().returncode == 0
    assert node.called("aws ssm delete-parameter") == [
        "aws ssm delete-parameter --name /hyperpod-kit/research/slurm-jwt/bob"
    ]


def test_issuer_does_nothing_off_the_controller(tmp_path: Path) -> None:
    node = Controller(tmp_path, active=False)
    result = node.run()
    assert result.returncode == 0
    assert "not the Slurm controller" in result.stderr
    assert node.conf.read_text() == "ClusterName=research\nAuthType=auth/munge\n"
    assert node.called("aws") == [] and node.called("scontrol") == []


def test_issuer_reads_the_users_file_the_user_sync_keeps(tmp_path: Path) -> None:
    """The lifecycle hook points the issuer at /var/lib/hyperpod-kit/users.json: the sync's
    {"users": [...]} document, where "studio" says who has a profile."""
    node = Controller(tmp_path)
    node.users.write_text(json.dumps({"version": 1, "users": [
        {"name": "alice", "uid": 10001, "gid": 1001, "admin": False, "studio": True},
        {"name": "carol", "uid": 10003, "gid": 1001, "admin": True, "studio": False},
    ]}))  # fmt: skip
    result = node.run()
    assert result.returncode == 0, result.stderr
    tokens = [c for c in node.called("aws ssm put-parameter") if "/slurm-jwt/" in c]
    assert len(tokens) == 1 and "/slurm-jwt/alice " in tokens[0]


def test_issuer_without_a_users_file_yet_issues_and_revokes_nothing(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0  # alice and bob get tokens
    node.users.unlink()  # as on a controller whose user sync could not fetch the file yet
    stamps = node.root / "var/lib/hyperpod-kit/studio/issued"
    for stamp in stamps.iterdir():
        stamp.write_text("0")  # due for renewal
    result = node.run()
    assert result.returncode == 0, result.stderr
    assert "no users file /opt/hyperpod-kit/users.json yet" in result.stderr
    assert node.called("aws ssm delete-parameter") == []
    assert [c for c in node.called("aws ssm put-parameter") if "/slurm-jwt/" in c] == []


def test_issuer_with_a_broken_users_file_revokes_nothing(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    node.users.write_text("{not json")
    result = node.run()
    assert result.returncode != 0
    assert node.called("aws ssm delete-parameter") == []


def test_issuer_tokens_live_an_hour_and_are_renewed_at_half(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    tokens = node.called("scontrol token")
    assert tokens == [
        "scontrol token username=alice lifespan=3600",
        "scontrol token username=bob lifespan=3600",
    ]
    stamps = node.root / "var/lib/hyperpod-kit/studio/issued"
    (stamps / "alice").write_text(str(int((stamps / "alice").read_text()) - 1801))
    assert node.run(INVOCATION_ID="timer").returncode == 0
    assert node.called("scontrol token") == ["scontrol token username=alice lifespan=3600"]


def test_issuer_on_a_controller_before_slurmctld_is_up_installs_its_timer(tmp_path: Path) -> None:
    """First provisioning: the hook says this is the controller, slurmctld is not active yet. The
    timer is installed all the same, and its first run with slurmctld up issues the tokens."""
    node = Controller(tmp_path, active=False)
    result = node.run(HYPERPOD_KIT_CONTROLLER="1")
    assert result.returncode == 0, result.stderr
    assert "slurmctld is not active yet" in result.stderr
    units = node.root / "etc/systemd/system"
    assert (units / "hyperpod-kit-studio-jwt.timer").is_file()
    env = (node.root / "etc/hyperpod-kit/studio-slurm-jwt.env").read_text()
    assert "HYPERPOD_KIT_CONTROLLER=1\n" in env  # the timer's runs know it too
    assert node.called("systemctl enable") == [
        "systemctl enable --now hyperpod-kit-studio-jwt.timer"
    ]
    assert node.called("scontrol") == [] and node.called("aws") == []
    assert node.conf.read_text() == "ClusterName=research\nAuthType=auth/munge\n"

    node.active.touch()  # slurmctld is up; the timer runs the issuer with its environment file
    timer_env = dict(line.split("=", 1) for line in env.splitlines())
    result = node.run(INVOCATION_ID="timer", **timer_env)
    assert result.returncode == 0, result.stderr
    assert len([c for c in node.called("aws ssm put-parameter") if "/slurm-jwt/" in c]) == 2
    assert node.called("systemctl enable") == []  # the timer does not reinstall itself


def test_issuer_removing_a_user_deletes_the_parameter_and_voids_every_token(
    tmp_path: Path,
) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    first_key = node.key()
    node.write_users(["alice"], [])
    result = node.run(INVOCATION_ID="timer")
    assert result.returncode == 0, result.stderr
    assert node.called("aws ssm delete-parameter") == [
        "aws ssm delete-parameter --name /hyperpod-kit/research/slurm-jwt/bob"
    ]
    # slurmctld accepts whatever the key signed until it expires: a new key voids bob's token,
    # and alice's, which is reissued at once.
    assert node.key() != first_key and len(node.key()) == 32
    assert node.called("systemctl restart") == ["systemctl restart slurmctld"]
    assert node.called("scontrol token") == ["scontrol token username=alice lifespan=3600"]
    calls = node.calls.read_text().splitlines()
    delete = calls.index("aws ssm delete-parameter --name /hyperpod-kit/research/slurm-jwt/bob")
    assert delete < calls.index("systemctl restart slurmctld")  # the parameter goes first
    assert calls.index("scontrol ping") < calls.index("scontrol token username=alice lifespan=3600")
    # Nothing more to revoke: the next run neither deletes nor rotates.
    again = node.run(INVOCATION_ID="timer")
    assert again.returncode == 0, again.stderr
    assert node.called("aws") == [] and node.called("systemctl restart") == []


def test_issuer_retries_a_failed_delete_without_rotating_again(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    node.write_users(["alice"], [])
    (tmp_path / "delete-fails").touch()
    result = node.run(INVOCATION_ID="timer")
    assert result.returncode == 0, result.stderr
    assert "could not delete /hyperpod-kit/research/slurm-jwt/bob" in result.stderr
    assert len(node.called("aws ssm delete-parameter")) == 5  # with backoff
    assert node.called("systemctl restart") == ["systemctl restart slurmctld"]  # voided anyway
    (tmp_path / "delete-fails").unlink()
    again = node.run(INVOCATION_ID="timer")
    assert again.returncode == 0, again.stderr
    assert node.called("aws ssm delete-parameter") == [
        "aws ssm delete-parameter --name /hyperpod-kit/research/slurm-jwt/bob"
    ]
    assert node.called("systemctl restart") == []


def test_issuer_counts_a_parameter_already_gone_as_deleted(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    node.write_users(["alice"], [])
    (tmp_path / "delete-gone").touch()
    result = node.run(INVOCATION_ID="timer")
    assert result.returncode == 0, result.stderr
    assert len(node.called("aws ssm delete-parameter")) == 1
    assert "token parameter deleted" in result.stderr


def test_issuer_re_adding_a_user_issues_a_new_token(tmp_path: Path) -> None:
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    node.write_users(["alice"], [])
    (tmp_path / "delete-fails").touch()  # bob's parameter is still there, pending deletion
    assert node.run(INVOCATION_ID="timer").returncode == 0
    node.write_users(["alice", "bob"], [])
    result = node.run(INVOCATION_ID="timer")
    assert result.returncode == 0, result.stderr
    assert node.called("aws ssm delete-parameter") == []  # never deletes a listed user's token
    assert node.called("scontrol token") == ["scontrol token username=bob lifespan=3600"]


def test_issuer_a_deleted_key_is_replaced_with_a_restart_and_new_tokens(tmp_path: Path) -> None:
    """docs/studio.md: to void every token at once, delete the key and let the issuer run."""
    node = Controller(tmp_path)
    assert node.run().returncode == 0
    (node.root / "var/spool/slurmctld/jwt_hs256.key").unlink()
    result = node.run(INVOCATION_ID="timer")
    assert result.returncode == 0, result.stderr
    assert node.called("systemctl restart") == ["systemctl restart slurmctld"]
    assert len(node.called("scontrol token")) == 2


# --- the toolkit's package ------------------------------------------------------------------------


PACKAGE_PARAMETER = "/hyperpod-kit/research/studio-package"
TRAINER_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:abc"


def test_the_space_installs_the_toolkit_once_and_its_environment_file(tmp_path: Path) -> None:
    """The package asset's URL read from its parameter, the zip (write_studio_package's folder)
    downloaded and every file checked against SHA256SUMS, then the package's install.sh: the
    wheel installed with pip (a stub that records its arguments), environment.yaml and
    install.json side by side in ~/.hyperpod-kit, HYPERPOD_KIT_ENVIRONMENT_FILE in .bashrc. A
    second start downloads and installs nothing again; a package with a file that is not the one
    its sums name is refused, and the Slurm client still installs."""
    space = Space(tmp_path)
    space.bundle()
    config = load_environment(REPO / "environments/studio-slurm.yaml").config
    folder = write_studio_package(config, tmp_path / "package", trainer_image=TRAINER_IMAGE)
    shutil.make_archive(str(space.store / "objects" / "abc"), "zip", folder)
    space.param(PACKAGE_PARAMETER, "s3://cdk-assets/abc.zip")
    pip_log = tmp_path / "pip.log"
    real = shutil.which("python3")
    executable(
        space.bin / "python3",
        f"""#!/bin/bash
if [[ "$1 $2" == "-m pip" ]]; then echo "$*" >>{pip_log}; exit 0; fi
exec {real} "$@"
""",
    )
    for _ in range(2):
        started = space.start()
        assert started.returncode == 0, started.stderr
    assert "the toolkit was not installed" not in space.log
    assert "Slurm 24.11.5 client ready" in space.log
    state = space.home / ".hyperpod-kit"
    assert (state / "environment.yaml").read_text() == (
        folder / "environment" / "environment.yaml"
    ).read_text()
    assert json.loads((state / "install.json").read_text())["trainer_image"] == TRAINER_IMAGE
    installs = pip_log.read_text().splitlines()
    assert len(installs) == 1 and "--no-deps --user --no-index" in installs[0]
    assert installs[0].endswith("hyperpod_kit-0.1.0-py3-none-any.whl")
    calls = space.calls.read_text().splitlines()
    assert calls.count(f"param {PACKAGE_PARAMETER}") == 2  # read at each start
    assert sum(c.startswith("s3get s3://cdk-assets/abc.zip") for c in calls) == 1
    # A new login shell finds the environment file, with the install record beside it.
    read = '. ~/.bashrc; cat "$(dirname "$HYPERPOD_KIT_ENVIRONMENT_FILE")/install.json"'
    shell = subprocess.run(
        ["bash", "-c", read],
        env={"HOME": str(space.home), "PATH": os.environ["PATH"]},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert json.loads(shell.stdout)["trainer_image"] == TRAINER_IMAGE, shell.stderr
    assert (space.home / ".bashrc").read_text().count("# hyperpod-kit ENV") == 1

    # A new package whose install.sh is not the one its sums name: refused, nothing run.
    (folder / "install.sh").write_text("#!/bin/bash\necho tampered >&2\n")
    shutil.make_archive(str(space.store / "objects" / "bad"), "zip", folder)
    space.param(PACKAGE_PARAMETER, "s3://cdk-assets/bad.zip")
    started = space.start()
    assert started.returncode == 0, started.stderr  # the Slurm client still installs
    assert "the toolkit was not installed" in space.log and "tampered" not in space.log
    assert len(pip_log.read_text().splitlines()) == 1


def test_a_space_without_the_package_parameter_says_so_and_still_installs_its_client(
    tmp_path: Path,
) -> None:
    """No parameter yet (the Studio stack not deployed with a package): logged, nothing
    downloaded, and the cluster's client installs all the same."""
    space = Space(tmp_path)
    space.bundle()
    started = space.start()
    assert started.returncode == 0, started.stderr
    assert "the toolkit was not installed" in space.log
    assert "Slurm 24.11.5 client ready" in space.log
    assert not any(c.startswith("s3get s3://cdk-assets") for c in
                   space.calls.read_text().splitlines())  # fmt: skip
