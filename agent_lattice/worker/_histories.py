"""Run histories as files: ``lattice runs export`` writes them, ``lattice replay`` and
``testing.assert_replays`` read them (``_replay``).

A file holds one run's history in Temporal's JSON (``WorkflowHistory.to_json``: what
``temporal workflow show --output json`` and the Temporal UI's download write too), named
after its workflow id, which the file also carries (in its start event). An export is of a
workflow's latest run: the one a new worker takes over (a run that continued as new left its
earlier runs closed). Its payloads are decoded with the configured encryption keys, so the
file is replayed without them and whoever holds it reads the run's prompts, tool inputs and
answers (keep it as you keep the runs); or left as the server holds them (``encrypted``),
and replaying then needs the keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from .._errors import ReplayError
from .._keys import EncryptionKeys, UnknownEncryptionKeyError
from ._encryption import ENCRYPTED_ENCODING, KEY_ID_METADATA, EncryptionCodec

__all__ = [
    "ExportedHistory",
    "encrypted_with",
    "export_history",
    "file_name",
    "payloads_in",
    "read_history",
]

# never encoded by a codec: the server indexes them
_SEARCH_ATTRIBUTES = "temporal.api.common.v1.SearchAttributes"
_SAFE = re.compile(r"[^A-Za-z0-9._=+@-]")


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every payload in ``message`` (a history event, say), at any depth, but those of
    search attributes."""
    for field, value in message.ListFields():
        kind = field.message_type
        if kind is None or kind.full_name == _SEARCH_ATTRIBUTES:
            continue
        if kind.GetOptions().map_entry:
            items = list(value.values())
        elif isinstance(value, Message):
            items = [value]
        else:
            items = list(value)
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


def encrypted_with(history: WorkflowHistory) -> set[str]:
    """The ids of the keys the history's encrypted payloads are under (none: plain)."""
    return {
        payload.metadata[KEY_ID_METADATA].decode(errors="replace")
        for event in history.events
        for payload in payloads_in(event)
        if payload.metadata.get("encoding") == ENCRYPTED_ENCODING
    }


def file_name(workflow_id: str) -> str:
    """``workflow_id`` as a file name: kept as it is when it is safe, else its unsafe
    characters replaced and a hash of the id added (two ids never share a file)."""
    safe = _SAFE.sub("_", workflow_id)
    if safe != workflow_id or not safe.strip("."):
        safe = f"{safe}.{hashlib.sha256(workflow_id.encode()).hexdigest()[:8]}"
    return f"{safe}.json"


@dataclass(frozen=True)
class ExportedHistory:
    """A history written to ``path``: its workflow's id, its length, and whether payloads
    of it were decoded."""

    path: Path
    workflow_id: str
    events: int
    decoded: bool


async def export_history(
    client: Client,
    workflow_id: str,
    directory: Path,
    *,
    encrypted: bool = False,
    keys: EncryptionKeys | None = None,
) -> ExportedHistory:
    """Write the latest run of ``workflow_id`` to ``directory`` (made if missing): decoded
    with ``keys``, or as the server holds it when ``encrypted``. Raises the server's error
    for an unknown workflow, and :class:`UnknownEncryptionKeyError` for a payload under a key
    not in ``keys``."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    decoded = False
    if not encrypted:
        codec = EncryptionCodec(keys) if keys is not None else None
        for event in history.events:
            for payload in payloads_in(event):
                if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
                    continue
                if codec is None:
                    key_id = payload.metadata[KEY_ID_METADATA].decode(errors="replace")
                    raise UnknownEncryptionKeyError(
                        f"a payload is encrypted with key {key_id!r}, and no encryption keys "
                        "are configured (LATTICE_ENCRYPTION_KEYS[_FILE], "
                        "--encryption-keys-file)",
                        key_id,
                    )
                payload.CopyFrom(codec.decode_sync([payload])[0])
                decoded = True
    path = await asyncio.to_thread(_write, directory / file_name(workflow_id), history)
    return ExportedHistory(path, workflow_id, len(history.events), decoded)


def _write(path: Path, history: WorkflowHistory) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(history.to_json(), encoding="utf-8")
    return path


def read_history(path: Path) -> WorkflowHistory:
    """The history in ``path``; its workflow id from its start event, else the file's name.
    A file that is not a history raises :class:`ReplayError` saying so."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
        if not isinstance(data, dict) or not data.get("events"):  # pyright: ignore[reportUnknownMemberType]
            raise ValueError("it has no events")
        history = WorkflowHistory.from_json(path.stem, data)  # pyright: ignore[reportUnknownArgumentType]
    except (OSError, ValueError) as err:
        raise ReplayError(
            f"{path}: not a run history in Temporal's JSON ({err})",
            path=str(path),
            workflow_id=None,
        ) from None
    started = history.events[0]
    if started.HasField("workflow_execution_started_event_attributes"):
        workflow_id = started.workflow_execution_started_event_attributes.workflow_id
        if workflow_id:
            return WorkflowHistory(workflow_id, history.events)
    return history
