# pyright: strict
"""A run's durable messages: the workflow stream its readers follow from any offset (topic
``messages``), carried across continue-as-new, and what the current workflow task published
(the last task's is the run's output tail).

The worker reads it outside workflow code once the server has taken one of the run's tasks,
for its commit notices (``worker/_commits``): ``notice_target``, ``published_at_start``,
``published_count`` and ``notice_stream`` are plain reads, no command.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

with workflow.unsafe.imports_passed_through():
    from ._types import AgentRunInput, Continuation

__all__ = ["MESSAGES_TOPIC", "STREAM_KEPT_ON_CONTINUE", "RunStream"]

MESSAGES_TOPIC = "messages"
# durable messages a run hands to its continuation (readers further behind re-read the record)
STREAM_KEPT_ON_CONTINUE = 200


class RunStream:
    """Owned by an AgentWorkflow: its stream of durable messages."""

    def __init__(self, input: AgentRunInput) -> None:
        self._input = input
        carried = input.continuation
        self._stream = WorkflowStream(prior_state=carried.stream if carried else None)
        self._out = self._stream.topic(MESSAGES_TOPIC)
        self.published = carried.published if carried else 0  # the offset after the last
        # what the current workflow task published
        self._task_length = 0
        self._task_items: list[object] = []

    def publish(self, message: object) -> None:
        length: int = workflow.info().get_current_history_length()
        if length != self._task_length:  # a new workflow task
            self._task_length, self._task_items = length, []
        self._task_items.append(message)
        self._out.publish(message)
        self.published += 1

    def tail(self) -> tuple[int, list[object]]:
        """What the current (the run's last) workflow task published, and its offset."""
        return self.published - len(self._task_items), self._task_items

    def close(self) -> None:
        """The run ends: readers waiting for more collect what is there."""
        self._stream.detach_pollers()

    async def continue_as_new(self, carried: Continuation) -> NoReturn:
        """Hand the query to a fresh run, which gets ``carried`` and the stream's recent
        messages and offsets, so readers (who follow the chain) see no seam."""
        if self.published > STREAM_KEPT_ON_CONTINUE:
            self._stream.truncate(self.published - STREAM_KEPT_ON_CONTINUE)
        await self._stream.continue_as_new(
            lambda state: [
                self._input.model_copy(
                    update={"continuation": carried.model_copy(update={"stream": state})}
                )
            ]
        )

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
        return self.published

    def notice_stream(self) -> WorkflowStream:
        """The stream, whose messages from an offset the worker reads (a read of the run's
        state: no command, nothing changed; ``worker/_sdk_internals.stream_batch``)."""
        return self._stream
