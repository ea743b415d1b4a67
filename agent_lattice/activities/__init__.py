"""Activities: where I/O happens (model requests, tool calls, host callbacks)."""

from ._agent import AgentActivities

__all__ = ["AgentActivities"]
