"""Baseline workflows and activities of the benchmarks (no agent_lattice code).

Kept in their own module with only temporalio imports so the workflow sandbox can import
them cheaply, exactly like it imports ``AgentWorkflow``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.contrib.workflow_streams import WorkflowStream

TIMEOUT = timedelta(seconds=60)


@activity.defn(name="bench.noop")
async def noop(value: str) -> str:
    return value


@workflow.defn(name="BareActivities")
class BareActivities:
    """``n`` sequential trivial activities (``execute_activity``)."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(noop, str(i), start_to_close_timeout=TIMEOUT)
        return n


@workflow.defn(name="BareActivitiesStartWait")
class BareActivitiesStartWait:
    """The same with ``start_activity`` and an explicit ``await`` of the handle."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            handle = workflow.start_activity(noop, str(i), start_to_close_timeout=TIMEOUT)
            await handle
        return n


@workflow.defn(name="BareLocalActivities")
class BareLocalActivities:
    """``n`` sequential trivial local activities."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_local_activity(noop, str(i), start_to_close_timeout=TIMEOUT)
        return n


# -- streaming ---------------------------------------------------------------------------


@workflow.defn(name="StreamBench")
class StreamBench:
    """Hosts a workflow stream, waits for ``go``, runs one emitting activity, then closes.

    The activity (``bench.emit``, defined by the streaming benchmark) gets ``spec`` as is and
    returns a dict of figures, which the workflow returns.
    """

    @workflow.init
    def __init__(self, spec: dict) -> None:
        self._stream = WorkflowStream()
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.run
    async def run(self, spec: dict) -> dict:
        await workflow.wait_condition(lambda: self._go)
        result = await workflow.execute_activity(
            "bench.emit",
            spec,
            result_type=dict,
            start_to_close_timeout=TIMEOUT,
        )
        # Let subscribers collect the last items, as AgentWorkflow does.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result


# -- the P6 floor ------------------------------------------------------------------------


_client: Any = None


@activity.defn(name="bench.model_call")
async def model_call(prompt: str) -> str:
    """One streamed model request with the Anthropic SDK, as the model activity makes it."""
    global _client
    if _client is None:  # one per process, as agent_lattice's model clients share theirs
        import os

        import anthropic

        _client = anthropic.AsyncAnthropic(api_key="b", base_url=os.environ["ANTHROPIC_BASE_URL"])
    async with _client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        message = await stream.get_final_message()
    return "".join(block.text for block in message.content if block.type == "text")


@workflow.defn(name="BareModelCall")
class BareModelCall:
    """One model request as an activity: what a query waiting on the model needs at least."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        return await workflow.execute_activity(model_call, prompt, start_to_close_timeout=TIMEOUT)
