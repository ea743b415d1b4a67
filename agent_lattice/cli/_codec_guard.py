"""What ``lattice codec-server`` asks of a request before it decrypts anything: a Host header
it answers to (against DNS rebinding), a caller it knows (a bearer token, or the Temporal UI
user's access token verified as a JWT against the identity provider's JWKS), and a body
within its limit (read no further than the limit).

``Access.refusal`` and ``read_limited`` are used by the endpoints (after CORS, so a refusal
carries the CORS headers a browser needs to read it); ``HostGuard`` wraps the whole app.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError
from ..worker._encryption import EXTRA

__all__ = [
    "DEFAULT_MAX_BODY",
    "Access",
    "HostGuard",
    "JwtVerifier",
    "allowed_hosts",
    "is_loopback",
    "read_limited",
]

# Temporal's default payload limit (2 MB, as base64 2.7 MB) with room for JSON and metadata
DEFAULT_MAX_BODY = 4 * 1024 * 1024
# asymmetric signatures only: an access token is signed by the identity provider's private
# key (an HMAC algorithm would let the public JWKS sign tokens)
JWT_ALGORITHMS = [
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
]
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the server to this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(listening: str, extra: Iterable[str]) -> frozenset[str]:
    """The names a request's Host header may carry: this machine's loopback names, the
    address it listens on (unless a wildcard one), and ``extra`` (``*``: any)."""
    names = {*LOCAL_NAMES, *(e.strip().lower().strip("[]") for e in extra if e.strip())}
    if listening not in ("0.0.0.0", "::", ""):
        names.add(listening.lower().strip("[]"))
    return frozenset(names)


def _host_name(header: str) -> str:
    """``name`` of a Host header ``name[:port]`` (``[v6]:port`` too), lower case."""
    host = header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class HostGuard:
    """ASGI middleware: a request whose Host header names none of ``allowed`` is answered
    400 before anything else looks at it (a page on another site whose name was rebound to
    this address sends its own name)."""

    def __init__(self, app: Any, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and "*" not in self.allowed:
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if _host_name(host) not in self.allowed:
                body = json.dumps(
                    {"error": f"Host {host!r} is not one this codec server answers to "
                     "(--allowed-host)"}
                ).encode()  # fmt: skip
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class JwtVerifier:
    """Verifies the Temporal UI user's access token (its "pass access token" setting sends it
    as ``Authorization: Bearer ...``) against the identity provider's signing keys: signature,
    expiry, and the audience and issuer when given."""

    def __init__(self, jwks_url: str, audience: str | None, issuer: str | None) -> None:
        try:
            import jwt
        except ImportError:
            raise ConfigurationError(
                f"--jwks-url needs PyJWT, of the `encryption` extra: {EXTRA}"
            ) from None
        self.jwks_url = jwks_url
        self.audience = audience
        self.issuer = issuer
        self._jwks = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=10)

    async def refusal(self, token: str) -> str | None:
        """None for a valid token, else why it is refused."""
        return await asyncio.to_thread(self._refusal, token)

    def _refusal(self, token: str) -> str | None:
        import jwt

        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            jwt.decode(
                token,
                key.key,
                algorithms=JWT_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWKClientError as err:
            return f"the token's signing key: {err}"
        except jwt.InvalidTokenError as err:
            return f"the token: {err}"
        return None

    def describe(self) -> str:
        audience = self.audience or "any (no --audience)"
        return f"JWT signed by {self.jwks_url} (audience {audience}, issuer {self.issuer or 'any'})"


@dataclass(frozen=True)
class Access:
    """Who may use ``/encode`` and ``/decode``: the holder of ``token``, a user whose access
    token ``jwt`` verifies; with neither, anyone."""

    token: str | None = None
    jwt: JwtVerifier | None = field(default=None)

    @property
    def open(self) -> bool:
        return self.token is None and self.jwt is None

    async def refusal(self, authorization: str | None) -> str | None:
        """None when the ``Authorization`` header lets the caller in, else why not."""
        if self.open:
            return None
        scheme, _, given = (authorization or "").strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return "an Authorization: Bearer header is required"
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        if self.jwt is not None:
            return await self.jwt.refusal(given)
        return "the bearer token is not this codec server's"

    def describe(self) -> str:
        ways = []
        if self.token is not None:
            ways.append("bearer token")
        if self.jwt is not None:
            ways.append(self.jwt.describe())
        return " or ".join(ways) or "none"


async def read_limited(
    length: str | None, chunks: AsyncIterator[bytes], limit: int
) -> bytes | None:
    """The request body, or None once it is over ``limit`` bytes: a ``Content-Length`` over
    it is refused before reading, a streamed body as soon as it passes it."""
    if length is not None and (not length.strip().isdigit() or int(length) > limit):
        return None
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
