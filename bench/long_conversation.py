"""Per-turn cost as a conversation grows: a tool turn early and late in one long query, side by
side with two bare activities per turn, and a 1,000-turn query across continue-as-new.

Run: ``python bench/long_conversation.py`` (``--help`` for options; ~6 min with the
1,000-turn run). One embedded dev server (``DevServer.ensure``), one fake model over HTTP in
its own process (``_fake_model.py``: ``tool_use`` of ``step`` until the prompt's ``turns=N``,
then ``done``; its CPU is not counted), every worker in this process.

* **per turn** (``--turns 310``, ``--at 10,300``): one query of N tool turns per tool-result
  size (``--sizes 100,20000`` bytes), through ``agent.query()`` (or ``--api prompt``), with
  the default ``turns_per_run`` (a run continues as new every 200 turns); and the bare
  workflow of 2N trivial activities (``_workflows.BareActivities``). The tool (the bare
  workflow's activity, every second call) stamps wall time, this process's CPU and the
  server's CPU when it runs: a turn's cost is the difference between successive stamps (the
  tool result's turn, the next model request, the next tool call). Figures at turn T are
  over turns T..T+window-1: the median wall time, the mean CPU (CPU meters tick coarsely).
  Variants run interleaved, ``--repeat`` times, after a warm-up query each.
* **sending the request** (``send``): the part that legitimately grows: the provider's
  ``create()`` of the same conversation cut at turn T (the request a turn-T model activity
  sends), to the same fake server, measured alone (median wall, mean CPU of 20 calls).
* **1,000 turns** (``--long-turns 1000``, 0 to skip): one query of 20 KB results across
  continue-as-new; checks every turn's messages (the tool_use, its 20 KB result) in the
  stored conversation, and prints totals and the cost per turn early, midway and late.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import emit, median, note, process_cpu_s, table
from _workflows import BareActivities
from peer import BARE_QUEUE, Step, parties, prompt_of
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from agent_lattice import ResultMessage, create_agent, tool
from agent_lattice._messages import ModelMessage, ToolResultBlock, ToolUseBlock
from agent_lattice.client import Runtime
from agent_lattice.providers import ModelRequest
from agent_lattice.workflows._refs import workflow_id_for


@dataclass
class Stamps:
    """(wall s, this process's CPU s, the server's CPU s) by turn."""

    server_pid: int
    at: dict[int, tuple[float, float, float]] = field(default_factory=dict)

    def stamp(self, turn: int) -> None:
        self.at[turn] = (time.perf_counter(), time.process_time(), process_cpu_s(self.server_pid))

    def window(self, first: int, count: int) -> tuple[float, float, float]:
        """Turns first..first+count-1: median wall ms, mean CPU ms (this process, server)."""
        spans = [
            (b[0] - a[0], b[1] - a[1], b[2] - a[2])
            for t in range(first, first + count)
            if (a := self.at.get(t)) is not None and (b := self.at.get(t + 1)) is not None
        ]
        if not spans:
            return (float("nan"),) * 3
        n = len(spans)
        return (
            median([s[0] for s in spans]) * 1000,
            sum(s[1] for s in spans) * 1000 / n,
            sum(s[2] for s in spans) * 1000 / n,
        )


def payload(turn: int, size: int) -> str:
    head = f"step {turn} ok "
    return head + "x" * max(size - len(head), 0)


class Lattice:
    """One agent whose tool returns ``size`` bytes and stamps each turn."""

    def __init__(self, runtime: Runtime, base_url: str, size: int, api: str, pid: int) -> None:
        self.runtime, self.base_url, self.size, self.api = runtime, base_url, size, api
        self.stamps = Stamps(pid)
        self.name = f"long-{size}"

    async def step(self, input: Step) -> str:
        self.stamps.stamp(input.i)
        return payload(input.i, self.size)

    async def once(self, turns: int) -> ResultMessage:
        """A query of ``turns`` tool turns in a new session (a new agent of the same name)."""
        self.stamps = Stamps(self.stamps.server_pid)
        self.agent = create_agent(
            model="claude-bench",
            name=self.name,
            api_key="test",
            base_url=self.base_url,
            tools=[tool("step", "One step of work", Step, self.step)],
            max_turns=100_000,
            task_queue=self.name,
        )
        prompt = prompt_of(turns, 0)
        result = None
        if self.api == "query":
            async for message in self.agent.query(prompt, runtime=self.runtime, timeout=3600):
                if isinstance(message, ResultMessage):
                    result = message
        else:
            result = await self.agent.prompt(prompt, runtime=self.runtime)
        assert result is not None and result.subtype == "success", result
        assert result.num_turns == turns + 1, (result.num_turns, turns)
        return result


class Bare:
    """``BareActivities`` of 2N activities; its activity stamps every second call."""

    def __init__(self, client: Client, pid: int) -> None:
        self.client, self.stamps = client, Stamps(pid)
        self.runs = 0

    def activity(self):  # the bare workflow's activity ("bench.noop"), stamping
        @activity.defn(name="bench.noop")
        async def noop(value: str) -> str:
            i = int(value)
            if i % 2 == 0:
                self.stamps.stamp(i // 2 + 1)  # a turn's first activity, numbered like tools
            return value

        return noop

    async def once(self, turns: int) -> None:
        self.stamps = Stamps(self.stamps.server_pid)
        self.runs += 1
        await self.client.execute_workflow(
            BareActivities.run, 2 * turns + 1, id=f"long-bare-{os.getpid()}-{self.runs}",
            task_queue=BARE_QUEUE,
        )  # fmt: skip


def intact(history: Sequence[ModelMessage], turns: int, size: int) -> None:
    """Every turn's messages in the stored conversation: prompt, then per turn the tool_use
    of ``step`` with its ``i`` and the user message with its whole result, then ``done``."""
    assert len(history) == 2 * turns + 2, len(history)
    for turn in range(1, turns + 1):
        use = history[2 * turn - 1].content[0]
        result = history[2 * turn].content[0]
        assert isinstance(use, ToolUseBlock) and use.input == {"i": turn}, (turn, use)
        assert isinstance(result, ToolResultBlock) and result.tool_use_id == use.id, turn
        assert result.content == payload(turn, size), (turn, str(result.content)[:80])
    assert history[-1].text == "done"


async def send_cost(
    variant: Lattice, history: list[ModelMessage], at: Sequence[int], calls: int
) -> dict[int, tuple[float, float, int]]:
    """The provider's ``create()`` of the conversation cut at each turn in ``at``, its
    messages encoded already as the model activity hands them over (the transcript cache's
    wire form): median wall ms, mean CPU ms, request bytes (JSON of the messages);
    interleaved."""
    client = variant.agent.model_client
    requests = {
        t: ModelRequest(
            model="claude-bench", messages=history[: 2 * t + 1], max_tokens=1024, stream=True,
            tools=[tl.spec() for tl in variant.agent.config.tools],
            wire_messages=[m.wire_json() for m in history[: 2 * t + 1]],
        )
        for t in at
    }  # fmt: skip

    async def sink(event: object) -> None:
        return None

    walls: dict[int, list[float]] = {t: [] for t in at}
    cpus: dict[int, list[float]] = {t: [] for t in at}
    for request in requests.values():  # warm-up
        await client.create(request, on_event=sink)
    for _ in range(calls):
        for t, request in requests.items():
            w, c = time.perf_counter(), time.process_time()
            await client.create(request, on_event=sink)
            walls[t].append((time.perf_counter() - w) * 1000)
            cpus[t].append((time.process_time() - c) * 1000)
    size = {t: sum(len(m.model_dump_json()) for m in history[: 2 * t + 1]) for t in at}
    return {t: (median(walls[t]), statistics.fmean(cpus[t]), size[t]) for t in at}


async def per_turn(args: argparse.Namespace, runtime: Runtime, base_url: str, pid: int) -> None:
    at = [int(t) for t in args.at.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    bare = Bare(runtime.client, pid)
    variants: dict[str, Lattice | Bare] = {"bare 2 activities": bare}
    for size in sizes:
        variants[f"{args.api}() {size} B results"] = Lattice(runtime, base_url, size, args.api, pid)
    worker = Worker(runtime.client, task_queue=BARE_QUEUE, workflows=[BareActivities],
                    activities=[bare.activity()])  # fmt: skip
    task = asyncio.create_task(worker.run())
    try:
        for v in variants.values():
            await v.once(3)
        figures: dict[str, list[dict[int, tuple[float, float, float]]]] = {k: [] for k in variants}
        histories: dict[int, list[ModelMessage]] = {}
        for r in range(args.repeat):
            for label, v in variants.items():
                t0 = time.perf_counter()
                await v.once(args.turns)
                figures[label].append({t: v.stamps.window(t, args.window) for t in at})
                if isinstance(v, Lattice):
                    histories[v.size] = await v.agent.get_history()
                    intact(histories[v.size], args.turns, v.size)
                note(f"  repeat {r + 1}/{args.repeat} {label}: {time.perf_counter() - t0:.1f} s")
        first, last = at[0], at[-1]
        rows = []
        for label, runs in figures.items():
            row: list[object] = [label]
            for k in range(3):
                a = median([f[first][k] for f in runs])
                b = median([f[last][k] for f in runs])
                row += [f"{a:.1f}", f"{b:.1f}", f"{b - a:+.1f}"]
            row.append(
                f"{median([f[last][0] for f in runs]) / median([f[first][0] for f in runs]):.2f}"
            )
            rows.append(row)
        emit(table(
            ["variant", f"wall ms t{first}", f"t{last}", "Δ", f"py CPU ms t{first}", f"t{last}",
             "Δ", f"server CPU ms t{first}", f"t{last}", "Δ", f"wall t{last}/t{first}"],
            rows,
            title=f"Per tool turn at turn {first} and {last} (turns {first}..{first + args.window - 1}"
            f" and {last}..{last + args.window - 1}), {args.turns} tool turns per query, "
            f"{args.repeat} run(s), median of runs; load {os.getloadavg()[0]:.1f}",
        ))  # fmt: skip
        emit()
        if len(at) > 2:
            rows = []
            for label, runs in figures.items():
                rows.append([label, *(f"{median([f[t][0] for f in runs]):.1f} / "
                                      f"{median([f[t][1] for f in runs]):.1f}" for t in at)])  # fmt: skip
            emit(table(["variant", *(f"turn {t}: wall / py CPU ms" for t in at)], rows,
                       title="Per tool turn along the query"))  # fmt: skip
            emit()
        if "send" in args.sections:
            rows = []
            for size, history in histories.items():
                v = variants[f"{args.api}() {size} B results"]
                assert isinstance(v, Lattice)
                cost = await send_cost(v, history, [first, last], args.send_calls)
                a, b = cost[first], cost[last]
                rows.append([
                    f"{size} B results", f"{a[2] / 1024:.0f}", f"{b[2] / 1024:.0f}",
                    f"{a[0]:.1f}", f"{b[0]:.1f}", f"{b[0] - a[0]:+.1f}",
                    f"{a[1]:.1f}", f"{b[1]:.1f}", f"{b[1] - a[1]:+.1f}",
                ])  # fmt: skip
            emit(table(
                ["conversation", f"request KiB t{first}", f"t{last}", f"wall ms t{first}",
                 f"t{last}", "Δ", f"CPU ms t{first}", f"t{last}", "Δ"],
                rows,
                title="Sending the request alone: the provider's create() of the conversation "
                f"at turn {first} and {last} ({args.send_calls} calls each, interleaved)",
            ))  # fmt: skip
            emit()
    finally:
        await worker.shutdown()
        await task


async def long_run(args: argparse.Namespace, runtime: Runtime, base_url: str, pid: int) -> None:
    size, turns = 20_000, args.long_turns
    v = Lattice(runtime, base_url, size, args.api, pid)
    v.name = "long-1000"
    await v.once(2)
    cpu0, srv0, t0 = time.process_time(), process_cpu_s(pid), time.perf_counter()
    result = await v.once(turns)
    wall = time.perf_counter() - t0
    cpu, srv = time.process_time() - cpu0, process_cpu_s(pid) - srv0
    history = await v.agent.get_history()
    intact(history, turns, size)
    runs = [
        e async for e in runtime.client.list_workflows(
            f"WorkflowId = '{workflow_id_for(v.agent, 1)}'"
        )
    ]  # fmt: skip
    points = [10, turns // 2, turns - args.window - 1]
    at = {t: v.stamps.window(t, args.window) for t in points}
    emit(table(
        ["tool turns", "runs (continue-as-new)", "messages intact", "wall s", "wall ms/turn",
         "py CPU ms/turn", "server CPU ms/turn",
         *(f"turn {t}: wall / py / server ms" for t in points)],
        [[turns, len(runs), f"{len(history)} of {2 * turns + 2}", f"{wall:.1f}",
          f"{wall * 1000 / turns:.1f}", f"{cpu * 1000 / turns:.1f}", f"{srv * 1000 / turns:.1f}",
          *(f"{w:.1f} / {c:.1f} / {s:.1f}" for w, c, s in at.values())]],
        title=f"{turns} tool turns with {size // 1000} KB results, {args.api}(), default "
        f"turns_per_run; load {os.getloadavg()[0]:.1f}",
    ))  # fmt: skip
    emit()
    assert result.num_turns == turns + 1


async def main(args: argparse.Namespace) -> None:
    with parties() as (server, base_url):
        assert server.pid is not None
        runtime = await Runtime.connect(server.address, inline_workers=True, quiet=True)
        emit(f"cores: {os.cpu_count()} · load average at start: {os.getloadavg()[0]:.2f}")
        emit()
        try:
            if "turns" in args.sections:
                await per_turn(args, runtime, base_url, server.pid)
            if "long" in args.sections and args.long_turns > 0:
                await long_run(args, runtime, base_url, server.pid)
            emit(f"load average at end: {os.getloadavg()[0]:.2f}")
        finally:
            await runtime.close()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="turns,send,long", help="turns, send, long")
    p.add_argument("--api", default="query", choices=["query", "prompt"])
    p.add_argument("--turns", type=int, default=310, help="tool turns per query (per turn)")
    p.add_argument("--at", default="10,300", help="turns to compare (first and last)")
    p.add_argument("--window", type=int, default=10, help="turns measured at each point")
    p.add_argument("--sizes", default="100,20000", help="tool result bytes")
    p.add_argument("--repeat", type=int, default=2, help="runs of each variant")
    p.add_argument("--send-calls", type=int, default=20, help="create() calls per length")
    p.add_argument("--long-turns", type=int, default=1000, help="the long run's tool turns")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
