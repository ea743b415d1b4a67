"""Delegation and teams: ``agent_tool()``, ``create_team()`` and its mailbox tools, the
mailboxes, the team runner, and host AgentLike members."""
