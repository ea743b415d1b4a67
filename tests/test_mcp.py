"""MCP tools against real MCP servers: a stdio subprocess, Streamable HTTP, and in-process;
connections opened on the loop that calls, reconnected after the server dies, closed by the
last worker of their loop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client

from agent_lattice import (
    ConfigurationError,
    OptionError,
    connect_mcp_stdio_server,
    connect_mcp_streamable_http_server,
    create_mcp_tools,
    mcp_stdio_server,
    mcp_streamable_http_server,
)
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block
from agent_lattice.tools._mcp import mcp_connections_held

from conftest import running, running_children, wait_until

SERVER = str(Path(__file__).with_name("mcp_docs_server.py"))
STDIO = {"command": sys.executable, "args": [SERVER]}


async def test_stdio_server_tools_run_in_the_agent_loop(make_agent, fake_anthropic):
    async with await connect_mcp_stdio_server(STDIO, name_prefix="docs") as mcp:
        assert [t.name for t in mcp.tools] == ["docs_search", "docs_fail", "docs_slow"]
        fake_anthropic.set_handler(
            Script(
                tool_use("docs_search", {"query": "install"}),
                text("Install with pip."),
            )
        )
        agent = make_agent(name="mcp-stdio", tools=mcp.tools)
        result = await agent.prompt("Search the docs for installation steps.")

    assert result.subtype == "success" and result.result == "Install with pip."
    first, second = fake_anthropic.requests
    sent = {t["name"]: t for t in first.tools}
    assert sent["docs_search"]["input_schema"]["required"] == ["query"]
    assert sent["docs_search"]["description"] == "Search the docs; returns matching sections."
    assert "metadata" not in sent["docs_search"]
    assert second.tool_results[0]["content"] == (
        "installation: Run pip install agent-lattice, then lattice dev."
    )
    assert second.tool_results[0].get("is_error") in (None, False)


async def test_server_tool_errors_reach_the_model_as_error_results(make_agent, fake_anthropic):
    async with await connect_mcp_stdio_server(STDIO) as mcp:
        fake_anthropic.set_handler(
            Script(
                message(
                    [
                        tool_use_block("fail", {"reason": "index offline"}, id="toolu_a"),
                        tool_use_block("search", {}, id="toolu_b"),
                    ],
                    stop_reason="tool_use",
                ),
                text("The docs are unavailable."),
            )
        )
        agent = make_agent(name="mcp-errors", tools=mcp.tools)
        result = await agent.prompt("Look it up.")

    assert result.subtype == "success"
    failed, invalid = fake_anthropic.requests[1].tool_results
    assert failed["is_error"] is True and "index offline" in str(failed["content"])
    # arguments the server's schema requires are checked before the server is called
    assert invalid["is_error"] is True and "query" in str(invalid["content"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server_url():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)])
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("MCP HTTP test server exited") from None
                import time

                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


class BearerAuth(httpx2.Auth):
    """Stands in for an MCP OAuthClientProvider: both are httpx2 auth flows."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.requests = 0

    def auth_flow(self, request):
        self.requests += 1
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


async def test_streamable_http_server_with_headers_and_auth_provider(
    http_server_url, make_agent, fake_anthropic
):
    auth = BearerAuth("test-token")
    mcp = await connect_mcp_streamable_http_server(
        http_server_url,
        name_prefix="remote",
        headers={"X-Workspace": "demo"},
        auth_provider=auth,
    )
    try:
        fake_anthropic.set_handler(
            Script(tool_use("remote_search", {"query": "deploy"}), text("Use lattice worker."))
        )
        agent = make_agent(name="mcp-http", tools=mcp.tools)
        result = await agent.prompt("How do I deploy?")
    finally:
        await mcp.close()
    assert result.result == "Use lattice worker."
    assert "lattice worker app:agents" in fake_anthropic.requests[1].tool_results[0]["content"]
    assert auth.requests >= 2  # the handshake and the call both went through the provider


async def test_refused_connection_names_the_server(http_server_url):
    with pytest.raises(ConfigurationError, match=r"could not connect to MCP server http://127"):
        await connect_mcp_streamable_http_server(http_server_url, headers={"X-Workspace": "demo"})
    with pytest.raises(ConfigurationError, match="MCP stdio server"):
        await connect_mcp_stdio_server({"command": sys.executable, "args": ["-c", "pass"]})


async def test_host_managed_client_and_options():
    from mcp_docs_server import server

    async with Client(server) as client:
        tools = await create_mcp_tools(client, include=["search"])
        assert [t.name for t in tools] == ["search"]
        assert tools[0].is_concurrency_safe({"query": "x"}) is True  # readOnlyHint
        slow = (await create_mcp_tools(client, include=["slow"]))[0]
        assert slow.is_concurrency_safe is None
        assert slow.metadata == {"mcp_tool": "slow"}
        with pytest.raises(OptionError, match=r"does not list: \['nope'\]"):
            await create_mcp_tools(client, include=["nope"])
        with pytest.raises(OptionError, match='MCPToolsOptions: unknown option "namePrefix"'):
            await create_mcp_tools(client, namePrefix="x")
    with pytest.raises(OptionError, match="expected an http"):
        await connect_mcp_streamable_http_server("mcp.example.com")
    with pytest.raises(OptionError, match='MCPStdioServer: unknown option "cmd"'):
        await connect_mcp_stdio_server({"cmd": "node"})


async def test_close_stops_the_stdio_server():
    mcp = await connect_mcp_stdio_server(STDIO)
    await mcp.close()
    await mcp.close()  # idempotent
    with pytest.raises(Exception):  # noqa: B017 - any transport error: the session is gone
        await asyncio.wait_for(mcp.client.list_tools(), 5)


# -- connections per event loop: opened where the call runs, reconnected, closed by workers --


def own_servers() -> list[int]:
    """This process's running stdio docs servers (not the module's HTTP one)."""
    return running_children(os.getpid(), lambda argv: argv[-1:] == [SERVER])


async def test_a_declared_server_connects_on_the_loop_that_calls_and_reconnects():
    """``mcp_stdio_server`` (for an app module, at import): the tools are listed at once; the
    calls connect on the loop that runs them, and a dead connection is one error result."""
    docs = await asyncio.to_thread(mcp_stdio_server, STDIO, name_prefix="docs")
    assert [t.name for t in docs.tools] == ["docs_search", "docs_fail", "docs_slow"]
    assert own_servers() == []  # the listing's server was stopped
    search, fail = docs.tools[0].handler, docs.tools[1].handler
    async with mcp_connections_held():  # as a worker of this loop holds it
        first = await search({"query": "install"})
        assert first.is_error is False and first.content.startswith("installation:")
        [server] = own_servers()
        assert (await search({"query": "deploy"})).content.startswith("deploy:")
        # the server's own error is an error result and keeps the connection
        assert (await fail({"reason": "index offline"})).is_error is True
        assert own_servers() == [server]

        os.kill(server, signal.SIGKILL)
        await asyncio.to_thread(wait_until, lambda: not running(server), "the server to die")
        lost = await search({"query": "install"})
        assert lost.is_error is True
        assert lost.content.startswith("MCP server 'docs': connection lost (")
        assert "The next call reconnects" in lost.content

        again = await search({"query": "install"})
        assert again.is_error is False and again.content.startswith("installation:")
        [restarted] = own_servers()
        assert restarted != server
    # the last worker of the loop stopped: its connections closed, their servers stopped
    assert not running(restarted)
    assert docs.client is not None  # the client of the connection opened last


async def test_a_connection_opened_on_a_loop_that_ended_is_opened_again_where_it_is_called():
    """The seed's pattern in a Python app module: ``asyncio.run(connect_...)`` at import.
    That loop's connection ended with it; a call on the serving loop connects there."""
    opened = await asyncio.to_thread(asyncio.run, connect_mcp_stdio_server(STDIO))
    assert own_servers() == []
    result = await opened.tools[0].handler({"query": "install"})
    assert result.is_error is False and result.content.startswith("installation:")
    await opened.close()
    assert own_servers() == []


async def test_the_last_worker_of_a_loop_closes_its_mcp_connections(
    make_agent, fake_anthropic, lattice_runtime
):
    docs = await asyncio.to_thread(mcp_stdio_server, STDIO)
    fake_anthropic.set_handler(Script(tool_use("search", {"query": "install"}), text("Done.")))
    agent = make_agent(name="mcp-held", tools=docs.tools)
    assert (await agent.prompt("Search the docs.")).result == "Done."
    assert fake_anthropic.requests[1].tool_results[0]["content"].startswith("installation:")
    [server] = own_servers()  # the inline worker's connection
    await lattice_runtime.close()  # stops its inline workers, the last of this loop
    assert not running(server)


def _start_http_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)])
    wait_until(lambda: _accepts(port) or proc.poll() is not None, "the MCP HTTP server")
    assert proc.poll() is None, "MCP HTTP test server exited"
    return proc


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
    except OSError:
        return False
    return True


async def test_a_streamable_http_server_that_restarts_is_reconnected():
    port = _free_port()
    proc = await asyncio.to_thread(_start_http_server, port)
    try:
        docs = await asyncio.to_thread(
            mcp_streamable_http_server,
            f"http://127.0.0.1:{port}/mcp",
            headers={"X-Workspace": "demo"},
            auth_provider=BearerAuth("test-token"),
        )
        search = docs.tools[0].handler
        assert (await search({"query": "install"})).content.startswith("installation:")

        proc.kill()
        proc.wait(10)
        lost = await search({"query": "install"})
        assert lost.is_error is True
        assert lost.content.startswith("MCP server 'docs': connection lost (ConnectError")
        down = await search({"query": "install"})  # still down: the reconnect fails
        assert down.is_error is True
        assert down.content.startswith(f"could not connect to MCP server http://127.0.0.1:{port}")

        proc = await asyncio.to_thread(_start_http_server, port)
        again = await search({"query": "install"})
        assert again.is_error is False and again.content.startswith("installation:")
        await docs.close()
    finally:
        proc.kill()
        proc.wait(10)
