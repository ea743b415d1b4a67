"""What a run that closed without an output had landed, rebuilt from its history.

A run ends with an output (``AgentRunOutput``: the transcript head after it) however its
query ended, unless Temporal ended it from outside: terminated (``temporal workflow
terminate``, the UI), timed out (a run timeout) or failed by the server. Its turns happened
all the same (a tool that ran had its effect), and its history still holds them: each model
request's input (the transcript as sent, by reference into the transcript store) and output
(the reply appended), each tool call's result. Rebuilt from those, the conversation keeps
every turn the run completed, and every tool call of its last reply is answered: with its
result when the call finished, else saying it did not finish (it may have taken effect) or
never started. Nothing here needs a worker: the history and the transcript store suffice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from .._messages import ModelMessage, ToolResultBlock, ToolUseBlock
from ..history._transcripts import TranscriptStore, hydrate
from ..workflows._contract import ActivityName
from ..workflows._failures import did_not_finish
from ..workflows._types import ModelCallInput, ModelCallOutput, ToolCallInput, ToolCallOutput

__all__ = ["landed_conversation"]

_LOCAL_MARKER = "core_local_activity"
ENDED_FROM_OUTSIDE = "its run was ended from outside (terminated or timed out)"


class _Turns:
    """The model requests and tool calls of one run's history, in order."""

    def __init__(self) -> None:
        self.sent: ModelCallInput | None = None  # the last model request scheduled
        self.replied: ModelCallOutput | None = None  # the last one answered
        self.reply_of_last = False  # the last request scheduled was answered
        self.results: dict[str, ToolResultBlock] = {}  # tool results since that reply

    def scheduled(self, name: str, argument: Any) -> None:
        if name == ActivityName.MODEL_REQUEST:
            self.sent, self.reply_of_last = argument, False

    def completed(self, name: str, result: Any) -> None:
        if name == ActivityName.MODEL_REQUEST:
            self.replied, self.reply_of_last = result, True
            self.results = {}
        elif name == ActivityName.TOOL_CALL and result.approval is None:
            self.results[result.block.tool_use_id] = result.block


async def landed_conversation(
    client: Client, store: TranscriptStore, workflow_id: str
) -> list[ModelMessage] | None:
    """The conversation as the latest run of ``workflow_id`` had landed it (its prompt, its
    last reply's tool calls answered), or None when it made no model request."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    turns = await _read(client, history.events)
    if turns.sent is None:
        return None
    if not turns.reply_of_last:  # a request under way: its input holds every earlier turn
        head = await store.append(turns.sent.head, turns.sent.unsent)
        return await hydrate(await store.messages(head), store)
    if turns.replied is None or turns.replied.head is None:
        return None
    messages = await hydrate(await store.messages(turns.replied.head), store)
    calls = messages[-1].tool_uses if messages and messages[-1].role == "assistant" else []
    if calls:
        messages.append(_answered(calls, turns))
    return messages


def _answered(calls: Sequence[ToolUseBlock], turns: _Turns) -> ModelMessage:
    """The user turn answering the last reply's tool calls as far as they got: a call with no
    result may have run or not (a local activity leaves no trace until it finished)."""
    blocks = [
        turns.results.get(call.id)
        or ToolResultBlock(
            tool_use_id=call.id,
            content=did_not_finish(call.name, ENDED_FROM_OUTSIDE),
            is_error=True,
        )
        for call in calls
    ]
    return ModelMessage(role="user", content=list(blocks))


async def _read(client: Client, events: Sequence[HistoryEvent]) -> _Turns:
    turns = _Turns()
    names: dict[int, str] = {}  # scheduled event id -> activity type
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            name = names[event.event_id] = attributes.activity_type.name
            if name == ActivityName.MODEL_REQUEST:
                turns.scheduled(
                    name, await _decode(client, name, attributes.input.payloads, inputs=True)
                )
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            name = names.get(attributes.scheduled_event_id, "")
            result = await _decode(client, name, attributes.result.payloads, inputs=False)
            if result is not None:
                turns.completed(name, result)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            await _local(client, event, turns)
    return turns


async def _local(client: Client, event: HistoryEvent, turns: _Turns) -> None:
    """A local activity's marker: a tool call marked cheap ran as one."""
    attributes = event.marker_recorded_event_attributes
    if attributes.marker_name != _LOCAL_MARKER or "data" not in attributes.details:
        return
    try:
        data = json.loads(attributes.details["data"].payloads[0].data)
    except (ValueError, IndexError):
        return
    name = str(data.get("activity_type", ""))
    if name == ActivityName.TOOL_CALL and "result" in attributes.details:
        result = await _decode(client, name, attributes.details["result"].payloads, inputs=False)
        if result is not None:
            turns.completed(name, result)


_TYPES: dict[str, tuple[type, type]] = {
    ActivityName.MODEL_REQUEST: (ModelCallInput, ModelCallOutput),
    ActivityName.TOOL_CALL: (ToolCallInput, ToolCallOutput),
}


async def _decode(
    client: Client, name: str, payloads: Sequence[Payload], *, inputs: bool
) -> Any | None:
    types = _TYPES.get(name)
    if types is None or not payloads:
        return None
    (value,) = await client.data_converter.decode(list(payloads)[:1], [types[0 if inputs else 1]])
    return value
