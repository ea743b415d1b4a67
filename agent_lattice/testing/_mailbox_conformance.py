"""A conformance check any :class:`~agent_lattice.TeamMailbox` backend can run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._errors import OptionError
from ..teams._mailbox import TeamMailbox, TeamMessage

__all__ = ["check_mailbox_conformance"]


async def check_mailbox_conformance(open_mailbox: Callable[[], TeamMailbox]) -> None:
    """Exercise the mailbox contract; raises ``AssertionError`` naming the first broken rule.

    ``open_mailbox()`` must return a mailbox over the same, initially empty, storage each
    time it is called (for durable backends a second call stands for another process).
    """
    box = open_mailbox()
    lead, researcher, writer = "eng::lead", "eng::researcher", "eng::writer"
    assert await box.claim_next(researcher) is None, "an empty mailbox claims nothing"

    first = await box.send(TeamMessage(from_mailbox=lead, to_mailbox=researcher, body="one"))
    second = await box.send(
        TeamMessage(
            from_mailbox=lead,
            to_mailbox=researcher,
            body="two",
            metadata={"workspace_grants": ["/work/shared"]},
        )
    )
    other = await box.send(TeamMessage(from_mailbox=lead, to_mailbox=writer, body="three"))
    assert first.thread_id == first.id, "a new message starts its own thread"

    claimed = await box.claim_next(researcher)
    assert claimed is not None and claimed.id == first.id, "claims are first in, first out"
    assert claimed.status == "processing"
    stored = await open_mailbox().get(first.id)
    assert stored is not None and stored.status == "processing", "a claim is stored"
    again = await box.claim_next(researcher)
    assert again is not None and again.id == second.id, "a claimed message is not claimed twice"
    assert again.metadata == {"workspace_grants": ["/work/shared"]}, "metadata round-trips"
    assert await box.claim_next(researcher) is None, "routing is explicit: only its own mailbox"
    untouched = await box.get(other.id)
    assert untouched is not None and untouched.status == "pending", "other mailboxes are untouched"

    reply = await box.send(
        TeamMessage(
            from_mailbox=researcher,
            to_mailbox=lead,
            kind="reply",
            body="done: one",
            thread_id=first.thread_id,
            reply_to=first.id,
        )
    )
    done = await box.set_status(first.id, "done", result="done: one")
    assert done.status == "done" and done.result == "done: one"
    try:
        await box.set_status(first.id, "failed")
    except OptionError:
        pass
    else:
        raise AssertionError("a finished message cannot change status again")
    thread = await open_mailbox().thread(first.thread_id)
    assert [m.id for m in thread] == [first.id, reply.id], "a thread lists its messages in order"
    inbox = await box.inbox(researcher)
    assert [m.id for m in inbox] == [first.id, second.id]
    assert [m.id for m in await box.inbox(researcher, status="processing")] == [second.id]
    assert [m.id for m in await box.inbox(lead, status="pending")] == [reply.id]
    try:
        await box.set_status("msg_missing", "done")
    except OptionError:
        pass
    else:
        raise AssertionError("an unknown message id is an error")

    # concurrent claimers never take the same message
    sent = [
        await box.send(TeamMessage(from_mailbox=lead, to_mailbox="eng::pool", body=str(i)))
        for i in range(12)
    ]
    boxes = [open_mailbox() for _ in range(4)]

    async def drain(b: TeamMailbox) -> list[str]:
        taken = []
        while (m := await b.claim_next("eng::pool")) is not None:
            taken.append(m.id)
        return taken

    claims = await asyncio.gather(*(drain(b) for b in boxes))
    taken = [i for c in claims for i in c]
    assert sorted(taken) == sorted(m.id for m in sent), "every message claimed exactly once"
