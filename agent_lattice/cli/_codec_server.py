"""``lattice codec-server``: Temporal's remote codec protocol, so the Temporal UI (and the
``temporal`` CLI's ``--codec-endpoint``) show the payloads of encrypted runs decrypted.

The protocol: ``POST /encode`` and ``POST /decode`` (also under ``/{namespace}/``) take and
return ``{"payloads": [...]}``, payloads in protobuf's JSON form (base64 metadata values and
data). The UI calls it from the operator's browser: the server answers CORS preflights
(``OPTIONS``) for the UI's origins (``--cors-origin``). Whoever can reach it can decrypt: it listens on 127.0.0.1 unless told
otherwise and checks no credentials itself (put it behind the network policy or an
authenticating proxy that guards the UI).

Served with Starlette on uvicorn (the ``encryption`` extra; both are in the tree already through
``mcp``): proper CORS handling and a production HTTP server, not ``http.server``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from .._errors import ConfigurationError
from ..worker._encryption import EXTRA, EncryptionCodec, EncryptionKeys, UnknownEncryptionKeyError
from ._keys import EncryptionKeysFile, encryption_keys_from_flag
from ._logs import log_options
from ._plumbing import errors_as_exit, execute, note, on_signals, say

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["codec_app", "codec_server"]

log = logging.getLogger("agent_lattice.codec_server")

# The embedded dev server's UI (gRPC 7233 + 1000), under both of its usual names.
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
# what the UI sends: its JSON body, the namespace, and (when so set) the user's token
ALLOWED_HEADERS = ["content-type", "x-namespace", "authorization"]


def codec_app(codec: EncryptionCodec, origins: list[str]) -> Starlette:
    """The codec server's application: ``/encode``, ``/decode`` and their CORS."""
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
        try:
            given = json_format.Parse(await request.body(), Payloads())
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
    return Starlette(routes=routes, middleware=[cors])


@log_options("INFO")
def codec_server(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8081,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="An origin of the Temporal UI allowed to call it from a browser (repeatable; "
            f"default {', '.join(DEFAULT_ORIGINS)}, the embedded server's UI).",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    keys_file: EncryptionKeysFile = None,
) -> None:
    """Serve Temporal's remote codec protocol with this deployment's encryption keys.

    Point the Temporal UI at it (Settings → Codec Server, or the UI server's codec endpoint
    setting) to see encrypted payloads decrypted: POST /encode and POST /decode. Keys:
    --encryption-keys-file, else LATTICE_ENCRYPTION_KEYS[_FILE]. It checks no credentials:
    anyone who can reach it can decrypt, so it listens on 127.0.0.1 by default.
    """
    origins = [origin.rstrip("/") for origin in cors_origin or DEFAULT_ORIGINS]
    with errors_as_exit():
        keys = encryption_keys_from_flag(keys_file) or EncryptionKeys.from_settings()
        if keys is None:
            raise ConfigurationError(
                "no encryption keys: give --encryption-keys-file or set LATTICE_ENCRYPTION_KEYS "
                "(or LATTICE_ENCRYPTION_KEYS_FILE)"
            )
        app = codec_app(EncryptionCodec(keys), origins)
        listener = _listen(host, port)
    execute(lambda: _serve(app, listener, keys, origins), spinner=False)


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
    app: Starlette, listener: socket.socket, keys: EncryptionKeys, origins: list[str]
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
    # uvicorn's records go to this process's log set-up (no logging config of its own)
    server = Server(uvicorn.Config(app, log_level="warning", lifespan="off", log_config=None))

    def stop(signum: int) -> None:
        server.should_exit = True

    with on_signals(stop, signal.SIGINT, signal.SIGTERM):
        await server.serve(sockets=[listener])
    note("codec server stopped")
    return 0
