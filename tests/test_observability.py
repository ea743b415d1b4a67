"""LangSmith and Langfuse tracers, with the vendors' real clients talking HTTP to a local
stand-in for their ingestion APIs (LangSmith run JSON, Langfuse OTLP protobuf)."""

from __future__ import annotations

import json

import pytest
from langfuse import Langfuse
from langsmith import Client, RunTree
from opentelemetry.sdk.trace import TracerProvider

from agent_lattice import (
    OptionError,
    TraceEvent,
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
from agent_lattice.tracing._langsmith_langfuse import _Backend, _RunMapper

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
            usage={
                "input_tokens": 11,
                "output_tokens": 3,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 40,
            },
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
        pricing={"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3},
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
    # cache reads and writes are input tokens, detailed apart, and the turn has its cost
    assert first_turn["outputs"]["usage_metadata"] == {
        "input_tokens": 151,
        "output_tokens": 3,
        "total_tokens": 154,
        "input_token_details": {"cache_read": 100, "cache_creation": 40},
        "total_cost": pytest.approx((11 * 3 + 3 * 15 + 40 * 3.75 + 100 * 0.3) / 1e6),
    }
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
    agent = make_agent(
        name="fuse", model="claude-sonnet-4-5", tools=[make_calculator()], tracer=tracer
    )
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
    assert attribute(generation, "langfuse.observation.model.name") == "claude-sonnet-4-5"
    assert json.loads(attribute(generation, "langfuse.observation.usage_details")) == {
        "input": 11,
        "output": 3,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 40,
    }
    cost = json.loads(attribute(generation, "langfuse.observation.cost_details"))
    assert cost == {"total": pytest.approx((11 * 3 + 3 * 15 + 40 * 3.75 + 100 * 0.3) / 1e6)}
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
    # LangSmith: one root, the team (seeds: the root represents the complete Team
    # invocation); the lead's run beneath it; the ask nests under its tool call, the handoff
    # (whose receipt already closed the call) under the lead's run
    runs = ingest.runs()
    (root,) = [r for r in runs.values() if not r.get("parent_run_id")]
    assert root["name"] == "traced" and root["run_type"] == "chain"
    assert root["inputs"]["prompt"] == "Investigate." and root["outputs"]["result"] == "all done"
    assert root["extra"]["metadata"]["lattice_team"] is True and root["end_time"] is not None
    (lead,) = [r for r in runs.values() if r["name"] == "lead" and r["run_type"] == "chain"]
    assert lead["parent_run_id"] == root["id"] and lead["outputs"]["result"] == "all done"
    helpers = [r for r in runs.values() if r["name"] == "helper" and r["run_type"] == "chain"]
    assert len(helpers) == 2
    parents = {runs[h["parent_run_id"]]["run_type"] for h in helpers}
    assert parents == {"tool", "chain"}
    assert {runs[h["parent_run_id"]]["name"] for h in helpers} == {"helper", "lead"}
    assert {r["trace_id"] for r in runs.values()} == {root["trace_id"]}
    assert all(h["dotted_order"].startswith(lead["dotted_order"] + ".") for h in helpers)
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


async def test_langsmith_parent_puts_the_query_in_the_hosts_trace(
    make_agent, fake_anthropic, ingest
):
    """A host's RunTree as parent: the agent's root run is its child, in its trace and project,
    posted by its client."""
    client = Client(api_url=ingest.url, api_key="ls-test-key", auto_batch_tracing=False)
    host = RunTree(name="host-job", run_type="chain", ls_client=client, project_name="host-proj")
    host.post()
    tracer = create_langsmith_context_tracer(parent=host, tags=["ci"])
    fake_anthropic.set_handler(tool_run_script())
    agent = make_agent(name="nested-smith", tools=[make_calculator()], tracer=tracer)
    try:
        result = await agent.prompt("What is 2+2?")
        host.end(outputs={"done": True})
        host.patch()
    finally:
        await tracer.close()

    assert result.subtype == "success"
    runs = ingest.runs()
    (top,) = [r for r in runs.values() if not r.get("parent_run_id")]
    assert top["name"] == "host-job" and top["id"] == str(host.id)
    (agent_run,) = [r for r in runs.values() if r["name"] == "nested-smith"]
    assert agent_run["parent_run_id"] == top["id"]
    assert agent_run["trace_id"] == str(host.trace_id)
    assert agent_run["session_name"] == "host-proj" and agent_run["tags"] == ["ci"]
    assert agent_run["dotted_order"].startswith(top["dotted_order"] + ".")
    assert agent_run["outputs"]["result"] == "4" and agent_run["end_time"] is not None
    children = [r for r in runs.values() if r.get("parent_run_id") == agent_run["id"]]
    assert len(children) == 4
    assert all(c["trace_id"] == str(host.trace_id) for c in children)


async def test_langfuse_parent_puts_the_query_in_the_hosts_trace(
    make_agent, fake_anthropic, ingest
):
    langfuse = Langfuse(
        public_key="pk-lf-parent",  # a client of its own (Langfuse keeps one per key)
        secret_key="sk-lf-test",
        base_url=ingest.url,
        flush_at=1000,
        tracer_provider=TracerProvider(),
    )
    host = langfuse.start_observation(name="host-request", as_type="span")
    tracer = create_langfuse_context_tracer(client=langfuse, parent=host, tags=["local-debug"])
    fake_anthropic.set_handler(tool_run_script())
    agent = make_agent(name="nested-fuse", tools=[make_calculator()], tracer=tracer)
    try:
        result = await agent.prompt("What is 2+2?")
        host.end()
        await tracer.flush()
    finally:
        langfuse.shutdown()

    assert result.subtype == "success"
    spans = {span.span_id: span for span in ingest.spans}
    (top,) = [s for s in spans.values() if s.parent_span_id not in spans]
    assert top.name == "host-request"
    (root,) = [s for s in spans.values() if s.name == "nested-fuse"]
    assert root.parent_span_id == top.span_id and root.trace_id == top.trace_id
    assert attribute(root, "langfuse.observation.type") == "chain"
    assert attribute(root, "session.id") == agent.session_id
    assert attribute(root, "langfuse.trace.name") is None  # the trace stays the host's
    assert {s.trace_id for s in spans.values()} == {top.trace_id}
    assert len([s for s in spans.values() if s.parent_span_id == root.span_id]) == 4


def test_tracer_parent_is_checked():
    with pytest.raises(OptionError, match="parent must be a langsmith RunTree; got dict"):
        create_langsmith_context_tracer(client=object(), parent={"id": "x"})
    host = RunTree(name="host", run_type="chain", ls_client=object())
    with pytest.raises(OptionError, match="either parent or project_name"):
        create_langsmith_context_tracer(parent=host, project_name="p")
    with pytest.raises(OptionError, match="parent must be a Langfuse span or observation"):
        create_langfuse_context_tracer(client=object(), parent=host)


async def test_langfuse_team_query_is_one_trace_rooted_at_the_team(
    fake_anthropic, lattice_runtime, ingest
):
    langfuse = Langfuse(
        public_key="pk-lf-team",  # a client of its own (Langfuse keeps one per key)
        secret_key="sk-lf-test",
        base_url=ingest.url,
        flush_at=1000,
        tracer_provider=TracerProvider(),
    )
    tracer = create_langfuse_context_tracer(client=langfuse)
    fake_anthropic.set_handler(team_script())
    team = create_team(
        name="fused",
        lead=named_agent(fake_anthropic, "lead"),
        members=[team_member(name="helper", agent=named_agent(fake_anthropic, "helper"))],
    )
    try:
        result = await team.prompt("Investigate.", tracer=tracer)
        await tracer.flush()
    finally:
        langfuse.shutdown()

    assert result.result == "all done"
    spans = {span.span_id: span for span in ingest.spans}
    (root,) = [s for s in spans.values() if s.parent_span_id not in spans]
    assert root.name == "fused" and attribute(root, "langfuse.trace.name") == "fused"
    (lead,) = [s for s in spans.values() if s.name == "lead"]
    assert lead.parent_span_id == root.span_id
    helpers = [
        s
        for s in spans.values()
        if s.name == "helper" and attribute(s, "langfuse.observation.type") == "chain"
    ]
    assert len(helpers) == 2
    assert {spans[h.parent_span_id].name for h in helpers} == {"helper", "lead"}
    assert {s.trace_id for s in spans.values()} == {root.trace_id}


def test_work_handed_off_after_the_lead_ended_stays_beneath_the_team():
    """A handed-off member may report after its lead's run ended: it nests under the team."""
    opened: list[tuple[str, str | None]] = []

    class Recording(_Backend):
        def root(self, event, name, inputs, resumed, *, team=False):
            opened.append((name, None))
            return name

        def nested(self, anchor, event, name, inputs, *, team=False):
            opened.append((name, anchor))
            return name

        def child(self, root, event, kind, name, inputs, model):
            opened.append((name, root))
            return name

        def end(self, run, outputs, *, error=None, usage=None):
            pass

        def flush(self):
            pass

    mapper = _RunMapper(Recording())
    seq = iter(range(100))

    def emit(run_id, type, **data):
        mapper.on_event(TraceEvent("s", run_id, next(seq), "x", type, data))

    emit("lead-run", "run_start", agent="lead", team="crew", team_workflow_id="team-1")
    emit("lead-run", "user_message", content="go")
    emit("lead-run", "tool_use", id="t1", name="helper", input={})
    emit("lead-run", "tool_result", tool_use_id="t1", content="handed off")
    emit("lead-run", "result", subtype="success", result="done")
    emit("m-run", "run_start", agent="helper", parent={"run_id": "lead-run", "tool_use_id": "t1"})
    emit("m-run", "user_message", content="work")
    emit("other", "run_start", agent="solo", parent={"run_id": "unknown", "tool_use_id": "t"})
    emit("other", "user_message", content="x")
    assert opened == [
        ("crew", None),
        ("lead", "crew"),
        ("helper", "lead"),  # the tool call
        ("helper", "crew"),
        ("solo", None),
    ]
