"""Scale-out: throughput and latency of C concurrent queries on 1, 2, 4 ``lattice worker`` processes.

Run: ``python bench/scale_out.py`` (``--help`` for options; ``--concurrency 20,50 --workers
1,2`` is a quick run). It starts its own dev server in a temporary ``LATTICE_HOME`` and stops
it, the workers and the model at the end.

Parties, each a process of its own: one Temporal dev server (``DevServer.ensure``, as the
library starts it); a fake Anthropic-compatible model (``FakeAnthropicServer``, ``--role
model``) that answers each request after ``--latency`` ms: ``tool_use`` of the tool ``step``
for the first ``--turns`` requests of a query, then a short text; W ``lattice worker
bench/_scale_app.py`` processes, which run every workflow and activity; and this process,
the client, which starts C queries at once with ``agent.prompt()`` (a fresh session each)
and waits for all of them. A query is ``--turns`` tool turns plus the answer: ``turns + 1``
model requests, each followed by a tool call but the last. Every configuration runs a
warm-up round first (2 queries per worker); the figures are of the round after it.

Figures: queries/s and turns/s (model requests/s) over the round's wall time; p50/p95 of a
query's latency (its ``prompt()`` call); CPU ms per turn of the worker processes (summed),
of the server process and of this client process, from ``/proc/<pid>/stat`` (utime + stime)
before and after the round. The model's latency alone makes a query last at least
``(turns + 1) × latency``: the floor column.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from _common import emit, lattice_home, median, note, pct, process_cpu_s, start_library_server
from _common import table as markdown_table

HERE = Path(__file__).resolve().parent
APP = str(HERE / "_scale_app.py")


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


# -- the model process ---------------------------------------------------------------------


def model_main(latency_ms: float, turns: int) -> None:
    """Serve the fake model until stdin closes; print its base URL first."""
    from agent_lattice.testing import FakeAnthropicServer, RecordedRequest, Reply, text, tool_use

    def answer(request: RecordedRequest) -> Reply:
        time.sleep(latency_ms / 1000)  # a server thread per request: requests overlap
        turn = 1 + sum(m["role"] == "assistant" for m in request.messages)
        return tool_use("step", {"n": turn}) if turn <= turns else text("all steps taken")

    with FakeAnthropicServer(answer) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def model_process(latency_ms: float, turns: int) -> Iterator[tuple[str, int]]:
    options = ["--latency", str(latency_ms), "--turns", str(turns)]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--role", "model", *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        yield proc.stdout.readline().decode().strip(), proc.pid
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- workers -----------------------------------------------------------------------------


class Workers:
    """W ``lattice worker`` processes on one task-queue prefix; ``stop()`` ends them."""

    def __init__(self, count: int, env: dict[str, str], home: Path) -> None:
        self.logs = [home / f"worker-{i}.log" for i in range(count)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "agent_lattice.cli", "worker", APP],
                env=env,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            for log in self.logs
        ]

    async def ready(self, within: float = 120.0) -> None:
        deadline = time.monotonic() + within
        for proc, log in zip(self.procs, self.logs, strict=True):
            while "ready" not in log.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker did not start: {log.read_text()[-2000:]}")
                await asyncio.sleep(0.1)

    def cpu_s(self) -> float:
        return sum(process_cpu_s(p.pid) for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- one round ---------------------------------------------------------------------------


async def round_of(runtime, agent, concurrency: int) -> tuple[float, list[float]]:
    """C queries at once; returns the wall time and each query's latency (s)."""
    from agent_lattice import Agent

    async def one(i: int) -> float:
        started = time.perf_counter()
        result = await Agent(agent.config).prompt(f"query {i}", runtime=runtime)
        if result.subtype != "success":
            raise RuntimeError(f"query {i} ended {result.subtype}: {result.result}")
        return time.perf_counter() - started

    started = time.perf_counter()
    latencies = await asyncio.gather(*(one(i) for i in range(concurrency)))
    return time.perf_counter() - started, list(latencies)


async def bench(args: argparse.Namespace) -> None:
    from agent_lattice.client import Runtime

    rows = []
    turns = args.turns + 1
    with lattice_home() as home, model_process(args.latency, args.turns) as (base_url, _):
        server = start_library_server(home)
        dsn = args.transcript_dsn or os.environ.get("LATTICE_TRANSCRIPT_DSN")
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": server.address,
            "ANTHROPIC_BASE_URL": base_url,
            **({"LATTICE_TRANSCRIPT_DSN": dsn} if dsn else {}),
        }
        os.environ.update({k: env[k] for k in ("ANTHROPIC_BASE_URL", "TEMPORAL_ADDRESS")})
        if dsn:
            os.environ["LATTICE_TRANSCRIPT_DSN"] = dsn
        note(
            f"scale_out: server {server.address}, model {base_url} ({args.latency:g} ms), "
            f"transcripts {'Postgres' if dsn else 'SQLite under LATTICE_HOME'}"
        )
        for count in args.workers:
            prefix = f"scale{uuid.uuid4().hex[:6]}."
            os.environ["LATTICE_TASK_QUEUE_PREFIX"] = prefix
            workers = Workers(count, {**env, "LATTICE_TASK_QUEUE_PREFIX": prefix}, home)
            runtime = None
            try:
                await workers.ready()
                import _scale_app  # the same agent as the workers serve (the prefix is set)

                runtime = await Runtime.connect(server.address, inline_workers=False, quiet=True)
                await round_of(runtime, _scale_app.agent, 2 * count)  # warm-up
                for concurrency in args.concurrency:
                    note(f"scale_out: {count} worker(s), {concurrency} queries…")
                    before = (workers.cpu_s(), process_cpu_s(server.pid or 0), time.process_time())
                    wall, latencies = await round_of(runtime, _scale_app.agent, concurrency)
                    after = (workers.cpu_s(), process_cpu_s(server.pid or 0), time.process_time())
                    n = concurrency * turns
                    cpu = [(a - b) * 1000 / n for a, b in zip(after, before, strict=True)]
                    rows.append(
                        [
                            count,
                            concurrency,
                            concurrency / wall,
                            n / wall,
                            median(latencies),
                            pct(latencies, 0.95),
                            turns * args.latency / 1000,
                            *cpu,
                            os.getloadavg()[0],
                        ]
                    )
            finally:
                if runtime is not None:
                    await runtime.close()
                workers.stop()
        server.stop()
    emit(
        markdown_table(
            [
                "workers",
                "C",
                "queries/s",
                "turns/s",
                "p50 s",
                "p95 s",
                "floor s",
                "worker CPU ms/turn",
                "server CPU ms/turn",
                "client CPU ms/turn",
                "load",
            ],
            rows,
            title=f"Scale-out: {args.turns} tool turns + answer per query, model "
            f"{args.latency:g} ms, transcripts in {'Postgres' if dsn else 'SQLite'}, "
            f"{os.cpu_count()} cores",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="main", choices=["main", "model"])
    parser.add_argument("--concurrency", type=_ints, default=[20, 50, 200], help="e.g. 20,50")
    parser.add_argument("--workers", type=_ints, default=[1, 2, 4], help="e.g. 1,2")
    parser.add_argument("--turns", type=int, default=5, help="tool turns per query")
    parser.add_argument("--latency", type=float, default=200, help="model latency, ms")
    parser.add_argument(
        "--transcript-dsn",
        help="a Postgres transcript store for the workers (default LATTICE_TRANSCRIPT_DSN, "
        "else SQLite under the temporary LATTICE_HOME, shared by the workers)",
    )
    args = parser.parse_args()
    if args.role == "model":
        model_main(args.latency, args.turns)
        return
    note(f"scale_out: {os.cpu_count()} cores; starting a dev server and the model…")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
