"""A conformance check any :class:`~agent_lattice.HistoryStore` implementation can run."""

from __future__ import annotations

from collections.abc import Callable

from .._messages import ModelMessage
from ..history._stores import HistoryStore

__all__ = ["SAMPLE_CONVERSATION", "check_history_store_conformance"]

SAMPLE_CONVERSATION = [
    ModelMessage(role="user", content="What is 2+2? Ünïcødé ✓"),
    ModelMessage.model_validate(
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "add them", "signature": "sig-1"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"expr": "2+2"}},
            ],
            "provider_response_id": "msg_1",
            "model": "claude-test",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    ),
    ModelMessage.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4", "is_error": False}
            ],
        }
    ),
    ModelMessage.model_validate(
        {"role": "assistant", "content": [{"type": "text", "text": "4"}], "stop_reason": "end_turn"}
    ),
]


async def check_history_store_conformance(open_store: Callable[[], HistoryStore]) -> None:
    """Exercise the store contract; raises ``AssertionError`` naming the first broken rule.

    ``open_store()`` must return a store over the same, initially empty, conversation each time
    it is called (a second call stands for another process opening it).
    """
    store = open_store()
    assert await store.load() == [], "a new conversation must load as []"
    for message in SAMPLE_CONVERSATION:
        await store.append(message)
    loaded = await store.load()
    assert loaded == SAMPLE_CONVERSATION, f"append() then load() must round-trip, got {loaded}"
    reopened = await open_store().load()
    assert reopened == SAMPLE_CONVERSATION, "a store opened again must see earlier appends"

    summary = [ModelMessage(role="user", content="Summary: the user asked 2+2; it is 4.")]
    await store.replace(summary + SAMPLE_CONVERSATION[-1:])
    assert await open_store().load() == summary + SAMPLE_CONVERSATION[-1:], (
        "replace() must install exactly the given messages"
    )
    await store.append(SAMPLE_CONVERSATION[0])
    assert await store.load() == [*summary, SAMPLE_CONVERSATION[-1], SAMPLE_CONVERSATION[0]], (
        "append() after replace() must continue the replaced conversation"
    )
    await store.replace([])
    assert await store.load() == [], "replace([]) must empty the conversation"
