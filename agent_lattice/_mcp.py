"""MCP tools: expose an MCP server's tools as agent tools (seeds: MCP Tools).

A connection is held open by a task of its own, so any task — the worker's tool activities
included — may call through it, and ``close()`` works from wherever it is awaited. Tool calls
run in the worker process like any other tool; the connection must live there too (an inline
script's agents, or the app module a ``lattice worker`` serves).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ._errors import ConfigurationError, OptionError
from ._options import check_options
from ._tools import ToolDefinition, ToolResult, schema_of

__all__ = [
    "MCPClient",
    "MCPConnection",
    "connect_mcp_stdio_server",
    "connect_mcp_streamable_http_server",
    "create_mcp_tools",
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
    """An open MCP server connection and its tools; ``await close()`` (or ``async with``)."""

    def __init__(self, tools: list[ToolDefinition[Any]], client: Any, owner: _Owner) -> None:
        self.tools = tools
        self.client = client
        self._owner = owner

    async def close(self) -> None:
        await self._owner.close()

    async def __aenter__(self) -> MCPConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def create_mcp_tools(
    client: MCPClient, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> list[ToolDefinition[Any]]:
    """Agent tools for every tool ``client`` lists (all pages).

    Options: ``name_prefix`` (tool ``search`` becomes ``<prefix>_search``), ``include`` (only
    these server tool names), ``cheap`` (run calls as local activities). A tool the server marks
    ``readOnlyHint`` may run concurrently with other safe calls.
    """
    opts = {**(options or {}), **kwargs}
    check_options("MCPToolsOptions", opts, _TOOLS_OPTIONS)
    return await _tools_of(client, opts)


async def connect_mcp_stdio_server(
    server: Any, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """Launch an MCP server as a subprocess (``{"command", "args", "env", "cwd"}`` or an
    ``mcp.StdioServerParameters``) and expose its tools."""
    opts = {**(options or {}), **kwargs}
    check_options("MCPStdioOptions", opts, _STDIO_OPTIONS)
    mcp = _import_mcp()
    if isinstance(server, Mapping):
        check_options("MCPStdioServer", server, _SERVER_KEYS)
        if not isinstance(server.get("command"), str) or not server["command"]:
            raise OptionError('connect_mcp_stdio_server(): server needs a "command" string')
        server = mcp.StdioServerParameters(
            command=server["command"],
            args=list(server.get("args") or []),
            env=dict(server["env"]) if server.get("env") else None,
            cwd=server.get("cwd"),
        )
    elif not isinstance(server, mcp.StdioServerParameters):
        raise OptionError(
            "connect_mcp_stdio_server(): server must be a mapping with a command or an "
            f"mcp.StdioServerParameters, got {type(server).__name__}"
        )
    where = f"MCP stdio server {server.command!r}"
    return await _connect(lambda: _client(mcp, server, opts), opts, where)


async def connect_mcp_streamable_http_server(
    url: str, options: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> MCPConnection:
    """Connect a remote Streamable HTTP MCP server.

    ``headers`` go with every request; ``auth_provider`` is an MCP ``OAuthClientProvider`` (or
    any ``httpx2.Auth``) for servers that require OAuth; ``timeout_seconds`` bounds each HTTP
    request (server streams may stay open longer).
    """
    opts = {**(options or {}), **kwargs}
    check_options("MCPStreamableHTTPOptions", opts, _HTTP_OPTIONS)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise OptionError(
            f"connect_mcp_streamable_http_server(): expected an http(s) URL, got {url!r}"
        )
    headers = opts.get("headers")
    if headers is not None and not (
        isinstance(headers, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise OptionError("connect_mcp_streamable_http_server(): headers must map str to str")
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

    return await _connect(transport, opts, f"MCP server {url}")


# -- internals ---------------------------------------------------------------------------


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
    """Enters a client in a task of its own and exits it there on ``close()``."""

    def __init__(self, make_client: Any, where: str) -> None:
        self._make_client = make_client
        self._where = where
        self._ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=f"lattice-mcp {where}")

    async def _hold(self) -> None:
        try:
            async with self._make_client() as client:
                self._ready.set_result(client)
                await self._closing.wait()
        except BaseException as err:
            if not self._ready.done():
                if isinstance(err, asyncio.CancelledError):
                    self._ready.cancel()  # a future cannot hold a CancelledError
                    raise
                self._ready.set_exception(err)
            elif not isinstance(err, asyncio.CancelledError):
                raise

    async def client(self) -> Any:
        try:
            return await self._ready
        except Exception as err:
            raise ConfigurationError(
                f"could not connect to {self._where}: {_describe(err)}"
            ) from err

    async def close(self) -> None:
        self._closing.set()
        if not self._task.done():
            await self._task


async def _connect(make_client: Any, opts: Mapping[str, Any], where: str) -> MCPConnection:
    owner = _Owner(make_client, where)
    client = await owner.client()
    try:
        tools = await _tools_of(client, opts)
    except BaseException:
        await owner.close()
        raise
    return MCPConnection(tools, client, owner)


async def _tools_of(client: Any, opts: Mapping[str, Any]) -> list[ToolDefinition[Any]]:
    if not (
        callable(getattr(client, "list_tools", None))
        and callable(getattr(client, "call_tool", None))
    ):
        raise OptionError(
            "create_mcp_tools(): client must have async list_tools() and call_tool(name, arguments)"
        )
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
        tools.append(_mcp_tool(client, listing, name, bool(opts.get("cheap", False))))
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


def _mcp_tool(client: Any, listing: Any, name: str, cheap: bool) -> ToolDefinition[Any]:
    schema = dict(_field(listing, "input_schema", "inputSchema") or {"type": "object"})
    schema.setdefault("type", "object")
    schema, validator = schema_of(schema, where=f"MCP tool {listing.name!r}")
    annotations = getattr(listing, "annotations", None)
    read_only = bool(annotations and _field(annotations, "read_only_hint", "readOnlyHint"))
    server_name = listing.name

    async def call(arguments: Any) -> ToolResult:
        result = await client.call_tool(server_name, arguments)
        return ToolResult(
            content=_content_blocks(result),
            is_error=bool(_field(result, "is_error", "isError")),
        )

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


def _field(obj: Any, *names: str) -> Any:
    for n in names:
        value = getattr(obj, n, None)
        if value is not None:
            return value
    return None


def _content_blocks(result: Any) -> list[dict[str, Any]] | str:
    """MCP content → Anthropic tool_result content (text, images; resources as text)."""
    blocks: list[dict[str, Any]] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append({"type": "text", "text": item.text})
        elif kind == "image":
            media = _field(item, "mime_type", "mimeType")
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": media, "data": item.data},
                }
            )
        elif kind == "resource":
            res = item.resource
            text = getattr(res, "text", None)
            blocks.append(
                {
                    "type": "text",
                    "text": text if text is not None else f"[binary resource {res.uri}]",
                }
            )
        elif kind == "resource_link":
            blocks.append({"type": "text", "text": f"[resource {item.name}: {item.uri}]"})
        else:
            blocks.append({"type": "text", "text": f"[unsupported MCP content: {kind}]"})
    structured = _field(result, "structured_content", "structuredContent")
    if not blocks and structured is not None:
        import json

        blocks.append({"type": "text", "text": json.dumps(structured, ensure_ascii=False)})
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return blocks[0]["text"]
    return blocks or ""


def _describe(err: BaseException) -> str:
    if isinstance(err, BaseExceptionGroup):
        leaves = [e for e in _leaves(err)]
        if leaves:
            err = leaves[0]
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _leaves(group: BaseExceptionGroup[Any]) -> Sequence[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out
