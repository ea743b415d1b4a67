"""Payload encryption: AES-256-GCM keys, the Temporal payload codec, the converter that uses it.

Every payload a lattice process hands Temporal (workflow inputs and results, activity
arguments and results, signals, updates, memos, summaries, failure messages) goes through
one data converter (``LatticePlugin``'s). With keys configured that converter carries an
:class:`EncryptionCodec`: the server, its database and anyone reading a history see
``binary/encrypted`` payloads whose metadata names the key (``encryption-key-id``), the same
format as Temporal's encryption samples, so their codec servers read it too.

Keys (``LATTICE_ENCRYPTION_KEYS``, ``LATTICE_ENCRYPTION_KEYS_FILE``, ``encryption_keys=``)
are ``KEY_ID:BASE64_KEY`` entries, comma- or line-separated: the first key encrypts, every
listed key decrypts, so a key is rotated by putting a new one first and keeping the old
ones while runs written with them may still be read. Errors name a key by its id, never by
its material. ``cryptography`` (the ``encryption`` extra) is imported only when keys are
given: the core install does not need it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    PayloadCodec,
)

from .. import _settings
from .._channel_keys import ChannelKey, learn_encryption_secrets
from .._errors import ConfigurationError

__all__ = [
    "ENCRYPTED_ENCODING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "EncryptionKeys",
    "LatticePayloadConverter",
    "UnknownEncryptionKeyError",
    "lattice_data_converter",
]

ENCRYPTED_ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's standard nonce, sent before the ciphertext
EXTRA = 'pip install "agent-lattice[encryption]"'
# A key id: short and plain. A base64 key (44 characters with "=") never passes for one, so
# an entry written the wrong way round (BASE64_KEY:KEY_ID) is refused without showing it.
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,40}")
_BAD_ID = "a key id is 1 to 40 letters, digits, '.', '_' or '-' (its text is not shown)"


class UnknownEncryptionKeyError(ConfigurationError):
    """A payload names a key this process was not given (or does not decrypt with it)."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


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


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each whole serialized payload (its metadata too: nothing of its
    encoding or type shows). The data is a fresh 12-byte nonce and the ciphertext with its
    tag, as in Temporal's samples (Python, Go, TypeScript), whose codec servers decode it.
    Payloads that are not ``binary/encrypted`` decode as they are: runs from before
    encryption was turned on stay readable."""

    def __init__(self, keys: EncryptionKeys) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise ConfigurationError(
                f"payload encryption (encryption keys are set) needs the `encryption` extra: "
                f"{EXTRA}"
            ) from None
        self.keys = keys
        self.key_id = keys.ids[0]
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.keys}
        # the live channel's keys (``_channel_keys``): this process's callers encrypt theirs
        # with the first; its workers open channels of callers holding any
        self._channel_keys = learn_encryption_secrets(key for _, key in keys.keys)

    def channel_key(self) -> ChannelKey:
        """The key this process's callers seal their live channels with."""
        return self._channel_keys[0]

    async def encode(self, payloads: Iterable[Payload]) -> list[Payload]:
        return self.encode_sync(payloads)

    async def decode(self, payloads: Iterable[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)

    def encode_sync(self, payloads: Iterable[Payload]) -> list[Payload]:
        cipher = self._ciphers[self.key_id]
        encoded = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            data = nonce + cipher.encrypt(nonce, payload.SerializeToString(), None)
            metadata = {"encoding": ENCRYPTED_ENCODING, KEY_ID_METADATA: self.key_id.encode()}
            encoded.append(Payload(metadata=metadata, data=data))
        return encoded

    def decode_sync(self, payloads: Iterable[Payload]) -> list[Payload]:
        return [self._decode_one(payload) for payload in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownEncryptionKeyError(
                f"a payload is encrypted with key {key_id!r}, which this process was not given "
                f"(its keys: {', '.join(self.keys.ids)}); add that key to "
                "LATTICE_ENCRYPTION_KEYS after the current one",
                key_id,
            )
        from cryptography.exceptions import InvalidTag

        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
        except InvalidTag:
            raise UnknownEncryptionKeyError(
                f"a payload encrypted with key {key_id!r} does not decrypt with this process's "
                f"key {key_id!r} (another key under the same id, or a damaged payload)",
                key_id,
            ) from None
        return Payload.FromString(plain)


class _EncryptedWithoutKeys(EncodingPayloadConverter):
    """What a process with no keys makes of an encrypted payload: an error naming its key
    (instead of the SDK's "Unknown payload encoding"). It never encodes a value."""

    @property
    def encoding(self) -> str:
        return ENCRYPTED_ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        raise UnknownEncryptionKeyError(
            f"a payload is encrypted with key {key_id!r} and this process has no encryption "
            "keys: set LATTICE_ENCRYPTION_KEYS (or LATTICE_ENCRYPTION_KEYS_FILE) as its "
            "writers did",
            key_id,
        )


class LatticePayloadConverter(PydanticPayloadConverter):
    """Pydantic's JSON converter, and a clear error for encrypted payloads that reach it (a
    process without keys). Nullary, as ``DataConverter.payload_converter_class`` needs.

    The worker makes a DataConverter, and with it one of these, for every workflow
    activation and every payload with a context of its own (about nine per tool turn, 10 µs
    each to build): outside the workflow sandbox they share one set of encoding converters,
    and with it pydantic's cache of type adapters, as the SDK's default converters share
    theirs. A run's own converter, made inside the sandbox, keeps a cache of its own (a type
    there can be a re-imported class that must not outlive the run)."""

    def __init__(self) -> None:
        if workflow.unsafe.in_sandbox():
            super().__init__()
            self._set_converters(*self.converters.values(), _EncryptedWithoutKeys())
        else:
            self._set_converters(*_shared_encodings())


_SHARED: list[EncodingPayloadConverter] = []


def _shared_encodings() -> list[EncodingPayloadConverter]:
    if not _SHARED:  # a race builds two alike: either serves
        pydantic_json = PydanticPayloadConverter()
        _SHARED[:] = [*pydantic_json.converters.values(), _EncryptedWithoutKeys()]
    return _SHARED


PLAIN_CONVERTER = DataConverter(payload_converter_class=LatticePayloadConverter)


def lattice_data_converter(encryption_keys: EncryptionKeysLike | None = None) -> DataConverter:
    """The converter of every lattice client, worker and replayer: pydantic's JSON, and
    with keys (``encryption_keys``, else the settings) the encryption codec. Failure
    messages and stack traces are then encrypted too (they can quote a tool's input)."""
    keys = EncryptionKeys.of(encryption_keys)
    if keys is None:
        return PLAIN_CONVERTER
    return dataclasses.replace(
        PLAIN_CONVERTER,
        payload_codec=EncryptionCodec(keys),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
