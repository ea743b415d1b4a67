# pyright: strict
"""TeamMailboxWorkflow: a team's mailbox kept by Temporal (the default team mailbox).

One long-lived workflow per mailbox store holds the messages. Messages arrive as ``send``
signals (tasks, replies and follow-ups alike; a team runtime's ``mirror`` and ``settle`` of
its own work too); ``claim_next`` and ``set_status`` are updates, so a claim is atomic and its
caller gets the claimed message (or the refusal) back; ``get``, ``inbox`` and ``thread`` are
queries. The workflow runs no activities and holds nothing of any one process, so every
lattice worker can host it (see :func:`mailbox_task_queue`).

It continues as new when its history grows past ``max_history_events`` (or Temporal suggests
it), carrying every open message and the newest ``keep_finished`` finished ones.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .. import _settings
    from ..teams._mailbox import FINAL_STATUSES, MessageStatus, TeamMessage

MAILBOX_WORKFLOW = "TeamMailboxWorkflow"


def mailbox_task_queue() -> str:
    """Where mailbox workflows run: one queue every lattice worker polls (the workflow holds
    nothing of any one process)."""
    return f"{_settings.task_queue_prefix()}lattice.mailboxes"


class MailboxState(BaseModel):
    """The mailbox as one run hands it to the next (and its limits)."""

    messages: list[TeamMessage] = Field(default_factory=list[TeamMessage])
    max_history_events: int = 2000
    keep_finished: int = 1000


class StatusChange(BaseModel):
    message_id: str
    status: MessageStatus
    result: str | None = None


class InboxQuery(BaseModel):
    mailbox: str
    status: MessageStatus | None = None


class ClaimRequest(BaseModel):
    mailbox: str


class MessageQuery(BaseModel):
    message_id: str


class ThreadQuery(BaseModel):
    thread_id: str


@workflow.defn(name=MAILBOX_WORKFLOW)
class TeamMailboxWorkflow:
    @workflow.init
    def __init__(self, state: MailboxState) -> None:
        self._state = state
        self._messages = {m.id: m for m in state.messages}  # insertion order: oldest first

    @workflow.signal
    def send(self, message: TeamMessage) -> None:
        # a sender retried after a lost answer sends the same message again: keep the first
        self._messages.setdefault(message.id, message)

    @workflow.signal
    def mirror(self, message: TeamMessage) -> None:
        """A team runtime's view of its own work: the message as it is now (added, or its
        status moved on unless already final). A signal, so the runtime never waits on a
        worker of this mailbox (whose sticky queue may be on a crashed process)."""
        current = self._messages.get(message.id)
        if current is None:
            self._messages[message.id] = message
        elif current.status != message.status and current.status not in FINAL_STATUSES:
            self._change(current, message.status, message.result)

    @workflow.signal
    def settle(self, change: StatusChange) -> None:
        """Like ``set_status`` for a runtime that only knows the id: a missing or finished
        message is left alone."""
        current = self._messages.get(change.message_id)
        if current is not None and current.status not in FINAL_STATUSES:
            self._change(current, change.status, change.result)

    @workflow.update
    def claim_next(self, request: ClaimRequest) -> TeamMessage | None:
        for message in self._messages.values():
            if message.to_mailbox == request.mailbox and message.status == "pending":
                return self._change(message, "processing", None)
        return None

    @workflow.update
    def set_status(self, change: StatusChange) -> TeamMessage:
        return self._change(self._messages[change.message_id], change.status, change.result)

    @set_status.validator
    def _check_status(self, change: StatusChange) -> None:
        # a refused change leaves no trace in the history
        current = self._messages.get(change.message_id)
        if current is None:
            raise ValueError(f"no message {change.message_id!r} in this mailbox")
        if current.status in FINAL_STATUSES:
            raise ValueError(
                f"message {current.id} is already {current.status}; it cannot become "
                f"{change.status}"
            )

    @workflow.query
    def get(self, query: MessageQuery) -> TeamMessage | None:
        return self._messages.get(query.message_id)

    @workflow.query
    def inbox(self, query: InboxQuery) -> list[TeamMessage]:
        return [
            m
            for m in self._messages.values()
            if m.to_mailbox == query.mailbox and (query.status is None or m.status == query.status)
        ]

    @workflow.query
    def thread(self, query: ThreadQuery) -> list[TeamMessage]:
        return [m for m in self._messages.values() if m.thread_id == query.thread_id]

    @workflow.run
    async def run(self, state: MailboxState) -> None:
        info = workflow.info()
        await workflow.wait_condition(
            lambda: (
                info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= state.max_history_events
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            state.model_copy(update={"messages": self._carried(state.keep_finished)})
        )

    def _change(
        self, message: TeamMessage, status: MessageStatus, result: str | None
    ) -> TeamMessage:
        changed = message.model_copy(
            update={
                "status": status,
                "result": result if result is not None else message.result,
                "updated_at": workflow.now().timestamp(),
            }
        )
        self._messages[message.id] = changed
        return changed

    def _carried(self, keep_finished: int) -> list[TeamMessage]:
        """Every open message, and the newest ``keep_finished`` finished ones, in order."""
        finished = [m.id for m in self._messages.values() if m.status in FINAL_STATUSES]
        dropped = set(finished[: max(0, len(finished) - keep_finished)])
        return [m for m in self._messages.values() if m.id not in dropped]
