"""What one model request costs the worker's CPU.

Section ``transport``: over the anthropic SDK's two HTTP transports, its default (httpx) and
aiohttp (``anthropic[aiohttp]``, what ``AnthropicModelClient`` uses). Section ``client``: the
agent's own request (its conversation so far and the tools an agent with a workspace sends:
``step`` and the seven built-in ones) through ``AnthropicModelClient.create`` against the
SDK's ``messages.create`` with each event dumped to a dict (what the client did before).

Run: ``python bench/model_transport.py`` (``--help``; ~2 min). ``peer.py``'s fake model in its
own process answers a tool call over real HTTP; C requests at once, streamed and not,
interleaved by variant after a warm-up. Per request: CPU of this process (the SDK, its
transport and the event loop: what a worker spends), and wall time.
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

from agent_lattice import create_builtin_tools
from agent_lattice._messages import ModelMessage
from agent_lattice.providers import ModelRequest
from agent_lattice.providers._anthropic import (
    AnthropicModelClient,
    _read_stream,
    _to_message,
    shared_http_client_held,
)
from agent_lattice.tools._tool import ToolSpec

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


def agent_request(turns: int, latency: int, tools: list[Any]) -> ModelRequest:
    """A request of an agent ``turns`` tool turns into its conversation."""
    messages = [ModelMessage(role="user", content=f"turns=1000000 latency={latency}")]
    for i in range(turns):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "step", "input": {"i": i}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"step {i} ok"}
        messages += [
            ModelMessage(role="assistant", content=[call]),
            ModelMessage(role="user", content=[result]),
        ]
    return ModelRequest(model="claude-bench", messages=messages, max_tokens=100, tools=tools)


async def _dumped(stream: Any) -> Any:
    async for event in stream:
        yield event.model_dump(mode="json", exclude_none=True)


def client_variants(
    base_url: str, sdk: anthropic.AsyncAnthropic
) -> dict[str, Callable[[ModelRequest], Any]]:
    used = AnthropicModelClient(api_key="test", base_url=base_url)

    async def sdk_create(request: ModelRequest) -> Any:
        stream = await sdk.messages.create(**used.params(request), stream=True)
        async with stream:
            return _to_message(await _read_stream(_dumped(stream), None))

    return {"SDK messages.create (before)": sdk_create, "AnthropicModelClient (used)": used.create}


async def per_client_request(
    create: Callable[[ModelRequest], Any], request: ModelRequest, *, c: int, n: int
) -> tuple[float, float]:
    """(CPU ms, wall ms) per request, ``n`` requests ``c`` at a time."""
    await asyncio.gather(*(create(request) for _ in range(c)))  # warm
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(max(1, n // c)):
        await asyncio.gather(*(create(request) for _ in range(c)))
    done = max(1, n // c) * c
    return (time.process_time() - cpu) * 1000 / done, (time.perf_counter() - wall) * 1000 / done


async def client_section(args: argparse.Namespace, base_url: str) -> None:
    # the SDK client as AnthropicModelClient builds it (aiohttp, no retries)
    http = anthropic.DefaultAioHttpClient()
    sdk = anthropic.AsyncAnthropic(
        api_key="test", base_url=base_url, max_retries=0, http_client=http
    )
    try:
        await _client_rows(args, client_variants(base_url, sdk))
    finally:
        await http.aclose()
        async with shared_http_client_held():
            pass  # closes the loop's client AnthropicModelClient shares


async def _client_rows(
    args: argparse.Namespace, variants: dict[str, Callable[[ModelRequest], Any]]
) -> None:
    step = {"type": "object", "properties": {"i": {"type": "integer"}}}
    tools = [ToolSpec(name="step", description="One step.", input_schema=step)]
    tools += [t.spec() for t in create_builtin_tools(cwd=".")]
    rows = []
    for c in (int(x) for x in args.c.split(",")):
        for turns in (0, 5, 20):
            request = agent_request(turns, args.latency if c > 1 else 0, tools)
            samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
            for _ in range(args.repeat):
                for name, create in variants.items():
                    samples[name].append(await per_client_request(create, request, c=c, n=args.n))
            base = median([cpu for cpu, _ in samples["SDK messages.create (before)"]])
            for name, runs in samples.items():
                cpu = median([x for x, _ in runs])
                rows.append([
                    c, turns, name, f"{cpu:.2f}", f"{median([w for _, w in runs]):.2f}",
                    f"{cpu / base:.2f}",
                ])  # fmt: skip
    emit()
    emit(table(
        ["at once", "tool turns so far", "client", "CPU ms/request", "wall ms/request",
         "CPU × before"],
        rows,
        title=f"The agent's streamed request ({len(tools)} tools), {args.n} per row, medians of "
        f"{args.repeat}; model latency {args.latency} ms when more than one at once",
    ))  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    model, base_url = start_fake_model()
    try:
        emit(f"cores: {os.cpu_count()} · load average at start: {os.getloadavg()[0]:.2f}")
        if "client" in args.sections:
            await client_section(args, base_url)
        if "transport" not in args.sections:
            return
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
    p.add_argument("--sections", default="client,transport", help="client, transport")
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
