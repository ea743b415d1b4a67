"""Processes on this host."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this host) and is not a zombie: a killed server
    stays one until the process that started it reaps it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): existing is all we can tell
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
