"""Shared helpers of the benchmarks: dev servers, statistics, history figures, tables."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import Client

from agent_lattice.client import _server
from agent_lattice.client._follow import CLOSED_EVENTS
from agent_lattice.client._server import DevServer
from agent_lattice.client._server import temporal_binary as _temporal_binary

DYNAMIC_CONFIG: tuple[str, ...] = getattr(_server, "DYNAMIC_CONFIG", ())

# -- servers -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


_STARTED: list[Server] = []


def _stop_all() -> None:
    for server in list(_STARTED):
        server.stop()


def _on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # unwinds, then atexit stops the servers we started


atexit.register(_stop_all)
signal.signal(signal.SIGTERM, _on_sigterm)


@dataclass
class Server:
    """A dev server started for a benchmark; ``stop()`` ends it (only it)."""

    address: str
    label: str
    args: list[str] = field(default_factory=list)
    _dev: DevServer | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        if self._dev is not None:
            return self._dev.pid
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self in _STARTED:
            _STARTED.remove(self)
        if self._dev is not None:
            self._dev.stop()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def start_library_server(home: Path) -> Server:
    """The embedded server exactly as agent_lattice starts it (``DevServer.ensure``)."""
    dev, _ = DevServer.ensure(home, port=0, ui=False)
    flags = " ".join(f"--dynamic-config-value {v}" for v in DYNAMIC_CONFIG)
    server = Server(address=dev.address, label=f"DevServer.ensure ({flags})", _dev=dev)
    _STARTED.append(server)
    return server


def start_custom_server(
    home: Path,
    *,
    dynamic: Sequence[str] = (),
    pragmas: Sequence[str] = (),
    persistent: bool = True,
    label: str = "",
    timeout: float = 60.0,
) -> Server:
    """``temporal server start-dev`` with our own flags (the variants DevServer cannot start)."""
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    args = [
        _temporal_binary(),
        "server",
        "start-dev",
        "--ip", "127.0.0.1",
        "--port", str(port),
        "--headless",
        "--log-level", "error",
    ]  # fmt: skip
    if persistent:
        args += ["--db-filename", str(home / "temporal.db")]
    for value in dynamic:
        args += ["--dynamic-config-value", value]
    for pragma in pragmas:
        args += ["--sqlite-pragma", pragma]
    log = open(home / "temporal-server.log", "ab")
    proc = subprocess.Popen(
        args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"temporal exited with {proc.returncode}: see {home}")
        if _accepting(port):
            extra = " ".join(args[args.index("--log-level") + 2 :])
            server = Server(
                address=f"127.0.0.1:{port}",
                label=label or f"start-dev {extra}".strip(),
                args=args,
                _proc=proc,
            )
            _STARTED.append(server)
            return server
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("temporal dev server did not start")


@contextlib.contextmanager
def lattice_home() -> Iterator[Path]:
    """A throwaway LATTICE_HOME (set in the environment for the benchmark's duration)."""
    with tempfile.TemporaryDirectory(prefix="lattice-bench-") as tmp:
        old = os.environ.get("LATTICE_HOME")
        os.environ["LATTICE_HOME"] = tmp
        try:
            yield Path(tmp)
        finally:
            if old is None:
                os.environ.pop("LATTICE_HOME", None)
            else:
                os.environ["LATTICE_HOME"] = old


# -- statistics --------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def diffs_ms(times: Sequence[float]) -> list[float]:
    return [(b - a) * 1000 for a, b in itertools.pairwise(times)]


# -- history -----------------------------------------------------------------------------


@dataclass
class Segments:
    """Where one activity's round trip goes (ms), from history event times and the wall-clock
    time at which the worker started running the activity (same machine, same clock)."""

    dispatch: float  # ActivityTaskScheduled -> activity code starts in the worker
    run: float  # activity code starts -> ActivityTaskCompleted persisted (run + RPC + write)
    wft_dispatch: float  # ActivityTaskCompleted -> WorkflowTaskStarted (to the workflow worker)
    wft: float  # WorkflowTaskStarted -> WorkflowTaskCompleted (workflow code + RPC + write)


@dataclass
class HistoryFigures:
    events: int
    bytes: int
    started: datetime
    closed: datetime | None
    # Times (seconds since the epoch) of ActivityTaskScheduled events, by activity type.
    scheduled: dict[str, list[float]]
    counts: dict[str, int]
    segments: dict[str, list[Segments]]

    @property
    def duration_ms(self) -> float:
        if self.closed is None:
            return float("nan")
        return (self.closed - self.started).total_seconds() * 1000

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)


def _event_name(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def _segments(
    events: Sequence[HistoryEvent], starts: dict[str, list[float]]
) -> dict[str, list[Segments]]:
    """Segments of every completed activity whose worker start times (epoch seconds, in
    scheduling order) are in ``starts``."""
    t = {e.event_id: e.event_time.ToDatetime().timestamp() * 1000 for e in events}
    kinds: dict[int, tuple[str, int]] = {}
    seen: dict[str, int] = {}
    out: dict[str, list[Segments]] = {}
    for i, event in enumerate(events):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            kinds[event.event_id] = (kind, seen.get(kind, 0))
            seen[kind] = seen.get(kind, 0) + 1
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        attrs = event.activity_task_completed_event_attributes
        kind, index = kinds[attrs.scheduled_event_id]
        worker = starts.get(kind, [])
        if index >= len(worker):
            continue
        wft_started = next(
            (e for e in events[i:] if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
            None,
        )
        wft_done = next(
            (e for e in events[i:] if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
            None,
        )
        if wft_started is None or wft_done is None:
            continue
        start = worker[index] * 1000
        out.setdefault(kind, []).append(
            Segments(
                dispatch=start - t[attrs.scheduled_event_id],
                run=t[event.event_id] - start,
                wft_dispatch=t[wft_started.event_id] - t[event.event_id],
                wft=t[wft_done.event_id] - t[wft_started.event_id],
            )
        )
    return out


async def history_figures(
    client: Client, workflow_id: str, starts: dict[str, list[float]] | None = None
) -> HistoryFigures:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    events = list(history.events)
    scheduled: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    closed = None
    for event in events:
        name = _event_name(event)
        counts[name] = counts.get(name, 0) + 1
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled.setdefault(kind, []).append(event.event_time.ToDatetime().timestamp())
        if event.event_type in CLOSED_EVENTS:
            closed = event.event_time.ToDatetime()
    return HistoryFigures(
        events=len(events),
        bytes=History(events=events).ByteSize(),
        started=events[0].event_time.ToDatetime(),
        closed=closed,
        scheduled=scheduled,
        counts=counts,
        segments=_segments(events, starts or {}),
    )


# -- CPU ---------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def status_kb(pid: int | str, field: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` figure in KB (``VmRSS``, ``VmHWM``; pid ``"self"``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuMeter:
    """CPU seconds used by this process and by a server process between start and stop."""

    def __init__(self, server_pid: int | None) -> None:
        self._pid = server_pid

    def __enter__(self) -> CpuMeter:
        self._py = time.process_time()
        self._srv = process_cpu_s(self._pid) if self._pid else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.py_s = time.process_time() - self._py
        self.server_s = (process_cpu_s(self._pid) - self._srv) if self._pid else float("nan")


# -- output ------------------------------------------------------------------------------


def fmt(value: object, digits: int = 1) -> str:
    if isinstance(value, float):
        if value != value:  # nan
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str = "") -> str:
    """A GitHub-flavoured Markdown table (readable in a terminal too)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = []
    if title:
        lines += [f"### {title}", ""]
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    lines.append("| " + " | ".join("-" * w for w in widths) + " |")
    for row in cells:
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def emit(text: str = "") -> None:
    print(text, flush=True)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
