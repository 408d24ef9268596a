"""`hyperpod-kit init`: every combination of its choices validates as written; it refuses to
overwrite without --force; a bad flag is one line, exit 2, nothing written; questions on a
terminal, the embedded default's choices without one."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hyperpod_kit.cli import main as cli
from hyperpod_kit.cli.init import Choices, check_users, default_choices, render
from hyperpod_kit.config import Level
from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.templating import json_value

ORCHESTRATORS = ("slurm", "eks")
PEOPLE = ((), ("alice", "bob"))
STUDIO = (False, True)
# A one-GPU, an eight-GPU (32 EFA) and a four-GPU type; two regions with their own zones.
TYPES = ("ml.g5.8xlarge", "ml.p5.48xlarge", "ml.g5.12xlarge")
PLACES = (("us-west-2", "usw2-az2"), ("eu-central-1", "euc1-az3"))
COMBINATIONS = [
    Choices("hyperpod-dev", orch, region, az, itype, count, people, studio)
    for orch, people, studio, itype, (region, az), count in itertools.product(
        ORCHESTRATORS, PEOPLE, STUDIO, TYPES, PLACES, (1, 3)
    )
    # Studio without people is refused (test_studio_needs_people); llama-1b's training state
    # alone does not fit one A10G (test_one_small_gpu_is_refused)
    if (people or not studio) and (itype, count) != ("ml.g5.8xlarge", 1)
]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest's stdin is not a terminal, but say so: init must not ask unless a test says."""
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)


def _id(c: Choices) -> str:
    return f"{c.orchestrator}-{c.region}-{c.instance_type}-{c.count}-{len(c.users)}-{c.studio}"


@pytest.mark.parametrize("choices", COMBINATIONS, ids=_id)
def test_every_combination_validates(choices: Choices, tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(render(choices, "env.yaml"))
    loaded = load_environment(path)  # raises ConfigError on any error
    config = loaded.config
    assert (config.orchestrator, config.region, config.availability_zone_id) == (
        choices.orchestrator,
        choices.region,
        choices.az_id,
    )
    (group,) = [g for g in config.cluster.instance_groups if g.role in ("compute", "worker")]
    assert (group.instance_type, group.instance_count) == (choices.instance_type, choices.count)
    assert [u.name for u in config.users] == list(choices.users)
    assert config.studio.enabled is choices.studio
    assert config.trainer.job.nodes == choices.count
    if choices.orchestrator == "eks":  # EKS wants a second zone for its control plane
        assert config.network.control_plane_availability_zone_id not in (None, choices.az_id)


def test_no_flags_no_terminal_writes_the_default_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "env.yaml"
    code, out, err = run(["init", str(target)], capsys)
    assert code == 0 and out == ""
    assert "the embedded default's choices" in err
    assert "compute: 2 x ml.g5.8xlarge" in err and "region: us-west-2" in err
    loaded = load_environment(target)
    assert not [f for f in loaded.findings if f.level is Level.ERROR]
    expected = default_choices()
    assert (loaded.config.name, loaded.config.region) == (expected.name, expected.region)
    assert target.read_text().startswith("# Written by `hyperpod-kit init`")


def test_flags_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "env.yaml"
    argv = [
        "init",
        str(target),
        "--name",
        "team-a",
        "--orchestrator",
        "eks",
        "--region",
        "us-east-1",
        "--az-id",
        "use1-az4",
        "--instance-type",
        "ml.p5.48xlarge",
        "--count",
        "4",
        "--users",
        "alice,bob",
        "--studio",
    ]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    config = load_environment(target).config
    assert config.name == "team-a" and config.orchestrator == "eks"
    assert config.availability_zone_id == "use1-az4" and config.studio.enabled
    assert config.trainer.job.processes_per_node == 8
    assert config.trainer.job.global_batch_size % (4 * 8 * config.trainer.job.micro_batch_size) == 0


def test_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "env.yaml"
    target.write_text("mine\n")
    code, _, err = run(["init", str(target)], capsys)
    assert code == 2
    assert err == (
        f"{target}: exists and would be overwritten; nothing was written. Hint: pass "
        "--force to overwrite it, or give another FILE.\n"
    )
    assert target.read_text() == "mine\n"
    code, _, err = run(["init", str(target), "--force"], capsys)
    assert code == 0, err
    load_environment(target)


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["--region", "us-west-9"], "--region: 'us-west-9' is not a region"),
        (["--region", "mx-central-1"], "--region: 'mx-central-1' does not offer"),
        (
            ["--region", "us-east-1", "--az-id", "usw2-az1"],
            "--az-id: 'usw2-az1' is a zone of us-west-2, not of us-east-1",
        ),
        (["--az-id", "usw2-az9"], "--az-id: 'usw2-az9' is not a zone of us-west-2"),
        (
            ["--instance-type", "ml.g5.9xlarge"],
            "--instance-type: 'ml.g5.9xlarge' is not an instance type HyperPod takes",
        ),
        (
            ["--instance-type", "ml.inf2.xlarge"],
            "--instance-type: 'ml.inf2.xlarge' is not an instance type HyperPod takes",
        ),
        (["--instance-type", "ml.trn1.32xlarge"], "--instance-type: 'ml.trn1.32xlarge' has Tr"),
        (["--count", "0"], "--count: '0' is not a number of nodes"),
        (["--count", "two"], "--count: 'two' is not a number of nodes"),
        (["--orchestrator", "k8s"], "--orchestrator: 'k8s' is not an orchestrator"),
        (["--users", "Alice"], "--users: 'Alice' is not a login name"),
        (["--users", "bob,bob"], "--users: 'bob,bob' names someone twice"),
        (["--users", ",,"], "--users: ',,' names nobody"),
        (["--users", ""], "--users: '' names nobody"),
        (["--users", " , "], "--users: ' , ' names nobody"),
        (["--users", "alice,,bob"], "--users: 'alice,,bob' has an empty name"),
        (["--users", "alice,"], "--users: 'alice,' has an empty name"),
        (["--name", "X"], "--name: 'X' is not an environment name"),
        (["--studio"], "--studio: 'on' needs people"),
        (["--count", "100000"], "--count: these choices make a file that does not validate"),
        (
            ["--instance-type", "ml.p5.48xlarge", "--count", "5000"],
            "--count: these choices make a file that does not validate (network.vpc.private_subnet",
        ),
    ],
)
def test_bad_flag_is_one_line_and_writes_nothing(
    argv: list[str], start: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "env.yaml"
    code, out, err = run(["init", str(target), *argv], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(start), err
    assert ". Hint: " in err
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_questions_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked in order; a bad answer is said and asked again; an empty answer takes the default."""
    answers = iter(
        ["eks", "us-east-1", "usw2-az1", "use1-az2", "ml.g5.12xlarge", "", "carol", "yes"]
    )
    asked: list[str] = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", answer)
    target = tmp_path / "env.yaml"
    code, _, err = run(["init", str(target), "--name", "asked"], capsys)
    assert code == 0, err
    assert asked[0] == "orchestrator (slurm or eks) [slurm]: "
    assert asked[4].startswith("compute instance type [ml.g5.8xlarge]")
    assert "--az-id: 'usw2-az1' is a zone of us-west-2, not of us-east-1" in err
    config = load_environment(target).config
    assert (config.name, config.orchestrator, config.availability_zone_id) == (
        "asked",
        "eks",
        "use1-az2",
    )
    assert config.cluster.instance_groups[0].instance_count == 2  # the default, taken
    assert [u.name for u in config.users] == ["carol"] and config.studio.enabled


def test_no_input_never_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked {prompt!r}"))
    code, _, err = run(["init", str(tmp_path / "env.yaml"), "--no-input"], capsys)
    assert code == 0, err


TRICKY = ["yes", "on", "no", "1.0", "null", "~", "a: b", "#x", "it's", "x\ny", "usw2-az2", 3, True]


@pytest.mark.parametrize("value", TRICKY)
def test_yaml_filter_keeps_the_value(value: object) -> None:
    """What the template writes through the filter reads back as the same value."""
    assert yaml.safe_load(f"key: {json_value(value)}\n") == {"key": value}


def test_users_good_neighbours() -> None:
    """Spaces around names are fine; only an empty name is refused."""
    assert check_users(" alice , bob ") == ("alice", "bob")
    assert check_users("carol") == ("carol",)


def test_one_small_gpu_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama-1b's sharded training state on one GPU is 16 bytes x 1.24B = 18.4 GiB: with what
    no switch removes it cannot fit one 22 GiB A10G, so init names --count and writes nothing."""
    target = tmp_path / "env.yaml"
    code, _, err = run(["init", str(target), "--count", "1", "--instance-type", "ml.g5.8xlarge"],
                       capsys)  # fmt: skip
    assert code == 2 and not target.exists()
    [line] = err.strip().splitlines()
    assert line.startswith("--count: these choices make a file that does not validate")
    assert "(states 18.4 + " in line and "on 1 GPU of ml.g5.8xlarge" in line
    assert line.endswith("Hint: any of: nodes: 2 or more (and the group's instance_count).")


@pytest.mark.parametrize(
    ("instance_type", "checkpointing"), [("ml.g5.8xlarge", True), ("ml.p5.48xlarge", False)]
)
def test_activation_checkpointing_only_where_the_job_needs_it(
    instance_type: str, checkpointing: bool, tmp_path: Path
) -> None:
    """Two A10G need it for llama-1b at micro batch 4 x 2048 tokens; two nodes of 8 H100 do not."""
    choices = replace(default_choices(), instance_type=instance_type, count=2)
    path = tmp_path / "env.yaml"
    path.write_text(render(choices, "env.yaml"))
    loaded = load_environment(path)
    assert loaded.config.trainer.job.activation_checkpointing is checkpointing
    assert loaded.config.trainer.job.micro_batch_size == 4
    assert not [f for f in loaded.findings if "GiB per GPU" in f.message]
