"""Chat conversations -> token ids and a loss mask, rendered with the model's own chat template.

Rendering follows transformers' `apply_chat_template` (transformers/utils/chat_template_utils.py,
`_compile_jinja_template` and `render_jinja_template`, read in 5.24): a jinja2
`ImmutableSandboxedEnvironment` with trim_blocks and lstrip_blocks, the `loopcontrols`
extension, a `{% generation %}` block tag (here a no-op: its body is rendered as is), the
globals `raise_exception`, `strftime_now`, `dict` and `namespace` (underscore-free), and a
`tojson` filter that does not escape HTML. The template sees `messages`, `tools=None`,
`documents=None`, `add_generation_prompt` and the named special tokens of tokenizer_config.json
(bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token) as strings. The
text is then tokenized in one piece without added special tokens, as transformers does.

The loss mask (which tokens the model learns to produce) comes from prefix renders, the way
TRL-style trainers mask without `{% generation %}` tags: for the assistant message i, A = the
conversation before it rendered with the generation prompt, B = the conversation up to and
including it. What B adds after the longest common prefix of A and B, trailing whitespace
stripped, is the assistant's turn: its content and the template's end-of-turn token (Qwen's
`<|im_end|>`, Llama 3's `<|eot_id|>`, DeepSeek's end of sentence). B must be a prefix of the
whole conversation's text (true of the templates we know); a template that rewrites earlier
turns when later ones are added is refused with the line that shows it. A token is counted when
its characters start inside such a span.

jinja2 is imported only here, and only by `prepare-data --format chat`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
TEMPLATE_FILE = "chat_template.jinja"
ROLES_WITH_TEXT = ("system", "user", "assistant", "tool")


class ChatError(Exception):
    """A conversation this template cannot turn into a training example (one line, no file)."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_tokens(files: dict[str, bytes]) -> dict[str, str]:
    """The named special tokens the template sees: tokenizer_config.json's, then
    special_tokens_map.json's for names the first leaves unset (as transformers merges them)."""
    found: dict[str, str] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        raw = files.get(name)
        if raw is None:
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            raise ChatError(f"{name} is not JSON") from None
        if not isinstance(data, dict):
            continue
        for key in SPECIAL_TOKEN_NAMES:
            text = _token_text(data.get(key))
            if text is not None and key not in found:
                found[key] = text
    return found


def find_template(files: dict[str, bytes]) -> tuple[str, str]:
    """(template text, where it was found): chat_template.jinja beside the tokenizer (what
    transformers 5 saves), else tokenizer_config.json's "chat_template", a string or a list of
    {"name", "template"} of which "default" is taken."""
    if TEMPLATE_FILE in files:
        return files[TEMPLATE_FILE].decode("utf-8"), TEMPLATE_FILE
    raw = files.get("tokenizer_config.json")
    if raw is not None:
        config = json.loads(raw)
        template = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(template, str):
            return template, "tokenizer_config.json"
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            if isinstance(named.get("default"), str):
                return str(named["default"]), "tokenizer_config.json (template 'default')"
            raise ChatError(
                f"tokenizer_config.json has named chat templates {sorted(map(str, named))} "
                "but none called 'default'"
            )
    raise ChatError(
        f"no chat template: neither {TEMPLATE_FILE} beside the tokenizer nor a "
        "'chat_template' in tokenizer_config.json"
    )


def compile_template(text: str) -> Callable[..., str]:
    """The template compiled in a sandbox with the settings transformers uses."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: renders its body, marks nothing."""

        tags = {"generation"}  # noqa: RUF012 - jinja2's class attribute

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r}")

    class Dict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = Dict()
    env.globals["namespace"] = Namespace
    try:
        template = env.from_string(text)
    except jinja2.exceptions.TemplateError as exc:
        raise ChatError(f"the chat template does not compile: {exc}") from None
    return template.render


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Example:
    ids: list[int]
    mask: list[int]  # 1: the token is a target the loss counts


class ChatEncoder:
    """Renders conversations with one template and tokenizer; see the module docstring."""

    def __init__(self, tokenizer: Any, template: str, specials: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.render_fn = compile_template(template)
        self.specials = specials

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        import jinja2

        try:
            return self.render_fn(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self.specials,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise ChatError(f"the chat template refused it: {exc}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise ChatError(f"the chat template failed on it: {exc}") from None

    def spans(self, messages: list[dict[str, Any]], text: str) -> list[tuple[int, int]]:
        """Character spans of `text` (the whole conversation) the loss counts."""
        out = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self.render(messages[:i], add_generation_prompt=True)
            upto = self.render(messages[: i + 1], add_generation_prompt=False)
            if not text.startswith(upto):
                raise ChatError(
                    f"the chat template renders message {i + 1} differently once later "
                    "messages follow it; its turns cannot be masked by prefix"
                )
            start = _common_prefix(before, upto)
            end = len(upto.rstrip())
            if end > start:
                out.append((start, end))
        return out

    def encode(self, messages: list[dict[str, Any]]) -> Example:
        text = self.render(messages, add_generation_prompt=False)
        spans = self.spans(messages, text)
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        mask = []
        for begin, _ in encoding.offsets:
            mask.append(int(any(start <= begin < end for start, end in spans)))
        return Example(list(encoding.ids), mask)


def check_messages(record: Any) -> list[dict[str, Any]]:
    """The messages of one JSON line, or ChatError saying what is wrong with them."""
    if not isinstance(record, dict):
        raise ChatError("not a JSON object")
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise ChatError('no "messages" list')
    if not messages:
        raise ChatError("empty conversation (no messages)")
    for n, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise ChatError(f"message {n} is not an object")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ChatError(f'message {n} has no "role"')
        tool_call = role == "assistant" and bool(message.get("tool_calls"))
        if (
            role in ROLES_WITH_TEXT
            and not isinstance(message.get("content"), str)
            and not tool_call
        ):
            raise ChatError(f'message {n} ({role}) has no string "content"')
    return messages


def check_pair(record: Any) -> tuple[str, str]:
    """(prompt, completion) of one prompt-completion JSON line."""
    if not isinstance(record, dict):
        raise ChatError("not a JSON object")
    for key in ("prompt", "completion"):
        if not isinstance(record.get(key), str):
            raise ChatError(f'no string "{key}"')
    if not record["completion"]:
        raise ChatError('empty "completion"')
    return record["prompt"], record["completion"]
