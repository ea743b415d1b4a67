"""The transcript store's memory: recently used transcripts by head, as stored and as resolved,
and recently used tool results stored by reference (``_transcripts``)."""

from __future__ import annotations

from collections import OrderedDict

from .._messages import ModelMessage

__all__ = ["Blobs", "Entry", "TranscriptCache"]


class Entry:
    """A cached transcript: its messages as stored (large tool results as references), the
    size they count for, ``resolved``: the first of them with those references resolved
    (``_transcripts.hydrate``), extended as model requests read them, and ``wire``: the first
    of those as a request body carries them (``ModelMessage.wire_json``), extended as requests
    to the Messages API send them."""

    __slots__ = ("messages", "resolved", "size", "wire")

    def __init__(
        self,
        messages: tuple[ModelMessage, ...],
        size: int,
        resolved: tuple[ModelMessage, ...],
        wire: tuple[str, ...] = (),
    ) -> None:
        self.messages, self.size, self.resolved, self.wire = messages, size, resolved, wire


class TranscriptCache:
    """Recently used transcripts by head, least recently used out first, bounded by their
    JSON size (``LATTICE_TRANSCRIPT_CACHE_MB``, resolved tool results included) rather than
    by count: every running conversation of a worker should stay in it, however many run at
    once, or each model request reads, validates and resolves its whole transcript again
    (O(turns) per request)."""

    def __init__(self, limit_mb: float) -> None:
        self.limit = int(limit_mb * 2**20)
        self.size = 0
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def get(self, head: str) -> Entry | None:
        entry = self._entries.get(head)
        if entry is None:
            return None
        self._entries.move_to_end(head)
        return entry

    def take(self, head: str) -> Entry | None:
        """Remove and return a transcript being extended: a conversation moves on from its
        head, and a prefix of a cached transcript would count its messages twice."""
        entry = self._entries.pop(head, None)
        if entry is not None:
            self.size -= entry.size
        return entry

    def grow(self, head: str, entry: Entry, added: int) -> None:
        """``entry`` counts ``added`` more (it resolved results): re-counted, re-bounded."""
        cached = self._entries.get(head) is entry
        if cached:
            self.take(head)
        entry.size += added
        if cached:
            self.put(head, entry)

    def put(self, head: str, entry: Entry) -> None:
        old = self._entries.pop(head, None)
        if old is not None:
            self.size -= old.size
        if entry.size > self.limit:
            return
        self._entries[head] = entry
        self.size += entry.size
        while self.size > self.limit:
            self.size -= self._entries.popitem(last=False)[1].size


class Blobs:
    """Recently written or read tool results by reference, least recently used out first,
    bounded by their characters: a result is resolved when its request is built and again
    when the cached transcript takes it in, and by the caller who is shown it; from here
    after the first read (or after the write, when the tool ran in this process)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self._data: OrderedDict[str, str] = OrderedDict()

    def get(self, ref: str) -> str | None:
        data = self._data.get(ref)
        if data is not None:
            self._data.move_to_end(ref)
        return data

    def put(self, ref: str, data: str) -> None:
        if len(data) > self.limit or ref in self._data:
            return
        self._data[ref] = data
        self.size += len(data)
        while self.size > self.limit:
            self.size -= len(self._data.popitem(last=False)[1])
