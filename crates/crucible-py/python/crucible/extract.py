"""Finding the candidate's code in a model's completion."""

from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(completion) -> str | None:
    """The candidate source in ``completion`` (a string, or a chat completion: a list of
    messages whose last ``content`` is read).

    The last fenced block that defines ``ModelNew``; else the last Python block; else the whole
    text when it defines ``ModelNew``; else ``None`` (the turn produced no kernel: a *void* turn,
    scored by the recipe's ``void_reward``, never sent to the judge).
    """
    if isinstance(completion, list):
        completion = completion[-1].get("content", "") if completion else ""
    text = completion or ""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for _, body in reversed(blocks):
        if "class ModelNew" in body:
            return body
    for lang, body in reversed(blocks):
        if lang in ("python", "py"):
            return body
    if "class ModelNew" in text:
        return text
    return None
