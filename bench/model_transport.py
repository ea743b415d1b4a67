"""What one model request costs the worker's CPU over the anthropic SDK's two HTTP transports:
its default (httpx) and aiohttp (``anthropic[aiohttp]``, what ``AnthropicModelClient`` uses).

Run: ``python bench/model_transport.py`` (``--help``; ~1 min). ``peer.py``'s fake model in its
own process answers a tool call (``turns=3``) over real HTTP; C requests at once, streamed and
not, interleaved by transport after a warm-up. Per request: CPU of this process (the SDK,
its transport and the event loop: what a worker spends), and wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import anthropic
from _common import emit, median, table
from peer import start_fake_model

TRANSPORTS: dict[str, Callable[[], Any]] = {
    "httpx (SDK default)": anthropic.DefaultAsyncHttpxClient,
    "aiohttp (used)": anthropic.DefaultAioHttpClient,
}
TOOLS = [{"name": "step", "description": "One step.", "input_schema": {"type": "object"}}]


async def per_request(
    make: Callable[[], Any], base_url: str, *, c: int, n: int, stream: bool, latency: int
) -> tuple[float, float]:
    """(CPU ms, wall ms) per request, ``n`` requests ``c`` at a time."""
    http = make()
    client = anthropic.AsyncAnthropic(
        api_key="test", base_url=base_url, max_retries=0, http_client=http
    )
    params: dict[str, Any] = {
        "model": "claude-bench",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": f"turns=3 latency={latency}"}],
        "tools": TOOLS,
    }

    async def one() -> None:
        if stream:
            events = await client.messages.create(**params, stream=True)
            async with events:
                async for _ in events:
                    pass
        else:
            await client.messages.create(**params)

    try:
        await asyncio.gather(*(one() for _ in range(c)))  # warm: connections, imports
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(max(1, n // c)):
            await asyncio.gather(*(one() for _ in range(c)))
        done = max(1, n // c) * c
        return (time.process_time() - cpu) * 1000 / done, (time.perf_counter() - wall) * 1000 / done
    finally:
        await http.aclose()


async def main(args: argparse.Namespace) -> None:
    model, base_url = start_fake_model()
    try:
        emit(f"cores: {os.cpu_count()} · load average at start: {os.getloadavg()[0]:.2f}")
        rows = []
        for c in (int(x) for x in args.c.split(",")):
            for stream in (True, False):
                samples: dict[str, list[tuple[float, float]]] = {k: [] for k in TRANSPORTS}
                for _ in range(args.repeat):
                    for name, make in TRANSPORTS.items():
                        latency = args.latency if c > 1 else 0
                        samples[name].append(
                            await per_request(
                                make, base_url, c=c, n=args.n, stream=stream, latency=latency
                            )
                        )
                base = median([cpu for cpu, _ in samples["httpx (SDK default)"]])
                for name, runs in samples.items():
                    cpu = median([x for x, _ in runs])
                    rows.append([
                        c, "streamed" if stream else "whole", name, f"{cpu:.2f}",
                        f"{median([w for _, w in runs]):.2f}", f"{cpu / base:.2f}",
                    ])  # fmt: skip
        emit()
        emit(table(
            ["at once", "request", "transport", "CPU ms/request", "wall ms/request", "CPU × httpx"],
            rows,
            title=f"One model request (a tool call) over HTTP, {args.n} per row, medians of "
            f"{args.repeat}; model latency {args.latency} ms when more than one at once",
        ))  # fmt: skip
    finally:
        assert model.stdin is not None
        model.stdin.close()
        model.wait(10)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--c", default="1,20,50", help="requests at once, per row")
    p.add_argument("--n", type=int, default=400, help="requests per sample")
    p.add_argument("--repeat", type=int, default=3, help="samples per transport")
    p.add_argument("--latency", type=int, default=200, help="model latency (ms) when C > 1")
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
