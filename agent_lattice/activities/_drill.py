"""The worker's side of a durability drill (``agent_lattice.testing.crash_drill``).

Two testing hooks, which the drill sets on the ``lattice worker`` processes it starts and
which are off everywhere else. With ``LATTICE_DRILL_LOG`` a worker appends what its
activities do to that file, one JSON object a line: a tool's handler called
(``tool_start``) and returned with its result recorded (``tool_done``), a model request
sent (``model_request``). With ``LATTICE_DRILL_KILL`` it SIGKILLs itself, with its process
group (a container dying), at that point, and notes it first (``kill``):

- ``mid_tool:NAME``: as NAME's handler is called. For Temporal the call is running (a cheap
  call that is not idempotent has marked its start); it has not returned.
- ``after_tool:NAME``: once NAME's handler returned and its result was recorded under the
  call's idempotency key, before Temporal hears that the call finished.
- ``mid_stream``: as the first text delta of a model reply streams in.
- ``between_turns``: as a run's second model request (or later) starts, before it is sent:
  the turn before it, tool results included, is in the run's history.

Each line is one ``write`` to a file opened with ``O_APPEND``, so the drill's workers share
the file, and a line is in the file before the kill it announces.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from temporalio import activity

from .. import _settings
from .._errors import OptionError

__all__ = ["DrillEvent", "DrillPoint", "DrillProbe", "EventSink", "KillPoint", "drill_probe"]

EventSink = Callable[[dict[str, Any]], Awaitable[None]]


class DrillPoint(StrEnum):
    """Where a drill's worker is killed (see the module's docstring)."""

    MID_TOOL = "mid_tool"
    AFTER_TOOL = "after_tool"
    MID_STREAM = "mid_stream"
    BETWEEN_TURNS = "between_turns"


class DrillEvent(StrEnum):
    """What a line of the drill's log says happened (its ``event`` field)."""

    TOOL_START = "tool_start"
    TOOL_DONE = "tool_done"
    MODEL_REQUEST = "model_request"
    KILL = "kill"


_NAMED = (DrillPoint.MID_TOOL, DrillPoint.AFTER_TOOL)
_USAGE = "mid_tool:NAME, after_tool:NAME, mid_stream or between_turns"


@dataclass(frozen=True)
class KillPoint:
    """A parsed kill point: where, and for the tool points, which tool."""

    point: DrillPoint
    tool: str | None = None

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        """``mid_tool:NAME``, ``after_tool:NAME``, ``mid_stream`` or ``between_turns``."""
        head, sep, tool = str(text).partition(":")
        try:
            point = DrillPoint(head.strip())
        except ValueError:
            raise OptionError(f"kill={text!r} is not a kill point: {_USAGE}") from None
        tool = tool.strip()
        if point in _NAMED and not tool:
            raise OptionError(f"kill={text!r}: {point} names its tool, as {point}:NAME")
        if point not in _NAMED and sep:
            raise OptionError(f"kill={text!r}: {point} takes no tool name")
        return cls(point, tool or None)

    def __str__(self) -> str:
        return f"{self.point}:{self.tool}" if self.tool else str(self.point)


class DrillProbe:
    """What the activities tell a drill. This one tells nothing and kills nothing: a worker
    outside a drill."""

    def tool_started(self, name: str) -> None:
        """A tool's handler is about to be called."""

    def tool_finished(self, name: str) -> None:
        """A tool's handler returned and its result is recorded."""

    def model_request(self, turn: int) -> None:
        """A model request (the run's ``turn``-th) is about to be sent."""

    def watching(self, sink: EventSink) -> EventSink:
        """The event sink of a streamed model reply, watched for the ``mid_stream`` point."""
        return sink


class _Drill(DrillProbe):
    """A drill's worker: notes to ``log`` (if any) and dies at ``kill`` (if any)."""

    def __init__(self, log: str | None, kill: KillPoint | None) -> None:
        self._log, self._kill = log, kill

    def tool_started(self, name: str) -> None:
        self._note(DrillEvent.TOOL_START, tool=name)
        if self._at(DrillPoint.MID_TOOL, name):
            self._die()

    def tool_finished(self, name: str) -> None:
        self._note(DrillEvent.TOOL_DONE, tool=name)
        if self._at(DrillPoint.AFTER_TOOL, name):
            self._die()

    def model_request(self, turn: int) -> None:
        if turn > 1 and self._at(DrillPoint.BETWEEN_TURNS):
            self._die()
        self._note(DrillEvent.MODEL_REQUEST, turn=turn)

    def watching(self, sink: EventSink) -> EventSink:
        if not self._at(DrillPoint.MID_STREAM):
            return sink

        async def watch(event: dict[str, Any]) -> None:
            await sink(event)
            if event.get("type") == "content_block_delta":
                self._die()

        return watch

    def _at(self, point: DrillPoint, tool: str | None = None) -> bool:
        kill = self._kill
        return kill is not None and kill.point == point and kill.tool == tool

    def _note(self, event: DrillEvent, **fields: object) -> None:
        if self._log is None:
            return
        info = activity.info() if activity.in_activity() else None
        line = {
            "event": str(event),
            "time": time.time(),
            "pid": os.getpid(),
            "workflow_id": info.workflow_id if info else None,
            "attempt": info.attempt if info else None,
            **fields,
        }
        fd = os.open(self._log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)

    def _die(self) -> None:
        """SIGKILL this process, with its group when it leads one (the drill starts its
        workers in a session of their own: a tool's child processes die too)."""
        self._note(DrillEvent.KILL, point=str(self._kill))
        group = os.getpgrp()
        if group == os.getpid():
            os.killpg(group, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)  # not reached: SIGKILL cannot be caught


_NO_DRILL = DrillProbe()


def drill_probe() -> DrillProbe:
    """This worker's probe: a drill's when ``LATTICE_DRILL_LOG`` or ``LATTICE_DRILL_KILL`` is
    set (a bad kill point is an :class:`OptionError`, at the worker's start), else one that
    does nothing."""
    log, kill = _settings.drill_log(), _settings.drill_kill()
    if log is None and kill is None:
        return _NO_DRILL
    return _Drill(log, KillPoint.parse(kill) if kill is not None else None)
