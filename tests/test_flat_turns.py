"""A turn late in a long conversation costs what an early one does: a model request resolves,
validates and encodes only what is new (the transcript store's cache keeps the conversation
resolved and in its wire form), and a long conversation with large results survives
continue-as-new whole."""

from __future__ import annotations

import pytest
from temporalio import activity

from agent_lattice import Runtime, ToolResultBlock, ToolUseBlock, create_agent, tool
from agent_lattice._messages import ModelMessage
from agent_lattice.history import _transcripts
from agent_lattice.history._transcripts import (
    PostgresTranscriptStore,
    SqliteTranscriptStore,
    TranscriptStore,
    hydrate,
)
from agent_lattice.testing import FAST_SETTINGS, RecordedRequest, Reply, text, tool_use

from conftest import Expr

BIG = 20_000


def result_of(turn: int) -> str:
    return f"report {turn:03d} " + "x" * BIG


class Counts:
    """What the model activities of this process resolve and read, counted where the
    transcript store does it: large results resolved (``get_blob``) and read from the
    store (its ``_get_blob`` primitive, and the characters read), transcript chains read from
    the store, messages validated, messages encoded for the request body."""

    FIELDS = ("resolved", "blob_reads", "chars_read", "chains", "validated", "encoded")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: dict[str, int] = dict.fromkeys(self.FIELDS, 0)
        get_blob, bodies = TranscriptStore.get_blob, TranscriptStore._bodies
        validate = ModelMessage.model_validate_json
        wire_json, to_wire = ModelMessage.wire_json, ModelMessage.to_wire

        async def counted_get_blob(store: TranscriptStore, ref: str) -> str:
            self._count("resolved")
            return await get_blob(store, ref)

        def counted_bodies(store: TranscriptStore, head: str) -> list[str] | None:
            self._count("chains")  # (in a thread, with the activity's context)
            return bodies(store, head)

        def counted_validate(data: str | bytes, **kwargs: object) -> ModelMessage:
            self._count("validated")
            return validate(data, **kwargs)  # type: ignore[arg-type]

        def counted_wire_json(message: ModelMessage) -> str:
            self._count("encoded")
            return wire_json(message)

        def counted_to_wire(message: ModelMessage) -> dict[str, object]:
            self._count("encoded")
            return to_wire(message)

        for kind in (SqliteTranscriptStore, PostgresTranscriptStore):
            read = kind._get_blob

            def counted_read(store, ref, read=read):  # type: ignore[no-untyped-def]
                row = read(store, ref)
                self._count("blob_reads")
                self._count("chars_read", len(row[0]) if row else 0)
                return row

            monkeypatch.setattr(kind, "_get_blob", counted_read)
        monkeypatch.setattr(TranscriptStore, "get_blob", counted_get_blob)
        monkeypatch.setattr(TranscriptStore, "_bodies", counted_bodies)
        monkeypatch.setattr(ModelMessage, "wire_json", counted_wire_json)
        monkeypatch.setattr(ModelMessage, "to_wire", counted_to_wire)
        monkeypatch.setattr(
            _transcripts.ModelMessage, "model_validate_json", staticmethod(counted_validate)
        )

    def _count(self, what: str, n: int = 1) -> None:
        if activity.in_activity() and activity.info().activity_type == "lattice.model_request":
            self.counts[what] += n

    def now(self) -> tuple[int, ...]:
        return tuple(self.counts.values())


class Replies:
    """tool_use of ``report`` for ``turns`` turns, then ``done``; at each request, what the
    model activities have counted so far (a request's own reads happen before it is sent,
    the next one's only after it is answered)."""

    def __init__(self, turns: int, counts: Counts | None = None) -> None:
        self.turns, self.counts = turns, counts
        self.seen: list[tuple[int, ...]] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        if self.counts is not None:
            self.seen.append(self.counts.now())
        turn = 1 + sum(1 for m in request.messages if m["role"] == "assistant")
        return tool_use("report", {"expr": str(turn)}) if turn <= self.turns else text("done")

    def per_request(self) -> list[dict[str, int]]:
        """What each request's model activity did (``Counts.FIELDS``)."""
        before = [(0,) * len(Counts.FIELDS), *self.seen[:-1]]
        return [
            {f: b - a for f, a, b in zip(Counts.FIELDS, x, y, strict=True)}
            for x, y in zip(before, self.seen, strict=True)
        ]


async def _long_query(lattice_server: str, fake_anthropic, replies: Replies, per_run: int):
    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS.model_copy(update={"turns_per_run": per_run})
    )
    fake_anthropic.set_handler(replies)
    agent = create_agent(
        api_key="k",
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="long-haul",
        tools=[tool("report", "r", Expr, lambda e: result_of(int(e.expr)))],
    ).bind_runtime(runtime)
    try:
        result = await agent.prompt(f"Run {replies.turns} turns.", timeout=120)
        return result, await agent.get_history(), runtime
    except BaseException:
        await runtime.close()
        raise


async def test_a_long_conversation_with_large_results_is_whole_across_continue_as_new(
    lattice_server, fake_anthropic
):
    from temporalio.client import WorkflowExecutionStatus

    turns = 10
    result, history, runtime = await _long_query(lattice_server, fake_anthropic, Replies(turns), 3)
    try:
        assert result.subtype == "success" and result.num_turns == turns + 1
        # the stored conversation: the prompt, each turn's call and its whole result, the end
        assert len(history) == 2 * turns + 2
        for turn in range(1, turns + 1):
            use, block = history[2 * turn - 1].content[0], history[2 * turn].content[0]
            assert isinstance(use, ToolUseBlock) and use.input == {"expr": str(turn)}
            assert isinstance(block, ToolResultBlock) and block.tool_use_id == use.id
            assert block.content == result_of(turn) and block.content_ref is None
        assert history[-1].text == "done"
        # and what the model was sent, each turn: every result so far, whole
        for k, request in enumerate(fake_anthropic.requests):
            sent = [
                b["content"]
                for m in request.messages
                if isinstance(m["content"], list)
                for b in m["content"]
                if b.get("type") == "tool_result"
            ]
            assert sent == [result_of(t) for t in range(1, k + 1)], k
        runs = [
            r.status
            async for r in runtime.client.list_workflows(f"WorkflowId = '{result.workflow_id}'")
        ]
        assert runs.count(WorkflowExecutionStatus.CONTINUED_AS_NEW) == 3, runs
    finally:
        await runtime.close()


async def test_a_late_model_request_reads_and_validates_what_an_early_one_does(
    lattice_server, fake_anthropic, monkeypatch
):
    """Counted, not timed: the blobs a model request reads (large results resolved), the
    transcript chains it reads, the messages it validates and those it encodes for the
    request's body, at turn 2 and turn 12."""
    counts = Counts(monkeypatch)
    replies = Replies(12, counts)
    result, _, runtime = await _long_query(lattice_server, fake_anthropic, replies, 5)
    await runtime.close()
    assert result.subtype == "success"
    done = replies.per_request()
    assert len(done) == 13
    early, late = done[2], done[-1]  # (the first request has no result; the second the first)
    # a request resolves the result added since the last one and reads it from the store at
    # most once (here never: the tool ran in this process), as many late as early ...
    assert late == early, done
    assert early["resolved"] <= 2 and early["blob_reads"] <= 1, done
    # ... reads no transcript (cached from the turn before, across runs) and validates only
    # what it stores (the results it was given, the reply)
    assert [d["chains"] for d in done] == [0] * 13, done
    assert early["validated"] == 2, done
    # ... and encodes for the body only what is new, not the conversation: the results it was
    # given, and the cache the two messages stored since the last request (the last results
    # and reply); each in wire_json, whose to_wire counts too
    assert early["encoded"] == 6, done


@pytest.mark.parametrize("limit_mb", ["64", "0"])
async def test_resolved_transcripts_equal_hydrated_ones_on_a_hit_and_a_miss(
    tmp_path, monkeypatch, limit_mb
):
    monkeypatch.setenv("LATTICE_TRANSCRIPT_CACHE_MB", limit_mb)
    store = SqliteTranscriptStore(tmp_path / "t.db")
    head = await store.append(None, [ModelMessage(role="user", content="go")])
    for turn in range(1, 6):
        use = ToolUseBlock(id=f"t{turn}", name="report", input={})
        block = await store.externalize(
            ToolResultBlock(tool_use_id=use.id, content=result_of(turn))
        )
        assert block.content_ref is not None
        head = await store.append(head, [ModelMessage(role="assistant", content=[use])])
        head = await store.append(head, [ModelMessage(role="user", content=[block])])
        resolved = await store.resolved(head)
        assert resolved == await hydrate(await store.messages(head), store)
        shared, wire = await store.encoded(head)
        assert shared == resolved and wire == [m.wire_json() for m in resolved]
        assert resolved[-1].content[0].content == result_of(turn)  # type: ignore[union-attr]
        # a copy is the caller's: changing it changes nothing cached
        resolved[-1].content.clear()  # type: ignore[union-attr]
        again = await store.resolved(head, copies=False)
        assert again[-1].content[0].content == result_of(turn)  # type: ignore[union-attr]
    # another process (a new store on the same file: nothing cached) reads the same
    fresh = SqliteTranscriptStore(tmp_path / "t.db")
    assert await fresh.resolved(head) == await store.resolved(head)
