"""`verify --report` reads its run from the cluster's log group, against a real moto server on
loopback (AWS_ENDPOINT_URL): the cluster found through its discovery parameter, the run's
streams `hyperpod-kit/jobs/<run>/<instance-id>` listed and read page by page, the newest run
picked (or `--run`), judged against the tests' floors table. Bad input is one line and exit 2:
an unknown run, a damaged event, no run at all, nothing deployed, no credentials."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hyperpod_kit.cli.main import main
from hyperpod_kit.outputs import read_marker
from hyperpod_kit.verify import floors as floors_module
from tests import verify_runs as runs
from tests.conftest import REPO, run_cli
from tests.integration.test_status_logs import deploy_cluster, one_line_error, ship
from tests.moto_server import MotoServer

DEFAULT = REPO / "environments" / "default.yaml"


@pytest.fixture
def aws(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> MotoServer:
    """The command in-process, reaching only the moto server, in `tmp_path`, with the tests'
    floors table."""
    import os

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in moto.env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(floors_module, "FLOORS_FILE", runs.FLOORS)
    return moto


def stream(run: str, node: str) -> str:
    return f"hyperpod-kit/jobs/{run}/{node}"


def test_the_newest_run_from_the_log_group(
    aws: MotoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group, nodes = deploy_cluster(aws)
    now = int(time.time() * 1000)
    ship(
        aws,
        group,
        stream(runs.OLDER, nodes[0]),
        runs.jsonl(runs.older()).splitlines(),
        at_ms=now - 86_400_000,
    )
    lines = runs.jsonl(runs.records()).splitlines()
    # the run's lines in two streams (two nodes wrote), one line in both: read once
    ship(aws, group, stream(runs.RUN, nodes[0]), lines[:8], at_ms=now)
    ship(aws, group, stream(runs.RUN, nodes[1]), lines[7:], at_ms=now + 100)
    ship(aws, group, "hyperpod-kit/jobs/train-123/" + nodes[0], ["not a verify line"], at_ms=now)
    assert main(["verify", str(DEFAULT), "-q", "--report"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"run {runs.RUN}, cluster hp-prod")
    assert f"slowest node by its pairs: {runs.SLOW}" in out
    assert out.count("ip-10-1-0-1 <-> ip-10-1-0-2") == 1  # the shared line, once
    assert err.strip().endswith("wrote verify-report: report.json, allreduce.png, fsx.png")
    report = json.loads((tmp_path / "verify-report" / "report.json").read_text())
    assert report["run"]["runs_found"] == [runs.OLDER, runs.RUN]
    assert report["counts"]["below"] == 3 and report["exit_code"] == 1
    marker = read_marker(tmp_path / "verify-report")
    assert marker is not None and marker["source"] == group
    # the older run by name, as JSON, into another folder
    assert (
        main(
            [
                "verify",
                str(DEFAULT),
                "-q",
                "--report",
                "--run",
                runs.OLDER,
                "--format",
                "json",
                "--out",
                "older",
            ]
        )
        == 0
    )
    out, _ = capsys.readouterr()
    assert json.loads(out)["run"]["id"] == runs.OLDER
    assert (tmp_path / "older" / "report.json").is_file()


def test_every_page_of_streams_and_events(
    aws: MotoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More streams than DescribeLogStreams returns in one page (50): every node is read."""
    group, _ = deploy_cluster(aws)
    now = int(time.time() * 1000)
    rows = runs.records(slow_pair_peak=380.0)
    node = rows[1]
    many = [f"ip-10-2-{i // 256}-{i % 256}" for i in range(60)]
    ship(
        aws,
        group,
        stream(runs.RUN, "i-0ffffffffffffffff"),
        [json.dumps(r) for r in rows if r["type"] != "node"],
        at_ms=now,
    )
    for i, name in enumerate(many):
        ship(
            aws,
            group,
            stream(runs.RUN, f"i-{i:017x}"),
            [json.dumps({**node, "node": name})],
            at_ms=now + i,
        )
    assert main(["verify", str(DEFAULT), "-q", "--report", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(n["node"] for n in doc["nodes"]) == sorted(many)


def test_a_damaged_event_is_named_by_its_stream_and_place(
    aws: MotoServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    group, nodes = deploy_cluster(aws)
    lines = runs.jsonl(runs.records()).splitlines()
    lines[2] = lines[2][:30]
    ship(aws, group, stream(runs.RUN, nodes[0]), lines, at_ms=int(time.time() * 1000))
    assert main(["verify", str(DEFAULT), "-q", "--report"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"{stream(runs.RUN, nodes[0])}:3: not JSON (")
    assert not (tmp_path / "verify-report").exists()


def test_an_unknown_run_and_no_run_are_one_line(
    aws: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    group, nodes = deploy_cluster(aws)
    ship(aws, group, "hyperpod-kit/health/" + nodes[0], ["{}"], at_ms=int(time.time() * 1000))
    assert main(["verify", str(DEFAULT), "-q", "--report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{group}: no verify run in the log group") and "Hint: " in err
    assert len(err.splitlines()) == 1
    ship(
        aws,
        group,
        stream(runs.RUN, nodes[0]),
        runs.jsonl(runs.records()).splitlines(),
        at_ms=int(time.time() * 1000),
    )
    assert main(["verify", str(DEFAULT), "-q", "--report", "--run", "verify-20200101T000000Z"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"{group}: no stream of run verify-20200101T000000Z (runs found: {runs.RUN})."
        " Hint: leave --run out for the newest run.\n"
    )


def test_nothing_deployed_is_one_line(aws: MotoServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(DEFAULT), "-q", "--report"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "nothing of environment hyperpod-dev is deployed" in err


def test_no_credentials_is_one_line(tmp_path: Path) -> None:
    """The real command in a fresh process without credentials; --results needs none."""
    one_line_error(
        run_cli("verify", str(DEFAULT), "-q", "--report", cwd=tmp_path), "no AWS credentials found"
    )
    assert not (tmp_path / "verify-report").exists()
    runs.write(tmp_path / "r.jsonl", runs.records(local=True))
    done = run_cli("verify", "--results", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # a local run: no floors, nothing below
    assert "verdict: PASS (" in done.stdout  # FSx against its provisioned throughput
