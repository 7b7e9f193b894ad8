"""Builds prompts: chat templates, marker isolation, truncation (see render.py)."""

from .render import *  # noqa: F403
from .render import (  # noqa: F401
    _COUNT_PIECE,
    _active_delimiters,
    _call_shape,
    _control_tokens,
    _min_tokens,
    _prepare_messages,
    _render,
    _strings,
    __all__,
    thinking_switch,
)
