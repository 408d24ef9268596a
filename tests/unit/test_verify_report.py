"""`hyperpod-kit verify`'s report (hyperpod_kit/verify/): records parsed from JSON Lines (a bad
line is `SOURCE:LINE: reason`, exit 2), judged against the tests' own floors table
(tests/data/verify/floors.json: pass, below, no-floor, error), the slowest pair and node named,
the exit codes, the JSON document, the PNG pictures, and the one line without matplotlib. The
command runs in-process (`main`) on local files (`--results`); the log group is
tests/integration/test_verify_report_cloudwatch.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.cli.main import main
from hyperpod_kit.outputs import MARKER, VERIFY, read_marker
from hyperpod_kit.verify import floors as floors_module
from hyperpod_kit.verify.floors import FloorsError, load_floors, node_floor
from hyperpod_kit.verify.judge import Report, judge
from hyperpod_kit.verify.records import (
    AllReduce,
    End,
    Fsx,
    Line,
    NodeCheck,
    RecordError,
    Run,
    Scheduling,
    Studio,
    UnknownRunError,
    lines_of,
    parse,
    pick,
)
from hyperpod_kit.verify.render import PICTURES_NEED, document, table
from tests import verify_runs as runs

PNG = b"\x89PNG\r\n\x1a\n"
DEFAULT = Path(__file__).resolve().parents[1].parent / "environments" / "default.yaml"


def judged(rows: list[dict[str, Any]], run: str | None = None) -> Report:
    results = pick(parse(lines_of(runs.jsonl(rows), "results.jsonl")), run)
    return judge(results, load_floors(runs.FLOORS))


def verdicts(report: Report, check: str) -> dict[str, str]:
    return {r.subject: r.verdict for r in report.rows if r.check == check}


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`main()` in `tmp_path`, judged against the tests' floors table."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(floors_module, "FLOORS_FILE", runs.FLOORS)
    return tmp_path


# --- records -----------------------------------------------------------------------------------


def test_every_record_type_is_parsed_into_its_dataclass() -> None:
    records = parse(lines_of(runs.jsonl(runs.records()), "r.jsonl"))
    kinds = [type(r).__name__ for r in records]
    assert kinds.count("NodeCheck") == 4 and kinds.count("AllReduce") == 7  # all + 6 pairs
    start = next(r for r in records if isinstance(r, Run))
    assert start.groups[0].instance_type == "ml.p5.48xlarge" and start.groups[0].count == 4
    assert start.fsx is not None and start.fsx.provisioned_mb_s == 1200.0
    node = next(r for r in records if isinstance(r, NodeCheck))
    assert (node.node, node.gpus, node.efa_devices, node.errors) == ("ip-10-1-0-1", 8, 32, ())
    pair = next(r for r in records if isinstance(r, AllReduce) and r.scope == "pair")
    assert pair.subject == "ip-10-1-0-1 <-> ip-10-1-0-2" and len(pair.rows) == 11
    assert pair.at(1 << 30) is not None and pair.at(1 << 30).busbw_gb_s == pytest.approx(380.0)  # type: ignore[union-attr]
    fsx = next(r for r in records if isinstance(r, Fsx))
    assert fsx.write_mb_s == 1150.0 and len(fsx.per_node) == 4
    assert any(isinstance(r, Scheduling) and r.state == "COMPLETED" for r in records)
    assert any(isinstance(r, Studio) and r.mode == "0700" for r in records)
    assert any(isinstance(r, End) and r.seconds == 600.0 for r in records)


def test_blank_lines_and_repeated_records_are_skipped() -> None:
    rows = runs.records()
    text = runs.jsonl(rows[:3]) + "\n  \n" + runs.jsonl(rows[:3])
    assert len(parse(lines_of(text, "r.jsonl"))) == 3


GOOD = json.dumps(runs.records()[0])
NODE = runs.records()[1]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        (json.dumps({**NODE, "run": "yesterday"}), 'run is "yesterday", not a run id'),
        (json.dumps({**NODE, "type": "gpu"}), 'type is "gpu", not one of run, node,'),
        (
            json.dumps({k: v for k, v in NODE.items() if k != "gpus"}),
            "node record: gpus is missing",
        ),
        (json.dumps({**NODE, "gpus": "8"}), 'node record: gpus is "8", not a whole number'),
        (json.dumps({**NODE, "gpus": True}), "node record: gpus is true, not a whole number"),
        (json.dumps({**NODE, "efa_devices": -1}), "node record: efa_devices is -1, below 0"),
        (json.dumps({**runs.records()[6], "nodes": ["a", "b", "c"]}), "a pair's nodes are 3"),
        (
            json.dumps({**runs.records()[6], "rows": [{"size_bytes": 1, "algbw_gb_s": 1}]}),
            "allreduce record: rows[0].busbw_gb_s is missing",
        ),
        (
            '{"run": "verify-20261129T080000Z", "type": "end", "finished": "x", "seconds": NaN}',
            "end record: seconds is not a finite number",
        ),
    ],
    ids=[
        "not-json",
        "array",
        "run-id",
        "type",
        "missing",
        "string",
        "bool",
        "negative",
        "pair",
        "row",
        "nan",
    ],
)
def test_a_bad_line_is_named_by_source_and_line(line: str, reason: str) -> None:
    lines = [
        Line("results.jsonl", 1, GOOD),
        Line("results.jsonl", 2, ""),
        Line("results.jsonl", 3, line),
    ]
    assert parse(lines[:2])  # its good neighbours parse
    with pytest.raises(RecordError) as e:
        parse(lines)
    assert str(e.value).startswith("results.jsonl:3: ")
    assert reason in str(e.value)


def test_the_newest_run_is_picked_unless_one_is_named() -> None:
    records = parse(lines_of(runs.jsonl(runs.records() + runs.older()), "r.jsonl"))
    assert pick(records).run == runs.RUN  # newest, though written first
    older = pick(records, runs.OLDER)
    assert older.run == runs.OLDER and older.allreduce == () and len(older.nodes) == 4
    assert older.runs == (runs.OLDER, runs.RUN)
    with pytest.raises(UnknownRunError, match="no records of run verify-20200101T000000Z"):
        pick(records, "verify-20200101T000000Z")
    with pytest.raises(UnknownRunError, match="no records of any run"):
        pick([])


# --- floors ------------------------------------------------------------------------------------


def test_floors_are_looked_up_by_type_and_node_count(tmp_path: Path) -> None:
    floors = load_floors(runs.FLOORS)
    assert floors.margin == 0.9 and floors.checked == "2026-11-29"
    assert floors.allreduce_floor("ml.p5.48xlarge", 2).busbw_gb_s == 300.0  # type: ignore[union-attr]
    assert floors.allreduce_floor("ml.p5.48xlarge", 4).source == "T2"  # type: ignore[union-attr]
    assert floors.allreduce_floor("ml.p5.48xlarge", 17) is None  # beyond every row
    assert floors.allreduce_floor("ml.g5.8xlarge", 2) is None  # no row for the type
    assert floors.allreduce_floor(None, 2) is None
    # GPUs and EFA come from instance_types.json, not the floors table
    p5 = node_floor("ml.p5.48xlarge")
    assert p5 is not None and (p5.gpus, p5.efa_devices) == (8, 32)
    trn = node_floor("ml.trn1.32xlarge")
    assert trn is not None and trn.gpus is None  # Trainium: not GPUs
    cpu = node_floor("ml.m5.xlarge")
    assert cpu is not None and cpu.gpus == 0
    assert node_floor("ml.nonexistent.type") is None
    # a missing table has no rows; a broken one is refused with its key
    assert load_floors(tmp_path / "missing.json").allreduce == ()
    bad = tmp_path / "bad.json"
    table = json.loads(runs.FLOORS.read_text())
    table["allreduce"][0]["source"] = "S9"
    bad.write_text(json.dumps(table))
    with pytest.raises(FloorsError, match=r"allreduce\[0\]\.source 'S9' is not a key"):
        load_floors(bad)
    table["allreduce"][0] |= {"source": "T1", "busbw_gb_s": 0}
    bad.write_text(json.dumps(table))
    with pytest.raises(FloorsError, match=r"busbw_gb_s is 0, not a number above 0"):
        load_floors(bad)


def test_the_packaged_floors_table_loads() -> None:
    floors = load_floors()
    assert floors.file == "verify_floors.json"
    assert 0 < floors.margin <= 1
    for row in floors.allreduce:
        assert row.source in floors.sources


# --- judging -----------------------------------------------------------------------------------


def test_pass_below_and_no_floor_against_the_floors() -> None:
    report = judged(runs.records())
    allreduce = verdicts(report, "allreduce")
    assert allreduce["all nodes (4)"] == "pass"  # 360 >= 0.9 x 320
    slow = {s: v for s, v in allreduce.items() if runs.SLOW in s}
    assert len(slow) == 3 and set(slow.values()) == {"below"}  # 150 < 0.9 x 300
    fast = {s: v for s, v in allreduce.items() if runs.SLOW not in s and "<->" in s}
    assert len(fast) == 3 and set(fast.values()) == {"pass"}
    row = next(r for r in report.rows if r.subject == "all nodes (4)" and r.check == "allreduce")
    assert (row.floor, row.source, row.unit) == (320.0, "floors.json T2", "GB/s")
    assert row.threshold == pytest.approx(288.0)  # margin x floor
    assert set(verdicts(report, "node.gpus").values()) == {"pass"}
    assert set(verdicts(report, "node.efa").values()) == {"pass"}
    assert verdicts(report, "fsx.write") == {"all nodes (4)": "pass"}  # 1150 >= 0.9 x 1200
    assert verdicts(report, "fsx.metadata") == {"all nodes (4)": "no-floor"}
    assert verdicts(report, "scheduling") == {"partition gpu": "pass"}
    assert verdicts(report, "studio") == {"alice": "pass"}
    assert report.verdict == "below" and report.exit_code == 1
    assert report.counts["below"] == 3 and report.counts["error"] == 0


def test_the_margin_is_the_edge_of_below() -> None:
    edge = judged(runs.records(fsx_write=1080.0))  # exactly 0.9 x 1200
    assert verdicts(edge, "fsx.write") == {"all nodes (4)": "pass"}
    under = judged(runs.records(fsx_write=1079.0))
    assert verdicts(under, "fsx.write") == {"all nodes (4)": "below"}


def test_a_fast_run_passes_and_exits_0() -> None:
    report = judged(runs.records(slow_pair_peak=380.0))
    assert report.verdict == "pass" and report.exit_code == 0
    assert report.counts["below"] == report.counts["error"] == 0


def test_no_floor_is_never_a_guess() -> None:
    local = judged(runs.records(local=True, slow_pair_peak=10.0))  # no instance type
    assert set(verdicts(local, "allreduce").values()) == {"no-floor"}
    assert set(verdicts(local, "node.gpus").values()) == {"no-floor"}
    assert local.exit_code == 0  # nothing judged below: no floor is no failure
    g5 = [
        {**r, "groups": [{**r["groups"][0], "instance_type": "ml.g5.8xlarge"}]}
        if r["type"] == "run"
        else r
        for r in runs.records()
    ]
    other = judged(g5)  # a type the floors table has no row for
    rows = [r for r in other.rows if r.check == "allreduce"]
    assert {r.verdict for r in rows} == {"no-floor"}
    assert "no floor for ml.g5.8xlarge with 2 nodes" in rows[-1].detail
    no_fsx = [{**r, "fsx": None} if r["type"] == "run" else r for r in runs.records()]
    assert verdicts(judged(no_fsx), "fsx.read") == {"all nodes (4)": "no-floor"}


def test_errors_a_failed_node_and_an_unfinished_run() -> None:
    rows = runs.records(slow_pair_peak=380.0, end=False)
    rows[2] = {**rows[2], "gpus": 7, "errors": ["nvidia-smi: GPU 3 fell off the bus"]}
    rows.insert(-1, {"run": runs.RUN, "type": "error", "check": "fsx", "message": "no /fsx"})
    rows.append(
        {
            **rows[-1],
            "type": "studio",
            "user": "bob",
            "path": "/fsx/bob",
            "exists": True,
            "owner_uid": 0,
            "expected_uid": 2002,
            "mode": "0755",
            "expected_mode": "0700",
        }
    )
    report = judged(rows)
    assert verdicts(report, "node.gpus")["ip-10-1-0-2"] == "below"
    assert verdicts(report, "node")["ip-10-1-0-2"] == "error"
    gpus = next(r for r in report.rows if r.check == "node.gpus" and r.subject == "ip-10-1-0-2")
    assert (gpus.measured, gpus.threshold) == (7, 8)  # counts: the floor itself, no margin
    assert "below: node.gpus ip-10-1-0-2: 7 GPUs under 8 GPUs; ml.p5.48xlarge" in table(report)
    assert verdicts(report, "fsx") == {"could not run": "error"}
    assert verdicts(report, "run") == {"end": "error"}
    assert verdicts(report, "studio") == {"alice": "pass", "bob": "below"}
    bob = next(r for r in report.rows if r.subject == "bob")
    assert bob.detail == "owner uid 0, not 2002; mode 0755, not 0700"
    assert report.verdict == "error" and report.exit_code == 1
    fewest = next(w for w in report.worst if w.kind == "gpus")
    assert fewest.subject == "ip-10-1-0-2" and "7 (others up to 8)" in fewest.line


def test_the_slowest_pair_and_node_are_named() -> None:
    report = judged(runs.records())
    pair = next(w for w in report.worst if w.kind == "pair")
    assert runs.SLOW in pair.subject and pair.measured == pytest.approx(150.0)
    assert report.slowest_pair is not None and runs.SLOW in report.slowest_pair.nodes
    node = next(w for w in report.worst if w.kind == "node-pairs")
    assert node.subject == runs.SLOW and node.measured == pytest.approx(150.0)
    writer = next(w for w in report.worst if w.kind == "fsx-write")
    assert writer.subject == "ip-10-1-0-2"  # 40 MB/s under the others
    assert not any(w.kind == "fsx-read" for w in report.worst)  # all alike: none named
    text = table(report)
    assert f"slowest pair: ip-10-1-0-1 <-> {runs.SLOW}, 150.0 GB/s" in text
    assert f"slowest node by its pairs: {runs.SLOW}" in text
    assert (
        f"below: allreduce ip-10-1-0-1 <-> {runs.SLOW}: 150.0 GB/s under 270.0 GB/s "
        "(0.9 x 300.0 GB/s); at 1 GiB, ml.p5.48xlarge"
    ) in text


def test_the_table_is_aligned_and_printable() -> None:
    rows = runs.records()
    rows[1] = {**rows[1], "node": "evil\x1b[2Jnode"}
    text = table(judged(rows))
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("CHECK"))
    body = [
        line
        for line in lines[head:]
        if line.split()[0] in ("CHECK", "node.gpus", "allreduce", "fsx.write", "studio")
    ]
    columns = [line.index(word) for line in body[:1] for word in ("MEASURED", "VERDICT")]
    for line in body[1:]:  # every row's figures start under the header's columns
        assert line[columns[1] - 2 : columns[1]] == "  ", line
    assert "\x1b" not in text and "evil\\x1b[2Jnode" in text
    assert text.splitlines()[-1].startswith("verdict: BELOW (")


def test_the_json_document_is_stable() -> None:
    doc = document(judged(runs.records()))
    assert list(doc) == [
        "run",
        "verdict",
        "exit_code",
        "counts",
        "floors",
        "rows",
        "worst",
        "compared_size_bytes",
        "allreduce",
        "fsx",
        "nodes",
    ]
    assert doc["run"]["id"] == runs.RUN and doc["run"]["cluster"] == "hp-prod"
    assert (doc["verdict"], doc["exit_code"]) == ("below", 1)
    assert set(doc["counts"]) == {"pass", "below", "no-floor", "error"}
    row = doc["rows"][0]
    assert list(row) == [
        "check",
        "subject",
        "measured",
        "floor",
        "unit",
        "verdict",
        "source",
        "detail",
        "threshold",
    ]
    assert doc["floors"]["margin"] == 0.9 and set(doc["floors"]["sources"]) == {"T1", "T2"}
    every = doc["allreduce"][0]
    assert every["scope"] == "all" and every["instance_type"] == "ml.p5.48xlarge"
    assert every["peak_busbw_gb_s"] == pytest.approx(360.0) and len(every["rows"]) == 11
    assert doc["fsx"][0]["provisioned_mb_s"] == 1200.0 and len(doc["fsx"][0]["per_node"]) == 4
    assert json.loads(json.dumps(doc)) == doc


# --- the command -------------------------------------------------------------------------------


def test_report_from_a_local_file(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = runs.write(cli / "results.jsonl", runs.older() + runs.records())
    assert main(["verify", "--results", str(results)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"run {runs.RUN}, cluster hp-prod")
    assert "slowest pair:" in out and "verdict: BELOW" in out
    assert err.strip() == "wrote verify-report: report.json, allreduce.png, fsx.png"
    folder = cli / "verify-report"
    marker = read_marker(folder)
    assert marker is not None and marker["kind"] == VERIFY and marker["run"] == runs.RUN
    assert json.loads((folder / "report.json").read_text())["verdict"] == "below"
    for name in ("allreduce.png", "fsx.png"):
        data = (folder / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    # the older run, by name: it passed; the report folder (ours) is replaced
    assert main(["verify", "--results", str(results), "--run", runs.OLDER, "--format", "json"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["run"]["id"] == runs.OLDER
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "report.json"]  # no pictures


def test_a_damaged_line_is_one_line_and_exit_2(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = runs.jsonl(runs.records())
    lines = text.splitlines()
    lines[4] = lines[4][:40]  # cut short, as a full disk leaves it
    (cli / "r.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["verify", "--results", "r.jsonl"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("r.jsonl:5: not JSON (")
    assert "Hint: " in err and "Traceback" not in err
    assert not (cli / "verify-report").exists()


@pytest.mark.parametrize(
    ("text", "args", "expected"),
    [
        (
            runs.jsonl(runs.records()),
            ["--run", "verify-20200101T000000Z"],
            "r.jsonl: no records of run verify-20200101T000000Z (runs found: "
            "verify-20261129T080000Z). Hint: leave --run out",
        ),
        ("", [], "r.jsonl: no records of any run. Hint: each line"),
    ],
    ids=["unknown-run", "empty"],
)
def test_no_such_run_is_one_line(
    cli: Path, capsys: pytest.CaptureFixture[str], text: str, args: list[str], expected: str
) -> None:
    (cli / "r.jsonl").write_text(text)
    assert main(["verify", "--results", "r.jsonl", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(expected), err


def test_without_matplotlib_one_line_and_the_rest(
    cli: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    runs.write(cli / "r.jsonl", runs.records(slow_pair_peak=380.0))
    assert main(["verify", "--results", "r.jsonl"]) == 0
    out, err = capsys.readouterr()
    assert "verdict: PASS" in out
    said = [line for line in err.splitlines() if "matplotlib" in line]
    assert said == [f"verify-report: report.json only; {PICTURES_NEED}"]
    assert "pip install 'hyperpod-kit[verify]'" in said[0]
    folder = cli / "verify-report"
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "report.json"]


def test_a_users_folder_is_never_replaced(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs.write(cli / "r.jsonl", runs.records())
    mine = cli / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    assert main(["verify", "--results", "r.jsonl", "--out", "mine"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("mine: is a folder with files that hyperpod-kit did not write")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_without_report_or_results_it_prints_the_command_for_the_cluster(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command with the trainer stack's image (as `jobs` renders it), then how to judge."""
    from hyperpod_kit.config.environment import load_environment
    from hyperpod_kit.stacks.trainer import trainer_image_uri

    image = trainer_image_uri(load_environment(DEFAULT).config)
    assert main(["verify", str(DEFAULT), "-q"]) == 0
    out, _ = capsys.readouterr()
    assert f"  hyperpod-kit-verify --image {image}\n" in out
    assert f"  hyperpod-kit verify {DEFAULT} --report\n" in out
    assert not (cli / "verify-report").exists()


def test_an_eks_environment_is_one_line_exit_2(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(DEFAULT.parent / "eks.yaml"), "-q"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "the verify suite runs on Slurm clusters" in err and "Traceback" not in err


def test_help_names_the_flags_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    out = capsys.readouterr().out
    for word in (
        "--report",
        "--results",
        "--run",
        "--format",
        "--out",
        "exit codes",
        "hyperpod-kit-verify",
        "hyperpod-kit[verify]",
    ):
        assert word in out


def test_scheduling_expects_the_files_count_and_names_the_unavailable_nodes() -> None:
    rows = runs.records()
    (scheduling,) = [r for r in rows if r["type"] == "scheduling"]
    scheduling["expected"], scheduling["nodes"] = 3, runs.NODES[:3]
    scheduling["unavailable"] = [{"node": runs.SLOW, "state": "down*", "reason": "not responding"}]
    results = pick(parse(lines_of(runs.jsonl(rows), "results.jsonl")), None)
    floors = load_floors(runs.FLOORS)
    # without the file: the partition's own count, but the down node is still named
    (row,) = [r for r in judge(results, floors).rows if r.check == "scheduling"]
    assert (
        row.verdict == "pass" and f"unavailable: {runs.SLOW} (down*: not responding)" in row.detail
    )
    # with the file's count (`verify FILE --report`): one node short is below
    (row,) = [r for r in judge(results, floors, counts={"gpu": 4}).rows if r.check == "scheduling"]
    assert row.verdict == "below" and row.floor == 4
    assert "on 3 of 4 nodes (the environment file's count; the partition had 3)" in row.detail


def test_efa_not_in_use_is_below_on_a_type_that_has_it() -> None:
    """libfabric's efa provider on every node (fi_info) and NCCL's network in the all-reduce:
    anything else on an EFA type means TCP sockets at a fraction of the fabric."""
    assert set(verdicts(judged(runs.records()), "node.provider").values()) == {"pass"}
    assert verdicts(judged(runs.records()), "allreduce.net") == {"all nodes (4)": "pass"}
    rows = runs.records()
    for record in rows:
        if record["type"] == "node" and record["node"] == runs.SLOW:
            record["efa_provider"] = None
        if record["type"] == "allreduce" and record["scope"] == "all":
            record["net_provider"] = None
    report = judged(rows)
    provider = verdicts(report, "node.provider")
    assert provider[runs.SLOW] == "below" and list(provider.values()).count("pass") == 3
    assert verdicts(report, "allreduce.net") == {"all nodes (4)": "below"}
    row = next(r for r in report.rows if r.check == "allreduce.net")
    assert row.detail == "NCCL's network: no efa provider; ml.p5.48xlarge has EFA"
