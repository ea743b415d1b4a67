"""What an agent can call: ``tool()`` and its results, skills, MCP servers' tools, and
the settings and policy of a batch of calls."""
