"""The app of the durability drill's failure tests (tests/test_durability_drill.py), served by
the drill's ``lattice worker`` processes; its model is the test's fake server, whose URL the
drill passes them in ``LATTICE_TEST_BASE_URL``.

``greeter`` answers in one turn (no tool, no second request); ``quitter``'s ``quit`` tool
ends its worker's process (exit code 3), as a crash of the user's own code would; ``crew``
is a team (which the drill does not run).
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from agent_lattice import create_bare_agent, create_team, team_member, tool

API_KEY = "sk-ant-test-SECRET-4f2b9c"


class Nothing(BaseModel):
    pass


def quit_process(_: Nothing) -> str:
    os._exit(3)


def _agent(name: str, **options: object):
    return create_bare_agent(
        name=name,
        api_key=API_KEY,
        model="claude-test",
        base_url=os.environ.get("LATTICE_TEST_BASE_URL", "http://127.0.0.1:9"),
        **options,
    )


greeter = _agent("greeter")
quitter = _agent("quitter", tools=[tool("quit", "End this process", Nothing, quit_process)])
crew = create_team(
    name="crew", lead=_agent("lead"), members=[team_member(name="helper", agent=_agent("helper"))]
)
