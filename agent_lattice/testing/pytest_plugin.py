"""pytest fixtures: one embedded Temporal dev server per session, a fresh runtime per test,
and ``crash_drill`` (a durability drill of an app's agent on that server).

Enable with ``pytest_plugins = ["agent_lattice.testing.pytest_plugin"]`` in ``conftest.py``.
Set ``TEMPORAL_ADDRESS`` to run against an existing server instead of starting one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio

from ..client._default import set_default_runtime
from ..client._runtime import Runtime
from ..client._server import DevServer
from ._drill import DrillReport, crash_drill
from ._fake_server import FakeAnthropicServer
from ._helpers import FAST_SETTINGS


@pytest.fixture(scope="session")
def lattice_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Address of the Temporal server the tests use (a dev server started for the session)."""
    if os.environ.get("TEMPORAL_ADDRESS"):
        yield os.environ["TEMPORAL_ADDRESS"]
        return
    home = Path(tmp_path_factory.mktemp("lattice-home"))
    server, _ = DevServer.ensure(home, port=0, ui=False)
    try:
        yield server.address
    finally:
        server.stop()


@pytest.fixture
def task_queue_prefix(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh task-queue namespace for this test (exported for worker subprocesses too)."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("LATTICE_TASK_QUEUE_PREFIX", prefix)
    return prefix


@pytest_asyncio.fixture
async def lattice_runtime(lattice_server: str, task_queue_prefix: str) -> AsyncIterator[Runtime]:
    """A runtime with in-process workers and fast retry settings, default for this test."""
    runtime = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=True)
    set_default_runtime(runtime)
    try:
        yield runtime
    finally:
        set_default_runtime(None)
        await runtime.close()


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropicServer]:
    """A started :class:`FakeAnthropicServer`; script it with ``set_handler``."""
    with FakeAnthropicServer() as server:
        yield server


class CrashDrill(Protocol):
    """:func:`~agent_lattice.testing.crash_drill` with the server given."""

    def __call__(
        self, app: str, agent: str, prompt: str, *, kill: str, **options: Any
    ) -> Awaitable[DrillReport]: ...


@pytest.fixture(name="crash_drill")
def crash_drill_fixture(lattice_server: str, task_queue_prefix: str) -> CrashDrill:
    """:func:`~agent_lattice.testing.crash_drill` on the session's server, its workers on this
    test's own task queues: ``report = await crash_drill("app.py", "agent", "prompt",
    kill="mid_tool:charge")``."""

    async def drill(app: str, agent: str, prompt: str, *, kill: str, **options: Any) -> DrillReport:
        options.setdefault("address", lattice_server)
        return await crash_drill(app, agent, prompt, kill=kill, **options)

    return drill
