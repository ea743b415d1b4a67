"""Skills: instruction bundles the model gets when a task calls for them: listed in every
request and loaded with the built-in Skill tool (on demand, the default), or injected whole
into every request (``skills_mode="all"``); never into history but for the Skill calls."""

from __future__ import annotations

import pytest

from agent_lattice import OptionError, create_agent, load_skill, skill
from agent_lattice.testing import Script, text, tool_use


async def test_all_skills_reach_every_request_but_not_history(make_agent, fake_anthropic, tmp_path):
    (tmp_path / "pdf").mkdir()
    (tmp_path / "pdf" / "SKILL.md").write_text(
        "---\nname: pdf\ndescription: Read and inspect PDF documents\n---\n\n"
        "Render pages before claiming layout is correct.\n"
    )
    pdf = await load_skill(tmp_path / "pdf")
    review = skill(
        name="code-review",
        description="Review code changes and pull requests",
        instructions="Always list bugs and risks before summaries.",
    )
    assert (pdf.name, pdf.description) == ("pdf", "Read and inspect PDF documents")
    assert pdf.instructions == "Render pages before claiming layout is correct."

    fake_anthropic.set_handler(Script(text("ok"), text("ok")))
    agent = make_agent(system_prompt="You are helpful.", skills=[review, pdf], skills_mode="all")
    await agent.prompt("Review this PR.")
    await agent.prompt("And this PDF.")

    for request in fake_anthropic.requests:
        system = request.system
        assert system.startswith("You are helpful.")
        assert "Always list bugs and risks before summaries." in system
        assert "## pdf" in system and "Render pages before claiming layout is correct." in system
        assert [t["name"] for t in request.tools] == []  # no Skill tool: nothing to load
    history = await agent.get_history()
    assert "Always list bugs" not in str([m.to_wire() for m in history])


REVIEW = skill(
    name="code-review",
    description="Review code changes and pull requests",
    instructions="Always list bugs and risks before summaries.",
)
STYLE = skill(name="style", description="House style for prose", instructions="Short sentences.")


async def test_on_demand_a_skill_is_listed_then_loaded_once_with_the_skill_tool(
    make_agent, fake_anthropic
):
    """By default each request lists the skills (names, descriptions); the model loads one's
    instructions with the Skill tool, and only then does the conversation hold them."""
    fake_anthropic.set_handler(
        Script(
            tool_use("Skill", {"name": "code-review"}),
            text("Bugs first: none found."),
            tool_use("Skill", {"name": "nonesuch"}),
            text("No such skill."),
        )
    )
    agent = make_agent(system_prompt="You are helpful.", skills=[REVIEW, STYLE])
    result = await agent.prompt("Review this PR.")
    assert result.result == "Bugs first: none found."

    first, second = fake_anthropic.requests[:2]
    for request in (first, second):
        assert "- code-review: Review code changes and pull requests" in request.system
        assert "- style: House style for prose" in request.system
        assert "Always list bugs" not in request.system  # the instructions: only when loaded
        assert [t["name"] for t in request.tools] == ["Skill"]
    (loaded,) = second.tool_results
    assert (
        loaded["content"] == "# Skill: code-review\n\nAlways list bugs and risks before summaries."
    )
    assert not loaded.get("is_error")

    await agent.prompt("Use another skill.")
    (unknown,) = fake_anthropic.requests[3].tool_results
    assert unknown["is_error"] and "code-review, style" in unknown["content"]


async def test_the_skill_tool_runs_as_a_local_activity(make_agent, fake_anthropic):
    """Loading a skill costs no activity task: it runs in the worker's workflow task."""
    fake_anthropic.set_handler(Script(tool_use("Skill", {"name": "style"}), text("ok")))
    agent = make_agent(skills=[STYLE])
    result = await agent.prompt("Write it.")
    client = make_agent.runtime.client
    history = await client.get_workflow_handle(result.workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "lattice.tool_call" not in scheduled, scheduled
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    assert markers  # the call, recorded as a local activity


def test_a_tool_named_skill_is_refused_while_skills_are_on_demand():
    from agent_lattice import tool

    mine = tool("Skill", "Mine.", {"type": "object"}, lambda _: "x")
    with pytest.raises(OptionError, match='"Skill" is reserved'):
        create_agent(model="m", skills=[STYLE], tools=[mine])
    create_agent(model="m", skills=[STYLE], tools=[mine], skills_mode="all")
    with pytest.raises(OptionError, match="skills_mode must be 'on_demand' or 'all'"):
        create_agent(model="m", skills=[STYLE], skills_mode="lazy")


async def test_bad_skills_are_clear_errors(tmp_path):
    with pytest.raises(OptionError, match="cannot read"):
        await load_skill(tmp_path / "missing")
    (tmp_path / "SKILL.md").write_text("---\nname: x\n---\nbody")
    with pytest.raises(OptionError, match="front matter lacks description"):
        await load_skill(tmp_path)
    with pytest.raises(OptionError, match="instructions must be a non-empty string"):
        skill(name="a", description="b", instructions=" ")
    with pytest.raises(OptionError, match="skills must be Skill objects"):
        create_agent(model="m", skills=["code-review"])
