"""Inline workers' tasks: how they end with a plain script's event loop, and what they
preload while its first query starts."""

from __future__ import annotations

import asyncio
import atexit
import importlib
import sys
import threading
import time
from typing import Any

from ..worker._sdk_internals import quiet_cancelled_evictions

__all__ = ["WORKER_SHUTDOWN_GRACE_S", "WorkerTask", "preload_provider_sdk"]


quiet_cancelled_evictions()  # a script's end cancels inline workers' eviction jobs


WORKER_SHUTDOWN_GRACE_S = 2.0
# how long the interpreter waits at exit, after a loop's end tore inline workers down, for
# Temporal Core's threads to hand back the polls that teardown cancelled (see _settle)
CORE_SETTLE_S = 0.1
_TORN_DOWN: list[bool] = []


def _settle() -> None:
    """``asyncio.run`` cancels the worker's poll tasks along with the worker, so the worker
    ends before Temporal Core has answered those polls. Core's threads answer them a moment
    later by taking the GIL; one that asks for it once the interpreter is finalizing aborts
    the process (exit 134, "PyGILState_Release: thread state ... must be current", after the
    script printed its output: temporalio/sdk-python#300). Sleeping here, before
    finalization and without the GIL, lets those answers through."""
    if _TORN_DOWN:
        time.sleep(CORE_SETTLE_S)


atexit.register(_settle)


class WorkerTask(asyncio.Task):  # type: ignore[type-arg]
    """Runs an inline worker. A plain script ends with ``asyncio.run`` cancelling every task:
    the worker then shuts down gracefully, but Temporal Core's final step can wait forever on
    work that the same teardown cancelled. A second cancel after a grace period ends the wait
    (the worker treats it as shutdown done), so the script exits."""

    _teardown_scheduled = False

    def cancel(self, msg: Any = None) -> bool:
        if not self.done() and not self._teardown_scheduled:
            self._teardown_scheduled = True
            _TORN_DOWN.append(True)
            self.get_loop().call_later(WORKER_SHUTDOWN_GRACE_S, asyncio.Task.cancel, self)
        return super().cancel(msg)


_PRELOADING: list[threading.Thread] = []


def preload_provider_sdk() -> None:
    """The ``anthropic`` SDK takes seconds to import; an inline worker's first model request
    would wait for it. Import it in the background while the query starts."""
    if not _PRELOADING and "anthropic" not in sys.modules:
        thread = threading.Thread(target=importlib.import_module, args=("anthropic",), daemon=True)
        _PRELOADING.append(thread)
        thread.start()
