"""Model-request and tool-call activities, bound to the worker's agent registry."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from .._batches import CONCURRENCY_HINT, BatchPolicyRequest, ToolCallInfo, evaluate_batch_policy
from .._compaction import compacted_history, cut_point, summary_request
from .._delegation import Delegation
from .._hooks import ModelRequestContext, ToolResultContext
from .._loop import alternating, text_of
from .._mailbox import FINAL_STATUSES, MessageStatus, TeamMailbox, TeamMessage, mailbox_id
from .._messages import ModelMessage, ResultMessage, ToolResultBlock, ToolUseBlock, Usage
from .._skills import skills_prompt
from .._streaming import StreamSender
from .._team import has_mailbox_tools
from .._tools import ToolResult
from .._tracing import ContextTracer, TraceEvent
from .._transcripts import (
    TranscriptMissing,
    TranscriptStore,
    hydrate,
    open_transcript_store,
    run_transcript,
)
from .._workspace import Boundary, workspace_prompt
from ..client._mailbox import WorkflowMailbox
from ..providers import ModelRequest, ProviderError
from ..workflows._refs import agent_ref, request_options, workflow_id_for
from ..workflows._types import (
    AgentRunInput,
    AgentRunOutput,
    CompactInput,
    CompactOutput,
    DelegateCallInput,
    DelegatePrepared,
    Handoff,
    MailboxMirrorInput,
    ModelCallInput,
    ModelCallOutput,
    Report,
    TeamReportInput,
    TeamRunInput,
    ToolCallInput,
    ToolCallOutput,
    ToolResultsHookInput,
    TraceInput,
    TraceParent,
)
from ._tools import (
    DEFAULT_TOOL_THREADS,
    CallRecord,
    ToolThreads,
    invalid_input,
    permission_denial,
    tool_context,
)

if TYPE_CHECKING:
    from .._agent import Agent
    from ..worker._registry import AgentRegistry


T = TypeVar("T")


class AgentActivities:
    """The activities of every agent a worker serves; holds the registry it resolves keys in."""

    def __init__(
        self,
        registry: AgentRegistry,
        transcripts: TranscriptStore | None = None,
        *,
        tool_threads: int = DEFAULT_TOOL_THREADS,
    ) -> None:
        self._registry = registry
        self._transcript_store = transcripts
        self._threads = ToolThreads(tool_threads)

    @property
    def _transcripts(self) -> TranscriptStore:
        if self._transcript_store is None:
            self._transcript_store = open_transcript_store()
        return self._transcript_store

    async def _transcript(
        self, head: str | None, unsent: list[ModelMessage]
    ) -> tuple[str | None, list[ModelMessage]]:
        """Store the unsent messages after ``head``; the new head and the whole transcript."""
        store = self._transcripts
        try:
            head = await store.append(head, unsent)
            return head, await hydrate(await store.messages(head), store)
        except TranscriptMissing as err:
            raise ApplicationError(str(err), type="TranscriptMissing", non_retryable=True) from None

    def _tracer(self, agent: Agent, session_id: str, run_id: str | None, seq: int) -> _Tracer:
        """The session's trace events go to its query's tracer (``query(tracer=)``, bound in
        this process) when it has one, else to the agent's own."""
        bound = self._registry.tracer_of(session_id)
        tracer = bound[0] if bound is not None else agent.config.tracer
        return _Tracer(tracer, agent.name, session_id, run_id, seq)

    def _agent(self, key: str, session_id: str) -> Agent:
        agent = self._registry.get(key, session_id)
        if agent is None:
            raise ApplicationError(
                f"agent {key!r} is not registered on this worker (task queue "
                f"{activity.info().task_queue!r}); known: {', '.join(self._registry.keys()) or 'none'}",
                type="AgentNotRegistered",
                non_retryable=True,
            )
        return agent

    @activity.defn(name="lattice.model_request")
    async def model_request(self, input: ModelCallInput) -> ModelCallOutput:
        agent = self._agent(input.agent_key, input.session_id)
        config = agent.config
        request_head, transcript = await self._transcript(input.head, input.unsent)
        shaped = ModelRequestContext(
            messages=transcript,
            system_prompt=_system_prompt(agent),
            turn=input.turn,
        )
        if config.hooks is not None:
            shaped = await _hook(config.hooks.model_request(shaped))
        tracer = self._tracer(agent, input.session_id, input.run_id, input.trace_seq)
        await tracer.emit(
            "model_request",
            turn=input.turn,
            model=config.model,
            system=shaped.system_prompt,
            messages=[m.to_wire() for m in shaped.messages],
        )
        request = ModelRequest(
            model=config.model,
            messages=alternating(shaped.messages),
            system=shaped.system_prompt,
            tools=[t.spec() for t in config.tools],
            max_tokens=config.max_tokens,
            stream=input.stream,
            thinking=_thinking(input.request.thinking, config.max_tokens),
            reasoning_effort=input.request.reasoning_effort,
            output_format=_output_format(input.request.output_format),
            timeout_ms=input.request.timeout_ms,
        )
        attempt = activity.info().attempt
        async with _heartbeating(), _quiet_when_abandoned():
            if input.stream and input.stream_to and input.stream_channel:
                async with StreamSender(
                    input.stream_to,
                    input.stream_channel,
                    turn=input.turn,
                    attempt=attempt,
                    after=input.after,
                ) as sender:
                    message = await _call_model(agent, request, sender.send, input)
            else:
                message = await _call_model(agent, request, None, input)
        await tracer.emit(
            "assistant_message",
            turn=input.turn,
            message=message.to_wire(),
            stop_reason=message.stop_reason,
            usage=message.usage.model_dump() if message.usage else None,
            provider_response_id=message.provider_response_id,
            model=message.model,
        )
        rejection = None
        if message.tool_uses and config.tool_batch_policy is not None:
            calls = [ToolCallInfo(id=u.id, name=u.name, input=u.input) for u in message.tool_uses]
            decision = await evaluate_batch_policy(
                config.tool_batch_policy, BatchPolicyRequest(calls)
            )
            rejection = dataclasses.asdict(decision) if decision is not None else None
        reply_head = await self._transcripts.append(request_head, [message])
        return ModelCallOutput(
            request_head=request_head,
            head=reply_head,
            message=message,
            concurrency_safe=_concurrency_safe(agent, message),
            batch_rejection=rejection,
        )

    @activity.defn(name="lattice.compact")
    async def compact(self, input: CompactInput) -> CompactOutput:
        """Summarize the older part of the transcript; the new transcript's head (a durable
        step: the workflow records the outcome, so a crash never compacts twice)."""
        agent = self._agent(input.agent_key, input.session_id)
        config = agent.config
        _, transcript = await self._transcript(input.head, input.unsent)
        cut = cut_point(transcript, input.keep_recent_messages)
        if cut is None:
            return CompactOutput()
        request = ModelRequest(
            model=config.model,
            messages=summary_request(transcript[:cut], input.prompt),
            system=config.system_prompt,
            # the summarized turns may hold tool calls: the provider wants their definitions
            tools=[t.spec() for t in config.tools],
            max_tokens=config.max_tokens,
            stream=False,
            timeout_ms=input.timeout_ms,
        )
        async with _heartbeating(), _quiet_when_abandoned():
            message = await _call_model(agent, request, None)
        if not message.text.strip():
            raise ApplicationError(
                "compaction produced no summary", type="CompactionFailed", non_retryable=True
            )
        compacted = compacted_history(transcript, cut, message.text)
        return CompactOutput(
            head=await self._transcripts.append(None, compacted),
            compacted_messages=cut,
            usage=message.usage,
        )

    @activity.defn(name="lattice.tool_call")
    async def tool_call(self, input: ToolCallInput) -> ToolCallOutput:
        agent = self._agent(input.agent_key, input.session_id)
        use = input.tool_use
        definition = agent.tool(use.name)
        if definition is None:
            return ToolCallOutput(
                block=ToolResultBlock(
                    tool_use_id=use.id, content=f"Unknown tool {use.name!r}.", is_error=True
                )
            )
        ctx = tool_context(agent, input)
        tracer = self._tracer(agent, input.session_id, input.run_id, input.trace_seq)
        await tracer.emit("tool_use", id=use.id, name=use.name, input=use.input)
        threads = self._threads.executor
        record = CallRecord(self._transcripts, ctx, idempotent=definition.idempotent)

        async def run() -> ToolResult:
            return (
                invalid_input(use)
                or await permission_denial(agent, use.name, use.input, ctx, threads)
                or await definition.invoke(use.input, ctx, executor=threads)
            )

        async with _heartbeating(), _quiet_when_abandoned():
            result = await record.answer() or await record.run(run)
            return await self._settle(agent, use, result, tracer)

    async def _settle(
        self, agent: Agent, use: ToolUseBlock, result: ToolResult, tracer: _Tracer
    ) -> ToolCallOutput:
        """A tool result on its way to the model: hooks, then the trace event; a large result
        enters workflow history as a reference."""
        block = await _hooked(
            agent,
            use,
            ToolResultBlock(tool_use_id=use.id, content=result.content, is_error=result.is_error),
        )
        await tracer.emit(
            "tool_result", **block.model_dump(mode="json", exclude={"type", "content_ref"})
        )
        if not result.end_turn:
            block = await self._transcripts.externalize(block)
        return ToolCallOutput(
            block=block,
            end_turn=result.end_turn,
            structured_result=result.structured_result if result.end_turn else None,
        )

    @activity.defn(name="lattice.delegate_prepare")
    async def delegate_prepare(self, input: DelegateCallInput) -> DelegatePrepared:
        """Before an agent tool's child workflow: permission, input validation and mapping,
        the child's session and transcript (a local activity: its outcome is recorded once)."""
        parent = self._agent(input.agent_key, input.session_id)
        use = input.tool_use
        delegation = _delegation_of(parent, use.name)
        tracer = self._tracer(parent, input.session_id, input.run_id, input.trace_seq)
        await tracer.emit("tool_use", id=use.id, name=use.name, input=use.input)

        async def refuse(result: ToolResult) -> DelegatePrepared:
            return DelegatePrepared(result=await self._settle(parent, use, result, tracer))

        ctx = tool_context(parent, input)
        denial = invalid_input(use) or await permission_denial(
            parent, use.name, use.input, ctx, self._threads.executor
        )
        if denial is not None:
            return await refuse(denial)
        definition = parent.tool(use.name)
        assert definition is not None
        try:
            parsed = definition.parse_input(use.input)
            writable = Boundary.of(
                parent.workspace or ".", [parent.workspace] if parent.workspace else []
            ).with_grants(input.workspace_grants)
            accepted, refused = delegation.grants_of(parsed, writable.covers)
            prompt = delegation.prompt_of(parsed, refused)
        except (ValueError, TypeError) as err:
            return await refuse(
                ToolResult(content=f"Invalid input for tool {use.name!r}: {err}", is_error=True)
            )
        if isinstance(prompt, ToolResult):
            return await refuse(prompt)
        handoff = delegation.team is not None and getattr(parsed, "mode", "ask") == "handoff"
        if handoff and input.team_workflow_id is None:
            return await refuse(
                ToolResult(
                    content='handoff_unsupported: mode "handoff" runs through the team runtime: '
                    'call team.query()/team.prompt(), or use mode "ask".',
                    is_error=True,
                )
            )
        info = activity.info()
        grants = [str(writable.resolve(r)) for r in accepted]
        if not handoff:
            started = await self._start_child(
                delegation,
                prompt,
                seed=f"{info.workflow_id}/{use.id}",
                queue=info.task_queue,
                context=input.context,
                grants=grants,
                parent_session=input.session_id,
                trace_parent=TraceParent(run_id=input.run_id or "", tool_use_id=use.id),
            )
            if isinstance(started, ToolResult):
                return await refuse(started)
            child_input, workflow_id, queue, team_child = started
            if delegation.team is not None and delegation.member is not None:
                asked = TeamMessage(
                    id=_message_id(f"{info.workflow_id}/{use.id}"),
                    from_mailbox=mailbox_id(delegation.team, "lead"),
                    to_mailbox=mailbox_id(delegation.team, delegation.member),
                    body=prompt if isinstance(prompt, str) else json.dumps(prompt),
                    status="processing",
                    metadata={"mode": "ask", "tool_use_id": use.id, "workspace_grants": grants},
                )
                await _record_ask(parent, lambda mailbox: _mirror(mailbox, asked))
            return DelegatePrepared(
                child=child_input, workflow_id=workflow_id, task_queue=queue, team_child=team_child
            )
        assert delegation.team is not None and delegation.member is not None
        seed = f"{info.workflow_id}/{use.id}"
        ids = {
            "message_id": _message_id(seed),
            "work_item_id": f"wi_{uuid.uuid5(_DELEGATION_NS, seed + '/w').hex[:20]}",
        }
        ids["thread_id"] = ids["message_id"]
        receipt = {
            "status": "accepted",
            "phase": "queued",
            "completion_pending": True,
            "member": delegation.member,
            **ids,
        }
        settled = await self._settle(parent, use, ToolResult(content=json.dumps(receipt)), tracer)
        return DelegatePrepared(
            result=settled,
            handoff=Handoff(
                team=delegation.team,
                member=delegation.member,
                tool_use_id=use.id,
                tool_name=use.name,
                lead_key=input.agent_key,
                lead_session_id=input.session_id,
                lead_workflow_id=info.workflow_id,
                lead_run_id=input.run_id or "",
                from_mailbox=mailbox_id(delegation.team, "lead"),
                to_mailbox=mailbox_id(delegation.team, delegation.member),
                task=prompt if isinstance(prompt, str) else json.dumps(prompt),
                context=input.context,
                workspace_grants=grants,
                **ids,
            ),
        )

    async def _absorb(self, delegation: Delegation, output: AgentRunOutput | None) -> None:
        """A live session target is free again, and takes the delegated query's messages."""
        if delegation.kind != "session":
            return
        child = delegation.target
        child._run = None
        if output is None:
            return
        transcript, added, head = await run_transcript(self._transcripts, output)
        await child._take(added, compacted_to=transcript if output.compacted else None, head=head)

    @activity.defn(name="lattice.team_report")
    async def team_report(self, input: TeamReportInput) -> Report:
        """A member's work item ended: its report for the lead (a local activity of the
        TeamWorkflow)."""
        handoff, output = input.handoff, input.output
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        delegation = _delegation_of(lead, handoff.tool_name)
        if handoff.child is not None:  # it started: the member's session is free again
            await self._absorb(delegation, output)
        finished = output.result if output is not None else input.adapter_result
        if finished is None:
            status = "cancelled" if input.cancelled else "failed"
            content = f"agent {handoff.member!r} could not run: {input.error}"
        else:
            result = delegation.result_of(finished)
            # the member's team_reply to this message, when it sent one, is its report
            replied = await _reply_to(lead, handoff) if _can_reply(delegation) else None
            content = replied or text_of(result.content)
            status = "failed" if result.is_error else "completed"
            if finished.subtype in ("interrupted", "error_abort"):
                status = "cancelled"
        return Report(
            tool_use_id=handoff.tool_use_id,
            member=handoff.member,
            message_id=handoff.message_id,
            status=status,
            content=content,
            # a host AgentLike's usage is its own business: only agent runs are rolled up
            usage=output.result.usage if output else Usage(),
            usage_by_agent=output.result.usage_by_agent if output else {},
        )

    @activity.defn(name="lattice.team_adapter")
    async def team_adapter(self, handoff: Handoff) -> ResultMessage:
        """A handoff to a host AgentLike member: its ``prompt()`` runs here, heartbeating (an
        activity of the TeamWorkflow; cancelling it cancels the call)."""
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        target = _delegation_of(lead, handoff.tool_name).target
        async with _heartbeating(), _quiet_when_abandoned():
            return await target.prompt(handoff.task)

    @activity.defn(name="lattice.team_mailbox")
    async def team_mailbox(self, input: MailboxMirrorInput) -> None:
        """Write the runtime's view of one message to the team's mailbox backend (claimed
        work shows as ``processing`` there, so a host's drain never takes it twice)."""
        lead = self._agent(input.lead_key, input.lead_session_id)
        if lead._team is not None:
            await _mirror(lead._team.mailbox, input.message)

    async def _start_child(
        self,
        delegation: Delegation,
        prompt: str | list[dict[str, Any]],
        *,
        seed: str,
        queue: str,
        context: Any,
        grants: list[str],
        parent_session: str,
        trace_parent: TraceParent,
    ) -> tuple[AgentRunInput, str, str, TeamRunInput | None] | ToolResult:
        """The child query of a delegated call, on the target's session as it is now: its
        input, workflow id, task queue (and its TeamWorkflow's input when it is a team)."""
        child = delegation.child_agent(session_id=uuid.uuid5(_DELEGATION_NS, seed).hex)
        if child._run is not None:
            return ToolResult(
                content=f"agent {child.name!r} is busy with another query (one Agent is one "
                "conversation); try again when it is done",
                is_error=True,
            )
        child._run = _DELEGATED  # the session is taken until its result is absorbed
        if not child._loaded and child.config.history_store is not None:
            child._history = await child.config.history_store.load()
        child._loaded = True
        store = self._transcripts
        message = ModelMessage(role="user", content=prompt)
        head = await store.append(await child._transcript_head(store), [message])
        child_queue = child.task_queue
        if "@" in queue and not child.config.task_queue:
            child_queue = f"{child_queue}@{queue.rpartition('@')[2]}"  # this process's workers
        child_input = AgentRunInput(
            agent=agent_ref(child),
            session_id=child.session_id,
            prompt=message.content,
            head=head,
            stream=False,
            request=request_options(child.config),
            context=context,
            last_input_tokens=child._last_input_tokens(),
            workspace_grants=grants,
        )
        bound = self._registry.tracer_of(parent_session)
        if bound is not None:  # the caller's query tracer follows the delegated run
            self._registry.bind_tracer(child.session_id, *bound)
            child_input.traced, child_input.trace_parent = True, trace_parent
        workflow_id = workflow_id_for(child, child._next_query())
        team_child = None
        if delegation.inner_team is not None:  # a team member: its own TeamWorkflow runs it
            inner = delegation.inner_team
            team_child = TeamRunInput(
                team=inner.name,
                lead=child_input,
                lead_workflow_id=workflow_id,
                lead_task_queue=child_queue,
                max_concurrent_work_items=inner.max_concurrent_work_items,
            )
            workflow_id = f"team-{inner.name}-{workflow_id.removeprefix(child.name + '-')}"
        return child_input, workflow_id, child_queue, team_child

    @activity.defn(name="lattice.team_start")
    async def team_start(self, handoff: Handoff) -> Handoff:
        """A queued handoff starts: the member's query on its session as it is now (a local
        activity of the TeamWorkflow; a member busy with an ``ask`` is waited for)."""
        lead = self._agent(handoff.lead_key, handoff.lead_session_id)
        delegation = _delegation_of(lead, handoff.tool_name)
        if delegation.kind == "adapter":  # a host AgentLike: lattice.team_adapter runs it
            return handoff.model_copy(update={"adapter": True})
        task = handoff.task
        if _can_reply(delegation):
            task += (
                f"\n\n[team {handoff.team} · message_id {handoff.message_id} from "
                f"{handoff.from_mailbox}] Your final answer is your report; you may instead "
                "send it with team_reply."
            )
        started = await self._start_child(
            delegation,
            task,
            seed=f"{handoff.lead_workflow_id}/{handoff.tool_use_id}",
            queue=activity.info().task_queue,
            context=handoff.context,
            grants=handoff.workspace_grants,
            parent_session=handoff.lead_session_id,
            trace_parent=TraceParent(run_id=handoff.lead_run_id, tool_use_id=handoff.tool_use_id),
        )
        if isinstance(started, ToolResult):
            raise ApplicationError(text_of(started.content), type="MemberBusy")
        child_input, workflow_id, queue, team_child = started
        return handoff.model_copy(
            update={
                "child": child_input,
                "workflow_id": workflow_id,
                "task_queue": queue,
                "team_child": team_child,
            }
        )

    @activity.defn(name="lattice.delegate_finish")
    async def delegate_finish(self, input: DelegateCallInput) -> ToolCallOutput:
        """After an agent tool's child workflow: the child's answer as the tool result; a live
        session target takes the new messages into its history."""
        parent = self._agent(input.agent_key, input.session_id)
        use = input.tool_use
        delegation = _delegation_of(parent, use.name)
        tracer = self._tracer(parent, input.session_id, input.run_id, input.trace_seq + 1)
        output = input.output
        await self._absorb(delegation, output)
        if output is None:
            result = ToolResult(
                content=f"agent {delegation.target_name!r} could not run: {input.error}",
                is_error=True,
            )
        else:
            result = delegation.result_of(output.result)
        if delegation.team is not None:  # an ask to a team member: its mailbox message ends
            message_id = _message_id(f"{activity.info().workflow_id}/{use.id}")
            status: MessageStatus = "failed" if result.is_error else "done"
            answer = text_of(result.content)
            await _record_ask(
                parent, lambda mailbox: _settle_message(mailbox, message_id, status, answer)
            )
        return await self._settle(parent, use, result, tracer)

    @activity.defn(name="lattice.tool_result_hooks")
    async def tool_result_hooks(self, input: ToolResultsHookInput) -> list[ToolResultBlock]:
        """``on_tool_result`` for results the workflow made itself (runs as a local activity)."""
        agent = self._agent(input.agent_key, input.session_id)
        return [
            await _hooked(agent, use, block)
            for use, block in zip(input.calls, input.results, strict=True)
        ]

    @activity.defn(name="lattice.trace")
    async def trace(self, input: TraceInput) -> None:
        """Trace events the workflow produced itself (runs as a local activity)."""
        agent = self._agent(input.agent_key, input.session_id)
        for item in input.events:
            tracer = self._tracer(agent, input.session_id, input.run_id, item["seq"])
            data = dict(item.get("data", {}))
            if "content_head" in data:  # a large prompt: read it from the transcript
                last = (await self._transcripts.messages(data.pop("content_head")))[-1]
                data["content"] = last.to_wire()["content"]
            await tracer.emit(item["type"], **data)


_DELEGATION_NS = uuid.UUID("2f1d3c4e-8b7a-4c55-9e0f-1a2b3c4d5e6f")


def _message_id(seed: str) -> str:
    """The mailbox message of one member tool call (``seed``: workflow id / tool use id)."""
    return f"msg_{uuid.uuid5(_DELEGATION_NS, seed + '/m').hex[:20]}"


async def _mirror(mailbox: TeamMailbox, message: TeamMessage) -> None:
    """The runtime's view of a message into the team's mailbox: sent once (a retried
    activity finds it there), then its status moved on unless it is already final."""
    if isinstance(mailbox, WorkflowMailbox):  # one signal does all that, no worker waited on
        await mailbox.mirror(message)
        return
    stored = await mailbox.get(message.id)
    if stored is None:
        await mailbox.send(message)
    elif stored.status != message.status and stored.status not in FINAL_STATUSES:
        await mailbox.set_status(message.id, message.status, result=message.result)


def _can_reply(delegation: Delegation) -> bool:
    """A handoff's member can answer with team_reply: its task names the message id."""
    return delegation.inner_team is None and has_mailbox_tools(delegation.target)


async def _reply_to(lead: Agent, handoff: Handoff) -> str | None:
    """The body of the member's ``team_reply`` to a handoff (the last, if several); it is
    delivered to the lead as the report, so it leaves the lead's mailbox as ``done``."""
    if lead._team is None:
        return None
    mailbox = lead._team.mailbox
    try:
        replies = [
            m
            for m in await mailbox.thread(handoff.thread_id)
            if m.kind == "reply" and m.reply_to == handoff.message_id
        ]
        if not replies:
            return None
        for reply in replies:
            if reply.status == "pending":
                await mailbox.set_status(reply.id, "done", result="delivered to the lead")
        return replies[-1].body
    except Exception as err:
        activity.logger.warning("team mailbox not read for %s: %s", handoff.message_id, err)
        return None


async def _settle_message(
    mailbox: TeamMailbox, message_id: str, status: MessageStatus, result: str | None
) -> None:
    """End an open message known only by id (a missing or finished one is left alone)."""
    if isinstance(mailbox, WorkflowMailbox):  # one signal, as for _mirror
        await mailbox.settle(message_id, status, result)
        return
    stored = await mailbox.get(message_id)
    if stored is not None and stored.status not in FINAL_STATUSES:
        await mailbox.set_status(message_id, status, result=result)


async def _record_ask(lead: Agent, write: Callable[[TeamMailbox], Awaitable[None]]) -> None:
    """An ``ask`` to a team member kept as a mailbox message (``processing``, then
    ``done``/``failed`` with its answer). Best effort: the answer reaches the lead even when
    the mailbox cannot be written."""
    if lead._team is None:
        return
    try:
        await write(lead._team.mailbox)
    except Exception as err:
        activity.logger.warning("team mailbox not updated for an ask: %s", err)


class _Delegated:
    """Marks a live session taken by a delegated query (its parent's run controls it)."""

    def interrupt(self) -> bool:
        return False


_DELEGATED = _Delegated()


async def _hooked(agent: Agent, use: ToolUseBlock, block: ToolResultBlock) -> ToolResultBlock:
    """``block`` after the agent's ``on_tool_result`` hook (unchanged without one)."""
    hooks = agent.config.hooks
    if hooks is None:
        return block
    error = text_of(block.content) if block.is_error else None
    context = ToolResultContext(
        tool_name=use.name, tool_use_id=use.id, input=use.input, result=block, error=error
    )
    return await _hook(hooks.tool_result(context))


def _delegation_of(agent: Agent, tool_name: str) -> Delegation:
    definition = agent.tool(tool_name)
    if definition is None or definition.delegation is None:
        raise ApplicationError(
            f"{tool_name!r} is not an agent tool of {agent.name!r} on this worker",
            type="AgentNotRegistered",
            non_retryable=True,
        )
    return definition.delegation


class _Tracer:
    """Emits an agent's trace events with consecutive ``seq`` from the workflow's base."""

    def __init__(
        self,
        tracer: ContextTracer | None,
        source: str,
        session_id: str,
        run_id: str | None,
        seq: int,
    ) -> None:
        self._tracer = tracer
        self._source = source
        self._session_id, self._run_id, self._seq = session_id, run_id or "", seq

    async def emit(self, kind: str, **data: object) -> None:
        if self._tracer is None:
            return
        event = TraceEvent(
            self._session_id, self._run_id, self._seq, self._source, kind, dict(data)
        )
        self._seq += 1
        try:
            await self._tracer.emit(event)
        except Exception as err:  # only a tracer bound with fail_on_error gets here
            raise ApplicationError(
                f"tracer failed: {type(err).__name__}: {err}",
                type="TracerError",
                non_retryable=True,
            ) from err


def _thinking(thinking: dict[str, object] | None, max_tokens: int) -> dict[str, object] | None:
    """A fixed budget is capped at ``max_tokens - 1`` (the API requires budget < max_tokens)."""
    if thinking and thinking.get("type") == "enabled":
        budget = int(thinking.get("budget_tokens", 1))  # type: ignore[call-overload]
        return {**thinking, "budget_tokens": min(budget, max_tokens - 1)}
    return thinking


def _output_format(fmt: object) -> dict[str, object] | None:
    """``"json"`` asks for any JSON object; a json_schema format is sent as given."""
    if fmt is None:
        return None
    if fmt == "json":
        return {"type": "json_schema", "schema": {"type": "object"}}
    return dict(fmt)  # type: ignore[call-overload]


async def _hook(call: Awaitable[T]) -> T:
    """Run a hook; its failure stops the query (non-retryable), it never becomes a result."""
    try:
        return await call
    except Exception as err:
        raise ApplicationError(
            f"hook failed: {type(err).__name__}: {err}", type="HookError", non_retryable=True
        ) from err


def _system_prompt(agent: Agent) -> str | None:
    """The agent's system prompt with its skills, told to batch independent calls when they
    can overlap. Built per request: none of it enters the stored conversation."""
    config = agent.config
    base = config.system_prompt
    if agent.workspace is not None:
        section = workspace_prompt(agent.workspace)
        base = f"{base}\n\n{section}" if base else section
    if config.skills:
        section = skills_prompt(config.skills)
        base = f"{base}\n\n{section}" if base else section
    mode = config.tool_concurrency.mode
    overlapping = mode == "all" or (
        mode == "safe" and any(t.is_concurrency_safe is not None for t in config.tools)
    )
    if not (overlapping and config.tools):
        return base
    return f"{base}\n\n{CONCURRENCY_HINT}" if base else CONCURRENCY_HINT


def _concurrency_safe(agent: Agent, message: ModelMessage) -> list[str]:
    """Ids of the tool calls that may run beside others: all of them in mode "all", none in
    "sequential", and in "safe" those whose tool says so for this input (host code,
    evaluated here so the workflow can plan the batch without another round trip)."""
    mode = agent.config.tool_concurrency.mode
    if mode != "safe":
        return [u.id for u in message.tool_uses] if mode == "all" else []
    safe = []
    for use in message.tool_uses:
        definition = agent.tool(use.name)
        if definition is None or definition.is_concurrency_safe is None:
            continue
        try:
            if definition.is_concurrency_safe(definition.parse_input(use.input)):
                safe.append(use.id)
        except Exception:  # invalid input or a failing predicate: run it alone
            continue
    return safe


async def _call_model(
    agent: Agent,
    request: ModelRequest,
    on_event: object,
    input: ModelCallInput | None = None,
) -> ModelMessage:
    warm_up = getattr(agent.model_client, "warm_up", None)
    if callable(warm_up):
        await asyncio.to_thread(warm_up)
    try:
        call = agent.model_client.create(request, on_event=on_event)  # type: ignore[arg-type]
        if request.timeout_ms is None:
            return await call
        # Raced here too, so a client that ignores timeout_ms cannot stall the loop.
        return await asyncio.wait_for(call, request.timeout_ms / 1000)
    except TimeoutError:
        raise ApplicationError(
            f"model request exceeded request_timeout_ms ({request.timeout_ms} ms)",
            type="RequestTimeout",
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,  # the configured outcome, not a fault
        ) from None
    except ProviderError as err:
        if err.error_type == "connection" and input and input.unreachable_give_up_s is not None:
            raise _unreachable(err, input.unreachable_give_up_s, input.retry_initial_s) from None
        if err.error_type == "timeout" and request.timeout_ms is not None:
            raise ApplicationError(
                f"model request exceeded request_timeout_ms ({request.timeout_ms} ms)",
                type="RequestTimeout",
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        raise ApplicationError(
            err.message,
            {"status_code": err.status_code, "error_type": err.error_type},
            type="ProviderError" if err.retryable else "ProviderRejected",
            non_retryable=not err.retryable,
            next_retry_delay=timedelta(seconds=err.retry_after)
            if err.retry_after is not None
            else None,
        ) from None


def _unreachable(err: ProviderError, give_up_s: float, initial_s: float) -> ApplicationError:
    """The provider cannot be reached at all (a wrong base_url, a server that is down): retried
    with short waits for ``give_up_s`` from the first attempt, then final, naming the URL
    (the message does) rather than waiting out every attempt of a 5xx."""
    info = activity.info()
    waited = (datetime.now(UTC) - info.scheduled_time).total_seconds()
    left = give_up_s - waited
    if left <= 0:
        return ApplicationError(
            f"{err.message} (gave up after {info.attempt} attempt"
            f"{'s' if info.attempt != 1 else ''} in {waited:.0f} s; "
            "see ActivitySettings.model_unreachable_give_up_s)",
            {"status_code": None, "error_type": "connection"},
            type="ProviderUnreachable",
            non_retryable=True,
        )
    return ApplicationError(
        err.message,
        {"status_code": None, "error_type": "connection"},
        type="ProviderError",
        # the retry policy's backoff, cut to end at the budget
        next_retry_delay=timedelta(seconds=min(initial_s * 2.0 ** (info.attempt - 1), left)),
    )


@contextlib.asynccontextmanager
async def _quiet_when_abandoned() -> AsyncIterator[None]:
    """End a model request or tool call cut off by anything but a cancellation request quietly.

    An interrupt closes its run without waiting for the aborted request, and a stopping
    worker cancels what it runs. Either way the request fails as *retryable* and *benign*:
    a closed run ignores it, a live one retries it on another worker, and nothing is logged
    as a warning. A real cancellation request stays a cancellation.
    """
    try:
        yield
    except asyncio.CancelledError:
        details = activity.cancellation_details()
        if details is None or not details.cancel_requested:
            raise ApplicationError(
                "cut off: its query ended or its worker stopped",
                type="Abandoned",
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        raise


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background (half the heartbeat timeout) so cancellation gets through."""
    info = activity.info()
    if info.is_local or not info.heartbeat_timeout:
        yield
        return
    interval = max(info.heartbeat_timeout.total_seconds() / 2, 0.05)

    async def beat() -> None:
        # Starting counts as alive; the first beat is due one interval later.
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
