"""The round trips a tool turn costs, counted in the run's history against a budget.

Nothing here is timed: a change that adds a workflow task, an activity, an update or a history
event to every turn of ``prompt()`` or ``query()`` fails this test. The figures are per tool
turn (one model request and one tool call): the difference between a query of LONG and one
of SHORT tool turns, divided by LONG - SHORT, so a query's fixed start and end costs are not
counted. ``bench/peer.py`` measures what the counts cost in time and CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, HistoryEventFilterType
from temporalio.api.history.v1 import History

from agent_lattice import ResultMessage
from agent_lattice.history._transcripts import PostgresTranscriptStore, SqliteTranscriptStore
from agent_lattice.testing import RecordedRequest, Reply, collect, text, tool_use
from agent_lattice.workflows._refs import workflow_id_for

from conftest import make_calculator, note_rpcs

SHORT, LONG = 1, 4


@dataclass(frozen=True)
class Budget:
    """Most a tool turn may cost."""

    events: int
    workflow_tasks: int
    activities: int
    updates: int
    kib: float
    store_writes: int


# A tool turn: a workflow task and an activity (scheduled, started, completed) for the model
# request, the same for the tool call (12 events). The search attributes' tokens and cost are
# upserted at a turn ActivitySettings.index_every_s (30 s) after their last upsert, not at these.
# Streaming costs nothing in history: query()'s reader of the durable messages writes none.
# The transcript store (a database round trip each, over the network with Postgres): the model
# request writes the tool results it sends and its reply at once, the tool call its record.
TURN = Budget(events=12, workflow_tasks=2, activities=2, updates=0, kib=4.5, store_writes=2)
BUDGETS = {"prompt": TURN, "query": TURN}


@dataclass(frozen=True)
class Counts:
    events: int
    workflow_tasks: int
    activities: int
    updates: int
    bytes: int
    store_writes: int


def turns_of(request: RecordedRequest) -> Reply:
    """``turns=N``: a calculator call while fewer than N tool turns are done, then text."""
    wanted = int((request.messages[0]["content"]).split("=")[1])
    done = sum(1 for m in request.messages if m["role"] == "assistant")
    return tool_use("calculator", {"expr": "1+1"}) if done < wanted else text("done")


def count_store_writes(monkeypatch) -> list[str]:
    """The transcript store's writes made in this process (the test's workers run here)."""
    writes: list[str] = []

    def counting(name: str, real: Any) -> Any:
        def counted(self: Any, *args: Any) -> Any:
            writes.append(name)
            return real(self, *args)

        return counted

    for cls in (SqliteTranscriptStore, PostgresTranscriptStore):
        for name in ("_put_links", "_put_blob", "_put_tool_call"):
            monkeypatch.setattr(cls, name, counting(name, getattr(cls, name)))
    return writes


async def counts_of(make_agent, mode: str, tool_turns: int, writes: list[str]) -> Counts:
    agent = make_agent(name=f"budget-{mode}", tools=[make_calculator()])
    prompt = f"turns={tool_turns}"
    writes_before = len(writes)
    if mode == "prompt":
        result = await agent.prompt(prompt)
    else:
        messages = await collect(agent.query(prompt))
        result = next(m for m in messages if isinstance(m, ResultMessage))
    assert result.subtype == "success" and result.num_turns == tool_turns + 1
    handle = make_agent.runtime.client.get_workflow_handle(workflow_id_for(agent, 1))
    events = list((await handle.fetch_history()).events)
    kinds = [e.event_type for e in events]
    return Counts(
        events=len(events),
        workflow_tasks=kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        activities=kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        updates=kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        bytes=History(events=events).ByteSize(),
        store_writes=len(writes) - writes_before,
    )


@pytest.mark.parametrize("mode", ["prompt", "query"])
async def test_a_tool_turn_stays_within_its_round_trip_budget(
    make_agent, fake_anthropic, monkeypatch, mode
):
    fake_anthropic.set_handler(turns_of)
    writes = count_store_writes(monkeypatch)
    short = await counts_of(make_agent, mode, SHORT, writes)
    long = await counts_of(make_agent, mode, LONG, writes)
    span = LONG - SHORT

    def per_turn(name: str) -> float:
        return (getattr(long, name) - getattr(short, name)) / span

    budget = BUDGETS[mode]
    figures = {
        "events": per_turn("events"),
        "workflow_tasks": per_turn("workflow_tasks"),
        "activities": per_turn("activities"),
        "updates": per_turn("updates"),
        "kib": per_turn("bytes") / 1024,
        "store_writes": per_turn("store_writes"),
    }
    over = {k: v for k, v in figures.items() if v > getattr(budget, k)}
    assert not over, f"{mode}() per tool turn {figures} exceeds its budget {budget}"
    # every tool turn is one model request and one tool call: no fewer either
    assert figures["activities"] == 2


@pytest.mark.parametrize("mode", ["prompt", "query"])
async def test_a_query_asks_the_server_for_its_run_once(
    make_agent, fake_anthropic, lattice_runtime, monkeypatch, mode
):
    """Beyond its turns, a query's caller costs the server one wait for the run's close (the
    result's long poll; query()'s reader takes the output from the close it reads anyway) and
    no lookup of a session made here (tests/test_session.py)."""
    fake_anthropic.set_handler(turns_of)
    service = lattice_runtime.client.workflow_service
    calls = note_rpcs(
        monkeypatch, service, "describe_workflow_execution", "get_workflow_execution_history"
    )
    await counts_of(make_agent, mode, SHORT, [])
    close = HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
    asked = [
        "describe" if name == "describe_workflow_execution" else "close poll"
        for name, req in calls
        if name == "describe_workflow_execution" or req.history_event_filter_type == close
    ]
    # query()'s reader learns once whether the run is still running (it may read a closed one
    # from its record); the counts' own fetch_history asks for every event, not the close
    expected = ["close poll"] if mode == "prompt" else ["describe", "close poll"]
    assert asked == expected
