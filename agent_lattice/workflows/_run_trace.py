# pyright: strict
"""A run's trace events from workflow code: whether the run is traced, the sequence numbers
its events and activities take (deterministic, so a retried task reuses them, and carried
across continue-as-new), and the trace activity that delivers what the workflow itself
saw (the run's start, results it made, its result)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .._messages import ModelMessage, Usage
    from . import _contract as contract
    from ._types import AgentRunInput, TraceInput, TraceItem

__all__ = ["RunTrace"]


class RunTrace:
    """Owned by an AgentWorkflow: its tracing, as the workflow does it."""

    def __init__(self, input: AgentRunInput, seq: int) -> None:
        self._input = input
        self.seq = seq  # the next free sequence number

    @property
    def enabled(self) -> bool:
        """Trace events go to the agent's own tracer or to the query's (``query(tracer=)``)."""
        return self._input.agent.traced or self._input.traced

    def reserve(self, size: int) -> int:
        """Reserve ``size`` sequence numbers (for an activity's own events); the first."""
        start = self.seq
        self.seq += size
        return start

    async def emit(self, events: list[tuple[str, dict[str, object]]]) -> None:
        """Deliver ``events`` to the run's tracer (nothing when it has none)."""
        input = self._input
        if not self.enabled or not events:
            return
        await contract.trace(
            TraceInput(
                agent_key=input.agent.key,
                session_id=input.session_id,
                run_id=workflow.info().run_id,
                events=[
                    TraceItem(seq=self.reserve(1), type=kind, data=data) for kind, data in events
                ],
            ),
            summary=f"{input.agent.name} · trace",
        )

    async def run_start(self, prompt: ModelMessage) -> None:
        """The run's start and its prompt (a delegated run says where it sits in the trace,
        a team's lead names its team, the trace's root)."""
        if not self.enabled:
            return
        input, info = self._input, workflow.info()
        start: dict[str, object] = {
            "agent": input.agent.name,
            "model": input.agent.model,
            "workflow_id": info.workflow_id,
        }
        if input.trace_parent is not None:
            start["parent"] = input.trace_parent.model_dump()
        if input.team_workflow_id is not None:
            start["team_workflow_id"] = input.team_workflow_id
        said: dict[str, object] = (
            {"content_head": input.head}
            if input.prompt_in_head
            else {"content": prompt.to_wire()["content"]}
        )
        await self.emit([("run_start", start), ("user_message", said)])

    async def result(
        self,
        subtype: str,
        result: str | None,
        *,
        num_turns: int,
        stop_reason: str | None,
        usage: Usage,
        total_cost_usd: float | None,
    ) -> None:
        """The run's result, as its ``ResultMessage`` will say it."""
        data: dict[str, object] = {
            "subtype": subtype,
            "result": result,
            "num_turns": num_turns,
            "stop_reason": stop_reason,
            "usage": usage.model_dump(),
            "total_cost_usd": total_cost_usd,
        }
        await self.emit([("result", data)])
