"""Seeds, "Skills": reusable instruction bundles the model gets when a task calls for them.

Each request lists the skills (name and description); the model loads the instructions of the
one a task matches with the built-in ``Skill`` tool (``skills_mode="all"`` puts every skill's
instructions in every request instead).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, load_skill, skill
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    """Loads the skill whose description mentions PDFs, then follows what it says."""
    if not request.tool_results:
        listed = [line[2:].split(":")[0] for line in (request.system or "").splitlines()
                  if line.startswith("- ")]  # fmt: skip
        return tool_use("Skill", {"name": next(n for n in listed if n == "pdf")})
    instructions = request.tool_results[0]["content"].splitlines()[-1]
    return text(f"Loaded the pdf skill, which says: {instructions}")


async def main() -> None:
    code_review = skill(
        name="code-review",
        description="Review code changes and pull requests",
        instructions="Always list bugs and risks before summaries.",
    )
    pdf = await load_skill(Path(__file__).parent / "skills" / "pdf")
    agent = create_agent(skills=[code_review, pdf], **model_options("skills", fake))
    result = await agent.prompt("Review the attached PDF of the design.")
    print(result.result)


if __name__ == "__main__":
    asyncio.run(main())
