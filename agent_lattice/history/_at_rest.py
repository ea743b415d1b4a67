"""Records at rest under the encryption keys: the transcript store's, and a history store's
when it asks (``encryption_keys=``).

With keys (``_keys``: the first encrypts, every listed one decrypts) a record that holds
content — a transcript message, a large tool result, a tool call's recorded result, a
history store's message — is stored AES-256-GCM encrypted, the id of its key beside it; a
record with no key id is plain (written before keys were set) and reads as it is, so turning
keys on keeps every store readable. A record under a key the process lacks is one
:class:`UnknownEncryptionKeyError` naming the key id, never the key.

The stored text is the base64 of a fresh 12-byte nonce and the ciphertext with its tag. Its
key is derived from the listed key (HMAC-SHA256 of a label: payloads use the key itself,
records a key of their own), and the record's place (its content hash, its conversation) is
the associated data: a record copied to another place does not open. Content addressing
keeps working: a record's hash is HMAC-SHA256 over its plain content with a key derived
from the first key, so equal texts in two deployments (or under two keys) get unrelated
hashes, and a hash tells nothing of the text to whoever has no key.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import os
from typing import Any

from .._keys import NONCE_BYTES, EncryptionKeys, UnknownEncryptionKeyError, aes_gcm

__all__ = ["RecordCipher", "cipher_of", "open_record", "open_sealed", "sealed"]

_LABEL = b"agent-lattice records at rest v1\0"
# a sealed history store message (a JSONL line, a Postgres jsonb value) is this object
SEALED = "encrypted"
KEY_ID = "key_id"


def _derived(key: bytes, purpose: bytes) -> bytes:
    return hmac.digest(key, _LABEL + purpose, "sha256")


class RecordCipher:
    """The keys' record encryption and content addresses. Its ``repr`` names key ids only."""

    def __init__(self, keys: EncryptionKeys) -> None:
        self.keys = keys
        self.key_id = keys.ids[0]
        self._ciphers = {
            key_id: aes_gcm(_derived(key, b"encrypt"), "encryption at rest")
            for key_id, key in keys.keys
        }
        self._address = _derived(keys.keys[0][1], b"address")

    def __repr__(self) -> str:
        return f"RecordCipher(ids={self.keys.ids})"

    def address(self, text: str) -> str:
        """The content address of ``text``: keyed, hex, as long as a SHA-256 digest."""
        return hmac.digest(self._address, text.encode("utf-8"), "sha256").hex()

    def seal(self, text: str, place: bytes) -> tuple[str, str]:
        """``text`` encrypted with the first key for ``place``, and that key's id."""
        nonce = os.urandom(NONCE_BYTES)
        data = self._ciphers[self.key_id].encrypt(nonce, text.encode("utf-8"), place)
        return base64.b64encode(nonce + data).decode("ascii"), self.key_id

    def open(self, stored: str, key_id: str, place: bytes, what: str) -> str:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownEncryptionKeyError.lacking(what, key_id, self.keys.ids)
        from cryptography.exceptions import InvalidTag

        try:
            data = base64.b64decode(stored, validate=True)
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], place)
        except (InvalidTag, binascii.Error, ValueError):
            raise UnknownEncryptionKeyError(
                f"{what} encrypted with key {key_id!r} does not decrypt with this process's "
                f"key {key_id!r} (another key under the same id, or a damaged record)",
                key_id,
            ) from None
        return plain.decode("utf-8")


@functools.lru_cache(maxsize=16)
def _cipher(keys: EncryptionKeys) -> RecordCipher:
    return RecordCipher(keys)


def cipher_of(keys: EncryptionKeys | None) -> RecordCipher | None:
    """The record cipher of ``keys`` (one per set of keys in a process); None: no keys."""
    return None if keys is None else _cipher(keys)


def open_record(
    cipher: RecordCipher | None, stored: str, key_id: str | None, place: bytes, what: str
) -> str:
    """A stored record's text: as it is when it has no key id (plain), else decrypted."""
    if key_id is None:
        return stored
    if cipher is None:
        raise UnknownEncryptionKeyError(
            f"{what} is encrypted with key {key_id!r} and this process has no encryption keys: "
            "set LATTICE_ENCRYPTION_KEYS (or LATTICE_ENCRYPTION_KEYS_FILE) as its writers did",
            key_id,
        )
    return cipher.open(stored, key_id, place, what)


def sealed(cipher: RecordCipher, text: str, place: bytes) -> dict[str, str]:
    """``text`` as a sealed JSON object (a history store's message: its key id inside)."""
    stored, key_id = cipher.seal(text, place)
    return {SEALED: stored, KEY_ID: key_id}


def open_sealed(
    cipher: RecordCipher | None, value: Any, place: bytes, what: str
) -> tuple[bool, Any]:
    """A stored JSON value: (True, the JSON text it seals) when it is a sealed object, else
    (False, the value as it is: a plain message)."""
    if not (isinstance(value, dict) and SEALED in value and KEY_ID in value):
        return False, value
    stored, key_id = value[SEALED], value[KEY_ID]
    if not isinstance(stored, str) or not isinstance(key_id, str):
        raise UnknownEncryptionKeyError(f"{what} is a damaged encrypted record", str(key_id))
    return True, open_record(cipher, stored, key_id, place, what)
