"""What the workers of one event loop share (a model HTTP client, MCP connections): held
while any of them runs, released when the last of them stops."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["LoopHolds"]


class LoopHolds:
    """Counts the holders of each loop; ``release(loop)`` runs when its last one lets go."""

    def __init__(self, release: Callable[[asyncio.AbstractEventLoop], Awaitable[None]]) -> None:
        self._release = release
        self._holders: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = (
            weakref.WeakKeyDictionary()
        )

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        self._holders[loop] = self._holders.get(loop, 0) + 1
        try:
            yield
        finally:
            self._holders[loop] -= 1
            if not self._holders[loop]:
                await self._release(loop)
