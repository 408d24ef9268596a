"""operations.slurm_jobs: its parsers on output captured from Debian's Slurm 22.05 (LocalSlurm,
without and with accounting), and SlurmJobs on a scripted runner: what it asks, and what it makes
of the answers (accounting found out once, unknown jobs, a refused overwrite, path_map)."""

from __future__ import annotations

import io
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hyperpod_kit.operations.job_model import JobError
from hyperpod_kit.operations.slurm_jobs import (
    SACCT_FIELDS,
    SlurmJobs,
    accounting_disabled,
    group_sacct,
    local_to_node,
    node_to_local,
    parse_sacct,
    parse_sbatch,
    parse_scontrol_jobs,
    parse_sinfo,
    parse_squeue,
    record_from_sacct,
    record_from_scontrol,
    sacct_fields,
)

# -- captured: Slurm 22.05.8 (Debian), LocalSlurm on loopback ------------------------------------

# `squeue -h -t all -o '%i|%T|%u|%P|%D|%r|%V|%S|%e|%j'`: job 2 asks for 2 nodes of a 1-node
# partition and was cancelled pending; the name "tiny|job" holds the separator.
SQUEUE = (
    "2|CANCELLED|root|compute|2|PartitionConfig|2026-11-29T11:01:17|2026-11-29T11:01:19|"
    "2026-11-29T11:01:19|tiny|job\n"
    "1|COMPLETED|root|compute|1|None|2026-11-29T11:01:17|2026-11-29T11:01:20|"
    "2026-11-29T11:01:26|tiny|job\n"
)
# A requeued job waiting on its begin time: squeue prints its end as NONE.
SQUEUE_REQUEUED = (
    "1|PENDING|root|compute|1|BeginTime|2026-11-29T11:03:32|2026-11-29T11:05:33|NONE|train\n"
)
SQUEUE_PENDING = "1|PENDING|root|compute|1|None|2026-11-29T11:00:57|N/A|N/A|tiny|job\n"

# `scontrol show job -o 1` (completed) and `-o 2` (2 nodes, pending: NumNodes=2-2).
SCONTROL_DONE = (
    "JobId=1 JobName=tiny|job UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=10000 Nice=0 "
    "Account=root QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:06 TimeLimit=UNLIMITED "
    "TimeMin=N/A SubmitTime=2026-11-29T11:01:17 EligibleTime=2026-11-29T11:01:17 "
    "AccrueTime=2026-11-29T11:01:17 StartTime=2026-11-29T11:01:20 EndTime=2026-11-29T11:01:26 "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T11:01:20 "
    "Scheduler=Main Partition=compute AllocNode:Sid=localhost:20138 ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* "
    "CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) "
    "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) "
    "Command=/fsx/alice/w/job.sh WorkDir=/fsx/alice/w StdErr=/fsx/alice/w/slurm-1.out "
    "StdIn=/dev/null StdOut=/fsx/alice/w/slurm-1.out Power= \n"
)
SCONTROL_PENDING_2 = (
    "JobId=2 JobName=tiny|job UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 "
    "Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=PartitionConfig "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 "
    "TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T11:00:57 "
    "EligibleTime=2026-11-29T11:00:57 AccrueTime=Unknown StartTime=Unknown EndTime=Unknown "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T11:00:57 "
    "Scheduler=Main Partition=compute AllocNode:Sid=localhost:20138 ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList= NumNodes=2-2 NumCPUs=2 NumTasks=2 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=2M,node=2,billing=2 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=/tmp/w/job.sh WorkDir=/tmp/w StdErr=/tmp/w/o_tiny|job_2.log "
    "StdIn=/dev/null StdOut=/tmp/w/o_tiny|job_2.log Power= \n"
)
SCONTROL_NONE = "No jobs in the system\n"
SCONTROL_INVALID = "slurm_load_jobs error: Invalid job id specified\n"
ACCOUNTING_OFF = "Slurm accounting storage is disabled\n"
# `sacct --helpformat` of 22.05 (its first lines; no StdOut field).
HELPFORMAT_2205 = (
    "Account             AdminComment        AllocCPUS           AllocNodes         \n"
    "ExitCode            Flags               GID                 Group              \n"
    "JobID               JobIDRaw            JobName             Layout             \n"
    "User                UserCPU             WCKey               WCKeyID            \n"
    "WorkDir            \n"
)
# A newer sacct lists StdIn/StdOut/StdErr among its fields (24.11's `sacct --helpformat`).
HELPFORMAT_2411 = HELPFORMAT_2205 + "StdErr              StdIn               StdOut             \n"
FIELDS_2205 = (*SACCT_FIELDS, "JobName")
# `sacct -n -P -D -o <FIELDS_2205> -j 1`: requeued once (`scontrol requeue`), then completed:
# one row per run with -D, each with its batch step.
SACCT_REQUEUED = (
    "1|REQUEUED|root|compute|1|None|2026-11-29T11:03:29|2026-11-29T11:03:31|2026-11-29T11:03:32|"
    "0:0|vm|/tmp/slurmcap/w3|train\n"
    "1.batch|CANCELLED|||1||2026-11-29T11:03:31|2026-11-29T11:03:31|2026-11-29T11:03:32|0:15|vm||"
    "batch\n"
    "1|COMPLETED|root|compute|1|None|2026-11-29T11:03:32|2026-11-29T11:03:34|2026-11-29T11:03:39|"
    "0:0|vm|/tmp/slurmcap/w3|train\n"
    "1.batch|COMPLETED|||1||2026-11-29T11:03:34|2026-11-29T11:03:34|2026-11-29T11:03:39|0:0|vm||"
    "batch\n"
)
# `sacct -n -P -D -S now-7days ...`: a job cancelled pending ("CANCELLED by 0": by uid 0) with
# a name holding the separator, and a finished job with an srun step.
SACCT_RECENT = (
    "2|CANCELLED by 0|root|compute|2|PartitionConfig|2026-11-29T11:01:17|2026-11-29T11:01:19|"
    "2026-11-29T11:01:19|0:0|None assigned|/tmp/w|tiny|job\n"
    "3|COMPLETED|root|compute|1|None|2026-11-29T11:02:58|2026-11-29T11:03:00|2026-11-29T11:03:04|"
    "0:0|vm|/tmp/slurmcap/w2|train\n"
    "3.batch|COMPLETED|||1||2026-11-29T11:03:00|2026-11-29T11:03:00|2026-11-29T11:03:04|0:0|vm||"
    "batch\n"
    "3.0|COMPLETED|||1||2026-11-29T11:03:00|2026-11-29T11:03:00|2026-11-29T11:03:00|0:0|vm||echo\n"
)


# -- parsers -------------------------------------------------------------------------------------


def test_squeue_lines_name_last_with_its_separator() -> None:
    cancelled, completed = parse_squeue(SQUEUE)
    assert (cancelled.id, cancelled.state, cancelled.name, cancelled.nodes) == (
        "2", "CANCELLED", "tiny|job", 2)  # fmt: skip
    assert cancelled.reason == "PartitionConfig" and cancelled.where == "compute"
    assert (completed.reason, completed.started, completed.ended) == (
        None, "2026-11-29T11:01:20", "2026-11-29T11:01:26")  # fmt: skip
    (pending,) = parse_squeue(SQUEUE_PENDING)
    assert (pending.started, pending.ended, pending.user) == (None, None, "root")
    (requeued,) = parse_squeue(SQUEUE_REQUEUED)  # a pending job's "end" is no end
    assert (requeued.state, requeued.reason, requeued.ended) == ("PENDING", "BeginTime", None)
    assert parse_squeue("") == []
    with pytest.raises(JobError, match="squeue printed a line"):
        parse_squeue("1|RUNNING|root\n")


def test_scontrol_job_fields_and_record() -> None:
    jobs = parse_scontrol_jobs(SCONTROL_DONE + SCONTROL_PENDING_2)
    assert sorted(jobs) == ["1", "2"]
    done = record_from_scontrol(jobs["1"])
    assert (done.id, done.name, done.state, done.user, done.nodes) == (
        "1", "tiny|job", "COMPLETED", "root", 1)  # fmt: skip
    assert done.output == "/fsx/alice/w/slurm-1.out" and done.exit_code == "0:0"
    assert (done.reason, done.ended) == (None, "2026-11-29T11:01:26")
    assert done.details["Restarts"] == "0" and done.details["WorkDir"] == "/fsx/alice/w"
    pending = record_from_scontrol(jobs["2"])
    assert (pending.nodes, pending.reason, pending.started) == (2, "PartitionConfig", None)
    assert pending.output == "/tmp/w/o_tiny|job_2.log"  # patterns expanded by slurmctld
    assert "Account" not in pending.details and "NodeList" not in pending.details  # (null), ""
    assert parse_scontrol_jobs(SCONTROL_NONE) == {}


def test_sacct_rows_history_and_requeues() -> None:
    assert sacct_fields(HELPFORMAT_2205) == FIELDS_2205
    assert sacct_fields(HELPFORMAT_2411)[-2:] == ("StdOut", "JobName")
    rows = parse_sacct(SACCT_REQUEUED, FIELDS_2205)
    record = record_from_sacct("1", group_sacct(rows)["1"])
    assert (record.state, record.started, record.exit_code) == (
        "COMPLETED",
        "2026-11-29T11:03:34",
        "0:0",
    )  # fmt: skip (the newest run)
    assert [r["State"] for r in record.history] == ["REQUEUED", "CANCELLED", "COMPLETED",
                                                     "COMPLETED"]  # fmt: skip
    assert record.output is None  # 22.05's sacct keeps no output path
    recent = group_sacct(parse_sacct(SACCT_RECENT, FIELDS_2205))
    assert sorted(recent) == ["2", "3"] and len(recent["3"]) == 3
    cancelled = record_from_sacct("2", recent["2"])
    assert (cancelled.state, cancelled.name, cancelled.nodes) == ("CANCELLED", "tiny|job", 2)
    with pytest.raises(JobError, match="no job 4"):
        record_from_sacct("4", recent["3"])
    with pytest.raises(JobError, match="sacct printed a line"):
        parse_sacct("1|COMPLETED\n", FIELDS_2205)


def test_sacct_stdout_patterns_are_expanded() -> None:
    fields = sacct_fields(HELPFORMAT_2411)
    line = "|".join(["7", "RUNNING", "bob", "gpu", "2", "None", "t", "t", "Unknown", "0:0",
                     "n[1-2]", "/fsx/bob", "/fsx/bob/%x_%j.%u.out", "pre|train"])  # fmt: skip
    record = record_from_sacct("7", parse_sacct(line, fields))
    assert record.output == "/fsx/bob/pre|train_7.bob.out" and record.ended is None


def test_sbatch_sinfo_and_accounting_answers() -> None:
    assert parse_sbatch("1\n") == "1" and parse_sbatch("42;hyperpod\n") == "42"
    with pytest.raises(JobError, match="no job id"):
        parse_sbatch("sbatch: error: Batch job submission failed\n")
    capacity = parse_sinfo("mixed|1|compute*\nidle|3|compute*\nidle|4|debug\n", None)
    assert capacity is not None and (capacity.free, capacity.total) == (3, 4)
    assert "compute" in capacity.detail and "mixed 1" in capacity.detail
    down = parse_sinfo("idle*|2|gpu\ndown*|1|gpu\nidle|1|gpu\n", "gpu")  # * not responding
    assert down is not None and (down.free, down.total) == (1, 4)
    assert parse_sinfo("idle|1|compute*\n", "nope") is None
    assert parse_sinfo("", None) is None
    assert accounting_disabled(1, ACCOUNTING_OFF)
    assert not accounting_disabled(0, HELPFORMAT_2205)


def test_path_map_both_ways(tmp_path: Path) -> None:
    mapping = ("/fsx/alice", tmp_path / "fsx")
    (tmp_path / "fsx" / "runs").mkdir(parents=True)
    assert (
        node_to_local("/fsx/alice/runs/slurm-1.out", mapping) == tmp_path / "fsx/runs/slurm-1.out"
    )
    assert node_to_local("/fsx/alice", mapping) == tmp_path / "fsx"
    assert node_to_local("/fsx/alice2/x.out", mapping) == Path("/fsx/alice2/x.out")  # not under
    assert node_to_local("/fsx/alice/x.out", None) == Path("/fsx/alice/x.out")
    assert local_to_node(tmp_path / "fsx" / "runs", mapping) == "/fsx/alice/runs"
    with pytest.raises(JobError, match="not under"):
        local_to_node(tmp_path, mapping)


# -- SlurmJobs on a scripted runner ---------------------------------------------------------------


class Script:
    """A runner answering each command by its first words; records what was run."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        for key in sorted(self.answers, key=len, reverse=True):
            if " ".join(argv).startswith(key):
                code, out, err = self.answers[key]
                return subprocess.CompletedProcess(argv, code, out, err)
        raise AssertionError(f"unexpected command {argv}")

    def ran(self, prefix: str) -> list[list[str]]:
        return [c for c in self.calls if " ".join(c).startswith(prefix)]


def _jobs(answers: dict[str, tuple[int, str, str]], **kw: Any) -> tuple[SlurmJobs, Script]:
    script = Script(answers)
    runner: Callable[..., subprocess.CompletedProcess[str]] = script
    return SlurmJobs(runner=runner, **kw), script


def test_without_accounting_a_forgotten_job_is_one_clear_line() -> None:
    jobs, script = _jobs({
        "sacct --helpformat": (1, "", ACCOUNTING_OFF),
        "scontrol show job -o 5": (1, "", SCONTROL_INVALID),
    })  # fmt: skip
    with pytest.raises(JobError) as raised:
        jobs.job("5")
    message = str(raised.value)
    assert message.startswith("no job 5: ") and "Invalid job id specified" in message
    assert "MinJobAge" in message and "\n" not in message
    with pytest.raises(JobError, match="no job 5"):
        jobs.cancel("5")
    assert len(script.ran("sacct")) == 1  # found out once
    assert script.ran("scancel") == []
    with pytest.raises(JobError, match="a Slurm job id is a number"):
        jobs.job("12; rm -rf /")
    assert len(script.calls) == 3


def test_with_accounting_a_forgotten_job_comes_from_sacct(tmp_path: Path) -> None:
    jobs, script = _jobs({
        "sacct --helpformat": (0, HELPFORMAT_2205, ""),
        "scontrol show job -o 1": (1, "", SCONTROL_INVALID),
        "sacct -n -P -D": (0, SACCT_REQUEUED, ""),
    })  # fmt: skip
    record = jobs.job("1")
    assert record.state == "COMPLETED" and len(record.history) == 4
    assert script.ran("sacct -n")[0][-2:] == ["-j", "1"]
    none, _ = _jobs({
        "sacct --helpformat": (0, HELPFORMAT_2205, ""),
        "scontrol show job -o 9": (1, "", SCONTROL_INVALID),
        "sacct -n -P -D": (0, "", ""),
    })  # fmt: skip
    with pytest.raises(JobError, match=r"^no job 9: neither slurmctld nor accounting"):
        none.job("9")


def test_jobs_merges_squeue_scontrol_and_sacct_newest_first(tmp_path: Path) -> None:
    out = tmp_path / "fsx" / "w"
    out.mkdir(parents=True)
    (out / "slurm-1.out").write_text(
        'torchrun noise\n{"event": "step", "step": 3, "loss": 2.5, "tokens_per_s": 100.0}\n'
        '{"event": "checkpoint", "step": 2}\n'
    )
    jobs, script = _jobs(
        {
            "sacct --helpformat": (0, HELPFORMAT_2205, ""),
            "squeue": (0, SQUEUE_PENDING.replace("PENDING", "COMPLETED"), ""),
            "scontrol show job -o": (0, SCONTROL_DONE, ""),
            "sacct -n -P -D": (0, SACCT_RECENT, ""),
        },
        user="alice",
        path_map=("/fsx/alice", tmp_path / "fsx"),
    )
    listed = jobs.jobs()
    assert [r.id for r in listed] == ["3", "2", "1"]
    assert script.ran("squeue")[0][-2:] == ["-u", "alice"]
    assert script.ran("sacct -n")[0][-2:] == ["-u", "alice"]
    one = listed[2]
    assert one.output == str(out / "slurm-1.out")
    assert one.progress is not None and (one.progress.step, one.progress.last_checkpoint) == (3, 2)
    assert listed[1].state == "CANCELLED" and listed[1].progress is None
    everyone, script = _jobs({
        "squeue": (0, "", ""), "sacct -n -P -D": (0, "", ""),
        "sacct --helpformat": (0, HELPFORMAT_2205, ""),
    })  # fmt: skip
    assert everyone.jobs(everyone=True) == []
    assert "--me" not in script.ran("squeue")[0] and script.ran("sacct -n")[0][-1] == "-a"
    mine, script = _jobs({"squeue": (0, "", "")}, accounting=False)
    assert mine.jobs() == [] and script.ran("squeue")[0][-1] == "--me"
    assert script.ran("sacct") == []


def test_submit_writes_once_and_refuses_another_file(tmp_path: Path) -> None:
    local = tmp_path / "fsx"
    (local / "runs").mkdir(parents=True)
    jobs, script = _jobs({"sbatch": (0, "12;hyperpod\n", "")},
                         path_map=("/fsx/alice", local), accounting=False)  # fmt: skip
    assert jobs.submit("#!/bin/bash\necho 1\n", filename="a.sbatch", folder=local / "runs") == "12"
    assert script.ran("sbatch")[0] == [
        "sbatch",
        "--parsable",
        "--chdir=/fsx/alice/runs",
        str(local / "runs" / "a.sbatch"),
    ]
    assert (local / "runs" / "a.sbatch").read_text() == "#!/bin/bash\necho 1\n"
    # The same text again is the same job file; a different one is refused, and not written.
    assert jobs.submit("#!/bin/bash\necho 1\n", filename="a.sbatch", folder=local / "runs") == "12"
    with pytest.raises(JobError, match="exists and is not this job"):
        jobs.submit("#!/bin/bash\necho 2\n", filename="a.sbatch", folder=local / "runs")
    assert (local / "runs" / "a.sbatch").read_text() == "#!/bin/bash\necho 1\n"
    with pytest.raises(JobError, match="is not a folder"):
        jobs.submit("x", filename="b.sbatch", folder=local / "missing")
    with pytest.raises(JobError, match="not under"):
        jobs.submit("x", filename="b.sbatch", folder=tmp_path)
    assert len(script.ran("sbatch")) == 2
    refused, _ = _jobs({"sbatch": (1, "", "sbatch: error: invalid partition specified: x\n")},
                       accounting=False)  # fmt: skip
    with pytest.raises(JobError, match="sbatch exited 1: sbatch: error: invalid partition"):
        refused.submit("y", filename="c.sbatch", folder=local)


def test_logs_without_follow_and_a_missing_client(tmp_path: Path) -> None:
    out = tmp_path / "slurm-1.out"
    line = SCONTROL_DONE.replace("/fsx/alice/w/slurm-1.out", str(out))
    jobs, _ = _jobs({"scontrol show job -o 1": (0, line, "")}, accounting=False)
    with pytest.raises(JobError, match="has no output at"):
        jobs.logs("1", follow=False, out=io.StringIO())
    out.write_bytes("héllo\nwörld\n".encode())
    copied = io.StringIO()
    jobs.logs("1", follow=True, out=copied, poll_s=0)  # it has ended: copied once, at once
    assert copied.getvalue() == "héllo\nwörld\n"

    def missing(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(JobError, match="squeue not found"):
        SlurmJobs(runner=missing, accounting=False).jobs()


def test_an_array_task_and_a_finished_job_without_an_output_path() -> None:
    task = SCONTROL_DONE.replace("JobId=1 ", "JobId=13 ArrayJobId=12 ArrayTaskId=3 ")
    jobs, _ = _jobs({"scontrol show job -o 12_3": (0, task, "")}, accounting=False)
    assert jobs.job("12_3").id == "13"
    gone, _ = _jobs({
        "sacct --helpformat": (0, HELPFORMAT_2205, ""),
        "scontrol show job -o 1": (1, "", SCONTROL_INVALID),
        "sacct -n -P -D": (0, SACCT_REQUEUED, ""),
    })  # fmt: skip
    with pytest.raises(JobError, match=r"no longer tells its output .*ran in /tmp/slurmcap/w3$"):
        gone.logs("1", follow=False, out=io.StringIO())
