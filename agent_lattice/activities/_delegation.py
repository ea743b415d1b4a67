"""Delegation activities: an agent tool's child query prepared and its answer taken back,
and the mailbox record of an ``ask`` to a team member."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._approvals import ApprovalAsk
from .._errors import HistoryStoreError
from .._loop import text_of
from .._messages import AgentMessageEvent, ModelMessage, ToolUseBlock
from ..history._stores import QueryMirror
from ..history._transcripts import hydrate, run_transcript
from ..teams._delegation import Delegation
from ..teams._host_member import DurableMessage, host_messages
from ..teams._mailbox import (
    FINAL_STATUSES,
    MessageStatus,
    MirroringMailbox,
    TeamMailbox,
    TeamMessage,
    mailbox_id,
)
from ..teams._team import team_of
from ..tools._tool import ToolResult
from ..workflows._contract import ActivityName, FailureType
from ..workflows._delegation_types import (
    AgentChild,
    CallEnded,
    ChildQuery,
    DelegateCallInput,
    DelegatePrepared,
    HandedOff,
    Handoff,
    TeamChild,
    TeamRunInput,
)
from ..workflows._refs import agent_ref, request_options, workflow_id_for
from ..workflows._types import (
    AgentRunInput,
    AgentRunOutput,
    Landing,
    LandInput,
    ToolCallOutput,
    TraceParent,
)
from ..workspace._tools import Boundary
from ._base import ActivitiesBase
from ._tools import awaiting_approval, invalid_input, permission_verdict, tool_context

if TYPE_CHECKING:
    from .._agent import Agent


class DelegationActivities(ActivitiesBase):
    """The activities around an agent tool's child workflow."""

    @activity.defn(name=ActivityName.DELEGATE_PREPARE)
    async def delegate_prepare(self, input: DelegateCallInput) -> DelegatePrepared:
        """Before an agent tool's child workflow: permission, input validation and mapping,
        the child's session and transcript (a local activity: its outcome is recorded once)."""
        parent = self._agent(input.agent_key, input.session_id)
        use = input.tool_use
        delegation = delegation_of(parent, use.name)
        tracer = self._tracer(parent, input.session_id, input.run_id, input.trace_seq)
        ctx = tool_context(parent, input)
        denial = invalid_input(use)
        if denial is None and not input.approved:  # a call a person allowed is not asked about
            said = await permission_verdict(
                parent, use.name, use.input, ctx, self._threads.executor
            )
            if isinstance(said, ApprovalAsk):  # nothing ran: the run waits for a person
                return DelegatePrepared(CallEnded(result=awaiting_approval(use, said)))
            denial = said
        await tracer.emit("tool_use", id=use.id, name=use.name, input=use.input)

        async def refuse(result: ToolResult) -> DelegatePrepared:
            return DelegatePrepared(
                CallEnded(result=await self._settle(parent, use, result, tracer))
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
            observed = await delegation.observed(parsed)  # the host's observation support
            prompt = observed or delegation.prompt_of(parsed, refused)
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
                # an ask to a member: its mailbox tools tell the lead's team runtime
                team_runtime_id=input.team_workflow_id if delegation.team else None,
            )
            if isinstance(started, ToolResult):
                return await refuse(started)
            if delegation.team is not None and delegation.member is not None:
                asked = TeamMessage(
                    id=member_message_id(f"{info.workflow_id}/{use.id}"),
                    from_mailbox=mailbox_id(delegation.team, "lead"),
                    to_mailbox=mailbox_id(delegation.team, delegation.member),
                    body=prompt if isinstance(prompt, str) else json.dumps(prompt),
                    status="processing",
                    metadata={"mode": "ask", "tool_use_id": use.id, "workspace_grants": grants},
                )
                await _record_ask(parent, lambda mailbox: mirror(mailbox, asked))
            return DelegatePrepared(started)
        assert delegation.team is not None and delegation.member is not None
        seed = f"{info.workflow_id}/{use.id}"
        message_id = member_message_id(seed)
        work_item_id = f"wi_{uuid.uuid5(_DELEGATION_NS, seed + '/w').hex[:20]}"
        ids = {"message_id": message_id, "work_item_id": work_item_id, "thread_id": message_id}
        receipt = {
            "status": "accepted",
            "phase": "queued",
            "completion_pending": True,
            "member": delegation.member,
            **ids,
        }
        settled = await self._settle(parent, use, ToolResult(content=json.dumps(receipt)), tracer)
        return DelegatePrepared(
            HandedOff(
                result=settled,
                handoff=Handoff(
                    team=delegation.team,
                    member=delegation.member,
                    tool_use_id=use.id,
                    tool_name=use.name,
                    lead_key=input.agent_key,
                    lead_session_id=input.session_id,
                    lead_workflow_id=info.workflow_id or "",  # always set: a workflow calls this
                    lead_run_id=input.run_id or "",
                    from_mailbox=mailbox_id(delegation.team, "lead"),
                    to_mailbox=mailbox_id(delegation.team, delegation.member),
                    task=prompt if isinstance(prompt, str) else json.dumps(prompt),
                    context=input.context,
                    workspace_grants=grants,
                    message_id=message_id,
                    work_item_id=work_item_id,
                    thread_id=message_id,
                ),
            )
        )

    async def _absorb(self, delegation: Delegation, output: AgentRunOutput | None) -> None:
        """A live session target is free again, and takes the delegated query's messages;
        its history store gets what did not land while the query ran."""
        if delegation.kind != "session":
            return
        session = delegation.target.session
        session.release()
        store = session.store
        try:
            if output is None:
                if store is not None and session.loaded:
                    # the run may have landed messages it then lost with itself: the store
                    # goes back to the conversation
                    lost = QueryMirror.of_run(store, [], synced=False, failed=False)
                    await session.absorb([], mirror=lost)
                return
            transcript, added, head = await run_transcript(self._transcripts, output)
            landing, mirror = output.landing, None
            if landing is not None and store is not None:
                mirror = QueryMirror.of_run(
                    store,
                    added[: landing.landed],
                    synced=landing.synced,
                    failed=landing.error is not None,
                )
            await session.absorb(
                added,
                compacted_to=transcript if output.compacted else None,
                head=head,
                mirror=mirror,
                conversation=transcript,  # this worker may not be the one that prepared it
            )
        except HistoryStoreError as err:  # the child's answer still reaches its caller
            activity.logger.warning("%s: %s", delegation.target_name, err)

    @activity.defn(name=ActivityName.LAND_MESSAGE)
    async def land_message(self, input: LandInput) -> bool:
        """One message of a delegated run into its agent's history store, once (a local
        activity of the run's workflow); whether the store holds the conversation."""
        session = self._agent(input.agent_key, input.session_id).session
        if session.store is None:  # this worker's definition of the agent keeps none
            return True
        transcripts = self._transcripts

        async def conversation() -> list[ModelMessage]:
            messages = [*await transcripts.messages(input.head), *input.unsent]
            return await hydrate(messages, transcripts)

        message = input.message
        (message,) = (
            await hydrate([message], transcripts) if message else (await conversation())[-1:]
        )
        try:
            return await session.landings().land(
                activity.info().workflow_id or "",
                input.index,
                message,
                conversation,
                synced=input.synced,
            )
        except HistoryStoreError as err:
            raise ApplicationError(
                str(err), type=FailureType.HISTORY_STORE_ERROR, non_retryable=True
            ) from err

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
        team_runtime_id: str | None = None,
    ) -> ChildQuery | ToolResult:
        """The child query of a delegated call, on the target's session as it is now: its
        input, workflow id and task queue (a TeamWorkflow's input when it is a team)."""
        child = delegation.child_agent(session_id=uuid.uuid5(_DELEGATION_NS, seed).hex)
        session = child.session
        if session.busy:
            return ToolResult(
                content=f"agent {child.name!r} is busy with another query (one Agent is one "
                "conversation); try again when it is done",
                is_error=True,
            )
        session.reserve()  # taken until its result is absorbed (its parent's run controls it)
        await session.load()  # from its history store, the first time
        # a live session's store gets the run's messages as they land (a spawned spec's
        # sessions would all write to the one store its definition names)
        landing = (
            Landing(synced=session.synced)
            if delegation.kind == "session" and session.store is not None
            else None
        )
        store = self._transcripts
        message = ModelMessage.model_validate({"role": "user", "content": prompt})
        head = await store.append(await session.transcript_head(store), [message])
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
            last_input_tokens=session.last_input_tokens(),
            workspace_grants=grants,
            landing=landing,
        )
        bound = self._registry.tracer_of(parent_session)
        if bound is not None:  # the caller's query tracer follows the delegated run
            self._registry.bind_tracer(child.session_id, *bound)
            child_input.traced, child_input.trace_parent = True, trace_parent
        workflow_id = workflow_id_for(child, session.next_query())
        if landing is not None and landing.synced:  # the store holds what it starts on
            session.landings().expect(workflow_id)
        inner = delegation.inner_team
        if inner is None:
            child_input.team_runtime_id = team_runtime_id
            return AgentChild(child=child_input, workflow_id=workflow_id, task_queue=child_queue)
        # a team member: its own TeamWorkflow runs it
        return TeamChild(
            team=TeamRunInput(
                team=inner.name,
                lead=child_input,
                lead_workflow_id=workflow_id,
                lead_task_queue=child_queue,
                max_concurrent_work_items=inner.max_concurrent_work_items,
            ),
            workflow_id=f"team-{inner.name}-{workflow_id.removeprefix(child.name + '-')}",
            task_queue=child_queue,
        )

    @activity.defn(name=ActivityName.DELEGATE_FINISH)
    async def delegate_finish(self, input: DelegateCallInput) -> ToolCallOutput:
        """After an agent tool's child workflow: the child's answer as the tool result; a live
        session target takes the new messages into its history."""
        parent = self._agent(input.agent_key, input.session_id)
        use = input.tool_use
        delegation = delegation_of(parent, use.name)
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
            message_id = member_message_id(f"{activity.info().workflow_id}/{use.id}")
            status: MessageStatus = "failed" if result.is_error else "done"
            answer = text_of(result.content)
            await _record_ask(
                parent, lambda mailbox: _settle_message(mailbox, message_id, status, answer)
            )
        return await self._settle(parent, use, result, tracer)


_DELEGATION_NS = uuid.UUID("2f1d3c4e-8b7a-4c55-9e0f-1a2b3c4d5e6f")


def member_message_id(seed: str) -> str:
    """The mailbox message of one member tool call (``seed``: workflow id / tool use id)."""
    return f"msg_{uuid.uuid5(_DELEGATION_NS, seed + '/m').hex[:20]}"


async def mirror(mailbox: TeamMailbox, message: TeamMessage) -> None:
    """The runtime's view of a message into the team's mailbox: sent once (a retried
    activity finds it there), then its status moved on unless it is already final."""
    if isinstance(mailbox, MirroringMailbox):  # one step (the workflow mailbox's: a signal)
        await mailbox.mirror(message)
        return
    stored = await mailbox.get(message.id)
    if stored is None:
        await mailbox.send(message)
    elif stored.status != message.status and stored.status not in FINAL_STATUSES:
        await mailbox.set_status(message.id, message.status, result=message.result)


async def _settle_message(
    mailbox: TeamMailbox, message_id: str, status: MessageStatus, result: str | None
) -> None:
    """End an open message known only by id (a missing or finished one is left alone)."""
    if isinstance(mailbox, MirroringMailbox):  # one step, as for mirror
        await mailbox.settle(message_id, status, result)
        return
    stored = await mailbox.get(message_id)
    if stored is not None and stored.status not in FINAL_STATUSES:
        await mailbox.set_status(message_id, status, result=result)


def to_team_stream(
    lead_workflow_id: str, team: str, member: str, session_id: str
) -> Callable[[DurableMessage], Awaitable[None]]:
    """Where a host AgentLike member's durable messages go: each a signal to the lead's query,
    which publishes it as an ``agent_message`` event of the team's stream (one history event
    per message; token events are not passed on)."""
    handle = activity.client().get_workflow_handle(lead_workflow_id)

    async def forward(message: DurableMessage) -> None:
        event = AgentMessageEvent(
            team=team, member=member, workflow_id="", message=message, session_id=session_id
        )
        try:
            await handle.signal("agent_message", event)
        except Exception as err:  # the stream is a view: the member's work goes on
            activity.logger.info("%s's message not streamed: %s", member, err)

    return forward


async def recorded_ask(
    lead: Agent,
    delegation: Delegation,
    use: ToolUseBlock,
    call: Callable[[], Awaitable[ToolResult]],
) -> ToolResult:
    """An ``ask`` to a host AgentLike team member (it runs inside its tool call), kept in the
    team's mailbox like an ask to any member: ``processing``, then ``done``/``failed`` with
    its answer."""
    assert delegation.team is not None and delegation.member is not None
    task = use.input.get("task") if isinstance(use.input, dict) else None
    asked = TeamMessage(
        id=member_message_id(f"{activity.info().workflow_id}/{use.id}"),
        from_mailbox=mailbox_id(delegation.team, "lead"),
        to_mailbox=mailbox_id(delegation.team, delegation.member),
        body=task if isinstance(task, str) else json.dumps(use.input),
        status="processing",
        metadata={"mode": "ask", "tool_use_id": use.id},
    )
    await _record_ask(lead, lambda mailbox: mirror(mailbox, asked))
    status: MessageStatus = "failed"
    answer = "the call ended without an answer"
    info = activity.info()
    forward = to_team_stream(
        info.workflow_id or "", delegation.team, delegation.member, lead.session_id
    )
    token = host_messages.set(forward)  # its messages join the lead's stream as it answers
    try:
        result = await call()
        status, answer = ("failed" if result.is_error else "done"), text_of(result.content)
        return result
    finally:
        host_messages.reset(token)
        await _record_ask(lead, lambda mailbox: _settle_message(mailbox, asked.id, status, answer))


async def _record_ask(lead: Agent, write: Callable[[TeamMailbox], Awaitable[None]]) -> None:
    """An ``ask`` to a team member kept as a mailbox message (``processing``, then
    ``done``/``failed`` with its answer). Best effort: the answer reaches the lead even when
    the mailbox cannot be written."""
    team = team_of(lead)
    if team is None:
        return
    try:
        await write(team.mailbox)
    except Exception as err:
        activity.logger.warning("team mailbox not updated for an ask: %s", err)


def delegation_of(agent: Agent, tool_name: str) -> Delegation:
    definition = agent.tool(tool_name)
    if definition is None or definition.delegation is None:
        raise ApplicationError(
            f"{tool_name!r} is not an agent tool of {agent.name!r} on this worker",
            type=FailureType.AGENT_NOT_REGISTERED,
            non_retryable=True,
        )
    return definition.delegation
