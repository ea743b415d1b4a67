# pyright: strict
"""The commit-notice part of AgentWorkflow: read by the worker, outside workflow code, once
the server has taken one of the run's workflow tasks (``worker/_commits``)."""

from __future__ import annotations

from typing import Any

from temporalio.contrib.workflow_streams import WorkflowStream

__all__ = ["MESSAGES_TOPIC", "CommitSource"]

MESSAGES_TOPIC = "messages"


class CommitSource:
    """Where the run's caller listens for live events, and what its stream holds."""

    _input: Any  # AgentRunInput
    _stream: WorkflowStream
    _published: int

    def notice_target(self) -> tuple[str, str] | None:
        """The caller's side channel (address, channel), when it gave one (``query()``)."""
        to, channel = self._input.stream_to, self._input.stream_channel
        return (to, channel) if to and channel else None

    def published_at_start(self) -> int:
        """The stream's length when the run began (what a run it continues handed on)."""
        carried = self._input.continuation
        return carried.published if carried is not None else 0

    def published_count(self) -> int:
        """The stream's length: the offset after its last message."""
        return self._published

    def notice_stream(self) -> WorkflowStream:
        """The run's stream, whose messages from an offset the worker reads (a read of the
        run's state: no command, nothing changed; ``worker/_sdk_internals.stream_batch``)."""
        return self._stream
