"""The keys of the live side channel: what lets a caller believe a line came from a worker.

A query's caller listens on a TCP port and names it, with a random channel id, in the run's
workflow input (``live/_channel``); a worker that runs the query's model requests connects and
sends live tokens and commit notices. Anything in that input is readable by whoever reads the
run's history (in plain text without payload encryption), so the channel id is a name, not a
secret: every line a worker sends is sealed with a key the caller and the worker hold and the
history never carries, and the caller refuses a line that does not open.

Where the key comes from, first found (the caller names the one it uses by its id, a
fingerprint, in the channel id; a worker seals with it when it holds it, and sends nothing
otherwise):

1. the payload encryption keys (``LATTICE_ENCRYPTION_KEYS``): a key derived from the first;
   lines are then **encrypted** (AES-256-GCM), so a capture between hosts shows no content,
   and a worker holding any listed key (a rotation under way) opens its callers' channels;
2. ``LATTICE_CHANNEL_KEY`` (or ``LATTICE_CHANNEL_KEY_FILE``): a shared secret for processes on
   several hosts without payload encryption; lines are authenticated (HMAC-SHA256), not
   encrypted;
3. ``LATTICE_HOME/channel.key``: made at first use (mode 0600) and shared by every process of
   one home, the embedded default; authenticated, not encrypted.

Each connection seals with its own key, derived from the channel's and a nonce the caller
chose for that connection, and numbers its lines: a line cannot be moved to another channel or
connection, replayed or reordered. HMAC and the derivations are the standard library's;
AES-GCM is ``cryptography``'s, which payload encryption already requires.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import _settings
from .._errors import ConfigurationError, LatticeError
from .._keys import aes_gcm

__all__ = [
    "ChannelKey",
    "ForgedLine",
    "Seal",
    "caller_channel_key",
    "channel_id",
    "channel_key_for",
    "configured_channel_key",
    "held_key",
    "kid_of",
    "learn_encryption_secrets",
    "new_nonce",
    "sealed",
]

log = logging.getLogger("agent_lattice.stream")

_CONTEXT = b"agent-lattice live channel v1"
HOME_KEY_FILE = "channel.key"
_MIN_SECRET = 16  # bytes of a configured channel key
_NONCE_BYTES = 16


class ForgedLine(LatticeError):
    """A line that does not open with the channel's key: not from a worker holding it."""


@dataclass(frozen=True, repr=False)
class ChannelKey:
    """A channel key: ``kid`` (a fingerprint, safe to show and to put in a history) names it;
    ``sealed``: lines are encrypted, not only authenticated."""

    kid: str
    root: bytes
    sealed: bool

    @classmethod
    def derive(cls, secret: bytes, *, sealed: bool) -> ChannelKey:
        root = hmac.new(secret, _CONTEXT, hashlib.sha256).digest()
        kid = ("e" if sealed else "m") + hashlib.sha256(b"kid\0" + root).hexdigest()[:16]
        return cls(kid, root, sealed)

    def __repr__(self) -> str:
        return f"ChannelKey({self.kid})"

    def seal(self, channel: str, nonce: bytes) -> Seal:
        """The seal of one connection of ``channel`` (``nonce``: the caller's, for it)."""
        return Seal(self, channel, nonce)


def new_nonce() -> bytes:
    return secrets.token_bytes(_NONCE_BYTES)


class Seal:
    """One connection's lines, numbered from 0: sealed by the worker, opened by the caller."""

    def __init__(self, key: ChannelKey, channel: str, nonce: bytes) -> None:
        material = b"connection\0" + channel.encode() + b"\0" + nonce
        self._key = hmac.new(key.root, material, hashlib.sha256).digest()
        self._seq = 0
        self._aead = aes_gcm(self._key, "the live channel's encryption") if key.sealed else None

    def _next(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def seal(self, body: bytes) -> bytes:
        """``body`` as one line (without its newline)."""
        seq = self._next()
        if self._aead is not None:
            return base64.b64encode(self._aead.encrypt(seq.to_bytes(12, "big"), body, None))
        tag = hmac.new(self._key, seq.to_bytes(8, "big") + body, hashlib.sha256).hexdigest()
        return body + b"\t" + tag.encode()

    def open(self, line: bytes) -> bytes:
        """The body of the next line; :class:`ForgedLine` when it is not the next line sealed
        with this connection's key."""
        seq = self._next()
        if self._aead is not None:
            from cryptography.exceptions import InvalidTag

            try:
                return self._aead.decrypt(seq.to_bytes(12, "big"), base64.b64decode(line), None)
            except (InvalidTag, binascii.Error, ValueError):
                raise ForgedLine("a line that does not decrypt with the channel's key") from None
        body, tab, tag = line.rpartition(b"\t")
        want = hmac.new(self._key, seq.to_bytes(8, "big") + body, hashlib.sha256).hexdigest()
        if not tab or not hmac.compare_digest(tag, want.encode()):
            raise ForgedLine("a line not signed with the channel's key")
        return body


def channel_id(key: ChannelKey) -> str:
    """A new channel id naming ``key``: ``<kid>.<random>``."""
    return f"{key.kid}.{secrets.token_urlsafe(16)}"


def kid_of(channel: str) -> str:
    return channel.partition(".")[0]


def sealed(channel: str) -> bool:
    """Whether ``channel``'s lines are encrypted (its key is an encryption key's)."""
    return kid_of(channel).startswith("e")


# -- the keys a process holds ------------------------------------------------------------------

_LOCK = threading.Lock()
_LEARNT: dict[str, ChannelKey] = {}  # from the encryption keys this process was configured with
_HOMES: dict[Path, ChannelKey | None] = {}  # LATTICE_HOME -> its key (None: none to be had)
_WARNED: set[str] = set()


def learn_encryption_secrets(secrets_: Iterable[bytes]) -> list[ChannelKey]:
    """Channel keys of payload encryption keys (the first is a caller's): a worker holding
    them opens channels of callers that encrypt with any of them."""
    keys = [ChannelKey.derive(secret, sealed=True) for secret in secrets_]
    with _LOCK:
        for key in keys:
            _LEARNT[key.kid] = key
    return keys


def caller_channel_key(encryption_secret: bytes | None = None) -> ChannelKey | None:
    """The key a caller's channels use: its first encryption key's, else the configured
    channel key, else its home's; None when it has none (its queries get no live channel)."""
    if encryption_secret is not None:
        return learn_encryption_secrets([encryption_secret])[0]
    return _configured() or _home_key()


def channel_key_for(channel: str) -> ChannelKey | None:
    """The key ``channel`` names, if this process holds it (else the caller's worker says
    once why it sends that caller nothing)."""
    kid = kid_of(channel)
    key = held_key(kid)
    if key is None and kid not in _WARNED:
        _WARNED.add(kid)
        log.warning(
            "a caller's live channel uses channel key %s, which this process does not hold: it "
            "gets no live tokens from here (give both the same LATTICE_ENCRYPTION_KEYS or "
            "LATTICE_CHANNEL_KEY, or the same LATTICE_HOME)",
            kid or "(none)",
        )
    return key


def held_key(kid: str) -> ChannelKey | None:
    """The channel key of fingerprint ``kid``, if this process holds it."""
    with _LOCK:
        key = _LEARNT.get(kid)
    if key is None:
        key = next((k for k in (_configured(), _home_key()) if k and k.kid == kid), None)
    return key


def configured_channel_key() -> ChannelKey | None:
    """``LATTICE_CHANNEL_KEY`` or ``LATTICE_CHANNEL_KEY_FILE``, if set (a ConfigurationError
    names a bad one, never its text)."""
    return _configured()


def _configured() -> ChannelKey | None:
    """``LATTICE_CHANNEL_KEY`` or ``LATTICE_CHANNEL_KEY_FILE``, if set."""
    text, path = _settings.channel_key(), _settings.channel_key_file()
    if text and path:
        raise ConfigurationError("set LATTICE_CHANNEL_KEY or LATTICE_CHANNEL_KEY_FILE, not both")
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigurationError(
                f"LATTICE_CHANNEL_KEY_FILE={path}: cannot read it ({err.strerror})"
            ) from None
        source = f"LATTICE_CHANNEL_KEY_FILE={path}"
    elif text:
        source = "LATTICE_CHANNEL_KEY"
    else:
        return None
    if len(text.encode()) < _MIN_SECRET:
        raise ConfigurationError(
            f"{source}: a channel key is a secret of at least {_MIN_SECRET} bytes "
            "(make one with: openssl rand -base64 32); its text is not shown"
        )
    return ChannelKey.derive(text.encode(), sealed=False)


def _home_key() -> ChannelKey | None:
    """``LATTICE_HOME/channel.key``, made at first use; None where it cannot be (a read-only
    home), or it is readable by others (said once)."""
    home = _settings.lattice_home()
    with _LOCK:
        if home in _HOMES:
            return _HOMES[home]
        key = _HOMES[home] = _read_or_make(home / HOME_KEY_FILE)
    return key


def _read_or_make(path: Path) -> ChannelKey | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            # written whole under another name, then linked: another process reading it at
            # once never finds it half written (and one of two making it at once wins)
            draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64encode(secrets.token_bytes(32)) + b"\n")
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
            draft.unlink()
        if path.stat().st_mode & 0o077:
            _warn_once(str(path), f"{path} is readable by other users: not used (chmod 600 it)")
            return None
        secret = path.read_bytes().strip()
    except OSError as err:
        _warn_once(str(path), f"no channel key at {path} ({err.strerror})")
        return None
    if len(secret) < _MIN_SECRET:
        _warn_once(str(path), f"{path} holds no key")
        return None
    return ChannelKey.derive(secret, sealed=False)


def _warn_once(what: str, message: str) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        log.warning(
            "%s: live channels of this process go without it "
            "(set LATTICE_CHANNEL_KEY or encryption keys)",
            message,
        )
