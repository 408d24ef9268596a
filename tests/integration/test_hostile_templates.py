"""Every template of every example, rendered with hostile strings in every string it reads.

The strings (tests/hostile.py: quotes, `$(...)`, backticks, `;`, `&&`, globs, spaces, leading
dashes, `#`, `%`, line breaks, control characters, non-ASCII) are set directly on the values the
templates get (`LifecycleContext`, `JobContext`, Studio's `LifecycleSettings`), past the schema and
past the second checks in `lifecycle_context` / `job_context`, which would refuse most of them:
this proves the templates and their filters, not the validator. A value a filter must refuse (an
#SBATCH value with white space) fails the render, naming the template and the line.

Then every rendered shell file passes `bash -n` and shellcheck and has as many lines as the same
template rendered from plain values (a value that broke out of a line or a comment would add
one); `lib/settings.sh` is run and each variable holds exactly the hostile string; the sbatch script
is run with a recording `srun` (and `aws`) and each argument is exactly what the context said;
the systemd units keep their lines and their command lines read back exactly under systemd's
rules; the EKS manifest reads back as the data it was made from.

And, read from the templates' source: a shell word (`| q`) never sits inside "..." or '...'
(where bash would expand or keep its quotes), `| sbatch` only on #SBATCH lines and `| systemd` only
in units.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_kit.config.environment import load_environment
from hyperpod_kit.config.schema import EnvironmentConfig
from hyperpod_kit.constructs.studio import LifecycleSettings
from hyperpod_kit.jobs.context import JobContext, LocalRun, job_context
from hyperpod_kit.jobs.eks import pytorch_job, render_pytorch_job
from hyperpod_kit.jobs.image import given_image, trainer_stack_image
from hyperpod_kit.jobs.slurm import BUNDLED, TemplateError, render_sbatch
from hyperpod_kit.lifecycle import LifecycleContext, lifecycle_context, render_templates
from hyperpod_kit.paths import LIFECYCLE_DIR
from hyperpod_kit.templating import Rendered
from tests.conftest import REPO
from tests.hostile import HOSTILE, sbatch_arguments, systemd_words

EXAMPLES = sorted((REPO / "environments").glob("*.yaml"))
IMAGE_URI = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainer:abc"
IMAGE = given_image(IMAGE_URI)
# The trainer stack's image where the file names no account: completed on the node.
STACK_IMAGE = trainer_stack_image(
    "@ACCOUNT@.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:" + "a" * 64
)
needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None and os.environ.get("CI") != "true",
    reason="shellcheck not installed (.ci/run installs it)",
)
# Strings the templates branch on rather than print: which files there are (a Literal of two).
# Kept as they are: the orchestrator (it picks the template's branches), and the image, which
# `JobImage` itself refuses unless it is an image reference (no hostile text gets that far).
STRUCTURAL = {"orchestrator", "image"}


@cache
def _config(example: str) -> EnvironmentConfig:
    return load_environment(REPO / "environments" / f"{example}.yaml").config


def hostile(obj: Any, value: str) -> Any:
    """`obj` (a context dataclass) with every string in it, however deep, replaced by `value`;
    our own code (`Rendered`, e.g. the launcher) and the structural strings kept. The items of
    a list after the first get `value` and their index (instance groups keep distinct names)."""
    if isinstance(obj, Rendered):
        return obj
    if isinstance(obj, str):
        return value
    if isinstance(obj, Path):
        return Path("/tmp") / value.replace("\x00", "") if value else Path("/tmp")
    if isinstance(obj, (tuple, list)):
        items = [hostile(item, value + (str(i) if i else "")) for i, item in enumerate(obj)]
        return tuple(items) if isinstance(obj, tuple) else items
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: hostile(getattr(obj, f.name), value)
            for f in dataclasses.fields(obj)
            if f.name not in STRUCTURAL
        }
        return dataclasses.replace(obj, **changes)
    return obj


def _shell_files(files: dict[str, str]) -> list[str]:
    return sorted(
        p for p, text in files.items() if p.endswith(".sh") or text.startswith("#!/bin/bash")
    )


def _write(folder: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _bash_n(folder: Path, scripts: list[str]) -> None:
    for script in scripts:
        result = subprocess.run(
            ["bash", "-n", script], cwd=folder, capture_output=True, check=False
        )
        assert result.returncode == 0, (script, result.stderr.decode())


def _shellcheck(*runs: tuple[Path, list[str]]) -> None:
    """shellcheck (every severity, following `source`) on each folder's scripts, the folders
    at once."""
    runs = tuple((folder, scripts) for folder, scripts in runs if scripts)
    started = [
        (folder, subprocess.Popen(
            ["shellcheck", "-x", "--severity=style", *scripts],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
        for folder, scripts in runs
    ]  # fmt: skip
    for folder, process in started:
        output, _ = process.communicate()
        assert process.returncode == 0, f"{folder.name}:\n{output}"


def _same_lines(rendered: dict[str, str], plain: dict[str, str]) -> None:
    """No value added a line: each file has the lines of the same template with plain values."""
    for path, text in rendered.items():
        if path in plain:
            assert len(text.splitlines()) == len(plain[path].splitlines()), path


# --- the lifecycle upload ----------------------------------------------------------------------

SETTINGS_VARIABLES = [
    "HPK_ENVIRONMENT", "HPK_REGION", "HPK_CLUSTER_NAME", "HPK_LIFECYCLE_PARAMETER",
    "HPK_STATUS_PARAMETER_PREFIX", "HPK_STORAGE_PARAMETER", "HPK_ENROOT_PACKAGES", "HPK_FSX",
    "HPK_SSH_HOSTS", "HPK_CONTAINER_STORAGE", "HPK_NODE_PACKAGES",
    "HPK_STUDIO_SHARED_PATH",  # last: set only with Studio's shared partition
]  # fmt: skip


def _lifecycle(example: str, value: str) -> tuple[LifecycleContext, dict[str, str], dict[str, str]]:
    plain = lifecycle_context(_config(example))
    context = hostile(plain, value)
    # a non-empty shared path in the plain render too, so both render the same branches
    plain_files = render_templates(hostile(plain, "plain" if value else ""))  # same branches
    return context, render_templates(context), plain_files


@needs_shellcheck
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_every_lifecycle_template_of_every_example_holds_hostile_values(
    value: str, tmp_path: Path
) -> None:
    checked: set[tuple[tuple[str, str], ...]] = set()
    linted: set[tuple[str, str]] = set()
    lint: list[tuple[Path, list[str]]] = []
    for example in EXAMPLES:
        context, files, plain = _lifecycle(example.stem, value)
        key = tuple(sorted(files.items()))
        if key in checked:  # another example rendered the very same files
            continue
        checked.add(key)
        folder = tmp_path / example.stem
        _write(folder, files)
        scripts = _shell_files(files)
        assert "lib/settings.sh" in scripts and "on_create.sh" in scripts
        _same_lines(files, plain)
        _bash_n(folder, scripts)
        # the rendered ones (static scripts do not change with values: test_lifecycle lints
        # them), each text once
        rendered = {(p, files[p]) for p in scripts if (LIFECYCLE_DIR / f"{p}.j2").is_file()}
        lint.append((folder, sorted(p for p, _ in rendered - linted)))
        linted |= rendered
        _settings_hold_exactly(folder, value, context)
        _units_hold_exactly(files, plain, value)
        if "metrics/prometheus.yml" in files:  # YAML reads the values back exactly
            agent = yaml.safe_load(files["metrics/prometheus.yml"])
            assert agent["global"]["external_labels"]["cluster"] == context.cluster_name
            assert agent["global"]["external_labels"]["environment"] == context.environment
            assert agent["remote_write"][0]["sigv4"]["region"] == context.region
    _shellcheck(*lint)


def _settings_hold_exactly(folder: Path, value: str, context: LifecycleContext) -> None:
    """Source the rendered settings.sh; every variable is the hostile string itself, and the
    group-role lookup matches it literally (no glob)."""
    script = (
        "set -eu; source lib/settings.sh\n"
        f'for v in {" ".join(SETTINGS_VARIABLES)}; do printf "%s\\0" "${{!v-unset}}"; done\n'
        'printf "%s\\0" "$HPK_ORCHESTRATOR" "$(hpk_group_role "$1")"\n'
        'if hpk_group_role "x$1x" >/dev/null; then printf "glob\\0"; fi\n'
    )
    result = subprocess.run(
        ["bash", "-c", script, "bash", value], cwd=folder, capture_output=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    got = result.stdout.decode().split("\0")[:-1]
    shared = value if context.studio_shared_path else "unset"
    expected = [value] * (len(SETTINGS_VARIABLES) - 1) + [shared, context.orchestrator, value]
    assert got == expected


def _unit_lines(text: str) -> list[str]:
    for line in text.splitlines():
        assert line == "" or line.startswith(("#", ";", "[")) or re.match(r"^[A-Za-z]+=", line), (
            line
        )
    return text.splitlines()


def _units_hold_exactly(files: dict[str, str], plain: dict[str, str], value: str) -> None:
    units = [p for p in files if p.startswith("systemd/")]
    assert units
    for unit in units:
        _unit_lines(files[unit])
        if unit.endswith("ship-logs.service"):
            (command,) = [x for x in files[unit].splitlines() if x.startswith("ExecStart=")]
            words = systemd_words(command.removeprefix("ExecStart="))
            assert words[words.index("--region") + 1] == value
            assert words[words.index("--cluster-name") + 1] == value
            (plain_command,) = [x for x in plain[unit].splitlines() if x.startswith("ExecStart=")]
            assert len(words) == len(systemd_words(plain_command.removeprefix("ExecStart=")))


# --- the sbatch script ---------------------------------------------------------------------------

# The commands the script runs, as recording stubs (each writes its arguments, NUL-separated, to
# $RECORD/<name>): add one here when the template starts running another command.
STUBS = {
    "srun": "",
    # The job asks ECR for its image's digest, STS for the account (an image of the trainer
    # stack with no account in the file) and ECR for enroot's password; never SSM.
    "aws": (
        'case "$1 $2" in\n'
        '  "ecr batch-get-image") echo "sha256:$(printf a%.0s {1..64})" ;;\n'
        '  "sts get-caller-identity") echo 111122223333 ;;\n'
        '  "ecr get-login-password") echo secret ;;\n'
        '  *) echo "unexpected aws $*" >&2; exit 1 ;;\n'
        "esac\n"
    ),
    # enroot import --output FILE URI: the squashfs appears at FILE.
    "enroot": 'while (($#)); do [[ $1 == --output ]] && echo sqsh >"$2"; shift; done\n',
}


def _job_contexts() -> list[tuple[str, EnvironmentConfig, JobContext]]:
    out = []
    for example in EXAMPLES:
        config = _config(example.stem)
        if config.orchestrator == "slurm":
            out.append((example.stem, config, job_context(config, image=STACK_IMAGE)))
            out.append((f"{example.stem}-image", config, job_context(config, image=IMAGE)))
    config = _config("default")
    local = LocalRun(fsx_root=Path("/tmp/fsx"), python="/opt/py/bin/python")
    out.append(("default-local", config, job_context(config, local=local)))
    return out


JOBS = _job_contexts()


def _directive_safe(context: JobContext) -> JobContext:
    job = dataclasses.replace(
        context.job, name="pretrain", partition="gpu" if context.job.partition else None
    )
    return dataclasses.replace(context, job=job)


def _run_sbatch(script: Path, tmp: Path) -> tuple[list[str], list[str] | None]:
    """The script run with a recording srun and aws first on PATH: the arguments each got."""
    fake = tmp / "bin"
    fake.mkdir(exist_ok=True)
    for name, then in STUBS.items():
        (fake / name).write_text(f'#!/bin/bash\nprintf \'%s\\0\' "$@" >"$RECORD/{name}"\n{then}')
        (fake / name).chmod(0o755)
    record = tmp / "record"
    record.mkdir(exist_ok=True)
    result = subprocess.run(
        ["bash", str(script)], cwd=tmp, capture_output=True,
        env={"PATH": f"{fake}:/usr/bin:/bin", "RECORD": str(record), "LC_ALL": "C",
             "HYPERPOD_IMAGES_DIR": str(tmp / "images"), "HOME": str(tmp)}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    srun = (record / "srun").read_bytes().decode().split("\0")[:-1]
    aws = (
        (record / "aws").read_bytes().decode().split("\0")[:-1]
        if (record / "aws").exists()
        else None
    )
    return srun, aws


@needs_shellcheck
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_sbatch_script_of_every_example_holds_hostile_values(
    value: str, tmp_path: Path
) -> None:
    linted: set[str] = set()
    lint: list[tuple[Path, list[str]]] = []
    for name, _, plain in JOBS:
        context = hostile(plain, value)
        try:
            text = render_sbatch(context)
        except TemplateError as e:  # the #SBATCH values: refused, never escaped
            assert re.match(rf"{re.escape(str(BUNDLED))}:\d+: the #SBATCH value ", str(e)), e
            context = _directive_safe(context)
            text = render_sbatch(context)
        plain_text = render_sbatch(_directive_safe(hostile(plain, "plain" if value else "")))
        assert len(text.splitlines()) == len(plain_text.splitlines()), name
        folder = tmp_path / name
        folder.mkdir()
        script = folder / "job.sbatch"
        script.write_text(text, encoding="utf-8")
        _bash_n(folder, [script.name])
        if text not in linted:
            linted.add(text)
            lint.append((folder, [script.name]))
        directives = [sbatch_arguments(x) for x in text.splitlines() if x.startswith("#SBATCH")]
        assert [f"--job-name={context.job.name}"] in directives
        srun, aws = _run_sbatch(script, folder)
        launch = srun.index("hyperpod-trainer")
        sets = srun[launch + 1 :]
        assert sets == [w for key, v in context.settings for w in ("--set", f"{key}={v}")]
        if context.local is None:
            mounts = f"--container-mounts={context.fsx_mount}:{context.fsx_mount}"
            if context.node_log_dir:
                mounts += f",{context.node_log_dir}:{context.node_log_dir}"
            assert mounts in srun
            assert aws is not None and "ssm" not in aws  # the image is never looked up in SSM
        else:
            assert aws is None
    _shellcheck(*lint)


def test_seen_5_a_checkpoint_dir_with_a_line_break_stays_one_argument(tmp_path: Path) -> None:
    """Issue 14, Seen 5: the value of the issue, set past validation on the config itself, is
    one argument of the trainer and a comment stays one comment; nothing of it runs."""
    config = _config("default")
    bad = "/fsx/checkpoints\ntouch hpk-pwned"
    job = config.trainer.job.model_copy(update={"checkpoint_dir": bad})
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"job": job})})
    context = job_context(config, image=IMAGE)
    text = render_sbatch(context)
    assert len(text.splitlines()) == len(
        render_sbatch(job_context(_config("default"), image=IMAGE)).splitlines()
    )
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    srun, _ = _run_sbatch(script, tmp_path)
    assert f"checkpoint.dir={bad}" in srun
    assert not (tmp_path / "hpk-pwned").exists()


# --- the EKS manifest and Studio's settings ------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_eks_manifest_reads_back_as_its_data(value: str) -> None:
    for example in EXAMPLES:
        config = _config(example.stem)
        if config.orchestrator != "eks":
            continue
        context = hostile(job_context(config, image=IMAGE), value)
        manifest = pytorch_job(config, context)
        text = render_pytorch_job(manifest, environment=value, has_image=True)
        plain = render_pytorch_job(manifest, environment="plain", has_image=True)
        assert yaml.safe_load(text) == manifest
        assert [x for x in text.splitlines() if x.startswith("#")] == [
            x
            for x in text.splitlines()[: len([y for y in plain.splitlines() if y.startswith("#")])]
        ]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_studios_settings_hold_exactly_the_values(value: str) -> None:
    names = [f.name for f in dataclasses.fields(LifecycleSettings)]
    settings = LifecycleSettings(**dict.fromkeys(names, value))
    assignments = settings.assignments()
    assert len(assignments.splitlines()) == len(names)
    variables = re.findall(r"^(\w+)=", assignments, re.MULTILINE)
    script = assignments + f'for v in {" ".join(variables)}; do printf "%s\\0" "${{!v}}"; done\n'
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, env={"PATH": "/usr/bin:/bin"}, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split("\0")[:-1] == [value] * len(names)


def test_a_cloudformation_token_in_studios_settings_stays_whole() -> None:
    """The file system's id is a token at synth: quoted as it is (an escape before its `$` would
    hide it from CDK and end up in the script), so the deployed script holds 'fs-...'."""
    from aws_cdk import App, Fn, Stack

    stack = Stack(App(), "s")
    names = [f.name for f in dataclasses.fields(LifecycleSettings)]
    token = Fn.import_value("fs-id")
    settings = LifecycleSettings(**(dict.fromkeys(names, "x") | {"file_system_id": token}))
    resolved = stack.resolve(settings.assignments())
    parts = resolved["Fn::Join"][1]
    i = parts.index({"Fn::ImportValue": "fs-id"})
    assert parts[i - 1].endswith("HYPERPOD_KIT_FILE_SYSTEM_ID=${HYPERPOD_KIT_FILE_SYSTEM_ID:-'")
    assert parts[i + 1].startswith("'}\n")


# --- where each filter sits, read from the templates' source -----------------------------------

SHELL_TEMPLATES = [
    *(
        p
        for p in sorted(LIFECYCLE_DIR.rglob("*.j2"))
        if "systemd" not in p.parts and not p.name.endswith(".yml.j2")  # YAML: | json
    ),
    BUNDLED,
]
YAML_TEMPLATES = sorted(LIFECYCLE_DIR.rglob("*.yml.j2"))


@pytest.mark.parametrize("template", YAML_TEMPLATES, ids=lambda p: p.name)
def test_yaml_templates_use_the_json_filter(template: Path) -> None:
    _, outputs = _outputs(template.read_text())
    for expression, last in outputs:
        assert last in ("json", ""), expression  # "": a number


UNIT_TEMPLATES = sorted((LIFECYCLE_DIR / "systemd").glob("*.j2"))
_TAG = re.compile(r"\{#.*?#\}|\{%.*?%\}|\{\{(.*?)\}\}", re.DOTALL)
_LAST_FILTER = re.compile(r"\|\s*(\w+)\s*$")


def _outputs(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The template with each {{ }} replaced by a marker (\\x00) and statements and comments
    removed (their newlines kept), and each output's expression and outermost filter."""
    found: list[tuple[str, str]] = []

    def replace(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "\n" * m.group(0).count("\n")
        expression = m.group(1).strip().strip("-").strip()
        last = _LAST_FILTER.search(expression)
        found.append((expression, last.group(1) if last else ""))
        return "\x00"

    return _TAG.sub(replace, text), found


def _shell_contexts(text: str) -> list[tuple[str, bool]]:
    """For each marker, the shell context it sits in ('word', 'command', 'param', 'comment',
    'single', 'double') and whether it is on an #SBATCH line: a small reading of bash's quoting,
    enough for these templates: quotes, escapes, $(...), ${...}, comments."""
    stack = ["word"]
    out: list[tuple[str, bool]] = []
    i = line_start = 0
    while i < len(text):
        if text[i] == "\n":
            line_start = i + 1
        if text[i] == "\x00":
            state = stack[-1]
            # in ${...} inside "...", bash keeps a word's quotes: as bad as "..." itself
            context = "double" if state == "param" and "double" in stack else state
            out.append((context, text.startswith("#SBATCH", line_start)))
        else:
            i += _shell_step(text, i, stack)
        i += 1
    return out


def _shell_step(text: str, i: int, stack: list[str]) -> int:
    """Read the character at `i` in the context on top of `stack`, pushing or popping contexts;
    the number of characters consumed after it."""
    c, state = text[i], stack[-1]
    closes = {"comment": "\n", "single": "'", "double": '"'}
    if state in closes:
        if c == closes[state]:
            stack.pop()
        elif state == "double" and c == "\\":
            return 1
        elif state == "double" and text.startswith(("$(", "${"), i):
            stack.append("command" if text[i + 1] == "(" else "param")
            return 1
        return 0
    if c == "\\":
        return 1
    at_word_start = i == 0 or text[i - 1] in " \t\n;&|("
    if c == "#" and at_word_start and state != "param":
        stack.append("comment")
    elif c in "'\"":
        stack.append("single" if c == "'" else "double")
    elif text.startswith(("$(", "${"), i):
        stack.append("command" if text[i + 1] == "(" else "param")
        return 1
    elif (c, state) in ((")", "command"), ("}", "param")):
        stack.pop()
    return 0


@pytest.mark.parametrize("template", SHELL_TEMPLATES, ids=lambda p: p.name)
def test_shell_words_never_sit_inside_quotes(template: Path) -> None:
    text, outputs = _outputs(template.read_text())
    contexts = _shell_contexts(text)
    assert len(contexts) == len(outputs)
    for (expression, last), (context, directive) in zip(outputs, contexts, strict=True):
        if last == "q":
            assert context in ("word", "command", "param", "comment"), (expression, context)
        if last == "sbatch":
            assert directive, f"{expression}: | sbatch outside an #SBATCH line"
        elif directive:  # unfiltered: a number (the guard refuses anything else)
            assert last == "", f"{expression}: an #SBATCH value needs | sbatch"
        assert last not in ("systemd", "json"), f"{expression}: not a shell filter"


@pytest.mark.parametrize("template", UNIT_TEMPLATES, ids=lambda p: p.name)
def test_units_use_the_systemd_filter(template: Path) -> None:
    _, outputs = _outputs(template.read_text())
    for expression, last in outputs:
        assert last in ("systemd", ""), expression  # "": a number


@pytest.mark.parametrize(
    ("template", "context"),
    [
        ("X={{ v | q }}", "word"),
        ('die "cannot read {{ v | q }}"', "double"),
        ("echo '{{ v | q }}'", "single"),
        ('X="$(aws --name {{ v | q }})"', "command"),
        ('X="${Y:-{{ v | q }}}"', "double"),
        ("X=${Y:-{{ v | q }}}", "param"),
        ("# the environment {{ v | q }}, it's", "comment"),
        ('echo "it\'s" # {{ v | q }}', "comment"),
        ('echo "a\\"b {{ v | q }}"', "double"),
        ("echo ${x#y} {{ v | q }}", "word"),
    ],
)
def test_the_quote_reader_finds_each_context(template: str, context: str) -> None:
    """The reader the placement test relies on sees a word inside quotes (it would pass
    anything if it did not)."""
    text, _ = _outputs(template)
    assert _shell_contexts(text) == [(context, False)]
