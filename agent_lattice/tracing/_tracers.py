"""Context tracing: observe a run without changing the agent loop (seeds: JSONL Context Tracing).

A tracer is host code: it runs in the worker, inside the activities that produce what it
records (a model request is traced after ``on_model_request`` shaped it, a tool result after
``on_tool_result``), so a trace holds what was actually sent. Each event carries
``session_id``, ``run_id``, ``seq``, ``source``, ``type`` and ``data``; ``seq`` is assigned by
the workflow, so an activity retried after a crash re-emits the same ``(run_id, seq)`` and a
consumer can drop the duplicate. Tracer failures are swallowed (logged) unless the tracer was
created with ``fail_on_error=True``: then the query stops and ``query()`` raises
:class:`TracerError`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import OptionError

__all__ = [
    "ContextTracer",
    "TraceEvent",
    "create_composite_context_tracer",
    "create_jsonl_context_tracer",
    "define_context_tracer",
]

log = logging.getLogger("agent_lattice.tracing")

EVENT_TYPES = (
    "run_start",
    "user_message",
    "model_request",
    "assistant_message",
    "tool_use",
    "tool_result",
    "result",
)


@dataclass(frozen=True)
class TraceEvent:
    session_id: str
    run_id: str
    seq: int
    source: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str, ensure_ascii=False)


OnEvent = Callable[[TraceEvent], Awaitable[None] | None]
Hook = Callable[[], Awaitable[None] | None]


class ContextTracer:
    """A tracer port: methods only. Build one with :func:`define_context_tracer` or a factory."""

    def __init__(
        self,
        on_event: OnEvent,
        *,
        flush: Hook | None = None,
        close: Hook | None = None,
        fail_on_error: bool,
    ) -> None:
        self._on_event, self._flush, self._close = on_event, flush, close
        self._fail_on_error = fail_on_error

    async def emit(self, event: TraceEvent) -> None:
        """Record ``event``; a failure is logged, or raised when bound with fail_on_error."""
        try:
            out = self._on_event(event)
            if inspect.isawaitable(out):
                await out
        except Exception:
            if self._fail_on_error:
                raise
            log.warning("tracer failed on %s (ignored)", event.type, exc_info=True)

    async def flush(self) -> None:
        if self._flush is not None:
            out = self._flush()
            if inspect.isawaitable(out):
                await out

    async def close(self) -> None:
        await self.flush()
        if self._close is not None:
            out = self._close()
            if inspect.isawaitable(out):
                await out


def define_context_tracer(
    *,
    on_event: OnEvent,
    flush: Hook | None = None,
    close: Hook | None = None,
    fail_on_error: bool = False,
) -> ContextTracer:
    """A custom sink (SQLite, OpenTelemetry, object storage...): ``on_event(event)``, sync or
    async; ``fail_on_error`` is bound here, not set later."""
    if not callable(on_event):
        raise OptionError("define_context_tracer(): on_event must be callable")
    for name, fn in (("flush", flush), ("close", close)):
        if fn is not None and not callable(fn):
            raise OptionError(f"define_context_tracer(): {name} must be callable")
    return ContextTracer(on_event, flush=flush, close=close, fail_on_error=fail_on_error)


def create_jsonl_context_tracer(*, path: str | Path, fail_on_error: bool = False) -> ContextTracer:
    """Append one JSON event per line to ``path`` (parent folders are created)."""
    target = Path(path)
    lock = threading.Lock()

    def write(event: TraceEvent) -> None:
        line = event.to_json() + "\n"
        with lock:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a", encoding="utf-8") as f:
                f.write(line)

    async def on_event(event: TraceEvent) -> None:
        await asyncio.to_thread(write, event)

    return ContextTracer(on_event, fail_on_error=fail_on_error)


def create_composite_context_tracer(tracers: Sequence[ContextTracer | None]) -> ContextTracer:
    """Send every event to each tracer in order (``None`` entries are skipped)."""
    chain = [t for t in tracers if t is not None]
    bad = [type(t).__name__ for t in chain if not isinstance(t, ContextTracer)]
    if bad:
        raise OptionError(
            f"create_composite_context_tracer(): expected ContextTracer objects, got {bad[0]}"
        )

    async def on_event(event: TraceEvent) -> None:
        for t in chain:
            await t.emit(event)

    async def flush() -> None:
        for t in chain:
            await t.flush()

    async def close() -> None:
        for t in chain:
            await t.close()

    return ContextTracer(on_event, flush=flush, close=close, fail_on_error=True)
