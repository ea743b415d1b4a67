"""Live tokens for anyone who attaches: the worker serves the model requests it runs.

The side channel (``live/_channel``) pushes a request's stream events to the process that
started the query. Anyone else attaching to the run (``lattice attach``,
``Runtime.attach()``) reads them here instead: every worker process that serves agents
listens on one TCP port (``LATTICE_STREAM_HOST``, default 127.0.0.1; ``LATTICE_LIVE_FEEDS=0``
turns it off) and names it in its Temporal worker identity (``... live=tcp://host:port``),
which the server shows on the run's pending model activity. A reader finds the activity
with ``describe()``, connects, names the request (its run id and activity id) and gets the
events of the current attempt (as ``live/_channel.LiveItem`` lines) from its first one, then live, then an end line when the
request is over. Nothing enters Temporal history and the worker never connects to a reader;
the reader must be able to reach the worker's port (where it cannot, it gets the durable
messages alone, as before).

A reader names the channel keys it holds (``live/_keys``, by fingerprint) and a nonce; the
worker seals every line with the first of them it holds too (encrypted when it is an
encryption key's), or serves nothing (``unkeyed``): a reader believes only lines sealed with a
key of its own, and a process without one reads no tokens.

The feeds are served by threads, never by the activity's event loop: a slow reader holds
its own thread and never slows the model request down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

from .. import _settings
from .._errors import ConfigurationError
from ._keys import Seal, held_key

__all__ = ["LIVE_MARK", "LiveFeeds", "feed_channel", "live_address", "live_feeds", "live_key"]

log = logging.getLogger("agent_lattice.stream")

# How a worker identity names its live port: "<pid>@<host> ... live=tcp://host:port".
LIVE_MARK = " live="
_WAIT_S = 1.0  # a serving thread's wait between checks of a quiet feed


def live_key(run_id: str, activity_id: str) -> str:
    """What a reader names to get one model request's events."""
    return f"{run_id}/{activity_id}"


def live_address(identity: str) -> str | None:
    """The live port a worker identity names, if any."""
    _, mark, address = identity.rpartition(LIVE_MARK)
    return address.split()[0] if mark and address else None


class _Feed:
    """One attempt of one model request: its events so far, and whether it is over. The
    activity only appends (no encoding on its loop: readers' threads encode what they send)."""

    def __init__(self, turn: int, attempt: int, after: int) -> None:
        self.stamp = {"turn": turn, "attempt": attempt, "after": after}
        self.events: list[dict[str, Any]] = []
        self.closed = False
        self.changed = threading.Condition()

    def publish(self, event: dict[str, Any]) -> None:
        with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def batches(self, seal: Seal) -> Iterator[bytes]:
        """The events from the first as LiveItem JSON lines (each sealed), as they come; ends
        once the feed is closed and every event was given."""
        sent = 0
        while True:
            with self.changed:
                while sent == len(self.events) and not self.closed:
                    self.changed.wait(_WAIT_S)
                batch = self.events[sent:]
                done = self.closed
            sent += len(batch)
            if batch:
                yield b"".join(
                    seal.seal(json.dumps({"event": event, **self.stamp}).encode()) + b"\n"
                    for event in batch
                )
            if done and sent == len(self.events):
                return


class LiveFeeds:
    """This process's model requests in flight, served to whoever attaches."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._feeds: dict[str, _Feed] = {}
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self.address: str | None = None

    def start(self) -> str:
        """Listen (once per process; returns the address to advertise)."""
        with self._lock:
            if self._server is None:
                self._server = _Server((self._host, 0), self)
                port = self._server.server_address[1]
                self.address = f"tcp://{self._host}:{port}"
                threading.Thread(
                    target=self._server.serve_forever, name="lattice-live-feeds", daemon=True
                ).start()
        assert self.address is not None
        return self.address

    @property
    def serving(self) -> bool:
        return self._server is not None

    @contextlib.contextmanager
    def feed(self, key: str, *, turn: int, attempt: int, after: int) -> Iterator[_Feed]:
        """A model request's feed while it runs (a new attempt replaces the last one's);
        ``after``: the durable messages the workflow published before the request."""
        feed = _Feed(turn, attempt, after)
        with self._lock:
            old = self._feeds.get(key)
            self._feeds[key] = feed
        if old is not None:
            old.close()
        try:
            yield feed
        finally:
            feed.close()
            with self._lock:
                if self._feeds.get(key) is feed:
                    del self._feeds[key]

    def get(self, key: str) -> _Feed | None:
        with self._lock:
            return self._feeds.get(key)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], feeds: LiveFeeds) -> None:
        self.feeds = feeds
        super().__init__(address, _Reader)


class _Reader(socketserver.StreamRequestHandler):
    """One attached reader: ``{"watch": key, "keys": [kid, ...], "nonce": hex}``, then
    ``ready <kid>`` and the feed's lines sealed with that key, and a sealed ``{"end": true}``;
    ``gone`` when this process runs no such request, ``unkeyed`` when it holds none of the
    reader's keys."""

    server: _Server

    def handle(self) -> None:
        try:
            header: dict[str, Any] = json.loads(self.rfile.readline() or b"{}")
            watch = str(header.get("watch"))
            feed = self.server.feeds.get(watch)
            if feed is None:
                self.wfile.write(b"gone\n")
                return
            kids = header.get("keys")
            held = (held_key(str(kid)) for kid in (kids if isinstance(kids, list) else []))
            key = next((k for k in held if k is not None), None)
            if key is None:
                self.wfile.write(b"unkeyed\n")
                return
            seal = key.seal(feed_channel(watch), bytes.fromhex(str(header.get("nonce"))))
            self.wfile.write(b"ready " + key.kid.encode() + b"\n")
            for batch in feed.batches(seal):
                self.wfile.write(batch)
                self.wfile.flush()
            self.wfile.write(seal.seal(b'{"end": true}') + b"\n")
        except (OSError, ValueError, ConfigurationError) as err:
            log.debug("live reader left: %s", err)


def feed_channel(key: str) -> str:
    """What a feed's lines are sealed for (never a caller's channel: a line of one cannot be
    passed off as the other's)."""
    return f"feed:{key}"


_FEEDS: LiveFeeds | None = None


def live_feeds() -> LiveFeeds | None:
    """The process's feeds (created on first use), or None when ``LATTICE_LIVE_FEEDS=0``."""
    global _FEEDS
    if not _settings.live_feeds():
        return None
    if _FEEDS is None:
        _FEEDS = LiveFeeds(_settings.stream_host())
    return _FEEDS
