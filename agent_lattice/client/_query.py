"""One query from the caller's side: start the workflow, merge live and durable messages."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError

from .. import _settings
from .._approvals import ApprovalDecision
from .._errors import ApprovalError, HistoryStoreError, HookError, OptionError, TracerError
from .._messages import (
    AssistantMessage,
    ContentBlock,
    ModelMessage,
    ResultMessage,
    SDKMessage,
    SystemMessage,
    UserMessage,
)
from .._option_types import QuerySignal
from .._options import check_options
from .._pricing import check_priced
from .._steer import check_steer
from ..history._stores import QueryMirror, same_messages
from ..tracing._tracers import ContextTracer
from ..workflows._contract import FailureType
from ..workflows._delegation_types import TeamRunInput
from ..workflows._mail_types import MailNotice, TeamRunOutput
from ..workflows._refs import agent_ref, request_options, workflow_id_for
from ..workflows._types import AgentRunInput, AgentRunOutput
from ..workflows._visibility import PROMPT_MEMO, prompt_line, start_attributes
from ._approvals import decide, find_approval
from ._closed import output_of_close
from ._default import get_default_runtime
from ._merge import Failed, Item, Live, Mark, Merge, Nested, Producers, follows
from ._runtime import WORKFLOW_APPEARS_S as APPEARS_S
from ._runtime import Runtime
from ._steer import send_steer

if TYPE_CHECKING:
    from .._agent import Agent
    from ..teams._team import RunsTeam

__all__ = ["QueryRun"]

log = logging.getLogger("agent_lattice.query")

_BLOCKS: TypeAdapter[list[ContentBlock]] = TypeAdapter(list[ContentBlock])
# how long prompt() waits, after the result, for the store's reader to see the last messages
FOLLOW_GRACE_S = 10.0
# how often a query's signal is looked at when its wait() cannot be awaited
SIGNAL_POLL_S = 0.05


class QueryRun:
    """Drives one ``agent.query()``; :meth:`messages` is the iterator the caller sees."""

    @classmethod
    def start(
        cls,
        agent: Agent,
        prompt: str | Sequence[Mapping[str, Any]],
        options: Mapping[str, Any],
        team: RunsTeam | None,
    ) -> QueryRun:
        """The client's :class:`~agent_lattice._session.QueryRunner` (registered on import)."""
        run = cls(agent, prompt, **options)
        run.team = team
        return run

    def __init__(
        self,
        agent: Agent,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        stream: bool = True,
        runtime: Runtime | None = None,
        output_format: Any = None,
        thinking_config: Mapping[str, Any] | None = None,
        reasoning_effort: str | None = None,
        context: Any = None,
        request_timeout_ms: int | None = None,
        timeout: float | None = None,
        permissions: Mapping[str, Any] | None = None,
        tracer: ContextTracer | None = None,
        signal: QuerySignal | None = None,
        approval_timeout_s: float | None = None,
        max_budget_usd: float | None = None,
    ) -> None:
        if signal is not None and not (
            callable(getattr(signal, "is_set", None)) and callable(getattr(signal, "wait", None))
        ):
            raise OptionError(
                "QueryOptions: signal must be an asyncio.Event-like object (is_set() and an "
                f"awaitable wait()); got {type(signal).__name__}"
            )
        self.signal = signal
        self.approval_timeout_s = approval_timeout_s
        if max_budget_usd is not None:
            check_priced(agent.config.model, agent.config.pricing, "QueryOptions")
        self.max_budget_usd = max_budget_usd
        self._approvals: dict[str, str] = {}  # approval id -> its run, as the stream said
        self._watcher: asyncio.Task[None] | None = None  # aborts the run once signal is set
        if tracer is not None and not isinstance(tracer, ContextTracer):
            raise OptionError(
                "QueryOptions: tracer must be a ContextTracer (create_jsonl_context_tracer(), "
                f"define_context_tracer(), ...); got {type(tracer).__name__}"
            )
        self.tracer = tracer
        self._traced_on: Runtime | None = None  # where the tracer is bound, until the end
        self.agent = agent
        config = agent.config
        self.request = request_options(
            config,
            output_format=output_format,
            thinking_config=thinking_config,
            reasoning_effort=reasoning_effort,
            request_timeout_ms=request_timeout_ms,
        )
        self.context = context
        self.deadline_s = timeout
        self.workspace_grants = workspace_grants_of(permissions)
        self._cancelled = False
        self.prompt: str | list[ContentBlock] = (
            prompt if isinstance(prompt, str) else _BLOCKS.validate_python(list(prompt))
        )
        self.workflow_id = ""  # known once the session is prepared (see _start)
        self.stream = stream
        self._runtime = runtime
        self._handle: Any = None
        self._interrupt_requested = False
        self._done = False
        self._signals: list[asyncio.Task[None]] = []
        self.team: RunsTeam | None = None  # set when this agent runs as a team's lead
        self._unwatch: Callable[[], None] | None = None  # stops team.send() telling this run
        self.final_head: str | None = None  # the transcript after the run, once it ended
        self.transcript: list[ModelMessage] | None = None  # the whole of it, when compacted
        self.mirror: QueryMirror | None = None  # the history store's writer, from the start

    def interrupt(self) -> bool:
        if self._done:
            return False
        if not self._interrupt_requested:
            self._interrupt_requested = True
            if self._handle is not None:
                self._send_interrupt()
        return True

    def _send_interrupt(self) -> None:
        self._signals.append(asyncio.ensure_future(self._handle.signal("interrupt")))

    async def steer(self, text: str) -> bool:
        """A message for this query's model, taken at its next request (after the tool
        results of the batch that is running): True once the run holds it, False when the
        query is not running (not started yet, or ended or ending)."""
        checked = check_steer(text)
        if self._handle is None or self._done:
            return False
        why = await send_steer(self._client, self.workflow_id, checked)
        if why is not None:
            log.info("steer not taken: %s", why)
        return why is None

    async def decide(self, decision: ApprovalDecision) -> None:
        """A decision on an approval request of this query or of a run beneath it."""
        if self._handle is None or self._done:
            raise ApprovalError(f"{self.agent.name}'s query is not running")
        client = self._client  # the client the run was started with
        workflow_id = self._approvals.get(decision.approval_id) or await find_approval(
            client, decision.approval_id, self.workflow_id
        )
        if workflow_id is None:
            raise ApprovalError(
                f"no pending approval {decision.approval_id!r} in {self.workflow_id} or the "
                "runs beneath it"
            )
        await decide(client, workflow_id, decision)

    def _note(self, message: SDKMessage) -> None:
        """Where each approval request of the stream waits (for :meth:`decide`)."""
        if isinstance(message, SystemMessage) and message.subtype == "approval_request":
            assert message.approval_id is not None and message.workflow_id is not None
            self._approvals[message.approval_id] = message.workflow_id

    async def _start(self, runtime: Runtime, stream_to: str | None, channel: str | None) -> None:
        agent, config = self.agent, self.agent.config
        prompt_message = ModelMessage(role="user", content=self.prompt)
        session = agent.session
        self._client = runtime.client
        self.mirror = session.mirror()
        if self.mirror is not None:
            # the prompt lands as the query starts; a store bound to fail that fails here
            # raises before any run (or model spend) begins
            await self.mirror.add(prompt_message)
        self.workflow_id = workflow_id_for(agent, session.next_query())
        # The conversation travels by reference: the workflow gets the transcript's head.
        store = runtime.transcripts
        head = await store.append(await session.transcript_head(store), [prompt_message])
        prompt_json = json.dumps(prompt_message.to_wire()["content"], ensure_ascii=False)
        large = len(prompt_json) > _settings.inline_limit()
        run_input = AgentRunInput(
            agent=agent_ref(agent),
            session_id=agent.session_id,
            prompt=prompt_json[:160] + f"… [{len(prompt_json)} characters]"
            if large
            else self.prompt,
            head=head,
            prompt_in_head=large,
            last_input_tokens=session.last_input_tokens(),
            stream=self.stream,
            stream_to=stream_to,
            stream_channel=channel,
            settings=runtime.settings,
            request=self.request,
            context=self.context,
            deadline_s=self.deadline_s,
            workspace_grants=self.workspace_grants,
            approval_timeout_s=self.approval_timeout_s,
            max_budget_usd=self.max_budget_usd,
            search_attributes=await runtime.search_attributes_ready(),
            index_every_s=runtime.settings.index_every_s,
            temporal_outcomes=True,  # Failed for an error result, Canceled by a cancel request
        )
        memo = {PROMPT_MEMO: prompt_line(self.prompt)}
        if self.tracer is not None:
            if not runtime.inline_workers:
                raise OptionError(
                    "QueryOptions: tracer= needs the query served in this process (inline "
                    "workers): the tracer is an object of this process. For runs served by "
                    "`lattice worker`, give the agent its tracer in create_agent(tracer=...)."
                )
            # this query and every run it delegates to report to the tracer (bound here, by
            # session id, for this process's workers: see Runtime.bind_query_tracer)
            runtime.bind_query_tracer(agent.session_id, self.tracer, self.workflow_id)
            self._traced_on = runtime
            run_input.traced = True
        # a signal set already: the run starts aborted (a plain query: before any model
        # request; a team's lead is told as soon as it starts)
        aborted = "abort" if self.signal is not None and self.signal.is_set() else None
        if self.team is not None:
            # the team runtime is the parent; the lead's query (this workflow id) its child
            team = self.team
            self._handle = await runtime.client.start_workflow(
                "TeamWorkflow",
                TeamRunInput(
                    team=team.name,
                    lead=run_input,
                    lead_workflow_id=self.workflow_id,
                    lead_task_queue=runtime.task_queue_for(agent),
                    max_concurrent_work_items=team.max_concurrent_work_items,
                ),
                id=f"team-{team.name}-{agent.session_id}-{self.workflow_id.rsplit('-', 1)[1]}",
                task_queue=runtime.task_queue_for(agent),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"team {team.name} · lead {agent.name}",
                memo=memo,
                result_type=TeamRunOutput,
                start_signal=aborted,
            )
            handle = self._handle

            async def tell(mailboxes: list[str]) -> None:
                await handle.signal("mail", MailNotice(mailboxes=mailboxes))

            # team.send() while this query runs: its team runtime claims the message
            self._unwatch = team.watch_mail(tell)
        else:
            self._handle = await runtime.client.start_workflow(
                "AgentWorkflow",
                run_input,
                start_signal=aborted,
                id=self.workflow_id,
                task_queue=runtime.task_queue_for(agent),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"{agent.name} · {config.model}",
                static_details=f"session {agent.session_id}",
                memo=memo,
                search_attributes=start_attributes(agent.name, agent.session_id, config.model)
                if run_input.search_attributes
                else None,
                result_type=AgentRunOutput,
            )
        if self._interrupt_requested:
            self._send_interrupt()
        if self.signal is not None:
            self._watcher = asyncio.create_task(self._abort_on(self.signal))

    async def _abort_on(self, signal: QuerySignal) -> None:
        """Abort the run (``error_abort``, completed turns kept) once the host sets the
        query's signal: the run ends as for a cancelled caller, and the caller gets the
        result."""
        if inspect.iscoroutinefunction(signal.wait):
            await signal.wait()
        else:  # a wait() that blocks (threading.Event, set from a thread): look at is_set()
            while not signal.is_set():  # noqa: ASYNC110 - the host's event is not asyncio's
                await asyncio.sleep(SIGNAL_POLL_S)
        if not self._done:
            self._cancelled = True
            await self._handle.signal("abort")

    async def _stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(BaseException):
                await self._watcher

    async def result(self) -> ResultMessage:
        """Run to the end without following the messages (what ``prompt()`` needs): no
        subscription and no live channel, just the workflow's result."""
        new_messages: list[ModelMessage] = []
        follower: asyncio.Task[None] | None = None
        try:
            runtime = await self._prepared_runtime()
            await self._start(runtime, None, None)
            if self.mirror is not None:
                # nothing is streamed to the caller, but the store gets each message as it
                # lands: follow the run's durable messages for it
                follower = asyncio.create_task(self._follow(runtime))
            try:
                output: AgentRunOutput = await runtime.watch.until_lost(
                    self._handle.result(), from_server=True
                )
            except RPCError as err:
                runtime.watch.raise_if_lost(err)
                raise
            except asyncio.CancelledError:
                # The caller cancelled: abort the run and keep the turns it completed.
                self._cancelled = True
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._abandon(runtime, new_messages))
                raise
            except WorkflowFailureError as err:
                # Failed with an error result, or Canceled: its output all the same
                closed = await output_of_close(runtime.client, self._handle.id, err)
                if closed is None:
                    return await runtime.outcome(self.workflow_id)
                output = closed
            if follower is not None:  # its last messages (settle() writes any it missed)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(follower), FOLLOW_GRACE_S)
            await self._collect(runtime, output, new_messages)
            self._raise_store_failure()
            return _raise_hook_failure(output.result)
        finally:
            if follower is not None:
                follower.cancel()
            self._done = True
            if self._traced_on is not None:  # the query's tracer leaves with it
                self._traced_on.release_query_tracers(self.workflow_id)
            await self._finish(new_messages)
            for task in self._signals:
                with contextlib.suppress(Exception):
                    await task

    async def detach(self) -> str:
        """Start the run and leave it to its workers (``agent.start()``): nothing is
        followed from here. The session stays this run's: its messages are the session's
        in Temporal, for a new Agent of the same session id to read."""
        runtime = await self._prepared_runtime()
        await self._start(runtime, None, None)
        return self.workflow_id

    async def messages(self) -> AsyncIterator[SDKMessage]:
        new_messages: list[ModelMessage] = []
        try:
            runtime = await self._prepared_runtime()
            # aclosing: when the caller stops early, the inner run must finish its clean-up
            # (ending the workflow, collecting completed turns) before on_done sees them.
            async with contextlib.aclosing(self._run(runtime, new_messages)) as run:
                async for message in run:
                    self._note(message)
                    yield message
        finally:
            self._done = True
            if self._traced_on is not None:  # the query's tracer leaves with it
                self._traced_on.release_query_tracers(self.workflow_id)
            await self._finish(new_messages)

    async def _prepared_runtime(self) -> Runtime:
        """The runtime the query runs on, with the session loaded (before the first query:
        from its history store, else from what Temporal holds of an earlier session) and
        the agent served."""
        runtime = self._runtime or self.agent.runtime or await get_default_runtime()
        agent, session = self.agent, self.agent.session
        if not session.loaded:  # a session id made here has no earlier queries to probe for
            await session.load(
                None
                if session.fresh
                else await runtime.session_state(agent.name, agent.session_id, agent=agent)
            )
        await runtime.ensure_worker(agent)
        return runtime

    async def _finish(self, new_messages: list[ModelMessage]) -> None:
        """The session is free again and holds the query's messages."""
        await self._stop_watching()
        if self._unwatch is not None:
            self._unwatch()
        session = self.agent.session
        session.release()
        await session.absorb(
            new_messages, compacted_to=self.transcript, head=self.final_head, mirror=self.mirror
        )

    async def _run(
        self, runtime: Runtime, new_messages: list[ModelMessage]
    ) -> AsyncGenerator[SDKMessage, None]:
        agent = self.agent
        merge = Merge()
        producers = Producers(merge, runtime, agent.session_id, APPEARS_S)
        receiver = channel = None
        if self.stream:
            receiver = await runtime.stream_receiver()
            channel = receiver.open(producers.live)
            producers.landed.channel = True  # its run's worker may send commit notices
        await self._start(runtime, receiver.address if receiver else None, channel)
        durable = asyncio.create_task(producers.durable(self.workflow_id, self._landed))
        finished = False
        try:
            while (item := await self._next(runtime, merge)) is not Mark.END:
                if isinstance(item, ResultMessage):
                    finished = True
                    # the reader reads the run's close, output and all, a moment after the
                    # result message: no long poll of the result of its own. A team's query
                    # waits for its TeamWorkflow instead, which ends after the lead's run
                    # (its work cancelled first, when aborted)
                    output = None if self.team else await producers.landed.output()
                    output = output or await self._output()
                    await self._collect(runtime, output, new_messages)
                    _raise_hook_failure(item)
                    for event in merge.flush():
                        yield event
                    async for nested in merge.rest_of(producers.members):
                        yield nested
                    async for late in producers.late(output):
                        yield late
                    yield item
                    break
                for event in self._released(runtime, merge, producers, item):
                    yield event
        finally:
            if receiver is not None and channel is not None:
                receiver.discard(channel)
            producers.stop()
            durable.cancel()
            with contextlib.suppress(BaseException):
                await durable
            if not finished:
                # The caller stopped reading: end the run and keep the turns it completed.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._abandon(runtime, new_messages))
            for task in self._signals:
                with contextlib.suppress(Exception):
                    await task

    async def _next(self, runtime: Runtime, merge: Merge) -> Item:
        """The merge's next item; waiting gives up once the server has been unreachable for
        too long."""
        try:
            item = merge.get_nowait()
            return item if item is not None else await runtime.watch.until_lost(merge.get())
        except asyncio.CancelledError:
            self._cancelled = True  # the consuming task was cancelled: abort
            raise

    def _released(
        self, runtime: Runtime, merge: Merge, producers: Producers, item: Item
    ) -> list[SDKMessage]:
        """What the caller sees now for one item of the merge (before the result)."""
        if isinstance(item, Failed):
            runtime.watch.raise_if_lost(item.error)
            raise item.error
        if item is Mark.STORE_FAILED:
            self._raise_store_failure()
            return []
        if isinstance(item, Nested):
            return [item.event]
        if isinstance(item, Live):
            return list(merge.release(item))
        assert not isinstance(item, Mark)
        if follows(item):
            producers.follow(item)
        return [item, *merge.delivered(item)]

    async def _landed(self, message: SDKMessage) -> bool:
        """Write a durable message of this run to the history store (assistant messages and
        tool results); False when a store bound to fail_on_error failed: the run is
        interrupted at once, so no further model request is made for it."""
        if self.mirror is None or not isinstance(message, AssistantMessage | UserMessage):
            return True
        try:
            await self.mirror.add(message.message)
        except HistoryStoreError:
            self.interrupt()
            return False
        return True

    async def _follow(self, runtime: Runtime) -> None:
        """prompt()'s reader of the durable messages, for the history store alone."""
        try:
            async for message in runtime.durable_messages(
                self.workflow_id, appears_within=APPEARS_S
            ):
                if not await self._landed(message):
                    return
        except Exception as err:  # the end of the query writes what this one missed
            log.debug("messages of %s unavailable to the history store: %s", self.workflow_id, err)

    def _raise_store_failure(self) -> None:
        if self.mirror is not None and self.mirror.error is not None:
            raise self.mirror.error

    async def _output(self) -> AgentRunOutput | None:
        """The run's output (a team query's: its TeamWorkflow's), however it closed."""
        try:
            return await self._handle.result()
        except WorkflowFailureError as err:
            kind = TeamRunOutput if self.team else AgentRunOutput
            with contextlib.suppress(Exception):
                return await output_of_close(self._client, self._handle.id, err, None, kind)
            return None
        except Exception:
            return None

    async def _collect(
        self, runtime: Runtime, output: AgentRunOutput | None, new_messages: list[ModelMessage]
    ) -> None:
        """The messages the run added (resolved from the transcript) and its final head; a run
        that closed without an output (terminated, timed out) adds what it had landed."""
        if output is None:
            landed = await runtime.landed(self.workflow_id)
            before = self.agent.session.history
            if landed is None:
                return
            if same_messages(landed[: len(before)], before):
                new_messages.extend(landed[len(before) :])
            else:  # the run had compacted the conversation
                self.transcript = landed
            return
        transcript, added, self.final_head = await runtime.run_transcript(output)
        if output.compacted:
            self.transcript = transcript
        new_messages.extend(added)

    async def _abandon(self, runtime: Runtime, new_messages: list[ModelMessage]) -> None:
        """End a run its caller left: a cancelled caller aborts it (``error_abort``), one that
        stopped reading interrupts it; either way its completed turns are kept."""
        if runtime.watch.down_since is not None or runtime.watch.gone is not None:
            return  # the server is unreachable or gone: nothing can reach the run
        with contextlib.suppress(Exception):
            await self._handle.signal("abort" if self._cancelled else "interrupt")
        output = await asyncio.wait_for(self._output(), 30)
        await self._collect(runtime, output, new_messages)


def workspace_grants_of(permissions: Mapping[str, Any] | None) -> list[str]:
    """The write roots of ``query(permissions={"workspace_grants": [...]})``."""
    if permissions is None:
        return []
    check_options("QueryPermissions", permissions, {"workspace_grants"})
    roots = []
    for grant in permissions.get("workspace_grants") or []:
        if not isinstance(grant, Mapping) or not isinstance(grant.get("root"), str):
            raise OptionError(
                'QueryOptions: each workspace grant is {"root": path, "access": ["write"], '
                f'"reason": ...}}; got {grant!r}'
            )
        check_options("WorkspaceGrant", grant, {"root", "access", "reason"})
        if "write" in (grant.get("access") or ["write"]):
            roots.append(os.path.realpath(os.path.expanduser(grant["root"])))
    return roots


def _raise_hook_failure(result: ResultMessage) -> ResultMessage:
    """A failed hook (or a tracer bound with fail_on_error) is host code failing: it
    propagates out of query()/prompt() instead of becoming a result."""
    if result.error is not None and result.error.type == FailureType.HOOK_ERROR:
        raise HookError(result.error.message)
    if result.error is not None and result.error.type == FailureType.TRACER_ERROR:
        raise TracerError(result.error.message)
    return result
