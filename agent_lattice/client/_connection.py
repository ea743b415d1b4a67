"""Where a process connects to Temporal, read the way the Temporal CLI and SDKs read it.

``temporalio.envconfig`` reads a profile from the TOML config file (``TEMPORAL_CONFIG_FILE``,
default ``~/.config/temporalio/temporal.toml``; ``TEMPORAL_PROFILE`` picks the profile, else
``default``) with the ``TEMPORAL_*`` environment variables over it; explicit arguments
(``Runtime.connect(...)``, the CLI's flags) go over both, and defaults come last. No address
from anywhere: the embedded dev server.

Certificates and keys are read and parsed here, before anything connects, so a wrong path or
a file that is not PEM is one line naming the setting. The failures of a connection that are
not outages (a certificate refused either way, a server that does not speak TLS) are named by
:func:`handshake_problem`, so they fail at once instead of being retried.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS
from temporalio.service import TLSConfig

from .._errors import ConfigurationError

__all__ = ["PemSource", "TemporalConnection", "handshake_problem"]

# A certificate or key: a path to a PEM file (str or Path), or the PEM bytes themselves.
PemSource = str | Path | bytes

# How each setting is given, for the messages that name one: flag, environment variable.
CERT = "--tls-cert / TEMPORAL_TLS_CLIENT_CERT_PATH"
KEY = "--tls-key / TEMPORAL_TLS_CLIENT_KEY_PATH"
CA = "--tls-ca / TEMPORAL_TLS_SERVER_CA_CERT_PATH"
SERVER_NAME = "--tls-server-name / TEMPORAL_TLS_SERVER_NAME"
NAMESPACE = "--namespace / TEMPORAL_NAMESPACE"


@dataclass(frozen=True)
class TemporalConnection:
    """The resolved connection settings of a process: what :meth:`load` found, certificates
    already read (and checked). ``address`` None means the embedded dev server."""

    address: str | None = None
    namespace: str = "default"
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_cert: bytes | None = field(default=None, repr=False)
    tls_key: bytes | None = field(default=None, repr=False)
    tls_ca: bytes | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)
    profile: str | None = None

    @classmethod
    def load(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        tls_ca: PemSource | None = None,
        tls_server_name: str | None = None,
        profile: str | None = None,
        config_file: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> TemporalConnection:
        """The settings from the arguments, over ``env`` (default ``os.environ``), over the
        profile file, over the defaults. TLS is on when asked (``tls=True``,
        ``TEMPORAL_TLS=true``, a profile's ``[tls]``), or when a certificate, CA, server
        name or API key is given, unless turned off (``tls=False``, ``TEMPORAL_TLS=false``)."""
        env = os.environ if env is None else env
        found = _profile(profile, config_file, env)
        given = found.tls or ClientConfigTLS()
        explicit_tls = any(v is not None for v in (tls_cert, tls_key, tls_ca, tls_server_name))
        api_key = api_key if api_key is not None else found.api_key
        if tls is None:
            if explicit_tls:
                tls = True
            elif found.tls is not None:
                tls = found.tls.disabled is not True
            else:
                tls = bool(api_key)
        cert = key = ca = None
        if tls:  # with TLS off, the certificates of a profile are not used, nor read
            cert = _read("client certificate", CERT, _pick(tls_cert, given.client_cert))
            key = _read("client key", KEY, _pick(tls_key, given.client_private_key))
            ca = _read("server CA certificate", CA, _pick(tls_ca, given.server_root_ca_cert))
            _check_pem(cert, key, ca)
        return cls(
            address=address or found.address or None,
            namespace=namespace or found.namespace or "default",
            api_key=api_key or None,
            tls=tls,
            tls_cert=cert and cert.data,
            tls_key=key and key.data,
            tls_ca=ca and ca.data,
            tls_server_name=tls_server_name or given.server_name or None,
            rpc_metadata=dict(found.grpc_meta),
            profile=profile or env.get("TEMPORAL_PROFILE") or None,
        )

    @classmethod
    def given(
        cls, connection: TemporalConnection | None, address: str | None, **settings: Any
    ) -> TemporalConnection:
        """``connection`` if one was loaded already, else :meth:`load` of the settings; both
        at once is a mistake (which would win?)."""
        if connection is None:
            return cls.load(address, **settings)
        if address is not None or any(v is not None for v in settings.values()):
            raise ConfigurationError("give connection= or the connection settings, not both")
        return connection

    def embedded(self, address: str) -> TemporalConnection:
        """These settings for the embedded dev server at ``address``: plain gRPC, no
        credentials (they belong to a configured server), the same namespace."""
        return TemporalConnection(address=address, namespace=self.namespace)

    def tls_config(self) -> TLSConfig | bool:
        """What ``Client.connect(tls=)`` takes: False, or the TLS settings."""
        if not self.tls:
            return False
        return TLSConfig(
            server_root_ca_cert=self.tls_ca,
            domain=self.tls_server_name,
            client_cert=self.tls_cert,
            client_private_key=self.tls_key,
        )


def _profile(
    profile: str | None, config_file: str | Path | None, env: Mapping[str, str]
) -> ClientConfigProfile:
    named = config_file or env.get("TEMPORAL_CONFIG_FILE")
    if named and not Path(named).is_file():  # envconfig ignores a missing file silently
        setting = "the config file" if config_file else "TEMPORAL_CONFIG_FILE"
        raise ConfigurationError(f"{setting} {named} does not exist")
    try:
        return ClientConfigProfile.load(
            profile,
            config_source=Path(config_file) if config_file else None,
            override_env_vars=dict(env),
        )
    except RuntimeError as err:  # envconfig's ConfigError: a bad TOML file, an unknown profile
        where = f" (config file {named})" if named else ""
        raise ConfigurationError(f"could not load the Temporal profile{where}: {err}") from None


def _pick(explicit: PemSource | None, found: PemSource | None) -> PemSource | None:
    """An explicit ``str`` is a path; envconfig's ``str`` would be PEM text, so it is kept
    apart from the arguments'."""
    if explicit is not None:
        return explicit if isinstance(explicit, bytes) else Path(explicit)
    if isinstance(found, str):
        return found.encode()
    return found


@dataclass(frozen=True)
class _Pem:
    """A certificate or key as read, and how to name it in a message."""

    what: str  # "client certificate"
    setting: str  # its flag and environment variable
    source: PemSource  # where it was read from
    data: bytes

    def __str__(self) -> str:
        where = "" if isinstance(self.source, bytes) else f" {self.source}"
        return f"the TLS {self.what}{where} ({self.setting})"

    def refused(self, reason: str) -> ConfigurationError:
        return ConfigurationError(f"{self} {reason}")


def _read(what: str, setting: str, source: PemSource | None) -> _Pem | None:
    if source is None:
        return None
    if isinstance(source, bytes):
        return _Pem(what, setting, source, source)
    try:
        return _Pem(what, setting, source, Path(source).read_bytes())
    except OSError as err:
        raise ConfigurationError(
            f"the TLS {what} {source} ({setting}) cannot be read: {err.strerror or err}"
        ) from None


def _check_pem(cert: _Pem | None, key: _Pem | None, ca: _Pem | None) -> None:
    """Parse the certificates and key as the TLS stack will, so that a wrong file is said
    here, by name, rather than as a failed handshake (Temporal Core takes any bytes)."""
    if (cert is None) != (key is None):
        missing, setting = ("key", KEY) if key is None else ("certificate", CERT)
        raise ConfigurationError(f"mTLS needs a TLS client {missing} too ({setting})")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        try:
            context.load_verify_locations(cadata=ca.data.decode("utf-8", "replace"))
        except (ssl.SSLError, ValueError) as err:
            raise ca.refused(f"is not a PEM certificate: {_ssl_reason(err)}") from None
    if cert is None or key is None:
        return
    if b"-----BEGIN CERTIFICATE-----" not in cert.data:
        raise cert.refused("is not a PEM certificate (no BEGIN CERTIFICATE line)")
    if not re.search(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----", key.data):
        raise key.refused("is not a PEM private key (no BEGIN ... PRIVATE KEY line)")
    # the ssl module loads a certificate chain from files only
    with tempfile.TemporaryDirectory(prefix="lattice-tls-") as folder:
        cert_file, key_file = Path(folder, "cert.pem"), Path(folder, "key.pem")
        cert_file.write_bytes(cert.data)
        key_file.touch(0o600)
        key_file.write_bytes(key.data)
        try:
            context.load_cert_chain(cert_file, key_file, password=_no_password)
        except (ssl.SSLError, ValueError) as err:
            raise ConfigurationError(
                f"{cert} and {key} do not load together: {_ssl_reason(err)}"
            ) from None


def _no_password() -> bytes:
    """An encrypted key is refused rather than prompted for (Temporal Core cannot use one)."""
    raise ConfigurationError(
        f"the TLS client key ({KEY}) is encrypted: give it unencrypted (Temporal's TLS "
        "stack takes no passphrase)"
    )


def _ssl_reason(err: Exception) -> str:
    """OpenSSL's reason without its source location: "key values mismatch"."""
    if isinstance(err, ssl.SSLError) and err.reason:
        return err.reason.lower().replace("_", " ")
    return re.sub(r"\s*\(_ssl\.c:\d+\)|\[SSL\]\s*", "", str(err)).strip()


# what rustls and hyper say when the server ends a connection that TLS set up (or tried to)
_CLOSED = re.compile(
    r"close_notify|UnexpectedEof|BrokenPipe|ConnectionReset|Canceled, \"connection closed"
)
# the alerts of a server that refuses the client's certificate (or its lack of one)
_CLIENT_CERT_ALERTS = ("CertificateRequired", "BadCertificate", "UnknownCA", "AccessDenied")


def handshake_problem(err: BaseException, tls: bool) -> str | None:
    """What went wrong when a connection to the server was refused for its TLS, for a
    person; None when ``err`` is not such a failure (an outage, a refused call). A server
    that refuses a client certificate may end the connection just after the handshake:
    the first call then fails, in one of several ways (``_CLOSED``)."""
    text = str(err)
    if match := re.search(r"InvalidCertificate\((\w+)", text):
        return _server_certificate(match[1], text)
    refused_client = f"it refused the client certificate, or wants one ({CERT}, {KEY})"
    if match := re.search(r"AlertReceived\((\w+)\)", text):
        alert = match[1]
        if alert in _CLIENT_CERT_ALERTS:
            return f"the server ended the TLS handshake ({alert}): {refused_client}"
        return f"the server ended the TLS handshake: {alert}"
    if "InvalidContentType" in text or "CorruptMessage" in text:
        return "the server does not speak TLS (TLS is on: TEMPORAL_TLS=false turns it off)"
    if "call error after connection" in text and _CLOSED.search(text):
        if tls:
            return f"the server closed the connection after the TLS handshake: {refused_client}"
        return "the server closed the connection: does it want TLS? (--tls / TEMPORAL_TLS=true)"
    return None


def _server_certificate(kind: str, text: str) -> str:
    """Why the server's certificate was not accepted (rustls's ``InvalidCertificate``)."""
    if kind == "UnknownIssuer":
        return f"the server's certificate is not signed by a trusted CA ({CA})"
    if kind.startswith("NotValidForName"):
        expected = re.search(r'expected: \w+\("([^"]+)"\)', text)
        name = f" {expected[1]}" if expected else ""
        return f"the server's certificate is not valid for the name{name} ({SERVER_NAME})"
    if kind == "Expired":
        return "the server's certificate has expired"
    return f"the server's certificate was refused: {kind}"
