"""Recording fakes of the commands that the lifecycle scripts use to change a machine or call AWS.

The deploy rehearsal (`hyperpod-kit check --rehearse`) and the lifecycle sandbox tests run the node
scripts with these first on PATH. Each fake is this file, run as
``python3 fakes.py NAME ARGS...`` by a small wrapper named
NAME in a folder put first on PATH (see `install_fakes`); the read-only ones that the scripts call
often (getent, stat, mountpoint, ...) are a bash script instead, because starting python for each
made a sandbox run take seconds. Every call is appended to
``$FAKE_STATE/calls.jsonl``. Fakes that change state keep it in the sandbox root the scripts write
under (``$FAKE_ROOT/etc/passwd``, ``/etc/group``, ``/etc/shadow``) or in ``$FAKE_STATE`` (owners of
files, SSM parameters, S3 objects). A fake asked to touch a path outside the sandbox fails loudly:
that is a script that forgot its ROOT prefix.

Knobs, as files in ``$FAKE_STATE``: ``ips`` (hostname -I), ``mounts`` (node paths that are mount
points; the ``mount`` fake adds its target, or fails with ``mount_fail``), ``active`` (systemd
units that are active), ``visudo_fail``, ``aws_fail`` (failures before success), ``apt_fail``
(same, for apt-get and apt-mark), ``aws_put_fail`` (only SSM writes fail), ``packages`` (the
packages dpkg knows as installed, one name a line; ``apt-mark hold`` keeps its holds in
``holds``), ``logrotate_fail`` (``logrotate -d`` refuses), ``ssm/<name>`` and
``s3/<bucket>/<key>`` (what AWS holds), ``slurmdbd_down`` (every sacctmgr call fails),
``prometheus_version`` (what an installed ``prometheus --version`` says), ``promtool_fail``;
CloudWatch
Logs events land in ``logs/<group>/<stream>.jsonl``, Slurm's accounts and associations in
``slurmdb.json``. ``runuser -u USER -- COMMAND...`` runs COMMAND as the sandbox's own user (the
user must be in the sandbox's /etc/passwd).

What AWS holds may live elsewhere, shared by several sandboxes (the rehearsal's world):
``$FAKE_AWS`` (default ``$FAKE_STATE``) holds what the actors wrote (``ssm/``, ``s3/``, ``logs/``)
and ``$FAKE_SEED`` (optional) what the deploy made so far (``ssm/``, ``s3/``, read after).
Every ``aws`` call is also appended to ``$FAKE_STATE/aws.jsonl`` with its exit status and the error
code AWS would have answered (``ParameterNotFound``, ``NoSuchKey``...).

Standard library only: it runs under the system python3, as an unprivileged user.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

# Commands that must never run during provisioning (nothing is fetched from GitHub; nothing runs
# through sudo, the scripts already are root): the fake records the call and fails.
FORBIDDEN = ("curl", "wget", "git", "sudo", "pip", "pip3")
FAKES = (
    "useradd", "groupadd", "usermod", "userdel", "chown", "systemd-tmpfiles", "apt-get", "apt",
    "dpkg", "visudo", "aws", "apt-mark", "dpkg-query", "logrotate", "sacctmgr", *FORBIDDEN,
)  # fmt: skip
# Programs a package brings: faked once the package is installed (`install_program`).
PACKAGE_PROGRAMS = {
    "logrotate": ("logrotate",),
    "prometheus": ("prometheus", "promtool"),
    "prometheus-node-exporter": ("prometheus-node-exporter",),
}
FAST_FAKES = (
    "getent", "stat", "mountpoint", "mount", "hostname", "systemctl", "sleep", "scontrol",
    "runuser",
)  # fmt: skip
# What a HyperPod node has besides (the rehearsal installs these too; the sandbox tests leave them
# out, to see how the scripts do without them): enroot and srun for a job's first lines, kubectl.
NODE_FAKES = ("enroot", "srun", "kubectl")

FAST_FAKE = r"""#!/bin/bash
# Read-only fakes in bash; see fakes.py. Usage: fast-fake NAME ARGS...
name=$1
shift
json="{\"cmd\": \"$name\", \"args\": ["
sep=""
for a in "$@"; do
  a=${a//\\/\\\\}
  a=${a//\"/\\\"}
  a=${a//$'\n'/\\n}
  a=${a//$'\t'/\\t}
  a=${a//$'\r'/\\r}
  json+="$sep\"$a\""
  sep=", "
done
printf '%s]}\n' "$json" >>"$FAKE_STATE/calls.jsonl"
in_sandbox() {
  case "$1" in
    "$FAKE_ROOT" | "$FAKE_ROOT"/*) ;;
    *) echo "fake: $1 is outside the sandbox $FAKE_ROOT (missing \$ROOT prefix?)" >&2; exit 99 ;;
  esac
}
case $name in
  getent)
    col=1
    [[ $2 =~ ^[0-9]+$ ]] && col=3
    awk -F: -v c="$col" -v k="$2" '$c == k { print; found = 1; exit } END { exit found ? 0 : 2 }' \
      "$FAKE_ROOT/etc/$1" 2>/dev/null || exit 2
    ;;
  stat)
    [[ $1 == -c && $# == 3 ]] || { echo "fake: only stat -c FORMAT PATH" >&2; exit 99; }
    fmt=$2 path=$3
    in_sandbox "$path"
    read -r uid gid mode <<<"$(/usr/bin/stat -c '%u %g %a' "$path")" || exit 1
    if [[ -f $FAKE_STATE/owners ]]; then
      while read -r p u g; do [[ $p == "$path" ]] && uid=$u gid=$g; done <"$FAKE_STATE/owners"
    fi
    fmt=${fmt//%u/$uid}
    fmt=${fmt//%g/$gid}
    echo "${fmt//%a/$mode}"
    ;;
  mountpoint)
    path=${!#}
    in_sandbox "$path"
    node=${path#"$FAKE_ROOT"}
    for m in $(cat "$FAKE_STATE/mounts" 2>/dev/null); do [[ $m == "${node:-/}" ]] && exit 0; done
    exit 32
    ;;
  mount)
    # mount ... SOURCE TARGET: the target becomes a mount point (knob `mount_fail`: it fails).
    path=${!#}
    in_sandbox "$path"
    [[ -e $FAKE_STATE/mount_fail ]] && exit 32
    printf ' %s' "${path#"$FAKE_ROOT"}" >>"$FAKE_STATE/mounts"
    ;;
  hostname)
    if [[ ${1:-} == -I ]]; then cat "$FAKE_STATE/ips" 2>/dev/null; echo; else echo fake-node; fi
    ;;
  systemctl)
    if [[ ${1:-} == is-active ]]; then
      for u in $(cat "$FAKE_STATE/active" 2>/dev/null); do [[ $u == "${!#}" ]] && exit 0; done
      exit 3
    fi
    ;;
  scontrol)
    # `show config`: knob scontrol_config (a HyperPod controller's, by default); `token`: a
    # made-up token for the user; anything else (update, show node...) succeeds silently.
    case "${1:-}" in
      show)
        if [[ ${2:-} == config ]]; then
          if [[ -f $FAKE_STATE/scontrol_config ]]; then cat "$FAKE_STATE/scontrol_config"; else
            printf '%s\n' 'ClusterName = cluster' 'SLURM_CONF = /opt/slurm/etc/slurm.conf' \
              'SLURM_VERSION = 24.11.5' 'SlurmctldHost[0] = ip-10-1-0-10(10.1.0.10)' \
              'SlurmctldPort = 6817' 'StateSaveLocation = /var/spool/slurmctld'
          fi
        fi
        ;;
      token) echo "SLURM_JWT=fake-token-for-${2#username=}" ;;
    esac
    ;;
  runuser)
    # runuser -u USER -- COMMAND...: COMMAND as the sandbox's own user (the user must exist).
    if [[ ${1:-} != -u || ${3:-} != -- || $# -lt 4 ]]; then
      echo "fake: only runuser -u USER -- COMMAND..." >&2
      exit 99
    fi
    awk -F: -v u="$2" '$1 == u { found = 1 } END { exit found ? 0 : 1 }' "$FAKE_ROOT/etc/passwd" ||
      { echo "runuser: user $2 does not exist" >&2; exit 1; }
    shift 3
    exec "$@"
    ;;
  enroot)
    # import -o|--output FILE URI: the squashfs appears; other verbs succeed.
    if [[ ${1:-} == import ]]; then
      out=""
      while (($#)); do [[ $1 == -o || $1 == --output ]] && out=$2; shift; done
      [[ -z $out ]] || echo "fake squashfs" >"$out"
    fi
    ;;
esac
exit 0
"""


def install_fakes(
    bin_dir: Path, python: str = "/usr/bin/python3", *, extra: tuple[str, ...] = ()
) -> None:
    """Write one wrapper per faked command into `bin_dir` (`extra`: more of the fast ones, e.g.
    NODE_FAKES), plus a copy of this module."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    module = bin_dir / "fakes.py"
    shutil.copyfile(__file__, module)
    fast = bin_dir / "fast-fake"
    fast.write_text(FAST_FAKE)
    fast.chmod(0o755)
    for name in (*FAKES, *FAST_FAKES, *extra):
        wrapper = bin_dir / name
        if name in FAST_FAKES or name in extra:
            wrapper.write_text(f'#!/bin/sh\nexec {fast} {name} "$@"\n')
        else:  # -S: no site-packages (quicker; the fakes need the standard library only)
            wrapper.write_text(f'#!/bin/sh\nexec {python} -S {module} {name} "$@"\n')
        wrapper.chmod(0o755)


ROOT = Path(os.environ.get("FAKE_ROOT", "/nonexistent-sandbox"))
STATE = Path(os.environ.get("FAKE_STATE", "/nonexistent-state"))
BIN = Path(os.environ.get("FAKE_BIN", "/nonexistent-bin"))
AWS = Path(os.environ.get("FAKE_AWS") or STATE)
SEED = Path(os.environ["FAKE_SEED"]) if os.environ.get("FAKE_SEED") else None


def held(kind: str, name: str) -> Path | None:
    """What AWS holds under `kind` (ssm, s3) at `name`: the actors' writes, then the deploy's."""
    for base in (AWS, SEED):
        if base is not None and (base / kind / name).is_file():
            return base / kind / name
    return None


def fail(message: str, code: int = 99) -> int:
    print(f"fake: {message}", file=sys.stderr)
    return code


def in_sandbox(path: str) -> Path:
    p = Path(path)
    if not p.is_absolute() or ROOT not in (p, *p.parents):
        raise SystemExit(fail(f"{path} is outside the sandbox {ROOT} (missing $ROOT prefix?)"))
    return p


def knob(name: str) -> str | None:
    path = STATE / name
    return path.read_text() if path.exists() else None


def take_failure(name: str) -> bool:
    """True (and one fewer) while the knob `name` counts failures still to happen."""
    text = knob(name)
    if not text or int(text) <= 0:
        return False
    (STATE / name).write_text(str(int(text) - 1))
    return True


def table(name: str) -> list[list[str]]:
    path = ROOT / "etc" / name
    if not path.exists():
        return []
    return [line.split(":") for line in path.read_text().splitlines() if line]


def write_table(name: str, rows: list[list[str]]) -> None:
    path = ROOT / "etc" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(":".join(r) + "\n" for r in rows))


def options(args: list[str], with_value: set[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in with_value:
            opts[a] = args[i + 1]
            i += 2
        elif a.startswith("-"):
            opts[a] = ""
            i += 1
        else:
            rest.append(a)
            i += 1
    return opts, rest


def owners() -> dict[str, list[int]]:
    """Owners the fake chown recorded: ``$FAKE_STATE/owners``, lines of "PATH UID GID"."""
    path = STATE / "owners"
    rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return {p: [int(u), int(g)] for p, u, g in rows}


def useradd(args: list[str]) -> int:
    o, rest = options(args, {"-u", "-g", "-d", "-s", "-c"})
    (name,) = rest
    rows = table("passwd")
    if any(r[0] == name for r in rows) or any(r[2] == o["-u"] for r in rows):
        return fail(f"useradd: {name} or uid {o['-u']} exists", 9)
    if not any(r[2] == o["-g"] for r in table("group")):
        return fail(f"useradd: group {o['-g']} does not exist", 6)
    rows.append([name, "x", o["-u"], o["-g"], o.get("-c", ""), o["-d"], o.get("-s", "/bin/sh")])
    write_table("passwd", rows)
    return 0


def groupadd(args: list[str]) -> int:
    o, (name,) = options(args, {"-g"})
    rows = table("group")
    if any(r[0] == name or r[2] == o["-g"] for r in rows):
        return fail(f"groupadd: {name} or gid {o['-g']} exists", 9)
    rows.append([name, "x", o["-g"], ""])
    write_table("group", rows)
    return 0


def usermod(args: list[str]) -> int:
    o, (name,) = options(args, {"-g", "--expiredate"})
    rows = table("passwd")
    if not any(r[0] == name for r in rows):
        return fail(f"usermod: user {name} does not exist", 6)
    if "-g" in o:
        for r in rows:
            if r[0] == name:
                r[3] = o["-g"]
        write_table("passwd", rows)
    if "--expiredate" in o:
        shadow = [r for r in table("shadow") if r[0] != name]
        shadow.append([name, o["--expiredate"]])
        write_table("shadow", sorted(shadow))
    return 0


def chown(args: list[str]) -> int:
    if any(a.startswith("-") for a in args):
        return fail(f"chown {args}: the scripts never chown with options (no -R)")
    spec, path = args
    user, _, group = spec.partition(":")
    uid = next((r[2] for r in table("passwd") if user in (r[0], r[2])), user)
    gid = next((r[2] for r in table("group") if group in (r[0], r[2])), group or uid)
    if not (uid.isdigit() and gid.isdigit()):
        return fail(f"chown: invalid user or group: {spec}", 1)
    target = in_sandbox(path)
    if not target.exists():
        return fail(f"chown: {path} does not exist", 1)
    found = owners()
    found[str(target)] = [int(uid), int(gid)]
    text = "".join(f"{p} {u} {g}\n" for p, (u, g) in sorted(found.items()))
    (STATE / "owners").write_text(text)
    return 0


def apt_get(args: list[str]) -> int:
    if take_failure("apt_fail"):
        return fail("apt-get: Could not get lock /var/lib/dpkg/lock-frontend", 100)
    if "install" in args:
        for deb in (a for a in args if a.endswith(".deb")):
            name = Path(deb).name
            if not Path(deb).is_file():
                return fail(f"apt-get: {deb} does not exist", 100)
            add_installed(name.split("_", 1)[0])
            if name.startswith("enroot"):
                enroot = BIN / "enroot"
                enroot.write_text("#!/bin/sh\nexit 0\n")
                enroot.chmod(0o755)
            elif "pyxis" in name:
                plugin = ROOT / "usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"
                plugin.parent.mkdir(parents=True, exist_ok=True)
                plugin.write_text("fake pyxis plugin\n")
            elif "pam" in name and "adopt" in name:
                module = ROOT / "lib/security/pam_slurm_adopt.so"
                module.parent.mkdir(parents=True, exist_ok=True)
                module.write_text("fake pam_slurm_adopt\n")
            for program in PACKAGE_PROGRAMS.get(name.split("_", 1)[0], ()):
                install_program(program)
        for package in (a for a in args if a in PACKAGE_PROGRAMS):  # by name, from the archive
            for program in PACKAGE_PROGRAMS[package]:
                install_program(program)
            add_installed(package)
    return 0


def add_installed(package: str) -> None:
    """dpkg knows `package` as installed from now on (knob packages)."""
    known = installed_packages()
    if package not in known:
        (STATE / "packages").write_text("".join(f"{p}\n" for p in [*known, package]))


def install_program(name: str) -> None:
    """A package that brings a command: the fake command, first on PATH from now on."""
    program = BIN / name
    program.write_text(f'#!/bin/sh\nexec {sys.executable} -S {BIN / "fakes.py"} {name} "$@"\n')
    program.chmod(0o755)


def holds() -> list[str]:
    path = STATE / "holds"
    return path.read_text().split() if path.exists() else []


def apt_mark(args: list[str]) -> int:
    """apt-mark [-o OPTION]... hold PKG... (needs the dpkg lock: knob apt_fail) and showhold."""
    while args[:1] == ["-o"]:
        args = args[2:]
    if args[:1] == ["showhold"]:
        print("\n".join(holds()))
        return 0
    if args[:1] != ["hold"] or len(args) < 2:
        return fail(f"apt-mark {args}: only hold PKG... and showhold are faked")
    if take_failure("apt_fail"):
        return fail("apt-mark: Could not get lock /var/lib/dpkg/lock-frontend", 100)
    known = installed_packages()
    for package in args[1:]:
        if package not in known:
            return fail(f"apt-mark: package {package} is not installed", 100)
    (STATE / "holds").write_text("".join(f"{p}\n" for p in sorted({*holds(), *args[1:]})))
    for package in args[1:]:
        print(f"{package} set on hold.")
    return 0


def installed_packages() -> list[str]:
    text = knob("packages")
    return text.split() if text else []


def dpkg_query(args: list[str]) -> int:
    """dpkg-query -W -f=FORMAT NAME...: the installed packages among NAMEs (knob packages),
    FORMAT with ${Package} and ${db:Status-Abbrev}; exit 1 when a name is unknown."""
    fmt = next((a.removeprefix("-f=") for a in args if a.startswith("-f=")), "${Package}\n")
    names = [a for a in args if not a.startswith("-")]
    if "-W" not in args:
        return fail(f"dpkg-query {args}: only -W is faked")
    known, held, rc = installed_packages(), holds(), 0
    for name in names:
        if name not in known:
            print(f"dpkg-query: no packages found matching {name}", file=sys.stderr)
            rc = 1
            continue
        status = "hi " if name in held else "ii "
        text = fmt.replace("${Package}", name).replace("${db:Status-Abbrev}", status)
        sys.stdout.write(text.replace("\\n", "\n"))
    return rc


def logrotate(args: list[str]) -> int:
    """logrotate -d FILE: accepts the file unless the knob logrotate_fail is set."""
    if "-d" not in args:
        return fail("logrotate: only -d (check, change nothing) runs in a sandbox")
    return 1 if knob("logrotate_fail") is not None else 0


def prometheus(args: list[str]) -> int:
    """prometheus --version: the version of knob prometheus_version (Ubuntu 22.04's by default),
    as Prometheus prints it."""
    if args[:1] != ["--version"]:
        return fail("prometheus: only --version runs in a sandbox (the service is systemd's)")
    version = (knob("prometheus_version") or "2.31.2+ds1").strip()
    print(f"prometheus, version {version} (branch: debian/sid, revision: {version})")
    return 0


def promtool(args: list[str]) -> int:
    """promtool check config FILE: the file must exist and name a remote write (knob
    promtool_fail: it refuses)."""
    if args[:2] != ["check", "config"] or len(args) != 3:
        return fail(f"promtool {args}: only check config FILE is faked")
    path = in_sandbox(args[2])
    if knob("promtool_fail") is not None or "remote_write:" not in path.read_text():
        print(f"FAILED: {args[2]}", file=sys.stderr)
        return 1
    return 0


def visudo(args: list[str]) -> int:
    o, _ = options(args, {"-f"})
    if not Path(o["-f"]).is_file():
        return fail("visudo: no such file", 1)
    return 1 if knob("visudo_fail") is not None else 0


# Options of the aws CLI that take a value (global ones and those the scripts use).
# --- sacctmgr: Slurm's accounts and associations, as the teams' script uses them ----------------

SLURMDB = "slurmdb.json"  # in $FAKE_STATE: what slurmdbd holds


def _slurmdb() -> dict[str, Any]:
    path = STATE / SLURMDB
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    # A controller's database as HyperPod leaves it: the cluster (the scontrol fake's ClusterName)
    # and Slurm's root account and user, GPUs accounted.
    return {
        "clusters": ["cluster"],
        "accounts": {"root": {"organization": "root", "description": "default root account"}},
        "assocs": [
            {"cluster": "cluster", "account": "root", "user": "", "fairshare": "1",
             "grptres": "", "grpsubmit": "", "maxsubmit": ""},
            {"cluster": "cluster", "account": "root", "user": "root", "fairshare": "1",
             "grptres": "", "grpsubmit": "", "maxsubmit": ""},
        ],
        "defaults": {"root": "root"},
        "tres": ["cpu|", "mem|", "energy|", "node|", "billing|", "gres|gpu"],
    }  # fmt: skip


def _words(args: list[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """sacctmgr's words: the verbs and entity, `where` key=value pairs, `set` key=value pairs
    (keys lower case; before `set` without `where`, pairs count as where/with)."""
    head: list[str] = []
    where: dict[str, str] = {}
    sets: dict[str, str] = {}
    target = where
    for word in args:
        if word in ("where", "with"):
            target = where
        elif word == "set":
            target = sets
        elif "=" in word:
            key, _, value = word.partition("=")
            target[key.lower()] = value
        else:
            head.append(word)
    return head, where, sets


def _tres(current: str, change: str) -> str:
    """GrpTRES after `GrpTRES=change` (an item set to -1 is removed)."""
    items = dict(i.split("=", 1) for i in current.split(",") if i)
    for item in filter(None, change.split(",")):
        name, _, value = item.partition("=")
        if value == "-1":
            items.pop(name, None)
        else:
            items[name] = value
    return ",".join(f"{k}={v}" for k, v in sorted(items.items()))


_ASSOC_FIELDS = {"fairshare": "fairshare", "grptres": "grptres", "grpsubmitjobs": "grpsubmit",
                 "maxsubmitjobs": "maxsubmit"}  # fmt: skip


def _assoc(cluster: str, account: str, user: str, **values: str) -> dict[str, str]:
    row = {"cluster": cluster, "account": account, "user": user, "fairshare": "1",
           "grptres": "", "grpsubmit": "", "maxsubmit": ""}  # fmt: skip
    return row | values


def _show(db: dict[str, Any], entity: str, where: dict[str, str]) -> int:
    fields = [f.lower() for f in where.pop("format", "").split(",") if f]
    if entity == "cluster":
        rows = [{"cluster": c} for c in db["clusters"]]
    elif entity == "account":
        rows = [{"account": n, **a} for n, a in sorted(db["accounts"].items())]
    elif entity == "assoc":
        rows = [a for a in db["assocs"] if a["cluster"] == where.get("cluster", a["cluster"])]
    elif entity == "user":
        rows = [{"user": u, "defaultaccount": a} for u, a in sorted(db["defaults"].items())]
    elif entity == "tres":
        rows = [dict(zip(("type", "name"), t.split("|"), strict=True)) for t in db["tres"]]
    else:
        return fail(f"sacctmgr: show {entity}: not faked", 99)
    aliases = {"org": "organization", "descr": "description"}
    for row in rows:
        print("|".join(str(row.get(aliases.get(f, f), "")) for f in fields))
    return 0


def _add(db: dict[str, Any], entity: str, where: dict[str, str], cluster: str) -> int:
    name = where["name"]
    account = name if entity == "account" else where["account"]
    user = "" if entity == "account" else name
    if entity == "user" and account not in db["accounts"]:
        return fail(f" The account {account} doesn't exist", 1)
    if any((a["account"], a["user"], a["cluster"]) == (account, user, cluster)
           for a in db["assocs"]):  # fmt: skip
        return fail(" Nothing new added.", 1)
    if entity == "account":
        db["accounts"].setdefault(
            name,
            {"organization": where.get("organization", name),
             "description": where.get("description", name)},
        )  # fmt: skip
        row = _assoc(cluster, name, "", fairshare=where.get("fairshare", "1"),
                     grptres=_tres("", where.get("grptres", "")))  # fmt: skip
    else:
        row = _assoc(cluster, account, user)
        db["defaults"].setdefault(name, account)
    db["assocs"].append(row)
    return 0


def _modify(
    db: dict[str, Any], entity: str, where: dict[str, str], sets: dict[str, str], cluster: str
) -> int:
    if entity == "account":
        match = [a for a in db["assocs"] if a["account"] == where.get("name")
                 and not a["user"] and a["cluster"] == cluster]  # fmt: skip
    else:
        match = [a for a in db["assocs"] if a["user"] == where.get("name")
                 and a["account"] == where.get("account", a["account"])
                 and a["cluster"] == cluster]  # fmt: skip
    if not match:
        return fail(" Nothing modified", 1)
    for key, value in sets.items():
        if key == "defaultaccount":
            if not any(a["account"] == value for a in match):
                return fail(f" User does not have an association with account {value}", 1)
            db["defaults"][where["name"]] = value
            continue
        column = _ASSOC_FIELDS.get(key)
        if column is None:
            return fail(f"sacctmgr: modify {key}: not faked", 99)
        for assoc in match:
            if column == "grptres":
                assoc["grptres"] = _tres(assoc["grptres"], value)
            else:
                assoc[column] = "" if value == "-1" else value
    return 0


def sacctmgr(args: list[str]) -> int:
    """The subset of sacctmgr the teams' script uses, on a database in ``$FAKE_STATE``
    (knob ``slurmdbd_down``: every call fails as when slurmdbd does not answer)."""
    if knob("slurmdbd_down") is not None:
        return fail("sacctmgr: error: Sending PersistInit msg: Connection refused", 1)
    db = _slurmdb()
    opts = [a for a in args if a.startswith("-")]
    head, where, sets = _words([a for a in args if not a.startswith("-")])
    verb, entity = [*head, "", ""][:2]
    entity = {"association": "assoc", "associations": "assoc"}.get(entity, entity)
    if verb in ("show", "list"):
        return _show(db, entity, where)
    if "-i" not in opts and "--immediate" not in opts:
        return fail("sacctmgr: the scripts always change with -i (no prompt)", 99)
    cluster = where.get("cluster", db["clusters"][0])
    if verb == "add" and entity in ("account", "user"):
        rc = _add(db, entity, where, cluster)
    elif verb == "modify" and entity in ("account", "user"):
        rc = _modify(db, entity, where, sets, cluster)
    else:
        return fail(f"sacctmgr: {verb} {entity}: not faked", 99)
    if rc == 0:
        (STATE / SLURMDB).write_text(json.dumps(db, indent=1, sort_keys=True))
    return rc


AWS_VALUED = {
    "--region", "--name", "--query", "--output", "--type", "--value", "--log-group-name",
    "--log-stream-name", "--log-events", "--profile", "--endpoint-url", "--names",
    "--registry-id", "--repository-name", "--image-ids",
}  # fmt: skip


def aws(args: list[str]) -> int:
    """The aws CLI: every call recorded in aws.jsonl with its outcome."""
    error: list[str] = []
    rc = aws_answer(args, error)
    with (STATE / "aws.jsonl").open("a") as f:
        f.write(json.dumps({"args": args, "rc": rc, "error": error[0] if error else None}) + "\n")
    return rc


def aws_error(error: list[str], code: str, message: str, rc: int = 254) -> int:
    error.append(code)
    return fail(f"aws: An error occurred ({code}): {message}", rc)


def aws_answer(args: list[str], error: list[str]) -> int:  # noqa: PLR0911, PLR0912 - a branch per call
    o, rest = options(args, AWS_VALUED)
    if "--region" not in o and not (os.environ.get("AWS_DEFAULT_REGION") or
                                    os.environ.get("AWS_REGION")):  # fmt: skip
        return aws_error(error, "NoRegion", "every call names its region", 99)
    if take_failure("aws_fail") or (
        rest[:2] == ["ssm", "put-parameter"] and take_failure("aws_put_fail")
    ):
        error.append("EndpointConnectionError")
        return fail("aws: Could not connect to the endpoint URL", 255)
    if rest[:2] == ["ssm", "get-parameter"]:
        found = held("ssm", o["--name"].lstrip("/"))
        if found is None:
            return aws_error(error, "ParameterNotFound", f"{o['--name']} does not exist")
        print(found.read_text())
        return 0
    if rest[:2] == ["ssm", "put-parameter"]:
        path = AWS / "ssm" / o["--name"].lstrip("/")
        if held("ssm", o["--name"].lstrip("/")) is not None and "--overwrite" not in o:
            return aws_error(error, "ParameterAlreadyExists", o["--name"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(o["--value"])
        return 0
    if rest[:2] == ["ssm", "delete-parameter"]:
        path = AWS / "ssm" / o["--name"].lstrip("/")
        if not path.is_file():
            return aws_error(error, "ParameterNotFound", f"{o['--name']} does not exist")
        path.unlink()
        return 0
    if rest[:2] == ["s3", "cp"]:
        source, dest = rest[2], rest[3]
        if dest.startswith("s3://"):
            target = AWS / "s3" / dest.removeprefix("s3://")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            return 0
        found = held("s3", source.removeprefix("s3://"))
        if found is None:
            return aws_error(error, "NoSuchKey", f"{source} does not exist", 1)
        shutil.copyfile(found, dest)
        return 0
    if rest[:2] == ["ecr", "get-login-password"]:
        print("fake-ecr-password")
        return 0
    if rest[:2] == ["sts", "get-caller-identity"]:
        account = os.environ.get("FAKE_ACCOUNT", "123456789012")
        if o.get("--query") == "Account":
            print(account)
        else:
            print(json.dumps({"Account": account, "Arn": f"arn:aws:sts::{account}:assumed-role/x"}))
        return 0
    if rest[:2] == ["ecr", "batch-get-image"]:
        # A made-up digest, the same for the same image.
        name = f"{o.get('--repository-name')}:{o.get('--image-ids')}"
        digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        if "--query" in o:
            print(digest)
        else:
            print(json.dumps({"images": [{"imageId": {"imageDigest": digest}}], "failures": []}))
        return 0
    if rest[:1] == ["logs"]:
        return logs(rest[1], o, error)
    return aws_error(error, "NotFaked", f"aws {' '.join(rest[:2])}: not faked", 252)


def logs(action: str, o: dict[str, str], error: list[str]) -> int:
    """CloudWatch Logs: a stream is a file of events under logs/<group>/<stream>.jsonl (the
    group exists; a stream exists once created)."""
    stream = AWS / "logs" / o["--log-group-name"].lstrip("/") / f"{o['--log-stream-name']}.jsonl"
    if action == "create-log-stream":
        if stream.exists():
            return aws_error(error, "ResourceAlreadyExistsException", str(stream.name))
        stream.parent.mkdir(parents=True, exist_ok=True)
        stream.write_text("")
        return 0
    if action == "put-log-events":
        if not stream.exists():
            return aws_error(error, "ResourceNotFoundException", str(stream.name))
        events = json.loads(Path(o["--log-events"].removeprefix("file://")).read_text())
        with stream.open("a") as f:
            f.writelines(json.dumps(e) + "\n" for e in events)
        print(json.dumps({"nextSequenceToken": "1"}))
        return 0
    return aws_error(error, "NotFaked", f"aws logs {action}: not faked", 252)


def main(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "calls.jsonl").open("a") as f:
        f.write(json.dumps({"cmd": name, "args": args}) + "\n")
    if name in FORBIDDEN:
        return fail(f"{name} must not run during provisioning", 97)
    handlers = {
        "useradd": useradd, "groupadd": groupadd, "usermod": usermod, "chown": chown,
        "apt-get": apt_get, "visudo": visudo, "aws": aws, "apt-mark": apt_mark,
        "dpkg-query": dpkg_query, "logrotate": logrotate, "sacctmgr": sacctmgr,
        "prometheus": prometheus, "promtool": promtool,
    }  # fmt: skip
    handler = handlers.get(name)
    return handler(args) if handler else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
