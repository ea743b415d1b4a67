"""Seeds, "Skills": reusable instruction bundles injected into every model request."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, load_skill, skill
from agent_lattice.testing import RecordedRequest, Reply, text


def fake(request: RecordedRequest) -> Reply:
    system = request.system or ""
    loaded = [line.removeprefix("## ") for line in system.splitlines() if line.startswith("## ")]
    return text(f"I was given the skills: {', '.join(loaded)}.")


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
