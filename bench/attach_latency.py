"""First-token latency of an attached reader (``Runtime.attach``) against the side channel.

Run: ``python bench/attach_latency.py`` (``--help`` for options). It starts its own dev server
in a temporary ``LATTICE_HOME`` and stops it at the end.

Three parties: a worker process (``--role worker``) runs the agent's model requests; this
process starts each query with ``agent.query()`` (its tokens come over the side channel: the
worker connects to this process's receiver over TCP loopback, as a worker on another host
would) and, on the run's ``init`` message, attaches to it through a second runtime with no
workers (``Runtime.attach``: the tokens come from the worker's live feed, found through the
run's pending model activity). The model is a ``ModelClient`` in the worker that waits
``ttft`` ms, then emits ``k`` text deltas ``pace`` ms apart, each stamped with its send time
(same machine, same clock). Figures: receive − send of the first token and of every token,
for both readers; history events and bytes of runs with and without an attached reader.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _common import emit, history_figures, lattice_home, median, note, pct, start_library_server
from _common import table as markdown_table

from agent_lattice import StreamEventMessage, create_agent
from agent_lattice._messages import ModelMessage, TextBlock, Usage
from agent_lattice.client import Runtime
from agent_lattice.providers import ModelRequest

SCRIPT = str(Path(__file__).resolve())


class StampedModel:
    """Waits ``ttft`` ms, then streams ``k`` text deltas ``pace`` ms apart, each stamped."""

    async def create(self, request: ModelRequest, *, on_event: Any = None) -> ModelMessage:
        spec = dict(part.split("=", 1) for part in request.messages[-1].text.split())
        ttft, k, pace = float(spec["ttft"]), int(spec["k"]), float(spec["pace"])
        await asyncio.sleep(ttft / 1000)
        words = []
        for seq in range(k):
            word = f"token{seq} "
            words.append(word)
            if on_event is not None:
                await on_event(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": word},
                        "bench": {"seq": seq, "sent": time.time()},
                    }
                )
            if pace:
                await asyncio.sleep(pace / 1000)
        return ModelMessage(
            role="assistant",
            content=[TextBlock(text="".join(words))],
            stop_reason="end_turn",
            usage=Usage(input_tokens=10, output_tokens=k),
        )


def make_agent(task_queue: str) -> Any:
    return create_agent(
        name="attach-bench",
        model="stamped",
        model_client=StampedModel(),
        workspace=False,
        task_queue=task_queue,
    )


# -- the worker process ------------------------------------------------------------------


async def worker_main(address: str, task_queue: str) -> None:
    from agent_lattice.worker import create_workers

    runtime = await Runtime.connect(address, inline_workers=False, quiet=True)
    workers = create_workers(runtime.client, [make_agent(task_queue)])
    tasks = [asyncio.create_task(w.run()) for w in workers]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    await runtime.close()


# -- one query ---------------------------------------------------------------------------


def _token_latencies(messages: list[tuple[float, Any]]) -> list[float]:
    """Receive − send (ms) of every stamped token, in order."""
    return [
        (received - m.event["bench"]["sent"]) * 1000
        for received, m in messages
        if isinstance(m, StreamEventMessage) and "bench" in m.event
    ]


async def _attached(reader: Runtime, workflow_id: str, live: bool) -> list[tuple[float, Any]]:
    got = []
    messages = reader.attach(workflow_id) if live else reader.durable_messages(workflow_id)
    async for message in messages:
        got.append((time.time(), message))
    return got


async def one_query(
    agent: Any, starter: Runtime, reader: Runtime | None, spec: str, live: bool = True
) -> tuple[list[float], list[float], str]:
    mine: list[tuple[float, Any]] = []
    attached: asyncio.Task[list[tuple[float, Any]]] | None = None
    workflow_id = ""
    async for message in agent.query(spec, runtime=starter):
        mine.append((time.time(), message))
        if message.type == "system" and message.subtype == "init":
            workflow_id = message.workflow_id
            if reader is not None:
                attached = asyncio.create_task(_attached(reader, workflow_id, live))
    theirs = await asyncio.wait_for(attached, 60) if attached is not None else []
    return _token_latencies(mine), _token_latencies(theirs), workflow_id


# -- main --------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> None:
    with lattice_home() as home:
        server = start_library_server(home)
        task_queue = f"attach-bench-{uuid.uuid4().hex[:8]}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            SCRIPT,
            "--role",
            "worker",
            "--address",
            server.address,
            "--queue",
            task_queue,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "LATTICE_INLINE_WORKERS": "0"},
        )
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60)
        starter = await Runtime.connect(server.address, inline_workers=False, quiet=True)
        reader = await Runtime.connect(server.address, inline_workers=False, quiet=True)
        agent = make_agent(task_queue)
        try:
            await one_query(agent, starter, reader, f"ttft=0 k=5 pace={args.pace}")  # warm-up
            rows, history = [], []
            for ttft in args.ttfts:
                firsts: dict[str, list[float]] = {"side": [], "attached": []}
                alls: dict[str, list[float]] = {"side": [], "attached": []}
                for _ in range(args.repeat):
                    spec = f"ttft={ttft} k={args.k} pace={args.pace}"
                    side, attached, _ = await one_query(agent, starter, reader, spec)
                    for name, values in (("side", side), ("attached", attached)):
                        if values:
                            firsts[name].append(values[0])
                            alls[name].extend(values)
                missing = args.repeat - len(firsts["attached"])
                rows.append(
                    [
                        ttft,
                        median(firsts["side"]),
                        median(firsts["attached"]),
                        median(firsts["attached"]) - median(firsts["side"]),
                        max(firsts["attached"]),
                        median(alls["side"]),
                        median(alls["attached"]),
                        pct(alls["attached"], 0.9),
                        missing,
                    ]
                )
            for label, with_reader, live in (
                ("no second reader", False, False),
                ("a second reader, durable_messages() (no tokens)", True, False),
                ("a second reader, attach() (live tokens)", True, True),
            ):
                spec = f"ttft=300 k={args.k} pace={args.pace}"
                _, _, workflow_id = await one_query(
                    agent, starter, reader if with_reader else None, spec, live
                )
                figures = await history_figures(starter.client, workflow_id)
                history.append([label, figures.events, figures.bytes / 1024])
        finally:
            await reader.close()
            await starter.close()
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 30)
            server.stop()
    load = os.getloadavg()[0]
    emit(
        markdown_table(
            [
                "model TTFT ms",
                "side channel first ms",
                "attached first ms",
                "added ms",
                "attached first max ms",
                "side channel all ms",
                "attached all ms",
                "attached all p90 ms",
                "no tokens",
            ],
            rows,
            title=f"First token, {args.repeat} queries each, {args.k} tokens {args.pace} ms apart "
            f"(load {load:.1f})",
        )
    )
    emit()
    emit(markdown_table(["run", "history events", "history KiB"], history, title="History"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="main", choices=["main", "worker"])
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument(
        "--ttfts",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0, 100, 300, 1000],
        help="model time to first token, ms (comma-separated)",
    )
    parser.add_argument("--k", type=int, default=50, help="tokens per reply")
    parser.add_argument("--pace", type=float, default=5, help="ms between tokens")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    if args.role == "worker":
        asyncio.run(worker_main(args.address, args.queue))
        return
    note("attach_latency: starting a dev server and a worker process…")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
