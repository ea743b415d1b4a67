"""Live model-stream events from an activity to a client in another process: two transports.

Run: ``python bench/streaming.py`` (``--help`` for options). It starts its own dev server in a
temporary ``LATTICE_HOME`` and stops it at the end.

(A) ``temporalio.contrib.workflow_streams``: the activity publishes events in batches (signals)
    through ``WorkflowStreamClient.from_within_activity(batch_interval=...)``; the workflow
    hosts the stream; the client subscribes (long-poll updates, ``poll_cooldown`` between
    polls) with ``WorkflowStreamClient.create(client, workflow_id).subscribe(...)``.
(B) agent_lattice's side channel: ``StreamSender`` in the activity writes JSON lines over TCP
    loopback to a ``StreamReceiver`` in the client process (the receiver runs in a subprocess,
    so the in-memory fast path is never taken).

The subscriber always runs in a subprocess, as a ``query()`` caller on another machine would.
A fake model activity emits K text-delta events, paced (default 5 ms apart) or in a burst;
each event carries its send time (``time.time()``), the subscriber stamps its receive time
(same machine, same clock). History figures are compared with a run that streams nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
    CpuMeter,
    emit,
    history_figures,
    lattice_home,
    median,
    note,
    pct,
    start_library_server,
    table,
)
from _workflows import StreamBench
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.worker import Worker

from agent_lattice.live._channel import StreamReceiver, StreamSender

TOPIC = "events"
SCRIPT = str(Path(__file__).resolve())


def make_event(seq: int, last: bool) -> dict[str, Any]:
    """An Anthropic ``content_block_delta`` event, plus the benchmark's sequence and send time."""
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": f"token{seq} "},
        "bench": {"seq": seq, "sent": time.time(), "last": last},
    }


# -- the fake model activity -------------------------------------------------------------


@activity.defn(name="bench.emit")
async def emit_events(spec: dict[str, Any]) -> dict[str, Any]:
    """Emit ``k`` events ``pace_ms`` apart on the transport named by ``mode``."""
    k, pace = spec["k"], spec["pace_ms"] / 1000
    started = time.time()

    async def produce(send: Any) -> None:
        for seq in range(k):
            await send(make_event(seq, seq == k - 1))
            if pace:
                await asyncio.sleep(pace)

    if spec["mode"] == "workflow_stream":
        # batch_interval 0: no batching, every publish forces a flush (one signal per event
        # while the previous signal is not in flight).
        interval = spec["batch_interval_ms"]
        stream = WorkflowStreamClient.from_within_activity(
            batch_interval=timedelta(milliseconds=interval or 2000)
        )
        async with stream:
            topic = stream.topic(TOPIC)

            async def publish(event: dict[str, Any]) -> None:
                topic.publish(event, force_flush=not interval)

            await produce(publish)
    elif spec["mode"] == "side_channel":
        async with StreamSender(spec["stream_to"], spec["channel"], turn=1, attempt=1) as sender:
            await produce(sender.send)
    else:

        async def drop(event: dict[str, Any]) -> None:
            return None

        await produce(drop)
    return {"started": started, "ended": time.time()}


# -- subscriber subprocesses -------------------------------------------------------------


def _print(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


async def subscriber_workflow_stream(address: str, workflow_id: str, cooldown_ms: float) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    stream = WorkflowStreamClient.create(client, workflow_id)
    received: list[tuple[int, float, float]] = []

    async def consume() -> None:
        async for item in stream.subscribe(
            TOPIC, poll_cooldown=timedelta(milliseconds=cooldown_ms)
        ):
            now = time.time()
            bench = item.data["bench"]
            received.append((bench["seq"], bench["sent"], now))
            if bench["last"]:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)  # the first long-poll is parked in the workflow by now
    _print({"ready": True})
    cpu0 = time.process_time()
    await task
    _print({"received": received, "cpu_s": time.process_time() - cpu0})


async def subscriber_side_channel() -> None:
    receiver = StreamReceiver("127.0.0.1")
    address = await receiver.start()
    received: list[tuple[int, float, float]] = []
    done = asyncio.Event()

    async def deliver(item: dict[str, Any]) -> None:
        now = time.time()
        bench = item["event"]["bench"]
        received.append((bench["seq"], bench["sent"], now))
        if bench["last"]:
            done.set()

    channel = receiver.open(deliver)
    _print({"address": address, "channel": channel})
    cpu0 = time.process_time()
    await done.wait()
    cpu = time.process_time() - cpu0
    await asyncio.sleep(0.2)  # let the sender's end marker be acknowledged
    await receiver.close()
    _print({"received": received, "cpu_s": cpu})


# -- one run -----------------------------------------------------------------------------


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        SCRIPT,
        *args,
        stdout=asyncio.subprocess.PIPE,
    )


async def read_json(proc: asyncio.subprocess.Process, wait_s: float = 60) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), wait_s)
    if not line:
        raise RuntimeError("subscriber exited without output")
    return json.loads(line)


async def run_once(
    client: Client, server_pid: int | None, task_queue: str, config: dict[str, Any]
) -> dict[str, Any]:
    """One workflow run of ``config``; returns latencies, history and CPU figures."""
    workflow_id = f"stream-{uuid.uuid4().hex[:12]}"
    spec = {k: config[k] for k in ("mode", "k", "pace_ms", "batch_interval_ms")}
    proc = None
    if config["mode"] == "side_channel":
        proc = await spawn("--role", "side-channel")
        info = await read_json(proc)
        spec.update(stream_to=info["address"], channel=info["channel"])
    handle = await client.start_workflow(
        StreamBench.run, spec, id=workflow_id, task_queue=task_queue
    )
    if config["mode"] == "workflow_stream":
        proc = await spawn(
            "--role", "workflow-stream",
            "--address", config["address"],
            "--workflow-id", workflow_id,
            "--poll-cooldown-ms", str(config["cooldown_ms"]),
        )  # fmt: skip
        await read_json(proc)
    with CpuMeter(server_pid) as cpu:
        await handle.signal(StreamBench.go)
        result = await handle.result()
        out = await read_json(proc) if proc is not None else {"received": [], "cpu_s": 0.0}
    if proc is not None:
        await proc.wait()
    figures = await history_figures(client, workflow_id)
    received = out["received"]
    latencies = [(recv - sent) * 1000 for _seq, sent, recv in received]
    seqs = [seq for seq, _sent, _recv in received]
    last = max(received, key=lambda r: r[0]) if received else None
    return {
        "latencies": latencies,
        "in_order": seqs == sorted(seqs),
        "count": len(received),
        "last_ms": (last[2] - last[1]) * 1000 if last else float("nan"),
        "after_end_ms": (last[2] - result["ended"]) * 1000 if last else float("nan"),
        "activity_ms": (result["ended"] - result["started"]) * 1000,
        "events": figures.events,
        "bytes": figures.bytes,
        "signals": figures.count("WORKFLOW_EXECUTION_SIGNALED") - 1,  # minus "go"
        "updates": figures.count("WORKFLOW_EXECUTION_UPDATE_ACCEPTED"),
        "wfts": figures.count("WORKFLOW_TASK_COMPLETED"),
        "worker_cpu_ms": cpu.py_s * 1000,
        "server_cpu_ms": cpu.server_s * 1000,
        "subscriber_cpu_ms": out["cpu_s"] * 1000,
    }


# -- the benchmark -----------------------------------------------------------------------


def configs(args: argparse.Namespace, address: str) -> list[dict[str, Any]]:
    out = []
    for pace in args.paces:
        base = {"k": args.events, "pace_ms": pace, "batch_interval_ms": 0, "address": address}
        out.append({**base, "mode": "none", "label": "no streaming (baseline)"})
        for batch in args.batch_intervals:
            for cooldown in args.poll_cooldowns:
                out.append(
                    {
                        **base,
                        "mode": "workflow_stream",
                        "batch_interval_ms": batch,
                        "cooldown_ms": cooldown,
                        "label": f"(A) workflow_streams, batch {batch:g} ms, cooldown {cooldown:g} ms",
                    }
                )
        out.append({**base, "mode": "side_channel", "label": "(B) side channel, TCP"})
    return out


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


async def main(args: argparse.Namespace) -> None:
    emit(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{os.cpu_count()} CPUs; {args.events} events, paces {args.paces} ms, "
        f"repeat {args.repeat}\n"
    )
    t0 = time.perf_counter()
    with lattice_home() as home:
        server = await asyncio.to_thread(start_library_server, home)
        emit(f"server: {server.label}\n")
        try:
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            task_queue = f"bench-stream-{uuid.uuid4().hex[:8]}"
            async with Worker(
                client, task_queue=task_queue, workflows=[StreamBench], activities=[emit_events]
            ):
                runs: dict[int, list[dict[str, Any]]] = {}
                plan = configs(args, server.address)
                # Warm-up: one small run of each transport.
                for config in plan[: 2 + len(args.batch_intervals) * len(args.poll_cooldowns)]:
                    await run_once(client, server.pid, task_queue, {**config, "k": 5})
                for _ in range(args.repeat):
                    for i, config in enumerate(plan):
                        runs.setdefault(i, []).append(
                            await run_once(client, server.pid, task_queue, config)
                        )
                        note(f"  {config['label']} pace {config['pace_ms']:g}: done")
        finally:
            server.stop()
    report(plan, runs)
    emit(
        f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"total {time.perf_counter() - t0:.0f} s"
    )


def report(plan: list[dict[str, Any]], runs: dict[int, list[dict[str, Any]]]) -> None:
    for pace in sorted({c["pace_ms"] for c in plan}, reverse=True):
        title = f"{plan[0]['k']} events " + (
            f"{pace:g} ms apart" if pace else "in a burst (no pacing)"
        )
        indexes = [i for i, c in enumerate(plan) if c["pace_ms"] == pace]
        baseline = next(runs[i] for i in indexes if plan[i]["mode"] == "none")
        base_events = median([r["events"] for r in baseline])
        base_bytes = median([r["bytes"] for r in baseline])
        latency_rows, cost_rows = [], []
        for i in indexes:
            config, rs = plan[i], runs[i]
            if config["mode"] == "none":
                cost_rows.append(
                    [
                        config["label"],
                        median([r["activity_ms"] for r in rs]),
                        0,
                        0,
                        f"{base_events:g} (total)",
                        f"{base_bytes / 1024:.1f} (total)",
                        median([r["wfts"] for r in rs]),
                        "-",
                        median([r["worker_cpu_ms"] for r in rs]),
                        median([r["server_cpu_ms"] for r in rs]),
                    ]
                )
                continue
            lat = [d for r in rs for d in r["latencies"]]
            latency_rows.append(
                [
                    config["label"],
                    f"{min(r['count'] for r in rs)}/{config['k']}",
                    "yes" if all(r["in_order"] for r in rs) else "NO",
                    median(lat),
                    pct(lat, 0.9),
                    max(lat) if lat else float("nan"),
                    median([r["last_ms"] for r in rs]),
                    median([r["after_end_ms"] for r in rs]),
                ]
            )
            cost_rows.append(
                [
                    config["label"],
                    median([r["activity_ms"] for r in rs]),
                    median([r["signals"] for r in rs]),
                    median([r["updates"] for r in rs]),
                    f"{median([r['events'] for r in rs]) - base_events:+g}",
                    f"{(median([r['bytes'] for r in rs]) - base_bytes) / 1024:+.1f}",
                    median([r["wfts"] for r in rs]),
                    median([r["subscriber_cpu_ms"] for r in rs]),
                    median([r["worker_cpu_ms"] for r in rs]),
                    median([r["server_cpu_ms"] for r in rs]),
                ]
            )
        emit(
            table(
                [
                    "transport",
                    "received",
                    "in order",
                    "latency med ms",
                    "p90",
                    "max",
                    "last event ms",
                    "activity end → last event ms",
                ],
                latency_rows,
                title=f"Delivery latency, {title}",
            )
        )
        emit()
        emit(
            table(
                [
                    "transport",
                    "activity ms",
                    "publish signals",
                    "poll updates",
                    "history events added",
                    "history KiB added",
                    "WFTs",
                    "subscriber CPU ms",
                    "worker CPU ms",
                    "server CPU ms",
                ],
                cost_rows,
                title=f"Cost, {title} (history: added over the baseline run; CPU: whole run)",
            )
        )
        emit()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200, help="events per run (default 200)")
    parser.add_argument(
        "--paces", type=floats, default=[5.0, 0.0], help="ms between events; 0 = burst (5,0)"
    )
    parser.add_argument(
        "--batch-intervals",
        type=floats,
        default=[0.0, 50.0, 200.0],
        help="(A) publisher batch_interval values in ms; 0 = force_flush on every publish "
        "(default 0,50,200)",
    )
    parser.add_argument(
        "--poll-cooldowns",
        type=floats,
        default=[20.0, 100.0],
        help="(A) subscriber poll_cooldown values in ms (default 20,100; 100 is the "
        "library default of workflow_streams, 20 what agent_lattice uses)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration (default 2)")
    parser.add_argument("--role", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--workflow-id", help=argparse.SUPPRESS)
    parser.add_argument("--poll-cooldown-ms", type=float, default=100.0, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    options = parse()
    if options.role in ("workflow-stream", "side-channel"):
        if options.role == "workflow-stream":
            asyncio.run(
                subscriber_workflow_stream(
                    options.address, options.workflow_id, options.poll_cooldown_ms
                )
            )
        else:
            asyncio.run(subscriber_side_channel())
        # The results are printed; skip interpreter finalization, which can trip over the
        # Temporal Core runtime's threads in a short-lived process.
        sys.stdout.flush()
        os._exit(0)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main(options))
