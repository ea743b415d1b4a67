"""MCP tools against real MCP servers: a stdio subprocess, Streamable HTTP, and in-process."""

from __future__ import annotations

import asyncio
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
)
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

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
