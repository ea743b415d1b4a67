"""Seeds, "Agent Workspace Tools": create_agent() brings a private workspace and the built-in
tools; create_bare_agent() + create_builtin_tools() assemble them by hand, here with a
permission callback that refuses writes and shell access.

Both require the OS sandbox for Bash (sandbox="required", the setting for production): where
bubblewrap cannot run, Bash refuses commands instead of relying on its command parser alone,
which is a best-effort guard and not a boundary."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from _demo import model_options

from agent_lattice import create_agent, create_bare_agent, create_builtin_tools
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use


def fake(request: RecordedRequest) -> Reply:
    results = request.tool_results
    if not results:
        return tool_use("Write", {"file_path": "report.md", "content": "# Findings\nAll good.\n"})
    if len(request.messages) == 3:
        return tool_use("Write", {"file_path": "/etc/outside.txt", "content": "nope"})
    content = results[0]["content"]
    if content.startswith("{"):
        return text(f"Refused: {json.loads(content)['suggested_next_step']}")
    return text(content)


async def main() -> None:
    home = Path(tempfile.mkdtemp())
    scribe = create_agent(
        name="scribe",
        workspace={"path": str(home / "scribe"), "sandbox": "required"},
        **model_options("workspace_tools", fake),
    )
    result = await scribe.prompt("Write your findings to report.md.")
    print(result.result)
    print("report.md:", (home / "scribe" / "report.md").read_text().splitlines()[0])

    def approve(request):
        if request.tool_name in ("Bash", "Write", "Edit"):
            return {
                "behavior": "deny",
                "message": "This host did not approve write or shell access.",
            }
        return {"behavior": "allow"}

    reader = create_bare_agent(
        system_prompt="Use the configured project directory for file work.",
        tools=create_builtin_tools(cwd=home, allowed_directories=[home], sandbox="required"),
        permission=approve,
        **model_options("workspace_tools", fake),
    )
    result = await reader.prompt("Try to write a report.")
    print("bare agent:", result.result)


if __name__ == "__main__":
    asyncio.run(main())
