"""Automatic context compaction: cut points (property-tested), threshold compaction between
turns, and recovery from a context-window overflow, on the real dev server."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_lattice import (
    DEFAULT_COMPACTION_PROMPT,
    ModelMessage,
    OptionError,
    SystemMessage,
    create_agent,
    define_history_store,
)
from agent_lattice.history._compaction import compacted_history, cut_point, summary_request
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    collect,
    error,
    message,
    text,
    text_block,
    tool_use,
)

from conftest import make_calculator

# -- cut points ------------------------------------------------------------------------------


@st.composite
def conversations(draw) -> list[ModelMessage]:
    """Valid conversations: prompts, tool rounds (one or more calls each), final answers."""
    messages: list[ModelMessage] = []
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        messages.append(ModelMessage(role="user", content=f"prompt {len(messages)}"))
        for _ in range(draw(st.integers(0, 4))):
            ids = [f"toolu_{(n := n + 1)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(
                ModelMessage.model_validate(
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": i, "name": "t", "input": {}} for i in ids
                        ],
                    }
                )
            )
            messages.append(
                ModelMessage.model_validate(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids
                        ],
                    }
                )
            )
        if draw(st.booleans()) or not messages[-1].role == "user":
            messages.append(ModelMessage(role="assistant", content=[{"type": "text", "text": "a"}]))
    return messages


def assert_valid(messages: list[ModelMessage]) -> None:
    assert messages[0].role == "user"
    for before, after in itertools.pairwise(messages):
        results = {b.tool_use_id for b in after.blocks if b.type == "tool_result"}
        if results:
            assert before.role == "assistant"
            assert results <= {u.id for u in before.tool_uses}, (
                "tool_result separated from its tool_use"
            )


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 12))
def test_cut_never_separates_a_tool_result_from_its_tool_use(messages, keep):
    cut = cut_point(messages, keep)
    if cut is None:
        assert all(
            m.role == "user" and any(b.type == "tool_result" for b in m.blocks)
            for m in messages[1 : max(1, len(messages) - keep + 1)]
        )
        return
    assert 1 <= cut <= len(messages) - keep
    compacted = compacted_history(messages, cut, "SUMMARY")
    assert_valid(compacted)
    assert "SUMMARY" in compacted[0].blocks[0].text
    assert "Continue the task" in compacted[0].blocks[0].text
    assert (
        compacted[-(len(messages) - cut - 1) :] == messages[cut + 1 :] or cut == len(messages) - 1
    )
    request = summary_request(messages[:cut], "PROMPT")
    assert_valid(request)
    assert request[-1].role == "user" and request[-1].blocks[-1].text == "PROMPT"


# -- on the dev server -----------------------------------------------------------------------


def is_summary_request(request: RecordedRequest) -> bool:
    return DEFAULT_COMPACTION_PROMPT in (request.last_user_text or "")


def handler(*replies: Reply, summary: str = "The user asked for 2+2; calculator said 4."):
    """Answers summary requests with ``summary`` and everything else from ``replies``."""
    queue = list(replies)

    def handle(request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return text(summary, usage={"input_tokens": 40, "output_tokens": 9})
        return queue.pop(0)

    return handle


def compacting_between_turns(make_agent, fake_anthropic, **options):
    """An agent whose tool call reads 500 tokens, past its 100-token threshold: the
    conversation is compacted (the last 2 messages kept) before the next request."""
    fake_anthropic.set_handler(
        handler(
            tool_use(
                "calculator", {"expr": "2+2"}, usage={"input_tokens": 500, "output_tokens": 5}
            ),
            text("4, as computed.", usage={"input_tokens": 20, "output_tokens": 4}),
        )
    )
    return make_agent(
        tools=[make_calculator()],
        auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2},
        **options,
    )


async def test_threshold_compaction_between_turns(make_agent, fake_anthropic):
    replaced: list[list[ModelMessage]] = []
    store = define_history_store(load=list, append=lambda m: None, replace=replaced.append)
    agent = compacting_between_turns(make_agent, fake_anthropic, history_store=store)

    messages = await collect(agent.query("What is 2+2?"))

    compaction = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "compaction"]
    assert len(compaction) == 1
    assert compaction[0].compacted_messages == 1
    assert compaction[0].usage.input_tokens == 40
    result = messages[-1]
    assert result.subtype == "success" and result.result == "4, as computed."
    assert result.usage.input_tokens == 500 + 40 + 20  # the summary's tokens are folded in
    assert result.num_turns == 2
    summary_req, after = fake_anthropic.requests[1], fake_anthropic.requests[2]
    assert is_summary_request(summary_req)
    assert [m["role"] for m in summary_req.messages] == ["user"]
    # the next turn resumes from the summary, with the recent tool round kept intact
    first = after.messages[0]["content"][0]["text"]
    assert "The user asked for 2+2" in first and "Continue the task" in first
    assert [m["role"] for m in after.messages] == ["user", "assistant", "user"]
    assert after.tool_results[0]["content"] == "4"
    history = await agent.get_history()
    assert len(history) == 4 and "The user asked for 2+2" in history[0].blocks[0].text
    assert replaced and replaced[-1] == history  # the store was replaced, not appended


async def test_overflow_error_recovers_once_by_compacting(make_agent, fake_anthropic):
    too_long = error(400, "prompt is too long: 210000 tokens > 200000 maximum")
    fake_anthropic.set_handler(handler(text("noted"), too_long, text("recovered")))
    agent = make_agent(auto_compact={"keep_recent_messages": 1})
    await agent.prompt("Remember: the code is 7.")

    result = await agent.prompt("What is the code?")

    assert result.subtype == "success" and result.result == "recovered"
    assert result.num_turns == 1  # the same turn, retried
    kinds = ["summary" if is_summary_request(r) else "turn" for r in fake_anthropic.requests]
    assert kinds == ["turn", "turn", "summary", "turn"]
    retried = fake_anthropic.requests[-1].messages
    assert [m["role"] for m in retried] == ["user"]  # summary merged into the kept prompt
    assert retried[0]["content"][-1]["text"] == "What is the code?"

    # once per query: a second overflow in the same query surfaces unchanged
    fake_anthropic.set_handler(handler(too_long, too_long))
    failed = await agent.prompt("And again?")
    assert failed.subtype == "error_during_execution"
    assert failed.error.type == "APIError" and "prompt is too long" in failed.error.message


async def test_context_window_stop_reason_recovers(make_agent, fake_anthropic):
    overflow = message([text_block("")], stop_reason="model_context_window_exceeded")
    fake_anthropic.set_handler(handler(text("noted"), overflow, text("fits now")))
    agent = make_agent(auto_compact={"keep_recent_messages": 1})
    await agent.prompt("First.")
    result = await agent.prompt("Second.")
    assert result.result == "fits now"
    history = await agent.get_history()
    assert all(m.stop_reason != "model_context_window_exceeded" for m in history)


async def test_no_compaction_without_option_for_max_tokens_or_without_a_safe_cut(
    make_agent, fake_anthropic
):
    too_long = error(400, "prompt is too long")
    fake_anthropic.set_handler(handler(too_long))
    plain = make_agent()
    failed = await plain.prompt("hi")
    assert failed.error.type == "APIError" and "prompt is too long" in failed.error.message

    truncated = message(
        [text_block("cut off")], stop_reason="max_tokens", usage={"input_tokens": 10**6}
    )
    fake_anthropic.set_handler(handler(truncated, text("next")))
    agent = make_agent(auto_compact={"threshold_tokens": 100, "keep_recent_messages": 8})
    first = await agent.prompt("long answer please")
    assert first.stop_reason == "max_tokens"
    messages = await collect(agent.query("go on"))  # over threshold, but nothing safe to cut
    assert not any(isinstance(m, SystemMessage) and m.subtype == "compaction" for m in messages)
    assert not any(is_summary_request(r) for r in fake_anthropic.requests)


def test_auto_compact_options_are_checked():
    with pytest.raises(OptionError, match='AutoCompactOptions: unknown option "thresholdTokens"'):
        create_agent(model="m", auto_compact={"thresholdTokens": 5})
    with pytest.raises(OptionError, match="keep_recent_messages must be a positive integer"):
        create_agent(model="m", auto_compact={"keep_recent_messages": 0})
    with pytest.raises(OptionError, match="auto_compact must be True or a mapping"):
        create_agent(model="m", auto_compact="yes")


async def test_a_summary_request_keeps_the_roles_alternating(make_agent, fake_anthropic):
    """An interrupted query leaves its prompt unanswered, then the next prompt follows: the
    summary request merges them into one user message too (providers reject two in a row)."""
    agent = compacting_between_turns(make_agent, fake_anthropic)
    await agent.replace_history(
        [
            ModelMessage(role="user", content="Hello."),
            ModelMessage(role="assistant", content="Hi."),
            ModelMessage(role="user", content="Draft the notes."),  # interrupted, unanswered
        ]
    )
    result = await agent.prompt("What is 2+2?")

    assert result.result == "4, as computed."
    summary_req = fake_anthropic.requests[1]
    assert is_summary_request(summary_req)
    assert [m["role"] for m in summary_req.messages] == ["user", "assistant", "user"]
    texts = [b["text"] for b in summary_req.messages[2]["content"]]
    assert texts[:2] == ["Draft the notes.", "What is 2+2?"]
