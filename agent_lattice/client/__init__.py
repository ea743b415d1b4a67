"""The caller's side: runtime (connect or embedded server), query streaming."""

from .._agent import register_query_runner
from .._team import register_default_mailbox
from ..workflows._types import ActivitySettings
from ._approvals import list_pending_approvals, resolve_approval
from ._mailbox import create_workflow_mailbox
from ._query import QueryRun
from ._runtime import Runtime, get_default_runtime, set_default_runtime
from ._server import DevServer, temporal_binary

# The domain (agents, teams) runs queries and makes default mailboxes through these.
register_query_runner(QueryRun.start)
register_default_mailbox(
    lambda name, runtime_of: create_workflow_mailbox(name, runtime_of=runtime_of)
)

__all__ = [
    "ActivitySettings",
    "DevServer",
    "Runtime",
    "create_workflow_mailbox",
    "get_default_runtime",
    "list_pending_approvals",
    "resolve_approval",
    "set_default_runtime",
    "temporal_binary",
]
