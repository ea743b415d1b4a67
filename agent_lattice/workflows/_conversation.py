# pyright: strict
"""A query's conversation as its run holds it: by reference, a head in the transcript store
(the activities read and write the transcript), then the messages not stored yet."""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage

__all__ = ["Conversation"]


@dataclass
class Conversation:
    """Owned by an AgentWorkflow, carried across continue-as-new and returned in its output.

    ``new_count``: the messages this query added (its prompt first), which the caller's
    session appends; ``compacted``: a summary replaced older messages, so the caller's session
    takes the transcript at ``head`` instead."""

    head: str | None
    unsent: list[ModelMessage] = field(default_factory=lambda: [])
    new_count: int = 1
    compacted: bool = False

    def add(self, message: ModelMessage) -> None:
        """A message of the workflow's own (tool results, steers): sent with the next request,
        which stores it."""
        self.unsent.append(message)
        self.new_count += 1

    def replied(self, head: str | None) -> None:
        """The model's reply joined: its request stored what was sent and the reply at
        ``head``."""
        self.head, self.unsent = head, []
        self.new_count += 1

    def dropped_reply(self, request_head: str | None) -> None:
        """The last reply left the conversation (its tool calls got no results): back to what
        its request sent."""
        self.head = request_head
        self.new_count -= 1

    def restart_at(self, head: str | None, *, compacted: bool = False) -> None:
        """The conversation is now the transcript at ``head`` (an overflowed request's, or a
        compaction's summary)."""
        self.head, self.unsent = head, []
        self.compacted = self.compacted or compacted
