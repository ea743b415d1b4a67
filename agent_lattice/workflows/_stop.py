# pyright: strict
"""Whether a query is stopping, and how: set by AgentWorkflow's ``interrupt`` and ``abort``
signals, read by the parts it owns (a tool batch, an approval's wait, its children)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Stop"]


@dataclass
class Stop:
    """``interrupted``: end with ``interrupted`` once the running step is done; ``aborted``:
    end with ``error_abort``, cancelling what runs."""

    interrupted: bool = False
    aborted: bool = False

    @property
    def stopping(self) -> bool:
        return self.interrupted or self.aborted

    @property
    def how(self) -> str:
        """``aborted`` or ``interrupted``, as a result the model reads says it."""
        return "aborted" if self.aborted else "interrupted"
