# pyright: strict
"""AgentWorkflow's tool batch: a model reply's tool calls, run as activities (concurrency-safe
ones together) or, for an agent tool, as a child workflow with its host code in local
activities around it; results the workflow made itself pass the ``on_tool_result`` hook and
the tracer."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from .._loop import unknown_tool_result
    from .._messages import ModelMessage, ToolResultBlock, ToolUseBlock
    from . import _contract as contract
    from ._approvals import Approvals
    from ._contract import HOST_FAILURES
    from ._delegating import Delegates
    from ._failures import cut_off, did_not_finish, error_info
    from ._run_trace import RunTrace
    from ._stop import Stop
    from ._types import AgentRunInput, ToolCallInput, ToolCallOutput, ToolResultsHookInput
from ._delegation_types import CallEnded, ChildQuery, DelegateCallInput, HandedOff


class ToolBatch:
    """Owned by an AgentWorkflow: runs the tool calls of its model's replies."""

    def __init__(
        self,
        input: AgentRunInput,
        stop: Stop,
        tracing: RunTrace,
        approvals: Approvals,
        delegates: Delegates,
    ) -> None:
        self._input = input
        self._stop = stop
        self._tracing = tracing
        self._approvals = approvals
        self._delegates = delegates
        self._running: set[asyncio.Task[ToolCallOutput]] = set()  # tool activities under way
        self._made_here: set[str] = set()  # the running batch's results the workflow made

    async def run(self, reply: ModelMessage, safe: set[str]) -> list[ToolCallOutput]:
        """Run the batch of ``reply`` (``safe``: the ids of its concurrency-safe calls) to one
        outcome per call, in tool_use order, each passed through the on_tool_result hook and
        the tracer where the workflow made it."""
        self._made_here = set()
        return await self._hook_made_here(reply, await self._run_tools(reply, safe))

    async def answer_instead(
        self, reply: ModelMessage, outcomes: list[ToolCallOutput]
    ) -> list[ToolCallOutput]:
        """The answers the workflow gives instead of running the batch (a refused batch, a
        reply the history store could not take), through the hook and the tracer too."""
        self._made_here = set()
        return await self._hook_made_here(reply, self._made(outcomes))

    def cancel_running(self) -> None:
        """An abort: the tool activities under way are cancelled (each answers cancelled)."""
        for task in self._running:
            if not task.done():
                task.cancel()

    async def _run_tools(self, reply: ModelMessage, safe: set[str]) -> list[ToolCallOutput]:
        """Run a batch: consecutive concurrency-safe calls together, the others alone;
        results keep the tool_use order, and one failure does not discard the others."""
        known = self._input.agent.tools
        outcomes: dict[str, ToolCallOutput] = {}
        limit = asyncio.Semaphore(self._input.agent.max_concurrency)

        async def bounded(use: ToolUseBlock) -> None:
            async with limit:
                outcomes[use.id] = await self._call_tool(use)

        group: list[ToolUseBlock] = []
        for use in reply.tool_uses:
            if use.name not in known:
                outcomes[use.id] = self._made(
                    [ToolCallOutput(block=unknown_tool_result(use, known))]
                )[0]
            elif use.id in safe:
                group.append(use)
            else:
                await asyncio.gather(*(bounded(u) for u in group))
                group = []
                outcomes[use.id] = await self._call_tool(use)
        await asyncio.gather(*(bounded(u) for u in group))
        return [outcomes[use.id] for use in reply.tool_uses]

    async def _call_tool(self, use: ToolUseBlock) -> ToolCallOutput:
        if self._stop.aborted:  # queued calls do not start after an abort
            return self._made([ToolCallOutput(block=_aborted_result(use))])[0]
        agent = self._input.agent
        if use.name in agent.delegates or (
            use.name in agent.member_adapters and use.input.get("mode") == "handoff"
        ):
            return await self._call_child(use)
        task = asyncio.ensure_future(self._call_tool_activity(use))
        self._running.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if not self._stop.aborted:
                raise
            return self._made([ToolCallOutput(block=_aborted_result(use))])[0]
        finally:
            self._running.discard(task)

    def _call_input(self, use: ToolUseBlock) -> ToolCallInput:
        input = self._input
        return ToolCallInput(
            agent_key=input.agent.key,
            session_id=input.session_id,
            tool_use=use,
            run_id=workflow.info().run_id,
            context=input.context,
            trace_seq=self._tracing.reserve(2),
            workspace_grants=input.workspace_grants,
            team_runtime_id=input.team_runtime_id or input.team_workflow_id,
        )

    async def _call_tool_activity(self, use: ToolUseBlock) -> ToolCallOutput:
        input, s = self._input, self._input.settings
        call = self._call_input(use)
        name = call.tool_use.name
        timeout = input.agent.tool_timeouts.get(name, s.tool_timeout_s)
        # A call cut off (past its timeout, or its worker lost) may have had its side effect.
        # Its second attempt first looks for the result the call recorded (the worker died
        # before Temporal heard of it); else only a tool marked idempotent runs again, and
        # the others answer that they did not finish. (Retry policies are not part of
        # Temporal's determinism check.)
        idempotent = name in input.agent.idempotent_tools
        preset = contract.tool_preset(s, timeout, cheap=name in input.agent.cheap_tools)
        try:
            output = await contract.call_tool(
                call, preset, summary=f"{input.agent.name} · tool {name}"
            )
            if output.approval is None:
                return output
            approved = await self._approvals.decided(call, output.approval)
            if isinstance(approved, ToolResultBlock):
                return self._made([ToolCallOutput(block=approved)])[0]
            return await contract.call_tool(
                approved, preset, summary=f"{input.agent.name} · tool {name} · approved"
            )
        except (ActivityError, ApplicationError) as err:
            if error_info(err).type in HOST_FAILURES:
                raise
            if self._stop.aborted:
                return self._made([ToolCallOutput(block=_aborted_result(call.tool_use))])[0]
            why = cut_off(err, timeout)
            if why is None:
                return self._could_not_run(call.tool_use, err)
            # here the second attempt could not run at all (or never got to answer)
            message = did_not_finish(name, why, tried_twice=idempotent)
            block = ToolResultBlock(tool_use_id=use.id, content=message, is_error=True)
            return self._made([ToolCallOutput(block=block)])[0]

    async def _call_child(self, use: ToolUseBlock) -> ToolCallOutput:
        """An agent tool call: the child agent's query runs as a child workflow of this one,
        or, handed off to a team member, in the team's runtime. Host code (permission, input
        mapping, output validation, hooks) runs in local activities before and after it."""
        input = self._input
        call = DelegateCallInput(
            **self._call_input(use).model_dump(), team_workflow_id=input.team_workflow_id
        )
        host = contract.host_preset(input.settings)
        try:
            call, prepared = await self._prepare(call, host)
            if isinstance(prepared, HandedOff) and input.team_workflow_id is not None:
                await self._delegates.hand_off(use.id, prepared)  # the receipt answers now
            if isinstance(prepared, CallEnded | HandedOff):
                return prepared.result
            output, error = await self._delegates.run_child(use.id, prepared)
            return await contract.delegate_finish(
                call.model_copy(update={"output": output, "error": error}),
                host,
                summary=f"{input.agent.name} · delegate {use.name} · result",
            )
        except (ActivityError, ApplicationError) as err:
            if error_info(err).type in HOST_FAILURES:
                raise
            return self._could_not_run(use, err)

    async def _prepare(
        self, call: DelegateCallInput, host: contract.Preset
    ) -> tuple[DelegateCallInput, CallEnded | HandedOff | ChildQuery]:
        """The host code before the child: a call the permission callback asks a person
        about waits for the decision first (then runs as allowed, or ends denied)."""
        summary = f"{self._input.agent.name} · delegate {call.tool_use.name}"
        prepared = (await contract.delegate_prepare(call, host, summary=summary)).root
        ask = prepared.result.approval if isinstance(prepared, CallEnded) else None
        if ask is None:
            return call, prepared
        decided = await self._approvals.decided(call, ask)
        if isinstance(decided, ToolResultBlock):
            return call, CallEnded(result=self._made([ToolCallOutput(block=decided)])[0])
        call = decided
        prepared = (
            await contract.delegate_prepare(call, host, summary=f"{summary} · approved")
        ).root
        return call, prepared

    def _could_not_run(self, use: ToolUseBlock, err: BaseException) -> ToolCallOutput:
        message = f"Tool {use.name!r} could not run: {error_info(err).message}"
        block = ToolResultBlock(tool_use_id=use.id, content=message, is_error=True)
        return self._made([ToolCallOutput(block=block)])[0]

    def _made(self, outcomes: list[ToolCallOutput]) -> list[ToolCallOutput]:
        """Mark results the workflow made itself: they still pass the on_tool_result hook."""
        self._made_here.update(o.block.tool_use_id for o in outcomes)
        return outcomes

    async def _hook_made_here(
        self, reply: ModelMessage, outcomes: list[ToolCallOutput]
    ) -> list[ToolCallOutput]:
        outcomes = await self._hook_results(reply, outcomes)
        if self._tracing.enabled and self._made_here:
            events: list[tuple[str, dict[str, object]]] = []
            for use, outcome in zip(reply.tool_uses, outcomes, strict=True):
                if use.id in self._made_here:
                    events.append(
                        ("tool_use", {"id": use.id, "name": use.name, "input": use.input})
                    )
                    events.append(
                        ("tool_result", outcome.block.model_dump(mode="json", exclude={"type"}))
                    )
            await self._tracing.emit(events)
        return outcomes

    async def _hook_results(
        self, reply: ModelMessage, outcomes: list[ToolCallOutput]
    ) -> list[ToolCallOutput]:
        input = self._input
        if not input.agent.result_hook or not self._made_here:
            return outcomes
        picked = [
            (u, o)
            for u, o in zip(reply.tool_uses, outcomes, strict=True)
            if u.id in self._made_here
        ]
        shaped = await contract.hook_results(
            ToolResultsHookInput(
                agent_key=input.agent.key,
                session_id=input.session_id,
                calls=[u for u, _ in picked],
                results=[o.block for _, o in picked],
            ),
            contract.hooks_preset(input.settings),
            summary=f"{input.agent.name} · on_tool_result",
        )
        by_id = {b.tool_use_id: b for b in shaped}
        return [
            o.model_copy(update={"block": by_id[o.block.tool_use_id]})
            if o.block.tool_use_id in by_id
            else o
            for o in outcomes
        ]


def _aborted_result(use: ToolUseBlock) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=use.id,
        content=f"Tool {use.name!r} was cancelled: the query was aborted.",
        is_error=True,
    )
