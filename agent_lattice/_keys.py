"""Encryption keys: ``KEY_ID:BASE64_KEY`` entries, validated, and the AES-256-GCM they key.

One set of keys encrypts a deployment (``LATTICE_ENCRYPTION_KEYS``,
``LATTICE_ENCRYPTION_KEYS_FILE``, ``encryption_keys=``): the Temporal payloads
(``worker/_encryption``), the live channel (``live/_keys``), the transcript store and the
history stores that ask (``history/_at_rest``). The first key encrypts, every listed key decrypts, so
a key is rotated by putting a new one first and keeping the old ones while what was written
with them may still be read. Errors name a key by its id, never by its material.
``cryptography`` (the ``encryption`` extra) is imported only when keys are given: the core
install does not need it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _settings
from ._errors import ConfigurationError

__all__ = [
    "EXTRA",
    "KEY_BYTES",
    "NONCE_BYTES",
    "EncryptionKeys",
    "EncryptionKeysLike",
    "UnknownEncryptionKeyError",
    "aes_gcm",
    "keys_of",
    "process_keys",
    "use_process_keys",
]

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's standard nonce, sent before the ciphertext
EXTRA = 'pip install "agent-lattice[encryption]"'
# A key id: short and plain. A base64 key (44 characters with "=") never passes for one, so
# an entry written the wrong way round (BASE64_KEY:KEY_ID) is refused without showing it.
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,40}")
_BAD_ID = "a key id is 1 to 40 letters, digits, '.', '_' or '-' (its text is not shown)"


class UnknownEncryptionKeyError(ConfigurationError):
    """A payload or a stored record (a transcript's, a history store's) names a key this
    process was not given, or does not decrypt with it. ``key_id`` names the key."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id

    @classmethod
    def lacking(cls, what: str, key_id: str, held: list[str]) -> UnknownEncryptionKeyError:
        """``what`` (a payload, a transcript message...) is under ``key_id``, which is not
        among the ids this process ``held``."""
        return cls(
            f"{what} is encrypted with key {key_id!r}, which this process was not given "
            f"(its keys: {', '.join(held)}); add that key to LATTICE_ENCRYPTION_KEYS after the "
            "current one",
            key_id,
        )


@dataclasses.dataclass(frozen=True, repr=False)
class EncryptionKeys:
    """Validated AES-256 keys by id, in order: the first encrypts, all decrypt.

    Its ``repr`` names the key ids only: the keys never reach a log or a traceback."""

    keys: tuple[tuple[str, bytes], ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError("encryption keys: none given")
        seen: set[str] = set()
        for key_id, key in self.keys:
            if not _KEY_ID.fullmatch(key_id):
                raise ConfigurationError(_BAD_ID)
            if key_id in seen:
                raise ConfigurationError(f"encryption key id {key_id!r} is listed twice")
            seen.add(key_id)
            if len(key) != KEY_BYTES:
                raise ConfigurationError(
                    f"encryption key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES} "
                    "(make one with: openssl rand -base64 32)"
                )

    @property
    def ids(self) -> list[str]:
        return [key_id for key_id, _ in self.keys]

    def __repr__(self) -> str:
        return f"EncryptionKeys(ids={self.ids})"

    @classmethod
    def parse(cls, text: str, source: str = "encryption keys") -> EncryptionKeys:
        """Keys from ``KEY_ID:BASE64_KEY`` entries separated by commas or lines (blank lines
        and ``#`` comments skipped); ``source`` names where they came from in errors."""
        keys: list[tuple[str, bytes]] = []
        entries = (e.strip() for line in text.splitlines() for e in line.split("#")[0].split(","))
        for number, entry in enumerate((e for e in entries if e), start=1):
            key_id, sep, material = (part.strip() for part in entry.partition(":"))
            if not sep or not key_id:  # perhaps a bare key: never shown
                raise ConfigurationError(
                    f"{source}: entry {number} is not KEY_ID:BASE64_KEY (its text is not shown)"
                )
            if not _KEY_ID.fullmatch(key_id):
                raise ConfigurationError(f"{source}: entry {number}: {_BAD_ID}")
            try:
                key = base64.b64decode(material, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigurationError(f"{source}: key {key_id!r} is not valid base64") from None
            keys.append((key_id, key))
        if not keys:
            raise ConfigurationError(f"{source}: no KEY_ID:BASE64_KEY entry")
        try:
            return cls(tuple(keys))
        except ConfigurationError as err:
            raise ConfigurationError(f"{source}: {err}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], source: str | None = None) -> EncryptionKeys:
        """Keys from a file (a mounted secret) in the same format."""
        where = source or f"encryption keys file {os.fspath(path)}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigurationError(f"{where}: cannot read it ({err.strerror})") from None
        return cls.parse(text, where)

    @classmethod
    def from_settings(cls) -> EncryptionKeys | None:
        """``LATTICE_ENCRYPTION_KEYS`` or ``LATTICE_ENCRYPTION_KEYS_FILE`` (one of them), or
        None when neither is set: no encryption."""
        text, path = _settings.encryption_keys(), _settings.encryption_keys_file()
        if text and path:
            raise ConfigurationError(
                "set LATTICE_ENCRYPTION_KEYS or LATTICE_ENCRYPTION_KEYS_FILE, not both"
            )
        if text:
            return cls.parse(text, "LATTICE_ENCRYPTION_KEYS")
        if path:
            return cls.from_file(path, f"LATTICE_ENCRYPTION_KEYS_FILE={path}")
        return None

    @classmethod
    def of(cls, given: EncryptionKeysLike | None) -> EncryptionKeys | None:
        """``encryption_keys=`` as given (keys, their text, or ids to key bytes in order),
        else the settings."""
        if given is None:
            return cls.from_settings()
        if isinstance(given, EncryptionKeys):
            return given
        if isinstance(given, str):
            return cls.parse(given, "encryption_keys")
        items = given.items() if isinstance(given, Mapping) else given
        return cls(tuple((str(key_id), bytes(key)) for key_id, key in items))


EncryptionKeysLike = EncryptionKeys | str | Mapping[str, bytes] | Sequence[tuple[str, bytes]]


def aes_gcm(key: bytes, what: str) -> Any:
    """An AES-GCM cipher of ``key`` (``cryptography``'s); ``what`` needs it, said when the
    extra is missing."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigurationError(
            f"{what} (encryption keys are set) needs the `encryption` extra: {EXTRA}"
        ) from None
    return AESGCM(key)


def keys_of(codec: object) -> EncryptionKeys | None:
    """The encryption keys of a payload codec (an ``EncryptionCodec``'s ``keys``), else None:
    how a client's or a worker's transcript store learns its keys from its data converter."""
    keys = getattr(codec, "keys", None)
    return keys if isinstance(keys, EncryptionKeys) else None


# -- the keys of this process's lattice runtime ------------------------------------------------

_LOCK = threading.Lock()
_PROCESS: list[tuple[EncryptionKeys, bool]] = []  # [(keys, given explicitly)]


def use_process_keys(keys: EncryptionKeys, *, explicit: bool) -> None:
    """The keys this process's lattice clients and workers encrypt payloads with (a
    ``LatticePlugin``'s): what a history store created with ``encryption_keys="runtime"``
    uses. Keys given explicitly (``Runtime.connect(encryption_keys=)``) win over keys read
    from the settings; the last given wins."""
    with _LOCK:
        if explicit or not _PROCESS or not _PROCESS[0][1]:
            _PROCESS[:] = [(keys, explicit)]


def process_keys() -> EncryptionKeys | None:
    """This process's lattice keys (:func:`use_process_keys`), else the settings', else None."""
    with _LOCK:
        if _PROCESS:
            return _PROCESS[0][0]
    return EncryptionKeys.from_settings()
