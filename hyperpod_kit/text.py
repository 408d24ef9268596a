"""Characters that end a line, or that a terminal, a parser or a script reads as more than text.

One definition for both sides of the same rule: `validate` refuses them in every string of the
environment file (`config/validators/general.py`, check `control-characters`), and the template
filters (`hyperpod_kit/templating.py`) escape or refuse them in every value a template renders.

What counts: the C0 controls (U+0000-U+001F: NUL, tab, line feed, carriage return, escape...),
DEL (U+007F), the C1 controls (U+0080-U+009F, among them NEL, U+0085, which some parsers read as
a line break) and the Unicode line and paragraph separators (U+2028, U+2029: a line break to
YAML, JavaScript and most editors, though not to bash).
"""

from __future__ import annotations

import re

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A field documented as multi-line (json_schema_extra {"x-multi-line": true}) may hold these.
MULTI_LINE_ALLOWED = frozenset("\n\t")
MULTI_LINE_KEY = "x-multi-line"

_NAMES = {
    "\x00": "a NUL byte",
    "\t": "a tab",
    "\n": "a line break",
    "\r": "a carriage return",
    "\x1b": "an escape character",
    "\x7f": "a DEL character",
    "\x85": "a next-line character (NEL, U+0085)",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def control_characters(text: str, *, multi_line: bool = False) -> list[str]:
    """The control characters of `text`, each once, in order of appearance (for a multi-line
    field: those other than line feed and tab)."""
    found = dict.fromkeys(CONTROL.findall(text))
    return [c for c in found if not (multi_line and c in MULTI_LINE_ALLOWED)]


def describe(char: str) -> str:
    """`a line break`, `a control character (U+001B)`: what a user is told."""
    return _NAMES.get(char) or f"a control character (U+{ord(char):04X})"


def control_hint(text: str) -> str:
    """What to do about a value that holds a control character: where such characters come from
    in a YAML file."""
    hint = "a value is one line of printable text: remove the character"
    if text.endswith("\n") and text.count("\n") == 1:
        return hint + "; a YAML block scalar (| or >) keeps its last line break: write |- or >-"
    return hint + (
        "; in a double-quoted YAML value, \\n \\r \\t \\0 \\e \\L \\P write control characters"
    )


def shown(text: str, limit: int = 60) -> str:
    """`text` quoted on one printable line for a message: control characters as escapes
    (`\\n`, `\\x1b`, `\\u2028`), long text cut."""
    out = CONTROL.sub(lambda m: _escape(m.group()), text)
    return f"'{out if len(out) <= limit else out[: limit - 3] + '...'}'"


# What `printable` escapes besides CONTROL less tab and line feed: the bidirectional overrides and
# isolates (they reorder what a terminal shows: "Trojan Source", CVE-2021-42574) and lone
# surrogates (a JSON log line may hold one; printing it raises UnicodeEncodeError).
_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029"
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """`text` as it may reach a terminal: line feeds and tabs kept, every other control
    character, escape sequence introducer, bidirectional control or lone surrogate written
    visibly as its escape (`\\x1b`, `\\r`, `\\u202e`), so text read from AWS (node logs,
    failure messages) cannot move the cursor, recolour, retitle or rewrite what is shown."""
    return _UNPRINTABLE.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    named = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(char)
    return named or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
