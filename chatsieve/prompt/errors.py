"""The prompt builder's errors: a prompt that cannot be built, one over its token limit, and a
request's template variable that may not be set."""

from __future__ import annotations


class PromptError(ValueError):
    """The prompt cannot be built as asked (bad template, unsafe isolation, unsupported option)."""


class PromptTooLong(PromptError):
    """The prompt has more tokens than `token_limit` (`tokens` is a lower bound when it was
    refused before tokenizing it all)."""

    def __init__(self, tokens: int, limit: int, *, exact: bool) -> None:
        more = "" if exact else "at least "
        super().__init__(f"the prompt has {more}{tokens} tokens, more than the limit of {limit}")
        self.tokens, self.limit, self.exact = tokens, limit, exact


class TemplateVariableError(PromptError):
    """A request's template variable that may not be set, or not to this value (`name` says which)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
