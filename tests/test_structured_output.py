"""output_schema via submit_output, tool concurrency modes and the tool batch policy."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from agent_lattice import SUBMIT_OUTPUT_TOOL_NAME, OptionError, ToolResult, create_agent, tool
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

from conftest import Expr, make_calculator


class Review(BaseModel):
    approved: bool
    issues: list[str]


async def test_submit_output_validates_and_ends_with_structured_result(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(
            tool_use(SUBMIT_OUTPUT_TOOL_NAME, {"approved": "maybe"}),  # invalid: retried
            tool_use(SUBMIT_OUTPUT_TOOL_NAME, {"approved": False, "issues": ["typo"]}),
        )
    )
    agent = make_agent(output_schema=Review)

    result = await agent.prompt("Review the patch.")

    assert result.subtype == "success"
    assert result.structured_result == {"approved": False, "issues": ["typo"]}
    sent_tools = fake_anthropic.requests[0].tools
    assert sent_tools[0]["name"] == "submit_output"
    assert sent_tools[0]["input_schema"]["properties"]["issues"]["type"] == "array"
    invalid = fake_anthropic.requests[1].tool_results[0]
    assert invalid["is_error"] is True and "approved" in invalid["content"]


async def test_ending_without_submission_is_error_missing_output(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(text('{"approved": true, "issues": []}')))
    result = await make_agent(output_schema=Review).prompt("Review.")

    assert result.subtype == "error_missing_output" and result.is_error
    assert result.error.type == "MissingOutputError"
    from agent_lattice import MissingOutputError

    with pytest.raises(MissingOutputError):
        result.raise_for_error()


async def test_submit_output_must_be_alone_in_its_batch(make_agent, fake_anthropic):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(
            message(
                [
                    tool_use_block("calculator", {"expr": "1+1"}, id="toolu_calc"),
                    tool_use_block(
                        SUBMIT_OUTPUT_TOOL_NAME, {"approved": True, "issues": []}, id="toolu_sub"
                    ),
                ],
                stop_reason="tool_use",
            ),
            tool_use(SUBMIT_OUTPUT_TOOL_NAME, {"approved": True, "issues": []}),
        )
    )
    agent = make_agent(output_schema=Review, tools=[make_calculator(calls)])

    result = await agent.prompt("go")

    assert result.subtype == "success" and calls == []  # the mixed batch never ran
    rejected = fake_anthropic.requests[1].tool_results
    assert [r["is_error"] for r in rejected] == [True, True]
    body = json.loads(rejected[0]["content"])
    assert body["error"] == "submit_output_exclusive_batch"
    assert body["conflicting_tool_call_ids"] == ["toolu_calc", "toolu_sub"]


def test_submit_output_name_is_reserved():
    own = tool(SUBMIT_OUTPUT_TOOL_NAME, "mine", Expr, lambda i: "x")
    with pytest.raises(OptionError, match="reserved"):
        create_agent(model="m", output_schema=Review, tools=[own])
    create_agent(model="m", tools=[own])  # fine without output_schema


def batch(*args: str):
    return message(
        [tool_use_block("probe", {"expr": a}, id=f"toolu_{a}") for a in args],
        stop_reason="tool_use",
    )


def probe_tool(peak: list[int], **options):
    active = 0

    async def probe(input: Expr) -> ToolResult:
        nonlocal active
        active += 1
        peak.append(active)
        await asyncio.sleep(0.2)
        active -= 1
        return ToolResult(content=input.expr)

    return tool("probe", "Probe", Expr, probe, **options)


@pytest.mark.parametrize(
    ("concurrency", "safe", "expected_peak"),
    [
        ({"mode": "all"}, False, 4),
        ({"mode": "all", "max_concurrency": 2}, False, 2),
        ({"mode": "sequential"}, True, 1),
        ({"mode": "safe"}, True, 4),
    ],
)
async def test_tool_concurrency_modes(make_agent, fake_anthropic, concurrency, safe, expected_peak):
    peak: list[int] = []
    options = {"is_concurrency_safe": lambda _: True} if safe else {}
    fake_anthropic.set_handler(Script(batch("a", "b", "c", "d"), text("ok")))
    agent = make_agent(tools=[probe_tool(peak, **options)], tool_concurrency=concurrency)

    await agent.prompt("go")

    assert max(peak) == expected_peak
    hinted = "independent calls then run at the same time" in (
        fake_anthropic.requests[0].system or ""
    )
    assert hinted is (concurrency["mode"] != "sequential")
    assert [r["content"] for r in fake_anthropic.requests[1].tool_results] == ["a", "b", "c", "d"]


def test_bad_tool_concurrency_is_rejected():
    with pytest.raises(OptionError, match=r"tool_concurrency\.mode"):
        create_agent(model="m", tool_concurrency={"mode": "parallel"})
    with pytest.raises(OptionError, match='ToolConcurrency: unknown option "max"'):
        create_agent(model="m", tool_concurrency={"max": 3})


async def test_batch_policy_rejects_whole_batch_before_anything_runs(make_agent, fake_anthropic):
    calls: list[str] = []
    seen = []

    class NoDoubleAdd:
        async def validate(self, request):
            seen.append([(c.name, c.kind, c.input) for c in request.tool_calls])
            ids = [c.id for c in request.tool_calls if c.name == "calculator"]
            if len(ids) > 1:
                return {
                    "allowed": False,
                    "code": "invalid_tool_batch",
                    "message": "One addition per response.",
                    "conflicting_tool_call_ids": ids,
                    "suggested_next_step": "Add the numbers one at a time.",
                }
            return {"allowed": True}

    fake_anthropic.set_handler(
        Script(
            message(
                [
                    tool_use_block("calculator", {"expr": "1+1"}),
                    tool_use_block("calculator", {"expr": "2+2"}),
                ],
                stop_reason="tool_use",
            ),
            tool_use("calculator", {"expr": "1+1"}),
            text("2"),
        )
    )
    agent = make_agent(tools=[make_calculator(calls)], tool_batch_policy=NoDoubleAdd())

    result = await agent.prompt("add")

    assert result.result == "2" and calls == ["1+1"]
    assert seen[0] == [
        ("calculator", "tool", {"expr": "1+1"}),
        ("calculator", "tool", {"expr": "2+2"}),
    ]
    rejected = [json.loads(r["content"]) for r in fake_anthropic.requests[1].tool_results]
    assert all(r["error"] == "invalid_tool_batch" and r["executed"] is False for r in rejected)
    assert rejected[0]["suggested_next_step"] == "Add the numbers one at a time."


async def test_a_raising_policy_rejects_with_policy_error(make_agent, fake_anthropic):
    calls: list[str] = []

    def validate(request):
        raise RuntimeError("policy store offline")

    fake_anthropic.set_handler(Script(tool_use("calculator", {"expr": "1+1"}), text("gave up")))
    agent = make_agent(tools=[make_calculator(calls)], tool_batch_policy={"validate": validate})

    await agent.prompt("add")

    body = json.loads(fake_anthropic.requests[1].tool_results[0]["content"])
    assert body["error"] == "tool_batch_policy_error" and "policy store offline" in body["message"]
    assert calls == []
