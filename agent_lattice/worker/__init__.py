"""Build Temporal workers that serve an app's agents."""

from ._plugin import LatticePlugin
from ._registry import AgentRegistry
from ._worker import app_agents, create_worker, create_workers, load_app, resolve_agent

__all__ = [
    "AgentRegistry",
    "LatticePlugin",
    "app_agents",
    "create_worker",
    "create_workers",
    "load_app",
    "resolve_agent",
]
