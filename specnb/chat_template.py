"""Chat templates: `tokenizer.chat_template` rendered as HF transformers does (sandboxed jinja2)."""
from __future__ import annotations

import json
from datetime import datetime

from .errors import ParamError, VocabError


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def render_chat_template(template: str, messages, add_generation_prompt: bool = True,
                         source: str = "", **kwargs) -> str:
    """Render `template` with `messages` (a list of dicts with a 'role')."""
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise ParamError(f"invalid messages={messages!r:.80}: expected a list of dicts "
                         f"with 'role' and 'content'")
    for m in messages:
        if "role" not in m:
            raise ParamError(f"invalid message {m!r:.80}: it has no 'role'")
    where = f"{source}: " if source else ""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise VocabError(f"{where}chat template error: {message}")

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template).render(
            messages=list(messages), add_generation_prompt=bool(add_generation_prompt), **kwargs)
    except jinja2.TemplateError as e:
        raise VocabError(f"{where}cannot render the chat template: {type(e).__name__}: {e}") from None
