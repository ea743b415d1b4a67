"""A TLS-terminating front for the session's dev server, as a Temporal cluster with mTLS is.

``temporal server start-dev`` has no TLS flags, so the tests put this proxy before it: TLS
(ALPN ``h2``, client certificates required and checked against a test CA) on the outside,
the dev server's plain gRPC port on the inside, bytes copied both ways. The certificates are
made at test time with ``cryptography``: a CA, a server certificate for 127.0.0.1 and
``temporal.lattice.test``, client certificates signed by the CA or by another one.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from forwarder import Forwarder

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
    ``client_ca``, and forwards each connection to ``upstream`` (the dev server's gRPC port),
    through a ``Forwarder`` (its own loop in a thread, so the test's loop and CLI processes
    both use it). ``clients``: the common names of the client certificates it accepted."""

    def __init__(self, upstream: str, server: Issued, client_ca: Path) -> None:
        self._upstream = upstream
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(server.cert, server.key)
        self._context.load_verify_locations(client_ca)
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._context.set_alpn_protocols(["h2"])  # gRPC speaks HTTP/2 only
        self._forwarder: Forwarder | None = None
        self.clients: list[str] = []

    @property
    def address(self) -> str:
        assert self._forwarder is not None
        return self._forwarder.address

    def __enter__(self) -> TLSProxy:
        self._forwarder = Forwarder(self._upstream, ssl=self._context, accepted=self._accepted)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._forwarder is not None
        self._forwarder.close()

    def _accepted(self, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        self.clients += [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
