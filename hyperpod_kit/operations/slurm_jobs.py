"""The job commands on a Slurm cluster: the client commands on PATH (a login node's, or in a Studio
space the lifecycle's wrappers in ~/.local/bin, which run the cluster's own client with the
user's token).

What is read, and where (Slurm 22.05 as Debian ships it, and 24.11 as HyperPod runs it; the
formats used are ones both print alike):

- `squeue -h -t all -o <FORMAT>`: the jobs slurmctld holds, pending, running and finished ones
  until MinJobAge seconds after their end; fields `|`-separated, the job name last (it may
  hold a `|`).
- `scontrol show job -o [ID]`: one job per line, `Key=Value ...`: its output file (StdOut, with
  Slurm's patterns already expanded), restarts, work folder. An id slurmctld no longer holds is
  "Invalid job id specified".
- `sacct -n -P -D ...` where the cluster keeps accounting: finished jobs after slurmctld forgot
  them, and every row of a job (its steps, each requeued run: `history`). Without accounting
  `sacct` says "Slurm accounting storage is disabled" and exits 1; that is found out once.
- `sinfo -h -o %T|%D|%P`: node states per partition (`capacity`).

The parsers are pure functions (tests/unit/test_slurm_jobs.py runs them on captured output).
Light: the standard library and `job_model` only.
"""

from __future__ import annotations

import codecs
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from hyperpod_kit.operations.job_model import (
    Capacity,
    JobError,
    JobRecord,
    output_lines,
    read_progress,
)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]

# squeue's fields, `|`-separated, the name last: id, state, user, partition, nodes, reason,
# submit, start and end time (22.05 and 24.11 print them alike).
SQUEUE_FORMAT = "%i|%T|%u|%P|%D|%r|%V|%S|%e|%j"
# sacct's fields, the name last; `StdOut` is added where sacct offers it (`--helpformat`: not
# 22.05's, newer ones').
SACCT_FIELDS = (
    "JobID", "State", "User", "Partition", "NNodes", "Reason", "Submit", "Start", "End",
    "ExitCode", "NodeList", "WorkDir",
)  # fmt: skip
SACCT_NAME = "JobName"
SACCT_WINDOW = "now-7days"  # how far back `jobs` looks in accounting
ACCOUNTING_DISABLED = "accounting storage is disabled"
# Job states after which the job will not run again (a requeued job goes back to PENDING).
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
     "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
)  # fmt: skip
# scontrol's fields a job's `details` keep (when set).
DETAIL_KEYS = (
    "Account", "QOS", "NodeList", "BatchHost", "Restarts", "Requeue", "RunTime", "TimeLimit",
    "WorkDir", "Command", "StdErr", "NumCPUs", "TRES",
)  # fmt: skip
UNSET = frozenset({"", "N/A", "NONE", "Unknown", "None", "(null)"})
COMMAND_TIMEOUT_S = 60.0
_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=")
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")


# -- parsers ---------------------------------------------------------------------------------------


def parse_key_values(line: str) -> dict[str, str]:
    """`Key=Value Key=Value ...` as `scontrol show ... -o` prints it; a value may hold spaces."""
    keys = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for match, following in zip(keys, [*keys[1:], None], strict=True):
        end = following.start() if following is not None else len(line)
        fields[match.group(1)] = line[match.end() : end].strip()
    return fields


def parse_scontrol_jobs(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o [ID]`: each job's fields by its id ("No jobs in the system" and
    other lines that are not a job are skipped)."""
    jobs: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("JobId="):
            fields = parse_key_values(line)
            jobs[fields["JobId"]] = fields
    return jobs


def _value(text: str | None) -> str | None:
    return None if text is None or text.strip() in UNSET else text.strip()


def _nodes(text: str | None) -> int | None:
    """NumNodes / %D / NNodes: "2", or "2-2" while pending (min-max)."""
    value = _value(text)
    if value is None:
        return None
    first = value.split("-")[0]
    return int(first) if first.isdigit() else None


def _user(text: str | None) -> str | None:
    """scontrol's UserId=alice(1001) -> alice."""
    value = _value(text)
    return value.split("(")[0] if value else None


def record_from_scontrol(fields: Mapping[str, str]) -> JobRecord:
    """A job from its `scontrol show job -o` fields (output: StdOut as the node writes it)."""
    return JobRecord(
        id=fields["JobId"],
        name=fields.get("JobName", ""),
        state=fields.get("JobState", "UNKNOWN"),
        user=_user(fields.get("UserId")),
        where=_value(fields.get("Partition")),
        nodes=_nodes(fields.get("NumNodes")),
        reason=_value(fields.get("Reason")),
        submitted=_value(fields.get("SubmitTime")),
        started=_value(fields.get("StartTime")),
        ended=_value(fields.get("EndTime")),
        exit_code=_value(fields.get("ExitCode")),
        output=_value(fields.get("StdOut")),
        details={k: fields[k] for k in DETAIL_KEYS if _value(fields.get(k)) is not None},
    )


def parse_squeue(text: str) -> list[JobRecord]:
    """`squeue -h -o SQUEUE_FORMAT`: one job a line; a name may hold the separator."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 9)
        if len(parts) != 10:
            raise JobError(f"squeue printed a line this toolkit cannot read: {line!r}")
        job_id, state, user, partition, nodes, reason, submit, start, end, name = parts
        started = _value(start)
        records.append(
            JobRecord(
                id=job_id, name=name, state=state, user=_value(user), where=_value(partition),
                nodes=_nodes(nodes), reason=_value(reason), submitted=_value(submit),
                started=started,
                # squeue prints a pending or running job's expected end (its time limit).
                ended=_value(end) if state in FINISHED else None,
            )
        )  # fmt: skip
    return records


def sacct_fields(helpformat: str) -> tuple[str, ...]:
    """The fields this sacct reads: SACCT_FIELDS, StdOut where `sacct --helpformat` lists it,
    the name last."""
    offered = set(helpformat.split())
    return (*SACCT_FIELDS, *(("StdOut",) if "StdOut" in offered else ()), SACCT_NAME)


def parse_sacct(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """`sacct -n -P -o FIELDS`: one dict a row; the last field (the name) may hold the `|`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(fields) - 1)
        if len(parts) != len(fields):
            raise JobError(f"sacct printed a line this toolkit cannot read: {line!r}")
        rows.append(dict(zip(fields, parts, strict=True)))
    return rows


def group_sacct(rows: Iterable[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """sacct's rows by job: the job's own rows (one per run: with `-D` a requeued job has one
    for each) and its steps' (`ID.batch`, `ID.extern`, `ID.0`)."""
    jobs: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        jobs.setdefault(row["JobID"].split(".")[0], []).append(row)
    return jobs


def _expand(path: str, job_id: str, name: str, user: str | None) -> str:
    """Slurm's filename patterns a stored StdOut may still hold (%j, %x, %u, %%)."""
    table = {"j": job_id, "x": name, "u": user or "%u", "%": "%"}
    return re.sub(r"%([jxu%])", lambda m: table[m.group(1)], path)


def record_from_sacct(job_id: str, rows: Sequence[Mapping[str, str]]) -> JobRecord:
    """A job from its sacct rows: the newest run of the job itself; all rows are its history.
    sacct's state may carry who cancelled it ("CANCELLED by 1001"): the state is the word."""
    own = [r for r in rows if r["JobID"] == job_id]
    if not own:
        raise JobError(f"no job {job_id} in sacct's rows")
    main = own[-1]
    name, user = main.get(SACCT_NAME, ""), _value(main.get("User"))
    output = _value(main.get("StdOut"))
    return JobRecord(
        id=job_id,
        name=name,
        state=(main.get("State") or "UNKNOWN").split()[0],
        user=user,
        where=_value(main.get("Partition")),
        nodes=_nodes(main.get("NNodes")),
        reason=_value(main.get("Reason")),
        submitted=_value(main.get("Submit")),
        started=_value(main.get("Start")),
        ended=_value(main.get("End")),
        exit_code=_value(main.get("ExitCode")),
        output=_expand(output, job_id, name, user) if output else None,
        history=tuple(dict(r) for r in rows),
        details={k: main[k] for k in ("NodeList", "WorkDir") if _value(main.get(k)) is not None},
    )


def parse_sbatch(text: str) -> str:
    """`sbatch --parsable`: "ID" or "ID;cluster"."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";")[0].strip()
    if not _JOB_ID.match(job_id):
        raise JobError(f"sbatch printed no job id: {text.strip()!r}")
    return job_id


def parse_sinfo(text: str, partition: str | None) -> Capacity | None:
    """`sinfo -h -o %T|%D|%P`: idle nodes of the partition (the default one, marked `*`, when
    None) against all of its nodes; None when no such partition. A state's suffix (`*` not
    responding, `~` powered off, `#` powering up, ...) makes it not free."""
    counts: dict[str, int] = {}
    default = None
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        state, count, name = parts
        if name.endswith("*"):
            name = name[:-1]
            default = name
        if name == (partition if partition is not None else default):
            counts[state] = counts.get(state, 0) + int(count)
    where = partition if partition is not None else default
    if not counts or where is None:
        return None
    free = counts.get("idle", 0)
    total = sum(counts.values())
    states = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
    return Capacity(free=free, total=total, detail=f"sinfo -p {where}: {states}")


def accounting_disabled(returncode: int, output: str) -> bool:
    """Whether `sacct` says this cluster keeps no accounting (22.05 prints "Slurm accounting
    storage is disabled" and exits 1; without a reachable slurmdbd it fails as well)."""
    return returncode != 0 or ACCOUNTING_DISABLED in output.lower()


def node_to_local(path: str, path_map: tuple[str, Path] | None) -> Path:
    """A path as the nodes see it, read here: under the map's node prefix -> under its local
    folder; others (and all without a map) as they are."""
    if path_map is None:
        return Path(path)
    prefix, local = path_map
    node, root = PurePosixPath(path), PurePosixPath(prefix)
    if node == root or root in node.parents:
        return local.joinpath(*node.relative_to(root).parts)
    return Path(path)


def local_to_node(folder: Path, path_map: tuple[str, Path] | None) -> str:
    """A folder here as the nodes see it (the inverse of `node_to_local`); JobError when the map
    does not reach it."""
    folder = folder.resolve()
    if path_map is None:
        return str(folder)
    prefix, local = path_map
    local = local.resolve()
    if folder != local and local not in folder.parents:
        raise JobError(
            f"{folder} is not under {local}, the folder the cluster's nodes see as {prefix}: "
            f"write the job under {local}"
        )
    return str(PurePosixPath(prefix, *folder.relative_to(local).parts))


def _numeric(job_id: str) -> tuple[int, int]:
    head, _, tail = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, int(tail) if tail.isdigit() else -1)


def _line(text: str) -> str:
    """A command's message as one line."""
    return " ".join(text.split())


# -- the scheduler ---------------------------------------------------------------------------------


class SlurmJobs:
    """`hyperpod-kit job` on a Slurm cluster (job_model.Scheduler)."""

    kind = "slurm"

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        path_map: tuple[str, Path] | None = None,
        accounting: bool | None = None,
        user: str | None = None,
        runner: Runner = subprocess.run,
    ) -> None:
        self.env = dict(env) if env is not None else None
        self.path_map = path_map
        self.user = user
        self._runner = runner
        self._accounting = accounting
        self._sacct_fields: tuple[str, ...] | None = None

    # -- commands ----------------------------------------------------------------------------------

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        try:
            return self._runner(
                list(argv), env=self.env, capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip
        except FileNotFoundError:
            raise JobError(
                f"{argv[0]} not found: this machine is no Slurm client (a login node, or a "
                "Studio space of the environment once its lifecycle has installed the client)"
            ) from None
        except subprocess.TimeoutExpired:
            raise JobError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:.0f} s") from None

    def _out(self, *argv: str) -> str:
        result = self._run(*argv)
        if result.returncode != 0:
            raise JobError(
                f"{argv[0]} exited {result.returncode}: "
                f"{_line(result.stderr or result.stdout) or '(no message)'}"
            )
        return result.stdout

    @property
    def accounting(self) -> bool:
        """Whether the cluster keeps accounting: as told, else asked once (`sacct --helpformat`
        also tells which fields this sacct has)."""
        if self._accounting is None or (self._accounting and self._sacct_fields is None):
            result = self._run("sacct", "--helpformat")
            disabled = accounting_disabled(result.returncode, result.stdout + result.stderr)
            if self._accounting is None:
                self._accounting = not disabled
            self._sacct_fields = sacct_fields(result.stdout if not disabled else "")
        return self._accounting

    def _sacct(self, *args: str) -> list[dict[str, str]]:
        if not self.accounting:
            return []
        assert self._sacct_fields is not None
        fields = self._sacct_fields
        return parse_sacct(self._out("sacct", "-n", "-P", "-D", "-o", ",".join(fields), *args),
                           fields)  # fmt: skip

    # -- Scheduler ---------------------------------------------------------------------------------

    def submit(self, text: str, *, filename: str, folder: Path) -> str:
        if not folder.is_dir():
            raise JobError(f"{folder} is not a folder: make it first (the job runs there)")
        if not filename or "/" in filename or filename in (".", ".."):
            raise JobError(f"{filename!r} is not a file name")
        script = folder / filename
        if script.exists():
            if not script.is_file() or script.read_text(errors="replace") != text:
                raise JobError(
                    f"{script} exists and is not this job: not overwritten (another filename, "
                    "or remove it)"
                )
        else:
            script.write_text(text)
        chdir = local_to_node(folder, self.path_map)
        return parse_sbatch(self._out("sbatch", "--parsable", f"--chdir={chdir}", str(script)))

    def jobs(self, *, everyone: bool = False) -> list[JobRecord]:
        who: tuple[str, ...] = () if everyone else ("-u", self.user) if self.user else ("--me",)
        live = parse_squeue(self._out("squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT, *who))
        known = parse_scontrol_jobs(self._scontrol_all()) if live else {}
        records: dict[str, JobRecord] = {}
        for record in live:
            fields = known.get(record.id)
            records[record.id] = record_from_scontrol(fields) if fields else record
        if self.accounting:
            scope = ("-a",) if everyone else ("-u", self.user) if self.user else ()
            for job_id, rows in group_sacct(self._sacct("-S", SACCT_WINDOW, *scope)).items():
                if not any(r["JobID"] == job_id for r in rows):
                    continue  # steps of a job whose own row is older than the window
                if job_id in records:
                    records[job_id] = replace(records[job_id], history=tuple(rows))
                else:
                    records[job_id] = record_from_sacct(job_id, rows)
        ordered = sorted(records.values(), key=lambda r: _numeric(r.id), reverse=True)
        return [self._with_progress(r) for r in ordered]

    def _scontrol_all(self) -> str:
        result = self._run("scontrol", "show", "job", "-o")
        return result.stdout if result.returncode == 0 else ""

    def job(self, job_id: str) -> JobRecord:
        return self._with_progress(self._job(job_id))

    def _job(self, job_id: str) -> JobRecord:
        job_id = job_id.strip()
        if not _JOB_ID.match(job_id):
            raise JobError(f"no job {job_id!r}: a Slurm job id is a number (e.g. 1234)")
        result = self._run("scontrol", "show", "job", "-o", job_id)
        if result.returncode == 0:
            found = parse_scontrol_jobs(result.stdout)
            # An array task's id (12_3) is shown under its own JobId: the one job printed.
            fields = found.get(job_id) or (next(iter(found.values())) if len(found) == 1 else None)
            if fields is not None:
                record = record_from_scontrol(fields)
                if self.accounting:
                    rows = group_sacct(self._sacct("-j", job_id)).get(job_id, [])
                    record = replace(record, history=tuple(rows))
                return record
        message = _line(result.stderr or result.stdout)
        if result.returncode != 0 and "invalid job id" not in message.lower():
            raise JobError(f"scontrol show job {job_id} exited {result.returncode}: {message}")
        if self.accounting:
            rows = group_sacct(self._sacct("-j", job_id)).get(job_id, [])
            if any(r["JobID"] == job_id for r in rows):
                return record_from_sacct(job_id, rows)
            raise JobError(f"no job {job_id}: neither slurmctld nor accounting (sacct) knows it")
        raise JobError(
            f"no job {job_id}: slurmctld does not know it ({message or 'no such job'}); without "
            "accounting a finished job is forgotten MinJobAge seconds after it ends"
        )

    def _output(self, record: JobRecord) -> Path | None:
        return node_to_local(record.output, self.path_map) if record.output else None

    def _with_progress(self, record: JobRecord) -> JobRecord:
        path = self._output(record)
        if path is None:
            return record
        return replace(record, output=str(path), progress=read_progress(output_lines(path)))

    def logs(self, job_id: str, *, follow: bool, out: TextIO, poll_s: float = 2.0) -> None:
        record = self._job(job_id)
        path = self._output(record)
        if path is None:
            workdir = record.details.get("WorkDir")
            raise JobError(
                f"job {job_id} ({record.state}): Slurm no longer tells its output file (this "
                "sacct keeps no path)" + (f"; it ran in {workdir}" if workdir else "")
            )
        tail = _Tail(path, out)
        if not follow:
            if not tail.copy() and record.state in FINISHED:
                raise JobError(f"job {job_id} ({record.state}) has no output at {path} here")
            return
        while True:
            tail.copy()
            try:
                state = self._job(job_id).state
            except JobError:
                state = "GONE"  # slurmctld forgot it: it has ended
            if state in FINISHED or state == "GONE":
                tail.copy()
                tail.finish()
                return
            time.sleep(poll_s)

    def cancel(self, job_id: str) -> None:
        record = self._job(job_id)
        if record.state in FINISHED:
            raise JobError(f"job {job_id} has already ended ({record.state}): nothing to cancel")
        self._out("scancel", job_id)

    def capacity(self, where: str | None) -> Capacity | None:
        args = ("-p", where) if where else ()
        result = self._run("sinfo", "-h", "-o", "%T|%D|%P", *args)
        if result.returncode != 0:
            return None
        return parse_sinfo(result.stdout, where)


class _Tail:
    """Copies what a file has beyond what was copied; starts over when the file got shorter
    (a requeued job's output is written anew)."""

    def __init__(self, path: Path, out: TextIO) -> None:
        self.path, self.out, self.position = path, out, 0
        self.decoder: Any = codecs.getincrementaldecoder("utf-8")("replace")

    def copy(self) -> bool:
        """Whether the file exists; copies its new bytes."""
        try:
            with self.path.open("rb") as stream:
                size = stream.seek(0, 2)
                if size < self.position:
                    self.position = 0
                    self.decoder.reset()
                stream.seek(self.position)
                data = stream.read()
        except OSError:
            return False
        self.position += len(data)
        if data:
            self.out.write(self.decoder.decode(data))
            self.out.flush()
        return True

    def finish(self) -> None:
        rest = self.decoder.decode(b"", final=True)
        if rest:
            self.out.write(rest)
            self.out.flush()
