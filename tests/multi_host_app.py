"""The app of the multi-host test: served by ``lattice worker`` on two hosts, driven from a third.

Its tools write their side effects to a Postgres table (``LATTICE_TEST_EFFECTS_DSN``,
``LATTICE_TEST_EFFECTS_TABLE``), each row naming the host that ran it
(``LATTICE_TEST_HOST``): the hosts share no files, and the test counts how often each call
really ran. The model is the fake server at ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from agent_lattice import (
    ToolResult,
    agent_tool,
    create_bare_agent,
    create_team,
    define_agent,
    team_member,
    tool,
)

API_KEY = "sk-ant-test-SECRET-4f2b9c"
NOTE_S = 1.0  # how long slow_note takes: the kill lands inside one of them


class Note(BaseModel):
    text: str


def _effect(key: str, phase: str) -> None:
    import psycopg
    from psycopg import sql

    table = sql.Identifier(os.environ["LATTICE_TEST_EFFECTS_TABLE"])
    with psycopg.connect(os.environ["LATTICE_TEST_EFFECTS_DSN"], autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (key, phase, host) VALUES (%s, %s, %s)").format(table),
            (key, phase, os.environ.get("LATTICE_TEST_HOST", "?")),
        )


def record(input: Note) -> ToolResult:
    """Not idempotent: a call whose worker dies must never run again."""
    _effect(input.text, "done")
    return ToolResult(content=f"recorded {input.text}")


def slow_note(input: Note) -> ToolResult:
    """Idempotent and slow: a call cut off by a kill runs again on the other host."""
    _effect(input.text, "start")
    time.sleep(NOTE_S)
    _effect(input.text, "done")
    return ToolResult(content=f"noted {input.text}")


RECORD = tool("record", "Record a note", Note, record)
SLOW_NOTE = tool("slow_note", "Note something slowly", Note, slow_note, idempotent=True)


def _options(name: str, tools: list) -> dict:
    return {
        "name": name,
        "api_key": API_KEY,
        "base_url": os.environ.get("ANTHROPIC_BASE_URL"),
        "model": "claude-test",
        "system_prompt": f"You are {name}.",
        "tools": tools,
    }


scribe = create_bare_agent(**_options("scribe", [RECORD, SLOW_NOTE]))
# a delegation: boss runs helper as a child workflow
boss = create_bare_agent(
    **_options("boss", [agent_tool("delegate", define_agent(**_options("helper", [RECORD])))])
)
crew = create_team(
    name="crew",
    lead=create_bare_agent(**_options("chief", [])),
    members=[
        team_member(name="fast", agent=create_bare_agent(**_options("fast", [RECORD]))),
        team_member(name="slow", agent=create_bare_agent(**_options("slow", [SLOW_NOTE]))),
    ],
    runner={"max_concurrent_work_items": 2},
)

agents = {"scribe": scribe, "boss": boss, "crew": crew}
