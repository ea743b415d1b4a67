# pyright: strict
"""AgentWorkflow: one ``agent.query()``, end to end.

Each model request and each tool call is an activity; the loop's decisions (``next_step``)
are taken here, deterministically, over the parts the run owns: its conversation, its stream
of durable messages (topic ``messages``, read from any offset; live token events travel on
the side channel), its books (usage, cost, budget), its tool batch and delegates, its
approval desk, its steers, its progress and its writes to the history store. The class
declares everything Temporal sees of it: the signals, updates and queries, each handed to
the part that owns it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import NoReturn

from temporalio import workflow
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
        UserMessage,
    )
    from .._pricing import total_cost
    from .._steer import Steer
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
        SteersTaken,
        Step,
        TakeSteers,
        next_step,
    )
    from . import _contract as contract
    from ._agent_span import agent_span, end_agent_span
    from ._approval_types import ApprovalDecision, ForwardedApproval, PendingApproval
    from ._approvals import Approvals
    from ._books import Books, budget_of
    from ._budget_types import Spending, Statement
    from ._compacting import compact
    from ._contract import SPEND_UPDATE
    from ._conversation import Conversation
    from ._delegating import Delegates
    from ._failures import error_info, gave_up
    from ._landing import StoreLanding
    from ._mail_types import MailNotice
    from ._metrics import record_query_outcome
    from ._outcomes import CHILD_OUTPUT_SIGNAL, ChildOutput, Outcomes, wait_condition
    from ._progress import Progress
    from ._run_stream import MESSAGES_TOPIC, RunStream
    from ._run_trace import RunTrace
    from ._steering import STEER_UPDATE, Steers
    from ._stop import Stop
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

__all__ = ["MESSAGES_TOPIC", "AgentWorkflow"]


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        self._input = input  # signals may come before run() starts
        carried = input.continuation
        # "abort" as if it came with the start (a child has none)
        self._stop = Stop(aborted=input.aborted)
        self._stream = RunStream(input)
        self.commit_source = self._stream  # what the worker's commit notices read
        self._books = Books(input)
        self._progress = Progress(input, self._books)
        self._outcomes = Outcomes(on_cancel=self.interrupt)  # a cancel request interrupts
        self._approvals = Approvals(input, self._stop, self._stream.publish, self._progress)
        self._delegates = Delegates(input, self._stop, self._outcomes, self._books)
        self._tracing = RunTrace(input, carried.trace_seq if carried else 0)
        self._tools = ToolBatch(input, self._stop, self._tracing, self._approvals, self._delegates)
        self._steers = Steers(self._stop)
        landing = carried.landing if carried else input.landing
        self._landing = StoreLanding(landing, input, on_failure=self.interrupt)
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
        self._step: Step | None = None  # the step the loop executes (a steer's validator reads)
        self._reply: ModelCallOutput | None = None  # a model reply the loop has not taken yet
        self._model_call: asyncio.Task[ModelCallOutput] | None = None
        self._model_call_cancelled = False  # an interrupt or abort cancelled the request

    # -- signals ---------------------------------------------------------------------------

    @workflow.signal
    def interrupt(self) -> None:
        """End the query with ``interrupted``: aborts an in-flight model request; during a
        tool batch it takes effect once the batch completes."""
        first = not self._stop.interrupted
        self._stop.interrupted = True
        self._cancel_model_call()
        self._delegates.signal_children("interrupt")
        if first:
            self._delegates.signal_team("interrupt")

    @workflow.signal
    def abort(self) -> None:
        """End the query with ``error_abort`` (its caller cancelled, or its deadline passed):
        the in-flight model request and running tool calls are cancelled."""
        first = not self._stop.aborted
        self._stop.aborted = True
        self._cancel_model_call()
        self._tools.cancel_running()
        self._delegates.signal_children("abort")  # a child ends error_abort, its call returns
        if first:
            self._delegates.signal_team("abort")  # the team's work stops too (a deadline)

    @workflow.signal
    def report(self, report: Report) -> None:
        """A team member's report on a handoff of this (lead) query."""
        self._delegates.report(report)

    @workflow.signal
    def mail(self, notice: MailNotice) -> None:
        """Mail arrived in this lead's team mailbox: it joins the next tool results."""
        self._delegates.mail_waiting = True

    @workflow.signal
    def team_message(self, event: TeamMessageEvent) -> None:
        self._stream.publish(event)

    @workflow.signal
    def team_agent(self, event: TeamAgentEvent) -> None:
        self._stream.publish(event)

    @workflow.signal
    def agent_message(self, event: AgentMessageEvent) -> None:
        """A host AgentLike member's own message (its work runs in an activity)."""
        self._stream.publish(event)

    @workflow.signal(name="approval_request")
    def approval_forwarded(self, forwarded: ForwardedApproval) -> None:
        """An approval request of a run beneath this one (a delegated child, a team member):
        on this run's stream, and passed up."""
        self._approvals.forwarded(forwarded)

    @workflow.signal(name=CHILD_OUTPUT_SIGNAL)
    def child_output(self, ended: ChildOutput) -> None:
        """A run this one started is ending Canceled: its output."""
        self._outcomes.child_output(ended)

    # -- updates and queries ---------------------------------------------------------------

    @workflow.update(name=STEER_UPDATE)
    def steer(self, steer: Steer) -> None:
        """A message for the model, taken at its next request; shown on the run's stream
        at once (``system``, subtype ``steered``)."""
        self._steers.accept(steer.text)
        self._stream.publish(
            SystemMessage(
                subtype="steered",
                session_id=self._input.session_id,
                agent=self._input.agent.name,
                workflow_id=workflow.info().workflow_id,
                message=steer.text,
            )
        )

    @steer.validator
    def _check_steer(self, steer: Steer) -> None:
        self._steers.check(steer.text, self._step)

    @workflow.update(name="resolve_approval")
    async def resolve_approval(self, decision: ApprovalDecision) -> PendingApproval:
        """Decide on a waiting request: the tool runs (``allow``) or the model is told
        (``deny``)."""
        return await self._approvals.resolve(decision)

    @resolve_approval.validator
    def _check_decision(self, decision: ApprovalDecision) -> None:
        self._approvals.check(decision)

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[PendingApproval]:
        return self._approvals.pending()

    @workflow.update(name=SPEND_UPDATE)
    def spend(self, spending: Spending) -> Statement:
        """A run under this query reports what it spent; the answer is the whole query's."""
        return self._books.spend(spending)

    @spend.validator
    def _check_spending(self, spending: Spending) -> None:
        Books.check_spending(spending)

    @workflow.query
    def turns(self) -> int:
        return self._turns

    @property
    def _turns(self) -> int:
        return self._state.turns

    def _cancel_model_call(self) -> None:
        if self._model_call is not None and not self._model_call.done():
            self._model_call_cancelled = True
            self._model_call.cancel()

    async def _deadline(self, seconds: float) -> None:
        await workflow.sleep(seconds)
        self.abort()

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunOutput:
        with agent_span(input) as self._agent_span:  # invoke_agent, where traced (no command)
            if input.temporal_outcomes:  # Temporal shows the outcome (see _outcomes)
                return await self._outcomes.run(self._run(input))
            return await self._run(input)

    async def _run(self, input: AgentRunInput) -> AgentRunOutput:
        agent, info = input.agent, workflow.info()
        self._input = input
        if input.continuation is not None:
            return await self._resume(input.continuation)
        self._started_at = info.start_time
        prompt = ModelMessage(role="user", content=input.prompt)
        # Runs started before transcripts existed carry the history by value instead.
        self._conversation = Conversation(
            head=input.head, unsent=[] if input.head else [*input.history, prompt]
        )
        self._stop_reason: str | None = None
        self._stream.publish(
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
        try:
            await self._tracing.run_start(prompt)
        except (ActivityError, ApplicationError) as err:  # a fail_on_error tracer failed
            return await self._finish("error_during_execution", error=error_info(err))
        if input.deadline_s is not None:
            self._deadline_timer = asyncio.ensure_future(self._deadline(input.deadline_s))
        # the prompt lands first: a store bound to fail that fails leaves no model request
        await self._landing.land(None if input.prompt_in_head else prompt, head=input.head)
        return await self._loop()

    async def _resume(self, carried: Continuation) -> AgentRunOutput:
        """Pick a long query up where the previous run (before continue-as-new) left it."""
        input = self._input
        self._started_at = carried.started_at
        self._conversation = Conversation(
            carried.head, list(carried.unsent), carried.new_count, carried.compacted
        )
        self._stop_reason = carried.stop_reason
        self._approvals.carry()
        if input.deadline_s is not None:
            left = input.deadline_s - (workflow.now() - carried.started_at).total_seconds()
            self._deadline_timer = asyncio.ensure_future(self._deadline(max(left, 0.001)))
        return await self._loop()

    async def _continue_as_new(self) -> NoReturn:
        """Hand the query to a fresh run before its history grows long: the conversation is
        by reference already, and the stream goes on where it was."""
        c, books = self._conversation, self._books
        await self._stream.continue_as_new(
            Continuation(
                head=c.head,
                unsent=c.unsent,
                turns=self._turns,
                new_count=c.new_count,
                usage=books.usage,
                usage_by_agent=books.usage_by_agent,
                stop_reason=self._stop_reason,
                last_input_tokens=self._state.last_input_tokens,
                compacted=c.compacted,
                recovered=self._state.recovered,
                published=self._stream.published,
                trace_seq=self._tracing.seq,
                started_at=self._started_at,
                runs=(self._input.continuation.runs if self._input.continuation else 1) + 1,
                landing=self._landing.landing,
                cost_usd=books.cost_usd,
                cost_unknown=books.cost_unknown,
                cost_by_agent=books.cost_by_agent,
                ledger=books.ledger,
                approvals=self._approvals.resolved,
            )
        )

    async def _loop(self) -> AgentRunOutput:
        """Execute the loop's steps (``next_step`` decides them) until the query finishes."""
        event: Event = Started()
        while True:
            step = next_step(self._observed(), event)
            if isinstance(step, RequestModel | Compact) and await self._books.ask_banks():
                step = next_step(self._observed(), event)  # with what its banks said
            self._state, self._step = step.state, step
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
        outer = self._books.outer
        return replace(
            self._state,
            interrupted=self._stop.interrupted,
            aborted=self._stop.aborted,
            continue_as_new_suggested=workflow.info().is_continue_as_new_suggested(),
            steered=bool(self._steers.waiting),
            spent_usd=self._books.spent_usd(),
            outer_budget_usd=outer.max_budget_usd if outer else None,
            outer_spent_usd=outer.spent_usd if outer else 0.0,
        )

    async def _request_step(self) -> ModelReplied | ModelFailed:
        self._progress.show(f"turn {self._turns} · model request")
        try:
            output = await self._request_model()
        except (ActivityError, CancelledError, asyncio.CancelledError) as err:
            return ModelFailed(
                gave_up(err, self._input.settings.model_give_up_s) or error_info(err)
            )
        self._books.add_cost(output.cost_usd)  # paid for, even if the reply is dropped later
        if output.cut_off:  # cancelled mid-stream: what it streamed is paid for, and counted
            self._books.add_usage(output.message.usage)
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
        self._conversation.replied(output.head)
        self._stream.publish(
            AssistantMessage(message=reply, session_id=self._input.session_id, turn=self._turns)
        )
        self._books.add_usage(reply.usage)
        self._stop_reason = reply.stop_reason
        return output

    async def _compact_step(self) -> Compacted:
        conversation = self._conversation
        if self._reply is not None:  # the reply overflowed: compact the transcript as sent
            conversation.restart_at(self._reply.request_head)
        self._progress.show(f"turn {self._turns} · compacting the conversation")
        out = await compact(self._input, conversation.head, conversation.unsent)
        if out is None:
            return Compacted(False)
        conversation.restart_at(out.head, compacted=True)
        if out.usage is not None:
            self._books.add_usage(out.usage)
            self._books.add_cost(out.cost_usd)
        info = workflow.info()
        self._stream.publish(
            SystemMessage(
                subtype="compaction",
                session_id=self._input.session_id,
                compacted_messages=out.compacted_messages,
                usage=out.usage,
                workflow_id=info.workflow_id,
                run_id=info.run_id,
            )
        )
        self._reply = None  # the overflowed turn is taken again
        return Compacted(True)

    async def _batch_step(self, step: RunBatch) -> BatchDone | BatchFailed:
        output = self._take_reply()
        assert output is not None
        reply, input = output.message, self._input
        names = dict.fromkeys(u.name for u in reply.tool_uses)  # each once, in order
        self._progress.show(f"turn {self._turns} · running {', '.join(names)}", index=True)
        stored = await self._landing.land(reply, head=output.head)
        try:
            if not stored:  # the run stops at the failed write: none of the calls runs
                outcomes = await self._tools.answer_instead(reply, self._landing.not_stored(reply))
            elif step.refused:
                refused = [ToolCallOutput(block=b) for b in step.refused]
                outcomes = await self._tools.answer_instead(reply, refused)
            else:
                if any(u.name in input.agent.delegates for u in reply.tool_uses):
                    await self._books.report_spending(if_changed=True)  # delegates start from it
                outcomes = await self._tools.run(reply, set(output.concurrency_safe))
        except (ActivityError, ApplicationError) as err:
            # A hook (or a strict tracer) failed: host code, so the query stops. The turn's
            # tool calls have no results, so the turn leaves the stored conversation: the
            # next query must not send a tool_use without its tool_result.
            self._conversation.dropped_reply(output.request_head)
            self._landing.turn_dropped()
            return BatchFailed(error_info(err))
        blocks: list[ContentBlock] = [o.block for o in outcomes]
        handed = self._delegates.handed(reply)
        if handed:  # the lead waits for every handoff of the batch to report
            self._progress.show(f"turn {self._turns} · waiting for {len(handed)} team report(s)")
            blocks.append(await self._delegates.collect_reports(handed))
        if self._delegates.mail_waiting and not self._stop.aborted:
            mail = await self._delegates.lead_mail()
            if mail is not None:
                blocks.append(mail)
        steered = self._steers.into(blocks)
        await self._add(ModelMessage(role="user", content=blocks))
        ending = next((o for o in outcomes if o.end_turn), None)
        if ending is None:
            return BatchDone(steered=steered)
        return BatchDone(
            end_turn=True,
            result=text_of(ending.block.content),
            structured_result=ending.structured_result,
            steered=steered,
        )

    async def _steer_step(self) -> SteersTaken:
        """The ``TakeSteers`` step: the reply the loop holds (a final answer the steers came
        during) joins the conversation, then the steers, as a user message of their own."""
        output = self._take_reply()
        if output is not None:
            await self._landing.land(output.message, head=output.head)
        await self._add(ModelMessage(role="user", content=self._steers.take()))
        return SteersTaken()

    async def _add(self, message: ModelMessage) -> None:
        """A user message of the workflow's own (tool results, steers) joins the conversation,
        the stream and the history store."""
        conversation = self._conversation
        conversation.add(message)
        self._stream.publish(UserMessage(message=message, session_id=self._input.session_id))
        await self._landing.land(message, head=conversation.head, unsent=conversation.unsent)

    async def _finish_step(self, step: Finish) -> AgentRunOutput:
        output = self._take_reply()  # a final answer joins the conversation before the result
        if output is not None:
            await self._landing.land(output.message, head=output.head)
        return await self._finish(
            step.subtype,
            result=step.result,
            structured_result=step.structured_result,
            error=step.error,
        )

    async def _request_model(self) -> ModelCallOutput:
        input, s, conversation = self._input, self._input.settings, self._conversation
        self._model_call_cancelled = False
        self._model_call = asyncio.ensure_future(
            contract.request_model(
                ModelCallInput(
                    agent_key=input.agent.key,
                    session_id=input.session_id,
                    turn=self._turns,
                    head=conversation.head,
                    unsent=conversation.unsent,
                    stream=input.stream,
                    stream_to=input.stream_to,
                    stream_channel=input.stream_channel,
                    after=self._stream.published,
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

    async def _finish(
        self,
        subtype: ResultSubtype,
        *,
        result: str | None = None,
        structured_result: object = None,
        error: ErrorInfo | None = None,
    ) -> AgentRunOutput:
        info, books = workflow.info(), self._books
        await books.report_spending(if_changed=True)  # the banks hear of its last request
        landing = self._landing.landing
        if landing is not None and landing.error is not None:
            subtype, error = "error_during_execution", landing.error  # its store failed
        try:
            await self._tracing.result(
                subtype,
                result if error is None else error.message,
                num_turns=self._turns,
                stop_reason=self._stop_reason,
                usage=books.usage,
                total_cost_usd=total_cost(books.cost_shares()),
            )
        except (ActivityError, ApplicationError) as err:
            subtype, error = "error_during_execution", error_info(err)
        costs = books.cost_shares()
        turns = f"{self._turns} turn{'' if self._turns == 1 else 's'}"
        self._progress.show(f"{subtype} after {turns}", index=True, outcome=subtype)
        message = ResultMessage(
            subtype=subtype,
            result=result if error is None else error.message,
            structured_result=structured_result,
            usage=books.usage,
            stop_reason=self._stop_reason,
            is_error=subtype.startswith("error"),
            num_turns=self._turns,
            session_id=self._input.session_id,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            duration_ms=int((workflow.now() - self._started_at).total_seconds() * 1000),
            error=error,
            usage_by_agent=books.usage_shares(),
            total_cost_usd=total_cost(costs),
            cost_by_agent=costs,
        )
        self._stream.publish(message)
        end_agent_span(self._agent_span, message)
        agent = self._input.agent
        took = workflow.now() - self._started_at
        record_query_outcome(workflow.metric_meter(), agent.name, agent.model, subtype, took)
        # Let subscribers collect the last messages before the run closes.
        self._stream.close()
        await wait_condition(workflow.all_handlers_finished, shielded=self._input.temporal_outcomes)
        conversation = self._conversation
        tail_from, tail = self._stream.tail()
        return AgentRunOutput(
            result=message,
            head=conversation.head,
            unsent=conversation.unsent,
            new_count=conversation.new_count,
            compacted=conversation.compacted,
            landing=landing,
            tail_from=tail_from,
            tail=tail,
        )
