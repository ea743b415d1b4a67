"""All the activities of a worker's agents, on one object bound to its agent registry."""

from __future__ import annotations

from ._budget import BudgetActivities
from ._delegation import DelegationActivities
from ._model import ModelActivities
from ._team import TeamActivities
from ._tool_calls import ToolActivities


class AgentActivities(
    ModelActivities, ToolActivities, TeamActivities, DelegationActivities, BudgetActivities
):
    """The activities of every agent a worker serves; holds the registry it resolves keys in.

    Temporal registers an activity method bound to one instance, so the concerns are mixins
    of one class (the plugin lists this instance's methods)."""
