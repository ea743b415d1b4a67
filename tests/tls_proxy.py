"""A TLS-terminating front for the session's dev server, as a Temporal cluster with mTLS is.

``temporal server start-dev`` has no TLS flags, so the tests put this proxy before it: TLS
(ALPN ``h2``, client certificates required and checked against a test CA) on the outside,
the dev server's plain gRPC port on the inside, bytes copied both ways. The certificates are
made at test time with ``cryptography``: a CA, a server certificate for 127.0.0.1 and
``temporal.lattice.test``, client certificates signed by the CA or by another one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "temporal.lattice.test"


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


class Authority:
    """A certificate authority that issues server and client certificates into ``folder``."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = dict.fromkeys(
            ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement"),
            False,
        )
        cert = (
            self._builder(self._name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                    **usage,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        folder.mkdir(parents=True, exist_ok=True)
        self.cert = folder / f"{name}-ca.pem"
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey):
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(self, name: str, *, server: bool = False) -> Issued:
        """A certificate for ``name``: a server's (for 127.0.0.1 and SERVER_NAME) or a
        client's (its common name ``name``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        purpose = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = self._builder(subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([purpose]), critical=False
        )
        if server:
            names = [x509.DNSName(SERVER_NAME), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.folder / f"{name}.pem", self.folder / f"{name}-key.pem")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return issued


class TLSProxy:
    """Accepts TLS on 127.0.0.1 (a random port), requires a client certificate signed by
    ``client_ca``, and forwards each connection to ``upstream`` (the dev server's gRPC port).
    It runs its own event loop in a thread, so the test's loop and CLI processes both use it.
    ``clients``: the common names of the client certificates it accepted."""

    def __init__(self, upstream: str, server: Issued, client_ca: Path) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(server.cert, server.key)
        self._context.load_verify_locations(client_ca)
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._context.set_alpn_protocols(["h2"])  # gRPC speaks HTTP/2 only
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.clients: list[str] = []
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TLSProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accepted, "127.0.0.1", 0, ssl=self._context), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._forward(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        self.clients += [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            return
        pipes = [_pipe(reader, up_writer), _pipe(up_reader, writer)]
        await asyncio.gather(*pipes, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
