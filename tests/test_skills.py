"""Skills: instruction bundles injected into each model request, never into history."""

from __future__ import annotations

import pytest

from agent_lattice import OptionError, create_agent, load_skill, skill
from agent_lattice.testing import Script, text


async def test_skills_reach_every_request_but_not_history(make_agent, fake_anthropic, tmp_path):
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
    agent = make_agent(system_prompt="You are helpful.", skills=[review, pdf])
    await agent.prompt("Review this PR.")
    await agent.prompt("And this PDF.")

    for request in fake_anthropic.requests:
        system = request.system
        assert system.startswith("You are helpful.")
        assert "Always list bugs and risks before summaries." in system
        assert "## pdf" in system and "Render pages before claiming layout is correct." in system
    history = await agent.get_history()
    assert "Always list bugs" not in str([m.to_wire() for m in history])


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
