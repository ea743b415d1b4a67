"""MCP tools: expose an MCP server's tools as agent tools (seeds: MCP Tools).

Tool calls run where the agent's tools run: in a worker, on its event loop (an inline script's
loop, or the loop of ``lattice run``/``lattice worker``/``lattice dev``). So an MCP server's
tools call through a connection of the loop that runs them: opened there on first use (or by
``await connect_...`` on the loop that awaits it) and kept, each connection held by a task of
its own so any task of that loop may call through it. A connection the server dropped is an
``is_error`` result for the call that meets it, never a retried or silent success; the next
call opens another. Connections close with ``close()``, and a loop's close when the last
worker serving on that loop stops.

``connect_mcp_*`` (async) connect on the running loop and list the tools there; ``mcp_*``
(sync) list the tools with a short-lived connection of their own, for app modules that declare
their agents at import (a tool's name and schema are part of its agent's definition, which
names the agent's task queue), and connect for calls on the serving loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._errors import ConfigurationError, OptionError
from .._loop_holds import LoopHolds
from .._options import check_options
from ._mcp_results import describe_error, field_of, tool_result
from ._tool import ToolDefinition, ToolResult, schema_of

__all__ = [
    "MCPClient",
    "MCPConnection",
    "connect_mcp_stdio_server",
    "connect_mcp_streamable_http_server",
    "create_mcp_tools",
    "mcp_stdio_server",
    "mcp_streamable_http_server",
]

_TOOLS_OPTIONS = frozenset({"name_prefix", "include", "cheap"})
_STDIO_OPTIONS = _TOOLS_OPTIONS | {"read_timeout_seconds"}
_HTTP_OPTIONS = _STDIO_OPTIONS | {"headers", "auth_provider", "timeout_seconds"}
_SERVER_KEYS = frozenset({"command", "args", "env", "cwd"})
_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_TOOL_NAME = 64


@runtime_checkable
class MCPClient(Protocol):
    """What :func:`create_mcp_tools` needs: an entered ``mcp.Client`` or ``mcp.ClientSession``,
    or any host adapter with these two coroutines."""

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any: ...

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any: ...


class MCPConnection:
    """An MCP server's tools and the connections that serve their calls.

    A call goes through the connection of the event loop that runs it (a worker's, a
    script's), opened there on first use and kept. A connection the server dropped (it exited,
    or restarted and forgot the session) is an ``is_error`` result for the call that meets it,
    saying so; the next call opens another. ``await close()`` (or ``async with``) closes every
    connection; workers close their loop's when the last of them stops. Either way a later call
    connects again.
    """

    def __init__(self, tools: list[ToolDefinition[Any]], link: _Link) -> None:
        self.tools = tools
        self._link = link

    @property
    def client(self) -> Any:
        """The MCP client of the connection opened last (None before the first)."""
        return self._link.last_client

    async def close(self) -> None:
        await self._link.close()

    async def __aenter__(self) -> MCPConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def create_mcp_tools(
    client: MCPClient, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> list[ToolDefinition[Any]]:
    """Agent tools for every tool ``client`` lists (all pages); calls go through ``client``
    (the host keeps it open, on the loop that runs the tools).

    Options: ``name_prefix`` (tool ``search`` becomes ``<prefix>_search``), ``include`` (only
    these server tool names), ``cheap`` (run calls as local activities). A tool the server marks
    ``readOnlyHint`` may run concurrently with other safe calls.
    """
    opts = {**(options or {}), **kwargs}
    check_options("MCPToolsOptions", opts, _TOOLS_OPTIONS)
    _check_client(client)

    async def call(name: str, arguments: Any) -> ToolResult:
        return tool_result(await client.call_tool(name, arguments))

    return await _tools_of(client, opts, call)


async def connect_mcp_stdio_server(
    server: Any, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """Launch an MCP server as a subprocess (``{"command", "args", "env", "cwd"}`` or an
    ``mcp.StdioServerParameters``) and expose its tools, connected on the running loop."""
    opts = {**(options or {}), **kwargs}
    check_options("MCPStdioOptions", opts, _STDIO_OPTIONS)
    return await _connect(_stdio_link(server, opts, "connect_mcp_stdio_server"), opts)


async def connect_mcp_streamable_http_server(
    url: str, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """Connect a remote Streamable HTTP MCP server, on the running loop.

    ``headers`` go with every request; ``auth_provider`` is an MCP ``OAuthClientProvider`` (or
    any ``httpx2.Auth``) for servers that require OAuth; ``timeout_seconds`` bounds each HTTP
    request (server streams may stay open longer).
    """
    opts = {**(options or {}), **kwargs}
    check_options("MCPStreamableHTTPOptions", opts, _HTTP_OPTIONS)
    return await _connect(_http_link(url, opts, "connect_mcp_streamable_http_server"), opts)


def mcp_stdio_server(
    server: Any, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """:func:`connect_mcp_stdio_server` for an app module, at import: lists the tools now (a
    server started for the listing, then stopped; this blocks, so async code awaits
    ``connect_mcp_stdio_server`` instead) and starts the server for calls on the loop that runs
    them, in the worker. Options as for :func:`connect_mcp_stdio_server`."""
    opts = {**(options or {}), **kwargs}
    check_options("MCPStdioOptions", opts, _STDIO_OPTIONS)
    return _declare(_stdio_link(server, opts, "mcp_stdio_server"), opts)


def mcp_streamable_http_server(
    url: str, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """:func:`connect_mcp_streamable_http_server` for an app module, at import: lists the
    tools now (a connection of its own, then closed) and connects for calls on the loop that
    runs them, in the worker. Options as for :func:`connect_mcp_streamable_http_server`."""
    opts = {**(options or {}), **kwargs}
    check_options("MCPStreamableHTTPOptions", opts, _HTTP_OPTIONS)
    return _declare(_http_link(url, opts, "mcp_streamable_http_server"), opts)


def mcp_connections_held() -> contextlib.AbstractAsyncContextManager[None]:
    """Held while a worker runs: once no worker of the running loop holds it, every MCP
    connection of that loop closes (a later call opens another)."""
    return _HOLDS.held()


# -- internals ---------------------------------------------------------------------------

# every server's link
_LINKS: weakref.WeakSet[_Link] = weakref.WeakSet()
T = TypeVar("T")


async def _close_loop(_loop: asyncio.AbstractEventLoop) -> None:
    """The last worker of the running loop stopped: close the loop's connections."""
    closing = asyncio.ensure_future(_close_here())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        # a runtime's close() cancels its worker tasks once they have shut down (this runs
        # after): the servers still stop before it returns (a second cancel leaves them
        # stopping on their own)
        await asyncio.wait([closing])
        raise


async def _close_here() -> None:
    for link in list(_LINKS):
        await link.close_here()


_HOLDS = LoopHolds(_close_loop)


def _stdio_link(server: Any, opts: Mapping[str, Any], caller: str) -> _Link:
    mcp = _import_mcp()
    if isinstance(server, Mapping):
        check_options("MCPStdioServer", server, _SERVER_KEYS)
        if not isinstance(server.get("command"), str) or not server["command"]:
            raise OptionError(f'{caller}(): server needs a "command" string')
        server = mcp.StdioServerParameters(
            command=server["command"],
            args=list(server.get("args") or []),
            env=dict(server["env"]) if server.get("env") else None,
            cwd=server.get("cwd"),
        )
    elif not isinstance(server, mcp.StdioServerParameters):
        raise OptionError(
            f"{caller}(): server must be a mapping with a command or an "
            f"mcp.StdioServerParameters, got {type(server).__name__}"
        )
    where = f"MCP stdio server {server.command!r}"
    return _Link(lambda: _client(mcp, server, opts), where)


def _http_link(url: str, opts: Mapping[str, Any], caller: str) -> _Link:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise OptionError(f"{caller}(): expected an http(s) URL, got {url!r}")
    headers = opts.get("headers")
    if headers is not None and not (
        isinstance(headers, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise OptionError(f"{caller}(): headers must map str to str")
    mcp = _import_mcp()

    def transport() -> Any:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        timeout = None
        if opts.get("timeout_seconds") is not None:
            timeout = httpx2.Timeout(float(opts["timeout_seconds"]), read=300.0)
        http = create_mcp_http_client(
            headers=dict(headers or {}), timeout=timeout, auth=opts.get("auth_provider")
        )
        return _client(
            mcp, _with_http_client(http, streamable_http_client(url, http_client=http)), opts
        )

    return _Link(transport, f"MCP server {url}")


def _import_mcp() -> Any:
    try:
        import mcp
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            'MCP tools need the "mcp" package: pip install "agent-lattice[mcp]"'
        ) from None
    return mcp


def _client(mcp: Any, server: Any, opts: Mapping[str, Any]) -> Any:
    return mcp.Client(server, read_timeout_seconds=opts.get("read_timeout_seconds"))


class _with_http_client:
    """A transport that also closes the HTTP client it was built with."""

    def __init__(self, http: Any, inner: Any) -> None:
        self._http, self._inner = http, inner

    async def __aenter__(self) -> Any:
        await self._http.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            await self._http.__aexit__(None, None, None)


class _Owner:
    """Enters a client in a task of its own (on the loop that made it) and exits it there on
    ``close()``."""

    def __init__(self, make_client: Callable[[], Any], where: str) -> None:
        self._make_client = make_client
        self._where = where
        self._ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._error: BaseException | None = None  # what ended the connection, once open
        self._task = asyncio.create_task(self._hold(), name=f"lattice-mcp {where}")

    async def _hold(self) -> None:
        try:
            async with self._make_client() as client:
                self._ready.set_result(client)
                await self._closing.wait()
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.cancel()  # a future cannot hold a CancelledError
            raise
        except Exception as err:
            if not self._ready.done():
                self._ready.set_exception(err)
            else:  # the transport failed (an HTTP server gone): the next call says so
                self._error = err

    async def client(self) -> Any:
        try:
            return await asyncio.shield(self._ready)  # one caller's cancel is not the others'
        except Exception as err:
            raise ConfigurationError(
                f"could not connect to {self._where}: {describe_error(err)}"
            ) from err

    @property
    def failed(self) -> bool:
        """It never connected."""
        ready = self._ready
        return ready.done() and (ready.cancelled() or ready.exception() is not None)

    @property
    def broken(self) -> bool:
        """The connection ended other than by ``close()``."""
        return self._task.done() and not self._closing.is_set()

    def why(self, fallback: str) -> str:
        """What ended the connection, if it knows (a transport's error), else ``fallback``."""
        return describe_error(self._error) if self._error is not None else fallback

    def stop_soon(self) -> None:
        """``close()`` from another thread (or a loop that no longer runs): it ends there."""
        with contextlib.suppress(RuntimeError):  # that loop is closed: its tasks are gone
            self._task.get_loop().call_soon_threadsafe(self._closing.set)

    async def close(self) -> None:
        self._closing.set()
        if not self._task.done():
            await asyncio.wait([self._task])


class _Link:
    """One MCP server as its tools reach it: a connection per event loop, opened on first use
    by a call on that loop (or by ``connect_*``), replaced after the server drops it."""

    def __init__(self, make_client: Callable[[], Any], where: str) -> None:
        self._make_client = make_client
        self.where = where
        self.label = where  # the server's own name, once a connection has learnt it
        self.last_client: Any = None
        self._by_loop: dict[asyncio.AbstractEventLoop, _Owner] = {}
        _LINKS.add(self)

    async def connection(self) -> tuple[_Owner, Any]:
        """The running loop's connection and its client, opened now if it has none."""
        loop = asyncio.get_running_loop()
        for gone in [lp for lp in self._by_loop if lp.is_closed()]:
            del self._by_loop[gone]
        owner = self._by_loop.get(loop)
        if owner is None:
            owner = self._by_loop[loop] = _Owner(self._make_client, self.where)
        try:
            client = await owner.client()
        except BaseException:
            if owner.failed:  # the next call tries again (not when only this caller stopped)
                self._forget(loop, owner)
            raise
        self.learn(client)
        return owner, client

    def learn(self, client: Any) -> None:
        self.last_client = client
        with contextlib.suppress(Exception):  # a server need not say its name
            name = client.server_info.name
            if name:
                self.label = f"MCP server {name!r}"

    async def call(self, server_name: str, arguments: Any) -> ToolResult:
        try:
            owner, client = await self.connection()
        except ConfigurationError as err:
            return ToolResult(content=str(err), is_error=True)
        if owner.broken:
            await self._drop(owner)
            return self._lost(owner.why("the connection ended"), "this call was not made")
        try:
            result = await client.call_tool(server_name, arguments)
        except Exception as err:
            if not (owner.broken or _connection_lost(err)):
                raise  # the server's own error about this call: the connection is fine
            await self._drop(owner)  # its transport's error, if any, is known once it ends
            return self._lost(owner.why(describe_error(err)), "this call may not have run")
        return tool_result(result)

    def _lost(self, why: str, outcome: str) -> ToolResult:
        return ToolResult(
            content=f"{self.label}: connection lost ({why}); {outcome}. The next call "
            "reconnects (a restarted server may have lost its state).",
            is_error=True,
        )

    def _forget(self, loop: asyncio.AbstractEventLoop, owner: _Owner) -> None:
        if self._by_loop.get(loop) is owner:
            del self._by_loop[loop]

    async def _drop(self, owner: _Owner) -> None:
        self._forget(asyncio.get_running_loop(), owner)
        await owner.close()

    async def close_here(self) -> None:
        """Close the running loop's connection."""
        owner = self._by_loop.pop(asyncio.get_running_loop(), None)
        if owner is not None:
            await owner.close()

    async def close(self) -> None:
        """Close every loop's connection: the running loop's now, others' on their loops."""
        here = asyncio.get_running_loop()
        for loop, owner in list(self._by_loop.items()):
            if loop is not here:
                del self._by_loop[loop]
                owner.stop_soon()
        await self.close_here()


async def _connect(link: _Link, opts: Mapping[str, Any]) -> MCPConnection:
    _owner, client = await link.connection()
    try:
        tools = await _tools_of(client, opts, link.call)
    except BaseException:
        await link.close()
        raise
    return MCPConnection(tools, link)


def _declare(link: _Link, opts: Mapping[str, Any]) -> MCPConnection:
    """The server's tools, listed now by a connection of a loop of its own (this thread may
    run a loop, or none); their calls connect on the loop that runs them."""

    async def listed() -> list[ToolDefinition[Any]]:
        _owner, client = await link.connection()
        try:
            return await _tools_of(client, opts, link.call)
        finally:
            await link.close_here()

    return MCPConnection(_in_own_loop(listed), link)


def _in_own_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with ThreadPoolExecutor(1, thread_name_prefix="lattice-mcp") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def _connection_lost(err: Exception) -> bool:
    """Whether a call failed because its connection is gone (not by the server's answer)."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(err, MCPError):
        return err.code == CONNECTION_CLOSED
    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
    return isinstance(err, closed | ConnectionError)


def _check_client(client: Any) -> None:
    if not (
        callable(getattr(client, "list_tools", None))
        and callable(getattr(client, "call_tool", None))
    ):
        raise OptionError(
            "create_mcp_tools(): client must have async list_tools() and call_tool(name, arguments)"
        )


async def _tools_of(
    client: Any,
    opts: Mapping[str, Any],
    call: Callable[[str, Any], Awaitable[ToolResult]],
) -> list[ToolDefinition[Any]]:
    """Agent tools for what ``client`` lists; ``call(server_name, arguments)`` runs one."""
    prefix = opts.get("name_prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise OptionError("MCP tools: name_prefix must be a non-empty string")
    include = opts.get("include")
    if include is not None and (
        isinstance(include, str) or not all(isinstance(n, str) for n in include)
    ):
        raise OptionError("MCP tools: include must be a list of tool names")
    listed = await _list_all(client)
    if include is not None:
        unknown = sorted(set(include) - {t.name for t in listed})
        if unknown:
            raise OptionError(f"MCP tools: include names tools the server does not list: {unknown}")
        listed = [t for t in listed if t.name in set(include)]
    tools: list[ToolDefinition[Any]] = []
    seen: dict[str, str] = {}
    for listing in listed:
        name = _agent_tool_name(listing.name, prefix)
        if name in seen:
            raise OptionError(
                f"MCP tools: server tools {seen[name]!r} and {listing.name!r} both map to "
                f"agent tool name {name!r}; use include= to pick one"
            )
        seen[name] = listing.name
        tools.append(_mcp_tool(call, listing, name, bool(opts.get("cheap", False))))
    return tools


async def _list_all(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await (client.list_tools(cursor=cursor) if cursor else client.list_tools())
        tools.extend(page.tools)
        cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
        if not cursor:
            return tools


def _agent_tool_name(server_name: str, prefix: str | None) -> str:
    name = _TOOL_NAME.sub("_", f"{prefix}_{server_name}" if prefix else server_name)
    return name[:_MAX_TOOL_NAME]


def _mcp_tool(
    call_tool: Callable[[str, Any], Awaitable[ToolResult]], listing: Any, name: str, cheap: bool
) -> ToolDefinition[Any]:
    schema = dict(field_of(listing, "input_schema", "inputSchema") or {"type": "object"})
    schema.setdefault("type", "object")
    schema, validator = schema_of(schema, where=f"MCP tool {listing.name!r}")
    annotations = getattr(listing, "annotations", None)
    read_only = bool(annotations and field_of(annotations, "read_only_hint", "readOnlyHint"))
    server_name = listing.name

    async def call(arguments: Any) -> ToolResult:
        return await call_tool(server_name, arguments)

    return ToolDefinition(
        name=name,
        description=listing.description or listing.title or f"MCP tool {server_name}",
        input_schema=schema,
        handler=call,
        validator=validator,
        is_concurrency_safe=(lambda _input: True) if read_only else None,
        metadata={"mcp_tool": server_name},
        cheap=cheap,
    )
