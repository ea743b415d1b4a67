"""Tool activities: a tool call, ``on_tool_result`` hooks and trace events for results and
events the workflow made itself."""

from __future__ import annotations

from temporalio import activity

from .._approvals import ApprovalAsk
from .._messages import ToolResultBlock
from ..tools._tool import ToolResult
from ..workflows._approval_types import InputProblem, ToolInputCheck
from ..workflows._contract import ActivityName
from ..workflows._types import ToolCallInput, ToolCallOutput, ToolResultsHookInput, TraceInput
from ._base import ActivitiesBase, heartbeating, hooked, quiet_when_abandoned
from ._delegation import recorded_ask
from ._team import telling_of_mail
from ._telemetry import tool_span
from ._tools import (
    CallRecord,
    approval_ask,
    awaiting_approval,
    invalid_input,
    permission_verdict,
    tool_context,
)


class ToolActivities(ActivitiesBase):
    """The activities that run an agent's tools and report on them."""

    @activity.defn(name=ActivityName.TOOL_CALL)
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
        threads = self._threads.executor
        record = CallRecord(self._transcripts, ctx, idempotent=definition.idempotent)

        async def verdict() -> ToolResult | ApprovalAsk | None:
            """None: run it. A call a person allowed runs without asking again."""
            refused = invalid_input(use)
            if refused is not None or input.approved:
                return refused
            said = await permission_verdict(agent, use.name, use.input, ctx, threads)
            if said is None and definition.requires_approval:
                return approval_ask(agent, use.name)
            return said

        async def run() -> ToolResult:
            async def invoke() -> ToolResult:
                self._drill.tool_started(use.name)
                return await definition.invoke(use.input, ctx, executor=threads)

            delegation = definition.delegation
            if delegation is not None and delegation.kind == "adapter" and delegation.team:
                return await recorded_ask(agent, delegation, use, invoke)  # a host member
            return await invoke()

        async with heartbeating(), quiet_when_abandoned(), telling_of_mail(input.team_runtime_id):
            result = await record.answer()
            decided = None if result is not None else await record.guard(verdict)
            if isinstance(decided, ApprovalAsk):  # nothing ran: the run waits for a person
                return awaiting_approval(use, decided)
            await tracer.emit("tool_use", id=use.id, name=use.name, input=use.input)
            if result is None:  # not answered from its record: it runs (or is refused) now
                with tool_span(agent.name, use.name, use.id) as span:
                    if decided is None:
                        result = await record.run(run)
                        self._drill.tool_finished(use.name)
                    else:
                        result = decided
                    span.result(result)
            return await self._settle(agent, use, result, tracer)

    @activity.defn(name=ActivityName.CHECK_TOOL_INPUT)
    async def check_tool_input(self, input: ToolInputCheck) -> InputProblem:
        """An approval's ``updated_input`` against its tool's schema (a local activity)."""
        definition = self._agent(input.agent_key, input.session_id).tool(input.tool_name)
        if definition is None:
            return InputProblem(problem=f"the agent has no tool {input.tool_name!r}")
        try:
            definition.parse_input(input.input)
        except ValueError as err:
            return InputProblem(problem=f"updated_input for {input.tool_name!r}: {err}")
        return InputProblem()

    @activity.defn(name=ActivityName.TOOL_RESULT_HOOKS)
    async def tool_result_hooks(self, input: ToolResultsHookInput) -> list[ToolResultBlock]:
        """``on_tool_result`` for results the workflow made itself (runs as a local activity)."""
        agent = self._agent(input.agent_key, input.session_id)
        return [
            await hooked(agent, use, block)
            for use, block in zip(input.calls, input.results, strict=True)
        ]

    @activity.defn(name=ActivityName.TRACE)
    async def trace(self, input: TraceInput) -> None:
        """Trace events the workflow produced itself (runs as a local activity)."""
        agent = self._agent(input.agent_key, input.session_id)
        for item in input.events:
            tracer = self._tracer(agent, input.session_id, input.run_id, item.seq)
            data = dict(item.data)
            if "content_head" in data:  # a large prompt: read it from the transcript
                last = (await self._transcripts.messages(data.pop("content_head")))[-1]
                data["content"] = last.to_wire()["content"]
            if item.type == "run_start" and "team_workflow_id" in data:  # name the team
                team = self._registry.team_of(input.agent_key, input.session_id)
                data["team"] = team.name if team is not None else agent.name
            await tracer.emit(item.type, **data)
