"""hyperpod_kit/templating.py: each filter reads back exactly in its context (bash, sbatch's
directive parser, systemd's command-line rules, JSON and YAML), a value without a filter fails
the render with the template, the line and the expression, and no jinja2 environment of the
project is made anywhere else."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from hyperpod_kit.templating import (
    RenderError,
    ShellCode,
    environment,
    json_value,
    render,
    shell_word,
    slurm_value,
    systemd_value,
)
from tests.conftest import REPO
from tests.hostile import HOSTILE, sbatch_arguments, systemd_words

# --- shell words -------------------------------------------------------------------------------


def _bash(script: str, *args: str) -> bytes:
    result = subprocess.run(
        ["bash", "-c", script, "bash", *args],
        capture_output=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_shell_word_reads_back_exactly_and_stays_on_one_line(value: str) -> None:
    """As an assignment, an argument, a case pattern and in a comment, in the C locale."""
    word = shell_word(value)
    assert "\n" not in word and "\r" not in word and "\u2028" not in word
    script = (
        f"x={word}\n"
        f"printf '%s\\0' \"$x\" {word}\n"
        f"case \"$x\" in {word}) printf 'matched\\0' ;; *) printf 'no\\0' ;; esac\n"
        f"# a comment holding {word}\n"
        "printf 'end'\n"
    )
    out = _bash(script).split(b"\0")
    assert out == [value.encode(), value.encode(), b"matched", b"end"]


def test_plain_words_stay_plain_and_others_are_quoted() -> None:
    assert shell_word("/fsx/checkpoints") == "/fsx/checkpoints"
    assert shell_word("my ckpt") == "'my ckpt'"
    assert shell_word("a\nb") == "$'a\\012b'"
    assert shell_word(42) == "42"
    assert shell_word(Path("/x y")) == "'/x y'"


@pytest.mark.parametrize("value", ["a\x00b", None, ("a", "b")], ids=repr)
def test_a_shell_word_refuses_what_it_cannot_hold(value: object) -> None:
    env = _env({"t": "{{ v | q }}"})
    with pytest.raises(RenderError, match="t:1: "):
        render(env, "t", {"v": value}, shown_as="t")


# --- #SBATCH values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["pretrain", "gpu-a", "a.b_c", "x=y", "/fsx/out", "\u00e9t\u00e9"]
)
def test_an_sbatch_value_reads_back_exactly(value: str) -> None:
    line = f"#SBATCH --job-name={slurm_value(value)}"
    assert sbatch_arguments(line) == [f"--job-name={value}"]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_an_sbatch_value_is_refused_or_reads_back_exactly(value: str) -> None:
    env = _env({"t": "#!/bin/bash\n#SBATCH --job-name={{ v | sbatch }}\n"})
    try:
        text = render(env, "t", {"v": value}, shown_as="mine.sbatch.j2")
    except RenderError as e:
        assert str(e).startswith("mine.sbatch.j2:2: the #SBATCH value "), e
        return
    (line,) = [x for x in text.splitlines() if x.startswith("#SBATCH")]
    assert sbatch_arguments(line) == [f"--job-name={value}"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("two words", "white space"),
        ("a#b", "a #"),
        ("%j", "a %"),
        ("gpu,dev", "a comma"),
        ("-x", "starts with '-'"),
        (":x", "starts with ':'"),
        ("", "is empty"),
        ("gpu\n#SBATCH --uid=0", "a line break"),
        ('a"b', "a quote"),
    ],
)
def test_an_sbatch_value_refusal_says_why(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        slurm_value(value)


# --- systemd command lines ---------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_systemd_word_reads_back_exactly_on_one_line(value: str) -> None:
    word = systemd_value(value)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", word)
    assert systemd_words(f"/usr/bin/tool --region {word} --x") == [
        "/usr/bin/tool", "--region", value, "--x",
    ]  # fmt: skip


# --- JSON and YAML -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [*HOSTILE, 3, True, None, ["a", 1], {"k": "v\n"}], ids=repr)
def test_a_json_value_reads_back_as_json_and_as_yaml(value: object) -> None:
    text = json_value(value)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", text)
    assert json.loads(text) == value
    assert yaml.safe_load(f"key: {text}\n") == {"key": value}


# --- the guard ---------------------------------------------------------------------------------


def _env(templates: dict[str, str], tmp: Path | None = None) -> object:
    import tempfile

    folder = Path(tmp or tempfile.mkdtemp(prefix="hpk-templating-"))
    for name, text in templates.items():
        (folder / name).write_text(text)
    return environment(folder)


@pytest.mark.parametrize(
    ("template", "expression"),
    [
        ("{{ v }}", "{{ v }}"),
        ("{{ 'constant' }}", "{{ 'constant' }}"),
        ("{{ v | q ~ '/x' }}", "{{ v | q ~ '/x' }}"),  # the filter binds to '/x' only
        ("{{ (v | q)[1:] }}", "{{ (v | q)[1:] }}"),
        ("{{ v | q | upper }}", "{{ v | q | upper }}"),
        ("{{ v | tojson }}", "{{ v | tojson }}"),  # jinja2's own filters mark nothing safe
        ("{{ p }}", "{{ p }}"),
        ("{{ n if not v else 'none' }}", "{{ n if not v else 'none' }}"),
        ("{% macro m() %}{{ v | q }}{% endmacro %}{{ m() }}", "{{ m() }}"),
    ],
)
def test_a_value_without_a_filter_fails_with_template_line_and_expression(
    template: str, expression: str, tmp_path: Path
) -> None:
    env = _env({"job.sh.j2": f"#!/bin/bash\necho start\n{template}\n"}, tmp_path)
    with pytest.raises(RenderError) as caught:
        render(env, "job.sh.j2", {"v": "x", "n": 0, "p": Path("/x")}, shown_as="/my/job.sh.j2")
    assert str(caught.value).startswith(
        f"/my/job.sh.j2:3: {expression} reaches the output without a filter"
    ), caught.value
    assert "| q" in caught.value.hint and "| sbatch" in caught.value.hint


def test_numbers_flags_filtered_values_and_our_own_code_need_no_filter(tmp_path: Path) -> None:
    env = _env({"t": "{{ n }} {{ f }} {{ b }} {{ v | q }} {{ code }} {{ v | json }}"}, tmp_path)
    text = render(
        env, "t", {"n": 3, "f": 1.5, "b": False, "v": "a b", "code": ShellCode('"$X" -m y')},
        shown_as="t",
    )  # fmt: skip
    assert text == '3 1.5 False \'a b\' "$X" -m y "a b"'


def test_an_included_template_is_held_to_the_same_rule(tmp_path: Path) -> None:
    env = _env({"main": "{% include 'part' %}", "part": "ok\n{{ v }}\n"}, tmp_path)
    with pytest.raises(RenderError, match=r"^part:2: \{\{ v \}\} reaches the output"):
        render(env, "main", {"v": "x"}, shown_as="/my/main")


def test_a_misspelt_name_is_still_an_undefined_error(tmp_path: Path) -> None:
    env = _env({"t": "a\n{{ nope | q }}\n{{ nope }}"}, tmp_path)
    with pytest.raises(RenderError, match=r"^/my/t:2: 'nope' is undefined"):
        render(env, "t", {}, shown_as="/my/t")


def test_a_refused_value_names_the_line(tmp_path: Path) -> None:
    env = _env({"t": "#!/bin/bash\n\n#SBATCH --partition={{ v | sbatch }}\n"}, tmp_path)
    with pytest.raises(RenderError, match=r"^/my/t:3: the #SBATCH value 'a b' holds white space"):
        render(env, "t", {"v": "a b"}, shown_as="/my/t")


def test_no_jinja2_environment_is_made_outside_the_templating_module() -> None:
    """One place builds jinja2 environments (and so the filters and the guard): any other
    `jinja2.Environment(` or `Template(` in the package would render without them."""
    offenders = []
    for path in sorted((REPO / "hyperpod_kit").rglob("*.py")):
        if path.name == "templating.py":
            continue
        text = path.read_text()
        if re.search(r"^\s*(import jinja2|from jinja2)|\.from_string\(", text, re.MULTILINE):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
