"""lifecycle/bin/hyperpod-kit-ship-logs, run for real with a fake `aws` first on PATH.

The fake records each call's argv and the batch it was handed, and answers like the CLI: a
put-log-events to a stream that does not exist yet fails with ResourceNotFoundException (the
shipper then creates it), and a knob makes every call fail as with no network.

Spool files (the jobs' own, in /var/log/hyperpod-kit/jobs) are refused when they belong to the
shipper's own user: these tests run as root, as CI does, so the files a job would write are given
to another user (JOB_UID); the tests that need that are skipped when not run as root.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.paths import LIFECYCLE_DIR
from tests.conftest import assert_node_python

SHIPPER = LIFECYCLE_DIR / "bin" / "hyperpod-kit-ship-logs"
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/a1b2c3d4e5f6"
GROUP = "/aws/sagemaker/Clusters/ml-cluster/a1b2c3d4e5f6"
INSTANCE = "i-0123456789abcdef0"
HEALTH = "/var/log/hyperpod-kit/health.jsonl"
LIFECYCLE = "/var/log/hyperpod-kit/lifecycle.log"
STATE = "/var/lib/hyperpod-kit/ship-logs/state.json"
JOBS = "/var/log/hyperpod-kit/jobs"
SPOOL = ("--spool", f"{JOBS}=hyperpod-kit/jobs/{{name}}/{{instance_id}}")
JOB_UID = 1000  # a user's: the shipper refuses files of its own user (root on a node)
AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not AS_ROOT, reason="gives spool files to another user (chown): run as root, as CI does"
)
_MAX = re.search(r"^MAX_SPOOL_FILES = (\d+)", SHIPPER.read_text(), re.MULTILINE)
MAX_SPOOL_FILES = int(_MAX.group(1)) if _MAX else 0

FAKE_AWS = r"""#!PYTHON
import json, os, sys
state = os.environ["FAKE_AWS_STATE"]
args = sys.argv[1:]
batch = None
for i, a in enumerate(args):
    if a == "--log-events":
        with open(args[i + 1][len("file://"):], encoding="utf-8") as f:
            batch = json.load(f)
with open(os.path.join(state, "calls.jsonl"), "a") as f:
    f.write(json.dumps({"argv": args, "batch": batch}) + "\n")
if os.path.exists(os.path.join(state, "offline")):
    sys.stderr.write("\nCould not connect to the endpoint URL: \"https://logs.us-west-2.amazonaws.com/\"\n")
    sys.exit(255)
streams_file = os.path.join(state, "streams")
streams = open(streams_file).read().split("\n") if os.path.exists(streams_file) else []
stream = args[args.index("--log-stream-name") + 1]
if "put-log-events" in args:
    if stream not in streams:
        sys.stderr.write("\nAn error occurred (ResourceNotFoundException) when calling the "
                         "PutLogEvents operation: The specified log stream does not exist.\n")
        sys.exit(254)
    print(json.dumps({"nextSequenceToken": "1"}))
elif "create-log-stream" in args:
    if stream in streams:
        sys.stderr.write("\nAn error occurred (ResourceAlreadyExistsException)\n")
        sys.exit(254)
    with open(streams_file, "a") as f:
        f.write(stream + "\n")
else:
    sys.exit(2)
"""


class Node:
    def __init__(self, base: Path) -> None:
        self.root, self.bin, self.state = base / "root", base / "bin", base / "aws"
        for d in (self.root, self.bin, self.state):
            d.mkdir()
        aws = self.bin / "aws"
        aws.write_text(FAKE_AWS.replace("PYTHON", PYTHON))
        aws.chmod(0o755)
        self.write(
            "/opt/ml/config/resource_config.json",
            json.dumps({"ClusterConfig": {"ClusterArn": CLUSTER_ARN, "ClusterName": "ml-cluster"}}),
        )
        self.write("/sys/devices/virtual/dmi/id/board_asset_tag", INSTANCE + "\n")

    def path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def write(self, node_path: str, text: str) -> Path:
        path = self.path(node_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def append(self, node_path: str, data: str | bytes) -> None:
        path = self.path(node_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            f.write(data.encode() if isinstance(data, str) else data)

    def job(self, name: str, text: str, mtime_s: int | None = None) -> Path:
        """Append to a job's spool file, as a user's job would (owned by JOB_UID when root)."""
        folder = self.path(JOBS)
        if not folder.exists():
            folder.mkdir(parents=True)
            folder.chmod(0o1733)  # as hooks.d/50-health.sh makes it
        path = folder / name
        with path.open("a") as f:
            f.write(text)
        if AS_ROOT:
            os.chown(path, JOB_UID, JOB_UID)
        if mtime_s is not None:
            os.utime(path, (mtime_s, mtime_s))
        return path

    def sources(self) -> dict[str, Any]:
        """The shipper's state: a place per file it has read."""
        state = self.path(STATE)
        if not state.exists():
            return {}
        sources: dict[str, Any] = json.loads(state.read_text())["sources"]
        return sources

    def ship(self, *extra: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        (self.state / "calls.jsonl").unlink(missing_ok=True)
        argv = [PYTHON, str(SHIPPER), "--region", "us-west-2", "--cluster-name", "ml-cluster",
                "--source", f"{HEALTH}=hyperpod-kit/health/{{instance_id}}",
                "--source", f"{LIFECYCLE}=hyperpod-kit/lifecycle/{{instance_id}}",
                *extra]  # fmt: skip
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HYPERPOD_KIT_ROOT": str(self.root),
            "FAKE_AWS_STATE": str(self.state),
            "LANG": "C.UTF-8",
        }
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def calls(self) -> list[dict[str, Any]]:
        path = self.state / "calls.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def shipped(self, stream: str) -> list[str]:
        # A first put to a new stream is refused and repeated: count the accepted ones only.
        return [e["message"] for call in self.accepted(stream) for e in call["batch"]]

    def accepted(self, stream: str) -> list[dict[str, Any]]:
        calls = self.calls()
        out = []
        for i, call in enumerate(calls):
            argv = call["argv"]
            if "put-log-events" not in argv or argv[argv.index("--log-stream-name") + 1] != stream:
                continue
            refused = i + 1 < len(calls) and "create-log-stream" in calls[i + 1]["argv"]
            if not refused and not (self.state / "offline").exists():
                out.append(call)
        return out


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def health_line(n: int, time: str = "2030-01-01T00:00:00Z") -> str:
    return json.dumps({"time": time, "source": "hyperpod-kit-health", "event": "verdict", "n": n})


HEALTH_STREAM = f"hyperpod-kit/health/{INSTANCE}"
LIFECYCLE_STREAM = f"hyperpod-kit/lifecycle/{INSTANCE}"


def test_lines_ship_exactly_once_across_runs_to_the_cluster_group(node: Node) -> None:
    node.append(HEALTH, "".join(health_line(n) + "\n" for n in range(3)))
    node.append(LIFECYCLE, "2026-11-24T05:00:00Z hyperpod-kit lifecycle: step: users\n")
    ok(node.ship())
    calls = node.calls()
    # The stream did not exist: refused once, created, sent again.
    health = [c["argv"] for c in calls if HEALTH_STREAM in c["argv"]]
    assert [a[5] for a in health] == ["put-log-events", "create-log-stream", "put-log-events"]
    for argv in health:
        assert argv[:5] == ["--region", "us-west-2", "--output", "json", "logs"]
        assert argv[argv.index("--log-group-name") + 1] == GROUP
    assert node.shipped(HEALTH_STREAM) == [health_line(n) for n in range(3)]
    assert node.shipped(LIFECYCLE_STREAM) == [
        "2026-11-24T05:00:00Z hyperpod-kit lifecycle: step: users"
    ]

    ok(node.ship())
    assert node.calls() == [], "nothing new, nothing sent"
    node.append(HEALTH, health_line(3) + "\n")
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(3)]
    assert [c["argv"][5] for c in node.calls()] == ["put-log-events"]  # the stream exists now


def test_json_time_is_the_timestamp_else_the_read_time_and_batches_are_in_order(
    node: Node,
) -> None:
    import datetime
    import time

    now = int(time.time())  # CloudWatch takes events of the last 14 days: times from now
    iso = [
        datetime.datetime.fromtimestamp(now - s, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for s in (60, 120)
    ]
    node.append(HEALTH, health_line(1, iso[0]) + "\n")
    node.append(HEALTH, health_line(2, iso[1]) + "\n")
    node.append(HEALTH, "not json {\n")
    before = int(time.time() * 1000)
    ok(node.ship("--log-group", GROUP))
    events = node.accepted(HEALTH_STREAM)[0]["batch"]
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)
    assert events[0]["message"] == health_line(2, iso[1])
    assert events[0]["timestamp"] == (now - 120) * 1000
    assert events[1]["timestamp"] == (now - 60) * 1000
    assert events[2]["message"] == "not json {" and events[2]["timestamp"] >= before


def test_rotation_between_runs_loses_nothing(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n")
    ok(node.ship())
    node.append(HEALTH, health_line(1) + "\n" + health_line(2) + "\n")
    os.replace(node.path(HEALTH), str(node.path(HEALTH)) + ".1")  # the runner's rotation
    node.append(HEALTH, health_line(3) + "\n")
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(n) for n in (1, 2, 3)]
    node.append(HEALTH, health_line(4) + "\n")
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(4)]


def test_a_failure_after_a_rotation_sends_both_files_next_time(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n")
    ok(node.ship())
    node.append(HEALTH, health_line(1) + "\n")
    os.replace(node.path(HEALTH), str(node.path(HEALTH)) + ".1")
    node.append(HEALTH, health_line(2) + "\n")
    (node.state / "offline").write_text("")
    assert node.ship().returncode == 1
    (node.state / "offline").unlink()
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(1), health_line(2)]


def test_truncated_file_is_read_from_its_start(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n" + health_line(1) + "\n")
    ok(node.ship())
    node.path(HEALTH).write_text(health_line(9) + "\n")
    result = ok(node.ship())
    assert "truncated" in result.stderr
    assert node.shipped(HEALTH_STREAM) == [health_line(9)]


def test_a_failure_keeps_the_offset_and_the_next_run_sends_the_lines(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n")
    ok(node.ship())
    node.append(HEALTH, health_line(1) + "\n")
    state_before = node.path(STATE).read_text()
    (node.state / "offline").write_text("")
    result = node.ship()
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Could not connect to the endpoint URL" in result.stderr
    assert "offsets kept" in result.stderr
    assert node.path(STATE).read_text() == state_before
    (node.state / "offline").unlink()
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(1)]


def test_no_cluster_arn_fails_with_one_line_unless_the_group_is_given(node: Node) -> None:
    node.path("/opt/ml/config/resource_config.json").write_text("{}")
    node.append(HEALTH, health_line(0) + "\n")
    result = node.ship()
    assert result.returncode == 1 and "give --log-group" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert node.calls() == []
    ok(node.ship("--log-group", "/custom/group"))
    argv = node.accepted(HEALTH_STREAM)[0]["argv"]
    assert argv[argv.index("--log-group-name") + 1] == "/custom/group"


def test_a_line_still_being_written_waits_for_its_end(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n" + '{"time": "2030-')
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == [health_line(0)]
    node.append(HEALTH, '01-01T00:00:00Z"}\n')
    ok(node.ship())
    assert node.shipped(HEALTH_STREAM) == ['{"time": "2030-01-01T00:00:00Z"}']


def test_malformed_long_blank_and_binary_lines(node: Node) -> None:
    long_line = "x" * (300 * 1024)
    node.append(HEALTH, b'\n\n{"time": 12}\n{"time": "yesterday"}\n[1, 2]\n')
    node.append(HEALTH, b"\xff\xfe bytes\n" + long_line.encode() + b"\n" + b"last\n")
    ok(node.ship())
    messages = node.shipped(HEALTH_STREAM)
    assert messages[:4] == ['{"time": 12}', '{"time": "yesterday"}', "[1, 2]", "\ufffd\ufffd bytes"]
    assert messages[5] == "last"
    cut = messages[4]
    assert len(cut.encode()) + 26 <= 256 * 1024
    assert cut.startswith("xxx") and cut.endswith("[truncated by hyperpod-kit]")


def test_batches_respect_the_event_and_byte_limits(node: Node) -> None:
    node.append(HEALTH, "".join(f"{n}\n" for n in range(10_001)))
    ok(node.ship())
    sizes = [len(c["batch"]) for c in node.accepted(HEALTH_STREAM)]
    assert sizes == [10_000, 1]
    assert node.shipped(HEALTH_STREAM) == [str(n) for n in range(10_001)]

    big = "y" * (200 * 1024)  # 5 fit in 1,048,576 bytes with their 26 bytes each, 6 do not
    node.append(LIFECYCLE, "".join(f"{n}{big}\n" for n in range(12)))
    ok(node.ship())
    batches = [c["batch"] for c in node.accepted(LIFECYCLE_STREAM)]
    assert [len(b) for b in batches] == [5, 5, 2]
    for batch in batches:
        assert sum(len(e["message"].encode()) + 26 for e in batch) <= 1_048_576
    assert [m[:2] for m in node.shipped(LIFECYCLE_STREAM)] == [f"{n}y"[:2] for n in range(12)]


def test_a_source_that_does_not_exist_yet_is_no_error(node: Node) -> None:
    ok(node.ship())
    assert node.calls() == []


# --- the jobs' spool -----------------------------------------------------------------------------


def step_line(n: int) -> str:
    return json.dumps({"event": "step", "step": n, "loss": 1 / (n + 1), "tokens_per_s": 1e3})


def job_stream(name: str) -> str:
    return f"hyperpod-kit/jobs/{name}/{INSTANCE}"


@needs_root
def test_spool_files_ship_once_each_to_their_own_stream(node: Node) -> None:
    node.job("1234.jsonl", step_line(1) + "\n" + step_line(2) + "\n")
    node.job("1235.jsonl", step_line(7) + "\n")
    ok(node.ship(*SPOOL))
    assert node.shipped(job_stream("1234")) == [step_line(1), step_line(2)]
    assert node.shipped(job_stream("1235")) == [step_line(7)]
    for call in node.calls():
        argv = call["argv"]
        assert argv[argv.index("--log-group-name") + 1] == GROUP
    assert {f"{JOBS}/1234.jsonl", f"{JOBS}/1235.jsonl"} <= set(node.sources())

    ok(node.ship(*SPOOL))
    assert node.calls() == [], "nothing new, nothing sent"
    node.job("1234.jsonl", step_line(3) + "\n" + '{"event": "st')  # a restart appends
    ok(node.ship(*SPOOL))
    assert node.shipped(job_stream("1234")) == [step_line(3)]
    assert [c["argv"][5] for c in node.calls()] == ["put-log-events"]
    node.job("1234.jsonl", 'ep"}\n')
    ok(node.ship(*SPOOL))
    assert node.shipped(job_stream("1234")) == ['{"event": "step"}']


def test_spool_links_fifos_root_files_and_other_names_are_never_read(node: Node) -> None:
    secret = node.write("/etc/secret", "SECRET-ROOT\n")  # the test's user: root, as on a node
    node.job("keep.jsonl", "")  # makes the folder
    spool = node.path(JOBS)
    (spool / "1.jsonl").symlink_to(secret)
    (spool / "2.jsonl").symlink_to(spool / "keep.jsonl")
    elsewhere = node.write("/home/alice/data.jsonl", "SECRET-HARDLINKED\n")
    if AS_ROOT:
        os.chown(elsewhere, JOB_UID, JOB_UID)
    os.link(elsewhere, spool / "3.jsonl")
    os.mkfifo(spool / "4.jsonl")
    (spool / "5.jsonl").mkdir()
    (spool / "root.jsonl").write_text("SECRET-ROOT-OWNED\n")  # the shipper's own user's
    (spool / "notes.txt").write_text("SECRET-NAME\n")
    (spool / ".hidden.jsonl").write_text("SECRET-NAME\n")
    (spool / "x.jsonl.1").write_text("SECRET-NAME\n")
    for name in ("notes.txt", ".hidden.jsonl", "x.jsonl.1"):
        if AS_ROOT:
            os.chown(spool / name, JOB_UID, JOB_UID)

    result = ok(node.ship(*SPOOL, timeout=30))  # a FIFO opened without O_NONBLOCK would hang
    assert "SECRET" not in json.dumps(node.calls())
    assert node.calls() == []
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 2, result.stderr
    assert f"{node.path(JOBS)}/3.jsonl has 2 links" in warnings[0] + warnings[1]
    assert f"{node.path(JOBS)}/root.jsonl is owned by uid {os.geteuid()}" in result.stderr
    assert "not read" in warnings[0] and "not read" in warnings[1]
    # Refused files keep no place: they are refused again (and reported) each run.
    assert not [k for k in node.sources() if k.startswith(JOBS) and k != f"{JOBS}/keep.jsonl"]
    assert secret.read_text() == "SECRET-ROOT\n"


def test_a_spool_file_swapped_for_a_link_or_a_fifo_after_listing_is_refused(tmp_path: Path) -> None:
    """What the folder listing (lstat) would have skipped, met when the file is opened: the
    shipper's reader does not follow the link, does not block on the FIFO, and says why."""
    secret = tmp_path / "secret"
    secret.write_text("SECRET\n")
    (tmp_path / "1.jsonl").symlink_to(secret)
    os.mkfifo(tmp_path / "2.jsonl")
    code = (
        "import json, sys\n"
        "from importlib.machinery import SourceFileLoader\n"
        "from importlib.util import module_from_spec, spec_from_loader\n"
        "loader = SourceFileLoader('shipper', sys.argv[1])\n"
        "module = module_from_spec(spec_from_loader('shipper', loader))\n"
        "loader.exec_module(module)\n"
        "for path in sys.argv[2:]:\n"
        "    lines, warnings = module.new_lines(path, {}, 0, strict=True)\n"
        "    print(json.dumps([[x.message for x in lines], warnings]))\n"
    )
    paths = [str(tmp_path / "1.jsonl"), str(tmp_path / "2.jsonl")]
    done = subprocess.run(
        [PYTHON, "-c", code, str(SHIPPER), *paths],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    link, fifo = (json.loads(x) for x in done.stdout.splitlines())
    assert link == [[], [f"{paths[0]} is a symbolic link: not read"]]
    assert fifo == [[], [f"{paths[1]} is not a regular file: not read"]]


@needs_root
def test_at_most_max_spool_files_a_run_the_newest_first(node: Node) -> None:
    count = MAX_SPOOL_FILES + 2
    base = 1_900_000_000
    for n in range(count):
        node.job(f"{n}.jsonl", step_line(n) + "\n", mtime_s=base + n)
    node.job("old.jsonl", "", mtime_s=base - 10)  # nothing new in it: it does not count
    (node.state / "streams").write_text("".join(job_stream(str(n)) + "\n" for n in range(count)))
    result = ok(node.ship(*SPOOL))
    assert "2 more spool files with new lines wait for the next run" in result.stderr
    first = {n for n in range(count) if node.shipped(job_stream(str(n)))}
    assert first == set(range(2, count))
    result = ok(node.ship(*SPOOL))
    assert "wait" not in result.stderr
    assert node.shipped(job_stream("0")) == [step_line(0)]
    assert node.shipped(job_stream("1")) == [step_line(1)]
    assert len(node.calls()) == 2


@needs_root
def test_a_failed_call_leaves_the_spool_for_the_next_run(node: Node) -> None:
    node.job("1.jsonl", step_line(1) + "\n", mtime_s=1_900_000_000)
    node.job("2.jsonl", step_line(2) + "\n", mtime_s=1_900_000_001)
    (node.state / "offline").write_text("")
    result = node.ship(*SPOOL)
    assert result.returncode == 1 and "offsets kept" in result.stderr
    assert len(node.calls()) == 1, "after a failed call the other files wait"
    (node.state / "offline").unlink()
    ok(node.ship(*SPOOL))
    assert node.shipped(job_stream("1")) == [step_line(1)]
    assert node.shipped(job_stream("2")) == [step_line(2)]


@needs_root
def test_a_removed_spool_file_is_forgotten_and_sources_are_kept(node: Node) -> None:
    node.append(HEALTH, health_line(0) + "\n")
    node.append(LIFECYCLE, "provisioned\n")
    job = node.job("77.jsonl", step_line(1) + "\n")
    ok(node.ship(*SPOOL))
    assert set(node.sources()) == {HEALTH, LIFECYCLE, f"{JOBS}/77.jsonl"}
    job.unlink()
    node.path(HEALTH).unlink()
    ok(node.ship(*SPOOL))
    assert node.calls() == []
    assert set(node.sources()) == {HEALTH, LIFECYCLE}
    node.job("77.jsonl", step_line(2) + "\n")  # the same name again: a new file, from its start
    ok(node.ship(*SPOOL))
    assert node.shipped(job_stream("77")) == [step_line(2)]


def test_a_missing_spool_folder_is_no_error_and_the_stream_must_name_the_file(
    node: Node,
) -> None:
    ok(node.ship(*SPOOL))
    assert node.calls() == []
    result = node.ship("--spool", f"{JOBS}=hyperpod-kit/jobs/{{instance_id}}")
    assert result.returncode == 2 and "{name}" in result.stderr


def test_the_shipper_parses_as_python_38() -> None:
    assert_node_python(SHIPPER)
    assert SHIPPER.read_text().startswith("#!/usr/bin/env python3\n")
