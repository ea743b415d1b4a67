"""``lattice codec-server``: Temporal's remote codec protocol, so the Temporal UI (and the
``temporal`` CLI's ``--codec-endpoint``) show the payloads of encrypted runs decrypted.

The protocol: ``POST /encode`` and ``POST /decode`` (also under ``/{namespace}/``) take and
return ``{"payloads": [...]}``, payloads in protobuf's JSON form (base64 metadata values and
data). The UI calls it from the operator's browser: the server answers CORS preflights
(``OPTIONS``) for the UI's origins (``--cors-origin``; by default the embedded dev server's
UI, on the port it was recorded with, and 8233).

Whoever it answers can decrypt, so (``_codec_guard``) it asks for a bearer token
(``--token-file``, ``LATTICE_CODEC_TOKEN``; the ``temporal`` CLI's ``--codec-auth``) or the
UI user's access token, verified as a JWT (``--jwks-url``: the UI's "pass access token"
setting sends it). Without either it listens on a loopback address only, unless
``--insecure-no-auth``. Every request's Host header must name it (DNS rebinding), and its
body is read no further than ``--max-body``.

Served with Starlette on uvicorn (the ``encryption`` extra; both are in the tree already through
``mcp``): proper CORS handling and a production HTTP server, not ``http.server``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from .. import _settings
from .._errors import ConfigurationError
from ..client._server import DevServer
from ..worker._encryption import EXTRA, EncryptionCodec, EncryptionKeys, UnknownEncryptionKeyError
from ._codec_guard import (
    DEFAULT_MAX_BODY,
    Access,
    HostGuard,
    JwtVerifier,
    allowed_hosts,
    is_loopback,
    read_limited,
)
from ._keys import EncryptionKeysFile, encryption_keys_from_flag
from ._logs import log_options
from ._plumbing import errors_as_exit, execute, note, on_signals, say

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["codec_app", "codec_server"]

log = logging.getLogger("agent_lattice.codec_server")

# The embedded dev server's UI by default (gRPC 7233 + 1000), under both of its usual names.
DEFAULT_UI_PORT = 8233
# what the UI sends: its JSON body, the namespace, and (with "pass access token") the user's
# access token and ID token
ALLOWED_HEADERS = ["content-type", "x-namespace", "authorization", "authorization-extras"]


def default_origins() -> list[str]:
    """The origins of the embedded dev server's UI: on the port it was last started with
    under ``LATTICE_HOME`` (its default port may have been taken), and on 8233."""
    recorded = DevServer.recorded(_settings.lattice_home())
    ports = [recorded.ui_port] if recorded is not None and recorded.ui_port else []
    return [
        f"http://{name}:{port}"
        for port in dict.fromkeys([*ports, DEFAULT_UI_PORT])
        for name in ("localhost", "127.0.0.1")
    ]


def codec_app(
    codec: EncryptionCodec,
    origins: list[str],
    *,
    access: Access | None = None,
    hosts: frozenset[str] = frozenset({"*"}),
    max_body: int = DEFAULT_MAX_BODY,
) -> Starlette:
    """The codec server's application: ``/encode``, ``/decode`` and their CORS, for the
    callers ``access`` lets in, under the Host names ``hosts``, bodies up to ``max_body``."""
    access = access or Access()
    try:
        from google.protobuf import json_format
        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.middleware.cors import CORSMiddleware
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route
        from temporalio.api.common.v1 import Payload, Payloads
    except ImportError:
        raise ConfigurationError(
            f"lattice codec-server needs the `encryption` extra: {EXTRA}"
        ) from None

    def decode_each(payloads: list[Payload]) -> list[Payload]:
        # One payload of a retired key must not hide the others the UI asked for: it is
        # returned as it is (the UI shows it encrypted) and named on stderr.
        decoded = []
        for payload in payloads:
            try:
                decoded.extend(codec.decode_sync([payload]))
            except UnknownEncryptionKeyError as err:
                log.warning("%s", err)
                decoded.append(payload)
        return decoded

    async def apply(request: Request, transform: Any) -> Response:
        refused = await access.refusal(request.headers.get("authorization"))
        if refused is not None:
            log.warning("refused a request from %s: %s", _client(request), refused)
            return JSONResponse(
                {"error": f"unauthorized: {refused}"}, 401, {"WWW-Authenticate": "Bearer"}
            )
        body = await read_limited(request.headers.get("content-length"), request.stream(), max_body)
        if body is None:
            return JSONResponse(
                {"error": f"the request body is over {max_body} bytes (--max-body)"}, 413
            )
        try:
            given = json_format.Parse(body, Payloads())
        except json_format.ParseError as err:
            return JSONResponse({"error": f"not a JSON payloads object: {err}"}, 400)
        done = Payloads(payloads=transform(list(given.payloads)))
        return Response(json_format.MessageToJson(done), media_type="application/json")

    async def encode(request: Request) -> Response:
        return await apply(request, codec.encode_sync)

    async def decode(request: Request) -> Response:
        return await apply(request, decode_each)

    cors = Middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=["POST"],
        allow_headers=ALLOWED_HEADERS,
        allow_credentials=True,  # the UI's "include cross-origin credentials" setting
    )
    # also under a namespace segment, for endpoints templated with {namespace} (temporal CLI)
    routes = [
        Route(f"{prefix}/{name}", handler, methods=["POST"])
        for prefix in ("", "/{namespace}")
        for name, handler in (("encode", encode), ("decode", decode))
    ]
    # the Host check before anything (CORS preflights included), CORS around the endpoints
    # (a refusal carries the headers a browser needs to read it)
    return Starlette(routes=routes, middleware=[Middleware(HostGuard, allowed=hosts), cors])


def _client(request: Any) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


@log_options("INFO")
def codec_server(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8081,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; one beyond this machine's loopback needs --token-file, "
            "LATTICE_CODEC_TOKEN or --jwks-url (or --insecure-no-auth)."
        ),
    ] = "127.0.0.1",
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="An origin of the Temporal UI allowed to call it from a browser (repeatable; "
            "default: the embedded dev server's UI, on the port LATTICE_HOME records and on "
            f"{DEFAULT_UI_PORT}, as localhost and 127.0.0.1).",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="A file holding the bearer token callers must send (Authorization: Bearer "
            "TOKEN; the temporal CLI's --codec-auth); default LATTICE_CODEC_TOKEN.",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    jwks_url: Annotated[
        str | None,
        typer.Option(
            "--jwks-url",
            help="Accept the Temporal UI user's access token (the UI's \"pass access token\" "
            "setting) when it is a JWT signed by a key of this JWKS, your identity provider's.",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    audience: Annotated[
        str | None,
        typer.Option(help="The audience (aud) the access token must name.", show_default=False),
    ] = None,
    issuer: Annotated[
        str | None,
        typer.Option(help="The issuer (iss) the access token must name.", show_default=False),
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="Listen beyond the loopback without asking callers for a token: anyone who "
            "reaches it can decrypt.",
        ),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A name the Host header of a request may carry besides localhost, 127.0.0.1, "
            "::1 and --host (repeatable; '*': any); others are refused (DNS rebinding).",
            show_default=False,
            metavar="NAME",
        ),
    ] = None,
    max_body: Annotated[
        int,
        typer.Option(min=1, metavar="BYTES", help="The largest request body it reads."),
    ] = DEFAULT_MAX_BODY,
    keys_file: EncryptionKeysFile = None,
) -> None:
    """Serve Temporal's remote codec protocol with this deployment's encryption keys.

    Point the Temporal UI at it (its codec server setting, choosing "Use my browser setting",
    or the UI server's codec endpoint setting) to see encrypted payloads decrypted: POST
    /encode and POST /decode. Keys: --encryption-keys-file, else
    LATTICE_ENCRYPTION_KEYS[_FILE].

    Whoever it answers can decrypt: with --token-file (or LATTICE_CODEC_TOKEN) or --jwks-url
    a request without that token is answered 401; without them it listens on a loopback
    address only, unless --insecure-no-auth.
    """
    origins = [origin.rstrip("/") for origin in cors_origin or default_origins()]
    with errors_as_exit():
        keys = encryption_keys_from_flag(keys_file) or EncryptionKeys.from_settings()
        if keys is None:
            raise ConfigurationError(
                "no encryption keys: give --encryption-keys-file or set LATTICE_ENCRYPTION_KEYS "
                "(or LATTICE_ENCRYPTION_KEYS_FILE)"
            )
        access = _access(host, token_file, jwks_url, audience, issuer, insecure_no_auth)
        hosts = allowed_hosts(host, allowed_host or [])
        app = codec_app(
            EncryptionCodec(keys), origins, access=access, hosts=hosts, max_body=max_body
        )
        listener = _listen(host, port)
    execute(lambda: _serve(app, listener, keys, origins, access, hosts, max_body), spinner=False)


def _access(
    host: str,
    token_file: Path | None,
    jwks_url: str | None,
    audience: str | None,
    issuer: str | None,
    insecure: bool,
) -> Access:
    """Who may call it, from the flags; refused: listening beyond the loopback for anyone."""
    if (audience or issuer) and not jwks_url:
        raise ConfigurationError("--audience and --issuer check a JWT: give --jwks-url too")
    token = _settings.codec_token()
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigurationError(
                f"--token-file {token_file}: cannot read it ({err.strerror})"
            ) from None
        if not token:
            raise ConfigurationError(f"--token-file {token_file}: the file is empty")
    access = Access(token=token, jwt=JwtVerifier(jwks_url, audience, issuer) if jwks_url else None)
    if access.open and not is_loopback(host) and not insecure:
        raise ConfigurationError(
            f"--host {host} reaches beyond this machine, and whoever the codec server answers "
            "can decrypt: give it a token (--token-file or LATTICE_CODEC_TOKEN) or --jwks-url "
            "to verify the UI user's access token, or --insecure-no-auth to serve anyone"
        )
    return access


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: a port in use is a usage error, and ``--port 0``'s
    port is known before it serves."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as err:
        listener.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    listener.listen(128)
    return listener


async def _serve(
    app: Starlette,
    listener: socket.socket,
    keys: EncryptionKeys,
    origins: list[str],
    access: Access,
    hosts: frozenset[str],
    max_body: int,
) -> int:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # this command's own handlers stop it (uvicorn's would re-raise the signal)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                say(Text("ready · Ctrl-C to stop", style="green"))

    host, port = listener.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    say(f"codec server on {url} · keys {', '.join(keys.ids)} (encrypting with {keys.ids[0]})")
    say(Text.assemble(("  CORS origins  ", "dim"), ", ".join(origins)))
    if access.open and not is_loopback(host):
        said = Text("none (--insecure-no-auth): anyone who reaches it can decrypt", "yellow")
    else:
        said = Text(access.describe() if not access.open else "none (loopback only)")
    say(Text.assemble(("  auth          ", "dim"), said))
    say(Text.assemble(("  Host names    ", "dim"), ", ".join(sorted(hosts))))
    say(Text.assemble(("  max body      ", "dim"), f"{max_body} bytes"))
    # uvicorn's records go to this process's log set-up (no logging config of its own)
    server = Server(uvicorn.Config(app, log_level="warning", lifespan="off", log_config=None))

    def stop(signum: int) -> None:
        server.should_exit = True

    with on_signals(stop, signal.SIGINT, signal.SIGTERM):
        await server.serve(sockets=[listener])
    note("codec server stopped")
    return 0
