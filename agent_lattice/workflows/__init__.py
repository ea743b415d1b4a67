"""Deterministic orchestration: the workflows that run queries."""

from ._agent import AgentWorkflow
from ._team import TeamWorkflow
from ._types import AgentRunInput, AgentRunOutput

__all__ = ["AgentRunInput", "AgentRunOutput", "AgentWorkflow", "TeamWorkflow"]
