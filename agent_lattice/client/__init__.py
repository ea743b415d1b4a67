"""The caller's side: runtime (connect or embedded server), query streaming."""

from ..workflows._types import ActivitySettings
from ._mailbox import create_workflow_mailbox
from ._runtime import Runtime, get_default_runtime, set_default_runtime
from ._server import DevServer, temporal_binary

__all__ = [
    "ActivitySettings",
    "DevServer",
    "Runtime",
    "create_workflow_mailbox",
    "get_default_runtime",
    "set_default_runtime",
    "temporal_binary",
]
