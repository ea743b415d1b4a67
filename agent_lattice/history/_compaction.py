"""Automatic context compaction (seeds: Automatic Context Compaction): pure parts.

Where to cut, what to send the summarizer, and the history that replaces the old one. The
durable step that calls the model lives in the ``lattice.compact`` activity; the decision to
compact is the workflow's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import OptionError
from .._loop import alternating
from .._messages import ModelMessage, TextBlock, ToolResultBlock
from .._options import check_options

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "CompactionSettings",
    "compacted_history",
    "cut_point",
    "is_context_overflow",
    "summary_request",
]

DEFAULT_COMPACTION_PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, so that the work "
    "can continue without it. Capture: the user's requests and intent; key technical facts, "
    "decisions and constraints; files, data and tool results that matter (with exact names "
    "and values); errors met and how they were resolved; what has been completed; what is "
    "pending; and the exact next step. Write only the summary."
)

_WRAP = (
    "Context compaction just happened: the earlier part of this conversation was replaced by "
    "the summary below because it no longer fit in the context window. Continue the task "
    "from where it stands, using the summary as your memory of what happened; do not start "
    "over or repeat finished work.\n\n<summary>\n{summary}\n</summary>"
)

_OPTIONS = frozenset({"threshold_tokens", "keep_recent_messages", "prompt"})


@dataclass(frozen=True)
class CompactionSettings:
    threshold_tokens: int = 100_000
    keep_recent_messages: int = 6
    prompt: str = DEFAULT_COMPACTION_PROMPT

    @classmethod
    def from_option(cls, value: Any) -> CompactionSettings | None:
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise OptionError(
                "AgentOptions: auto_compact must be True or a mapping with threshold_tokens, "
                f"keep_recent_messages, prompt; got {type(value).__name__}"
            )
        check_options("AutoCompactOptions", value, _OPTIONS)
        settings = cls(**dict(value))
        for key in ("threshold_tokens", "keep_recent_messages"):
            number = getattr(settings, key)
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise OptionError(f"auto_compact: {key} must be a positive integer; got {number!r}")
        if not isinstance(settings.prompt, str) or not settings.prompt.strip():
            raise OptionError("auto_compact: prompt must be a non-empty string")
        return settings


def _has_tool_results(message: ModelMessage) -> bool:
    return any(isinstance(b, ToolResultBlock) for b in message.blocks)


def cut_point(messages: Sequence[ModelMessage], keep_recent: int) -> int | None:
    """Where the retained tail starts: at most ``len - keep_recent`` and at least 1, at an
    assistant message or a user message that answers no tool call, so no tool_result is ever
    separated from its tool_use. None when no such cut leaves something to summarize."""
    for i in range(len(messages) - keep_recent, 0, -1):
        message = messages[i]
        if message.role == "assistant" or not _has_tool_results(message):
            return i
    return None


def summary_request(messages: Sequence[ModelMessage], prompt: str) -> list[ModelMessage]:
    """The summarized part followed by the instruction, as one valid conversation (an
    interrupted query's unanswered prompt and the next one merged, as in model requests)."""
    out = alternating(list(messages))
    instruction = TextBlock(text=prompt)
    if out and out[-1].role == "user":
        out[-1] = out[-1].model_copy(update={"content": [*out[-1].blocks, instruction]})
    else:
        out.append(ModelMessage(role="user", content=[instruction]))
    return out


def compacted_history(
    messages: Sequence[ModelMessage], cut: int, summary: str
) -> list[ModelMessage]:
    """The summary (wrapped in the instruction to continue) followed by the retained tail."""
    wrapped = TextBlock(text=_WRAP.format(summary=summary.strip()))
    tail = list(messages[cut:])
    if tail and tail[0].role == "user":  # a plain user message: the summary goes first in it
        return [tail[0].model_copy(update={"content": [wrapped, *tail[0].blocks]}), *tail[1:]]
    return [ModelMessage(role="user", content=[wrapped]), *tail]


_OVERFLOW_MARKERS = ("prompt is too long", "context window", "context length", "too many tokens")


def is_context_overflow(status_code: int | None, message: str) -> bool:
    """An API error that names a prompt too long for the model's context window."""
    text = message.lower()
    return status_code in (None, 400, 413) and any(m in text for m in _OVERFLOW_MARKERS)
