"""The sbatch script, rendered from a jinja2 template (the bundled one, or the user's own)."""

from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

from hyperpod_kit.jobs.context import JobContext

TEMPLATES = Path(__file__).resolve().parent / "templates"
BUNDLED = TEMPLATES / "slurm.sbatch.j2"


class TemplateError(Exception):
    """A template that does not render: a syntax error, or a name the context does not have."""


def render_sbatch(context: JobContext, *, template: Path = BUNDLED) -> str:
    """Render `template` with the job's validated values; `| q` shell-quotes a value."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template.parent),
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, not an empty string
        keep_trailing_newline=True,
        autoescape=False,  # shell, not HTML: values are quoted with `q` where they need it
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    try:
        text = env.get_template(template.name).render(**context.as_template_vars())
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{template}:{e.lineno}: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise TemplateError(f"{template}: {e.message}") from None
    return text if text.endswith("\n") else text + "\n"
