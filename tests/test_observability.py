"""LangSmith and Langfuse tracers, with the vendors' real clients talking HTTP to a local
stand-in for their ingestion APIs (LangSmith run JSON, Langfuse OTLP protobuf)."""

from __future__ import annotations

import json

import pytest
from langfuse import Langfuse
from langsmith import Client
from opentelemetry.sdk.trace import TracerProvider

from agent_lattice import (
    OptionError,
    create_composite_context_tracer,
    create_jsonl_context_tracer,
    create_langfuse_context_tracer,
    create_langsmith_context_tracer,
    create_team,
    define_context_tracer,
    team_member,
)
from agent_lattice.testing import (
    FakeTracingServer,
    Script,
    message,
    text,
    tool_use,
    tool_use_block,
)

from conftest import make_calculator, named_agent


@pytest.fixture
def ingest():
    with FakeTracingServer() as server:
        yield server


def tool_run_script():
    return Script(
        message(
            [tool_use_block("calculator", {"expr": "2+2"}), tool_use_block("calculator", {})],
            stop_reason="tool_use",
            usage={"input_tokens": 11, "output_tokens": 3},
        ),
        text("4", usage={"input_tokens": 20, "output_tokens": 1}),
    )


attribute = FakeTracingServer.attribute


async def test_langsmith_tracer_posts_one_root_with_llm_and_tool_children(
    make_agent, fake_anthropic, ingest, tmp_path
):
    client = Client(api_url=ingest.url, api_key="ls-test-key", auto_batch_tracing=False)
    tracer = create_langsmith_context_tracer(
        client=client, project_name="lattice-tests", tags=["ci"]
    )
    jsonl = tmp_path / "session.jsonl"
    fake_anthropic.set_handler(tool_run_script())
    agent = make_agent(
        name="smith",
        tools=[make_calculator()],
        tracer=create_composite_context_tracer([create_jsonl_context_tracer(path=jsonl), tracer]),
    )
    try:
        result = await agent.prompt("What is 2+2?")
    finally:
        await tracer.close()

    assert result.subtype == "success"
    runs = ingest.runs()
    roots = [r for r in runs.values() if not r.get("parent_run_id")]
    assert len(roots) == 1
    root = roots[0]
    assert root["run_type"] == "chain" and root["name"] == "smith"
    assert root["inputs"]["prompt"] == "What is 2+2?"
    assert root["session_name"] == "lattice-tests" and root["tags"] == ["ci"]
    assert root["extra"]["metadata"]["agent_session_id"] == agent.session_id
    assert root["outputs"]["result"] == "4" and root.get("error") is None
    assert root["end_time"] is not None
    children = sorted(
        (r for r in runs.values() if r.get("parent_run_id") == root["id"]),
        key=lambda r: r["dotted_order"],
    )
    assert [(c["run_type"], c["name"]) for c in children] == [
        ("llm", "model turn 1"),
        ("tool", "calculator"),
        ("tool", "calculator"),
        ("llm", "model turn 2"),
    ]
    assert all(c["trace_id"] == root["id"] and c["end_time"] for c in children)
    first_turn, ok_tool, bad_tool, _ = children
    assert first_turn["inputs"]["messages"][0]["content"] == "What is 2+2?"
    assert first_turn["outputs"]["usage_metadata"]["input_tokens"] == 11
    assert first_turn["extra"]["metadata"]["ls_model_name"] == "claude-test"
    assert ok_tool["inputs"] == {"expr": "2+2"} and ok_tool["outputs"]["content"] == "4"
    assert ok_tool.get("error") is None
    assert "expr" in bad_tool["error"]  # the invalid call is an errored tool run
    assert set(ingest.credentials) == {"ls-test-key"}
    # the composite still wrote the JSONL trace alongside
    assert len(jsonl.read_text().splitlines()) == 11


async def test_langfuse_tracer_exports_one_trace_per_query(make_agent, fake_anthropic, ingest):
    langfuse = Langfuse(
        public_key="pk-lf-test",
        secret_key="sk-lf-test",
        base_url=ingest.url,
        flush_at=1000,
        tracer_provider=TracerProvider(),  # not the process-global one
    )
    tracer = create_langfuse_context_tracer(client=langfuse, tags=["local-debug"])
    fake_anthropic.set_handler(tool_run_script())
    agent = make_agent(name="fuse", tools=[make_calculator()], tracer=tracer)
    try:
        result = await agent.prompt("What is 2+2?")
        await tracer.flush()
    finally:
        langfuse.shutdown()

    assert result.subtype == "success"
    spans = {span.span_id: span for span in ingest.spans}
    roots = [s for s in spans.values() if s.parent_span_id not in spans]
    assert len(roots) == 1
    root = roots[0]
    assert root.name == "fuse"
    assert attribute(root, "langfuse.observation.type") == "chain"
    assert attribute(root, "langfuse.trace.name") == "fuse"
    assert attribute(root, "session.id") == agent.session_id
    assert attribute(root, "langfuse.trace.tags") == ["local-debug"]
    assert json.loads(attribute(root, "langfuse.observation.output"))["result"] == "4"
    assert {s.trace_id for s in spans.values()} == {root.trace_id}
    children = sorted(
        (s for s in spans.values() if s.parent_span_id == root.span_id),
        key=lambda s: s.start_time_unix_nano,
    )
    kinds = [(attribute(s, "langfuse.observation.type"), s.name) for s in children]
    assert kinds == [
        ("generation", "model turn 1"),
        ("tool", "calculator"),
        ("tool", "calculator"),
        ("generation", "model turn 2"),
    ]
    generation = children[0]
    assert attribute(generation, "langfuse.observation.model.name") == "claude-test"
    assert json.loads(attribute(generation, "langfuse.observation.usage_details")) == {
        "input": 11,
        "output": 3,
    }
    assert attribute(children[2], "langfuse.observation.level") == "ERROR"
    assert all(a and a.startswith("Basic ") for a in ingest.credentials)


def test_tracer_options_are_checked():
    with pytest.raises(OptionError, match="tags must be a list of strings"):
        create_langfuse_context_tracer(client=object(), tags="ci")
    with pytest.raises(OptionError, match="either client or api_key"):
        create_langsmith_context_tracer(client=object(), api_key="k")


def team_script():
    """The lead asks ``helper`` (ask), then hands ``helper`` more work (handoff), then ends."""

    def handle(request):
        if "You are lead." in (request.system or ""):
            turn = (len(request.messages) + 1) // 2
            if turn == 1:
                return tool_use("helper", {"mode": "ask", "task": "quick look"})
            if turn == 2:
                return tool_use("helper", {"mode": "handoff", "task": "deep dive"})
            return text("all done")
        return text("helper finished: " + str(request.messages[-1]["content"])[:20])

    return handle


async def test_a_query_tracer_follows_the_team_into_its_members(
    fake_anthropic, lattice_runtime, ingest, tmp_path
):
    """Seeds, JSONL / LangSmith Context Tracing: pass the tracer per query to propagate it into
    delegated agents; member runs nest beneath the lead's run in one trace."""
    client = Client(api_url=ingest.url, api_key="ls-test-key", auto_batch_tracing=False)
    smith = create_langsmith_context_tracer(client=client)
    jsonl = tmp_path / "team.jsonl"
    fake_anthropic.set_handler(team_script())

    def bare(name):
        return named_agent(fake_anthropic, name)

    team = create_team(
        name="traced", lead=bare("lead"), members=[team_member(name="helper", agent=bare("helper"))]
    )
    tracer = create_composite_context_tracer([create_jsonl_context_tracer(path=jsonl), smith])
    try:
        result = await team.prompt("Investigate.", tracer=tracer)
    finally:
        await smith.close()

    assert result.result == "all done"
    events = [json.loads(line) for line in jsonl.read_text().splitlines()]
    starts = [e for e in events if e["type"] == "run_start"]
    assert [e["source"] for e in starts] == ["lead", "helper", "helper"]
    lead_run = starts[0]["run_id"]
    asked, handed = starts[1]["data"]["parent"], starts[2]["data"]["parent"]
    assert asked["run_id"] == handed["run_id"] == lead_run  # both delegated by the lead's run
    assert asked["tool_use_id"] != handed["tool_use_id"]
    assert {e["session_id"] for e in events} == {
        team.lead.session_id,
        *(s["session_id"] for s in starts[1:]),
    }
    # LangSmith: one root (the lead's run); the ask nests under its tool call, the handoff
    # (whose receipt already closed the call) under the lead's run
    runs = ingest.runs()
    (root,) = [r for r in runs.values() if not r.get("parent_run_id")]
    assert root["name"] == "lead"
    helpers = [r for r in runs.values() if r["name"] == "helper" and r["run_type"] == "chain"]
    assert len(helpers) == 2
    parents = {runs[h["parent_run_id"]]["run_type"] for h in helpers}
    assert parents == {"tool", "chain"}
    assert all(runs[h["parent_run_id"]]["trace_id"] == root["trace_id"] for h in helpers)
    # the binding ends with the query: a later query without tracer= is not traced
    lines = len(jsonl.read_text().splitlines())
    fake_anthropic.set_handler(lambda r: text("plain"))
    await team.lead.prompt("Untraced.")
    assert len(jsonl.read_text().splitlines()) == lines


async def test_query_tracer_is_checked(make_agent, fake_anthropic, lattice_runtime):
    agent = make_agent(name="checked")
    with pytest.raises(OptionError, match="tracer must be a ContextTracer"):
        await agent.prompt("x", tracer=object())
    lattice_runtime.inline_workers = False
    try:
        with pytest.raises(OptionError, match="needs the query served in this process"):
            await agent.prompt("x", tracer=define_context_tracer(on_event=lambda e: None))
    finally:
        lattice_runtime.inline_workers = True
