"""The caller's side: runtime (connect or embedded server), query streaming."""

from .._agent import register_query_runner
from ..teams._team import register_default_mailbox, register_mail_announcer
from ..workflows._types import ActivitySettings
from ._approvals import list_pending_approvals, list_resolved_approvals, resolve_approval
from ._connection import TemporalConnection
from ._default import create_runtime, get_default_runtime, set_default_runtime
from ._mailbox import announce_mail, create_workflow_mailbox
from ._query import QueryRun
from ._runtime import Runtime
from ._server import DevServer, temporal_binary
from ._steer import steer

# The domain (agents, teams) runs queries and makes default mailboxes through these.
register_query_runner(QueryRun.start)
register_default_mailbox(
    lambda name, runtime_of: create_workflow_mailbox(name, runtime_of=runtime_of)
)
register_mail_announcer(announce_mail)

__all__ = [
    "ActivitySettings",
    "DevServer",
    "Runtime",
    "TemporalConnection",
    "create_runtime",
    "create_workflow_mailbox",
    "get_default_runtime",
    "list_pending_approvals",
    "list_resolved_approvals",
    "resolve_approval",
    "set_default_runtime",
    "steer",
    "temporal_binary",
]
