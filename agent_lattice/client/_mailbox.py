"""The default team mailbox: a client of one ``TeamMailboxWorkflow`` (see
``workflows/_mailbox``). Sends are signals (the first one starts the workflow), claims and
status changes are updates, reads are queries."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from .. import _settings
from .._errors import ConfigurationError, OptionError
from ..teams._mailbox import MessageStatus, TeamMessage
from ..workflows._mail_types import MailNotice
from ..workflows._mailbox import (
    MAILBOX_WORKFLOW,
    ClaimRequest,
    InboxQuery,
    MailboxState,
    MessageQuery,
    StatusChange,
    ThreadQuery,
    mailbox_task_queue,
)

__all__ = ["announce_mail", "create_workflow_mailbox"]

RUNNING_TEAMS = "WorkflowType = 'TeamWorkflow' AND ExecutionStatus = 'Running'"

# How long a read or a claim waits for a worker of the mailbox to answer.
ANSWER_TIMEOUT_S = 30.0


class WorkflowMailbox:
    """A client of one ``TeamMailboxWorkflow`` (started by the first message sent)."""

    def __init__(self, name: str, runtime: Any, max_history_events: int) -> None:
        self.workflow_id = f"{_settings.task_queue_prefix()}team-mailbox-{name}"
        self._runtime = runtime
        self._max_history_events = max_history_events
        # a team's default mailbox uses its lead's runtime (bound before or after create_team)
        self.runtime_of: Callable[[], Any] = lambda: None

    async def _client(self) -> Any:
        if activity.in_activity():  # a member's mailbox tool, in a worker
            return activity.client()
        from ._default import get_default_runtime

        runtime = self._runtime or self.runtime_of() or await get_default_runtime()
        await runtime.ensure_mailbox_worker()
        return runtime.client

    async def _handle(self) -> Any:
        return (await self._client()).get_workflow_handle(self.workflow_id)

    async def _ask(self, kind: str, name: str, arg: Any, result_type: Any, missing: Any) -> Any:
        """A query or update of the mailbox workflow; ``missing`` when it was never started."""
        handle = await self._handle()
        wait = timedelta(seconds=ANSWER_TIMEOUT_S)
        try:
            if kind == "query":
                return await handle.query(name, arg, result_type=result_type, rpc_timeout=wait)
            return await asyncio.wait_for(
                handle.execute_update(name, arg, result_type=result_type, rpc_timeout=wait),
                ANSWER_TIMEOUT_S,
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return missing
            if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
                raise self._unanswered(name, kind) from err
            raise
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            raise self._unanswered(name, kind) from err
        except WorkflowUpdateFailedError as err:  # refused by the workflow's validator
            cause = err.cause or err
            raise OptionError(getattr(cause, "message", None) or str(cause)) from None

    def _unanswered(self, operation: str, kind: str) -> ConfigurationError:
        # an update the server accepted may still be applied once a worker answers
        later = " (it may still take effect when one does)" if kind == "update" else ""
        return ConfigurationError(
            f"team mailbox {self.workflow_id!r} did not answer {operation} within "
            f"{ANSWER_TIMEOUT_S:g} s{later}: is a worker hosting task queue "
            f"{mailbox_task_queue()!r}? Inline workers (the default) and `lattice worker APP` "
            "host it."
        )

    async def _signal(self, name: str, arg: Any) -> None:
        """A signal to the mailbox workflow, starting it first if needed; durable once this
        returns, whether or not a worker of the mailbox is up."""
        client = await self._client()
        await client.start_workflow(
            MAILBOX_WORKFLOW,
            MailboxState(max_history_events=self._max_history_events),
            id=self.workflow_id,
            task_queue=mailbox_task_queue(),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=name,
            start_signal_args=[arg],
            static_summary="team mailbox",
        )

    async def send(self, message: TeamMessage) -> TeamMessage:
        await self._signal("send", message)
        return message

    async def mirror(self, message: TeamMessage) -> None:
        """A team runtime's own work, as it is now (see the workflow's ``mirror``)."""
        await self._signal("mirror", message)

    async def settle(self, message_id: str, status: MessageStatus, result: str | None) -> None:
        """End an open message by id; a missing or finished one is left alone."""
        await self._signal(
            "settle", StatusChange(message_id=message_id, status=status, result=result)
        )

    async def claim_next(self, mailbox: str) -> TeamMessage | None:
        request = ClaimRequest(mailbox=mailbox)
        return await self._ask("update", "claim_next", request, TeamMessage | None, None)

    async def get(self, message_id: str) -> TeamMessage | None:
        query = MessageQuery(message_id=message_id)
        return await self._ask("query", "get", query, TeamMessage | None, None)

    async def inbox(
        self, mailbox: str, *, status: MessageStatus | None = None
    ) -> list[TeamMessage]:
        query = InboxQuery(mailbox=mailbox, status=status)
        return await self._ask("query", "inbox", query, list[TeamMessage], [])

    async def thread(self, thread_id: str) -> list[TeamMessage]:
        query = ThreadQuery(thread_id=thread_id)
        return await self._ask("query", "thread", query, list[TeamMessage], [])

    async def set_status(
        self, message_id: str, status: MessageStatus, *, result: str | None = None
    ) -> TeamMessage:
        change = StatusChange(message_id=message_id, status=status, result=result)
        changed = await self._ask("update", "set_status", change, TeamMessage, None)
        if changed is None:
            raise OptionError(f"no message {message_id!r} in this mailbox")
        return changed


def create_workflow_mailbox(
    name: str,
    *,
    runtime: Any = None,
    max_history_events: int = 2000,
    runtime_of: Callable[[], Any] | None = None,
) -> WorkflowMailbox:
    """A mailbox kept by a Temporal workflow (``team-mailbox-<name>``), durable and shared
    by every process of the namespace; a team's default is the one named after the team.
    Sends are signals, ``claim_next``/``set_status`` updates, reads queries. ``runtime``:
    where to reach Temporal (default: the process runtime; a worker's own client inside
    a tool; ``runtime_of``: a function returning it, asked at each use)."""
    if not isinstance(name, str) or not name or not name.isprintable() or len(name) > 200:
        raise OptionError(
            "create_workflow_mailbox(): name must be a printable string of 1 to 200 characters "
            f"(a team's name); got {name!r}"
        )
    if not isinstance(max_history_events, int) or max_history_events < 10:
        raise OptionError(
            "create_workflow_mailbox(): max_history_events must be an integer of at least 10; "
            f"got {max_history_events!r}"
        )
    mailbox = WorkflowMailbox(name, runtime, max_history_events)
    if runtime_of is not None:  # a team's default: its lead's runtime, when one is bound
        mailbox.runtime_of = runtime_of
    return mailbox


async def announce_mail(team: Any, mailboxes: list[str]) -> None:
    """Tell the running queries of ``team`` in other processes of the namespace that its
    ``mailboxes`` got mail (their team runtimes claim it). Only a process that is connected
    already tells (a runtime bound to the lead, or the process runtime): a host that only
    drains runs no query and starts no connection for this."""
    from ._default import default_runtime_if_any

    runtime = team.lead.runtime or default_runtime_if_any()
    if runtime is None:
        return
    client, prefix = runtime.client, _settings.task_queue_prefix()
    # a team's runs are "team-<team>-<lead session>-<n>" (a nested team's too)
    named = f"team-{team.name}-"
    async for execution in client.list_workflows(RUNNING_TEAMS):
        if execution.id.startswith(named) and execution.task_queue.startswith(prefix):
            handle = client.get_workflow_handle(execution.id)
            await handle.signal("mail", MailNotice(mailboxes=mailboxes))
