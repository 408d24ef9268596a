"""Strings that break a script, a directive or a unit file when a template puts them in unquoted:
shell syntax of every kind, option-like and comment-like text, Slurm's `%` patterns, control
characters and line breaks, non-ASCII text. Shared by the filter tests (tests/unit/
test_templating.py) and the rendering tests (tests/integration/test_hostile_templates.py).

No NUL: no shell word can hold one (the shell filter refuses it; a test says so).
"""

from __future__ import annotations

import re

HOSTILE = [
    'it\'s "quoted"',
    "$(touch /tmp/hpk-pwned)",
    "`touch /tmp/hpk-pwned`",
    "${HOME} $HOME $1 $@ $$ $'x'",
    "a; rm -rf / && echo x || true | cat & disown",
    "* ? [a-z] {a,b} ~root",
    "  leading and trailing spaces  ",
    "-n --help",
    "# not a comment",
    "100% %j %x %% %n",
    "back\\slash\\",
    "line one\nline two\r\n#SBATCH --uid=0\nrm -rf /",
    "tab\there",
    "unicod\u00e9 \u6f22\u5b57 \U0001f680 \u2028 \u2029 \x85",
    "\x1b[31mred\x1b[0m",
    "'",
    "",
    "!history ^caret",
    "(subshell) {group;} <in >out 2>&1",
]


def sbatch_arguments(line: str) -> list[str]:
    """sbatch's own reading of a directive line (src/sbatch/opt.c, _get_argument): white space
    separates, quotes group, a backslash escapes, an unescaped # ends the line."""
    args: list[str] = []
    rest = line.removeprefix("#SBATCH")
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i].isspace():
            i += 1
        if i == len(rest):
            break
        arg, quote = "", ""
        while i < len(rest) and (quote or not rest[i].isspace()):
            c = rest[i]
            if c == "\\":
                arg += rest[i + 1 : i + 2]
                i += 2
                continue
            if quote:
                if c == quote:
                    quote = ""
                else:
                    arg += c
            elif c in "\"'":
                quote = c
            elif c == "#":
                return [*args, arg] if arg else args
            else:
                arg += c
            i += 1
        args.append(arg)
    return args


_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "s": " "}


def systemd_words(command: str) -> list[str]:
    """systemd's reading of an ExecStart= value (systemd.service(5), "Command lines"): %% is %,
    then words split at white space, double quotes group, C escapes inside them, and $$ is $ in
    each word."""
    assert re.sub("%%", "", command).count("%") == 0, "a lone % is a specifier"
    text = command.replace("%%", "%")
    words: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in " \t":
            i += 1
            continue
        word = ""
        if text[i] == '"':
            i += 1
            while text[i] != '"':
                if text[i] == "\\":
                    kind = text[i + 1]
                    if kind == "x":
                        word += chr(int(text[i + 2 : i + 4], 16))
                        i += 4
                    elif kind == "u":
                        word += chr(int(text[i + 2 : i + 6], 16))
                        i += 6
                    else:
                        word += _C_ESCAPES[kind]
                        i += 2
                    continue
                word += text[i]
                i += 1
            i += 1
            assert i == len(text) or text[i] in " \t", "a closing quote ends the word"
        else:
            while i < len(text) and text[i] not in " \t":
                assert text[i] not in "\"'\\", "a plain word holds no quote or backslash"
                word += text[i]
                i += 1
        assert re.sub(r"\$\$", "", word).count("$") == 0, "a lone $ is a variable"
        words.append(word.replace("$$", "$"))
    return words
