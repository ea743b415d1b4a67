"""Supervisor delegation: agent tools run their child agents as child workflows."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agent_lattice import (
    OptionError,
    ResultMessage,
    ToolResult,
    agent_tool,
    create_agent,
    create_bare_agent,
    create_team,
    define_agent,
    delegate_tool,
    tool,
)
from agent_lattice.testing import (
    RecordedRequest,
    Reply,
    Script,
    hang,
    message,
    text,
    tool_use,
    tool_use_block,
)
from agent_lattice.workflows._outcomes import output_of_failure

from conftest import API_KEY, Expr, HostMember, by_agent, child_ids, make_calculator


def spec(fake, name: str, **options):
    return define_agent(
        api_key=API_KEY,
        base_url=fake.base_url,
        model="claude-test",
        name=name,
        system_prompt=f"You are {name}.",
        **options,
    )


async def test_ask_runs_the_child_as_a_child_workflow(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(
                tool_use(
                    "explore",
                    {
                        "mode": "ask",
                        "task": "Find the runner.",
                        "expected_output": "A file map",
                        "acceptance_criteria": ["Mention the runner entry point"],
                    },
                    usage={"input_tokens": 10, "output_tokens": 2},
                ),
                text("The runner is in runner.py.", usage={"input_tokens": 20, "output_tokens": 3}),
            ),
            explorer=Script(
                text("runner.py holds the runner.", usage={"input_tokens": 7, "output_tokens": 5})
            ),
        )
    )
    explorer = spec(fake_anthropic, "explorer")
    supervisor = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[agent_tool("explore", explorer, description="Ask the explorer.")],
    )

    result = await supervisor.prompt("Where is the runner?")

    assert result.subtype == "success" and result.result == "The runner is in runner.py."
    child_request = next(r for r in fake_anthropic.requests if "explorer" in (r.system or ""))
    prompt = child_request.messages[0]["content"]
    assert prompt.startswith("Find the runner.")
    assert "Expected output: A file map" in prompt and "- Mention the runner entry point" in prompt
    parent_second = [r for r in fake_anthropic.requests if "supervisor" in (r.system or "")][1]
    assert parent_second.tool_results[0]["content"] == "runner.py holds the runner."
    # the tool the supervisor saw describes its semantics
    sent = {t["name"]: t for t in fake_anthropic.requests[0].tools}["explore"]
    assert "Ask the explorer." in sent["description"]
    assert "fresh session" in sent["description"]
    assert set(sent["input_schema"]["properties"]) >= {"mode", "task", "expected_output"}
    # usage rolls up, with each agent's own share
    assert result.usage.input_tokens == 10 + 20 + 7
    assert result.usage_by_agent["explorer"].input_tokens == 7
    assert result.usage_by_agent["supervisor"].input_tokens == 30
    # the child is a child workflow of the query
    history = await make_agent.runtime.client.get_workflow_handle(
        result.workflow_id
    ).fetch_history()
    started = [
        e.start_child_workflow_execution_initiated_event_attributes
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert len(started) == 1 and started[0].workflow_type.name == "AgentWorkflow"
    assert started[0].workflow_id.startswith("explorer-")


async def test_session_keeps_history_spec_starts_fresh_and_runs_side_by_side(
    make_agent, fake_anthropic
):
    seen: dict[str, list[int]] = {"memo": [], "scratch": []}

    def child(name: str):
        def handle(request: RecordedRequest) -> Reply:
            seen[name].append(len(request.messages))
            return text(f"{name} answer {len(seen[name])}")

        return handle

    def supervisor(request: RecordedRequest) -> Reply:
        done = len(request.tool_results)
        if not request.tool_results:
            return message(
                [
                    tool_use_block("remember", {"task": "one"}),
                    tool_use_block("fresh", {"task": "a"}),
                    tool_use_block("fresh", {"task": "b"}),
                ],
                stop_reason="tool_use",
            )
        if done == 3 and len(request.messages) == 3:
            return tool_use("remember", {"task": "two"})
        return text("done")

    fake_anthropic.set_handler(
        by_agent(supervisor=supervisor, memo=child("memo"), scratch=child("scratch"))
    )
    memo = create_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="memo",
        system_prompt="You are memo.",
    )
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[
            agent_tool("remember", memo),
            agent_tool("fresh", spec(fake_anthropic, "scratch")),
        ],
    )
    result = await agent.prompt("go")

    assert result.subtype == "success"
    assert seen["memo"] == [1, 3]  # the session remembers its first task
    assert memo.interrupt() is False  # idle again once its delegated queries ended
    assert seen["scratch"] == [1, 1]  # each spec call is a fresh session
    assert [m.role for m in await memo.get_history()] == ["user", "assistant"] * 2
    sent = {t["name"]: t["description"] for t in fake_anthropic.requests[0].tools}
    assert "keeps its conversation across calls" in sent["remember"]


class Findings(BaseModel):
    files: list[str]
    notes: str


async def test_structured_child_output_is_inherited_and_validated(make_agent, fake_anthropic):
    child_script = Script(
        tool_use("submit_output", {"files": ["runner.py"], "notes": "entry point"}),
        text("never used"),
        text("I forgot to submit."),
    )
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(
                tool_use("explore", {"task": "map it"}),
                tool_use("explore", {"task": "again"}),
                text("ok"),
            ),
            explorer=child_script,
        )
    )
    explorer = spec(fake_anthropic, "explorer", output_schema=Findings)
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[agent_tool("explore", explorer)],
    )
    await agent.prompt("go")

    parent = [r for r in fake_anthropic.requests if "supervisor" in (r.system or "")]
    first, second = parent[1].tool_results[0], parent[2].tool_results[0]
    assert json.loads(first["content"]) == {"files": ["runner.py"], "notes": "entry point"}
    assert second["is_error"] is True
    assert second["content"].startswith("child_output_invalid: error_missing_output")
    assert (
        "validated structured output as JSON"
        in {t["name"]: t for t in parent[0].tools}["explore"]["description"]
    )


def test_assembly_checks():
    class Other(BaseModel):
        verdict: str

    child = define_agent(model="m", name="c", output_schema=Findings)
    agent_tool("same", child, output_schema=Findings)  # the same schema is fine
    with pytest.raises(OptionError, match="does not match the target's output_schema"):
        agent_tool("judge", child, output_schema=Other)
    with pytest.raises(OptionError, match="input_schema and map_input must be given together"):
        agent_tool("judge", child, input_schema=Expr)
    with pytest.raises(OptionError, match='agent_tool\\("judge"\\): unknown option "bogus"'):
        agent_tool("judge", child, bogus=1)
    with pytest.raises(OptionError, match='delegate_tool\\("judge"\\): unknown option "mapInput"'):
        delegate_tool("judge", child, mapInput=str)
    with pytest.raises(OptionError, match="target must be an Agent, an AgentSpec or an AgentLike"):
        agent_tool("judge", object())
    assert agent_tool("meta", child, metadata={"v": 2}).metadata == {"v": 2}
    bare = define_agent(model="m", name="bare", workspace=False)
    assert bare.spawn().config.workspace is False
    with pytest.raises(OptionError, match="workspace must be a path or False"):
        define_agent(model="m", workspace=3)


class Case(BaseModel):
    case_summary: str
    documents: list[str]


async def test_typed_delegation_maps_input_and_rejects_bad_arguments(make_agent, fake_anthropic):
    judge_script = Script(text("guilty of verbosity"))
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(
                tool_use("judge", {"case_summary": "x"}),  # missing documents: rejected
                tool_use("judge", {"case_summary": "long emails", "documents": ["a", "b"]}),
                tool_use("explore", {"mode": "handoff", "task": "later"}),
                tool_use("explore", {"mode": "observe", "task": "watch"}),
                text("done"),
            ),
            judge=judge_script,
        )
    )
    judge = spec(fake_anthropic, "judge")
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[
            agent_tool(
                "judge",
                judge,
                input_schema=Case,
                map_input=lambda c: [
                    {"type": "text", "text": f"Case: {c.case_summary}"},
                    {"type": "text", "text": f"Documents: {', '.join(c.documents)}"},
                ],
            ),
            agent_tool("explore", spec(fake_anthropic, "explorer")),
        ],
    )
    await agent.prompt("judge it")

    parent = [r for r in fake_anthropic.requests if "supervisor" in (r.system or "")]
    invalid = parent[1].tool_results[0]
    assert invalid["is_error"] is True and "documents" in invalid["content"]
    assert parent[2].tool_results[0]["content"] == "guilty of verbosity"
    judged = [r for r in fake_anthropic.requests if "You are judge." in (r.system or "")]
    assert len(judged) == 1  # the invalid call never reached the child
    assert judged[0].messages[0]["content"] == [
        {"type": "text", "text": "Case: long emails"},
        {"type": "text", "text": "Documents: a, b"},
    ]
    assert "properties" in {t["name"]: t for t in parent[0].tools}["judge"]["input_schema"]
    assert parent[3].tool_results[0]["content"].startswith("handoff_unsupported:")
    assert parent[4].tool_results[0]["content"].startswith("observe_unsupported:")


class Adapter:
    """A host-defined AgentLike: not an Agent, so it runs inside a tool activity."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def query(self, prompt, **options):
        raise NotImplementedError

    async def prompt(self, prompt, **options) -> ResultMessage:
        self.prompts.append(prompt)
        await asyncio.sleep(0.05)
        return ResultMessage(subtype="success", result=f"adapter says: {prompt}", session_id="x")

    def interrupt(self) -> bool:
        return False


async def test_host_adapter_runs_in_an_activity(make_agent, fake_anthropic):
    fake_anthropic.set_handler(Script(tool_use("external", {"task": "ping"}), text("done")))
    adapter = Adapter()
    agent = make_agent(tools=[agent_tool("external", adapter)])
    result = await agent.prompt("go")
    assert result.subtype == "success"
    assert adapter.prompts == ["ping"]
    assert fake_anthropic.requests[1].tool_results[0]["content"] == "adapter says: ping"
    history = await make_agent.runtime.client.get_workflow_handle(
        result.workflow_id
    ).fetch_history()
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "lattice.tool_call" in kinds


async def test_three_levels_and_abort_reaches_the_grandchild(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(tool_use("explore", {"task": "dig"}), text("summary: fine")),
            explorer=Script(tool_use("review", {"task": "check"}), text("explored: fine")),
            reviewer=Script(text("reviewed: fine")),
        )
    )
    reviewer = spec(fake_anthropic, "reviewer")
    explorer = spec(fake_anthropic, "explorer", tools=[agent_tool("review", reviewer)])
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[agent_tool("explore", explorer)],
    )
    result = await agent.prompt("go")
    assert result.result == "summary: fine"
    assert set(result.usage_by_agent) == {"supervisor", "explorer", "reviewer"}
    client = make_agent.runtime.client
    (explorer_id,) = await child_ids(client, result.workflow_id)
    (reviewer_id,) = await child_ids(client, explorer_id)
    assert explorer_id.startswith("explorer-") and reviewer_id.startswith("reviewer-")

    # abort the top query while the grandchild hangs: every level ends with error_abort
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(tool_use("explore", {"task": "dig"}), text("unused")),
            explorer=Script(tool_use("review", {"task": "check"}), text("unused")),
            reviewer=Script(hang(60)),
        )
    )
    aborted = await asyncio.wait_for(agent.prompt("again", timeout=2), 40)
    assert aborted.subtype == "error_abort"
    (explorer_id,) = await child_ids(client, aborted.workflow_id)
    # an error result fails the child's workflow too, its output in the failure's details
    child = client.get_workflow_handle(explorer_id)
    with pytest.raises(WorkflowFailureError) as failed:
        await child.result()
    assert (await child.describe()).status == WorkflowExecutionStatus.FAILED
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == "error_abort" and failed.value.cause.non_retryable
    output = output_of_failure(failed.value.cause)
    assert output is not None and output.result.subtype == "error_abort"


async def test_hooks_are_not_inherited_and_interrupt_reaches_the_child(make_agent, fake_anthropic):
    parent_saw: list[str] = []
    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(tool_use("explore", {"task": "add"}), text("done")),
            explorer=Script(tool_use("calculator", {"expr": "1+2"}), text("3")),
        )
    )
    explorer = spec(fake_anthropic, "explorer", tools=[make_calculator()])
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[agent_tool("explore", explorer)],
        hooks={"on_tool_result": lambda ctx: parent_saw.append(ctx.tool_name)},
    )
    assert (await agent.prompt("go")).result == "done"
    assert parent_saw == ["explore"]  # the child's calculator call is the child's business

    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(tool_use("explore", {"task": "wait"}), text("unused")),
            explorer=Script(hang(60)),
        )
    )
    task = asyncio.ensure_future(agent.prompt("again"))
    client = make_agent.runtime.client

    for _ in range(100):
        if sum("You are explorer." in (r.system or "") for r in fake_anthropic.requests) >= 3:
            break
        await asyncio.sleep(0.1)
    assert agent.interrupt() is True
    result = await asyncio.wait_for(task, 30)
    assert result.subtype == "interrupted"
    (explorer_id,) = await child_ids(client, result.workflow_id)
    child = await client.get_workflow_handle(explorer_id).result()
    assert child["result"]["subtype"] == "interrupted"
    history = await agent.get_history()
    assert history[-1].content[0].is_error is True  # the call still got its result


async def test_structured_result_passthrough_and_parent_only_schema(make_agent, fake_anthropic):
    finish = tool(
        "finish",
        "End with a verdict",
        {"type": "object", "properties": {"v": {}}, "required": ["v"]},
        lambda input: ToolResult(content="filed", end_turn=True, structured_result=input["v"]),
    )

    fake_anthropic.set_handler(
        by_agent(
            supervisor=Script(
                tool_use("loose", {"task": "t"}),
                tool_use("strict", {"task": "t"}),
                tool_use("strict", {"task": "t"}),
                text("done"),
            ),
            clerk=Script(
                tool_use("finish", {"v": {"anything": [1, 2]}}),
                tool_use("finish", {"v": {"files": ["a.py"], "notes": "ok"}}),
                tool_use("finish", {"v": {"files": "not a list"}}),
            ),
        )
    )
    clerk = spec(fake_anthropic, "clerk", tools=[finish])
    agent = make_agent(
        name="supervisor",
        system_prompt="You are supervisor.",
        tools=[
            agent_tool("loose", clerk),  # neither side declares a schema
            agent_tool("strict", clerk, output_schema=Findings),  # the parent alone does
        ],
    )
    await agent.prompt("go")
    parent = [r for r in fake_anthropic.requests if "supervisor" in (r.system or "")]
    loose, valid, invalid = (p.tool_results[0] for p in parent[1:4])
    assert json.loads(loose["content"]) == {"anything": [1, 2]}  # passed through as JSON
    assert json.loads(valid["content"]) == {"files": ["a.py"], "notes": "ok"}
    assert invalid["is_error"] is True
    assert invalid["content"].startswith("child_output_invalid: schema_mismatch")


def test_descriptions_state_each_targets_session_semantics():
    """A spec starts fresh per call; a session and any host AgentLike (a Team included) keep
    a long-lived session, so earlier calls may inform later answers."""

    def bare(name: str):
        return create_bare_agent(api_key=API_KEY, model="claude-test", name=name)

    for target in (HostMember(), create_team(name="crew", lead=bare("lead"), members=[])):
        description = agent_tool("x", target).description
        assert "long-lived session" in description
        assert "earlier tasks may inform later answers" in description
        assert "fresh session" not in description
    described = agent_tool("x", define_agent(model="claude-test", name="s")).description
    assert "fresh session" in described and "long-lived" not in described
    remembered = agent_tool("x", bare("r")).description
    assert "keeps its conversation across calls" in remembered
    assert "fresh session" not in remembered
