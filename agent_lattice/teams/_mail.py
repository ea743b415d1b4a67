"""The mailbox side of a team (seeds: Team runtime drain): the members' mailbox tools, and the
rules a claimed message is worked on by, the same for ``team.drain()`` and for the team
runtime of a running ``team.query()``.

A claimed ``task`` (or ``message``) needs an answer: the member calls ``team_reply`` (the
message is ``done``) or ``team_followup`` (it stays open); a member that ends without either
fails it, and a diagnostic follow-up goes to the sender's mailbox. A member that takes no tools
(a nested team, a host AgentLike) answers with its final result. A ``reply`` or ``followup``
delivered to a member needs no answer (it is ``done`` once the member was prompted with it):
answering answers would bounce diagnostics between two mailboxes forever.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from .._messages import ResultMessage
from ..tools._tool import ToolDefinition, ToolResult, tool
from ._mailbox import FINAL_STATUSES, MessageKind, TeamMailbox, TeamMessage, mailbox_id

__all__ = [
    "DrainResult",
    "Settled",
    "mail_sent",
    "mailbox_tools",
    "settle_work",
    "work_prompt",
]

# The mailboxes the mailbox tools of one tool call sent to. The tool activity that runs the
# call sets it, and tells the running team runtime, which then claims the new mail.
mail_sent: ContextVar[list[str] | None] = ContextVar("lattice_mail_sent", default=None)

# the kinds of message a member must answer (replies and follow-ups are information)
_NEEDS_ANSWER: frozenset[MessageKind] = frozenset({"task", "message"})
_ANSWER_NS = uuid.UUID("6b1f0c2e-4d3a-4e8b-9a7c-5d2e1f0a3b4c")


class _TeamView(Protocol):
    """What the mailbox tools need of a team."""

    name: str

    @property
    def mailbox(self) -> TeamMailbox: ...

    @property
    def members(self) -> Sequence[Any]: ...


def _note_sent(mailbox: str) -> None:
    sent = mail_sent.get()
    if sent is not None and "::" in mailbox:  # a team's mailbox (not "user")
        sent.append(mailbox)


def work_prompt(team: str, message: TeamMessage, *, answers_itself: bool) -> str:
    """What a member is prompted with for a message of its mailbox."""
    needs_answer = message.kind in _NEEDS_ANSWER
    what = "a message" if needs_answer else f"a {message.kind}"
    prompt = (
        f"Team {team}: {what} for you in mailbox {message.to_mailbox}.\n"
        f"message_id: {message.id}\nfrom: {message.from_mailbox}\n"
        + (f"in reply to: {message.reply_to}\n" if message.reply_to else "")
        + (f"subject: {message.subject}\n" if message.subject else "")
        + f"\n{message.body}"
    )
    if not needs_answer:
        return prompt + "\n\nIt needs no answer; act on it if your work calls for it."
    if answers_itself:
        return prompt
    return (
        prompt + f"\n\nWhen you are done, call team_reply with message_id {message.id} and "
        "your result (team_followup for progress)."
    )


@dataclass(frozen=True)
class Settled:
    """A claimed message after its member's work: as it ended (``done``, ``processing`` after
    a follow-up, ``failed``, ``cancelled``), and the mailbox the rules sent a reply or a
    diagnostic to (None: they sent nothing)."""

    message: TeamMessage
    upstream: str | None = None
    reason: str | None = None


async def settle_work(
    mailbox: TeamMailbox,
    member: str,
    message: TeamMessage,
    result: ResultMessage | None,
    *,
    answers_itself: bool,
    error: str | None = None,
    cancelled: bool = False,
) -> Settled:
    """Apply the rules to a claimed ``message`` once ``member`` ended (``result``; None: it
    could not run, ``error`` says why). What the member did is read from the mailbox, so the
    rules hold whichever process ran its tools. Safe to run twice: a reply or diagnostic the
    rules send has an id of its own message's, sent once."""
    current = await mailbox.get(message.id) or message
    if current.status in FINAL_STATUSES:  # team_reply (or the host) ended it
        return Settled(current)
    if cancelled:
        why = error or f"the team run stopped {member}'s work"
        return Settled(await mailbox.set_status(message.id, "cancelled", result=why))
    if message.kind not in _NEEDS_ANSWER:
        delivered = f"delivered to {member}"
        return Settled(await mailbox.set_status(message.id, "done", result=delivered))
    if await _followed_up(mailbox, message):
        return Settled(current)  # progress was reported: the message stays open
    if answers_itself and result is not None and not result.is_error:
        reply = answer_to(message, "reply", result.result or "", own_id=True)
        await _send_once(mailbox, reply)
        done = await mailbox.set_status(message.id, "done", result=result.result)
        return Settled(done, upstream=reply.to_mailbox)
    if result is None:
        reason = f"{member} could not run: {error or 'unknown error'}"
    elif answers_itself:
        reason = f"{member} ended ({result.subtype})"
    else:
        reason = f"{member} ended ({result.subtype}) without team_reply or team_followup"
    failed = await mailbox.set_status(message.id, "failed", result=reason)
    final_text = (result.result or "") if result is not None else ""
    diagnostic = answer_to(
        message,
        "followup",
        f"Message {message.id} failed: {reason}. Its final text was: {final_text[:500]}",
        own_id=True,
    )
    await _send_once(mailbox, diagnostic)
    return Settled(failed, upstream=diagnostic.to_mailbox, reason=reason)


async def _followed_up(mailbox: TeamMailbox, message: TeamMessage) -> bool:
    return any(
        m.kind == "followup" and m.reply_to == message.id and m.from_mailbox == message.to_mailbox
        for m in await mailbox.thread(message.thread_id)
    )


async def _send_once(mailbox: TeamMailbox, message: TeamMessage) -> None:
    if await mailbox.get(message.id) is None:
        await mailbox.send(message)


def answer_to(
    original: TeamMessage, kind: MessageKind, body: str, *, own_id: bool = False
) -> TeamMessage:
    """A reply or follow-up to ``original``, from the mailbox it was sent to, in its thread
    (``own_id``: an id derived from the original's, for the one answer the rules make)."""
    fields: dict[str, Any] = {
        "from_mailbox": original.to_mailbox,
        "to_mailbox": original.from_mailbox,
        "kind": kind,
        "body": body,
        "thread_id": original.thread_id,
        "reply_to": original.id,
    }
    if own_id:
        fields["id"] = f"msg_{uuid.uuid5(_ANSWER_NS, f'{original.id}/{kind}').hex[:20]}"
    return TeamMessage.model_validate(fields)


@dataclass
class DrainResult:
    rounds: int
    processed: list[TeamMessage] = field(default_factory=list[TeamMessage])
    failed: list[TeamMessage] = field(default_factory=list[TeamMessage])


class _Send(BaseModel):
    to: str = Field(description='A member name of this team, or a full mailbox id "team::member".')
    body: str
    subject: str | None = None


class _Inbox(BaseModel):
    status: Literal["pending", "processing", "done", "failed", "cancelled"] | None = None


class _MessageRef(BaseModel):
    message_id: str


class _Answer(BaseModel):
    message_id: str = Field(description="The message you are answering.")
    body: str


def mailbox_tools(team: _TeamView, owner: str) -> list[ToolDefinition[Any]]:
    """``team_send``, ``team_inbox``, ``team_read``, ``team_reply``, ``team_followup`` and
    ``team_status`` for the mailbox ``owner`` (a member name, or ``lead``)."""
    me = mailbox_id(team.name, owner)

    def address(to: str) -> str:
        return to if "::" in to else mailbox_id(team.name, to)

    def describe(m: TeamMessage) -> dict[str, Any]:
        return {
            "message_id": m.id,
            "from": m.from_mailbox,
            "to": m.to_mailbox,
            "kind": m.kind,
            "status": m.status,
            "subject": m.subject,
            "body": m.body,
            "thread_id": m.thread_id,
            "result": m.result,
        }

    async def send(input: _Send) -> str:
        sent = await team.mailbox.send(
            TeamMessage(
                from_mailbox=me,
                to_mailbox=address(input.to),
                body=input.body,
                subject=input.subject,
            )
        )
        _note_sent(sent.to_mailbox)
        return json.dumps({"status": "sent", "message_id": sent.id, "to": sent.to_mailbox})

    async def inbox(input: _Inbox) -> str:
        return json.dumps([describe(m) for m in await team.mailbox.inbox(me, status=input.status)])

    async def read(input: _MessageRef) -> ToolResult:
        message = await team.mailbox.get(input.message_id)
        if message is None:
            return ToolResult(content=f"No message {input.message_id!r}.", is_error=True)
        return ToolResult(content=json.dumps(describe(message)))

    async def answer(input: _Answer, kind: MessageKind) -> ToolResult:
        original = await team.mailbox.get(input.message_id)
        if original is None or original.to_mailbox != me:
            return ToolResult(
                content=f"{input.message_id!r} is not a message in your mailbox ({me}).",
                is_error=True,
            )
        sent = await team.mailbox.send(answer_to(original, kind, input.body))
        if kind == "reply" and original.status not in FINAL_STATUSES:
            await team.mailbox.set_status(original.id, "done", result=input.body)
        _note_sent(sent.to_mailbox)
        return ToolResult(
            content=json.dumps({"status": "sent", "message_id": sent.id, "kind": kind})
        )

    async def reply(input: _Answer) -> ToolResult:
        return await answer(input, "reply")

    async def followup(input: _Answer) -> ToolResult:
        return await answer(input, "followup")

    async def status(input: _Inbox) -> str:
        counts: dict[str, dict[str, int]] = {}
        for name in ["lead", *(m.name for m in team.members)]:
            box = mailbox_id(team.name, name)
            for m in await team.mailbox.inbox(box):
                counts.setdefault(box, {}).setdefault(m.status, 0)
                counts[box][m.status] += 1
        return json.dumps(counts)

    return [
        tool("team_send", "Send a message to a team member's mailbox.", _Send, send),
        tool(
            "team_inbox",
            "List the messages in your mailbox.",
            _Inbox,
            inbox,
            is_concurrency_safe=lambda _: True,
        ),
        tool(
            "team_read",
            "Read one message by id.",
            _MessageRef,
            read,
            is_concurrency_safe=lambda _: True,
        ),
        tool(
            "team_reply",
            "Reply to a message with your final result; it completes the message.",
            _Answer,
            reply,
        ),
        tool(
            "team_followup",
            "Send a progress update about a message upstream; the message stays open.",
            _Answer,
            followup,
        ),
        tool(
            "team_status",
            "Message counts per mailbox and status.",
            _Inbox,
            status,
            is_concurrency_safe=lambda _: True,
        ),
    ]
