"""Every jinja2 template of hyperpod-kit renders through here: the lifecycle scripts and units
(`lifecycle/**/*.j2`), the bundled sbatch template and a user's own (`trainer.job.template`).

A value reaches a template's output only through the filter of the context it lands in:

    {{ x | q }}        a shell word: a whole argument, assignment value, case pattern or comment
                       word. Never inside "..." or '...': write "text "{{ x | q }}, or put the
                       value in a variable first. Plain words stay as they are, others are
                       quoted ('...', or "..." with escapes where the value holds $ ` or \\);
                       a value with a control character becomes bash's $'...' (so the word is
                       always one line, also in a comment). NUL is refused.
    {{ x | json }}     a JSON value, or a YAML value (this JSON reads the same as YAML): one
                       line, control characters and line separators escaped.
    {{ x | sbatch }}   the value of an `#SBATCH --option=VALUE` line. Refused (not escaped):
                       what sbatch would split or misread there (white space, quotes, \\, #, %,
                       commas, a leading - or :) and control characters.
    {{ x | systemd }}  a word of a systemd unit's command line (ExecStart=); also one safe line
                       in its other settings and comments: quoted and C-escaped where needed,
                       % and $ doubled.

What may be output without a filter: numbers and booleans (`int`, `float`, `bool`: a validated
count or flag cannot hold a quote or a line break), and `ShellCode`, hyperpod-kit's own constant
shell code (never a value from a file). Anything else, a plain string above all, is refused at
render time with the template, its line and the expression: a filter that was forgotten fails
the render instead of reaching a node. The filters return marker subclasses of `str`; any string
operation after a filter (`~`, slicing, `| upper`) gives a plain `str` again, which is refused.

No HTML autoescape (it would corrupt scripts) and StrictUndefined (a misspelt name is an error,
not an empty string). docs/lifecycle.md and docs/trainer.md say which filter goes where.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePath
from types import TracebackType

import jinja2
from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream

from hyperpod_kit.text import CONTROL, describe, shown

OUTPUT_GUARD = "_hpk_output"  # the filter the guard appends to every {{ expression }}


class Rendered(str):
    """Text a filter made safe for its context (or hyperpod-kit's own code): may be output."""

    __slots__ = ()


class ShellWord(Rendered):
    __slots__ = ()


class JsonValue(Rendered):
    __slots__ = ()


class SlurmValue(Rendered):
    __slots__ = ()


class SystemdValue(Rendered):
    __slots__ = ()


class ShellCode(Rendered):
    """Shell code written by hyperpod-kit (a constant of the package), output as it is: never
    built from a value of the environment file."""

    __slots__ = ()


class RefusedValueError(ValueError):
    """A filter cannot make this value safe for its context."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class RenderError(Exception):
    """A template that does not render: a syntax error, an unknown name, a value output without
    a filter, or a value its filter refuses. `str()` is `TEMPLATE:LINE: message`; `hint` says
    what to change."""

    def __init__(self, where: str, line: int | None, message: str, hint: str) -> None:
        self.where = f"{where}:{line}" if line else where
        self.line = line
        self.message = message
        self.hint = hint
        super().__init__(f"{self.where}: {message}")


# --- the filters ---------------------------------------------------------------------------------


def _text(value: object, context: str) -> str:
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined: raises the undefined error, naming what is missing
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bool, int, PurePath)):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if value is None:
        raise RefusedValueError(
            f"None cannot be {context}",
            "test it first ({% if x is not none %}) or give it a default (x or '')",
        )
    raise RefusedValueError(
        f"a {type(value).__name__} cannot be {context}",
        "give the filter one value (a string, number or path); loop over a list",
    )


_SHELL_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+", re.ASCII)


def shell_word(value: object) -> ShellWord:
    """One shell word that reads back as exactly `value`, on one line."""
    text = _text(value, "a shell word")
    if "\x00" in text:
        raise RefusedValueError(
            f"{shown(text)} holds a NUL byte, which no shell word can hold",
            "remove it from the value",
        )
    if _SHELL_PLAIN.fullmatch(text):
        return ShellWord(text)
    if not CONTROL.search(text):
        if any(c in text for c in "$`\\"):
            # "...": the same word as '...', and shellcheck takes neither a literal $( or ` nor
            # a backslash in it for a mistake (SC2016, SC1003): a rendered script stays clean
            return ShellWord('"' + re.sub(r'([\\$`"])', r"\\\1", text) + '"')
        return ShellWord(shlex.quote(text))
    # bash's $'...': every control character and line separator as octal UTF-8 bytes, so the
    # word stays on one line (a comment stays a comment) whatever the locale.
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif CONTROL.match(char):
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8"))
        else:
            out.append(char)
    return ShellWord("$'" + "".join(out) + "'")


def _json_default(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


# What JSON may hold raw but YAML reads as a line break (NEL, U+2028, U+2029) or refuses (DEL, C1,
# surrogates, U+FFFE/U+FFFF): written as \\uXXXX, which both read alike. JSON escapes the rest.
_JSON_ESCAPED = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def json_value(value: object) -> JsonValue:
    """`value` as one line of JSON, which reads back the same as a YAML flow value: control
    characters, line separators and what YAML refuses escaped; other non-ASCII text as it is."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined: raises the undefined error
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise RefusedValueError(
            f"{value!r} cannot be written as JSON ({e})",
            "give the filter text, numbers, booleans, lists or mappings of them",
        ) from None
    return JsonValue(_JSON_ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


# sbatch reads `#SBATCH` lines itself (src/sbatch/opt.c, _get_argument): white space ends an
# argument, quotes group, a backslash escapes, an unescaped # ends the line, a leading : is
# fatal; and options read commas (lists) and % (file name patterns) in a value.
_SLURM_REFUSED = {
    '"': "a quote",
    "'": "a quote",
    "\\": "a backslash",
    "#": "a # (sbatch ends the directive there)",
    "%": "a % (sbatch expands %j, %x... in file names)",
    ",": "a comma (sbatch reads a list)",
}


def slurm_value(value: object) -> SlurmValue:
    """The value of an #SBATCH option, refused unless sbatch reads it back exactly."""
    text = _text(value, "an #SBATCH value")
    hint = "an #SBATCH value is one plain word (letters, digits, . _ - / = :); validate the value"
    problem = None
    if not text:
        problem = "is empty"
    elif CONTROL.search(text):
        problem = f"holds {describe(CONTROL.findall(text)[0])}"
    elif any(c.isspace() for c in text):
        problem = "holds white space (sbatch splits the directive there)"
    elif text[0] in "-:":
        problem = f"starts with {text[0]!r} (sbatch reads an option or stops)"
    else:
        bad = next((c for c in text if c in _SLURM_REFUSED), None)
        problem = f"holds {_SLURM_REFUSED[bad]}" if bad else None
    if problem:
        raise RefusedValueError(f"the #SBATCH value {shown(text)} {problem}", hint)
    return SlurmValue(text)


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+", re.ASCII)


def systemd_value(value: object) -> SystemdValue:
    """One word of a systemd command line (ExecStart=) that reads back as exactly `value`."""
    text = _text(value, "a systemd value")
    if "\x00" in text:
        raise RefusedValueError(f"{shown(text)} holds a NUL byte", "remove it from the value")
    if _SYSTEMD_PLAIN.fullmatch(text):
        return SystemdValue(text)
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char in "%$":  # specifiers (%n) and environment variables ($X): doubled is literal
            out.append(char * 2)
        elif CONTROL.match(char):
            out.append(f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return SystemdValue('"' + "".join(out) + '"')


class CommentText(Rendered):
    __slots__ = ()


def comment_text(value: object) -> CommentText:
    """Text for a `#` comment line (YAML or shell) that a reader may see as it is: refused if it
    holds a control character, which could end the comment and start a line of its own."""
    text = _text(value, "comment text")
    if CONTROL.search(text):
        raise RefusedValueError(
            f"the comment text {shown(text)} holds {describe(CONTROL.findall(text)[0])}",
            "a comment is one line: validate the value",
        )
    return CommentText(text)


FILTERS = {
    "q": shell_word, "json": json_value, "sbatch": slurm_value, "systemd": systemd_value,
    "comment": comment_text,
}  # fmt: skip


# --- the guard -----------------------------------------------------------------------------------


def safe_to_output(value: object) -> bool:
    """A filter's result, hyperpod-kit's own code, or a number or flag."""
    if isinstance(value, Rendered):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int))


class UnfilteredValue(jinja2.TemplateRuntimeError):
    """A value reached the output without a filter (`expression`: as the template writes it)."""

    def __init__(self, template: str, line: int, expression: str | None, value: object) -> None:
        kind = "None" if value is None else f"a {type(value).__name__}"
        what = f"{{{{ {expression} }}}}" if expression else "a value"
        super().__init__(f"{what} reaches the output without a filter ({kind})")
        self.template = template
        self.line = line
        self.expression = expression


def _output_guard(value: object, template: str, line: str, expression: str) -> object:
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined: the undefined error, not "without a filter"
    if safe_to_output(value):
        return value
    raise UnfilteredValue(template, int(line), expression, value)


def _finalize(value: object) -> object:
    """The last check before anything is written: whatever the guard has not seen (it sees
    every {{ expression }}) is held to the same rule."""
    if safe_to_output(value):
        return value
    raise UnfilteredValue("?", 0, None, value)


_NO_SPACE_BEFORE = {"dot", "rparen", "rbracket", "comma", "lbracket", "colon"}
_NO_SPACE_AFTER = {"dot", "lparen", "lbracket", "colon"}


def _expression_text(tokens: list[Token]) -> str:
    """The tokens of an expression, written back readably (for messages)."""
    out = ""
    previous: Token | None = None
    for token in tokens:
        if previous is not None and not (
            token.type in _NO_SPACE_BEFORE
            or previous.type in _NO_SPACE_AFTER
            or (token.type == "lparen" and previous.type in ("name", "rparen"))  # a call
        ):
            out += " "
        out += repr(token.value) if token.type == "string" else str(token.value)
        previous = token
    return out


class OutputGuard(Extension):
    """Rewrites every `{{ expr }}` into `{{ (expr) | _hpk_output(template, line, "expr") }}`
    before jinja2 parses it, so a value that reaches the output without a filter is refused
    with the template, the line and the expression as written."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        name = stream.name or "<template>"
        tokens = iter(stream)
        for token in tokens:
            yield token
            if token.type != "variable_begin":
                continue
            inner: list[Token] = []
            end = next(tokens)
            while end.type != "variable_end":
                inner.append(end)
                end = next(tokens)
            line = token.lineno
            yield Token(line, "lparen", "(")
            yield from inner
            yield Token(line, "rparen", ")")
            yield Token(line, "pipe", "|")
            yield Token(line, "name", OUTPUT_GUARD)
            yield Token(line, "lparen", "(")
            yield Token(line, "string", name)
            yield Token(line, "comma", ",")
            yield Token(line, "string", str(line))
            yield Token(line, "comma", ",")
            yield Token(line, "string", _expression_text(inner))
            yield Token(line, "rparen", ")")
            yield end


@functools.lru_cache(maxsize=16)
def environment(folder: Path, *, trim_blocks: bool = False) -> jinja2.Environment:
    """The one way to make a jinja2 environment in hyperpod-kit: templates under `folder`.
    One per folder, kept: its compiled templates are reused (jinja2 recompiles a template whose
    file changed). `trim_blocks` also strips the white space around block tags (YAML files)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        trim_blocks=trim_blocks,
        lstrip_blocks=trim_blocks,
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, not an empty string
        keep_trailing_newline=True,
        autoescape=False,  # HTML escaping would corrupt scripts: the filters quote instead
        finalize=_finalize,
        extensions=[OutputGuard],
    )
    env.filters.update(FILTERS)
    env.filters[OUTPUT_GUARD] = _output_guard
    return env


_FILTER_HINT = (
    "pass the value through the filter of where it lands: | q (a shell word, comments too), "
    "| sbatch (an #SBATCH value), | json (JSON or YAML), | systemd (a unit's command line), "
    "| comment (text of a # comment line); "
    "numbers and booleans need none (docs/trainer.md, docs/lifecycle.md)"
)


def render(
    env: jinja2.Environment, name: str, variables: Mapping[str, object], *, shown_as: str
) -> str:
    """Template `name` of `env` rendered with `variables`; any failure is a `RenderError` that
    names `shown_as` (the template's path, for messages) and its line."""
    try:
        return env.get_template(name).render(**variables)
    except jinja2.TemplateSyntaxError as e:
        hint = "fix the template's syntax (https://jinja.palletsprojects.com/templates/)"
        raise RenderError(shown_as, e.lineno, e.message or "syntax error", hint) from None
    except UnfilteredValue as e:
        where = _where(e.template, name, shown_as)
        raise RenderError(where, e.line or None, str(e), _FILTER_HINT) from None
    except RefusedValueError as e:
        line = _template_line(e.__traceback__, env, name)
        raise RenderError(shown_as, line, e.message, e.hint) from None
    except jinja2.UndefinedError as e:
        line = _template_line(e.__traceback__, env, name)
        hint = "use a name the template's context has (docs/trainer.md lists them)"
        raise RenderError(shown_as, line, e.message or "undefined", hint) from None
    except jinja2.TemplateError as e:
        line = _template_line(e.__traceback__, env, name)
        message = e.message or type(e).__name__
        raise RenderError(shown_as, line, message, "fix the template") from None


def _where(template: str, name: str, shown_as: str) -> str:
    return shown_as if template in (name, "?") else template


def _template_line(tb: TracebackType | None, env: jinja2.Environment, name: str) -> int | None:
    """The line of template `name` where the error was raised (jinja2 rewrites the traceback
    to carry template lines)."""
    try:
        source = env.get_template(name).filename
    except jinja2.TemplateError:
        return None
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == source:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
