"""AgentWorkflow: one ``agent.query()``, end to end.

Each model request and each tool call is an activity; the loop's decisions are taken here,
deterministically. Durable messages are published on a workflow stream (topic ``messages``)
that clients read from any offset; live token events travel on the side channel.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from .._loop import text_of
    from .._messages import (
        AgentMessageEvent,
        AssistantMessage,
        ContentBlock,
        ErrorInfo,
        ModelMessage,
        ResultMessage,
        ResultSubtype,
        SystemMessage,
        TeamAgentEvent,
        TeamMessageEvent,
        Usage,
        UserMessage,
    )
    from .._pricing import total_cost
    from .._steps import (
        BatchDone,
        BatchFailed,
        Compact,
        Compacted,
        ContinueAsNew,
        Event,
        Finish,
        LoopState,
        ModelFailed,
        ModelReplied,
        RequestModel,
        RunBatch,
        Started,
        TakeSteers,
        next_step,
    )
    from . import _contract as contract
    from ._agent_span import agent_span, end_agent_span
    from ._approvals import Approvals
    from ._budget import Budget, budget_of
    from ._compacting import Compacting
    from ._delegating import Delegating
    from ._failures import error_info, gave_up
    from ._landing import StoreLanding
    from ._mail_types import MailNotice
    from ._metrics import record_query_outcome
    from ._notices import MESSAGES_TOPIC, CommitSource
    from ._outcomes import Outcomes, wait_condition
    from ._progress import Progress
    from ._run_trace import RunTrace
    from ._steering import Steering
    from ._tool_batch import ToolBatch
    from ._types import (
        AgentRunInput,
        AgentRunOutput,
        Continuation,
        ModelCallInput,
        ModelCallOutput,
        ToolCallOutput,
    )
from ._delegation_types import Report

# durable messages a run hands to its continuation (readers further behind re-read the record)
STREAM_KEPT_ON_CONTINUE = 200


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow(
    ToolBatch,
    Delegating,
    Budget,
    Approvals,
    StoreLanding,
    Progress,
    CommitSource,
    Outcomes,
    Compacting,
    Steering,
):
    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        self._input = input  # signals may come before run() starts
        carried = input.continuation
        self._stream = WorkflowStream(prior_state=carried.stream if carried else None)
        self._out = self._stream.topic(MESSAGES_TOPIC)
        self._interrupted = False
        self._aborted = input.aborted  # as if "abort" came with the start (a child has none)
        self._model_call: asyncio.Task[ModelCallOutput] | None = None
        self._model_call_cancelled = False  # an interrupt or abort cancelled the request
        self._tool_calls: set[asyncio.Task[ToolCallOutput]] = set()
        agent = input.agent
        self._state = LoopState(
            max_turns=agent.max_turns,
            turns_per_run=input.settings.turns_per_run,
            compaction_threshold=agent.compaction.threshold_tokens if agent.compaction else None,
            requires_output=agent.requires_output,
            turns=carried.turns if carried else 0,
            last_input_tokens=carried.last_input_tokens if carried else input.last_input_tokens,
            recovered=carried.recovered if carried else False,
            max_budget_usd=budget_of(input),
        )
        self._reply: ModelCallOutput | None = None  # a model reply the loop has not taken yet
        self._published = carried.published if carried else 0
        # what the current workflow task published (the last one's is the run's output tail)
        self._task_length: int = 0
        self._task_items: list[object] = []
        self._tracing = RunTrace(input, carried.trace_seq if carried else 0)
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunOutput]] = {}
        self._cancelled_children: set[str] = set()
        self._pending_signals: list[asyncio.Task[None]] = []
        self._usage_by_agent: dict[str, Usage] = dict(carried.usage_by_agent) if carried else {}
        self._cost_usd = carried.cost_usd if carried else 0.0
        self._cost_unknown = carried.cost_unknown if carried else False
        self._cost_by_agent = dict(carried.cost_by_agent) if carried else {}
        self._ledger = dict(carried.ledger) if carried else {}
        self._said = {}
        self._reported_usd = None
        self._handoffs: set[str] = set()  # tool_use ids whose team report is awaited
        self._reports: dict[str, Report] = {}
        self._mail_waiting = False  # mail arrived in this (lead's) team mailbox
        self._init_approvals()
        self._init_progress()
        self._init_outcomes()
        landing = carried.landing if carried else input.landing
        self._landing = landing.model_copy() if landing else None

    @workflow.signal
    def interrupt(self) -> None:
        """End the query with ``interrupted``: aborts an in-flight model request; during a
        tool batch it takes effect once the batch completes."""
        first = not self._interrupted
        self._interrupted = True
        self._cancel_model_call()
        self._signal_children("interrupt")
        if first:
            self._signal_team("interrupt")

    @workflow.signal
    def abort(self) -> None:
        """End the query with ``error_abort`` (its caller cancelled, or its deadline passed):
        the in-flight model request and running tool calls are cancelled."""
        first = not self._aborted
        self._aborted = True
        self._cancel_model_call()
        for task in self._tool_calls:
            if not task.done():
                task.cancel()
        self._signal_children("abort")  # a child ends with error_abort, then its call returns
        if first:
            self._signal_team("abort")  # the team's work stops too (a deadline starts here)

    @workflow.signal
    def report(self, report: Report) -> None:
        """A team member's report on a handoff of this (lead) query."""
        self._reports[report.tool_use_id] = report

    @workflow.signal
    def team_message(self, event: TeamMessageEvent) -> None:
        self._publish(event)

    @workflow.signal
    def team_agent(self, event: TeamAgentEvent) -> None:
        self._publish(event)

    @workflow.signal
    def agent_message(self, event: AgentMessageEvent) -> None:
        """A host AgentLike member's own message (its work runs in an activity)."""
        self._publish(event)

    @workflow.signal
    def mail(self, notice: MailNotice) -> None:
        """Mail arrived in this lead's team mailbox: it joins the next tool results."""
        self._mail_waiting = True

    def _cancel_model_call(self) -> None:
        if self._model_call is not None and not self._model_call.done():
            self._model_call_cancelled = True
            self._model_call.cancel()

    def _on_cancel(self) -> None:
        """A Temporal cancel request is the interrupt; the runs this one started get cancel
        requests of their own (``_signal_children``)."""
        self.interrupt()

    async def _deadline(self, seconds: float) -> None:
        await workflow.sleep(seconds)
        self.abort()

    @workflow.query
    def turns(self) -> int:
        return self._turns

    @property
    def _turns(self) -> int:
        return self._state.turns

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunOutput:
        with agent_span(input) as self._agent_span:  # invoke_agent, where traced (no command)
            if input.temporal_outcomes:  # Temporal shows the outcome (see _outcomes)
                return await self._to_outcome(self._run(input))
            return await self._run(input)

    async def _run(self, input: AgentRunInput) -> AgentRunOutput:
        agent, info = input.agent, workflow.info()
        self._input = input
        if input.continuation is not None:
            return await self._resume(input.continuation)
        self._started_at = info.start_time
        prompt = ModelMessage(role="user", content=input.prompt)
        # The transcript: a head in the transcript store, then messages not stored yet. Runs
        # started before transcripts existed carry the history by value instead.
        self._head = input.head
        self._unsent: list[ModelMessage] = [] if input.head else [*input.history, prompt]
        self._new_count = 1
        self._compacted = False
        self._usage = Usage()
        self._stop_reason: str | None = None
        self._publish(
            SystemMessage(
                subtype="init",
                session_id=input.session_id,
                model=agent.model,
                tools=agent.tools,
                agent=agent.name,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
            )
        )
        if self._tracing.enabled:
            start: dict[str, object] = {
                "agent": agent.name,
                "model": agent.model,
                "workflow_id": info.workflow_id,
            }
            if input.trace_parent is not None:  # a delegated run: where it sits in the trace
                start["parent"] = input.trace_parent.model_dump()
            if input.team_workflow_id is not None:  # a team's lead: the team is its trace root
                start["team_workflow_id"] = input.team_workflow_id
            try:
                said: dict[str, object] = (
                    {"content_head": input.head}
                    if input.prompt_in_head
                    else {"content": prompt.to_wire()["content"]}
                )
                await self._tracing.emit([("run_start", start), ("user_message", said)])
            except (ActivityError, ApplicationError) as err:  # a fail_on_error tracer failed
                return await self._finish("error_during_execution", error=error_info(err))
        if input.deadline_s is not None:
            self._deadline_timer = asyncio.ensure_future(self._deadline(input.deadline_s))
        # the prompt lands first: a store bound to fail that fails leaves no model request
        await self._land(None if input.prompt_in_head else prompt, head=input.head)
        return await self._loop()

    async def _resume(self, carried: Continuation) -> AgentRunOutput:
        """Pick a long query up where the previous run (before continue-as-new) left it."""
        input = self._input
        self._started_at = carried.started_at
        self._head, self._unsent = carried.head, list(carried.unsent)
        self._new_count = carried.new_count
        self._compacted = carried.compacted
        self._usage, self._stop_reason = carried.usage, carried.stop_reason
        self._carry_approvals()
        if input.deadline_s is not None:
            left = input.deadline_s - (workflow.now() - carried.started_at).total_seconds()
            self._deadline_timer = asyncio.ensure_future(self._deadline(max(left, 0.001)))
        return await self._loop()

    async def _continue_as_new(self) -> NoReturn:
        """Hand the query to a fresh run before its history grows long: the conversation is
        by reference already; the stream keeps its recent messages and offsets, so readers
        (who follow the chain) see no seam."""
        if self._published > STREAM_KEPT_ON_CONTINUE:
            self._stream.truncate(self._published - STREAM_KEPT_ON_CONTINUE)
        carried = Continuation(
            head=self._head,
            unsent=self._unsent,
            turns=self._turns,
            new_count=self._new_count,
            usage=self._usage,
            usage_by_agent=self._usage_by_agent,
            stop_reason=self._stop_reason,
            last_input_tokens=self._state.last_input_tokens,
            compacted=self._compacted,
            recovered=self._state.recovered,
            published=self._published,
            trace_seq=self._tracing.seq,
            started_at=self._started_at,
            runs=(self._input.continuation.runs if self._input.continuation else 1) + 1,
            landing=self._landing,
            cost_usd=self._cost_usd,
            cost_unknown=self._cost_unknown,
            cost_by_agent=self._cost_by_agent,
            ledger=self._ledger,
            approvals=self._resolved,
        )
        await self._stream.continue_as_new(
            lambda state: [
                self._input.model_copy(
                    update={"continuation": carried.model_copy(update={"stream": state})}
                )
            ]
        )

    async def _loop(self) -> AgentRunOutput:
        """Execute the loop's steps (``next_step`` decides them) until the query finishes."""
        event: Event = Started()
        while True:
            step = next_step(self._observed(), event)
            if isinstance(step, RequestModel | Compact) and await self._ask_banks():
                step = next_step(self._observed(), event)  # with what its banks said
            self._state, self._step = step.state, step  # (a steer's validator reads the step)
            if isinstance(step, Finish):
                return await self._finish_step(step)
            if isinstance(step, ContinueAsNew):
                await self._continue_as_new()
            elif isinstance(step, Compact):
                event = await self._compact_step()
            elif isinstance(step, TakeSteers):
                event = await self._steer_step()
            elif isinstance(step, RequestModel):
                event = await self._request_step()
            else:
                event = await self._batch_step(step)

    def _observed(self) -> LoopState:
        """The loop state with what came from outside: signals, a long history, and what the
        query and the queries it works for spent."""
        outer = self._outer
        return replace(
            self._state,
            interrupted=self._interrupted,
            aborted=self._aborted,
            continue_as_new_suggested=workflow.info().is_continue_as_new_suggested(),
            steered=bool(self._steers),
            spent_usd=self._spent_usd(),
            outer_budget_usd=outer.max_budget_usd if outer else None,
            outer_spent_usd=outer.spent_usd if outer else 0.0,
        )

    async def _request_step(self) -> ModelReplied | ModelFailed:
        self._show(f"turn {self._turns} · model request")
        try:
            output = await self._request_model()
        except (ActivityError, CancelledError, asyncio.CancelledError) as err:
            return ModelFailed(
                gave_up(err, self._input.settings.model_give_up_s) or error_info(err)
            )
        self._add_cost(output.cost_usd)  # paid for, even if the reply is dropped later
        if output.cut_off:  # cancelled mid-stream: what it streamed is paid for, and counted
            if output.message.usage is not None:
                self._usage = self._usage + output.message.usage
            return ModelFailed(error_info(CancelledError("the model request was cancelled")))
        if self._model_call_cancelled and self._input.temporal_outcomes:
            # it answered before its worker heard of the cancel: dropped, as it would be
            return ModelFailed(error_info(CancelledError("the model request was cancelled")))
        self._reply = output
        return ModelReplied(output.message, output.batch_rejection)

    def _take_reply(self) -> ModelCallOutput | None:
        """The reply the loop kept (the step after a model request takes it): it joins the
        conversation and the stream."""
        output, self._reply = self._reply, None
        if output is None:
            return None
        reply = output.message
        self._head, self._unsent = output.head, []
        self._new_count += 1
        self._publish(
            AssistantMessage(message=reply, session_id=self._input.session_id, turn=self._turns)
        )
        if reply.usage is not None:
            self._usage = self._usage + reply.usage
        self._stop_reason = reply.stop_reason
        return output

    async def _compact_step(self) -> Compacted:
        if self._reply is not None:  # the reply overflowed: compact the transcript as sent
            self._head, self._unsent = self._reply.request_head, []
        self._show(f"turn {self._turns} · compacting the conversation")
        ok = await self._compact()
        if ok:
            self._reply = None  # the overflowed turn is taken again
        return Compacted(ok)

    async def _batch_step(self, step: RunBatch) -> BatchDone | BatchFailed:
        output = self._take_reply()
        assert output is not None
        reply, input = output.message, self._input
        names = dict.fromkeys(u.name for u in reply.tool_uses)  # each once, in order
        self._show(f"turn {self._turns} · running {', '.join(names)}", index=True)
        stored = await self._land(reply, head=output.head)
        self._made_here: set[str] = set()
        try:
            if not stored:  # the run stops at the failed write: none of the calls runs
                outcomes = self._made(self._not_stored(reply))
            elif step.refused:
                outcomes = self._made([ToolCallOutput(block=b) for b in step.refused])
            else:
                if any(u.name in input.agent.delegates for u in reply.tool_uses):
                    await self._report_spending(if_changed=True)  # delegates start from it
                outcomes = await self._run_tools(reply, set(output.concurrency_safe))
            outcomes = await self._hook_made_here(reply, outcomes)
        except (ActivityError, ApplicationError) as err:
            # A hook (or a strict tracer) failed: host code, so the query stops. The turn's
            # tool calls have no results, so the turn leaves the stored conversation: the
            # next query must not send a tool_use without its tool_result.
            self._head = output.request_head
            self._new_count -= 1
            self._landed_turn_dropped()
            return BatchFailed(error_info(err))
        blocks: list[ContentBlock] = [o.block for o in outcomes]
        handed = [u.id for u in reply.tool_uses if u.id in self._handoffs]
        if handed:  # the lead waits for every handoff of the batch to report
            self._show(f"turn {self._turns} · waiting for {len(handed)} team report(s)")
            blocks.append(await self._collect_reports(handed))
        if self._mail_waiting and not self._aborted:
            mail = await self._lead_mail()
            if mail is not None:
                blocks.append(mail)
        steered = self._steers_into(blocks)
        results = ModelMessage(role="user", content=blocks)
        self._add(results, UserMessage(message=results, session_id=input.session_id))
        await self._land(results, head=self._head, unsent=self._unsent)
        ending = next((o for o in outcomes if o.end_turn), None)
        if ending is None:
            return BatchDone(steered=steered)
        return BatchDone(
            end_turn=True,
            result=text_of(ending.block.content),
            structured_result=ending.structured_result,
            steered=steered,
        )

    async def _finish_step(self, step: Finish) -> AgentRunOutput:
        output = self._take_reply()  # a final answer joins the conversation before the result
        if output is not None:
            await self._land(output.message, head=output.head)
        return await self._finish(
            step.subtype,
            result=step.result,
            structured_result=step.structured_result,
            error=step.error,
        )

    async def _request_model(self) -> ModelCallOutput:
        input, s = self._input, self._input.settings
        self._model_call_cancelled = False
        self._model_call = asyncio.ensure_future(
            contract.request_model(
                ModelCallInput(
                    agent_key=input.agent.key,
                    session_id=input.session_id,
                    turn=self._turns,
                    head=self._head,
                    unsent=self._unsent,
                    stream=input.stream,
                    stream_to=input.stream_to,
                    stream_channel=input.stream_channel,
                    after=self._published,
                    request=input.request,
                    run_id=workflow.info().run_id,
                    trace_seq=self._tracing.reserve(2),
                    unreachable_give_up_s=s.model_unreachable_give_up_s,
                    retry_initial_s=s.retry_initial_s,
                ),
                contract.model_preset(
                    s, input.request.timeout_ms, wait_cancelled=input.temporal_outcomes
                ),
                summary=f"{input.agent.name} · {input.agent.model} · turn {self._turns}",
            )
        )
        try:
            return await self._model_call
        finally:
            self._model_call = None

    def _add(self, message: ModelMessage, event: AssistantMessage | UserMessage) -> None:
        self._unsent.append(message)
        self._new_count += 1
        self._publish(event)

    def _publish(self, message: object) -> None:
        length: int = workflow.info().get_current_history_length()
        if length != self._task_length:  # a new workflow task
            self._task_length, self._task_items = length, []
        self._task_items.append(message)
        self._out.publish(message)
        self._published += 1

    async def _finish(
        self,
        subtype: ResultSubtype,
        *,
        result: str | None = None,
        structured_result: object = None,
        error: ErrorInfo | None = None,
    ) -> AgentRunOutput:
        info = workflow.info()
        await self._report_spending(if_changed=True)  # the banks hear of its last request
        if self._landing is not None and self._landing.error is not None:
            subtype, error = "error_during_execution", self._landing.error  # its store failed
        if self._tracing.enabled:
            try:
                await self._tracing.emit(
                    [
                        (
                            "result",
                            {
                                "subtype": subtype,
                                "result": result if error is None else error.message,
                                "num_turns": self._turns,
                                "stop_reason": self._stop_reason,
                                "usage": self._usage.model_dump(),
                                "total_cost_usd": total_cost(self._cost_shares()),
                            },
                        )
                    ]
                )
            except (ActivityError, ApplicationError) as err:
                subtype, error = "error_during_execution", error_info(err)
        costs = self._cost_shares()
        turns = f"{self._turns} turn{'' if self._turns == 1 else 's'}"
        self._show(f"{subtype} after {turns}", index=True, outcome=subtype)
        message = ResultMessage(
            subtype=subtype,
            result=result if error is None else error.message,
            structured_result=structured_result,
            usage=self._usage,
            stop_reason=self._stop_reason,
            is_error=subtype.startswith("error"),
            num_turns=self._turns,
            session_id=self._input.session_id,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            duration_ms=int((workflow.now() - self._started_at).total_seconds() * 1000),
            error=error,
            usage_by_agent=self._usage_shares(),
            total_cost_usd=total_cost(costs),
            cost_by_agent=costs,
        )
        self._publish(message)
        end_agent_span(self._agent_span, message)
        agent = self._input.agent
        took = workflow.now() - self._started_at
        record_query_outcome(workflow.metric_meter(), agent.name, agent.model, subtype, took)
        # Let subscribers collect the last messages before the run closes.
        self._stream.detach_pollers()
        await wait_condition(workflow.all_handlers_finished, shielded=self._input.temporal_outcomes)
        return AgentRunOutput(
            result=message,
            head=self._head,
            unsent=self._unsent,
            new_count=self._new_count,
            compacted=self._compacted,
            landing=self._landing,
            tail_from=self._published - len(self._task_items),
            tail=self._task_items,
        )
