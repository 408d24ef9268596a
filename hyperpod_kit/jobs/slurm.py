"""The sbatch script, rendered from a jinja2 template (the bundled one, or the user's own)."""

from __future__ import annotations

from pathlib import Path

from hyperpod_kit.jobs.context import JobContext
from hyperpod_kit.templating import RenderError, environment, render

TEMPLATES = Path(__file__).resolve().parent / "templates"
BUNDLED = TEMPLATES / "slurm.sbatch.j2"


class TemplateError(Exception):
    """A template that does not render: a syntax error, a name the context does not have, a
    value output without a filter or one its filter refuses. `hint` says what to change."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def render_sbatch(context: JobContext, *, template: Path = BUNDLED) -> str:
    """Render `template` with the job's validated values, in hyperpod-kit's one template
    environment (hyperpod_kit/templating.py): `| q` for a shell word, `| sbatch` for an #SBATCH
    value; a value without its filter fails the render."""
    env = environment(template.parent)
    try:
        text = render(env, template.name, context.as_template_vars(), shown_as=str(template))
    except RenderError as e:
        raise TemplateError(str(e), e.hint) from None
    return text if text.endswith("\n") else text + "\n"
