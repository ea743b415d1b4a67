"""Payload encryption: AES-256-GCM keys, the Temporal payload codec, the converter that uses it.

Every payload a lattice process hands Temporal (workflow inputs and results, activity
arguments and results, signals, updates, memos, summaries, failure messages) goes through
one data converter (``LatticePlugin``'s). With keys configured that converter carries an
:class:`EncryptionCodec`: the server, its database and anyone reading a history see
``binary/encrypted`` payloads whose metadata names the key (``encryption-key-id``), the same
format as Temporal's encryption samples, so their codec servers read it too.

Keys (``LATTICE_ENCRYPTION_KEYS``, ``LATTICE_ENCRYPTION_KEYS_FILE``, ``encryption_keys=``)
are ``KEY_ID:BASE64_KEY`` entries, comma- or line-separated (``_keys``, where they are
parsed: the same keys encrypt the transcript store, ``history/_at_rest``): the first key encrypts,
every listed key decrypts, so a key is rotated by putting a new one first and keeping the old
ones while runs written with them may still be read. Errors name a key by its id, never by
its material. ``cryptography`` (the ``encryption`` extra) is imported only when keys are
given: the core install does not need it.

Strict (``LATTICE_ENCRYPTION_STRICT``, on unless ``0``): anyone who can reach the server can
start a run, signal it or update it, and only a holder of a key can encrypt. So a worker
with keys acts on nothing that reaches a run unencrypted: a start's input fails the run at
once, an update is rejected (its caller is told why), a signal is dropped and logged (the
run goes on), a query fails; an activity's or a child run's result fails the workflow task,
which Temporal retries, the run waiting, until it can be read. A payload under a key the
worker lacks is refused the same way, and the message names the key id: the caller of a
start or an update gets it. ``LATTICE_ENCRYPTION_STRICT=0`` accepts unencrypted payloads,
for the runs started before encryption was turned on. Decoding an activation must not fail
(a workflow task that fails there is retried forever, the run stuck behind one forged
signal): the codec hands what it refuses on marked (``binary/lattice-refused``), and a
run's payload converter, which sees whose payload it is, refuses it; outside a run (a
client reading a result or a memo) an unencrypted payload reads as it is.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    PayloadCodec,
    PayloadConverter,
    SerializationContext,
    WorkflowSerializationContext,
)
from temporalio.exceptions import ApplicationError

from .. import _settings
from .._errors import ConfigurationError
from .._keys import (
    EXTRA,
    KEY_BYTES,
    NONCE_BYTES,
    EncryptionKeys,
    EncryptionKeysLike,
    UnknownEncryptionKeyError,
    aes_gcm,
    use_process_keys,
)
from ..live._keys import ChannelKey, learn_encryption_secrets

__all__ = [
    "ENCRYPTED_ENCODING",
    "EXTRA",
    "KEY_BYTES",
    "KEY_ID_METADATA",
    "REFUSED_ENCODING",
    "EncryptionCodec",
    "EncryptionKeys",
    "EncryptionKeysLike",
    "LatticeFailureConverter",
    "LatticePayloadConverter",
    "UnencryptedPayloadError",
    "UnknownEncryptionKeyError",
    "lattice_data_converter",
    "refused_by_worker",
]

ENCRYPTED_ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
# What the codec refused (strict: not encrypted; or under a key it lacks), marked for the
# payload converter: the payload as it came, why (REFUSED_METADATA) and the error's message.
REFUSED_ENCODING = b"binary/lattice-refused"
REFUSED_METADATA = "lattice-refused"  # b"unencrypted" or b"key"
MESSAGE_METADATA = "lattice-message"
UNENCRYPTED = (
    "a payload reached this run unencrypted, and its worker has encryption keys: refused, "
    "not acted on. Send it encrypted (a lattice client with the keys, or the temporal CLI or "
    "UI through `lattice codec-server`); LATTICE_ENCRYPTION_STRICT=0 on the worker accepts "
    "unencrypted payloads while runs from before encryption was turned on finish"
)
log = logging.getLogger("agent_lattice.encryption")


class UnencryptedPayloadError(ConfigurationError):
    """A payload reached a run unencrypted, and its worker has encryption keys (strict, the
    default): the worker did not act on it. A lattice client that gets this lacks the keys
    its workers have."""


class RefusedResult(RuntimeError):
    """A result a run cannot read (unencrypted, strict; or under a key its worker lacks): not
    a LatticeError, so its workflow task fails and is retried (the run waits) instead of
    the run failing (``workflow_failure_exception_types``)."""


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each whole serialized payload (its metadata too: nothing of its
    encoding or type shows). The data is a fresh 12-byte nonce and the ciphertext with its
    tag, as in Temporal's samples (Python, Go, TypeScript), whose codec servers decode it.
    Payloads that are not ``binary/encrypted`` decode as they are: runs from before
    encryption was turned on stay readable."""

    def __init__(self, keys: EncryptionKeys) -> None:
        self.keys = keys
        self.key_id = keys.ids[0]
        self._ciphers = {key_id: aes_gcm(key, "payload encryption") for key_id, key in keys.keys}
        # the live channel's keys (``live/_keys``): this process's callers encrypt theirs
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
            raise UnknownEncryptionKeyError.lacking("a payload", key_id, self.keys.ids)
        from cryptography.exceptions import InvalidTag

        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
        except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
            raise UnknownEncryptionKeyError(
                f"a payload encrypted with key {key_id!r} does not decrypt with this process's "
                f"key {key_id!r} (another key under the same id, or a damaged payload)",
                key_id,
            ) from None
        return Payload.FromString(plain)


class _MarkingCodec(EncryptionCodec):
    """The codec of lattice's data converter. Where :class:`EncryptionCodec` raises (a key
    it lacks, a payload that does not decrypt) and, ``strict``, where it passes a payload
    that is not encrypted, this one hands the payload on marked (``binary/lattice-refused``),
    for :class:`LatticePayloadConverter` to refuse in a run and to read or raise outside one."""

    def __init__(self, keys: EncryptionKeys, strict: bool) -> None:
        super().__init__(keys)
        self.strict = strict

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
            return _refused(payload, b"unencrypted", UNENCRYPTED) if self.strict else payload
        try:
            return super()._decode_one(payload)
        except UnknownEncryptionKeyError as err:
            return _refused(payload, b"key", str(err))


def _refused(payload: Payload, why: bytes, message: str) -> Payload:
    metadata = {
        "encoding": REFUSED_ENCODING,
        REFUSED_METADATA: why,
        MESSAGE_METADATA: message.encode(),
    }
    if KEY_ID_METADATA in payload.metadata:
        metadata[KEY_ID_METADATA] = payload.metadata[KEY_ID_METADATA]
    return Payload(metadata=metadata, data=payload.SerializeToString())


class _DecodeOnly(EncodingPayloadConverter):
    """An encoding this process reads (mostly to raise a clear error) and never writes."""

    ENCODING: bytes

    @property
    def encoding(self) -> str:
        return self.ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None


class _Refused(_DecodeOnly):
    """What the codec marked refused (``_MarkingCodec``). In a run (``in_run``) it is
    never a value: its conversion raises, which fails the run at its start, rejects an update
    (its caller gets the message), drops a signal (logged; the run goes on) and fails a
    query; for a result of the run's own work (``results``: an activity's, a child run's)
    it raises :class:`RefusedResult`, so the workflow task is retried and the run waits.
    Outside a run an unencrypted payload reads as it is (a client reading a result, a memo),
    and one under a key this process lacks raises :class:`UnknownEncryptionKeyError`."""

    ENCODING = REFUSED_ENCODING

    def __init__(self, in_run: bool, results: bool = False) -> None:
        self.in_run = in_run
        self.results = results

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        message = payload.metadata.get(MESSAGE_METADATA, b"").decode(errors="replace")
        error: ConfigurationError
        if payload.metadata.get(REFUSED_METADATA) == b"unencrypted":
            if not self.in_run:
                plain = Payload.FromString(payload.data)
                hints = None if type_hint is None else [type_hint]
                return LatticePayloadConverter().from_payloads([plain], hints)[0]
            error = UnencryptedPayloadError(message)
        else:
            key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
            where = "refused by the run's worker: " if self.in_run else ""
            error = UnknownEncryptionKeyError(where + message, key_id)
        if self.in_run:  # next to what follows: a failed run, a dropped signal, a replay's error
            log.warning("%s", error)
        if self.results:
            raise RefusedResult(f"{error} (the workflow task is retried)") from error
        raise error


class _EncryptedWithoutKeys(_DecodeOnly):
    """What a process with no keys makes of an encrypted payload: an error naming its key
    (instead of the SDK's "Unknown payload encoding"). It never encodes a value."""

    ENCODING = ENCRYPTED_ENCODING

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        raise UnknownEncryptionKeyError(
            f"a payload is encrypted with key {key_id!r} and this process has no encryption "
            "keys: set LATTICE_ENCRYPTION_KEYS (or LATTICE_ENCRYPTION_KEYS_FILE) as its "
            "writers did",
            key_id,
        )


class LatticePayloadConverter(PydanticPayloadConverter):
    """Pydantic's JSON converter, a clear error for encrypted payloads that reach it (a
    process without keys), and what the codec refused (``_Refused``: refused in a run, read
    or raised outside one). Nullary, as ``DataConverter.payload_converter_class`` needs.

    The worker makes a DataConverter, and with it one of these, for every workflow
    activation and every payload with a context of its own (about nine per tool turn, 10 µs
    each to build): outside the workflow sandbox they share one set of encoding converters,
    and with it pydantic's cache of type adapters, as the SDK's default converters share
    theirs. A run's own converter, made inside the sandbox, keeps a cache of its own (a type
    there can be a re-imported class that must not outlive the run)."""

    def __init__(self) -> None:
        self._in_run = workflow.unsafe.in_sandbox()
        self._results: LatticePayloadConverter | None = None
        if self._in_run:
            super().__init__()
            refused = _Refused(in_run=True)
            self._set_converters(*self.converters.values(), _EncryptedWithoutKeys(), refused)
        else:
            self._set_converters(*_shared_encodings())

    def with_context(self, context: SerializationContext) -> LatticePayloadConverter:
        """A run's converter for the results of its own work (an activity's, a child run's)
        refuses what the codec refused without failing the run (``_Refused.results``)."""
        converter = super().with_context(context)  # its encodings' own, if any takes one
        if not self._in_run or not _is_result(context):
            return converter
        if converter is self and self._results is not None:
            return self._results
        results = copy.copy(converter)
        results.converters = {
            encoding: _Refused(in_run=True, results=True) if isinstance(c, _Refused) else c
            for encoding, c in converter.converters.items()
        }
        if converter is self:
            self._results = results
        return results


def _is_result(context: SerializationContext) -> bool:
    """Whether a run converts with ``context`` the result of its own work: an activity's,
    or a child run's (a workflow context other than its own, made in the run's code; its
    own is made before the run's code runs, and a start's input, signals, updates and
    queries convert with it)."""
    if isinstance(context, ActivitySerializationContext):
        return True
    return (
        isinstance(context, WorkflowSerializationContext)
        and workflow.in_workflow()
        and context.workflow_id != workflow.info().workflow_id
    )


_SHARED: list[EncodingPayloadConverter] = []


def _shared_encodings() -> list[EncodingPayloadConverter]:
    if not _SHARED:  # a race builds two alike: either serves
        pydantic_json = PydanticPayloadConverter()
        _SHARED[:] = [
            *pydantic_json.converters.values(),
            _EncryptedWithoutKeys(),
            _Refused(in_run=False),
        ]
    return _SHARED


_PLAIN_FAILURES = DefaultFailureConverter()


class LatticeFailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """Failure messages and stack traces encrypted (they can quote a tool's input), except
    a refusal's (:class:`UnencryptedPayloadError`, :class:`UnknownEncryptionKeyError`: a
    key id at most, never a key or a payload's content), which its sender may read without
    the keys: the temporal CLI that sent an unencrypted update, a client with another key.
    A failure whose encoded attributes the codec refused is refused as a payload is."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        if isinstance(exception, UnencryptedPayloadError | UnknownEncryptionKeyError):
            # sent again as it was, it would be refused again
            refusal = ApplicationError(
                str(exception), type=type(exception).__name__, non_retryable=True
            )
            _PLAIN_FAILURES.to_failure(refusal, payload_converter, failure)
            failure.stack_trace = ""
            return
        super().to_failure(exception, payload_converter, failure)

    def from_failure(self, failure: Failure, payload_converter: PayloadConverter) -> BaseException:
        if failure.encoded_attributes.metadata.get("encoding") == REFUSED_ENCODING:
            payload_converter.from_payloads([failure.encoded_attributes])  # raises if refused
        return super().from_failure(failure, payload_converter)


_NAMED_KEY = re.compile(r"key '([A-Za-z0-9._-]{1,40})'")


def refused_by_worker(error: BaseException | None) -> ConfigurationError | None:
    """The refusal a failure from a run's worker carries (a run's start, an update: see
    :class:`LatticeFailureConverter`), raised again on the caller's side as the error it
    was, or None when it is not one. The key id is read from the message (a failure sent
    with no details: its details would be encrypted under the worker's key)."""
    if not isinstance(error, ApplicationError):
        return None
    if error.type == UnencryptedPayloadError.__name__:
        return UnencryptedPayloadError(error.message)
    if error.type == UnknownEncryptionKeyError.__name__:
        named = _NAMED_KEY.search(error.message)
        return UnknownEncryptionKeyError(error.message, named[1] if named else "")
    return None


PLAIN_CONVERTER = DataConverter(payload_converter_class=LatticePayloadConverter)


def lattice_data_converter(
    encryption_keys: EncryptionKeysLike | None = None, *, strict: bool | None = None
) -> DataConverter:
    """The converter of every lattice client, worker and replayer: pydantic's JSON, and
    with keys (``encryption_keys``, else the settings) the encryption codec. Failure
    messages and stack traces are then encrypted too (they can quote a tool's input).
    ``strict`` (default ``LATTICE_ENCRYPTION_STRICT``, on): a run refuses what reaches it
    unencrypted (see the module's docstring)."""
    strict = _settings.encryption_strict() if strict is None else strict
    keys = EncryptionKeys.of(encryption_keys)
    if keys is None:
        return PLAIN_CONVERTER
    converter = dataclasses.replace(
        PLAIN_CONVERTER,
        payload_codec=_MarkingCodec(keys, strict),
        failure_converter_class=LatticeFailureConverter,
    )
    # what a history store created with encryption_keys="runtime" uses (``_keys``)
    use_process_keys(keys, explicit=encryption_keys is not None)
    return converter
