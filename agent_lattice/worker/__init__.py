"""Build Temporal workers that serve an app's agents."""

from ._plugin import LatticePlugin
from ._registry import AgentRegistry
from ._worker import create_worker, create_workers

__all__ = [
    "AgentRegistry",
    "LatticePlugin",
    "create_worker",
    "create_workers",
]
