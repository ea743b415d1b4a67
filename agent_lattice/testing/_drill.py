"""A durability drill for your own agents: run one under a ``lattice worker`` process, SIGKILL
the worker at a chosen point, start another, and report what ran how often.

The worker side is ``activities/_drill`` (its two testing hooks, ``LATTICE_DRILL_LOG`` and
``LATTICE_DRILL_KILL``); the user's guide is docs/durability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._agent import Agent
from .._errors import DrillError, OptionError
from .._messages import ResultMessage
from ..activities._drill import DrillEvent, KillPoint
from ..client._runtime import Runtime
from ..teams._delegation import delegation_targets
from ..teams._team import Team
from ..worker._pollers import queue_served
from ..worker._worker import resolve_agent
from ..workflows._types import ActivitySettings
from ._helpers import FAST_SETTINGS

__all__ = ["DrillReport", "crash_drill"]


@dataclass(frozen=True)
class DrillReport:
    """What a drill saw, across both workers.

    ``result``: the run's result. ``tool_runs``: per tool name, the runs of its handler that
    completed (returned, their result recorded): a tool that must never run twice shows 1.
    ``tool_starts``: per tool name, the calls of its handler that began, the one the kill cut
    off included. ``model_requests``: the model requests sent (one cut off mid-stream and its
    retry count twice). ``kill``: the kill point; ``workflow_id``: the run's.
    """

    result: ResultMessage
    tool_runs: dict[str, int]
    tool_starts: dict[str, int]
    model_requests: int
    kill: str
    workflow_id: str
    events: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]], repr=False)


async def crash_drill(
    app: str,
    agent: str,
    prompt: str,
    *,
    kill: str,
    address: str | None = None,
    env: Mapping[str, str] | None = None,
    settings: ActivitySettings = FAST_SETTINGS,
    within: float = 180.0,
) -> DrillReport:
    """Run ``prompt`` on the agent named ``agent`` of ``app`` (a module path or a file, as
    ``lattice worker APP`` takes it) under a ``lattice worker`` process, SIGKILL that worker
    at ``kill``, start another, and return the :class:`DrillReport` once the run ended.

    ``kill``: ``"mid_tool:NAME"`` (as tool NAME's handler is called, before it returns),
    ``"after_tool:NAME"`` (NAME returned and its result was recorded; Temporal has not heard
    it), ``"mid_stream"`` (as the first text of a model reply streams in) or
    ``"between_turns"`` (as the run's second model request starts, before it is sent).

    ``address``: the Temporal server (default: ``TEMPORAL_ADDRESS``, else the embedded dev
    server, as ``Runtime.connect``); no other worker of the app may serve its task queues
    there meanwhile (give the drill a ``LATTICE_TASK_QUEUE_PREFIX`` of its own; the pytest
    fixture ``crash_drill`` does). ``env``: more environment for the workers (they inherit
    this process's). ``settings``: the run's activity settings (short heartbeats by default,
    so the cut-off call is retried within seconds). The agent's model must answer each
    request from what it holds (the conversation so far), not from a count of earlier
    requests: the second worker has a model client of its own.

    Raises :class:`DrillError` when the run ended without reaching the kill point, a worker
    died on its own, or the run did not end within ``within`` seconds.
    """
    point = KillPoint.parse(kill)
    target = resolve_agent(f"{app}:{agent}")
    if isinstance(target, Team):
        raise OptionError(
            f"{app}:{agent} is a team: crash_drill runs one agent (and its delegates)"
        )
    _check_tool(target, point, f"{app}:{agent}")
    runtime = await Runtime.connect(address, settings=settings, inline_workers=False, quiet=True)
    try:
        with tempfile.TemporaryDirectory(prefix="lattice-drill-") as scratch:
            drill = _Drill(runtime, target, point, Path(scratch), app, env)
            return await drill.run(prompt, within)
    finally:
        await runtime.close()


def _check_tool(agent: Agent, point: KillPoint, name: str) -> None:
    """A tool point names a tool of the agent or of an agent it delegates to."""
    if point.tool is None:
        return
    tools = {t.name for a in delegation_targets([agent]) for t in a.tools}
    if point.tool not in tools:
        raise OptionError(
            f"kill={str(point)!r}: {name} has no tool {point.tool!r} (nor its delegates); "
            f"its tools: {', '.join(sorted(tools)) or 'none'}"
        )


class _Worker:
    """A ``lattice worker APP`` process in a session of its own, its output in files."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self._out, self._err = logs / f"{name}.out", logs / f"{name}.err"
        with self._out.open("wb") as out, self._err.open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def tail(self, lines: int = 15) -> str:
        said = []
        for path in (self._err, self._out):
            text = path.read_text(errors="replace").strip() if path.exists() else ""
            if text:
                said.append("\n".join(text.splitlines()[-lines:]))
        return f"the {self.name} worker said:\n" + ("\n".join(said) or "(nothing)")

    async def stop(self) -> None:
        """SIGTERM (the worker shuts down), SIGKILL after 10 s; its whole process group."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(self.proc.wait)


class _Drill:
    def __init__(
        self,
        runtime: Runtime,
        agent: Agent,
        point: KillPoint,
        scratch: Path,
        app: str,
        env: Mapping[str, str] | None,
    ) -> None:
        self.runtime, self.agent, self.point, self.scratch = runtime, agent, point, scratch
        self.log = scratch / "drill.jsonl"
        self.log.touch()
        config = runtime.client.service_client.config
        self.argv = [
            sys.executable,
            "-m",
            "agent_lattice.cli",
            "worker",
            app,
            "--address",
            config.target_host,
            "--namespace",
            runtime.client.namespace,
        ]
        self.env = {**os.environ, **(env or {})}
        self.env.pop("LATTICE_DRILL_KILL", None)
        self.env.update(LATTICE_DRILL_LOG=str(self.log), PYTHONUNBUFFERED="1")
        self.workers: list[_Worker] = []

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def seen(self) -> str:
        """What the workers noted so far, in a line."""
        said = []
        for e in self.events():
            what = e.get("tool") or (f"turn {e['turn']}" if "turn" in e else e.get("point"))
            said.append(f"{e['event']} {what}" if what else e["event"])
        return "; ".join(said) or "nothing"

    def start(self, name: str, **env: str) -> _Worker:
        worker = _Worker(name, self.argv, {**self.env, **env}, self.scratch)
        self.workers.append(worker)
        return worker

    async def run(self, prompt: str, within: float) -> DrillReport:
        queue = self.agent.task_queue
        if await queue_served(self.runtime.client, queue):
            raise DrillError(
                f"a worker already serves task queue {queue!r}: it could take the drill's run; "
                "stop it, or give the drill a LATTICE_TASK_QUEUE_PREFIX of its own"
            )
        workflow_id: str | None = None
        outcome: asyncio.Future[ResultMessage] | None = None
        try:
            async with asyncio.timeout(within):
                first = self.start("first", LATTICE_DRILL_KILL=str(self.point))
                workflow_id = await self.agent.start(prompt, runtime=self.runtime)
                outcome = asyncio.ensure_future(self.runtime.outcome(workflow_id))
                await self._until_killed(first, outcome)
                second = self.start("second")
                result = await self._until_done(second, outcome)
        except BaseException as err:
            if outcome is not None:
                outcome.cancel()
            if workflow_id is not None:  # no run is left for a later worker of the app
                with contextlib.suppress(Exception):
                    await self.runtime.client.get_workflow_handle(workflow_id).terminate(
                        "the crash drill did not complete"
                    )
            if isinstance(err, TimeoutError):
                raise DrillError(
                    f"the run {workflow_id} did not end within {within:g} s of the drill "
                    f"(kill={self.point}); the workers noted: {self.seen()}\n"
                    + "\n".join(w.tail() for w in self.workers)
                ) from None
            raise
        finally:
            for worker in self.workers:
                await worker.stop()
        events = self.events()

        def count(kind: DrillEvent) -> dict[str, int]:
            return dict(Counter(str(e["tool"]) for e in events if e["event"] == kind))

        return DrillReport(
            result=result,
            tool_runs=count(DrillEvent.TOOL_DONE),
            tool_starts=count(DrillEvent.TOOL_START),
            model_requests=sum(e["event"] == DrillEvent.MODEL_REQUEST for e in events),
            kill=str(self.point),
            workflow_id=workflow_id,
            events=events,
        )

    async def _until_killed(self, first: _Worker, outcome: asyncio.Future[ResultMessage]) -> None:
        """Wait for the first worker to die at the kill point."""
        while first.proc.poll() is None:
            if outcome.done():
                result = outcome.result()
                raise DrillError(
                    f"the run ended ({result.subtype}) without reaching kill={self.point}: "
                    f"the worker noted {self.seen()}"
                )
            await asyncio.sleep(0.05)
        killed = any(
            e["event"] == DrillEvent.KILL and e["pid"] == first.proc.pid for e in self.events()
        )
        if not killed:
            raise DrillError(
                f"the drill's first worker exited with code {first.proc.returncode} before "
                f"kill={self.point}; it noted {self.seen()}\n{first.tail()}"
            )

    async def _until_done(
        self, second: _Worker, outcome: asyncio.Future[ResultMessage]
    ) -> ResultMessage:
        """The run's result, which the second worker brings about."""
        while not outcome.done():
            if second.proc.poll() is not None:
                raise DrillError(
                    f"the drill's second worker exited with code {second.proc.returncode} "
                    f"before the run ended; the workers noted {self.seen()}\n{second.tail()}"
                )
            await asyncio.wait([outcome], timeout=0.1)
        return outcome.result()
