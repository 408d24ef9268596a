"""The version lock (hyperpod_kit/lock.py): written when missing, a moved default refused with its
key named, `--update-lock` taking only what moved, the file winning, deployed values applied and
read back from AWS (Stubber), combinations known to break refused, a foreign file never
overwritten, and `plan` showing the lock's changes first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from hyperpod_kit import __version__
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.lock import (
    LOCK_FORMAT,
    LOCK_IN_ASSEMBLY,
    LockError,
    lock_changes,
    lock_environment,
    lock_path,
    read_lock,
)
from tests.conftest import REPO, WriteEnv, run_cli

STRATEGY = "cluster.slurm.config_strategy"
COMPUTE_AMI = "cluster.instance_groups[compute].image_release_version"  # a Slurm group's
WORKERS_AMI = "cluster.instance_groups[workers].image_release_version"  # eks.yaml's group
CHART = "charts.nvidia-device-plugin"  # a default of eks.yaml's lock


def _eks(tmp_path: Path, name: str = "eks.yaml", **workers: Any) -> Path:
    """A copy of environments/eks.yaml (its `workers` group with `workers` set), no lock yet."""
    import yaml

    data = yaml.safe_load((REPO / "environments" / "eks.yaml").read_text())
    (group,) = data["cluster"]["instance_groups"]
    group.update(workers)
    env = tmp_path / name
    env.write_text(yaml.safe_dump(data, sort_keys=False))
    return env


def _lock(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(lock_path(path).read_text())
    return data


def _edit_lock(env: Path, key: str, **row: Any) -> None:
    path = lock_path(env)
    data = json.loads(path.read_text())
    data["pins"][key] = {**data["pins"].get(key, {}), **row}
    path.write_text(json.dumps(data, indent=1) + "\n")


def test_lock_is_named_after_the_file_and_never_matches_yaml() -> None:
    assert lock_path("environments/team/dev.yaml") == Path("environments/team/dev.lock.json")
    assert not lock_path("environments/prod.yml").name.endswith((".yaml", ".yml"))


def test_every_example_has_its_lock_committed_and_current() -> None:
    """`hyperpod-kit lock` of each example changes nothing: the committed locks are current."""
    examples = [*REPO.glob("environments/*.yaml"), *REPO.glob("environments/team/[dp]*.yaml")]
    for example in examples:
        loaded = load_environment(example)
        if loaded.config is None:  # pragma: no cover - every example loads
            continue
        locked, resolution = lock_environment(loaded)
        assert not resolution.updated
        from hyperpod_kit.lock import render_lock

        assert lock_path(example).read_text() == render_lock(locked.config, resolution.pins), (
            f"{example}: run `hyperpod-kit lock {example.relative_to(REPO)}`"
        )


def test_lock_command_writes_a_missing_lock(write_env: WriteEnv, tmp_path: Path) -> None:
    env = write_env()
    result = run_cli("lock", str(env), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    pins = _lock(env)["pins"]
    assert pins[STRATEGY] == {
        "value": "Managed",
        "source": "default",
        "what": "Slurm's configuration strategy (none: HyperPod merges, continuous provisioning)",
    }
    assert COMPUTE_AMI not in pins  # a Slurm group takes no AMI release (EKS clusters only)
    assert not [key for key in pins if key.endswith(".image_release_version")]
    again = run_cli("lock", str(env), cwd=tmp_path)
    assert again.returncode == 0 and "unchanged" in again.stderr


def test_a_moved_default_is_refused_naming_the_key_and_nothing_is_written(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    env = write_env()
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, STRATEGY, value="Overwrite")  # as if an older hyperpod-kit's default
    before = lock_path(env).read_text()
    out = tmp_path / "cdk.out"
    result = run_cli("synth", str(env), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    line = before.splitlines().index(f'  "{STRATEGY}": {{') + 1
    assert first.startswith(f"{lock_path(env)}:{line} {STRATEGY}: locked at Overwrite"), first
    assert "Hint: synthesize with --update-lock" in first
    assert not out.exists() and lock_path(env).read_text() == before


def test_update_lock_takes_only_what_moved(write_env: WriteEnv, tmp_path: Path) -> None:
    env = write_env()
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, STRATEGY, value="Overwrite")
    loaded = load_environment(env)
    with pytest.raises(LockError):
        lock_environment(loaded)
    _, resolution = lock_environment(loaded, update=True)
    assert resolution.updated == [STRATEGY]
    assert resolution.pins[STRATEGY].value == "Managed"
    # an EKS group's deployed AMI release stays while a moved default is taken
    eks = _eks(tmp_path)
    assert run_cli("lock", str(eks), cwd=tmp_path).returncode == 0
    _edit_lock(eks, CHART, value="0.15.0")  # as if an older hyperpod-kit's default
    _edit_lock(eks, WORKERS_AMI, value="1.4.2", source="deployed")
    locked, resolution = lock_environment(load_environment(eks), update=True)
    assert resolution.updated == [CHART]
    assert resolution.pins[WORKERS_AMI].value == "1.4.2"  # a deployed pin stays
    (workers,) = locked.config.cluster.instance_groups
    assert workers.image_release_version == "1.4.2"


def test_the_file_wins_and_the_lock_follows(tmp_path: Path) -> None:
    env = _eks(tmp_path)
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, WORKERS_AMI, value="1.4.2", source="deployed")
    env = _eks(tmp_path, image_release_version="1.5.0")  # the same file, now pinning a release
    _, resolution = lock_environment(load_environment(env))
    assert resolution.pins[WORKERS_AMI].value == "1.5.0"
    assert resolution.pins[WORKERS_AMI].source == "file"


def test_a_deployed_pin_reaches_the_template(tmp_path: Path) -> None:
    """A value the lock carries is what synth deploys, and the assembly carries the lock."""
    env = _eks(tmp_path)
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, WORKERS_AMI, value="1.4.2", source="deployed")
    out = tmp_path / "cdk.out"
    result = run_cli("synth", str(env), "-o", str(out), "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    template = json.loads((out / "hyperpod-eks-cluster.template.json").read_text())
    (cluster,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"
    ]
    (workers,) = cluster["Properties"]["InstanceGroups"]
    assert workers["ImageReleaseVersion"] == "1.4.2"
    carried = json.loads((out / LOCK_IN_ASSEMBLY).read_text())
    assert carried["pins"][WORKERS_AMI] == _lock(env)["pins"][WORKERS_AMI]


@pytest.mark.parametrize("source", ["deployed", "file"])
def test_a_slurm_groups_locked_release_is_a_warning_and_is_dropped(
    write_env: WriteEnv, tmp_path: Path, source: str
) -> None:
    """A lock an older hyperpod-kit wrote (its `lock --from-deployed`, or a file's pin) may carry
    an AMI release for a Slurm group. AWS takes ImageReleaseVersion on EKS clusters only: it is
    not applied, each command says so in one warning at the lock's line, and the next lock
    written leaves it out. A "latest" row (it pinned nothing) goes without a word."""
    env = write_env()
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, COMPUTE_AMI, value="1.4.2", source=source, what="an older hyperpod-kit's")
    _edit_lock(env, "cluster.instance_groups[login].image_release_version", value=None,
               source="latest", what="an older hyperpod-kit's")  # fmt: skip
    line = lock_path(env).read_text().splitlines().index(f'  "{COMPUTE_AMI}": {{') + 1
    expected = (
        f"{lock_path(env)}:{line} warning: {COMPUTE_AMI}: the lock pins AMI release '1.4.2' "
        f"({source}) for group compute of a Slurm cluster, and AWS takes ImageReleaseVersion on "
        "EKS clusters only: not applied. Hint: nothing to do: the next `hyperpod-kit lock` or "
        "synth writes the lock without it; `aws sagemaker update-cluster-software` moves a Slurm "
        "group's AMI (docs/platform.md)."
    )
    locked, resolution = lock_environment(load_environment(env))
    assert [f.render(str(env)) for f in resolution.notes] == [expected]
    assert expected in [f.render(str(env)) for f in locked.findings]
    assert all(g.image_release_version is None for g in locked.config.cluster.instance_groups)
    assert not [key for key in resolution.pins if key.endswith(".image_release_version")]
    validate = run_cli("validate", str(env), cwd=tmp_path)
    assert validate.returncode == 0, validate.stderr
    assert validate.stderr.splitlines().count(expected) == 1
    written = run_cli("lock", str(env), "-q", cwd=tmp_path)
    assert written.returncode == 0 and expected in written.stderr.splitlines()
    assert COMPUTE_AMI not in _lock(env)["pins"]
    again = run_cli("lock", str(env), cwd=tmp_path)
    assert COMPUTE_AMI not in again.stderr and "unchanged" in again.stderr


def test_a_locked_pair_known_to_break_is_refused(tmp_path: Path) -> None:
    env = tmp_path / "eks.yaml"
    env.write_text((REPO / "environments" / "eks.yaml").read_text())
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(
        env, "cluster.eks.addons.training_operator", value="v1.2.1-eksbuild.1", source="deployed"
    )
    result = run_cli("validate", str(env), cwd=tmp_path)
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{lock_path(env)}:"), first
    assert "cluster.eks.addons.training_operator: " in first
    assert "dropped Pod Identity support" in first


def test_a_locked_add_on_newer_than_the_clusters_minor_is_refused(tmp_path: Path) -> None:
    """The lock's values meet the version tables too (facts/eks_addons.json): a kube-proxy of a
    newer minor than the cluster's is refused at the lock's line."""
    env = tmp_path / "eks.yaml"
    env.write_text((REPO / "environments" / "eks.yaml").read_text())
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    _edit_lock(env, "cluster.eks.addons.kube_proxy", value="v1.40.0-eksbuild.1", source="deployed")
    result = run_cli("validate", str(env), cwd=tmp_path)
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{lock_path(env)}:"), first
    assert (
        "cluster.eks.addons.kube_proxy: kube-proxy v1.40.0-eksbuild.1 is for Kubernetes 1.40"
        in (first)
    )


def test_a_file_that_is_not_a_lock_is_never_overwritten(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    env = write_env()
    lock_path(env).write_text("my notes\n")
    result = run_cli("lock", str(env), "-q", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{lock_path(env)} (lock): not a hyperpod-kit lock"), (
        result.stderr
    )
    assert lock_path(env).read_text() == "my notes\n"
    synth = run_cli("synth", str(env), "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert synth.returncode == 2 and lock_path(env).read_text() == "my notes\n"
    assert not (tmp_path / "o").exists()
    forced = run_cli("lock", str(env), "--force", "-q", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert read_lock(lock_path(env)) is not None  # replaced with --force, by a lock of ours


def test_from_deployed_reads_the_cluster_and_the_addons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lock --from-deployed`: DescribeCluster's current AMI release per group and DescribeAddon's
    versions become `deployed` pins for the keys the file leaves open (Stubber, shaped by the
    API models)."""
    import boto3

    from hyperpod_kit.cli.main import main
    from hyperpod_kit.config import aws as aws_module

    env = tmp_path / "eks.yaml"
    env.write_text((REPO / "environments" / "eks.yaml").read_text())
    session = boto3.Session(
        region_name="us-west-2", aws_access_key_id="AKIA0", aws_secret_access_key="x"
    )
    facade = aws_module.AwsFacade("us-west-2", session=session)
    sagemaker, eks = facade.client("sagemaker"), facade.client("eks")
    with Stubber(sagemaker) as sm, Stubber(eks) as ek:
        arn = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
        sm.add_response(
            "describe_cluster",
            {
                "ClusterArn": arn,
                "ClusterStatus": "InService",
                "InstanceGroups": [
                    {"InstanceGroupName": "workers", "CurrentImageReleaseVersion": "1.7.1"}
                ],
            },
            {"ClusterName": "hyperpod-eks"},
        )
        for addon, version in [
            ("vpc-cni", "v1.20.1-eksbuild.3"),
            ("kube-proxy", "v1.33.0-eksbuild.2"),
            ("coredns", "v1.12.1-eksbuild.2"),
            ("eks-pod-identity-agent", "v1.3.7-eksbuild.2"),
            ("cert-manager", "v1.18.2-eksbuild.1"),
        ]:
            ek.add_response(
                "describe_addon",
                {"addon": {"addonName": addon, "addonVersion": version}},
                {"clusterName": "hyperpod-eks-eks", "addonName": addon},
            )
        ek.add_client_error(
            "describe_addon",
            "ResourceNotFoundException",
            expected_params={
                "clusterName": "hyperpod-eks-eks",
                "addonName": "amazon-sagemaker-hyperpod-training-operator",
            },
        )
        monkeypatch.setattr(aws_module, "AwsFacade", lambda region: facade)
        code = main(["lock", str(env), "--from-deployed", "-q"])
        sm.assert_no_pending_responses()
        ek.assert_no_pending_responses()
    assert code == 0, capsys.readouterr().err
    pins = _lock(env)["pins"]
    assert pins[WORKERS_AMI]["value"] == "1.7.1"
    assert pins[WORKERS_AMI]["source"] == "deployed"
    assert pins["cluster.eks.addons.coredns"] == {
        "value": "v1.12.1-eksbuild.2", "source": "deployed", "what": "EKS add-on coredns",
    }  # fmt: skip
    assert pins["cluster.eks.addons.vpc_cni"]["source"] == "file"  # the file writes it: kept
    assert pins["cluster.eks.addons.training_operator"]["source"] == "latest"  # not installed


def test_from_deployed_pins_no_release_for_a_slurm_group(write_env: WriteEnv) -> None:
    """DescribeCluster gives a Slurm group's current AMI release too; `lock --from-deployed`
    pins it only on EKS (AWS takes ImageReleaseVersion there alone)."""
    from hyperpod_kit.lock import deployed_pins

    described = {
        "InstanceGroups": [
            {"InstanceGroupName": name, "CurrentImageReleaseVersion": "1.7.1"}
            for name in ("controller", "login", "compute", "workers")
        ]
    }
    slurm = load_environment(write_env()).config
    assert deployed_pins(slurm, described, {}) == {}
    eks = load_environment(_eks(write_env().parent)).config
    assert list(deployed_pins(eks, described, {})) == [WORKERS_AMI]


def test_from_deployed_without_credentials_is_one_line(tmp_path: Path) -> None:
    env = tmp_path / "d.yaml"
    env.write_text((REPO / "environments" / "default.yaml").read_text())
    result = run_cli("lock", str(env), "--from-deployed", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = [x for x in result.stderr.splitlines() if "--from-deployed" in x]
    assert line.startswith(f"{env}: --from-deployed needs AWS credentials")
    assert "Traceback" not in result.stderr and not lock_path(env).exists()


def test_plan_shows_lock_changes_first() -> None:
    old = {
        "pins": {"a": {"value": "1", "source": "default"}, "b": {"value": None, "source": "latest"}}
    }
    new = {"pins": {"a": {"value": "2", "source": "default"}, "b": {"value": "1.2.3",
                                                                     "source": "deployed"},
                    "c": {"value": "x", "source": "file"}}}  # fmt: skip
    assert lock_changes(old, new) == [
        "lock: ~ a: 1 (default) -> 2 (default)",
        "lock: ~ b: latest at deploy (latest) -> 1.2.3 (deployed)",
        "lock: + c = x (file)",
    ]
    assert lock_changes(None, new) == []  # a baseline older than locks


ENGINE = "cluster.slurm.accounting.engine_version"
ACCOUNTING: dict[str, Any] = {
    "network": {
        "database_availability_zone_id": "usw2-az1",
        "vpc": {"database_subnet_cidr": "10.0.1.0/28"},
    },
    "cluster": {"node_provisioning": "continuous", "slurm": {"accounting": {"enabled": True}}},
}


def test_the_accounting_engine_is_pinned_and_a_moved_default_refused(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    """The accounting database's Aurora version floats with hyperpod-kit's table: the lock pins
    it; a moved default is refused like any other, and the file's own version wins."""
    env = write_env(ACCOUNTING)
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    assert _lock(env)["pins"][ENGINE] == {
        "value": "8.0.mysql_aurora.3.10.6",
        "source": "default",
        "what": "Aurora MySQL version of the Slurm accounting database",
    }
    _edit_lock(env, ENGINE, value="8.0.mysql_aurora.3.04.6")  # an older hyperpod-kit's default
    with pytest.raises(LockError, match=ENGINE):
        lock_environment(load_environment(env))
    written = write_env(
        {**ACCOUNTING, "cluster": {**ACCOUNTING["cluster"], "slurm": {"accounting": {
            "enabled": True, "engine_version": "8.0.mysql_aurora.3.04.6"}}}}
    )  # fmt: skip
    _, resolution = lock_environment(load_environment(written))
    assert (resolution.pins[ENGINE].value, resolution.pins[ENGINE].source) == (
        "8.0.mysql_aurora.3.04.6",
        "file",
    )
    plain = write_env(name="plain.yaml")
    _, resolution = lock_environment(load_environment(plain))
    assert ENGINE not in resolution.pins


GOVERNANCE_ADDON = "cluster.eks.addons.task_governance"


def test_the_task_governance_addon_is_pinned_only_where_it_is_installed(
    write_env: WriteEnv, tmp_path: Path
) -> None:
    """With task governance, its add-on's version comes from hyperpod-kit's dated table
    (facts/task_governance.json) and is pinned as a default: a moved default is refused, the
    file's version wins; without it, nothing is pinned and `--from-deployed` does not ask."""
    from hyperpod_kit.config.facts import task_governance_facts
    from hyperpod_kit.config.pins import installed_addons

    eks = {
        "orchestrator": "eks",
        "region": "us-east-1",  # where the gate's cfn-lint knows task governance's types
        "availability_zone_id": "use1-az6",
        "network": {
            "vpc": {"control_plane_subnet_cidr": "10.0.1.0/24"},
            "control_plane_availability_zone_id": "use1-az4",
        },
        "cluster": {
            "instance_groups": [
                {"name": "w", "role": "worker", "instance_type": "ml.g5.12xlarge",
                 "instance_count": 2}
            ],
        },
    }  # fmt: skip
    on = {**eks, "cluster": {**eks["cluster"], "eks": {"task_governance": {"enabled": True}}}}
    env = write_env(on)
    assert run_cli("lock", str(env), cwd=tmp_path).returncode == 0
    assert _lock(env)["pins"][GOVERNANCE_ADDON] == {
        "value": task_governance_facts()["default_addon_version"],
        "source": "default",
        "what": "EKS add-on amazon-sagemaker-hyperpod-taskgovernance",
    }
    assert "amazon-sagemaker-hyperpod-taskgovernance" in installed_addons(
        load_environment(env).config
    )
    _edit_lock(env, GOVERNANCE_ADDON, value="v1.5.0-eksbuild.1")  # an older toolkit's default
    with pytest.raises(LockError, match="task_governance"):
        lock_environment(load_environment(env))
    pinned = {
        "task_governance": {"enabled": True},
        "addons": {"task_governance": "v1.5.0-eksbuild.1"},
    }
    written = write_env({**on, "cluster": {**on["cluster"], "eks": pinned}}, name="written.yaml")
    _, resolution = lock_environment(load_environment(written))
    pin = resolution.pins[GOVERNANCE_ADDON]
    assert (pin.value, pin.source) == ("v1.5.0-eksbuild.1", "file")
    off = write_env(eks, name="off.yaml")
    config = load_environment(off).config
    _, resolution = lock_environment(load_environment(off))
    assert GOVERNANCE_ADDON not in resolution.pins
    assert "amazon-sagemaker-hyperpod-taskgovernance" not in installed_addons(config)


# --- a lock written by another hyperpod-kit ----------------------------------------------------


def _written_by(env: Path, written_by: object, **more: Any) -> None:
    path = lock_path(env)
    data = json.loads(path.read_text())
    data.update({"written_by": written_by, **more})
    path.write_text(json.dumps(data, indent=1) + "\n")


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from hyperpod_kit.cli.main import main

    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("newer", ["0.10.0", "1.0.0", f"{__version__}.post1", "99.0.0rc1"])
def test_a_lock_of_a_newer_hyperpod_kit_is_refused_in_one_line(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str], newer: str
) -> None:
    """validate, synth and lock (even with --force: the lock is ours, and a newer version may
    have pinned more) refuse it, naming the lock, what wrote it and this version; exit 2. A
    newer format is said the same way: it is the newer version that wrote it."""
    env = write_env()
    assert _cli(["lock", str(env), "-q"], capsys)[0] == 0
    _written_by(env, f"hyperpod-kit {newer}", format=LOCK_FORMAT + (newer == "1.0.0"))
    before = lock_path(env).read_text()
    expected = (
        f"{lock_path(env)}:5 written_by: this lock was written by hyperpod-kit {newer}, newer "
        f"than this hyperpod-kit ({__version__}), which may not read it as written. Hint: upgrade "
        f"hyperpod-kit: pip install 'hyperpod-kit>={newer}' (in a checkout: check out {newer} or "
        "later and run make setup)."
    )
    for argv in (
        ["validate", str(env), "-q"],
        ["synth", str(env), "-q", "-o", str(env.parent / "out")],
        ["lock", str(env), "-q"],
        ["lock", str(env), "-q", "--force"],
    ):
        code, err = _cli(argv, capsys)
        assert code == 2, argv
        assert err.splitlines() == [expected], argv
    assert lock_path(env).read_text() == before
    assert not (env.parent / "out").exists()


@pytest.mark.parametrize(
    "written_by", [f"hyperpod-kit {__version__}", "hyperpod-kit 0.0.9", "hyperpod-kit 0.1.0.dev3",
                   "hyperpod-kit", "hyperpod-kit next", "someone else", None, 42],
)  # fmt: skip
def test_a_lock_of_this_or_an_older_hyperpod_kit_is_read(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str], written_by: object
) -> None:
    """An older or equal version (or a `written_by` that names none: nothing to compare) is
    read as usual, and the lock rewritten as this version's."""
    env = write_env()
    assert _cli(["lock", str(env), "-q"], capsys)[0] == 0
    _written_by(env, written_by)
    code, err = _cli(["validate", str(env), "-q"], capsys)
    assert code == 0, err
    assert err == ""
    assert _cli(["lock", str(env), "-q"], capsys)[0] == 0
    assert _lock(env)["written_by"] == f"hyperpod-kit {__version__}"


def test_versions_compare_as_versions(
    write_env: WriteEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.10.0 is newer than 0.9.0 (as text it would sort before)."""
    from hyperpod_kit.lock import NewerLockError

    env = write_env()
    assert _cli(["lock", str(env), "-q"], capsys)[0] == 0
    _written_by(env, "hyperpod-kit 0.10.0")
    with pytest.raises(NewerLockError):
        read_lock(lock_path(env))
